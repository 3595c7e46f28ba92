/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's Faktory worker registry (store.h): one row per
 * wid, shared by every server of the schema; row work only, as SQLite's
 * workers.c, a batch of beats in one statement a thousand rows. Liveness is judged against the caller's times (the servers'
 * clocks), like dashboard sessions.
 */
#include <stdlib.h>
#include <string.h>

#include "store/postgres/pg_int.h"

/* Row `row` of a WORKER_COLS result; false when out of memory. */
static bool read_row(const PGresult *r, int row, er_worker_row *w)
{
    memset(w, 0, sizeof *w);
    er_pg_copy_col(r, row, 0, w->wid, sizeof w->wid);
    er_pg_copy_col(r, row, 1, w->hostname, sizeof w->hostname);
    er_pg_copy_col(r, row, 2, w->node, sizeof w->node);
    er_pg_copy_col(r, row, 3, w->current_state, sizeof w->current_state);
    if (!PQgetisnull(r, row, 4) && !(w->labels = strdup(PQgetvalue(r, row, 4))))
        return false;
    w->pid = er_pg_i64(r, row, 5);
    w->v = er_pg_i64(r, row, 6);
    w->rss_kb = er_pg_i64(r, row, 7);
    w->started_at = er_pg_i64(r, row, 8);
    w->last_beat = er_pg_i64(r, row, 9);
    w->state = (er_worker_state)er_pg_i64(r, row, 10);
    return true;
}

/* The most rows one statement upserts. */
#define BEAT_CHUNK 1000

/* One statement for rows[0..n), n <= BEAT_CHUNK. */
static int beat_chunk(er_store *s, const er_worker_row *rows, size_t n, er_error *err)
{
    er_pg_array a[10];
    memset(a, 0, sizeof a);
    for (size_t i = 0; i < n; i++) {
        const er_worker_row *w = &rows[i];
        er_pg_array_str(&a[0], w->wid);
        er_pg_array_str(&a[1], w->hostname);
        er_pg_array_str(&a[2], w->node);
        er_pg_array_str(&a[3], w->current_state);
        er_pg_array_str(&a[4], w->labels);
        er_pg_array_i64(&a[5], w->pid);
        er_pg_array_i64(&a[6], w->v);
        er_pg_array_i64(&a[7], w->rss_kb);
        er_pg_array_i64(&a[8], w->started_at);
        er_pg_array_i64(&a[9], w->last_beat);
    }
    er_pg_params p = {0};
    bool oom = false;
    for (int k = 0; k < 10; k++) {
        const char *lit = er_pg_array_done(&a[k]);
        oom |= !lit;
        er_pg_p_str(&p, lit);
    }
    int rc = oom ? er_pg_nomem(err) : er_pg_run(s, ER_PG_WORKER_BEAT, &p, NULL, err);
    for (int k = 0; k < 10; k++)
        er_pg_array_fini(&a[k]);
    return rc;
}

int er_pg_worker_beat(er_store *s, const er_worker_row *rows, size_t n, er_error *err)
{
    for (size_t i = 0; i < n; i += BEAT_CHUNK) {
        int rc = beat_chunk(s, rows + i, n - i < BEAT_CHUNK ? n - i : BEAT_CHUNK, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Runs a statement that gives at most one row into *out (may be NULL). */
static int one_row(er_store *s, int id, const er_pg_params *p, const char *wid,
                   er_worker_row *out, er_error *err)
{
    PGresult *r;
    int rc = er_pg_exec(s, id, p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) == 0) {
        PQclear(r);
        return er_error_set(err, ER_ENOTFOUND, "wid", "no worker %s is known", wid);
    }
    er_worker_row tmp;
    bool ok = read_row(r, 0, out ? out : &tmp);
    PQclear(r);
    if (!out)
        er_worker_row_fini(&tmp);
    if (!ok) {
        if (out)
            er_worker_row_fini(out);
        return er_pg_nomem(err);
    }
    return 0;
}

int er_pg_worker_signal(er_store *s, const char *wid, er_worker_state state, int64_t live_after,
                        er_worker_row *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, wid);
    er_pg_p_i64(&p, (int64_t)state);
    er_pg_p_i64(&p, live_after);
    return one_row(s, ER_PG_WORKER_SIGNAL, &p, wid, out, err);
}

int er_pg_worker_get(er_store *s, const char *wid, er_worker_row *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, wid);
    return one_row(s, ER_PG_WORKER_GET, &p, wid, out, err);
}

int er_pg_worker_list(er_store *s, int64_t live_after, bool signalled, const char *after,
                      int limit, er_worker_list *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_i64(&p, live_after);
    er_pg_p_str(&p, after ? after : "");
    er_pg_p_i64(&p, limit);
    PGresult *r;
    int rc = er_pg_exec(s, signalled ? ER_PG_WORKER_LIST_SIGNALLED : ER_PG_WORKER_LIST, &p, &r,
                        err);
    if (rc < 0)
        return rc;
    size_t had = out->len;
    for (int i = 0; i < PQntuples(r) && rc == 0; i++) {
        er_worker_row *w = er_worker_list_push(out);
        if (!w || !read_row(r, i, w))
            rc = er_pg_nomem(err);
    }
    PQclear(r);
    if (rc < 0)
        while (out->len > had)
            er_worker_row_fini(&out->items[--out->len]);
    return rc;
}

int er_pg_worker_reap(er_store *s, int64_t before, int limit, int *n, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_i64(&p, before);
    er_pg_p_i64(&p, limit);
    int64_t a = 0;
    int rc = er_pg_run(s, ER_PG_WORKER_REAP, &p, &a, err);
    *n = (int)a;
    return rc;
}

int er_pg_worker_count(er_store *s, int64_t live_after, int64_t *n, er_error *err)
{
    *n = 0;
    er_pg_params p = {0};
    er_pg_p_i64(&p, live_after);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_WORKER_COUNT, &p, &r, err);
    if (rc < 0)
        return rc;
    *n = er_pg_i64(r, 0, 0);
    PQclear(r);
    return 0;
}
