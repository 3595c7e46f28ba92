/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's queue, dead-letter and maintenance operations.
 * Maintenance passes lock the rows they change with SKIP LOCKED, so servers
 * sharing one database can run them at the same time without waiting on
 * each other or doing the same row twice; each pass is a bounded, constant
 * number of round trips (arrays carry per-row and per-queue values).
 */
#include "core/fetch.h"
#include "store/error_codec.h"
#include "store/postgres/pg_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nomem(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

static const char *opt_text(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

static bool col_bool(const PGresult *r, int row, int col)
{
    return !PQgetisnull(r, row, col) && PQgetvalue(r, row, col)[0] == 't';
}

/* ---- queues ---- */

/* The rows of `id` (name, settings, paused, throttled_until, then with counts: six counts
 * and the oldest waiting run_at) as queue infos. */
static int queue_rows(er_store *s, int id, bool counts, er_queue_info **out, size_t *n,
                      er_error *err)
{
    *out = NULL;
    *n = 0;
    PGresult *r;
    int rc = er_pg_exec(s, id, NULL, &r, err);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    er_queue_info *qs = rows ? calloc((size_t)rows, sizeof *qs) : NULL;
    if (rows && !qs) {
        PQclear(r);
        return nomem(err);
    }
    size_t len = 0;
    for (int i = 0; rc == 0 && i < rows; i++) {
        er_queue_info *q = &qs[len];
        if (!(q->name = strdup(PQgetvalue(r, i, 0)))) {
            rc = nomem(err);
            break;
        }
        len++;
        rc = er_settings_decode_row(opt_text(r, i, 1), col_bool(r, i, 2), &q->settings, err);
        q->throttled_until = er_pg_i64(r, i, 3);
        if (!counts)
            continue;
        for (int st = 0; st < 6; st++)
            q->counts[st] = er_pg_i64(r, i, 4 + st);
        q->oldest_waiting_ms = er_pg_i64(r, i, 10);
    }
    PQclear(r);
    if (rc < 0) {
        er_queue_info_list_free(qs, len);
        return rc;
    }
    *out = qs;
    *n = len;
    return 0;
}

int er_pg_list_queues(er_store *s, int64_t now, er_queue_info **out, size_t *n, er_error *err)
{
    return queue_rows(s, ER_PG_LIST_QUEUES, true, out, n, err);
}

int er_pg_list_queue_settings(er_store *s, er_queue_info **out, size_t *n, er_error *err)
{
    return queue_rows(s, ER_PG_QUEUE_ALL, false, out, n, err);
}

int er_pg_get_queue_settings(er_store *s, const char *queue, er_queue_settings *out,
                             er_error *err)
{
    er_pg_qs *c = s->in_tx ? er_pg_qs_find(s, queue) : NULL;
    if (c) {
        *out = c->settings;
        return 0;
    }
    er_pg_params p = {0};
    er_pg_p_str(&p, queue);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_QUEUE_GET, &p, &r, err);
    if (rc < 0)
        return rc;
    if (PQntuples(r) > 0)
        rc = er_settings_decode_row(opt_text(r, 0, 0), col_bool(r, 0, 1), out, err);
    else
        er_queue_settings_default(out);
    PQclear(r);
    if (rc == 0 && s->in_tx)
        (void)er_pg_qs_put(s, queue, out); /* a cache miss later is only slower */
    return rc;
}

int er_pg_cached_queue_defaults(er_store *s, const char *queue, er_job_defaults *out,
                                er_error *err)
{
    (void)err;
    er_pg_qs *c = s->in_tx ? er_pg_qs_find(s, queue) : NULL;
    if (!c)
        return 1;
    *out = c->settings.defaults;
    return 0;
}

int er_pg_put_queue_settings(er_store *s, const char *queue, const er_queue_settings *in,
                             er_error *err)
{
    char *text = er_settings_encode(in);
    if (!text)
        return nomem(err);
    er_pg_params p = {0};
    er_pg_p_str(&p, queue);
    er_pg_p_str(&p, text);
    er_pg_p_bool(&p, in->paused);
    er_pg_p_i64(&p, in->concurrency > 0 ? in->concurrency : 0);
    er_pg_p_i64(&p, in->lease_ms > 0 ? in->lease_ms : 0);
    bool rated = in->rate_max > 0;
    er_pg_p_i64(&p, rated ? in->rate_max : 0);
    er_pg_p_i64(&p, rated ? in->rate_per_ms : 0);
    er_pg_p_i64(&p, rated && in->rate_burst > 0 ? in->rate_burst : 1);
    er_pg_p_bool(&p, in->group_limits.concurrency > 0 || in->group_limits.rate.max > 0);
    er_pg_p_bool(&p, in->aging.per_s > 0);
    int rc = er_pg_run(s, ER_PG_QUEUE_PUT, &p, NULL, err);
    free(text);
    if (rc == 0 && s->in_tx && er_pg_qs_put(s, queue, in) < 0) {
        er_pg_qs *c = er_pg_qs_find(s, queue);
        if (c) /* never leave an old value cached */
            c->settings = *in;
    }
    return rc;
}

