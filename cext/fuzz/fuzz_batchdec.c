/* libFuzzer target: the Batch message decoder (batchmsg.h, mw_batchdec_feed).
 *
 * Input: [cut u8][stream...]. The stream is fed in two parts split at `cut` (scaled
 * to its length), and again whole to a second decoder: the contract is that the split
 * changes nothing, so both must deliver the same frames and count the same messages.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "batchmsg.h"

struct tally {
    uint64_t frames, bytes, ids;
};

static void count(void *ctx, uint32_t wire_id, const uint8_t *frame, size_t len)
{
    struct tally *t = ctx;
    volatile uint8_t touch = 0;
    for (size_t i = 0; i < len; i++)
        touch ^= frame[i]; /* every delivered byte must be readable */
    (void)touch;
    t->frames++;
    t->bytes += len;
    t->ids = t->ids * 31 + wire_id;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t len = size - 1, cut = len ? (size_t)data[0] * len / 255 : 0;
    const uint8_t *stream = data + 1;
    mw_batchdec *split = mw_batchdec_new(), *whole = mw_batchdec_new();
    if (!split || !whole)
        abort();
    struct tally a = {0}, b = {0};
    mw_batchdec_feed(split, stream, cut, count, &a);
    mw_batchdec_feed(split, stream + cut, len - cut, count, &a);
    mw_batchdec_feed(whole, stream, len, count, &b);
    if (a.frames != b.frames || a.bytes != b.bytes || a.ids != b.ids ||
        mw_batchdec_messages(split) != mw_batchdec_messages(whole) ||
        mw_batchdec_malformed(split) != mw_batchdec_malformed(whole))
        abort();
    mw_batchdec_free(split);
    mw_batchdec_free(whole);
    return 0;
}
