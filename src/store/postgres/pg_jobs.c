/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's job operations: enqueue, heartbeat, complete,
 * fail, release, get, cancel and list (fetch: pg_fetch.c). Each is one
 * round trip (fail: two, the first locking the job) and reports stale / not found
 * from the same statement that would have written. Decisions (backoff,
 * dead or retry) come from src/core; this file only persists them.
 */
#include "core/fetch.h"
#include "store/error_codec.h"
#include "store/postgres/pg_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nomem(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

int64_t er_pg_tomb_window(const er_store *s, const er_job *job)
{
    return job->id_generated ? 0 : s->dedup_window_ms;
}

/* The caller's time for a tombstone lookup, or NULL for the store's clock. */
static void p_now(er_pg_params *p, const er_store *s, int64_t now)
{
    if (s->caller_clock)
        er_pg_p_i64(p, now);
    else
        er_pg_p_str(p, NULL);
}

/* Appends the tombstone in columns c, c+1, c+2 of row `row` (queue, state,
 * finished_at; NULL queue: none). */
static int add_tomb(PGresult *r, int row, int c, size_t index, er_tombstone_list *tombs,
                    er_error *err)
{
    if (!tombs || PQgetisnull(r, row, c))
        return 0;
    if (er_tombstone_list_add(tombs, index, PQgetvalue(r, row, c), (er_state)er_pg_i64(r, row, c + 1),
                              er_pg_i64(r, row, c + 2)) < 0)
        return nomem(err);
    return 0;
}

int er_pg_tombstone_find(er_store *s, const er_job *job, int64_t now, size_t index,
                         er_tombstone_list *tombs, er_error *err)
{
    int64_t window = er_pg_tomb_window(s, job);
    if (window <= 0)
        return 0;
    er_pg_params p = {0};
    er_pg_p_str(&p, job->id);
    er_pg_p_i64(&p, window);
    p_now(&p, s, now);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_TOMB_GET, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) > 0)
        rc = add_tomb(r, 0, 0, index, tombs, err);
    PQclear(r);
    return rc;
}

int er_pg_enqueue(er_store *s, const er_job *job, bool *duplicate, er_job *existing,
                  er_tombstone_list *tombs, er_error *err)
{
    *duplicate = false;
    /* one NOTIFY per queue and transaction is enough: listeners wake once */
    bool notify = job->state == ER_STATE_WAITING && !er_pg_notified(s, job->queue);
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 30);
    er_pg_job_json(job, &w);
    if (w.failed) {
        er_jsonw_fini(&w);
        return nomem(err);
    }
    er_pg_params p = {0};
    er_pg_p_str(&p, w.out.data);
    er_pg_p_bool(&p, notify);
    er_pg_p_i64(&p, er_pg_tomb_window(s, job));
    p_now(&p, s, job->updated_at);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_INSERT_JOB, &p, &r, err);
    er_jsonw_fini(&w);
    if (rc < 0)
        return rc;
    enum { TOMB_COL = 1 + ER_PG_NCOLS };
    if (er_pg_i64(r, 0, 0) > 0) {
        if (notify && s->in_tx)
            er_pg_mark_notified(s, job->queue);
    } else if (!PQgetisnull(r, 0, TOMB_COL)) {
        *duplicate = true;
        if (tombs)
            rc = add_tomb(r, 0, TOMB_COL, 0, tombs, err);
    } else {
        *duplicate = true;
        if (existing && !PQgetisnull(r, 0, 1)) {
            er_job_init(existing);
            rc = er_pg_row_job(r, 0, 1, existing, err);
            if (rc < 0)
                er_job_fini(existing);
        } else if (existing) {
            /* inserted by a transaction that committed after this
             * statement's snapshot was taken */
            rc = er_pg_load_job(s, job->id, false, existing, err);
        }
    }
    PQclear(r);
    return rc;
}

static int tomb_cmp(const void *a, const void *b)
{
    const er_tombstone *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Runs INSERT_MANY with the batch as one JSON array (a session without
 * its batch table). */
static int insert_json(er_store *s, const er_job *jobs, size_t n, int64_t window, PGresult **r,
                       er_error *err)
{
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 30);
    er_jsonw_begin_array(&w);
    for (size_t i = 0; i < n; i++)
        er_pg_job_json(&jobs[i], &w);
    er_jsonw_end_array(&w);
    if (w.failed) {
        er_jsonw_fini(&w);
        return nomem(err);
    }
    er_pg_params p = {0};
    er_pg_p_str(&p, w.out.data);
    er_pg_p_i64(&p, window);
    p_now(&p, s, jobs[0].updated_at);
    int rc = er_pg_exec(s, ER_PG_INSERT_MANY, &p, r, err);
    er_jsonw_fini(&w);
    return rc;
}