/* The settings cache (er_pg_qs) holds no throttle: fetch reads it from the
 * table (queue_states). */
int er_pg_clear_queue_throttle(er_store *s, const char *queue, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, queue);
    return er_pg_run(s, ER_PG_QUEUE_UNTHROTTLE, &p, NULL, err);
}

/* ---- dead letters ---- */

int er_pg_list_dead(er_store *s, const char *queue, int limit, const char *cursor,
                    er_job_list *out, char **next_cursor, er_error *err)
{
    *next_cursor = NULL;
    int64_t at, seq;
    int rc = er_dead_cursor_parse(cursor, &at, &seq, err);
    if (rc < 0)
        return rc;
    if (limit < 1)
        limit = 1;
    er_pg_params p = {0};
    er_pg_p_i64(&p, at);
    er_pg_p_i64(&p, seq);
    er_pg_p_i64(&p, (int64_t)limit + 1);
    if (queue)
        er_pg_p_str(&p, queue);
    PGresult *r;
    rc = er_pg_exec(s, queue ? ER_PG_LIST_DEAD_QUEUE : ER_PG_LIST_DEAD, &p, &r, err);
    if (rc < 0)
        return rc;
    size_t base = out->len;
    int n = PQntuples(r);
    int64_t last_at = 0, last_seq = 0;
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
        last_at = j->finished_at;
        last_seq = er_pg_i64(r, i, ER_PG_COL_SEQ);
    }
    PQclear(r);
    if (rc == 0 && more) {
        char buf[48];
        snprintf(buf, sizeof buf, "%" PRId64 ".%" PRId64, last_at, last_seq);
        if (!(*next_cursor = strdup(buf)))
            rc = nomem(err);
    }
    if (rc < 0) {
        while (out->len > base)
            er_job_fini(&out->items[--out->len]);
    }
    return rc;
}

static int redrive_in_tx(er_store *s, const char *id, int64_t now, er_job *out, er_error *err)
{
    er_job dead, nj;
    er_job_init(&nj);
    int rc = er_pg_load_job(s, id, true, &dead, err);
    if (rc < 0)
        return rc == ER_ENOTFOUND ? er_error_set(err, ER_ENOTFOUND, "id", "no dead job '%s'", id)
                                  : rc;
    int n = 0;
    if ((rc = er_job_redrive_plan(&dead, now, &nj, &n, err)) < 0)
        goto out;
    if ((rc = er_store_redrive_check(er_pg_tombstone_find, s, &nj, now, err)) < 0)
        goto out;
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 30);
    er_pg_job_json(&nj, &w);
    if (w.failed) {
        er_jsonw_fini(&w);
        rc = nomem(err);
        goto out;
    }
    er_pg_params p = {0};
    er_pg_p_str(&p, w.out.data);
    er_pg_p_i64(&p, now);
    er_pg_p_i64(&p, n);
    er_pg_p_str(&p, id);
    PGresult *r;
    rc = er_pg_exec(s, ER_PG_REDRIVE_APPLY, &p, &r, err);
    er_jsonw_fini(&w);
    if (rc == 0) {
        if (er_pg_i64(r, 0, 0) == 0)
            rc = er_error_set(err, ER_ECONFLICT, "id", "job '%s' already exists", nj.id);
        PQclear(r);
    }
    if (rc == 0 && out) {
        *out = nj;
        er_job_init(&nj);
    }
out:
    er_job_fini(&dead);
    er_job_fini(&nj);
    return rc;
}

int er_pg_redrive(er_store *s, const char *id, int64_t now, er_job *out, er_error *err)
{
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    int rrc = redrive_in_tx(s, id, er_pg_now(s, now), out, err);
    rc = er_pg_op_end(s, own, rrc, err);
    if (rrc == 0 && rc < 0 && out)
        er_job_fini(out); /* the commit failed: nothing was redriven */
    return rc;
}

