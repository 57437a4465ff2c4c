/* Batch messages in gRPC framing: see batchmsg.h for the format and the contracts. */
#include "batchmsg.h"

#include <stdlib.h>
#include <string.h>

#define PREFIX_LEN 5
#define FRAME_HEAD_LEN 6
#define FRAME_MAX 0xFFFFu
#define FRAMES_FIELD 1u
/* A key or a length has at most 5 varint bytes (35 bits, more than any we accept);
 * an unknown varint field may have the 10 bytes of a 64-bit value. */
#define KEY_MAX_SHIFT 35
#define VALUE_MAX_SHIFT 70

enum state {
    S_PREFIX,      /* the 5-byte gRPC prefix of the next message */
    S_KEY,         /* a protobuf field key (varint) */
    S_LENGTH,      /* the length (varint) of a length-delimited field */
    S_FRAME_HEAD,  /* a packed frame's 6-byte header, inside the frames field */
    S_FRAME_BODY,  /* that frame's bytes */
    S_SKIP_VARINT, /* the value of an unknown varint field */
    S_SKIP_BYTES,  /* the bytes of an unknown fixed or length-delimited field */
    S_DISCARD,     /* the rest of a malformed message */
};

struct mw_batchdec {
    enum state state;
    /* The message being decoded: bytes of it not consumed yet. Every state but
     * S_PREFIX consumes message bytes only, so a fault never crosses into the next. */
    uint64_t msg_left;
    /* Inside a frames field: its bytes not consumed yet (frame heads and bodies). */
    uint64_t field_left;
    uint64_t skip_left;
    uint8_t head[FRAME_HEAD_LEN]; /* the prefix or a frame header, as it arrives */
    size_t head_have;             /* 0 whenever no prefix or frame header is partly read */
    uint64_t varint;
    unsigned shift;
    int length_is_frames; /* S_LENGTH: the frames field's, not an unknown field's */
    uint32_t frame_id;
    size_t frame_len;
    size_t frame_have;  /* bytes of a split frame copied into frame_buf so far */
    uint8_t *frame_buf; /* FRAME_MAX bytes, allocated on the first split frame */
    uint64_t messages;
    uint64_t malformed;
};

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

size_t mw_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    do {
        out[n] = (uint8_t)(v & 0x7F);
        v >>= 7;
        if (v)
            out[n] |= 0x80;
        n++;
    } while (v);
    return n;
}

void mw_grpc_prefix(uint8_t *out, uint32_t msg_len)
{
    out[0] = 0; /* not compressed */
    out[1] = (uint8_t)(msg_len >> 24);
    out[2] = (uint8_t)(msg_len >> 16);
    out[3] = (uint8_t)(msg_len >> 8);
    out[4] = (uint8_t)msg_len;
}

size_t mw_batchmsg_header(uint8_t *out, size_t frames_len)
{
    out[PREFIX_LEN] = (FRAMES_FIELD << 3) | 2;
    size_t n = mw_varint(out + PREFIX_LEN + 1, frames_len);
    mw_grpc_prefix(out, (uint32_t)(1 + n + frames_len));
    return PREFIX_LEN + 1 + n;
}

mw_batchdec *mw_batchdec_new(void)
{
    return calloc(1, sizeof(mw_batchdec)); /* state S_PREFIX, nothing counted */
}

void mw_batchdec_free(mw_batchdec *d)
{
    if (!d)
        return;
    free(d->frame_buf);
    free(d);
}

uint64_t mw_batchdec_messages(const mw_batchdec *d)
{
    return d->messages;
}

uint64_t mw_batchdec_malformed(const mw_batchdec *d)
{
    return d->malformed;
}

static void fault(mw_batchdec *d)
{
    d->malformed++;
    d->state = d->msg_left ? S_DISCARD : S_PREFIX;
}

static void start_varint(mw_batchdec *d, enum state state)
{
    d->state = state;
    d->varint = 0;
    d->shift = 0;
}

/* After a field: the message is complete, or the next field's key follows. */
static void end_field(mw_batchdec *d)
{
    if (d->msg_left == 0) {
        d->messages++;
        d->state = S_PREFIX;
    } else {
        start_varint(d, S_KEY);
    }
}

static void end_frame(mw_batchdec *d)
{
    if (d->field_left == 0) {
        end_field(d);
    } else {
        d->state = S_FRAME_HEAD;
    }
}

static void skip(mw_batchdec *d, uint64_t n)
{
    if (n > d->msg_left) {
        fault(d);
    } else if (n == 0) {
        end_field(d);
    } else {
        d->skip_left = n;
        d->state = S_SKIP_BYTES;
    }
}

static void on_key(mw_batchdec *d, uint64_t key)
{
    uint64_t field = key >> 3;
    if (field == 0) {
        fault(d);
        return;
    }
    switch (key & 7) {
    case 0:
        start_varint(d, S_SKIP_VARINT);
        break;
    case 1:
        skip(d, 8);
        break;
    case 2:
        start_varint(d, S_LENGTH);
        d->length_is_frames = field == FRAMES_FIELD;
        break;
    case 5:
        skip(d, 4);
        break;
    default: /* groups (3, 4) and the undefined 6, 7 */
        fault(d);
        break;
    }
}

