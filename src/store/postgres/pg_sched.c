/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's schedulers, run-once leases and cursors. Scheduler
 * and cursor operations are one round trip each (upserts with ON CONFLICT;
 * a refused compare-and-set is explained by the same statement). Lease
 * decisions are core/lease.h's: an operation locks the lease row (FOR
 * UPDATE), decides in C and writes the result back guarded by the fence it
 * read, so two servers never both win. Every `now` is the store clock
 * (er_pg_now): PostgreSQL's now() unless the URL says clock=caller.
 */
#include "store/lease_rows.h"
#include "store/postgres/pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Attempts of an acquire that lost an insert race (the next one sees the
 * winner's row, so two are enough; one more for safety). */

static int nomem(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* Copies text column col (NULL for SQL NULL); -1 on ENOMEM. */
static int dup_col(const PGresult *r, int row, int col, char **dst)
{
    *dst = NULL;
    if (PQgetisnull(r, row, col))
        return 0;
    size_t n = (size_t)PQgetlength(r, row, col);
    char *p = malloc(n + 1);
    if (!p)
        return -1;
    memcpy(p, PQgetvalue(r, row, col), n);
    p[n] = '\0';
    *dst = p;
    return 0;
}

/* ---- schedulers ---- */

/* Columns: key, spec, created_at, updated_at, last_tick, next_run_at. */
static int row_sched(const PGresult *r, int row, er_sched_row *out, er_error *err)
{
    memset(out, 0, sizeof *out);
    int bad = dup_col(r, row, 0, &out->key) | dup_col(r, row, 1, &out->spec);
    out->created_at = er_pg_i64(r, row, 2);
    out->updated_at = er_pg_i64(r, row, 3);
    out->last_tick = er_pg_i64(r, row, 4);
    out->next_run_at = er_pg_i64(r, row, 5);
    if (bad) {
        er_sched_row_fini(out);
        return nomem(err);
    }
    return 0;
}

int er_pg_scheduler_put(er_store *s, const er_sched_row *in, int64_t now, bool *created,
                        er_sched_row *out, er_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_pg_params p = {0};
    er_pg_p_str(&p, in->key);
    er_pg_p_str(&p, in->spec);
    er_pg_p_i64(&p, er_pg_now(s, now));
    er_pg_p_i64(&p, in->next_run_at);
    PGresult *r;
    bool inserted = false;
    rc = er_pg_exec(s, ER_PG_SCHED_PUT, &p, &r, err);
    if (rc == 0) {
        inserted = PQgetvalue(r, 0, 6)[0] == 't';
        if (out)
            rc = row_sched(r, 0, out, err);
        PQclear(r);
    }
    rc = er_pg_op_end(s, own, rc, err);
    if (rc < 0 && out)
        er_sched_row_fini(out);
    if (rc == 0 && created)
        *created = inserted;
    return rc;
}

int er_pg_scheduler_get(er_store *s, const char *key, er_sched_row *out, er_error *err)
{
    memset(out, 0, sizeof *out);
    er_pg_params p = {0};
    er_pg_p_str(&p, key);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_SCHED_GET, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0)
        rc = er_error_set(err, ER_ENOTFOUND, "key", "scheduler '%s' not found", key);
    else
        rc = row_sched(r, 0, out, err);
    PQclear(r);
    return rc;
}

/* Runs statement id (rows are schedulers) and appends them to *out; on
 * failure *out is as it was. */
static int sched_rows(er_store *s, int id, const er_pg_params *p, er_sched_list *out,
                      er_error *err)
{
    PGresult *r;
    int rc = er_pg_exec(s, id, p, &r, err);
    if (rc < 0)
        return rc;
    size_t base = out->len;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        er_sched_row *row = er_sched_list_push(out);
        if (!row) {
            rc = nomem(err);
        } else if ((rc = row_sched(r, i, row, err)) < 0) {
            out->len--;
        }
    }
    PQclear(r);
    if (rc < 0)
        while (out->len > base)
            er_sched_row_fini(&out->items[--out->len]);
    return rc;
}

/* LIMIT NULL is no limit, as a negative limit is in SQLite. */
static void p_limit(er_pg_params *p, int limit)
{
    if (limit < 0)
        er_pg_p_str(p, NULL);
    else
        er_pg_p_i64(p, limit);
}

int er_pg_scheduler_list(er_store *s, const char *after, int limit, er_sched_list *out,
                         er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, after ? after : "");
    p_limit(&p, limit);
    return sched_rows(s, ER_PG_SCHED_LIST, &p, out, err);
}

int er_pg_scheduler_delete(er_store *s, const char *key, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, key);
    int64_t n = 0;
    int rc = er_pg_run(s, ER_PG_SCHED_DELETE, &p, &n, err);
    if (rc == 0 && n == 0)
        rc = er_error_set(err, ER_ENOTFOUND, "key", "scheduler '%s' not found", key);
    return rc;
}

