/* The wire's record layer: see seal.h. */
#include "seal.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <stdlib.h>
#include <string.h>

#define KEY_LEN 32
#define IV_LEN 12
#define LABEL "meshwire wire records v2"

struct direction {
    EVP_CIPHER_CTX *ctx;
    uint8_t iv[IV_LEN];
    uint64_t counter; /* the next record's number */
};

struct mw_seal {
    struct direction out, in;
    int encrypt;
    int broken;
    uint64_t opened;
    /* The record being gathered across calls to mw_seal_open: head, then body. */
    uint8_t head[MW_SEAL_HEAD];
    size_t head_got;
    uint8_t *body;
    size_t body_len, body_got, body_cap;
};

static int derive(const uint8_t *key, size_t key_len, const uint8_t *salt, size_t salt_len,
                  uint8_t *out, size_t out_len)
{
    EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    size_t len = out_len;
    int ok = ctx && EVP_PKEY_derive_init(ctx) > 0 &&
             EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt, (int)salt_len) > 0 &&
             EVP_PKEY_CTX_set1_hkdf_key(ctx, key, (int)key_len) > 0 &&
             EVP_PKEY_CTX_add1_hkdf_info(ctx, (const unsigned char *)LABEL, strlen(LABEL)) > 0 &&
             EVP_PKEY_derive(ctx, out, &len) > 0 && len == out_len;
    EVP_PKEY_CTX_free(ctx);
    return ok ? 0 : -1;
}

static int direction_init(struct direction *d, const uint8_t *material, int sealing)
{
    d->ctx = EVP_CIPHER_CTX_new();
    memcpy(d->iv, material + KEY_LEN, IV_LEN);
    if (!d->ctx)
        return -1;
    int ok = sealing ? EVP_EncryptInit_ex(d->ctx, EVP_aes_256_gcm(), NULL, material, NULL)
                     : EVP_DecryptInit_ex(d->ctx, EVP_aes_256_gcm(), NULL, material, NULL);
    return ok == 1 ? 0 : -1;
}

mw_seal *mw_seal_new(const uint8_t *key, size_t key_len, const uint8_t *transcript,
                     size_t transcript_len, int opener, int encrypt)
{
    /* Opener-to-acceptor key and IV, then acceptor-to-opener. */
    uint8_t material[2 * (KEY_LEN + IV_LEN)];
    mw_seal *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->encrypt = encrypt;
    const uint8_t *forth = material, *back = material + KEY_LEN + IV_LEN;
    if (derive(key, key_len, transcript, transcript_len, material, sizeof(material)) != 0 ||
        direction_init(&s->out, opener ? forth : back, 1) != 0 ||
        direction_init(&s->in, opener ? back : forth, 0) != 0) {
        memset(material, 0, sizeof(material));
        mw_seal_free(s);
        return NULL;
    }
    memset(material, 0, sizeof(material));
    return s;
}

void mw_seal_free(mw_seal *s)
{
    if (!s)
        return;
    EVP_CIPHER_CTX_free(s->out.ctx);
    EVP_CIPHER_CTX_free(s->in.ctx);
    free(s->body);
    free(s);
}

size_t mw_seal_size(size_t n)
{
    size_t records = n ? (n + MW_SEAL_PAYLOAD_MAX - 1) / MW_SEAL_PAYLOAD_MAX : 1;
    return n + records * (MW_SEAL_HEAD + MW_SEAL_TAG);
}

/* The nonce of the direction's next record; 0, or -1 if its counter ran out. */
static int next_nonce(struct direction *d, uint8_t nonce[IV_LEN])
{
    if (d->counter == UINT64_MAX)
        return -1;
    uint64_t n = d->counter++;
    memcpy(nonce, d->iv, IV_LEN);
    for (int i = 0; i < 8; i++)
        nonce[IV_LEN - 1 - i] ^= (uint8_t)(n >> (8 * i));
    return 0;
}

