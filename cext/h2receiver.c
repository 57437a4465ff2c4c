/* The server side of the Wire service on one connection: see h2wire.h.
 *
 * Every `Wire/Frames` call on the connection gets its own Batch decoder; DATA is
 * decoded as it arrives (nothing waits for a whole message) and each frame is
 * written to its wire's TAP if that wire belongs to the call's namespace. When the
 * caller ends its side, the call is answered with a FramesSummary and grpc-status 0.
 * A call to another method, with another content type or a compressed encoding is
 * answered at once with an error status and its data is ignored.
 *
 * The receiver never pushes back through HTTP/2 flow control: it announces the
 * largest windows, takes every byte as it comes and drops what a full TAP refuses,
 * as a cable would. TCP's own window still paces a sender that outruns the worker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchmsg.h"
#include "h2io.h"
#include "h2wire.h"

#define NAMESPACE_MAX 253
#define PEER_MAX 255
#define WINDOW_MAX 0x7FFFFFFF
#define FRAME_SIZE_MAX 0xFFFFFF
#define STREAMS_MAX 128
#define RECEIVE_BUF (512 * 1024)
/* Bytes read per mw_receiver_on_readable call at most, so one busy connection cannot
 * keep the event loop from the worker's other sockets. */
#define RECEIVE_BUDGET (4 * 1024 * 1024)
/* gRPC status codes (grpc/status.h). */
#define STATUS_UNIMPLEMENTED "12"
#define STATUS_INVALID_ARGUMENT "3"

struct call {
    mw_receiver *conn;
    struct call *prev, *next; /* the connection's open calls */
    int32_t id;
    int path_ok, grpc_type, identity;
    int refused, accepted, answered;
    uint32_t tag; /* 0 until a wire of the namespace exists */
    char ns[NAMESPACE_MAX + 1];
    size_t ns_len;
    mw_batchdec *dec;
    uint8_t reply[16]; /* the answer's gRPC message: prefix and FramesSummary */
    size_t reply_len, reply_off;
};

struct mw_receiver {
    mw_h2io io; /* first: the nghttp2 callbacks' user_data */
    nghttp2_session *session;
    mw_table *table;
    mw_rx_stats *stats;
    struct call *calls;
    uint8_t *buf;
    char peer[PEER_MAX + 1]; /* the node the connection authenticated as; "" if none */
    size_t peer_len;
};