/* Bytes of COPY rows built before they are sent: the server parses one
 * piece while the next is written. */
#define COPY_PIECE ((size_t)64 << 10)

/* Sends the batch as COPY rows (ord: the batch table's row numbers from 1)
 * in pieces of about COPY_PIECE, then ends the COPY; on failure the COPY
 * is ended with an error, so the server writes none of it. Returns 0,
 * ER_ENOMEM, or 1 when libpq could not send. */
static int put_rows(PGconn *pg, const er_job *jobs, size_t n, bool ord)
{
    er_buf b;
    er_buf_init(&b, (size_t)1 << 30);
    er_pg_copy_memo m = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        er_pg_job_copy_row(&jobs[i], ord ? (int64_t)i + 1 : -1, &m, &b);
        if (b.err)
            rc = ER_ENOMEM;
        else if (b.len >= COPY_PIECE || i + 1 == n) {
            if (PQputCopyData(pg, b.data, (int)b.len) != 1)
                rc = 1;
            er_buf_reset(&b);
        }
    }
    er_buf_fini(&b);
    if (rc == 0 && PQputCopyEnd(pg, NULL) != 1)
        rc = 1;
    if (rc != 0)
        PQputCopyEnd(pg, rc == ER_ENOMEM ? "errand: out of memory" : "errand: send failed");
    return rc;
}

/* put_rows's failure as the operation's error (0 when it sent). */
static int put_error(er_store *s, int put, er_error *err)
{
    if (put == ER_ENOMEM)
        return nomem(err);
    return put ? er_pg_error(s, NULL, "enqueue", err) : 0;
}

/* COPYs the batch into the session's batch table, then INSERT_COPIED
 * (parsing COPY's text costs the server far less than the JSON array). */
static int insert_copied(er_store *s, const er_job *jobs, size_t n, int64_t window,
                         PGresult **r, er_error *err)
{
    PGconn *pg = s->c->pg;
    PGresult *c = PQexec(pg, "COPY pg_temp.errand_bulk (ord, " ER_JOB_ROW_NAMES ") FROM STDIN");
    if (PQresultStatus(c) != PGRES_COPY_IN) {
        int rc = er_pg_error(s, c, "enqueue", err);
        PQclear(c);
        return rc;
    }
    PQclear(c);
    int put = put_rows(pg, jobs, n, true);
    int rc = put_error(s, put, err);
    /* the COPY's result, then NULL */
    while ((c = PQgetResult(pg))) {
        if (rc == 0)
            rc = er_pg_check(s, c, "enqueue", err);
        PQclear(c);
    }
    if (rc < 0)
        return rc;
    er_pg_params p = {0};
    er_pg_p_i64(&p, window);
    p_now(&p, s, jobs[0].updated_at);
    return er_pg_exec(s, ER_PG_INSERT_COPIED, &p, r, err);
}

static int str_cmp(const void *a, const void *b);

/* Appends the SQL literal of t to b (ENOMEM: b->err). */
static void add_literal(er_store *s, er_buf *b, const char *t)
{
    char *lit = PQescapeLiteral(s->c->pg, t, strlen(t));
    if (!lit) {
        er_buf_fail(b, ER_ENOMEM);
        return;
    }
    er_buf_adds(b, lit);
    PQfreemem(lit);
}

/* The text of a direct COPY: a savepoint, the COPY, and when it worked the
 * savepoint's release and one statement that registers the batch's
 * queues and wakes the fetchers of those with a waiting job (as
 * INSERT_FROM_X's reg and nt do). */
static int direct_sql(er_store *s, const er_job *jobs, size_t n, er_buf *b)
{
    const char **q = malloc(2 * n * sizeof *q), **w = q ? q + n : NULL;
    if (!q)
        return ER_ENOMEM;
    size_t nq = 0, nw = 0;
    for (size_t i = 0; i < n; i++) {
        /* a batch is mostly one queue: skip repeats of the last one */
        if (nq == 0 || strcmp(q[nq - 1], jobs[i].queue) != 0)
            q[nq++] = jobs[i].queue;
        if (jobs[i].state == ER_STATE_WAITING &&
            (nw == 0 || strcmp(w[nw - 1], jobs[i].queue) != 0))
            w[nw++] = jobs[i].queue;
    }
    size_t *lens[2] = {&nq, &nw};
    const char **lists[2] = {q, w};
    for (int l = 0; l < 2; l++) {
        if (*lens[l] < 2)
            continue;
        qsort(lists[l], *lens[l], sizeof *lists[l], str_cmp);
        size_t k = 1;
        for (size_t i = 1; i < *lens[l]; i++)
            if (strcmp(lists[l][i], lists[l][k - 1]) != 0)
                lists[l][k++] = lists[l][i];
        *lens[l] = k;
    }
    er_buf_adds(b, "SAVEPOINT errand_bulk; COPY jobs (" ER_JOB_ROW_NAMES ") FROM STDIN;"
                   " RELEASE SAVEPOINT errand_bulk; WITH reg AS (INSERT INTO queues (name) VALUES ");
    for (size_t i = 0; i < nq; i++) {
        er_buf_adds(b, i ? ", (" : "(");
        add_literal(s, b, q[i]);
        er_buf_adds(b, ")");
    }
    er_buf_adds(b, " ON CONFLICT (name) DO NOTHING) SELECT count(notify_ready(w.q)) FROM (");
    if (nw == 0)
        er_buf_adds(b, "SELECT NULL::text WHERE false");
    for (size_t i = 0; i < nw; i++) {
        er_buf_adds(b, i ? ", (" : "VALUES (");
        add_literal(s, b, w[i]);
        er_buf_adds(b, ")");
    }
    er_buf_adds(b, ") w(q)");
    free(q);
    return b->err;
}

