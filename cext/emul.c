/* Link emulation: see emul.h.
 *
 * The queue is a binary min-heap of frames keyed by (release time, sequence), so
 * frames with equal release times leave in the order they came and a reordered
 * frame (release = now) overtakes every delayed one. Each queued frame is one
 * malloc'd copy: an impaired link trades the wire's zero-copy path for control
 * over every frame. The PRNG is splitmix64: fast, seedable, and good enough for
 * Bernoulli draws and uniform jitter.
 */
#include "emul.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define PPM 1000000u
/* With a rate, a frame that would wait longer than this behind the frames before it
 * is dropped (counted as overflow), as a router's tail drop: it bounds the queue by
 * time, so TCP over a slow emulated link sees losses, not seconds of queue. */
#define RATE_BACKLOG_NS 100000000ull
/* Reads per mw_emul_pump at most, so one busy TAP cannot hold the worker. */
#define PUMP_READS 256
#define PUMP_BUF 65600

typedef struct {
    uint64_t release;
    uint64_t seq;
    size_t len;
    uint8_t *data;
} slot;

struct mw_emul {
    mw_emul_params p;
    uint64_t rng;
    slot *heap;
    size_t n, cap, max_frames, max_bytes, bytes;
    uint64_t seq;
    uint64_t last_release; /* of the last frame queued in order (not reordered) */
    uint64_t link_free;    /* when the rate-limited link finishes the frames queued */
    mw_emul_counters c;
    uint8_t buf[PUMP_BUF];
};

static uint64_t next_random(mw_emul *e)
{
    uint64_t z = (e->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int chance(mw_emul *e, uint32_t ppm)
{
    if (ppm == 0)
        return 0;
    if (ppm >= PPM)
        return 1;
    return next_random(e) % PPM < ppm;
}

mw_emul *mw_emul_new(uint64_t seed, size_t max_frames, size_t max_bytes)
{
    mw_emul *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->rng = seed;
    e->max_frames = max_frames ? max_frames : 1;
    e->max_bytes = max_bytes;
    return e;
}

void mw_emul_free(mw_emul *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->n; i++)
        free(e->heap[i].data);
    free(e->heap);
    free(e);
}

void mw_emul_set(mw_emul *e, const mw_emul_params *p)
{
    e->p = *p;
    if (e->p.jitter_ns > e->p.delay_ns)
        e->p.jitter_ns = e->p.delay_ns;
}

static int earlier(const slot *a, const slot *b)
{
    return a->release < b->release || (a->release == b->release && a->seq < b->seq);
}

static void sift_up(mw_emul *e, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!earlier(&e->heap[i], &e->heap[parent]))
            break;
        slot t = e->heap[i];
        e->heap[i] = e->heap[parent];
        e->heap[parent] = t;
        i = parent;
    }
}

static void sift_down(mw_emul *e, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < e->n && earlier(&e->heap[l], &e->heap[m]))
            m = l;
        if (r < e->n && earlier(&e->heap[r], &e->heap[m]))
            m = r;
        if (m == i)
            return;
        slot t = e->heap[i];
        e->heap[i] = e->heap[m];
        e->heap[m] = t;
        i = m;
    }
}

static int enqueue(mw_emul *e, uint64_t release, const uint8_t *frame, size_t len)
{
    if (e->n >= e->max_frames || (e->max_bytes && e->bytes + len > e->max_bytes)) {
        e->c.overflow++;
        return 0;
    }
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 64;
        slot *heap = realloc(e->heap, cap * sizeof(*heap));
        if (!heap) {
            e->c.overflow++;
            return 0;
        }
        e->heap = heap;
        e->cap = cap;
    }
    uint8_t *data = malloc(len);
    if (!data) {
        e->c.overflow++;
        return 0;
    }
    memcpy(data, frame, len);
    e->heap[e->n] = (slot){release, e->seq++, len, data};
    sift_up(e, e->n++);
    e->bytes += len;
    return 1;
}

