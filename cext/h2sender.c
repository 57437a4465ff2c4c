/* The client side of a `Wire/Frames` call: see h2wire.h.
 *
 * The call's request body is a data source that nghttp2 pulls from. A message is
 * made in the reader's buffer (its header written into the headroom before the
 * frames) and handed out as DATA frames without a copy (NGHTTP2_DATA_FLAG_NO_COPY):
 * each frame is written straight from the buffer with its 9-byte header in one
 * sendmsg. The buffer is refilled only once every byte of the message was written
 * or kept as pending, so a message is never torn; between messages the source is
 * DEFERRED and resumed when the TAPs yield the next one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchmsg.h"
#include "h2io.h"
#include "h2wire.h"

/* Messages made per mw_sender_on_taps call at most, so one busy stream cannot keep
 * the event loop from the worker's other sockets. */
#define ROUNDS_PER_CALL 8
#define RECEIVE_BUF 16384

struct mw_sender {
    mw_h2io io; /* first: the nghttp2 callbacks' user_data */
    nghttp2_session *session;
    int32_t stream_id;
    mw_table *table;
    mw_reader *reader;
    /* The message in flight: msg[0, len) in the reader's buffer. planned bytes of it
     * went into DATA frames so far, sent of those were written or kept pending. */
    const uint8_t *msg;
    size_t len, planned, sent;
    int deferred;  /* the data source answered DEFERRED: resume it for the next message */
    int finishing; /* end the call (END_STREAM) once no message is in flight */
    int closed;    /* the call is over, as the receiver's trailers or a reset said */
    uint64_t batches;
    char status[12];     /* grpc-status of the answer ("" until it came) */
    char message[96];    /* its grpc-message */
    uint32_t reset_code; /* the HTTP/2 error code the call was closed with */
    char error[256];
    uint8_t buf[RECEIVE_BUF];
};

static ssize_t read_body(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)buf;
    (void)source;
    mw_sender *s = user_data;
    if (s->planned < s->len) {
        size_t n = s->len - s->planned < length ? s->len - s->planned : length;
        s->planned += n;
        *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
        return (ssize_t)n;
    }
    if (s->finishing) {
        *flags |= NGHTTP2_DATA_FLAG_EOF;
        return 0;
    }
    s->deferred = 1;
    return NGHTTP2_ERR_DEFERRED;
}

static int send_frame(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *head,
                      size_t length, nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)frame; /* no padding: we set no select_padding_callback */
    (void)source;
    mw_sender *s = user_data;
    int rv = mw_h2io_send_frame(&s->io, head, s->msg + s->sent, length);
    if (rv == 0) {
        s->sent += length;
        if (s->sent == s->len)
            s->batches++;
    }
    return rv;
}

/* DATA frames as large as the receiver allows (ours: 16 MiB, so a message is one). */
static ssize_t frame_length(nghttp2_session *session, uint8_t type, int32_t stream_id,
                            int32_t session_window, int32_t stream_window, uint32_t max_frame,
                            void *user_data)
{
    (void)session;
    (void)type;
    (void)stream_id;
    (void)session_window;
    (void)stream_window;
    mw_sender *s = user_data;
    size_t left = s->len - s->planned;
    if (left == 0)
        left = 1;
    return (ssize_t)(left < max_frame ? left : max_frame);
}

static void copy_value(char *to, size_t cap, const uint8_t *value, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(to, value, n);
    to[n] = 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    (void)session;
    (void)flags;
    mw_sender *s = user_data;
    if (frame->hd.stream_id != s->stream_id)
        return 0;
    if (mw_h2_is(name, namelen, "grpc-status"))
        copy_value(s->status, sizeof(s->status), value, valuelen);
    else if (mw_h2_is(name, namelen, "grpc-message"))
        copy_value(s->message, sizeof(s->message), value, valuelen);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user_data)
{
    (void)session;
    mw_sender *s = user_data;
    if (stream_id == s->stream_id) {
        s->closed = 1;
        s->reset_code = error_code;
    }
    return 0;
}