int er_pg_scheduler_due(er_store *s, int64_t now, int limit, er_sched_list *out, er_error *err)
{
    size_t base = out->len;
    bool own;
    int rc = er_pg_op_begin(s, &own, err); /* the store clock is read at BEGIN */
    if (rc < 0)
        return rc;
    er_pg_params p = {0};
    er_pg_p_i64(&p, er_pg_now(s, now));
    p_limit(&p, limit);
    rc = sched_rows(s, ER_PG_SCHED_DUE, &p, out, err);
    rc = er_pg_op_end(s, own, rc, err);
    if (rc < 0)
        while (out->len > base)
            er_sched_row_fini(&out->items[--out->len]);
    return rc;
}

int er_pg_scheduler_advance(er_store *s, const char *key, int64_t expected_next,
                            int64_t last_tick, int64_t next_run_at, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, key);
    er_pg_p_i64(&p, last_tick);
    er_pg_p_i64(&p, next_run_at);
    er_pg_p_i64(&p, expected_next);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_SCHED_ADVANCE, &p, &r, err);
    if (rc < 0)
        return rc;
    if (er_pg_i64(r, 0, 0) == 0) {
        if (PQgetvalue(r, 0, 1)[0] == 't')
            rc = er_error_set(err, ER_ECONFLICT, "key",
                              "scheduler '%s' changed since it was read", key);
        else
            rc = er_error_set(err, ER_ENOTFOUND, "key", "scheduler '%s' not found", key);
    }
    PQclear(r);
    return rc;
}

/* ---- leases ---- */

/* Locks and reads the lease that statement id selects by `arg`. Returns 0,
 * ER_ENOTFOUND (no row; err untouched) or a storage error. */
static int lease_lock(er_store *s, int id, const char *arg, er_lease *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, arg);
    PGresult *r;
    int rc = er_pg_exec(s, id, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0) {
        rc = ER_ENOTFOUND;
    } else {
        er_lease_init(out, PQgetvalue(r, 0, 0));
        out->state = (er_lease_state)er_pg_i64(r, 0, 1);
        snprintf(out->owner_token, sizeof out->owner_token, "%s",
                 PQgetisnull(r, 0, 2) ? "" : PQgetvalue(r, 0, 2));
        out->fence = er_pg_i64(r, 0, 3);
        out->expires_at = er_pg_i64(r, 0, 4);
        out->completed_at = er_pg_i64(r, 0, 5);
    }
    PQclear(r);
    return rc;
}

/* Writes *l (inserting it when new) only while the stored fence is still
 * `fence` (0: no row yet). *applied = false when another transaction got
 * there first. type/code/run_key are only stored by an insert. */
static int lease_put(er_store *s, const er_lease *l, int64_t fence, const char *type,
                     const char *code, const char *run_key, int64_t now, bool *applied,
                     er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, l->idempotency_key);
    er_pg_p_str(&p, type ? type : "");
    er_pg_p_str(&p, code ? code : "");
    er_pg_p_str(&p, run_key ? run_key : "");
    er_pg_p_i64(&p, (int64_t)l->state);
    er_pg_p_str(&p, l->owner_token[0] ? l->owner_token : NULL);
    er_pg_p_i64(&p, l->fence);
    er_pg_p_i64(&p, l->expires_at);
    er_pg_p_i64(&p, l->completed_at);
    er_pg_p_i64(&p, now);
    er_pg_p_i64(&p, fence);
    int64_t n = 0;
    int rc = er_pg_run(s, ER_PG_LEASE_PUT, &p, &n, err);
    *applied = n > 0;
    return rc;
}

static int lease_read(er_store *s, bool by_token, const char *arg, er_lease *out, er_error *err)
{
    return lease_lock(s, by_token ? ER_PG_LEASE_BY_TOKEN : ER_PG_LEASE_LOCK, arg, out, err);
}

static const er_lease_rows lease_rows = {
    .read = lease_read,
    .put = lease_put,
    .begin = er_pg_op_begin,
    .end = er_pg_op_end,
    .now = er_pg_now,
};

int er_pg_lease_acquire(er_store *s, const char *type, const char *code, const char *run_key,
                        const char *key, int64_t ttl_ms, int64_t now, er_lease *out,
                        er_error *err)
{
    return er_lease_rows_acquire(&lease_rows, s, type, code, run_key, key, ttl_ms, now, out,
                                 err);
}

int er_pg_lease_renew(er_store *s, const char *owner_token, int64_t ttl_ms, int64_t now,
                      er_lease *out, er_error *err)
{
    return er_lease_rows_by_owner(&lease_rows, s, ER_LEASE_OP_RENEW, owner_token, ttl_ms, now,
                                  out, err);
}

int er_pg_lease_complete(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                         er_error *err)
{
    return er_lease_rows_by_owner(&lease_rows, s, ER_LEASE_OP_COMPLETE, owner_token, 0, now, out,
                                  err);
}

int er_pg_lease_release(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                        er_error *err)
{
    return er_lease_rows_by_owner(&lease_rows, s, ER_LEASE_OP_RELEASE, owner_token, 0, now, out,
                                  err);
}

/* ---- cursors ---- */

/* Reads a cursor: 0, ER_ENOTFOUND (err untouched) or a storage error.
 * value / updated_at may be NULL. */