/* Sealing: one record of `len` payload bytes taken from the parts at (*part, *off). */
static int seal_record(mw_seal *s, const uint8_t *const *parts, const size_t *lens, int *part,
                       size_t *off, size_t len, uint8_t *out)
{
    uint8_t nonce[IV_LEN];
    EVP_CIPHER_CTX *ctx = s->out.ctx;
    uint32_t body = (uint32_t)(len + MW_SEAL_TAG);
    out[0] = (uint8_t)(body >> 24);
    out[1] = (uint8_t)(body >> 16);
    out[2] = (uint8_t)(body >> 8);
    out[3] = (uint8_t)body;
    int n;
    if (next_nonce(&s->out, nonce) != 0 || EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
        EVP_EncryptUpdate(ctx, NULL, &n, out, MW_SEAL_HEAD) != 1)
        return -1;
    uint8_t *at = out + MW_SEAL_HEAD;
    while (len) {
        while (*off == lens[*part]) {
            (*part)++;
            *off = 0;
        }
        size_t take = lens[*part] - *off < len ? lens[*part] - *off : len;
        const uint8_t *from = parts[*part] + *off;
        if (s->encrypt) {
            if (EVP_EncryptUpdate(ctx, at, &n, from, (int)take) != 1)
                return -1;
        } else {
            memcpy(at, from, take);
            if (EVP_EncryptUpdate(ctx, NULL, &n, from, (int)take) != 1)
                return -1;
        }
        at += take;
        *off += take;
        len -= take;
    }
    if (EVP_EncryptFinal_ex(ctx, at, &n) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, MW_SEAL_TAG, at) != 1)
        return -1;
    return 0;
}

size_t mw_seal_parts(mw_seal *s, const uint8_t *const *parts, const size_t *lens, int count,
                     uint8_t *out)
{
    size_t total = 0, written = 0, off = 0;
    int part = 0;
    for (int i = 0; i < count; i++)
        total += lens[i];
    do {
        size_t len = total < MW_SEAL_PAYLOAD_MAX ? total : MW_SEAL_PAYLOAD_MAX;
        if (seal_record(s, parts, lens, &part, &off, len, out + written) != 0)
            return 0;
        written += MW_SEAL_HEAD + len + MW_SEAL_TAG;
        total -= len;
    } while (total);
    return written;
}

/* Opening: authenticates body (len bytes: payload and tag) under `head`, decrypting the
 * payload in place. */
static int open_record(mw_seal *s, const uint8_t *head, uint8_t *body, size_t len)
{
    uint8_t nonce[IV_LEN];
    EVP_CIPHER_CTX *ctx = s->in.ctx;
    size_t payload = len - MW_SEAL_TAG;
    int n;
    if (next_nonce(&s->in, nonce) != 0 || EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 ||
        EVP_DecryptUpdate(ctx, NULL, &n, head, MW_SEAL_HEAD) != 1)
        return -1;
    if (s->encrypt ? EVP_DecryptUpdate(ctx, body, &n, body, (int)payload) != 1
                   : EVP_DecryptUpdate(ctx, NULL, &n, body, (int)payload) != 1)
        return -1;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, MW_SEAL_TAG, body + payload) != 1 ||
        EVP_DecryptFinal_ex(ctx, body + payload, &n) != 1)
        return -1;
    s->opened++;
    return 0;
}

static size_t body_length(const uint8_t *head)
{
    return (size_t)head[0] << 24 | (size_t)head[1] << 16 | (size_t)head[2] << 8 | head[3];
}

static int fail(mw_seal *s)
{
    s->broken = 1;
    return -1;
}

int mw_seal_open(mw_seal *s, uint8_t *data, size_t len, mw_seal_deliver deliver, void *ctx)
{
    while (len && !s->broken) {
        if (s->head_got < MW_SEAL_HEAD) {
            size_t take = MW_SEAL_HEAD - s->head_got < len ? MW_SEAL_HEAD - s->head_got : len;
            memcpy(s->head + s->head_got, data, take);
            s->head_got += take;
            data += take;
            len -= take;
            if (s->head_got < MW_SEAL_HEAD)
                break;
            s->body_len = body_length(s->head);
            s->body_got = 0;
            if (s->body_len < MW_SEAL_TAG || s->body_len > MW_SEAL_PAYLOAD_MAX + MW_SEAL_TAG)
                return fail(s);
        }
        uint8_t *body;
        if (s->body_got == 0 && len >= s->body_len) {
            body = data; /* whole in the caller's bytes: opened where it lies */
            data += s->body_len;
            len -= s->body_len;
        } else {
            if (s->body_cap < s->body_len) {
                uint8_t *grown = realloc(s->body, s->body_len);
                if (!grown)
                    return fail(s);
                s->body = grown;
                s->body_cap = s->body_len;
            }
            size_t need = s->body_len - s->body_got;
            size_t take = need < len ? need : len;
            memcpy(s->body + s->body_got, data, take);
            s->body_got += take;
            data += take;
            len -= take;
            if (s->body_got < s->body_len)
                break;
            body = s->body;
        }
        s->head_got = 0;
        if (open_record(s, s->head, body, s->body_len) != 0)
            return fail(s);
        deliver(ctx, body, s->body_len - MW_SEAL_TAG);
    }
    return s->broken ? -1 : 0;
}

uint64_t mw_seal_opened(const mw_seal *s)
{
    return s->opened;
}

int mw_seal_broken(const mw_seal *s)
{
    return s->broken;
}