static void on_length(mw_batchdec *d, uint64_t length)
{
    if (!d->length_is_frames) {
        skip(d, length);
    } else if (length > d->msg_left) {
        fault(d);
    } else {
        d->field_left = length;
        end_frame(d);
    }
}

/* Consumes one byte of a varint; returns 1 when the varint is complete. */
static int varint_byte(mw_batchdec *d, uint8_t byte)
{
    d->msg_left--;
    if (d->shift < 64)
        d->varint |= (uint64_t)(byte & 0x7F) << d->shift;
    d->shift += 7;
    if (!(byte & 0x80))
        return 1;
    unsigned most = d->state == S_SKIP_VARINT ? VALUE_MAX_SHIFT : KEY_MAX_SHIFT;
    if (d->shift >= most || d->msg_left == 0)
        fault(d);
    return 0;
}

/* Moves k bytes of the frames field forward. */
static void consume_frame_bytes(mw_batchdec *d, const uint8_t **p, size_t *n, size_t k)
{
    *p += k;
    *n -= k;
    d->msg_left -= k;
    d->field_left -= k;
}

static size_t min_size(size_t a, uint64_t b)
{
    return b < a ? (size_t)b : a;
}

int mw_batchdec_feed(mw_batchdec *d, const uint8_t *p, size_t n, mw_frame_sink sink, void *ctx)
{
    int result = 0;
    for (;;) {
        switch (d->state) {
        case S_PREFIX: {
            size_t k = min_size(n, PREFIX_LEN - d->head_have);
            memcpy(d->head + d->head_have, p, k);
            d->head_have += k;
            p += k;
            n -= k;
            if (d->head_have < PREFIX_LEN)
                return result;
            d->head_have = 0;
            d->msg_left = be32(d->head + 1);
            if (d->head[0] != 0) /* compressed: we never accept an encoding */
                fault(d);
            else if (d->msg_left == 0)
                d->messages++; /* an empty Batch: no frames */
            else
                start_varint(d, S_KEY);
            break;
        }
        case S_KEY:
        case S_LENGTH:
        case S_SKIP_VARINT: {
            if (d->msg_left == 0) { /* the message ends before the varint */
                fault(d);
                break;
            }
            if (n == 0)
                return result;
            enum state at = d->state;
            n--;
            if (!varint_byte(d, *p++))
                break;
            if (at == S_KEY)
                on_key(d, d->varint);
            else if (at == S_LENGTH)
                on_length(d, d->varint);
            else
                end_field(d);
            break;
        }
        case S_FRAME_HEAD: {
            if (d->head_have == 0 && d->field_left < FRAME_HEAD_LEN) {
                fault(d);
                break;
            }
            size_t k = min_size(n, FRAME_HEAD_LEN - d->head_have);
            memcpy(d->head + d->head_have, p, k);
            d->head_have += k;
            consume_frame_bytes(d, &p, &n, k);
            if (d->head_have < FRAME_HEAD_LEN)
                return result;
            d->head_have = 0;
            d->frame_id = be32(d->head);
            d->frame_len = ((size_t)d->head[4] << 8) | d->head[5];
            d->frame_have = 0;
            if (d->frame_len > d->field_left) {
                fault(d);
            } else if (d->frame_len == 0) {
                sink(ctx, d->frame_id, p, 0);
                end_frame(d);
            } else {
                d->state = S_FRAME_BODY;
            }
            break;
        }
        case S_FRAME_BODY: {
            if (d->frame_have == 0 && n >= d->frame_len) { /* whole in this chunk: no copy */
                sink(ctx, d->frame_id, p, d->frame_len);
                consume_frame_bytes(d, &p, &n, d->frame_len);
                end_frame(d);
                break;
            }
            if (n == 0)
                return result;
            if (!d->frame_buf && !(d->frame_buf = malloc(FRAME_MAX))) {
                result = -1;
                fault(d);
                break;
            }
            size_t k = min_size(n, d->frame_len - d->frame_have);
            memcpy(d->frame_buf + d->frame_have, p, k);
            d->frame_have += k;
            consume_frame_bytes(d, &p, &n, k);
            if (d->frame_have < d->frame_len)
                return result;
            sink(ctx, d->frame_id, d->frame_buf, d->frame_len);
            end_frame(d);
            break;
        }
        case S_SKIP_BYTES: {
            size_t k = min_size(n, d->skip_left);
            p += k;
            n -= k;
            d->msg_left -= k;
            d->skip_left -= k;
            if (d->skip_left)
                return result;
            end_field(d);
            break;
        }
        case S_DISCARD: {
            size_t k = min_size(n, d->msg_left);
            p += k;
            n -= k;
            d->msg_left -= k;
            if (d->msg_left)
                return result;
            d->state = S_PREFIX;
            break;
        }
        }
    }
}
