/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's Faktory worker registry (store.h): one row per wid,
 * row work only. Liveness is judged against the caller's times. Every
 * call runs inside the caller's transaction (the engine's writer) or alone
 * (the reader).
 */
#include <stdlib.h>
#include <string.h>

#include "store/sqlite/sqlite_int.h"

/* The row of a WORKER_COLS result; false when out of memory. */
static bool read_row(sqlite3_stmt *st, er_worker_row *w)
{
    memset(w, 0, sizeof *w);
    er_sqlite_col_copy(st, 0, w->wid, sizeof w->wid);
    er_sqlite_col_copy(st, 1, w->hostname, sizeof w->hostname);
    er_sqlite_col_copy(st, 2, w->node, sizeof w->node);
    er_sqlite_col_copy(st, 3, w->current_state, sizeof w->current_state);
    const unsigned char *labels = sqlite3_column_text(st, 4);
    if (labels && !(w->labels = strdup((const char *)labels)))
        return false;
    w->pid = sqlite3_column_int64(st, 5);
    w->v = sqlite3_column_int64(st, 6);
    w->rss_kb = sqlite3_column_int64(st, 7);
    w->started_at = sqlite3_column_int64(st, 8);
    w->last_beat = sqlite3_column_int64(st, 9);
    w->state = (er_worker_state)sqlite3_column_int(st, 10);
    return true;
}

int er_sqlite_worker_beat(er_store *s, const er_worker_row *rows, size_t n, er_error *err)
{
    for (size_t i = 0; i < n; i++) {
        const er_worker_row *w = &rows[i];
        sqlite3_stmt *st = NULL;
        int rc = er_sqlite_prep(s, ER_SQ_WORKER_BEAT, &st, err);
        if (rc < 0)
            return rc;
        sqlite3_bind_text(st, 1, w->wid, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, w->hostname, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, w->node, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, w->current_state, -1, SQLITE_STATIC);
        if (w->labels)
            sqlite3_bind_text(st, 5, w->labels, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(st, 5);
        sqlite3_bind_int64(st, 6, w->pid);
        sqlite3_bind_int64(st, 7, w->v);
        sqlite3_bind_int64(st, 8, w->rss_kb);
        sqlite3_bind_int64(st, 9, w->started_at);
        sqlite3_bind_int64(st, 10, w->last_beat);
        rc = er_sqlite_run(s, st, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Steps a statement that gives at most one row into *out (may be NULL). */
static int one_row(er_store *s, sqlite3_stmt *st, const char *wid, er_worker_row *out,
                   er_error *err)
{
    int step = sqlite3_step(st);
    int rc;
    er_worker_row tmp;
    if (step == SQLITE_ROW) {
        bool ok = read_row(st, out ? out : &tmp);
        if (!out)
            er_worker_row_fini(&tmp);
        rc = ok ? 0 : er_error_set(err, ER_ENOMEM, NULL, "out of memory");
        if (!ok && out)
            er_worker_row_fini(out);
    } else if (step == SQLITE_DONE) {
        rc = er_error_set(err, ER_ENOTFOUND, "wid", "no worker %s is known", wid);
    } else {
        rc = er_sqlite_error(s->db, step, "worker", err);
    }
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_worker_signal(er_store *s, const char *wid, er_worker_state state,
                            int64_t live_after, er_worker_row *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_WORKER_SIGNAL, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, wid, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, (int)state);
    sqlite3_bind_int64(st, 3, live_after);
    return one_row(s, st, wid, out, err);
}

int er_sqlite_worker_get(er_store *s, const char *wid, er_worker_row *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_WORKER_GET, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, wid, -1, SQLITE_STATIC);
    return one_row(s, st, wid, out, err);
}

int er_sqlite_worker_list(er_store *s, int64_t live_after, bool signalled, const char *after,
                          int limit, er_worker_list *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, signalled ? ER_SQ_WORKER_LIST_SIGNALLED : ER_SQ_WORKER_LIST, &st,
                            err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, live_after);
    sqlite3_bind_text(st, 2, after ? after : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, limit);
    size_t had = out->len;
    int step;
    rc = 0;
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        er_worker_row *w = er_worker_list_push(out);
        if (!w || !read_row(st, w))
            rc = er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    }
    if (rc == 0 && step != SQLITE_DONE)
        rc = er_sqlite_error(s->db, step, "workers", err);
    sqlite3_reset(st);
    if (rc < 0) {
        while (out->len > had)
            er_worker_row_fini(&out->items[--out->len]);
    }
    return rc;
}

int er_sqlite_worker_reap(er_store *s, int64_t before, int limit, int *n, er_error *err)
{
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_WORKER_REAP, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, before);
    sqlite3_bind_int(st, 2, limit);
    rc = er_sqlite_run(s, st, err);
    if (rc == 0)
        *n = sqlite3_changes(s->db);
    return rc;
}

int er_sqlite_worker_count(er_store *s, int64_t live_after, int64_t *n, er_error *err)
{
    *n = 0;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_WORKER_COUNT, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, live_after);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW)
        *n = sqlite3_column_int64(st, 0);
    else
        rc = er_sqlite_error(s->db, step == SQLITE_DONE ? SQLITE_ERROR : step, "workers", err);
    sqlite3_reset(st);
    return rc;
}
