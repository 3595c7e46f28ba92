/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's dashboard sessions, audit log and the selection
 * of a bulk action's jobs (store.h): row work only, as SQLite's ui.c. Idle expiry is judged against the caller's
 * `now` (the server's clock), like the session's creation time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/postgres/pg_int.h"

void er_pg_copy_col(const PGresult *r, int row, int col, char *dst, size_t cap)
{
    snprintf(dst, cap, "%s", PQgetisnull(r, row, col) ? "" : PQgetvalue(r, row, col));
}

static char *dup_col(const PGresult *r, int row, int col, bool *oom)
{
    if (PQgetisnull(r, row, col))
        return NULL;
    char *d = strdup(PQgetvalue(r, row, col));
    if (!d)
        *oom = true;
    return d;
}

int er_pg_session_put(er_store *s, const char *hash, const er_session *in, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, hash);
    er_pg_p_i64(&p, in->role);
    er_pg_p_str(&p, in->name);
    er_pg_p_str(&p, in->csrf);
    er_pg_p_i64(&p, in->created_at);
    er_pg_p_i64(&p, in->expires_at);
    return er_pg_run(s, ER_PG_SESSION_PUT, &p, NULL, err);
}

int er_pg_session_touch(er_store *s, const char *hash, int64_t now, int64_t idle_ms,
                        er_session *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, hash);
    er_pg_p_i64(&p, now);
    er_pg_p_i64(&p, now + idle_ms);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_SESSION_TOUCH, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return er_error_set(err, ER_ENOTFOUND, "session", "no such session, or it expired");
    }
    memset(out, 0, sizeof *out);
    out->role = (int)er_pg_i64(r, 0, 0);
    er_pg_copy_col(r, 0, 1, out->name, sizeof out->name);
    er_pg_copy_col(r, 0, 2, out->csrf, sizeof out->csrf);
    out->created_at = er_pg_i64(r, 0, 3);
    out->expires_at = er_pg_i64(r, 0, 4);
    PQclear(r);
    return 0;
}

int er_pg_session_delete(er_store *s, const char *hash, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, hash);
    return er_pg_run(s, ER_PG_SESSION_DELETE, &p, NULL, err);
}

int er_pg_audit_add(er_store *s, er_audit *a, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_i64(&p, a->at);
    er_pg_p_str(&p, a->who ? a->who : "");
    er_pg_p_str(&p, a->action ? a->action : "");
    er_pg_p_str(&p, a->target);
    er_pg_p_i64(&p, a->count);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_AUDIT_ADD, &p, &r, err);
    if (rc < 0)
        return rc;
    a->seq = er_pg_i64(r, 0, 0);
    PQclear(r);
    return 0;
}

int er_pg_audit_list(er_store *s, int64_t before, int limit, er_audit_list *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_i64(&p, before);
    er_pg_p_i64(&p, limit);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_AUDIT_LIST, &p, &r, err);
    if (rc < 0)
        return rc;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        er_audit *a = er_audit_list_push(out);
        bool oom = !a;
        if (a) {
            a->seq = er_pg_i64(r, i, 0);
            a->at = er_pg_i64(r, i, 1);
            a->who = dup_col(r, i, 2, &oom);
            a->action = dup_col(r, i, 3, &oom);
            a->target = dup_col(r, i, 4, &oom);
            a->count = er_pg_i64(r, i, 5);
        }
        if (oom)
            rc = er_pg_nomem(err);
    }
    PQclear(r);
    return rc;
}

int er_pg_ui_sweep(er_store *s, int64_t now, int64_t audit_before, int limit, int *n,
                   er_error *err)
{
    *n = 0;
    er_pg_params p = {0};
    er_pg_p_i64(&p, now);
    er_pg_p_i64(&p, limit);
    int64_t a = 0, b = 0;
    int rc = er_pg_run(s, ER_PG_SESSION_SWEEP, &p, &a, err);
    if (rc < 0)
        return rc;
    er_pg_params q = {0};
    er_pg_p_i64(&q, audit_before);
    er_pg_p_i64(&q, limit);
    rc = er_pg_run(s, ER_PG_AUDIT_SWEEP, &q, &b, err);
    if (rc == 0)
        *n = (int)(a + b);
    return rc;
}

static void filter_params(er_pg_params *p, const er_bulk_filter *f)
{
    er_pg_p_i64(p, (int64_t)f->state);
    er_pg_p_str(p, f->queue);
    er_pg_p_str(p, f->name);
    er_pg_p_i64(p, f->not_redriven);
    er_pg_p_i64(p, (int64_t)f->tries);
}

int er_pg_bulk_ids(er_store *s, const er_bulk_filter *f, int64_t after, int limit, char ***ids,
                   size_t *n, int64_t *last, er_error *err)
{
    *ids = NULL;
    *n = 0;
    er_pg_params p = {0};
    filter_params(&p, f);
    er_pg_p_i64(&p, after);
    er_pg_p_i64(&p, limit);
    PGresult *r;
    int rc = er_pg_exec(s, f->queue ? ER_PG_BULK_IDS_QUEUE : ER_PG_BULK_IDS, &p, &r, err);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    char **v = calloc((size_t)(rows > 0 ? rows : 1), sizeof *v);
    bool oom = !v;
    for (int i = 0; !oom && i < rows; i++) {
        v[i] = dup_col(r, i, 0, &oom);
        *last = er_pg_i64(r, i, 1);
    }
    PQclear(r);
    if (oom) {
        for (int i = 0; v && i < rows; i++)
            free(v[i]);
        free(v);
        return er_pg_nomem(err);
    }
    *ids = v;
    *n = (size_t)rows;
    return 0;
}

int er_pg_bulk_count(er_store *s, const er_bulk_filter *f, int64_t *n, er_error *err)
{
    er_pg_params p = {0};
    filter_params(&p, f);
    PGresult *r;
    int rc = er_pg_exec(s, f->queue ? ER_PG_BULK_COUNT_QUEUE : ER_PG_BULK_COUNT, &p, &r, err);
    if (rc < 0)
        return rc;
    *n = er_pg_i64(r, 0, 0);
    PQclear(r);
    return 0;
}

int er_pg_move_scheduled(er_store *s, const char *id, const char *last_error, int64_t now,
                         char **queue, er_error *err)
{
    *queue = NULL;
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_pg_params p = {0};
    er_pg_p_i64(&p, er_pg_now(s, now));
    er_pg_p_str(&p, id);
    er_pg_p_str(&p, last_error);
    PGresult *r;
    int mrc = er_pg_exec(s, ER_PG_MOVE_SCHEDULED, &p, &r, err);
    if (mrc == 0) {
        bool oom = false;
        if (PQntuples(r) == 0)
            mrc = er_error_set(err, ER_ENOTFOUND, "id", "no scheduled job '%s'", id);
        else if (!(*queue = dup_col(r, 0, 0, &oom)) || oom)
            mrc = er_pg_nomem(err);
        PQclear(r);
    }
    rc = er_pg_op_end(s, own, mrc, err);
    if (rc < 0) {
        free(*queue);
        *queue = NULL;
    }
    return rc;
}
