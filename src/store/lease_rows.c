/* SPDX-License-Identifier: MIT
 *
 * Run-once leases over a store's rows (lease_rows.h): read, decide with
 * core/lease.h, write back while the fence is unchanged.
 */
#include "store/lease_rows.h"

#include <string.h>

/* An acquire whose insert lost a race to another transaction reads again. */
#define ACQUIRE_TRIES 3

static int acquire_in_tx(const er_lease_rows *rows, er_store *s, const char *type,
                         const char *code, const char *run_key, const char *key, int64_t ttl_ms,
                         int64_t now, er_lease *l, er_error *err)
{
    for (int attempt = 0; attempt < ACQUIRE_TRIES; attempt++) {
        int rc = rows->read(s, false, key, l, err);
        if (rc == ER_ENOTFOUND) {
            er_lease_init(l, key);
            rc = 0;
        }
        if (rc < 0)
            return rc;
        int64_t fence = l->fence;
        if (er_lease_acquire(l, now, ttl_ms) != 0) {
            l->state = er_lease_state_at(l, now);
            return er_error_set(err, ER_ECONFLICT, "run_key", "the run key is %s",
                                l->state == ER_LEASE_DONE ? "done" : "held by another owner");
        }
        bool applied;
        rc = rows->put(s, l, fence, type, code, run_key, now, &applied, err);
        if (rc < 0 || applied)
            return rc;
    }
    return er_error_set(err, ER_EUNAVAIL, "run_key", "store: lease '%s' is contended", key);
}

int er_lease_rows_acquire(const er_lease_rows *rows, er_store *s, const char *type,
                          const char *code, const char *run_key, const char *key, int64_t ttl_ms,
                          int64_t now, er_lease *out, er_error *err)
{
    bool own;
    int rc = rows->begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_lease l;
    rc = acquire_in_tx(rows, s, type, code, run_key, key, ttl_ms, rows->now(s, now), &l, err);
    int end = rows->end(s, own, rc == ER_ECONFLICT ? 0 : rc, err);
    if (end < 0)
        return end;
    if (rc == 0 || rc == ER_ECONFLICT)
        *out = l;
    return rc;
}

static int apply(er_lease_op op, er_lease *l, const char *token, int64_t now, int64_t ttl_ms)
{
    switch (op) {
    case ER_LEASE_OP_RENEW:
        return er_lease_renew(l, token, now, ttl_ms);
    case ER_LEASE_OP_COMPLETE:
        return er_lease_complete(l, token, now);
    case ER_LEASE_OP_RELEASE:
    default:
        return er_lease_release(l, token, now);
    }
}

static int by_owner_in_tx(const er_lease_rows *rows, er_store *s, er_lease_op op,
                          const char *owner_token, int64_t ttl_ms, int64_t now, er_lease *l,
                          er_error *err)
{
    int rc = rows->read(s, true, owner_token, l, err);
    if (rc == ER_ENOTFOUND)
        return er_error_set(err, ER_ESTALE, "owner_token",
                            "no lease has this owner token (reclaimed, released or never issued)");
    if (rc < 0)
        return rc;
    er_lease before = *l;
    rc = apply(op, l, owner_token, now, ttl_ms);
    if (rc == ER_ESTALE)
        return er_error_set(err, ER_ESTALE, "owner_token",
                            before.state == ER_LEASE_DONE ? "the lease is done"
                                                          : "the lease expired");
    if (rc < 0 || memcmp(&before, l, sizeof *l) == 0)
        return rc;
    bool applied;
    rc = rows->put(s, l, before.fence, NULL, NULL, NULL, now, &applied, err);
    if (rc == 0 && !applied) /* the row is locked (or this is the one writer): a bug */
        rc = er_error_set(err, ER_EINTERNAL, "owner_token", "store: lease changed while locked");
    return rc;
}

int er_lease_rows_by_owner(const er_lease_rows *rows, er_store *s, er_lease_op op,
                           const char *owner_token, int64_t ttl_ms, int64_t now, er_lease *out,
                           er_error *err)
{
    if (!owner_token || !*owner_token)
        return er_error_set(err, ER_ESTALE, "owner_token", "no lease has this owner token");
    bool own;
    int rc = rows->begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_lease l;
    rc = by_owner_in_tx(rows, s, op, owner_token, ttl_ms, rows->now(s, now), &l, err);
    int end = rows->end(s, own, rc == ER_ESTALE ? 0 : rc, err);
    if (end < 0)
        return end;
    if (rc == 0)
        *out = l;
    return rc;
}
