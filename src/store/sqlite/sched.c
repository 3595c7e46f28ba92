/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's schedulers, run-once leases and cursors. Each operation
 * runs in the caller's transaction or, outside one, in its own. Lease
 * decisions are core/lease.h's; this file only reads and writes rows, and
 * judges expiry by the `now` it is given (the engine's server clock).
 */
#include "store/lease_rows.h"
#include "store/sqlite/sqlite_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int oom(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

static char *col_text(sqlite3_stmt *st, int i, bool *bad)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (!t) {
        if (sqlite3_column_type(st, i) != SQLITE_NULL)
            *bad = true;
        return NULL;
    }
    char *p = strdup((const char *)t);
    if (!p)
        *bad = true;
    return p;
}

/* ---- schedulers ---- */

static int row_sched(sqlite3_stmt *st, er_sched_row *r, er_error *err)
{
    bool bad = false;
    r->key = col_text(st, 0, &bad);
    r->spec = col_text(st, 1, &bad);
    r->created_at = sqlite3_column_int64(st, 2);
    r->updated_at = sqlite3_column_int64(st, 3);
    r->last_tick = sqlite3_column_int64(st, 4);
    r->next_run_at = sqlite3_column_int64(st, 5);
    if (bad) {
        er_sched_row_fini(r);
        return oom(err);
    }
    return 0;
}

static int sched_get(er_store *s, const char *key, er_sched_row *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SCHED_GET, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        rc = out ? row_sched(st, out, err) : 0;
    else if (src == SQLITE_DONE)
        rc = er_error_set(err, ER_ENOTFOUND, "key", "scheduler '%s' not found", key);
    else
        rc = er_sqlite_error(s->db, src, "read scheduler", err);
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_scheduler_get(er_store *s, const char *key, er_sched_row *out, er_error *err)
{
    memset(out, 0, sizeof *out);
    return sched_get(s, key, out, err);
}

int er_sqlite_scheduler_put(er_store *s, const er_sched_row *in, int64_t now, bool *created,
                            er_sched_row *out, er_error *err)
{
    bool own;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    rc = sched_get(s, in->key, NULL, err);
    bool existed = rc == 0;
    if (rc == ER_ENOTFOUND)
        rc = 0;
    sqlite3_stmt *st = NULL;
    if (rc == 0)
        rc = er_sqlite_prep(s, ER_SQ_SCHED_PUT, &st, err);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, in->key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, in->spec, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, now);
        sqlite3_bind_int64(st, 4, in->next_run_at);
        rc = er_sqlite_run(s, st, err);
    }
    if (rc == 0 && out)
        rc = er_sqlite_scheduler_get(s, in->key, out, err);
    rc = er_sqlite_op_end(s, own, rc, err);
    if (rc < 0 && out)
        er_sched_row_fini(out);
    if (rc == 0 && created)
        *created = !existed;
    return rc;
}

/* Runs a statement whose rows are schedulers, appending them to *out. */
static int sched_rows(er_store *s, sqlite3_stmt *st, er_sched_list *out, er_error *err)
{
    int rc = 0, src;
    while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
        er_sched_row *r = er_sched_list_push(out);
        rc = r ? row_sched(st, r, err) : oom(err);
        if (rc < 0 && r)
            out->len--;
    }
    if (rc == 0 && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "read schedulers", err);
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_scheduler_list(er_store *s, const char *after, int limit, er_sched_list *out,
                             er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SCHED_LIST, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, after ? after : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, limit);
    return sched_rows(s, st, out, err);
}

int er_sqlite_scheduler_due(er_store *s, int64_t now, int limit, er_sched_list *out,
                            er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SCHED_DUE, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int(st, 2, limit);
    return sched_rows(s, st, out, err);
}

int er_sqlite_scheduler_delete(er_store *s, const char *key, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SCHED_DELETE, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = er_sqlite_run(s, st, err);
    if (rc == 0 && sqlite3_changes(s->db) == 0)
        rc = er_error_set(err, ER_ENOTFOUND, "key", "scheduler '%s' not found", key);
    return rc;
}

