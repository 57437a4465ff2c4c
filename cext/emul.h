/* Link emulation: the per-frame work of one link end's impairments (cext/emul.c).
 * cffi reads every line not starting with '#'.
 *
 * An emulator takes the frames one end sends (mw_emul_push) and gives them back
 * when they are due (mw_emul_pop): a pure state machine, with time passed in
 * (nanoseconds of any monotonic clock) and randomness from its own seeded PRNG,
 * so a fixed seed gives the same decisions on every run and the tests need no
 * clock. The worker drives it from a TAP and a timerfd (dataplane/emulator.py).
 *
 * Per frame, in this order: loss (dropped, counted); corruption (one random bit
 * flipped past the first `skip` bytes, the TAP's virtio-net header); reorder (the
 * frame gets no delay, so it overtakes the frames queued before it); delay (delay
 * plus a uniform jitter in [-jitter, +jitter], never below 0, and never before
 * the frame queued before it unless it was reordered); rate (a frame leaves no
 * earlier than the link, at `rate` bytes/s, has finished sending the previous
 * one); duplication (the frame is queued a second time, right after itself).
 * A frame that finds the queue at its limit is dropped and counted as `overflow`.
 */
#ifndef MESHWIRE_EMUL_H
#define MESHWIRE_EMUL_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t delay_ns;
    uint64_t jitter_ns;       /* <= delay_ns */
    uint32_t loss_ppm;        /* parts per million: 1,000,000 drops every frame */
    uint32_t corrupt_ppm;
    uint32_t duplicate_ppm;
    uint32_t reorder_ppm;
    uint64_t rate_bytes_per_s; /* 0: no limit */
} mw_emul_params;

typedef struct {
    uint64_t frames;     /* pushed */
    uint64_t passed;     /* popped (a duplicate counts twice) */
    uint64_t dropped;    /* lost on purpose (loss_ppm) */
    uint64_t delayed;    /* queued with a delay or behind the rate limit */
    uint64_t corrupted;
    uint64_t duplicated;
    uint64_t reordered;
    uint64_t overflow;   /* dropped: the queue was at its limit */
    uint64_t bytes;      /* of the frames pushed */
    uint64_t passed_bytes; /* of the frames popped */
} mw_emul_counters;

typedef struct mw_emul mw_emul;

/* An emulator holding at most `max_frames` frames and `max_bytes` bytes queued.
 * NULL if out of memory. */
mw_emul *mw_emul_new(uint64_t seed, size_t max_frames, size_t max_bytes);
void mw_emul_free(mw_emul *e);
/* Replaces the parameters; frames already queued keep their release times. */
void mw_emul_set(mw_emul *e, const mw_emul_params *p);
/* Takes one frame sent at `now`; `skip` leading bytes are never corrupted.
 * Returns how many copies were queued (0: dropped). */
int mw_emul_push(mw_emul *e, uint64_t now, const uint8_t *frame, size_t len, size_t skip);
/* The release time of the next frame; UINT64_MAX if none is queued. */
uint64_t mw_emul_next(const mw_emul *e);
/* Copies the next frame due at `now` into buf (cap bytes) and returns its length;
 * 0 if none is due. A frame longer than cap is dropped (counted as overflow). */
size_t mw_emul_pop(mw_emul *e, uint64_t now, uint8_t *buf, size_t cap);
/* Frames queued now. */
size_t mw_emul_queued(const mw_emul *e);
void mw_emul_read_counters(const mw_emul *e, mw_emul_counters *out);

/* Moves frames for a worker: reads every frame `in_fd` holds (nonblocking) into
 * the emulator, then writes every due frame to `out_fd`; a frame `out_fd` refuses
 * is dropped (counted as overflow). Returns the frames read; -1 if in_fd failed
 * with something other than EAGAIN. in_fd < 0: only writes due frames. */
int mw_emul_pump(mw_emul *e, uint64_t now, int in_fd, int out_fd, size_t skip);
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t mw_emul_now(void);
/* A nonblocking CLOCK_MONOTONIC timerfd (-1 and errno on failure); arming it for an
 * absolute time `at` (ns; one already past fires at once); reading its expirations. */
int mw_emul_timerfd(void);
int mw_emul_timer_set(int fd, uint64_t at);
void mw_emul_timer_read(int fd);

#endif
