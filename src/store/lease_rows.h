/* SPDX-License-Identifier: MIT
 *
 * Run-once leases over a store's rows, written once for both stores: each
 * store gives the row access (read a lease by key or by owner token, write
 * it back while its fence is unchanged, its transaction and clock) and these
 * apply core/lease.h's rules. Internal to src/store.
 */
#ifndef ER_STORE_LEASE_ROWS_H
#define ER_STORE_LEASE_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

typedef struct er_lease_rows {
    /* Reads the lease whose key (by_token false) or owner token is arg,
     * locking its row where the store locks rows. 0, ER_ENOTFOUND (err
     * untouched) or a storage error. */
    int (*read)(er_store *s, bool by_token, const char *arg, er_lease *out, er_error *err);
    /* Writes *l while the stored fence is still `fence` (0: no row yet);
     * *applied = false when another transaction changed it first.
     * type/code/run_key are stored by an insert only. */
    int (*put)(er_store *s, const er_lease *l, int64_t fence, const char *type, const char *code,
               const char *run_key, int64_t now, bool *applied, er_error *err);
    /* The store's transaction helpers and clock (er_*_op_begin/_end). */
    int (*begin)(er_store *s, bool *own, er_error *err);
    int (*end)(er_store *s, bool own, int rc, er_error *err);
    int64_t (*now)(const er_store *s, int64_t caller_now);
} er_lease_rows;

typedef enum er_lease_op { ER_LEASE_OP_RENEW, ER_LEASE_OP_COMPLETE, ER_LEASE_OP_RELEASE } er_lease_op;

/* ops->lease_acquire, as store.h describes it, over rows. */
int er_lease_rows_acquire(const er_lease_rows *rows, er_store *s, const char *type,
                          const char *code, const char *run_key, const char *key, int64_t ttl_ms,
                          int64_t now, er_lease *out, er_error *err);

/* ops->lease_renew / _complete / _release by owner token, over rows. */
int er_lease_rows_by_owner(const er_lease_rows *rows, er_store *s, er_lease_op op,
                           const char *owner_token, int64_t ttl_ms, int64_t now, er_lease *out,
                           er_error *err);

#endif