int er_sqlite_scheduler_advance(er_store *s, const char *key, int64_t expected_next,
                                int64_t last_tick, int64_t next_run_at, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SCHED_ADVANCE, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, last_tick);
    sqlite3_bind_int64(st, 3, next_run_at);
    sqlite3_bind_int64(st, 4, expected_next);
    rc = er_sqlite_run(s, st, err);
    if (rc == 0 && sqlite3_changes(s->db) == 0) {
        rc = sched_get(s, key, NULL, err);
        if (rc == 0)
            rc = er_error_set(err, ER_ECONFLICT, "key",
                              "scheduler '%s' changed since it was read", key);
    }
    return rc;
}

/* ---- leases (the rules: store/lease_rows.c over these rows) ---- */

static int lease_read(er_store *s, bool by_token, const char *arg, er_lease *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, by_token ? ER_SQ_LEASE_BY_TOKEN : ER_SQ_LEASE_GET, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        er_lease_init(out, (const char *)sqlite3_column_text(st, 0));
        out->state = (er_lease_state)sqlite3_column_int(st, 1);
        const unsigned char *tok = sqlite3_column_text(st, 2);
        snprintf(out->owner_token, sizeof out->owner_token, "%s", tok ? (const char *)tok : "");
        out->fence = sqlite3_column_int64(st, 3);
        out->expires_at = sqlite3_column_int64(st, 4);
        out->completed_at = sqlite3_column_int64(st, 5);
    } else if (src == SQLITE_DONE) {
        rc = ER_ENOTFOUND;
    } else {
        rc = er_sqlite_error(s->db, src, "read lease", err);
    }
    sqlite3_reset(st);
    return rc;
}

static int lease_put(er_store *s, const er_lease *l, int64_t fence, const char *type,
                     const char *code, const char *run_key, int64_t now, bool *applied,
                     er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_LEASE_PUT, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, l->idempotency_key, -1, SQLITE_STATIC);
    /* on update type/code/run_key are not changed (the key derives from them) */
    sqlite3_bind_text(st, 2, type ? type : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, code ? code : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, run_key ? run_key : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 5, (int)l->state);
    if (l->owner_token[0])
        sqlite3_bind_text(st, 6, l->owner_token, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 6);
    sqlite3_bind_int64(st, 7, l->fence);
    sqlite3_bind_int64(st, 8, l->expires_at);
    sqlite3_bind_int64(st, 9, l->completed_at);
    sqlite3_bind_int64(st, 10, now);
    sqlite3_bind_int64(st, 11, fence);
    rc = er_sqlite_run(s, st, err);
    *applied = rc == 0 && sqlite3_changes(s->db) > 0;
    return rc;
}

static int64_t lease_now(const er_store *s, int64_t now)
{
    (void)s;
    return now;
}

static const er_lease_rows lease_rows = {
    .read = lease_read,
    .put = lease_put,
    .begin = er_sqlite_op_begin,
    .end = er_sqlite_op_end,
    .now = lease_now,
};

int er_sqlite_lease_acquire(er_store *s, const char *type, const char *code, const char *run_key,
                            const char *key, int64_t ttl_ms, int64_t now,
                            er_lease *out, er_error *err)
{
    return er_lease_rows_acquire(&lease_rows, s, type, code, run_key, key, ttl_ms, now, out,
                                 err);
}

int er_sqlite_lease_renew(er_store *s, const char *owner_token, int64_t ttl_ms, int64_t now,
                          er_lease *out, er_error *err)
{
    return er_lease_rows_by_owner(&lease_rows, s, ER_LEASE_OP_RENEW, owner_token, ttl_ms, now,
                                  out, err);
}

int er_sqlite_lease_complete(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                             er_error *err)
{
    return er_lease_rows_by_owner(&lease_rows, s, ER_LEASE_OP_COMPLETE, owner_token, 0, now,
                                  out, err);
}

int er_sqlite_lease_release(er_store *s, const char *owner_token, int64_t now, er_lease *out,
                            er_error *err)
{
    return er_lease_rows_by_owner(&lease_rows, s, ER_LEASE_OP_RELEASE, owner_token, 0, now,
                                  out, err);
}

/* ---- cursors ---- */