static int starts_with(const uint8_t *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

static void deliver(void *ctx, uint32_t wire_id, const uint8_t *frame, size_t len)
{
    struct call *c = ctx;
    mw_receiver *r = c->conn;
    if (!c->tag) {
        char name[NAMESPACE_MAX + 1 + PEER_MAX];
        long n = mw_receiver_tag_name(c->ns, c->ns_len, r->peer, r->peer_len, name, sizeof(name));
        c->tag = n >= 0 ? mw_table_tag(r->table, name, (size_t)n, 0) : 0;
    }
    mw_table_deliver(r->table, c->tag, wire_id, frame, len);
}

static void refuse(struct call *c, const char *status, const char *message)
{
    nghttp2_nv answer[] = {
        mw_h2_header(":status", "200"),
        mw_h2_header("content-type", "application/grpc"),
        mw_h2_header("grpc-status", status),
        mw_h2_header("grpc-message", message),
    };
    c->refused = 1;
    c->conn->stats->refused++;
    nghttp2_submit_response(c->conn->session, c->id, answer, sizeof(answer) / sizeof(*answer),
                            NULL);
}

static void accept_call(struct call *c)
{
    if (!c->path_ok)
        refuse(c, STATUS_UNIMPLEMENTED, "meshwire workers serve " MW_WIRE_PATH " only");
    else if (!c->grpc_type)
        refuse(c, STATUS_INVALID_ARGUMENT, "content-type must be application/grpc");
    else if (!c->identity)
        refuse(c, STATUS_UNIMPLEMENTED, "no message compression: grpc-encoding must be identity");
    else if (!(c->dec = mw_batchdec_new()))
        nghttp2_submit_rst_stream(c->conn->session, NGHTTP2_FLAG_NONE, c->id,
                                  NGHTTP2_INTERNAL_ERROR);
    else {
        c->accepted = 1;
        c->conn->stats->streams++;
    }
}

static ssize_t read_reply(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                          uint32_t *flags, nghttp2_data_source *source, void *user_data)
{
    (void)user_data;
    struct call *c = source->ptr;
    size_t n = c->reply_len - c->reply_off < length ? c->reply_len - c->reply_off : length;
    memcpy(buf, c->reply + c->reply_off, n);
    c->reply_off += n;
    if (c->reply_off == c->reply_len) {
        nghttp2_nv trailers[] = {mw_h2_header("grpc-status", "0")};
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(session, stream_id, trailers, 1) != 0)
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* FramesSummary{batches} in a gRPC message: the messages this call delivered. */
static void answer(struct call *c)
{
    uint64_t batches = mw_batchdec_messages(c->dec);
    size_t body = 0; /* proto3 leaves a zero count out */
    if (batches) {
        c->reply[5] = 0x08; /* field 1, varint */
        body = 1 + mw_varint(c->reply + 6, batches);
    }
    mw_grpc_prefix(c->reply, (uint32_t)body);
    c->reply_len = 5 + body;
    c->answered = 1;
    nghttp2_nv head[] = {mw_h2_header(":status", "200"),
                         mw_h2_header("content-type", "application/grpc")};
    nghttp2_data_provider reply = {.source = {.ptr = c}, .read_callback = read_reply};
    nghttp2_submit_response(c->conn->session, c->id, head, 2, &reply);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    mw_receiver *r = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct call *c = calloc(1, sizeof(*c));
    if (!c)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the call is reset, the connection lives */
    c->conn = r;
    c->id = frame->hd.stream_id;
    c->identity = 1;
    c->next = r->calls;
    if (r->calls)
        r->calls->prev = c;
    r->calls = c;
    nghttp2_session_set_stream_user_data(session, c->id, c);
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user_data)
{
    (void)flags;
    (void)user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* the caller's trailers, if any, say nothing we need */
    struct call *c = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!c)
        return 0;
    if (mw_h2_is(name, namelen, ":path"))
        c->path_ok = mw_h2_is(value, valuelen, MW_WIRE_PATH);
    else if (mw_h2_is(name, namelen, "content-type"))
        c->grpc_type = mw_h2_is(value, valuelen, "application/grpc") ||
                       starts_with(value, valuelen, "application/grpc+") ||
                       starts_with(value, valuelen, "application/grpc;");
    else if (mw_h2_is(name, namelen, "grpc-encoding"))
        c->identity = mw_h2_is(value, valuelen, "identity");
    else if (mw_h2_is(name, namelen, MW_NAMESPACE_HEADER)) {
        c->ns_len = valuelen < NAMESPACE_MAX ? valuelen : NAMESPACE_MAX;
        memcpy(c->ns, value, c->ns_len);
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    (void)user_data;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    struct call *c = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (!c)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        accept_call(c);
    if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) && c->accepted && !c->answered)
        answer(c);
    return 0;
}

static int on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                   size_t len, void *user_data)
{
    (void)flags;
    mw_receiver *r = user_data;
    struct call *c = nghttp2_session_get_stream_user_data(session, stream_id);
    if (!c || !c->accepted)
        return 0;
    uint64_t before = mw_batchdec_malformed(c->dec);
    mw_batchdec_feed(c->dec, data, len, deliver, c);
    r->stats->malformed += mw_batchdec_malformed(c->dec) - before;
    return 0;
}