static int cursor_read(er_store *s, const char *name, char **value, int64_t *updated_at,
                       er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, name);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_CURSOR_GET, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0) {
        rc = ER_ENOTFOUND;
    } else {
        if (value && dup_col(r, 0, 0, value) < 0)
            rc = nomem(err);
        if (rc == 0 && updated_at)
            *updated_at = er_pg_i64(r, 0, 1);
    }
    PQclear(r);
    return rc;
}

int er_pg_cursor_get(er_store *s, const char *name, char **value, int64_t *updated_at,
                     er_error *err)
{
    int rc = cursor_read(s, name, value, updated_at, err);
    if (rc == ER_ENOTFOUND)
        return er_error_set(err, ER_ENOTFOUND, "name", "cursor '%s' not found", name);
    return rc;
}

/* One CURSOR_CAS round trip; a refusal fills *cur with the stored value
 * (NULL when none). */
static int cas_in_tx(er_store *s, const char *name, bool check, const char *expected,
                     const char *value, int64_t now, char **cur, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, name);
    er_pg_p_str(&p, value);
    er_pg_p_i64(&p, now);
    er_pg_p_bool(&p, check);
    er_pg_p_str(&p, check ? expected : NULL);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_CURSOR_CAS, &p, &r, err);
    if (rc < 0)
        return rc;
    bool applied = er_pg_i64(r, 0, 0) > 0;
    if (!applied && dup_col(r, 0, 1, cur) < 0)
        rc = nomem(err);
    PQclear(r);
    if (applied || rc < 0)
        return rc;
    /* The value shown is of the statement's snapshot. When it would have
     * matched, a transaction that committed meanwhile changed the cursor
     * (the write waited for it): read what it left. */
    if (expected ? *cur && strcmp(*cur, expected) == 0 : !*cur) {
        free(*cur);
        *cur = NULL;
        rc = cursor_read(s, name, cur, NULL, err);
        if (rc == ER_ENOTFOUND)
            rc = 0;
        if (rc < 0)
            return rc;
    }
    return er_error_set(err, ER_ECONFLICT, "expected", "cursor '%s' is not at the expected value",
                        name);
}

int er_pg_cursor_cas(er_store *s, const char *name, bool check, const char *expected,
                     const char *value, int64_t now, char **current, er_error *err)
{
    if (current)
        *current = NULL;
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    char *cur = NULL;
    rc = cas_in_tx(s, name, check, expected, value, er_pg_now(s, now), &cur, err);
    int end = er_pg_op_end(s, own, rc == ER_ECONFLICT ? 0 : rc, err);
    if (end < 0 || rc != ER_ECONFLICT || !current)
        free(cur);
    else
        *current = cur;
    return end < 0 ? end : rc;
}

/* ---- lists for inspection ---- */

int er_pg_lease_list(er_store *s, const char *after, int limit, int64_t now, er_lease_list *out,
                     er_error *err)
{
    bool own;
    int rc = er_pg_op_begin(s, &own, err); /* the store clock is read at BEGIN */
    if (rc < 0)
        return rc;
    now = er_pg_now(s, now);
    er_pg_params p = {0};
    er_pg_p_str(&p, after ? after : "");
    p_limit(&p, limit);
    PGresult *r = NULL;
    size_t base = out->len;
    rc = er_pg_exec(s, ER_PG_LEASE_LIST, &p, &r, err);
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        er_lease_row *row = er_lease_list_push(out);
        if (!row) {
            rc = nomem(err);
            break;
        }
        er_lease_init(&row->lease, PQgetvalue(r, i, 0));
        row->lease.state = (er_lease_state)er_pg_i64(r, i, 1);
        row->lease.fence = er_pg_i64(r, i, 2);
        row->lease.expires_at = er_pg_i64(r, i, 3);
        row->lease.completed_at = er_pg_i64(r, i, 4);
        row->lease.state = er_lease_state_at(&row->lease, now);
        if ((dup_col(r, i, 5, &row->type) | dup_col(r, i, 6, &row->code) |
             dup_col(r, i, 7, &row->run_key)) < 0)
            rc = nomem(err);
        row->created_at = er_pg_i64(r, i, 8);
        row->updated_at = er_pg_i64(r, i, 9);
    }
    if (r)
        PQclear(r);
    rc = er_pg_op_end(s, own, rc, err);
    if (rc < 0)
        er_lease_list_truncate(out, base);
    return rc;
}

int er_pg_cursor_list(er_store *s, const char *after, int limit, er_cursor_list *out,
                      er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, after ? after : "");
    p_limit(&p, limit);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_CURSOR_LIST, &p, &r, err);
    if (rc < 0)
        return rc;
    size_t base = out->len;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        er_cursor_row *row = er_cursor_list_push(out);
        if (!row || (dup_col(r, i, 0, &row->name) | dup_col(r, i, 1, &row->value)) < 0)
            rc = nomem(err);
        else
            row->updated_at = er_pg_i64(r, i, 2);
    }
    PQclear(r);
    if (rc < 0)
        er_cursor_list_truncate(out, base);
    return rc;
}
