/* The gRPC wire's batching codec: see wirec.h for the contracts. */
#include "wirec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MW_HDR 6
#define MW_PAGE_BITS 10
#define MW_PAGE (1u << MW_PAGE_BITS)

struct mw_entry {
    int fd;     /* -1: no wire */
    int source; /* where frames to send are read: fd, or an emulator's output */
    uint32_t tag;
    uint32_t peer_id;
    mw_counters c;
};

struct mw_tag {
    char *name; /* a topology namespace, not NUL-terminated */
    size_t len;
};

struct mw_table {
    uint32_t id_limit;
    size_t n_pages;
    struct mw_entry **pages; /* pages[id >> MW_PAGE_BITS], NULL until first used */
    uint64_t unknown;
    struct mw_tag *tags; /* tags[i] is the namespace of tag i + 1 */
    size_t n_tags, cap_tags;
};

mw_table *mw_table_new(uint32_t id_limit)
{
    mw_table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->id_limit = id_limit;
    t->n_pages = ((size_t)id_limit + MW_PAGE - 1) >> MW_PAGE_BITS;
    t->pages = calloc(t->n_pages ? t->n_pages : 1, sizeof(*t->pages));
    if (!t->pages) {
        free(t);
        return NULL;
    }
    return t;
}

void mw_table_free(mw_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_pages; i++)
        free(t->pages[i]);
    free(t->pages);
    for (size_t i = 0; i < t->n_tags; i++)
        free(t->tags[i].name);
    free(t->tags);
    free(t);
}

static struct mw_entry *entry(const mw_table *t, uint32_t id)
{
    if (id >= t->id_limit)
        return NULL;
    struct mw_entry *page = t->pages[id >> MW_PAGE_BITS];
    if (!page)
        return NULL;
    struct mw_entry *e = &page[id & (MW_PAGE - 1)];
    return e->fd < 0 ? NULL : e;
}

int mw_table_set(mw_table *t, uint32_t id, int fd, uint32_t tag, uint32_t peer_id)
{
    if (id >= t->id_limit || fd < 0)
        return -1;
    struct mw_entry **page = &t->pages[id >> MW_PAGE_BITS];
    if (!*page) {
        *page = calloc(MW_PAGE, sizeof(**page));
        if (!*page)
            return -2;
        for (size_t i = 0; i < MW_PAGE; i++)
            (*page)[i].fd = -1;
    }
    struct mw_entry *e = &(*page)[id & (MW_PAGE - 1)];
    e->fd = fd;
    e->source = fd;
    e->tag = tag;
    e->peer_id = peer_id;
    return 0;
}

int mw_table_set_source(mw_table *t, uint32_t id, int fd)
{
    struct mw_entry *e = entry(t, id);
    if (!e)
        return -1;
    e->source = fd < 0 ? e->fd : fd;
    return 0;
}

int mw_table_clear(mw_table *t, uint32_t id)
{
    struct mw_entry *e = entry(t, id);
    if (!e)
        return -1;
    *e = (struct mw_entry){.fd = -1};
    return 0;
}

int mw_table_counters(const mw_table *t, uint32_t id, mw_counters *out)
{
    const struct mw_entry *e = entry(t, id);
    if (!e)
        return -1;
    *out = e->c;
    return 0;
}

uint64_t mw_table_unknown(const mw_table *t)
{
    return t->unknown;
}

static void put_header(uint8_t *p, uint32_t id, size_t len)
{
    p[0] = (uint8_t)(id >> 24);
    p[1] = (uint8_t)(id >> 16);
    p[2] = (uint8_t)(id >> 8);
    p[3] = (uint8_t)id;
    p[4] = (uint8_t)(len >> 8);
    p[5] = (uint8_t)len;
}

void mw_batch_read(mw_table *t, mw_reader *r)
{
    size_t active = r->n_ids; /* ids[0, active) may still have frames */
    size_t i = active ? r->cursor % active : 0;
    size_t off = 0, frames = 0;
    size_t max_frame = r->max_frame > 65535 ? 65535 : r->max_frame;

    while (active && frames < r->max_frames && r->cap - off >= MW_HDR + max_frame + 1) {
        if (i >= active)
            i = 0;
        uint32_t id = r->ids[i];
        struct mw_entry *e = entry(t, id);
        ssize_t n = -1;
        if (e) {
            do
                n = read(e->source, r->buf + off + MW_HDR, max_frame + 1);
            while (n < 0 && errno == EINTR);
        }
        if (n <= 0) { /* drained, failed or gone: skip it for the rest of this call */
            r->ids[i] = r->ids[active - 1];
            r->ids[active - 1] = id;
            active--;
            continue;
        }
        i++;
        if ((size_t)n > max_frame) {
            e->c.tx_drops++;
            continue;
        }
        put_header(r->buf + off, e->peer_id, (size_t)n);
        off += MW_HDR + (size_t)n;
        frames++;
        e->c.tx_frames++;
        e->c.tx_bytes += (uint64_t)n;
    }
    r->cursor = i;
    r->bytes = off;
    r->frames = frames;
    r->drained = active == 0;
}

int mw_table_deliver(mw_table *t, uint32_t tag, uint32_t id, const uint8_t *frame, size_t len)
{
    struct mw_entry *e = entry(t, id);
    if (!e || tag == 0 || e->tag != tag) {
        t->unknown++;
        return 0;
    }
    ssize_t n;
    do
        n = write(e->fd, frame, len);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)len) {
        e->c.rx_drops++;
        return 0;
    }
    e->c.rx_frames++;
    e->c.rx_bytes += len;
    return 1;
}

uint32_t mw_table_tag(mw_table *t, const char *ns, size_t len, int create)
{
    for (size_t i = 0; i < t->n_tags; i++)
        if (t->tags[i].len == len && memcmp(t->tags[i].name, ns, len) == 0)
            return (uint32_t)(i + 1);
    if (!create)
        return 0;
    if (t->n_tags == t->cap_tags) {
        size_t cap = t->cap_tags ? 2 * t->cap_tags : 8;
        struct mw_tag *grown = realloc(t->tags, cap * sizeof(*grown));
        if (!grown)
            return 0;
        t->tags = grown;
        t->cap_tags = cap;
    }
    char *name = malloc(len ? len : 1);
    if (!name)
        return 0;
    memcpy(name, ns, len);
    t->tags[t->n_tags] = (struct mw_tag){.name = name, .len = len};
    return (uint32_t)++t->n_tags;
}
