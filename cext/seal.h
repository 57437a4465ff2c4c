/* The wire's record layer (docs/design.md §10): after the authenticated preface
 * (dataplane/preface.py) every byte of the connection, both ways, travels in sealed
 * records, so a man on the path can neither read (with `encrypt`), alter, inject,
 * drop, reorder nor replay a byte without the connection failing. cffi reads every
 * line not starting with '#'.
 *
 * Record: [len u32, network order][body: len bytes], body = sealed payload and its
 * 16-byte AES-256-GCM tag. The 4 length bytes are the additional authenticated data.
 * With `encrypt` the payload is encrypted; without, it goes in the clear and is
 * authenticated as additional data (GMAC), at the same cost in bytes.
 *
 * Keys: HKDF-SHA256 with the wire key as input key material, the preface's transcript
 * (both hellos: both nonces, both node names, the mode) as salt and a fixed label as
 * info yields a key and a 12-byte IV per direction, so each connection and each
 * direction has its own. Record n of a direction uses the IV with n (u64, network
 * order) XORed into its last 8 bytes (as TLS 1.3 does): a record replayed, dropped or
 * moved fails the tag of the record expected there.
 */
#ifndef MESHWIRE_SEAL_H
#define MESHWIRE_SEAL_H
#include <stddef.h>
#include <stdint.h>

enum {
    MW_SEAL_HEAD = 4,            /* the length prefix */
    MW_SEAL_TAG = 16,            /* the AES-GCM tag after each payload */
    MW_SEAL_PAYLOAD_MAX = 1 << 21 /* payload bytes per record at most; longer is split */
};

typedef struct mw_seal mw_seal;

/* The two directions' keys of one connection. `opener` is 1 on the side that opened the
 * connection (the sender), 0 on the side that accepted it; `encrypt` must be the same on
 * both (the preface agreed it). NULL if out of memory or libcrypto fails. */
mw_seal *mw_seal_new(const uint8_t *key, size_t key_len, const uint8_t *transcript,
                     size_t transcript_len, int opener, int encrypt);
void mw_seal_free(mw_seal *s);
/* Bytes `n` payload bytes take on the wire, split into records of at most
 * MW_SEAL_PAYLOAD_MAX. */
size_t mw_seal_size(size_t n);
/* Seals the concatenation of parts[0..count) (lens[i] bytes each) into `out`, which has
 * room for mw_seal_size(sum of lens). Returns the bytes written, or 0 if libcrypto
 * failed or the direction's record counter ran out (the connection must end). */
size_t mw_seal_parts(mw_seal *s, const uint8_t *const *parts, const size_t *lens, int count,
                     uint8_t *out);

/* Opens records from a byte stream split anyhow: each payload is handed to `deliver`
 * in order as soon as its record is whole and authentic. Returns 0, or -1 once a record
 * is not authentic or claims a length beyond MW_SEAL_PAYLOAD_MAX + MW_SEAL_TAG; after
 * -1 nothing more is delivered (the connection must end). `data` is decrypted in place
 * where whole records lie in it, so it must be writable. */
typedef void (*mw_seal_deliver)(void *ctx, const uint8_t *payload, size_t len);
int mw_seal_open(mw_seal *s, uint8_t *data, size_t len, mw_seal_deliver deliver, void *ctx);
/* Records opened, and whether a record failed (1) or not (0). */
uint64_t mw_seal_opened(const mw_seal *s);
int mw_seal_broken(const mw_seal *s);

#endif
