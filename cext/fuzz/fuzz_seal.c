/* libFuzzer target: the record opener (seal.h, mw_seal_open).
 *
 * Input: [mode u8][cut u8][bytes...].
 * - mode even: the bytes are a stream from an attacker who lacks the keys, fed in two
 *   parts split at `cut`. Nothing may be delivered (no forgery), and the opener must
 *   neither crash nor read outside the bytes.
 * - mode odd: the bytes are payloads an honest sealer seals (split into records by
 *   `cut`); the stream, fed in two parts, must deliver exactly those bytes; with bit 1
 *   of mode set, one byte of the sealed stream is flipped first (at a position taken
 *   from the bytes) and then nothing after the flipped record may be delivered and the
 *   opener must not deliver the altered record nor any after it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "seal.h"

static const uint8_t KEY[32] = "meshwire fuzzing key, 32 bytes!";
static const uint8_t TRANSCRIPT[] = "a transcript: both hellos of one preface";

struct sink {
    uint8_t *got;
    size_t len, cap;
};

static void collect(void *ctx, const uint8_t *payload, size_t len)
{
    struct sink *s = ctx;
    if (!len)
        return;
    if (s->len + len > s->cap) {
        s->cap = (s->len + len) * 2 + 64;
        s->got = realloc(s->got, s->cap);
        if (!s->got)
            abort();
    }
    memcpy(s->got + s->len, payload, len);
    s->len += len;
}

static mw_seal *seal(int opener, int encrypt)
{
    mw_seal *s = mw_seal_new(KEY, sizeof(KEY), TRANSCRIPT, sizeof(TRANSCRIPT), opener, encrypt);
    if (!s)
        abort();
    return s;
}

static void feed(mw_seal *s, uint8_t *stream, size_t len, size_t cut, struct sink *out, int *rv)
{
    *rv = mw_seal_open(s, stream, cut, collect, out);
    if (*rv == 0)
        *rv = mw_seal_open(s, stream + cut, len - cut, collect, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int mode = data[0], encrypt = (data[0] >> 2) & 1;
    size_t len = size - 2;
    uint8_t *bytes = malloc(len ? len : 1);
    if (!bytes)
        abort();
    memcpy(bytes, data + 2, len);
    struct sink out = {0};
    int rv;
    mw_seal *opener = seal(0, encrypt);
    if (!(mode & 1)) {
        feed(opener, bytes, len, len ? (size_t)data[1] * len / 255 : 0, &out, &rv);
        if (out.len)
            abort(); /* a record authenticated without the keys */
    } else {
        /* Two records: the payload split at `cut`. */
        size_t cut = len ? (size_t)data[1] * len / 255 : 0;
        mw_seal *sealer = seal(1, encrypt);
        size_t sealed_len = mw_seal_size(cut) + mw_seal_size(len - cut);
        uint8_t *sealed = malloc(sealed_len);
        const uint8_t *first[1] = {bytes}, *second[1] = {bytes + cut};
        size_t first_len[1] = {cut}, second_len[1] = {len - cut};
        size_t n = mw_seal_parts(sealer, first, first_len, 1, sealed);
        if (!sealed || !n)
            abort();
        size_t m = mw_seal_parts(sealer, second, second_len, 1, sealed + n);
        if (!m || n + m != sealed_len)
            abort();
        size_t flip = sealed_len;
        if (mode & 2) {
            flip = (len ? bytes[0] * 131u + bytes[len - 1] : 7u) % sealed_len;
            sealed[flip] ^= 0x40;
        }
        feed(opener, sealed, sealed_len, (size_t)data[1] * sealed_len / 255, &out, &rv);
        if (flip == sealed_len) {
            if (rv != 0 || out.len != len || (len && memcmp(out.got, bytes, len) != 0))
                abort(); /* an honest stream not delivered as sealed */
        } else {
            /* Only the first record may pass, and only if the flip was after it. The
             * opener fails, or (a flipped length grown) still waits for the rest. */
            if (out.len && (flip < n || out.len != cut))
                abort();
        }
        free(sealed);
        mw_seal_free(sealer);
    }
    mw_seal_free(opener);
    free(out.got);
    free(bytes);
    return 0;
}
