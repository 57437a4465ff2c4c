/* The socket side of the Wire transport: see h2io.h. */
#include "h2io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "h2wire.h"

void mw_h2io_init(mw_h2io *io, int fd)
{
    memset(io, 0, sizeof(*io));
    io->fd = fd;
}

void mw_h2io_release(mw_h2io *io)
{
    free(io->pending);
    io->pending = NULL;
    mw_seal_free(io->seal);
    io->seal = NULL;
    io->pending_cap = io->pending_len = io->pending_off = 0;
}

void mw_h2io_fail(mw_h2io *io, const char *what, const char *why)
{
    if (io->failed)
        return;
    io->failed = 1;
    snprintf(io->error, sizeof(io->error), "%s: %s", what, why);
}

static int keep(mw_h2io *io, const uint8_t *data, size_t len)
{
    if (io->pending_len + len > io->pending_cap) {
        size_t cap = io->pending_len + len;
        uint8_t *grown = realloc(io->pending, cap);
        if (!grown) {
            mw_h2io_fail(io, "send", "out of memory for unsent bytes");
            return -1;
        }
        io->pending = grown;
        io->pending_cap = cap;
    }
    memcpy(io->pending + io->pending_len, data, len);
    io->pending_len += len;
    return 0;
}

void mw_h2io_set_seal(mw_h2io *io, mw_seal *seal)
{
    mw_seal_free(io->seal);
    io->seal = seal;
}

static ssize_t send_iov(mw_h2io *io, struct iovec *iov, int n)
{
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t sent;
    do
        sent = sendmsg(io->fd, &msg, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        mw_h2io_fail(io, "send", strerror(errno));
    return sent;
}

/* Seals the parts into records in `pending` and writes what the socket takes now; the
 * rest waits there, in order. Returns 0 or NGHTTP2_ERR_CALLBACK_FAILURE. */
static int send_sealed(mw_h2io *io, const uint8_t *const *parts, const size_t *lens, int count)
{
    size_t total = 0;
    for (int i = 0; i < count; i++)
        total += lens[i];
    size_t size = mw_seal_size(total);
    if (io->pending_cap < size) {
        size_t cap = io->pending_cap ? io->pending_cap : 4096;
        while (cap < size)
            cap *= 2;
        uint8_t *grown = realloc(io->pending, cap);
        if (!grown) {
            mw_h2io_fail(io, "send", "out of memory for sealed records");
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        io->pending = grown;
        io->pending_cap = cap;
    }
    io->pending_off = 0;
    io->pending_len = mw_seal_parts(io->seal, parts, lens, count, io->pending);
    if (!io->pending_len) {
        mw_h2io_fail(io, "send", "cannot seal a record");
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    struct iovec iov = {.iov_base = io->pending, .iov_len = io->pending_len};
    ssize_t sent = send_iov(io, &iov, 1);
    if (sent < 0)
        return io->failed ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
    io->pending_off = (size_t)sent;
    if (io->pending_off == io->pending_len)
        io->pending_off = io->pending_len = 0;
    return 0;
}

ssize_t mw_h2io_send(nghttp2_session *session, const uint8_t *data, size_t len, int flags,
                     void *user_data)
{
    (void)session;
    (void)flags;
    mw_h2io *io = user_data;
    if (io->pending_len > io->pending_off)
        return NGHTTP2_ERR_WOULDBLOCK;
    if (io->seal) {
        size_t take = len < MW_SEAL_PAYLOAD_MAX ? len : MW_SEAL_PAYLOAD_MAX;
        int rv = send_sealed(io, &data, &take, 1);
        return rv ? rv : (ssize_t)take;
    }
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    ssize_t sent = send_iov(io, &iov, 1);
    if (sent < 0)
        return io->failed ? NGHTTP2_ERR_CALLBACK_FAILURE : NGHTTP2_ERR_WOULDBLOCK;
    return sent;
}

int mw_h2io_send_frame(mw_h2io *io, const uint8_t *head, const uint8_t *payload, size_t len)
{
    if (io->pending_len > io->pending_off)
        return NGHTTP2_ERR_WOULDBLOCK;
    if (io->seal) {
        const uint8_t *parts[2] = {head, payload};
        size_t lens[2] = {9, len};
        return send_sealed(io, parts, lens, 2);
    }
    struct iovec iov[2] = {{.iov_base = (void *)head, .iov_len = 9},
                           {.iov_base = (void *)payload, .iov_len = len}};
    ssize_t sent = send_iov(io, iov, len ? 2 : 1);
    if (sent < 0)
        return io->failed ? NGHTTP2_ERR_CALLBACK_FAILURE : NGHTTP2_ERR_WOULDBLOCK;
    /* The frame is committed once any byte of it left: keep the rest, in order. */
    size_t done = (size_t)sent;
    io->pending_len = io->pending_off = 0;
    if (done < 9 && keep(io, head + done, 9 - done) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    size_t payload_done = done > 9 ? done - 9 : 0;
    if (payload_done < len && keep(io, payload + payload_done, len - payload_done) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return 0;
}

struct feeding {
    mw_h2io *io;
    nghttp2_session *session;
};

static void feed(mw_h2io *io, nghttp2_session *session, const uint8_t *data, size_t len)
{
    if (io->failed)
        return;
    ssize_t used = nghttp2_session_mem_recv(session, data, len);
    if (used < 0)
        mw_h2io_fail(io, "HTTP/2", nghttp2_strerror((int)used));
}

static void feed_opened(void *ctx, const uint8_t *payload, size_t len)
{
    struct feeding *f = ctx;
    feed(f->io, f->session, payload, len);
}

void mw_h2io_receive(mw_h2io *io, nghttp2_session *session, uint8_t *buf, size_t cap,
                     size_t budget)
{
    struct feeding feeding = {io, session};
    size_t got = 0;
    while (got < budget && !io->failed && !io->closed) {
        ssize_t n = recv(io->fd, buf, cap, 0);
        if (n > 0) {
            got += (size_t)n;
            if (!io->seal)
                feed(io, session, buf, (size_t)n);
            else if (mw_seal_open(io->seal, buf, (size_t)n, feed_opened, &feeding) != 0) {
                io->forged = 1;
                mw_h2io_fail(io, "record", "failed authentication (altered or injected bytes)");
            }
            continue;
        }
        if (n == 0)
            io->closed = 1;
        else if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        else if (errno != EINTR)
            mw_h2io_fail(io, "receive", strerror(errno));
    }
}

int mw_h2io_flush(mw_h2io *io, nghttp2_session *session)
{
    while (io->pending_len > io->pending_off && !io->failed) {
        struct iovec iov = {.iov_base = io->pending + io->pending_off,
                            .iov_len = io->pending_len - io->pending_off};
        ssize_t sent = send_iov(io, &iov, 1);
        if (sent < 0)
            return io->failed ? 0 : MW_IO_WRITE;
        io->pending_off += (size_t)sent;
    }
    io->pending_len = io->pending_off = 0;
    if (io->failed)
        return 0;
    int rv = nghttp2_session_send(session);
    if (rv != 0) {
        mw_h2io_fail(io, "HTTP/2", nghttp2_strerror(rv));
        return 0;
    }
    return io->pending_len || nghttp2_session_want_write(session) ? MW_IO_WRITE : 0;
}

int mw_h2io_over(const mw_h2io *io, nghttp2_session *session)
{
    return io->failed || io->closed ||
           (!nghttp2_session_want_read(session) && !nghttp2_session_want_write(session) &&
            !io->pending_len);
}