int mw_emul_push(mw_emul *e, uint64_t now, const uint8_t *frame, size_t len, size_t skip)
{
    if (len == 0)
        return 0; /* nothing to send; pop's 0 means "none due" */
    e->c.frames++;
    e->c.bytes += len;
    if (chance(e, e->p.loss_ppm)) {
        e->c.dropped++;
        return 0;
    }
    uint8_t *copy = NULL;
    if (len > skip && chance(e, e->p.corrupt_ppm)) {
        copy = malloc(len);
        if (copy) {
            memcpy(copy, frame, len);
            uint64_t bit = next_random(e) % ((uint64_t)(len - skip) * 8);
            copy[skip + bit / 8] ^= (uint8_t)(1u << (bit % 8));
            frame = copy;
            e->c.corrupted++;
        }
    }
    uint64_t release = now;
    int reordered = chance(e, e->p.reorder_ppm);
    if (e->p.rate_bytes_per_s) {
        uint64_t start = e->link_free > now ? e->link_free : now;
        if (start - now > RATE_BACKLOG_NS) {
            e->c.overflow++;
            free(copy);
            return 0;
        }
        e->link_free = start + (uint64_t)len * 1000000000ull / e->p.rate_bytes_per_s;
        release = e->link_free;
    }
    if (!reordered) {
        uint64_t delay = e->p.delay_ns;
        if (e->p.jitter_ns) {
            uint64_t span = 2 * e->p.jitter_ns + 1;
            delay = delay - e->p.jitter_ns + next_random(e) % span;
        }
        release += delay;
        if (release < e->last_release)
            release = e->last_release; /* jitter never reorders: only reorder_ppm does */
        e->last_release = release;
    } else {
        e->c.reordered++;
    }
    int queued = enqueue(e, release, frame, len);
    if (queued && release > now)
        e->c.delayed++;
    if (queued && chance(e, e->p.duplicate_ppm)) {
        if (enqueue(e, release, frame, len)) {
            queued++;
            e->c.duplicated++;
        }
    }
    free(copy);
    return queued;
}

uint64_t mw_emul_next(const mw_emul *e)
{
    return e->n ? e->heap[0].release : UINT64_MAX;
}

size_t mw_emul_pop(mw_emul *e, uint64_t now, uint8_t *buf, size_t cap)
{
    while (e->n && e->heap[0].release <= now) {
        slot s = e->heap[0];
        e->heap[0] = e->heap[--e->n];
        sift_down(e, 0);
        e->bytes -= s.len;
        size_t len = s.len;
        if (len > cap) {
            e->c.overflow++;
            free(s.data);
            continue;
        }
        memcpy(buf, s.data, len);
        free(s.data);
        e->c.passed++;
        e->c.passed_bytes += len;
        return len;
    }
    return 0;
}

size_t mw_emul_queued(const mw_emul *e)
{
    return e->n;
}

void mw_emul_read_counters(const mw_emul *e, mw_emul_counters *out)
{
    *out = e->c;
}

int mw_emul_pump(mw_emul *e, uint64_t now, int in_fd, int out_fd, size_t skip)
{
    int frames = 0;
    for (int i = 0; in_fd >= 0 && i < PUMP_READS; i++) {
        ssize_t n = read(in_fd, e->buf, sizeof(e->buf));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -1;
        }
        if (n == 0)
            break;
        mw_emul_push(e, now, e->buf, (size_t)n, skip);
        frames++;
    }
    size_t len;
    while ((len = mw_emul_pop(e, now, e->buf, sizeof(e->buf))) > 0) {
        ssize_t n;
        do
            n = write(out_fd, e->buf, len);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
            e->c.passed--;
            e->c.passed_bytes -= len;
            e->c.overflow++;
        }
    }
    return frames;
}

uint64_t mw_emul_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int mw_emul_timerfd(void)
{
    return timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
}

int mw_emul_timer_set(int fd, uint64_t at)
{
    if (at == 0)
        at = 1; /* 0 would disarm it */
    struct itimerspec spec = {.it_value = {(time_t)(at / 1000000000ull), (long)(at % 1000000000ull)}};
    return timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, NULL);
}

void mw_emul_timer_read(int fd)
{
    uint64_t expirations;
    ssize_t n = read(fd, &expirations, sizeof(expirations));
    (void)n;
}
