/* SPDX-License-Identifier: MIT
 *
 * Run-once leases: who may run the work named by (type, code, run_key), until
 * when, and with which fence number. Pure logic: the time and randomness are
 * arguments, no clock is read and no store is touched. The stores keep one
 * er_lease per idempotency key and call these rules to decide; they do not
 * re-implement them. The idempotency key is a SHA-256 digest of the three
 * parts, so every node derives the same key forever.
 */
#ifndef ER_CORE_LEASE_H
#define ER_CORE_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/clock.h"
#include "util/err.h"

/* Limits. Changing one changes the API contract: update docs/leases.md. */
#define ER_LEASE_PART_MAX 200                 /* type, code, run_key: bytes */
#define ER_LEASE_TTL_MIN_MS 1000
#define ER_LEASE_TTL_MAX_MS (24LL * 3600 * 1000)
#define ER_LEASE_KEY_SIZE 36                  /* "ik_" + 32 hex + NUL */
#define ER_LEASE_TOKEN_SIZE 33                /* 32 hex + NUL */

typedef enum er_lease_state {
    ER_LEASE_FREE = 0, /* never acquired, released, or (when read) expired */
    ER_LEASE_HELD = 1, /* an owner holds it until expires_at */
    ER_LEASE_DONE = 2, /* completed: every later acquire answers "done" */
} er_lease_state;

/* One lease as the store keeps it. Plain data: copy it freely. */
typedef struct er_lease {
    char idempotency_key[ER_LEASE_KEY_SIZE];
    char owner_token[ER_LEASE_TOKEN_SIZE]; /* "" when free; kept when done */
    int64_t fence;       /* 0 before the first acquire; +1 on every acquire */
    int64_t expires_at;  /* ms since the epoch; meaningful while held */
    int64_t completed_at; /* 0 unless done */
    er_lease_state state;
} er_lease;

/* "free", "held", "done". */
const char *er_lease_state_name(er_lease_state s);

/* Checks one of type / code / run_key: 1..ER_LEASE_PART_MAX bytes, no
 * control characters (bytes below 0x20 and 0x7f). `field` names it in the
 * error. Returns 0 or ER_EINVAL. */
int er_lease_part_validate(const char *s, const char *field, er_error *err);

/* Checks a ttl: ER_LEASE_TTL_MIN_MS..ER_LEASE_TTL_MAX_MS. Returns 0 or
 * ER_EINVAL (field "ttl_ms"). */
int er_lease_ttl_validate(int64_t ttl_ms, er_error *err);

/* Derives the idempotency key of (type, code, run_key): "ik_" followed by the
 * first 32 hex digits of SHA-256 over a versioned, length-prefixed framing of
 * the three parts (so ("ab","c") and ("a","bc") differ). Validates the parts
 * first (ER_EINVAL naming the field). Returns 0, ER_EINVAL or ER_EINTERNAL
 * (the hash failed). */
int er_lease_key(const char *type, const char *code, const char *run_key,
                 char out[ER_LEASE_KEY_SIZE], er_error *err);

/* A fresh, never acquired lease for `key` (copied). */
void er_lease_init(er_lease *l, const char *key);

/* The state as of `now`: a held lease whose expires_at <= now counts as free. */
er_lease_state er_lease_state_at(const er_lease *l, int64_t now);

/* Acquire: when the lease is free (or held but expired at `now`) it becomes
 * held by a new secret owner token (er_secure_token), fence + 1, expires_at = now +
 * ttl_ms; returns 0. When held by a live owner returns ER_ECONFLICT and
 * leaves *l unchanged (state HELD); when done returns ER_ECONFLICT (state
 * DONE). ttl_ms must already be valid. */
int er_lease_acquire(er_lease *l, int64_t now, int64_t ttl_ms);

/* Renew by the owner: expires_at = now + ttl_ms. ER_ESTALE (nothing changed)
 * when the token is not the holder's or the lease expired at `now` or is not
 * held. */
int er_lease_renew(er_lease *l, const char *owner_token, int64_t now, int64_t ttl_ms);

/* Complete by the owner: the lease becomes done for good. Completing again
 * with the token that completed it succeeds and changes nothing (a retried
 * request). ER_ESTALE as er_lease_renew otherwise. */
int er_lease_complete(er_lease *l, const char *owner_token, int64_t now);

/* Release by the owner: the lease becomes free (fence kept, token cleared),
 * so the next acquire succeeds at once. ER_ESTALE as er_lease_renew. */
int er_lease_release(er_lease *l, const char *owner_token, int64_t now);

#endif