/* The fast path for a batch whose ids the server generated (so no
 * tombstone remembers them and, but for a collision, no job holds them):
 * direct_sql's COPY straight into jobs, in two round trips, with no
 * ON CONFLICT and no batch table. A unique violation (a generated id
 * taken) rolls back to the savepoint and sets *collided: the caller
 * then inserts the batch the general way. */
static int insert_direct(er_store *s, const er_job *jobs, size_t n, bool *collided,
                         er_error *err)
{
    *collided = false;
    er_buf sql;
    er_buf_init(&sql, (size_t)1 << 24);
    int rc = direct_sql(s, jobs, n, &sql) < 0 ? nomem(err) : 0;
    PGconn *pg = s->c->pg;
    if (rc == 0 && !PQsendQuery(pg, sql.data))
        rc = er_pg_error(s, NULL, "enqueue", err);
    er_buf_fini(&sql);
    /* the SAVEPOINT's result, then COPY's (PGRES_COPY_IN) */
    PGresult *c;
    bool copying = false;
    while (rc == 0 && !copying && (c = PQgetResult(pg))) {
        if (PQresultStatus(c) == PGRES_COPY_IN)
            copying = true;
        else
            rc = er_pg_check(s, c, "enqueue", err);
        PQclear(c);
    }
    if (rc == 0 && !copying)
        rc = er_pg_error(s, NULL, "enqueue", err);
    if (copying) { /* rc is 0: the loop above sets copying only while it is */
        rc = put_error(s, put_rows(pg, jobs, n, false), err);
        /* COPY's result, then (when it worked) the release's and the
         * queues statement's */
        while ((c = PQgetResult(pg))) {
            const char *state = PQresultErrorField(c, PG_DIAG_SQLSTATE);
            if (rc == 0 && state && strcmp(state, "23505") == 0)
                *collided = true;
            else if (rc == 0)
                rc = er_pg_check(s, c, "enqueue", err);
            PQclear(c);
        }
    } else {
        while ((c = PQgetResult(pg)))
            PQclear(c);
    }
    if (rc == 0 && *collided)
        rc = er_pg_simple(s, "ROLLBACK TO SAVEPOINT errand_bulk; RELEASE SAVEPOINT errand_bulk",
                          "enqueue", NULL, err);
    return rc;
}

