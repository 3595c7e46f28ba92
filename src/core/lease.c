/* SPDX-License-Identifier: MIT
 *
 * Run-once lease rules and idempotency-key derivation (lease.h). Pure: the
 * time and the random source come from the caller; the only library call
 * beyond libc is OpenSSL's SHA-256.
 */
#include "core/lease.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

/* Bumping the domain string changes every key: never do it. */
#define KEY_DOMAIN "errand-lease-v1"

const char *er_lease_state_name(er_lease_state s)
{
    switch (s) {
    case ER_LEASE_HELD: return "held";
    case ER_LEASE_DONE: return "done";
    case ER_LEASE_FREE:
    default: return "free";
    }
}

int er_lease_part_validate(const char *s, const char *field, er_error *err)
{
    if (!s || !*s)
        return er_error_set(err, ER_EINVAL, field, "%s is required and must not be empty", field);
    size_t n = strlen(s);
    if (n > ER_LEASE_PART_MAX)
        return er_error_set(err, ER_EINVAL, field, "%s is %zu bytes; at most %d", field, n,
                            ER_LEASE_PART_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return er_error_set(err, ER_EINVAL, field, "%s must not contain control characters",
                                field);
    }
    return 0;
}

int er_lease_ttl_validate(int64_t ttl_ms, er_error *err)
{
    if (ttl_ms < ER_LEASE_TTL_MIN_MS || ttl_ms > ER_LEASE_TTL_MAX_MS)
        return er_error_set(err, ER_EINVAL, "ttl_ms", "ttl_ms must be %d..%lld",
                            ER_LEASE_TTL_MIN_MS, (long long)ER_LEASE_TTL_MAX_MS);
    return 0;
}

/* Feeds a 4-byte big-endian length and the bytes. */
static int feed(EVP_MD_CTX *md, const char *s)
{
    size_t n = strlen(s);
    unsigned char len[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
                            (unsigned char)(n >> 8), (unsigned char)n};
    return EVP_DigestUpdate(md, len, sizeof len) == 1 && EVP_DigestUpdate(md, s, n) == 1;
}

int er_lease_key(const char *type, const char *code, const char *run_key,
                 char out[ER_LEASE_KEY_SIZE], er_error *err)
{
    int rc = er_lease_part_validate(type, "type", err);
    if (rc == 0)
        rc = er_lease_part_validate(code, "code", err);
    if (rc == 0)
        rc = er_lease_part_validate(run_key, "run_key", err);
    if (rc < 0)
        return rc;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 && feed(md, KEY_DOMAIN) &&
              feed(md, type) && feed(md, code) && feed(md, run_key) &&
              EVP_DigestFinal_ex(md, digest, &dlen) == 1 && dlen >= 16;
    EVP_MD_CTX_free(md);
    if (!ok)
        return er_error_set(err, ER_EINTERNAL, "", "SHA-256 failed");
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "ik_", 3);
    for (int i = 0; i < 16; i++) {
        out[3 + 2 * i] = hex[digest[i] >> 4];
        out[4 + 2 * i] = hex[digest[i] & 15];
    }
    out[35] = '\0';
    return 0;
}

void er_lease_init(er_lease *l, const char *key)
{
    memset(l, 0, sizeof *l);
    snprintf(l->idempotency_key, sizeof l->idempotency_key, "%s", key);
    l->state = ER_LEASE_FREE;
}

er_lease_state er_lease_state_at(const er_lease *l, int64_t now)
{
    if (l->state == ER_LEASE_HELD && l->expires_at <= now)
        return ER_LEASE_FREE;
    return l->state;
}

int er_lease_acquire(er_lease *l, int64_t now, int64_t ttl_ms)
{
    if (er_lease_state_at(l, now) != ER_LEASE_FREE)
        return ER_ECONFLICT;
    char tok[33];
    /* a new token never equals the previous owner's */
    do
        er_secure_token(tok);
    while (strcmp(tok, l->owner_token) == 0);
    memcpy(l->owner_token, tok, sizeof tok);
    l->fence++;
    l->expires_at = now + ttl_ms;
    l->state = ER_LEASE_HELD;
    return 0;
}

/* Token comparison whose time does not depend on where the first
 * difference is. */
static bool token_eq(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na != nb || na == 0)
        return false;
    unsigned char d = 0;
    for (size_t i = 0; i < na; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static bool owner_live(const er_lease *l, const char *token, int64_t now)
{
    return token && er_lease_state_at(l, now) == ER_LEASE_HELD && token_eq(l->owner_token, token);
}

int er_lease_renew(er_lease *l, const char *owner_token, int64_t now, int64_t ttl_ms)
{
    if (!owner_live(l, owner_token, now))
        return ER_ESTALE;
    l->expires_at = now + ttl_ms;
    return 0;
}

int er_lease_complete(er_lease *l, const char *owner_token, int64_t now)
{
    if (l->state == ER_LEASE_DONE && owner_token && token_eq(l->owner_token, owner_token))
        return 0;
    if (!owner_live(l, owner_token, now))
        return ER_ESTALE;
    l->state = ER_LEASE_DONE;
    l->completed_at = now;
    l->expires_at = 0;
    return 0;
}

int er_lease_release(er_lease *l, const char *owner_token, int64_t now)
{
    if (!owner_live(l, owner_token, now))
        return ER_ESTALE;
    l->state = ER_LEASE_FREE;
    l->owner_token[0] = '\0';
    l->expires_at = 0;
    return 0;
}
