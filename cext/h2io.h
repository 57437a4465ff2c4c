/* The socket side shared by the sender and the receiver (h2wire.h): nghttp2's send
 * callbacks, the bytes a full socket could not take yet, and the receive loop.
 *
 * Writes happen in order: once a write was partial, its remainder waits in `pending`
 * and every later write says WOULDBLOCK (nghttp2 retries it) until the socket took
 * the remainder. A struct using these callbacks must start with an mw_h2io, since it
 * is the callbacks' user_data.
 */
#ifndef MESHWIRE_H2IO_H
#define MESHWIRE_H2IO_H
#include <nghttp2/nghttp2.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "seal.h"

/* The Wire service's one method, and the metadata naming the call's topology namespace. */
#define MW_WIRE_PATH "/meshwire.v1.Wire/Frames"
#define MW_NAMESPACE_HEADER "meshwire-namespace"

/* A header field for nghttp2_submit_*: the strings are copied at submission. */
static inline nghttp2_nv mw_h2_header(const char *name, const char *value)
{
    return (nghttp2_nv){(uint8_t *)name, (uint8_t *)value, strlen(name), strlen(value),
                        NGHTTP2_NV_FLAG_NONE};
}

/* Whether a header name or value (len bytes, not NUL-terminated) is `literal`. */
static inline int mw_h2_is(const uint8_t *s, size_t len, const char *literal)
{
    return len == strlen(literal) && memcmp(s, literal, len) == 0;
}

typedef struct {
    int fd;
    uint8_t *pending;
    size_t pending_off, pending_len, pending_cap;
    mw_seal *seal; /* set: every byte both ways travels in sealed records (seal.h) */
    int forged;    /* a record failed authentication: the connection is over */
    int closed; /* the peer closed its side */
    int failed; /* a socket or protocol error, named in `error` (the first one kept) */
    char error[192];
} mw_h2io;

void mw_h2io_init(mw_h2io *io, int fd);
/* Frees the pending bytes and the seal. */
void mw_h2io_release(mw_h2io *io);
/* From now on seals what is sent and opens what is received (takes `seal`). Call it
 * before any HTTP/2 byte moves. */
void mw_h2io_set_seal(mw_h2io *io, mw_seal *seal);
void mw_h2io_fail(mw_h2io *io, const char *what, const char *why);

/* nghttp2_send_callback: writes what the socket takes now (possibly part). */
ssize_t mw_h2io_send(nghttp2_session *session, const uint8_t *data, size_t len, int flags,
                     void *user_data);
/* For nghttp2_send_data_callback: writes a whole DATA frame, its 9-byte header `head`
 * and `len` payload bytes, keeping what the socket does not take in `pending`.
 * Returns 0, NGHTTP2_ERR_WOULDBLOCK or NGHTTP2_ERR_CALLBACK_FAILURE. */
int mw_h2io_send_frame(mw_h2io *io, const uint8_t *head, const uint8_t *payload, size_t len);

/* Reads what the socket holds, up to `budget` bytes, into buf (cap bytes) and feeds
 * it to the session; EOF sets `closed`, errors set `failed`. */
void mw_h2io_receive(mw_h2io *io, nghttp2_session *session, uint8_t *buf, size_t cap,
                     size_t budget);
/* Writes what is pending, then what the session has to send; returns MW_IO_WRITE if
 * output is left for when the socket is writable. */
int mw_h2io_flush(mw_h2io *io, nghttp2_session *session);
/* Whether the connection can do nothing more: failed, closed by the peer, or a
 * session that neither reads nor writes. */
int mw_h2io_over(const mw_h2io *io, nghttp2_session *session);

#endif