int er_pg_enqueue_many(er_store *s, const er_job *jobs, size_t n, bool *duplicate,
                       er_tombstone_list *tombs, er_error *err)
{
    if (n == 0)
        return 0;
    /* lookups only when a job of the batch has a client's id */
    int64_t window = 0;
    for (size_t i = 0; i < n && !window; i++)
        window = er_pg_tomb_window(s, &jobs[i]);
    bool own;
    int rc = er_pg_op_begin(s, &own, err); /* the batch table empties at commit */
    if (rc < 0)
        return rc;
    bool generated = true;
    for (size_t i = 0; i < n && generated; i++)
        generated = jobs[i].id_generated;
    if (generated) {
        bool collided;
        rc = insert_direct(s, jobs, n, &collided, err);
        if (rc == 0 && !collided) {
            for (size_t i = 0; i < n; i++)
                duplicate[i] = false;
            return er_pg_op_end(s, own, rc, err);
        }
        if (rc < 0)
            return er_pg_op_end(s, own, rc, err);
    }
    PGresult *r = NULL;
    rc = s->c->bulk_table ? insert_copied(s, jobs, n, window, &r, err)
                          : insert_json(s, jobs, n, window, &r, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        duplicate[i] = true;
    size_t had = tombs ? tombs->len : 0;
    for (int row = 0; rc == 0 && row < PQntuples(r); row++) {
        int64_t i = er_pg_i64(r, row, 0);
        if (i < 0 || (size_t)i >= n)
            continue;
        if (PQgetisnull(r, row, 1))
            duplicate[i] = false;
        else
            rc = add_tomb(r, row, 1, (size_t)i, tombs, err);
    }
    PQclear(r);
    if (rc == 0 && tombs && tombs->len - had > 1)
        qsort(tombs->items + had, tombs->len - had, sizeof *tombs->items, tomb_cmp);
    return er_pg_op_end(s, own, rc, err);
}

/* Reads a LEASE_REPORT row: 0 when the update applied, else why not. */
static int lease_result(const PGresult *r, const char *id, er_error *err)
{
    if (er_pg_i64(r, 0, 0) > 0)
        return 0;
    return er_job_lease_refused(!PQgetisnull(r, 0, 1), (er_state)er_pg_i64(r, 0, 1), id, err);
}

/* Runs a lease-checked statement (LEASE_REPORT) and explains a refusal. */
static int lease_op(er_store *s, int stmt, er_pg_params *p, const char *id, er_error *err)
{
    PGresult *r;
    int rc = er_pg_exec(s, stmt, p, &r, err);
    if (rc < 0)
        return rc;
    rc = lease_result(r, id, err);
    PQclear(r);
    return rc;
}

int er_pg_heartbeat(er_store *s, const char *id, const char *token, int64_t extend_ms,
                    const char *progress, int64_t now, int64_t *expires_at, er_error *err)
{
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    now = er_pg_now(s, now);
    int64_t until = now + extend_ms;
    er_pg_params p = {0};
    er_pg_p_i64(&p, until);
    er_pg_p_str(&p, progress);
    er_pg_p_i64(&p, now);
    er_pg_p_str(&p, id);
    er_pg_p_str(&p, token ? token : "");
    rc = lease_op(s, ER_PG_HEARTBEAT, &p, id, err);
    rc = er_pg_op_end(s, own, rc, err);
    if (rc == 0 && expires_at)
        *expires_at = until;
    return rc;
}

int er_pg_complete(er_store *s, const char *id, const char *token, const char *result,
                   int64_t now, er_ack_info *info, er_error *err)
{
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_pg_params p = {0};
    er_pg_p_str(&p, result);
    er_pg_p_i64(&p, er_pg_now(s, now));
    er_pg_p_str(&p, id);
    er_pg_p_str(&p, token ? token : "");
    PGresult *r;
    rc = er_pg_exec(s, ER_PG_COMPLETE, &p, &r, err);
    if (rc == 0) {
        rc = lease_result(r, id, err);
        if (rc == 0) {
            er_ack_info_set(info, PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3),
                            PQgetisnull(r, 0, 4) ? NULL : PQgetvalue(r, 0, 4),
                            (int)er_pg_i64(r, 0, 5), er_pg_i64(r, 0, 6), er_pg_i64(r, 0, 7));
            er_ack_info_set_unique(info, PQgetisnull(r, 0, 8) ? NULL : PQgetvalue(r, 0, 8));
        }
        PQclear(r);
    }
    return er_pg_op_end(s, own, rc, err);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether ids[0..n) are distinct (a set-based update would pair a
 * repeated id's job with every item naming it). Sorts ids. */
static bool ids_distinct(const char **ids, size_t n)
{
    qsort(ids, n, sizeof *ids, str_cmp);
    for (size_t i = 1; i < n; i++)
        if (strcmp(ids[i - 1], ids[i]) == 0)
            return false;
    return true;
}

/* ids_distinct over the items' ids (item size `size`, id first). */
static bool items_distinct(const void *items, size_t size, size_t n)
{
    const char **v = malloc(n * sizeof *v);
    if (!v)
        return false;
    for (size_t i = 0; i < n; i++)
        v[i] = *(const char *const *)((const char *)items + i * size);
    bool ok = ids_distinct(v, n);
    free(v);
    return ok;
}

/* One complete per item, in order (a repeated id, or no memory for the
 * arrays). */
static int complete_each(er_store *s, er_complete_item *items, size_t n, int64_t now,
                         er_error *err)
{
    for (size_t i = 0; i < n; i++) {
        er_error tmp;
        er_error *e = items[i].err ? items[i].err : &tmp;
        int rc = er_pg_complete(s, items[i].id, items[i].token, items[i].result, now,
                                items[i].info, e);
        if (rc < 0 && rc != ER_ESTALE && rc != ER_ENOTFOUND) {
            if (err)
                *err = *e;
            return rc;
        }
        items[i].rc = rc;
    }
    return 0;
}

/* Row `row` of a batch ack's answer: true when the item's update applied,
 * else *rc gets er_job_lease_refused's answer from its state before
 * (column 1; NULL: no such job). */
static bool batch_row_applied(PGresult *r, int row, const char *id, er_error *e, int *rc)
{
    if (strcmp(PQgetvalue(r, row, 0), "t") == 0)
        return true;
    er_error tmp;
    *rc = er_job_lease_refused(!PQgetisnull(r, row, 1), (er_state)er_pg_i64(r, row, 1), id,
                               e ? e : &tmp);
    return false;
}

/* Runs a batch ack's statement (params p) in the store's op; it answers
 * one row per item, in order, which row_fn(items, i, r) reads. */
static int batch_ack(er_store *s, int stmt, er_pg_params *p, size_t n,
                     void (*row_fn)(void *items, size_t i, PGresult *r), void *items,
                     er_error *err)
{
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    PGresult *r = NULL;
    rc = er_pg_exec(s, stmt, p, &r, err);
    if (rc == 0 && (size_t)PQntuples(r) != n)
        rc = er_error_set(err, ER_EINTERNAL, "store", "batch ack: %d rows for %zu items",
                          PQntuples(r), n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        row_fn(items, i, r);
    PQclear(r);
    return er_pg_op_end(s, own, rc, err);
}

static void complete_row(void *items, size_t i, PGresult *r)
{
    er_complete_item *it = (er_complete_item *)items + i;
    int row = (int)i;
    if (!batch_row_applied(r, row, it->id, it->err, &it->rc))
        return;
    er_ack_info_set(it->info, PQgetvalue(r, row, 2), PQgetvalue(r, row, 3),
                    PQgetisnull(r, row, 4) ? NULL : PQgetvalue(r, row, 4),
                    (int)er_pg_i64(r, row, 5), er_pg_i64(r, row, 6), er_pg_i64(r, row, 7));
    er_ack_info_set_unique(it->info, PQgetisnull(r, row, 8) ? NULL : PQgetvalue(r, row, 8));
}

/* One UPDATE ... FROM unnest for the batch: each item's lease token is
 * checked on its own row, and each item gets the answer complete() would
 * give (the ids are distinct, so no item sees another's change). */
int er_pg_complete_many(er_store *s, er_complete_item *items, size_t n, int64_t now,
                        er_error *err)
{
    for (size_t i = 0; i < n; i++)
        items[i].rc = 0;
    if (n < 2 || !items_distinct(items, sizeof *items, n))
        return complete_each(s, items, n, now, err);
    er_pg_array ids = {0}, tokens = {0}, results = {0};
    for (size_t i = 0; i < n; i++) {
        er_pg_array_str(&ids, items[i].id);
        er_pg_array_str(&tokens, items[i].token ? items[i].token : "");
        er_pg_array_str(&results, items[i].result);
    }
    const char *a = er_pg_array_done(&ids), *b = er_pg_array_done(&tokens),
               *c = er_pg_array_done(&results);
    int rc;
    if (!a || !b || !c) {
        rc = complete_each(s, items, n, now, err);
        goto out;
    }
    er_pg_params p = {0};
    er_pg_p_str(&p, a);
    er_pg_p_str(&p, b);
    er_pg_p_str(&p, c);
    er_pg_p_i64(&p, er_pg_now(s, now));
    rc = batch_ack(s, ER_PG_COMPLETE_MANY, &p, n, complete_row, items, err);
out:
    er_pg_array_fini(&ids);
    er_pg_array_fini(&tokens);
    er_pg_array_fini(&results);
    return rc;
}

int er_pg_release(er_store *s, const char *id, const char *token, int64_t now, er_error *err)
{
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_pg_params p = {0};
    er_pg_p_i64(&p, er_pg_now(s, now));
    er_pg_p_str(&p, id);
    er_pg_p_str(&p, token ? token : "");
    rc = lease_op(s, ER_PG_RELEASE, &p, id, err);
    return er_pg_op_end(s, own, rc, err);
}

/* The queue of job id, malloc'd, or NULL (none, or no memory). */
static char *queue_of(er_store *s, const char *id)
{
    er_job j;
    er_job_init(&j);
    char *q = er_pg_get_job(s, id, &j, NULL) == 0 && j.queue ? strdup(j.queue) : NULL;
    er_job_fini(&j);
    return q;
}

/* One release per item, in order (a repeated id, or no memory for the
 * arrays). */
static int release_each(er_store *s, er_release_item *items, size_t n, int64_t now,
                        er_error *err)
{
    for (size_t i = 0; i < n; i++) {
        er_error tmp, *e = items[i].err ? items[i].err : &tmp;
        int rc = er_pg_release(s, items[i].id, items[i].token, now, e);
        if (rc < 0 && rc != ER_ESTALE && rc != ER_ENOTFOUND) {
            if (err)
                *err = *e;
            return rc;
        }
        items[i].rc = rc;
        if (rc == 0)
            items[i].queue = queue_of(s, items[i].id);
    }
    return 0;
}

static void release_row(void *items, size_t i, PGresult *r)
{
    er_release_item *it = (er_release_item *)items + i;
    if (batch_row_applied(r, (int)i, it->id, it->err, &it->rc))
        it->queue = strdup(PQgetvalue(r, (int)i, 2));
}

/* One UPDATE ... FROM unnest for the batch, as er_pg_complete_many. */
int er_pg_release_many(er_store *s, er_release_item *items, size_t n, int64_t now,
                       er_error *err)
{
    for (size_t i = 0; i < n; i++) {
        items[i].rc = 0;
        items[i].queue = NULL;
    }
    if (n < 2 || !items_distinct(items, sizeof *items, n))
        return release_each(s, items, n, now, err);
    er_pg_array ids = {0}, tokens = {0};
    for (size_t i = 0; i < n; i++) {
        er_pg_array_str(&ids, items[i].id);
        er_pg_array_str(&tokens, items[i].token ? items[i].token : "");
    }
    const char *a = er_pg_array_done(&ids), *b = er_pg_array_done(&tokens);
    int rc;
    if (!a || !b) {
        rc = release_each(s, items, n, now, err);
        goto out;
    }
    er_pg_params p = {0};
    er_pg_p_str(&p, a);
    er_pg_p_str(&p, b);
    er_pg_p_i64(&p, er_pg_now(s, now));
    rc = batch_ack(s, ER_PG_RELEASE_MANY, &p, n, release_row, items, err);
out:
    er_pg_array_fini(&ids);
    er_pg_array_fini(&tokens);
    if (rc < 0)
        for (size_t i = 0; i < n; i++) {
            free(items[i].queue);
            items[i].queue = NULL;
        }
    return rc;
}

/* The decision for the job in row `row` of a GET_JOB_LOCK result (NULL:
 * no such job): *lease gets the item's logical error (stale, not found)
 * when its lease is not `token`'s, else *o, *run_at (the run_at to store),
 * *text (malloc'd: the last_error to store) and *info. Returns 0 or a
 * storage error. */
static int fail_decide(PGresult *res, int row, const char *id, const char *token,
                       const er_failure *f, int64_t now, er_rand *r, er_fail_outcome *o,
                       int64_t *run_at, char **text, er_ack_info *info, int *lease,
                       er_error *err)
{
    *text = NULL;
    *lease = 0;
    if (!res) {
        *lease = er_job_lease_check(NULL, id, token, err);
        return 0;
    }
    er_job job;
    er_job_init(&job);
    er_queue_settings qs;
    int rc = er_pg_row_job(res, row, 0, &job, err);
    if (rc == 0)
        rc = er_settings_decode_row(PQgetisnull(res, row, ER_PG_NCOLS)
                                        ? NULL
                                        : PQgetvalue(res, row, ER_PG_NCOLS),
                                    false, &qs, err);
    if (rc == 0 && (*lease = er_job_lease_check(&job, id, token, err)) == 0) {
        memset(o, 0, sizeof *o);
        int max_started = qs.max_started > 0 ? qs.max_started : ER_DEFAULT_MAX_STARTED;
        er_fail_decide(&job, f, max_started, qs.throttle_max_ms, now, r, o);
        *run_at = o->state == ER_STATE_SCHEDULED ? o->run_at : job.run_at;
        if (!(*text = er_last_error_encode(f, job.attempts, o->reason, now)))
            rc = nomem(err);
        else
            er_ack_info_set(info, job.queue, job.name, job.trace_id, job.attempts, job.run_at,
                            job.started_at);
    }
    er_job_fini(&job);
    return rc;
}

static int fail_in_tx(er_store *s, const char *id, const char *token, const er_failure *f,
                      int64_t now, er_rand *r, er_fail_outcome *outcome, er_ack_info *info,
                      er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, id);
    PGresult *res;
    int rc = er_pg_exec(s, ER_PG_GET_JOB_LOCK, &p, &res, err);
    if (rc < 0)
        return rc;
    er_fail_outcome o;
    int64_t run_at = 0;
    char *text;
    int lease;
    er_ack_info got = {0};
    rc = fail_decide(PQntuples(res) ? res : NULL, 0, id, token, f, now, r, &o, &run_at, &text,
                     &got, &lease, err);
    PQclear(res);
    if (rc < 0 || lease < 0)
        return rc < 0 ? rc : lease;
    er_pg_params q = {0};
    er_pg_p_i64(&q, (int64_t)o.state);
    er_pg_p_i64(&q, run_at);
    er_pg_p_i64(&q, o.attempts);
    er_pg_p_str(&q, text);
    er_pg_p_i64(&q, now);
    er_pg_p_i64(&q, o.state == ER_STATE_DEAD ? now : 0);
    er_pg_p_str(&q, id);
    er_pg_p_i64(&q, o.queue_pause_until);
    rc = er_pg_run(s, ER_PG_FAIL_APPLY, &q, NULL, err);
    free(text);
    if (rc == 0 && outcome)
        *outcome = o;
    if (rc == 0 && info)
        *info = got;
    return rc;
}

int er_pg_fail(er_store *s, const char *id, const char *token, const er_failure *f, int64_t now,
               er_rand *r, er_fail_outcome *outcome, er_ack_info *info, er_error *err)
{
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    rc = fail_in_tx(s, id, token, f, er_pg_now(s, now), r, outcome, info, err);
    return er_pg_op_end(s, own, rc, err);
}

/* One fail per item, in order (a repeated id, or no memory for the arrays). */
static int fail_each(er_store *s, er_fail_item *items, size_t n, int64_t now, er_rand *r,
                     er_error *err)
{
    for (size_t i = 0; i < n; i++) {
        er_fail_item *it = &items[i];
        er_error tmp;
        er_error *e = it->err ? it->err : &tmp;
        int rc = er_pg_fail(s, it->id, it->token, it->failure, now, r, it->outcome, it->info, e);
        if (rc < 0 && rc != ER_ESTALE && rc != ER_ENOTFOUND) {
            if (err)
                *err = *e;
            return rc;
        }
        it->rc = rc;
    }
    return 0;
}

/* A locked row of FAIL_LOCK_MANY, found by id. */
typedef struct row_ref {
    const char *id;
    int row;
} row_ref;

static int ref_cmp(const void *a, const void *b)
{
    return strcmp(((const row_ref *)a)->id, ((const row_ref *)b)->id);
}

/* The set-based fail: one statement locks every item's job, core decides
 * each in item order (drawing from r as n fail() calls would), and one
 * UPDATE ... FROM unnest stores every decision. */
static int fail_batch(er_store *s, er_fail_item *items, size_t n, int64_t now, er_rand *r,
                      er_error *err)
{
    er_pg_array ids = {0}, aid = {0}, ast = {0}, arun = {0}, aatt = {0}, aerr = {0}, afin = {0},
                apause = {0};
    row_ref *refs = NULL;
    PGresult *res = NULL;
    for (size_t i = 0; i < n; i++)
        er_pg_array_str(&ids, items[i].id);
    int rc = 0;
    const char *lit = er_pg_array_done(&ids);
    if (!lit) {
        rc = nomem(err);
        goto out;
    }
    er_pg_params p = {0};
    er_pg_p_str(&p, lit);
    if ((rc = er_pg_exec(s, ER_PG_FAIL_LOCK_MANY, &p, &res, err)) < 0)
        goto out;
    int nrows = PQntuples(res);
    if (nrows > 0 && !(refs = malloc((size_t)nrows * sizeof *refs))) {
        rc = nomem(err);
        goto out;
    }
    for (int k = 0; k < nrows; k++)
        refs[k] = (row_ref){.id = PQgetvalue(res, k, 0), .row = k}; /* id: column 0 */
    if (nrows > 1)
        qsort(refs, (size_t)nrows, sizeof *refs, ref_cmp);
    int applied = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        er_fail_item *it = &items[i];
        row_ref key = {.id = it->id}, *hit =
            nrows ? bsearch(&key, refs, (size_t)nrows, sizeof *refs, ref_cmp) : NULL;
        er_error tmp;
        er_error *e = it->err ? it->err : &tmp;
        er_fail_outcome o;
        int64_t run_at = 0;
        char *text = NULL;
        int lease;
        rc = fail_decide(hit ? res : NULL, hit ? hit->row : 0, it->id, it->token, it->failure,
                         now, r, &o, &run_at, &text, it->info, &lease, e);
        if (rc < 0 && err)
            *err = *e;
        if (rc == 0 && lease < 0)
            it->rc = lease;
        if (rc == 0 && lease == 0) {
            er_pg_array_str(&aid, it->id);
            er_pg_array_i64(&ast, (int64_t)o.state);
            er_pg_array_i64(&arun, run_at);
            er_pg_array_i64(&aatt, o.attempts);
            er_pg_array_str(&aerr, text);
            er_pg_array_i64(&afin, o.state == ER_STATE_DEAD ? now : 0);
            er_pg_array_i64(&apause, o.queue_pause_until);
            if (it->outcome)
                *it->outcome = o;
            applied++;
        }
        free(text);
    }
    if (rc < 0 || applied == 0)
        goto out;
    er_pg_params q = {0};
    const char *v[7] = {er_pg_array_done(&aid),  er_pg_array_done(&ast),
                        er_pg_array_done(&arun), er_pg_array_done(&aatt),
                        er_pg_array_done(&aerr), er_pg_array_done(&afin),
                        er_pg_array_done(&apause)};
    for (int k = 0; k < 7; k++) {
        if (!v[k]) {
            rc = nomem(err);
            goto out;
        }
        er_pg_p_str(&q, v[k]);
    }
    er_pg_p_i64(&q, now);
    rc = er_pg_run(s, ER_PG_FAIL_APPLY_MANY, &q, NULL, err);
out:
    PQclear(res);
    free(refs);
    er_pg_array *all[] = {&ids, &aid, &ast, &arun, &aatt, &aerr, &afin, &apause};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        er_pg_array_fini(all[k]);
    return rc;
}

int er_pg_fail_many(er_store *s, er_fail_item *items, size_t n, int64_t now, er_rand *r,
                    er_error *err)
{
    for (size_t i = 0; i < n; i++)
        items[i].rc = 0;
    if (n < 2 || !items_distinct(items, sizeof *items, n))
        return fail_each(s, items, n, now, r, err);
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    rc = fail_batch(s, items, n, er_pg_now(s, now), r, err);
    return er_pg_op_end(s, own, rc, err);
}

int er_pg_get_job(er_store *s, const char *id, er_job *out, er_error *err)
{
    return er_pg_load_job(s, id, false, out, err);
}

static int cancel_in_tx(er_store *s, const char *id, int64_t now, er_job *out, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_i64(&p, now);
    er_pg_p_str(&p, id);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_CANCEL, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQgetisnull(r, 0, 0)) {
        if (PQgetisnull(r, 0, ER_PG_NCOLS)) {
            rc = er_error_set(err, ER_ENOTFOUND, "id", "job '%s' not found", id);
        } else {
            const char *name = er_state_name((er_state)er_pg_i64(r, 0, ER_PG_NCOLS));
            rc = er_error_set(err, ER_ECONFLICT, "id", "job '%s' is %s and cannot be cancelled",
                              id, name ? name : "?");
        }
    } else if (out) {
        er_job_init(out);
        rc = er_pg_row_job(r, 0, 0, out, err);
        if (rc < 0)
            er_job_fini(out);
    }
    PQclear(r);
    return rc;
}