static void forget(mw_receiver *r, struct call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        r->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->accepted)
        r->stats->streams--;
    nghttp2_session_set_stream_user_data(r->session, c->id, NULL);
    mw_batchdec_free(c->dec);
    free(c);
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user_data)
{
    (void)error_code;
    mw_receiver *r = user_data;
    struct call *c = nghttp2_session_get_stream_user_data(session, stream_id);
    if (c)
        forget(r, c);
    return 0;
}

mw_receiver *mw_receiver_new(int fd, mw_table *table, mw_rx_stats *stats)
{
    mw_receiver *r = calloc(1, sizeof(*r));
    nghttp2_session_callbacks *cb;
    if (!r || nghttp2_session_callbacks_new(&cb) != 0) {
        free(r);
        return NULL;
    }
    mw_h2io_init(&r->io, fd);
    r->table = table;
    r->stats = stats;
    nghttp2_session_callbacks_set_send_callback(cb, mw_h2io_send);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    int rv = nghttp2_session_server_new(&r->session, cb, r);
    nghttp2_session_callbacks_del(cb);
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, STREAMS_MAX},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, WINDOW_MAX},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, FRAME_SIZE_MAX},
    };
    if (rv != 0) {
        free(r);
        return NULL;
    }
    if (!(r->buf = malloc(RECEIVE_BUF)) ||
        nghttp2_submit_settings(r->session, NGHTTP2_FLAG_NONE, settings, 3) != 0 ||
        nghttp2_session_set_local_window_size(r->session, NGHTTP2_FLAG_NONE, 0, WINDOW_MAX) != 0) {
        mw_receiver_free(r);
        return NULL;
    }
    return r;
}

void mw_receiver_free(mw_receiver *r)
{
    if (!r)
        return;
    /* Deleting the session closes no call through the callbacks. */
    while (r->calls)
        forget(r, r->calls);
    nghttp2_session_del(r->session);
    mw_h2io_release(&r->io);
    free(r->buf);
    free(r);
}

static int next_step(mw_receiver *r)
{
    int bits = mw_h2io_flush(&r->io, r->session);
    return mw_h2io_over(&r->io, r->session) ? MW_IO_DONE : bits;
}

int mw_receiver_on_readable(mw_receiver *r)
{
    mw_h2io_receive(&r->io, r->session, r->buf, RECEIVE_BUF, RECEIVE_BUDGET);
    return next_step(r);
}

int mw_receiver_seal(mw_receiver *r, const uint8_t *key, size_t key_len, const uint8_t *transcript,
                     size_t transcript_len, int encrypt)
{
    mw_seal *seal = mw_seal_new(key, key_len, transcript, transcript_len, 0, encrypt);
    if (!seal)
        return -1;
    mw_h2io_set_seal(&r->io, seal);
    return 0;
}

int mw_receiver_on_writable(mw_receiver *r)
{
    return next_step(r);
}

void mw_receiver_bind(mw_receiver *r, const char *peer)
{
    size_t n = strlen(peer);
    r->peer_len = n < PEER_MAX ? n : PEER_MAX;
    memcpy(r->peer, peer, r->peer_len);
    r->peer[r->peer_len] = 0;
}

long mw_receiver_tag_name(const char *ns, size_t ns_len, const char *peer, size_t peer_len,
                          char *out, size_t cap)
{
    size_t n = ns_len + (peer_len ? 1 + peer_len : 0);
    if (n > cap)
        return -1;
    memcpy(out, ns, ns_len);
    if (peer_len) {
        out[ns_len] = 0;
        memcpy(out + ns_len + 1, peer, peer_len);
    }
    return (long)n;
}

int mw_receiver_shut(mw_receiver *r)
{
    nghttp2_session_terminate_session(r->session, NGHTTP2_NO_ERROR);
    return next_step(r);
}

int mw_receiver_forged(const mw_receiver *r)
{
    return r->io.forged;
}

const char *mw_receiver_error(const mw_receiver *r)
{
    return r->io.failed ? r->io.error : "";
}
