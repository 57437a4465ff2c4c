/* The gRPC wire's batching codec (docs/design.md §5), shared by cffi (cext/wirec_build.py
 * feeds every line not starting with '#' to cdef) and wirec.c.
 *
 * Batch format: [wire id u32][len u16][frame]... in network byte order; batchmsg.h
 * wraps a batch into a gRPC message.
 */
#ifndef MESHWIRE_WIREC_H
#define MESHWIRE_WIREC_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t tx_frames; /* read from the wire's TAP and packed into a batch */
    uint64_t tx_bytes;
    uint64_t tx_drops;  /* frames longer than max_frame (cannot fit a u16 len) */
    uint64_t rx_frames; /* parsed from a batch and written to the wire's TAP */
    uint64_t rx_bytes;
    uint64_t rx_drops;  /* TAP full (EAGAIN) or refusing (EIO, EINVAL...) */
} mw_counters;

typedef struct mw_table mw_table;

/* The wires of one worker: wire id -> (fd, namespace tag, peer wire id, counters),
 * and the namespace tags.
 * Ids are below id_limit; lookups are two array indexings, and the entries of
 * 1024 consecutive ids are allocated together on the first mw_table_set among them. */
mw_table *mw_table_new(uint32_t id_limit);
void mw_table_free(mw_table *t);
/* Returns 0, -1 if id >= id_limit or fd < 0, -2 if out of memory. Setting an
 * existing wire replaces fd, tag and peer id and keeps its counters. */
int mw_table_set(mw_table *t, uint32_t id, int fd, uint32_t tag, uint32_t peer_id);
/* Makes mw_batch_read read the wire's frames from `fd` (an impaired wire's emulator
 * output, dataplane/emulator.py) instead of its TAP; fd < 0: from the TAP again.
 * mw_table_set resets it to the TAP. Returns 0, or -1 if there is no such wire. */
int mw_table_set_source(mw_table *t, uint32_t id, int fd);
/* Forgets the wire and its counters (the fd is the caller's to close). Returns 0,
 * or -1 if there was no such wire. */
int mw_table_clear(mw_table *t, uint32_t id);
/* Returns 0 and fills out, or -1 if there is no such wire. */
int mw_table_counters(const mw_table *t, uint32_t id, mw_counters *out);
/* Frames received for an unknown wire id or one of another namespace. */
uint64_t mw_table_unknown(const mw_table *t);

/* One sender's reading state: the caller owns every pointer. */
typedef struct {
    uint32_t *ids;      /* the local wire ids to read; mw_batch_read permutes them */
    size_t n_ids;
    size_t cursor;      /* where the next read resumes, for round-robin fairness */
    uint8_t *buf;
    size_t cap;
    size_t max_frame;   /* <= 65535; a read longer than this is dropped and counted */
    size_t max_frames;
    size_t bytes;       /* out: bytes packed into buf */
    size_t frames;      /* out: frames packed */
    int drained;        /* out: 1 if every fd returned EAGAIN (or failed) */
} mw_reader;

/* Reads frames from the nonblocking fds of r->ids, round-robin, into r->buf as one
 * batch headed by each wire's PEER id; stops when every fd is drained, max_frames
 * are packed, or buf has no room for a max_frame read. Never blocks. */
void mw_batch_read(mw_table *t, mw_reader *r);

/* Writes one received frame to the TAP of wire `id` if that wire carries `tag`, else
 * counts it unknown (tag 0 matches no wire). A frame the fd refuses (EAGAIN included)
 * is dropped and counted; nothing blocks. Returns 1 if the frame was delivered. */
int mw_table_deliver(mw_table *t, uint32_t tag, uint32_t id, const uint8_t *frame, size_t len);

/* The tag of a topology namespace (`len` bytes, not NUL-terminated): wires of one
 * namespace share it, and a stream delivers only to wires of its own. Tags start at 1
 * and never change; with `create` an unseen namespace gets the next one. Returns 0 for
 * an unseen namespace without `create`, or if out of memory. */
uint32_t mw_table_tag(mw_table *t, const char *ns, size_t len, int create);

#endif