int er_pg_delete_dead(er_store *s, const char *id, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, id);
    int64_t n = 0;
    int rc = er_pg_run(s, ER_PG_DELETE_DEAD, &p, &n, err);
    if (rc == 0 && n == 0)
        rc = er_error_set(err, ER_ENOTFOUND, "id", "no dead job '%s'", id);
    return rc;
}

/* ---- maintenance ---- */

static int promote_in_tx(er_store *s, int64_t now, int limit, int *n, er_name_set *ns,
                         er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_i64(&p, now);
    er_pg_p_i64(&p, limit);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_PROMOTE, &p, &r, err);
    if (rc < 0)
        return rc;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        *n += (int)er_pg_i64(r, i, 1);
        if (er_name_set_add(ns, PQgetvalue(r, i, 0)) < 0)
            rc = nomem(err);
    }
    PQclear(r);
    return rc;
}

int er_pg_promote(er_store *s, int64_t now, int limit, int *n, char ***queues, size_t *nqueues,
                  er_error *err)
{
    *n = 0;
    if (queues)
        *queues = NULL;
    if (nqueues)
        *nqueues = 0;
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_name_set ns = {0};
    int count = 0;
    rc = promote_in_tx(s, er_pg_now(s, now), limit, &count, &ns, err);
    rc = er_pg_op_end(s, own, rc, err);
    if (rc < 0) {
        er_name_set_free(&ns);
        return rc;
    }
    *n = count;
    er_name_set_give(&ns, queues, nqueues);
    return 0;
}

/* Decides each expired lease in C (er_stall_why) and applies all the
 * decisions with one UPDATE over arrays. */
static int reap_in_tx(er_store *s, int64_t now, int limit, int *n, er_name_set *ns,
                      er_job_list *reaped, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_i64(&p, now);
    er_pg_p_i64(&p, limit);
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_REAP_SELECT, &p, &r, err);
    if (rc < 0)
        return rc;
    int rows = PQntuples(r);
    er_pg_array seqs = {0}, states = {0}, errors = {0};
    er_queue_settings qs;
    const char *qs_for = NULL;
    for (int i = 0; rc == 0 && i < rows; i++) {
        er_job j;
        er_job_init(&j);
        rc = er_pg_row_job(r, i, 0, &j, err);
        if (rc == 0 && (!qs_for || strcmp(qs_for, PQgetvalue(r, i, 1)) != 0)) {
            rc = er_settings_decode_row(opt_text(r, i, ER_PG_NCOLS), col_bool(r, i, ER_PG_NCOLS + 1),
                                      &qs, err);
            qs_for = PQgetvalue(r, i, 1);
        }
        if (rc == 0) {
            er_stall_outcome why = er_stall_why(&j, qs.max_stalled);
            er_state next = why == ER_STALL_RETRY ? ER_STATE_WAITING : ER_STATE_DEAD;
            char *text = NULL;
            if (next == ER_STATE_DEAD && !(text = er_last_error_encode_stalled(&j, why, now)))
                rc = nomem(err);
            er_pg_array_i64(&seqs, er_pg_i64(r, i, ER_PG_COL_SEQ));
            er_pg_array_i64(&states, (int64_t)next);
            er_pg_array_str(&errors, text);
            free(text);
            if (rc == 0 && next == ER_STATE_WAITING && er_name_set_add(ns, j.queue) < 0)
                rc = nomem(err);
            if (rc == 0 && reaped) {
                er_job *o = er_job_list_push(reaped);
                if (!o) {
                    rc = nomem(err);
                } else {
                    *o = j;
                    o->state = next;
                    er_job_init(&j);
                }
            }
        }
        er_job_fini(&j);
    }
    PQclear(r);
    if (rc == 0 && rows > 0) {
        er_pg_params q = {0};
        er_pg_p_str(&q, er_pg_array_done(&seqs));
        er_pg_p_str(&q, er_pg_array_done(&states));
        er_pg_p_str(&q, er_pg_array_done(&errors));
        er_pg_p_i64(&q, now);
        if (seqs.oom || states.oom || errors.oom)
            rc = nomem(err);
        else
            rc = er_pg_run(s, ER_PG_REAP_APPLY, &q, NULL, err);
        if (rc == 0)
            *n = rows;
    }
    er_pg_array_fini(&seqs);
    er_pg_array_fini(&states);
    er_pg_array_fini(&errors);
    return rc;
}

int er_pg_reap(er_store *s, int64_t now, int limit, int *n, char ***queues, size_t *nqueues,
               er_job_list *reaped, er_error *err)
{
    *n = 0;
    if (queues)
        *queues = NULL;
    if (nqueues)
        *nqueues = 0;
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_name_set ns = {0};
    int count = 0;
    rc = reap_in_tx(s, er_pg_now(s, now), limit, &count, &ns, reaped, err);
    rc = er_pg_op_end(s, own, rc, err);
    if (rc < 0) {
        er_name_set_free(&ns);
        return rc;
    }
    *n = count;
    er_name_set_give(&ns, queues, nqueues);
    return 0;
}