int er_pg_cancel(er_store *s, const char *id, int64_t now, er_job *out, er_error *err)
{
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    int crc = cancel_in_tx(s, id, er_pg_now(s, now), out, err);
    rc = er_pg_op_end(s, own, crc, err);
    if (crc == 0 && rc < 0 && out)
        er_job_fini(out); /* the commit failed: nothing was cancelled */
    return rc;
}

/* Parses a decimal cursor; NULL or "" means from the start. */
static int parse_seq(const char *cursor, int64_t *seq, er_error *err)
{
    *seq = 0;
    if (!cursor || !*cursor)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(cursor, &end, 10);
    if (errno || *end || v < 0)
        return er_error_set(err, ER_EINVAL, "cursor", "invalid cursor");
    *seq = v;
    return 0;
}

int er_pg_list_jobs(er_store *s, const char *queue, er_state state, int limit, const char *cursor,
                    er_job_list *out, char **next_cursor, er_error *err)
{
    *next_cursor = NULL;
    int64_t after;
    int rc = parse_seq(cursor, &after, err);
    if (rc < 0)
        return rc;
    if (limit < 1)
        limit = 1;
    er_pg_params p = {0};
    er_pg_p_str(&p, queue);
    er_pg_p_i64(&p, (int64_t)state);
    er_pg_p_i64(&p, after);
    er_pg_p_i64(&p, (int64_t)limit + 1); /* one more tells whether a page follows */
    PGresult *r;
    rc = er_pg_exec(s, ER_PG_LIST_JOBS, &p, &r, err);
    if (rc < 0)
        return rc;
    size_t base = out->len;
    int n = PQntuples(r);
    int64_t last = 0;
    size_t used = 0;
    bool more = n > limit;
    for (int i = 0; rc == 0 && i < n && i < limit; i++) {
        er_job *j = er_job_list_push(out);
        if (!j) {
            rc = nomem(err);
            break;
        }
        rc = er_pg_row_job(r, i, 0, j, err);
        size_t b = er_job_reply_bytes(j);
        if (rc == 0 && !er_reply_takes((size_t)i, used, b, s->reply_max)) { /* the next page's */
            er_job_fini(&out->items[--out->len]);
            more = true;
            break;
        }
        used += b;
        last = er_pg_i64(r, i, ER_PG_COL_SEQ);
    }
    PQclear(r);
    if (rc == 0 && more) {
        char buf[32];
        snprintf(buf, sizeof buf, "%" PRId64, last);
        if (!(*next_cursor = strdup(buf)))
            rc = nomem(err);
    }
    if (rc < 0) {
        while (out->len > base)
            er_job_fini(&out->items[--out->len]);
    }
    return rc;
}
