/* The Wire service's transport (proto/meshwire.proto, docs/design.md §5): gRPC over HTTP/2,
 * through nghttp2, with the frames moving in C. cffi reads every line not starting
 * with '#'.
 *
 * A sender is the client side of one `Wire/Frames` call: it reads its wires' TAPs
 * into Batch messages and writes each as DATA frames of the call. A receiver is the
 * server side of one accepted connection: it decodes the Batch messages of every call
 * on it and writes each frame to its wire's TAP. Both are driven by the caller's event
 * loop on a nonblocking TCP socket that stays the caller's (never closed here): each
 * call does what the event allows without blocking and returns MW_IO bits saying
 * what to wait for next. The socket's readability is always of interest until DONE.
 */
#ifndef MESHWIRE_H2WIRE_H
#define MESHWIRE_H2WIRE_H
#include <stddef.h>
#include <stdint.h>

#include "wirec.h"

enum {
    MW_IO_WRITE = 1, /* output waits for the socket: call on_writable once it is writable */
    MW_IO_TAPS = 2,  /* (sender) ready for frames: call mw_sender_on_taps once a TAP is readable */
    MW_IO_DONE = 4,  /* the call or connection is over (ended or failed); only free is left */
};

typedef struct mw_sender mw_sender;

/* A `Wire/Frames` call to `authority` (host:port) with metadata meshwire-namespace
 * = ns, sending frames read through `reader` (the caller's, set up as for
 * mw_batch_read; its buf must have MW_BATCHMSG_HEADROOM writable bytes before it,
 * where each message's header goes). NULL if out of memory. Start it with
 * mw_sender_on_writable. */
mw_sender *mw_sender_new(int fd, mw_table *table, mw_reader *reader, const char *authority,
                         const char *ns);
void mw_sender_free(mw_sender *s);
int mw_sender_on_readable(mw_sender *s);
int mw_sender_on_writable(mw_sender *s);
/* Reads the TAPs into messages until they are drained or the socket pushes back: a
 * batch leaves as soon as no TAP is readable, and one message is in flight at most. */
int mw_sender_on_taps(mw_sender *s);
/* Ends the call once the message in flight is sent (END_STREAM); DONE follows when the
 * receiver answered. */
int mw_sender_finish(mw_sender *s);
/* Seals the call's connection (seal.h) with the keys of the preface it passed: `opener`
 * side of mw_seal_new. Call before mw_sender_on_writable. Returns 0, or -1 if out of
 * memory. */
int mw_sender_seal(mw_sender *s, const uint8_t *key, size_t key_len, const uint8_t *transcript,
                   size_t transcript_len, int encrypt);
/* Messages written completely. */
uint64_t mw_sender_batches(const mw_sender *s);
/* Why the call is over: "" while it runs or if it ended with status OK. */
const char *mw_sender_error(mw_sender *s);

/* Counters shared by the receivers of one worker. */
typedef struct {
    uint64_t streams;   /* calls being served now */
    uint64_t malformed; /* messages that broke the Batch format (batchmsg.h) */
    uint64_t refused;   /* calls answered with an error: wrong method, content type or encoding */
} mw_rx_stats;

typedef struct mw_receiver mw_receiver;

/* Serves the accepted connection on fd. NULL if out of memory. Start it with
 * mw_receiver_on_writable (it sends the server's SETTINGS). */
mw_receiver *mw_receiver_new(int fd, mw_table *table, mw_rx_stats *stats);
/* Frees the receiver; calls still open on it stop counting in `streams`. */
void mw_receiver_free(mw_receiver *r);
int mw_receiver_on_readable(mw_receiver *r);
int mw_receiver_on_writable(mw_receiver *r);
/* Seals the connection (seal.h) with the keys of the preface it passed: the accepting
 * side of mw_seal_new. Call before mw_receiver_on_writable. Returns 0, or -1 if out of
 * memory. */
int mw_receiver_seal(mw_receiver *r, const uint8_t *key, size_t key_len, const uint8_t *transcript,
                     size_t transcript_len, int encrypt);
/* Binds the connection to the node it authenticated as (`peer`, its address): from now
 * on a call delivers only to wires tagged with (its namespace, peer), see
 * mw_receiver_tag_name. */
void mw_receiver_bind(mw_receiver *r, const char *peer);
/* The name a wire's tag is made from (mw_table_tag) for frames of namespace `ns` from
 * node `peer` ("" for a connection bound to no node): `ns`, or `ns` NUL `peer`. Writes
 * it to out (cap bytes) and returns its length, or -1 if it does not fit. */
long mw_receiver_tag_name(const char *ns, size_t ns_len, const char *peer, size_t peer_len,
                          char *out, size_t cap);
/* Says GOAWAY (the worker is stopping); DONE follows once it is written. */
int mw_receiver_shut(mw_receiver *r);
/* Whether a record failed authentication (seal.h), which ended the connection. */
int mw_receiver_forged(const mw_receiver *r);
/* What failed the connection: "" if nothing did (a sender closing it is no failure). */
const char *mw_receiver_error(const mw_receiver *r);

#endif