mw_sender *mw_sender_new(int fd, mw_table *table, mw_reader *reader, const char *authority,
                         const char *ns)
{
    mw_sender *s = calloc(1, sizeof(*s));
    nghttp2_session_callbacks *cb;
    if (!s || nghttp2_session_callbacks_new(&cb) != 0) {
        free(s);
        return NULL;
    }
    mw_h2io_init(&s->io, fd);
    s->table = table;
    s->reader = reader;
    nghttp2_session_callbacks_set_send_callback(cb, mw_h2io_send);
    nghttp2_session_callbacks_set_send_data_callback(cb, send_frame);
    nghttp2_session_callbacks_set_data_source_read_length_callback(cb, frame_length);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    int rv = nghttp2_session_client_new(&s->session, cb, s);
    nghttp2_session_callbacks_del(cb);
    if (rv != 0) {
        free(s);
        return NULL;
    }
    nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
    nghttp2_nv request[] = {
        mw_h2_header(":method", "POST"),
        mw_h2_header(":scheme", "http"),
        mw_h2_header(":path", MW_WIRE_PATH),
        mw_h2_header(":authority", authority),
        mw_h2_header("content-type", "application/grpc"),
        mw_h2_header("te", "trailers"),
        mw_h2_header("user-agent", "meshwire-worker"),
        mw_h2_header(MW_NAMESPACE_HEADER, ns),
    };
    nghttp2_data_provider body = {.source = {.ptr = s}, .read_callback = read_body};
    if (nghttp2_submit_settings(s->session, NGHTTP2_FLAG_NONE, settings, 1) != 0 ||
        (s->stream_id = nghttp2_submit_request(s->session, NULL, request,
                                               sizeof(request) / sizeof(*request), &body, s)) < 0) {
        mw_sender_free(s);
        return NULL;
    }
    return s;
}

void mw_sender_free(mw_sender *s)
{
    if (!s)
        return;
    nghttp2_session_del(s->session);
    mw_h2io_release(&s->io);
    free(s);
}

static int in_flight(const mw_sender *s)
{
    return s->sent < s->len;
}

/* What to wait for, given the bits of the flush just done. */
static int bits_after_flush(mw_sender *s, int bits)
{
    if (mw_h2io_over(&s->io, s->session) || (s->closed && !(bits & MW_IO_WRITE)))
        return MW_IO_DONE;
    if (!in_flight(s) && !s->finishing && !s->closed)
        bits |= MW_IO_TAPS;
    return bits;
}

static int next_step(mw_sender *s)
{
    return bits_after_flush(s, mw_h2io_flush(&s->io, s->session));
}

int mw_sender_on_readable(mw_sender *s)
{
    mw_h2io_receive(&s->io, s->session, s->buf, sizeof(s->buf), sizeof(s->buf) * 4);
    return next_step(s);
}

int mw_sender_on_writable(mw_sender *s)
{
    return next_step(s);
}

static void resume(mw_sender *s)
{
    if (s->deferred) {
        s->deferred = 0;
        nghttp2_session_resume_data(s->session, s->stream_id);
    }
}

int mw_sender_on_taps(mw_sender *s)
{
    mw_reader *r = s->reader;
    int flushed = -1; /* the bits of the last flush, if a message was sent */
    for (int round = 0; round < ROUNDS_PER_CALL; round++) {
        if (in_flight(s) || s->finishing || s->closed || s->io.failed)
            break;
        mw_batch_read(s->table, r);
        if (!r->frames)
            break;
        uint8_t head_bytes[MW_BATCHMSG_HEADROOM];
        size_t head = mw_batchmsg_header(head_bytes, r->bytes);
        uint8_t *msg = r->buf - head;
        memcpy(msg, head_bytes, head);
        s->msg = msg;
        s->len = head + r->bytes;
        s->planned = s->sent = 0;
        resume(s);
        flushed = mw_h2io_flush(&s->io, s->session);
        if (flushed & MW_IO_WRITE || r->drained)
            break;
    }
    return flushed < 0 ? next_step(s) : bits_after_flush(s, flushed);
}

int mw_sender_finish(mw_sender *s)
{
    s->finishing = 1;
    resume(s);
    return next_step(s);
}

int mw_sender_seal(mw_sender *s, const uint8_t *key, size_t key_len, const uint8_t *transcript,
                   size_t transcript_len, int encrypt)
{
    mw_seal *seal = mw_seal_new(key, key_len, transcript, transcript_len, 1, encrypt);
    if (!seal)
        return -1;
    mw_h2io_set_seal(&s->io, seal);
    return 0;
}

uint64_t mw_sender_batches(const mw_sender *s)
{
    return s->batches;
}

const char *mw_sender_error(mw_sender *s)
{
    if (s->io.failed)
        return s->io.error;
    if (s->closed && strcmp(s->status, "0") != 0) {
        if (s->status[0])
            snprintf(s->error, sizeof(s->error), "the receiver answered grpc-status %s: %s",
                     s->status, s->message);
        else
            snprintf(s->error, sizeof(s->error), "the call was reset (HTTP/2 error %s)",
                     nghttp2_http2_strerror(s->reset_code));
        return s->error;
    }
    if (s->io.closed)
        return "the receiver closed the connection";
    return "";
}
