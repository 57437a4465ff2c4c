/* libFuzzer target: the emulator's parameter path and state machine (emul.h).
 *
 * Input: [seed u64][max_frames u16][max_bytes u32][params][op...]. params is
 * mw_emul_params as 40 raw bytes (any values: no precondition is assumed of them),
 * and each op is one byte, its low two bits the operation:
 *   0 push: [len u16][skip u8][dt u16] a frame of len % 2048 bytes (the input's own
 *     bytes, cyclically), sent dt microseconds after the previous operation;
 *   1 pop:  [cap u16][dt u16] one frame due then, into a buffer of cap bytes;
 *   2 set:  [params] new parameters, frames queued keep their release times;
 *   3 wait: [dt u32] time passes, in microseconds.
 * At the end every frame is popped (at the last instant there is).
 *
 * The contract checked, beyond the sanitizers': the queue never holds more than
 * max_frames; a popped frame is never longer than the buffer nor than any frame
 * pushed; every frame pushed is accounted for (passed, queued, dropped or counted
 * as overflow, a duplicate as one more); and once drained the queue is empty.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emul.h"

enum { FRAME_MAX = 2048, POP_BUF = 4096, PARAMS = sizeof(mw_emul_params) };

struct reader {
    const uint8_t *data;
    size_t size, at;
};

static uint64_t take(struct reader *r, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | (r->at < r->size ? r->data[r->at++] : 0);
    return v;
}

static void take_params(struct reader *r, mw_emul_params *p)
{
    uint8_t raw[PARAMS] = {0};
    for (size_t i = 0; i < PARAMS; i++)
        raw[i] = (uint8_t)take(r, 1);
    memcpy(p, raw, PARAMS);
}

static void check_accounts(const mw_emul *e)
{
    mw_emul_counters c;
    mw_emul_read_counters(e, &c);
    uint64_t queued = mw_emul_queued(e), copies = c.frames + c.duplicated;
    /* Each copy passed, is queued, was dropped or counted as overflow; a duplicate
     * that found the queue full is one overflow more than the copies it made. */
    if (c.passed + queued + c.dropped > copies ||
        c.passed + queued + c.dropped + c.overflow < copies)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct reader r = {data, size, 0};
    uint64_t seed = take(&r, 8);
    size_t max_frames = (size_t)take(&r, 2) + 1, max_bytes = (size_t)take(&r, 4);
    mw_emul_params params;
    take_params(&r, &params);
    mw_emul *e = mw_emul_new(seed, max_frames, max_bytes);
    if (!e)
        abort();
    mw_emul_set(e, &params);
    static uint8_t frame[FRAME_MAX], buf[POP_BUF];
    size_t longest = 0;
    uint64_t now = 1;
    while (r.at < r.size) {
        switch (take(&r, 1) & 3) {
        case 0: {
            size_t len = (size_t)take(&r, 2) % FRAME_MAX, skip = (size_t)take(&r, 1);
            now += take(&r, 2) * 1000;
            for (size_t i = 0; i < len; i++)
                frame[i] = size ? data[(r.at + i) % size] : 0;
            mw_emul_push(e, now, frame, len, skip);
            longest = len > longest ? len : longest;
            break;
        }
        case 1: {
            size_t cap = (size_t)take(&r, 2) % (POP_BUF + 1);
            now += take(&r, 2) * 1000;
            size_t got = mw_emul_pop(e, now, buf, cap);
            if (got > cap || got > longest)
                abort();
            break;
        }
        case 2:
            take_params(&r, &params);
            mw_emul_set(e, &params);
            break;
        default:
            now += take(&r, 4) * 1000;
        }
        if (mw_emul_queued(e) > max_frames)
            abort();
        check_accounts(e);
    }
    while (mw_emul_pop(e, UINT64_MAX, buf, POP_BUF))
        ;
    if (mw_emul_queued(e) != 0 || mw_emul_next(e) != UINT64_MAX)
        abort();
    check_accounts(e);
    mw_emul_free(e);
    return 0;
}
