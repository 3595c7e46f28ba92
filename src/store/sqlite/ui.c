/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's dashboard sessions, audit log and the selection of
 * a bulk action's jobs (store.h): row work only. Sessions are keyed by the hash of their id, which the frontend
 * computes; idle expiry is judged against the caller's `now`. Every call
 * runs inside the caller's transaction (the engine's writer) or alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite/sqlite_int.h"

void er_sqlite_col_copy(sqlite3_stmt *st, int i, char *dst, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

static char *col_dup(sqlite3_stmt *st, int i, bool *oom)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (!t)
        return NULL;
    char *d = strdup((const char *)t);
    if (!d)
        *oom = true;
    return d;
}

int er_sqlite_session_put(er_store *s, const char *hash, const er_session *in, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SESSION_PUT, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, in->role);
    sqlite3_bind_text(st, 3, in->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, in->csrf, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, in->created_at);
    sqlite3_bind_int64(st, 6, in->expires_at);
    return er_sqlite_run(s, st, err);
}

int er_sqlite_session_touch(er_store *s, const char *hash, int64_t now, int64_t idle_ms,
                            er_session *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SESSION_TOUCH, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now);
    sqlite3_bind_int64(st, 3, now + idle_ms);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        memset(out, 0, sizeof *out);
        out->role = sqlite3_column_int(st, 0);
        er_sqlite_col_copy(st, 1, out->name, sizeof out->name);
        er_sqlite_col_copy(st, 2, out->csrf, sizeof out->csrf);
        out->created_at = sqlite3_column_int64(st, 3);
        out->expires_at = sqlite3_column_int64(st, 4);
        rc = 0;
    } else if (step == SQLITE_DONE) {
        rc = er_error_set(err, ER_ENOTFOUND, "session", "no such session, or it expired");
    } else {
        rc = er_sqlite_error(s->db, step, "session", err);
    }
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_session_delete(er_store *s, const char *hash, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SESSION_DELETE, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
    return er_sqlite_run(s, st, err);
}

int er_sqlite_audit_add(er_store *s, er_audit *a, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_AUDIT_ADD, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, a->at);
    sqlite3_bind_text(st, 2, a->who ? a->who : "", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, a->action ? a->action : "", -1, SQLITE_STATIC);
    if (a->target)
        sqlite3_bind_text(st, 4, a->target, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_int64(st, 5, a->count);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        a->seq = sqlite3_column_int64(st, 0);
        rc = 0;
    } else {
        rc = er_sqlite_error(s->db, step == SQLITE_DONE ? SQLITE_ERROR : step, "audit", err);
    }
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_audit_list(er_store *s, int64_t before, int limit, er_audit_list *out,
                         er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_AUDIT_LIST, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, before);
    sqlite3_bind_int(st, 2, limit);
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        er_audit *a = er_audit_list_push(out);
        bool oom = !a;
        if (a) {
            a->seq = sqlite3_column_int64(st, 0);
            a->at = sqlite3_column_int64(st, 1);
            a->who = col_dup(st, 2, &oom);
            a->action = col_dup(st, 3, &oom);
            a->target = col_dup(st, 4, &oom);
            a->count = sqlite3_column_int64(st, 5);
        }
        if (oom) {
            sqlite3_reset(st);
            return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
        }
    }
    rc = step == SQLITE_DONE ? 0 : er_sqlite_error(s->db, step, "audit", err);
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_ui_sweep(er_store *s, int64_t now, int64_t audit_before, int limit, int *n,
                       er_error *err)
{
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_SESSION_SWEEP, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int(st, 2, limit);
    rc = er_sqlite_run(s, st, err);
    if (rc < 0)
        return rc;
    *n += sqlite3_changes(s->db);
    rc = er_sqlite_prep(s, ER_SQ_AUDIT_SWEEP, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, audit_before);
    sqlite3_bind_int(st, 2, limit);
    rc = er_sqlite_run(s, st, err);
    if (rc == 0)
        *n += sqlite3_changes(s->db);
    return rc;
}

static void bind_filter(sqlite3_stmt *st, const er_bulk_filter *f)
{
    sqlite3_bind_int(st, 1, (int)f->state);
    if (f->queue)
        sqlite3_bind_text(st, 2, f->queue, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 2);
    if (f->name)
        sqlite3_bind_text(st, 3, f->name, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 3);
    sqlite3_bind_int(st, 4, f->not_redriven);
    sqlite3_bind_int(st, 5, (int)f->tries);
}

int er_sqlite_bulk_ids(er_store *s, const er_bulk_filter *f, int64_t after, int limit,
                       char ***ids, size_t *n, int64_t *last, er_error *err)
{
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, f->queue ? ER_SQ_BULK_IDS_QUEUE : ER_SQ_BULK_IDS, &st, err);
    if (rc < 0)
        return rc;
    bind_filter(st, f);
    sqlite3_bind_int64(st, 6, after);
    sqlite3_bind_int(st, 7, limit);
    char **v = calloc((size_t)(limit > 0 ? limit : 1), sizeof *v);
    if (!v) {
        sqlite3_reset(st);
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    }
    size_t k = 0;
    int step;
    bool oom = false;
    while (!oom && k < (size_t)limit && (step = sqlite3_step(st)) == SQLITE_ROW) {
        v[k] = col_dup(st, 0, &oom);
        *last = sqlite3_column_int64(st, 1);
        k += v[k] != NULL;
    }
    if (oom)
        rc = er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    else if (k < (size_t)limit && step != SQLITE_DONE)
        rc = er_sqlite_error(s->db, step, "bulk", err);
    sqlite3_reset(st);
    if (rc < 0) {
        for (size_t i = 0; i < k; i++)
            free(v[i]);
        free(v);
        return rc;
    }
    *ids = v;
    *n = k;
    return 0;
}

int er_sqlite_bulk_count(er_store *s, const er_bulk_filter *f, int64_t *n, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, f->queue ? ER_SQ_BULK_COUNT_QUEUE : ER_SQ_BULK_COUNT, &st, err);
    if (rc < 0)
        return rc;
    bind_filter(st, f);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        *n = sqlite3_column_int64(st, 0);
        rc = 0;
    } else {
        rc = er_sqlite_error(s->db, step == SQLITE_DONE ? SQLITE_ERROR : step, "bulk", err);
    }
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_move_scheduled(er_store *s, const char *id, const char *last_error, int64_t now,
                             char **queue, er_error *err)
{
    *queue = NULL;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_MOVE_SCHEDULED, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
    if (last_error)
        sqlite3_bind_text(st, 3, last_error, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 3);
    bool oom = false, found = false;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        found = true;
        if (!*queue)
            *queue = col_dup(st, 0, &oom);
    }
    if (step != SQLITE_DONE)
        rc = er_sqlite_error(s->db, step, "move", err);
    else if (oom)
        rc = er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    else if (!found)
        rc = er_error_set(err, ER_ENOTFOUND, "id", "no scheduled job '%s'", id);
    sqlite3_reset(st);
    if (rc < 0) {
        free(*queue);
        *queue = NULL;
    }
    return rc;
}