/* Runs one retention DELETE over every queue in the arrays, keeping
 * tombstones within the dedup window; adds the jobs deleted to *n. */
static int ret_delete(er_store *s, int id, er_pg_array *names, er_pg_array *vals, int64_t now,
                      int limit, int *n, er_error *err)
{
    if (names->n == 0 || *n >= limit)
        return 0;
    er_pg_params p = {0};
    er_pg_p_str(&p, er_pg_array_done(names));
    er_pg_p_str(&p, er_pg_array_done(vals));
    er_pg_p_i64(&p, limit - *n);
    er_pg_p_i64(&p, s->dedup_window_ms);
    er_pg_p_i64(&p, now);
    if (names->oom || vals->oom)
        return nomem(err);
    PGresult *r;
    int rc = er_pg_exec(s, id, &p, &r, err);
    if (rc == 0) {
        *n += (int)er_pg_i64(r, 0, 0);
        PQclear(r);
    }
    return rc;
}

static int retention_in_tx(er_store *s, int64_t now, int limit, int *n, er_error *err)
{
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_QUEUE_ALL, NULL, &r, err);
    if (rc < 0)
        return rc;
    er_pg_array an = {0}, av = {0}, cn = {0}, cv = {0}, dn = {0}, dv = {0};
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        er_queue_settings qs;
        rc = er_settings_decode_row(opt_text(r, i, 1), col_bool(r, i, 2), &qs, err);
        if (rc < 0)
            break;
        const char *name = PQgetvalue(r, i, 0);
        const er_retention *rt = &qs.retention;
        if (rt->completed_age_s > 0) {
            er_pg_array_str(&an, name);
            er_pg_array_i64(&av, er_retention_cutoff(now, rt->completed_age_s));
        }
        if (rt->completed_count > 0) {
            er_pg_array_str(&cn, name);
            er_pg_array_i64(&cv, rt->completed_count);
        }
        if (rt->dead_age_s > 0) {
            er_pg_array_str(&dn, name);
            er_pg_array_i64(&dv, er_retention_cutoff(now, rt->dead_age_s));
        }
    }
    PQclear(r);
    if (rc == 0)
        rc = ret_delete(s, ER_PG_RET_COMPLETED_AGE, &an, &av, now, limit, n, err);
    if (rc == 0)
        rc = ret_delete(s, ER_PG_RET_COMPLETED_COUNT, &cn, &cv, now, limit, n, err);
    if (rc == 0)
        rc = ret_delete(s, ER_PG_RET_DEAD_AGE, &dn, &dv, now, limit, n, err);
    er_pg_array_fini(&an);
    er_pg_array_fini(&av);
    er_pg_array_fini(&cn);
    er_pg_array_fini(&cv);
    er_pg_array_fini(&dn);
    er_pg_array_fini(&dv);
    if (rc == 0) {
        /* tombstones past the window, a bounded batch per pass */
        er_pg_params p = {0};
        er_pg_p_i64(&p, now - s->dedup_window_ms);
        er_pg_p_i64(&p, limit);
        rc = er_pg_run(s, ER_PG_TOMB_CLEAN, &p, NULL, err);
    }
    if (rc == 0) {
        /* group rate states in the past (the same as none) */
        er_pg_params p = {0};
        er_pg_p_i64(&p, now * ER_NS_PER_MS);
        er_pg_p_i64(&p, limit);
        rc = er_pg_run(s, ER_PG_GROUP_TAT_CLEAN, &p, NULL, err);
    }
    return rc;
}

int er_pg_retention(er_store *s, int64_t now, int limit, int *n, er_error *err)
{
    *n = 0;
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    int count = 0;
    rc = retention_in_tx(s, er_pg_now(s, now), limit, &count, err);
    rc = er_pg_op_end(s, own, rc, err);
    if (rc == 0)
        *n = count;
    return rc;
}

int er_pg_next_due(er_store *s, int64_t *at, er_error *err)
{
    PGresult *r;
    int rc = er_pg_exec(s, ER_PG_NEXT_DUE, NULL, &r, err);
    if (rc < 0)
        return rc;
    *at = PQgetisnull(r, 0, 0) ? INT64_MAX : er_pg_i64(r, 0, 0);
    PQclear(r);
    return 0;
}