static int cursor_read(er_store *s, const char *name, char **value, int64_t *updated_at,
                       er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_CURSOR_GET, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        bool bad = false;
        char *v = col_text(st, 0, &bad);
        if (bad || !v)
            rc = oom(err);
        else if (value)
            *value = v;
        else
            free(v);
        if (rc == 0 && updated_at)
            *updated_at = sqlite3_column_int64(st, 1);
    } else if (src == SQLITE_DONE) {
        rc = ER_ENOTFOUND;
    } else {
        rc = er_sqlite_error(s->db, src, "read cursor", err);
    }
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_cursor_get(er_store *s, const char *name, char **value, int64_t *updated_at,
                         er_error *err)
{
    int rc = cursor_read(s, name, value, updated_at, err);
    if (rc == ER_ENOTFOUND)
        return er_error_set(err, ER_ENOTFOUND, "name", "cursor '%s' not found", name);
    return rc;
}

int er_sqlite_cursor_cas(er_store *s, const char *name, bool check, const char *expected,
                         const char *value, int64_t now, char **current, er_error *err)
{
    if (current)
        *current = NULL;
    bool own;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    if (check) {
        char *cur = NULL;
        rc = cursor_read(s, name, &cur, NULL, err);
        bool absent = rc == ER_ENOTFOUND;
        if (absent)
            rc = 0;
        if (rc == 0) {
            bool match = expected ? (!absent && strcmp(cur, expected) == 0) : absent;
            if (!match) {
                rc = er_error_set(err, ER_ECONFLICT, "expected",
                                  "cursor '%s' is not at the expected value", name);
                if (current) {
                    *current = cur;
                    cur = NULL;
                }
            }
        }
        free(cur);
    }
    if (rc == 0) {
        sqlite3_stmt *st = NULL;
        rc = er_sqlite_prep(s, ER_SQ_CURSOR_PUT, &st, err);
        if (rc == 0) {
            sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 3, now);
            rc = er_sqlite_run(s, st, err);
        }
    }
    int end = er_sqlite_op_end(s, own, rc == ER_ECONFLICT ? 0 : rc, err);
    if (end < 0) {
        if (current) {
            free(*current);
            *current = NULL;
        }
        return end;
    }
    return rc;
}

/* ---- lists for inspection ---- */

int er_sqlite_lease_list(er_store *s, const char *after, int limit, int64_t now,
                         er_lease_list *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_LEASE_LIST, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, after ? after : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, limit);
    size_t base = out->len;
    int src = SQLITE_DONE;
    while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
        er_lease_row *r = er_lease_list_push(out);
        if (!r) {
            rc = oom(err);
            break;
        }
        const unsigned char *key = sqlite3_column_text(st, 0);
        bool bad = !key;
        er_lease_init(&r->lease, key ? (const char *)key : "");
        r->lease.state = (er_lease_state)sqlite3_column_int(st, 1);
        r->lease.fence = sqlite3_column_int64(st, 2);
        r->lease.expires_at = sqlite3_column_int64(st, 3);
        r->lease.completed_at = sqlite3_column_int64(st, 4);
        r->lease.state = er_lease_state_at(&r->lease, now);
        r->type = col_text(st, 5, &bad);
        r->code = col_text(st, 6, &bad);
        r->run_key = col_text(st, 7, &bad);
        r->created_at = sqlite3_column_int64(st, 8);
        r->updated_at = sqlite3_column_int64(st, 9);
        if (bad)
            rc = oom(err);
    }
    if (rc == 0 && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "list leases", err);
    sqlite3_reset(st);
    if (rc < 0)
        er_lease_list_truncate(out, base);
    return rc;
}

int er_sqlite_cursor_list(er_store *s, const char *after, int limit, er_cursor_list *out,
                          er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_CURSOR_LIST, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, after ? after : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, limit);
    size_t base = out->len;
    int src = SQLITE_DONE;
    while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
        er_cursor_row *r = er_cursor_list_push(out);
        bool bad = !r;
        if (r) {
            r->name = col_text(st, 0, &bad);
            r->value = col_text(st, 1, &bad);
            r->updated_at = sqlite3_column_int64(st, 2);
        }
        if (bad || !r->name || !r->value)
            rc = oom(err);
    }
    if (rc == 0 && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "list cursors", err);
    sqlite3_reset(st);
    if (rc < 0)
        er_cursor_list_truncate(out, base);
    return rc;
}
