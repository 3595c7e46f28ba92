/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's queue, dead-letter and maintenance operations: queue
 * listing and settings, dead-letter list/redrive/delete, and the bounded
 * promote, reap, retention and next-due passes the engine's timers run.
 * Stall decisions come from src/core (er_stall_why); this file persists.
 */
#include "store/error_codec.h"
#include "store/settings_codec.h"
#include "store/sqlite/sqlite_int.h"
#include "util/buf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nomem(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* ---- queues ---- */

static int find_info(er_queue_info *qs, size_t n, const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(qs[mid].name, name);
        if (c == 0)
            return (int)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int load_queue_rows(er_store *s, er_queue_info **out, size_t *n, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_QUEUE_ALL, &st, err);
    if (rc < 0)
        return rc;
    er_queue_info *qs = NULL;
    size_t len = 0, cap = 0;
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (ER_GROW(&qs, &cap, len + 1, ER_LIST_MAX) < 0) {
            rc = nomem(err);
            break;
        }
        er_queue_info *q = &qs[len];
        memset(q, 0, sizeof *q);
        if (!(q->name = strdup((const char *)sqlite3_column_text(st, 0)))) {
            rc = nomem(err);
            break;
        }
        len++;
        rc = er_settings_decode_row((const char *)sqlite3_column_text(st, 1),
                                      sqlite3_column_int(st, 2), &q->settings, err);
        if (rc < 0)
            break;
        q->throttled_until = sqlite3_column_int64(st, 3);
    }
    if (rc == 0 && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "list queues", err);
    sqlite3_reset(st);
    if (rc < 0) {
        er_queue_info_list_free(qs, len);
        return rc;
    }
    *out = qs;
    *n = len;
    return 0;
}

int er_sqlite_list_queues(er_store *s, int64_t now, er_queue_info **out, size_t *n,
                          er_error *err)
{
    *out = NULL;
    *n = 0;
    er_queue_info *qs = NULL;
    size_t len = 0;
    int rc = load_queue_rows(s, &qs, &len, err);
    if (rc < 0)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = er_sqlite_prep(s, ER_SQ_COUNTS, &st, err);
    if (rc == 0) {
        int src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            int i = find_info(qs, len, (const char *)sqlite3_column_text(st, 0));
            int state = sqlite3_column_int(st, 1);
            if (i >= 0 && state >= 0 && state < 6)
                qs[i].counts[state] = sqlite3_column_int64(st, 2);
        }
        if (src != SQLITE_DONE)
            rc = er_sqlite_error(s->db, src, "count jobs", err);
        sqlite3_reset(st);
    }
    for (size_t i = 0; rc == 0 && i < len; i++) {
        if (qs[i].counts[ER_STATE_WAITING] == 0)
            continue;
        rc = er_sqlite_prep(s, ER_SQ_OLDEST_WAITING, &st, err);
        if (rc < 0)
            break;
        sqlite3_bind_text(st, 1, qs[i].name, -1, SQLITE_STATIC);
        int src = sqlite3_step(st);
        if (src == SQLITE_ROW)
            qs[i].oldest_waiting_ms = sqlite3_column_int64(st, 0);
        else
            rc = er_sqlite_error(s->db, src, "oldest waiting", err);
        sqlite3_reset(st);
    }
    if (rc < 0) {
        er_queue_info_list_free(qs, len);
        return rc;
    }
    *out = qs;
    *n = len;
    return 0;
}

int er_sqlite_list_queue_settings(er_store *s, er_queue_info **out, size_t *n, er_error *err)
{
    *out = NULL;
    *n = 0;
    return load_queue_rows(s, out, n, err);
}

int er_sqlite_get_queue_settings(er_store *s, const char *queue, er_queue_settings *out,
                                 er_error *err)
{
    /* Inside a transaction begin() has checked data_version, so the cache is
     * current; outside one (reader connections) read through. */
    if (!sqlite3_get_autocommit(s->db)) {
        er_sqlite_queue *q;
        int qrc = er_sqlite_queue_get(s, queue, &q, err);
        if (qrc == 0)
            *out = q->settings;
        return qrc;
    }
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_QUEUE_GET, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        rc = er_settings_decode_row((const char *)sqlite3_column_text(st, 0),
                                      sqlite3_column_int(st, 1), out, err);
    else if (src == SQLITE_DONE)
        er_queue_settings_default(out);
    else
        rc = er_sqlite_error(s->db, src, "read queue", err);
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_cached_queue_defaults(er_store *s, const char *queue, er_job_defaults *out,
                                    er_error *err)
{
    if (sqlite3_get_autocommit(s->db))
        return 1; /* no transaction: the cache may be stale */
    er_sqlite_queue *q;
    int rc = er_sqlite_queue_get(s, queue, &q, err);
    if (rc == 0)
        *out = q->settings.defaults;
    return rc;
}

int er_sqlite_put_queue_settings(er_store *s, const char *queue, const er_queue_settings *in,
                                 er_error *err)
{
    char *text = er_settings_encode(in);
    if (!text)
        return nomem(err);
    er_sqlite_queue *q;
    int rc = er_sqlite_queue_get(s, queue, &q, err);
    sqlite3_stmt *st = NULL;
    if (rc == 0)
        rc = er_sqlite_prep(s, ER_SQ_QUEUE_PUT, &st, err);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, in->paused ? 1 : 0);
        rc = er_sqlite_run(s, st, err);
    }
    free(text);
    if (rc == 0) {
        q->settings = *in;
        q->in_table = true;
    }
    return rc;
}

int er_sqlite_clear_queue_throttle(er_store *s, const char *queue, er_error *err)
{
    er_sqlite_queue *q;
    int rc = er_sqlite_queue_get(s, queue, &q, err);
    if (rc < 0 || q->throttled_until == 0)
        return rc;
    sqlite3_stmt *st = NULL;
    if ((rc = er_sqlite_prep(s, ER_SQ_QUEUE_UNTHROTTLE, &st, err)) < 0)
        return rc;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    if ((rc = er_sqlite_run(s, st, err)) == 0)
        q->throttled_until = 0;
    return rc;
}

/* ---- dead letters ---- */

int er_sqlite_list_dead(er_store *s, const char *queue, int limit, const char *cursor,
                        er_job_list *out, char **next_cursor, er_error *err)
{
    *next_cursor = NULL;
    int64_t at, seq;
    int rc = er_dead_cursor_parse(cursor, &at, &seq, err);
    if (rc < 0)
        return rc;
    if (limit < 1)
        limit = 1;
    sqlite3_stmt *st = NULL;
    rc = er_sqlite_prep(s, queue ? ER_SQ_LIST_DEAD_QUEUE : ER_SQ_LIST_DEAD, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, at);
    sqlite3_bind_int64(st, 2, seq);
    sqlite3_bind_int64(st, 3, (int64_t)limit + 1);
    if (queue)
        sqlite3_bind_text(st, 4, queue, -1, SQLITE_STATIC);
    size_t base = out->len;
    int n = 0, src = SQLITE_DONE;
    int64_t last_at = 0, last_seq = 0;
    size_t used = 0;
    bool more = false;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == limit) {
            more = true;
            continue;
        }
        er_job *j = er_job_list_push(out);
        if (!j) {
            rc = nomem(err);
            break;
        }
        rc = er_sqlite_row_job(st, j, err);
        if (rc < 0)
            break;
        size_t b = er_job_reply_bytes(j);
        if (!er_reply_takes((size_t)n, used, b, s->reply_max)) { /* the next page's */
            er_job_fini(&out->items[--out->len]);
            more = true;
            break;
        }
        used += b;
        last_at = j->finished_at;
        last_seq = sqlite3_column_int64(st, ER_SQ_COL_SEQ);
        n++;
    }
    if (rc == 0 && src != SQLITE_DONE && src != SQLITE_ROW)
        rc = er_sqlite_error(s->db, src, "list dead", err);
    sqlite3_reset(st);
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
    int rc = er_sqlite_load_job(s, id, &dead, err);
    if (rc < 0)
        return rc == ER_ENOTFOUND
                   ? er_error_set(err, ER_ENOTFOUND, "id", "no dead job '%s'", id)
                   : rc;
    int n = 0;
    if ((rc = er_job_redrive_plan(&dead, now, &nj, &n, err)) < 0)
        goto out;
    if ((rc = er_store_redrive_check(er_sqlite_tombstone_find, s, &nj, now, err)) < 0)
        goto out;
    sqlite3_stmt *st = NULL;
    rc = er_sqlite_prep(s, ER_SQ_INSERT_JOB, &st, err);
    if (rc == 0)
        rc = er_sqlite_bind_job(s, st, &nj, err);
    if (rc == 0)
        rc = er_sqlite_run(s, st, err);
    if (rc == 0 && sqlite3_changes(s->db) == 0)
        rc = er_error_set(err, ER_ECONFLICT, "id", "job '%s' already exists", nj.id);
    if (rc == 0)
        rc = er_sqlite_prep(s, ER_SQ_REDRIVE_MARK, &st, err);
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, now);
        sqlite3_bind_int(st, 2, n);
        sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
        rc = er_sqlite_run(s, st, err);
    }
    if (rc == 0)
        rc = er_sqlite_queue_register(s, nj.queue, err);
    if (rc == 0 && out) {
        *out = nj;
        er_job_init(&nj);
    }
out:
    er_job_fini(&dead);
    er_job_fini(&nj);
    return rc;
}

int er_sqlite_redrive(er_store *s, const char *id, int64_t now, er_job *out, er_error *err)
{
    bool own;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    int rrc = redrive_in_tx(s, id, now, out, err);
    rc = er_sqlite_op_end(s, own, rrc, err);
    if (rrc == 0 && rc < 0 && out)
        er_job_fini(out); /* the commit failed: nothing was redriven */
    return rc;
}

int er_sqlite_delete_dead(er_store *s, const char *id, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_DELETE_DEAD, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    rc = er_sqlite_run(s, st, err);
    if (rc == 0 && sqlite3_changes(s->db) == 0)
        rc = er_error_set(err, ER_ENOTFOUND, "id", "no dead job '%s'", id);
    return rc;
}

/* ---- maintenance ---- */

int er_sqlite_promote(er_store *s, int64_t now, int limit, int *n, char ***queues,
                      size_t *nqueues, er_error *err)
{
    *n = 0;
    if (queues)
        *queues = NULL;
    if (nqueues)
        *nqueues = 0;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_PROMOTE, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int(st, 2, limit);
    er_name_set ns = {0};
    int count = 0, src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        count++;
        if (rc == 0 && er_name_set_add(&ns, (const char *)sqlite3_column_text(st, 0)) < 0)
            rc = nomem(err);
    }
    if (rc == 0 && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "promote", err);
    sqlite3_reset(st);
    if (rc < 0) {
        er_name_set_free(&ns);
        return rc;
    }
    *n = count;
    er_name_set_give(&ns, queues, nqueues);
    return 0;
}

static int reap_in_tx(er_store *s, int64_t now, int limit, int *n, er_name_set *ns,
                      er_job_list *reaped, er_error *err)
{
    er_job_list due = {0};
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_REAP_SELECT, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_int(st, 2, limit);
    int64_t *seqs = NULL;
    size_t seqcap = 0;
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (ER_GROW(&seqs, &seqcap, due.len + 1, ER_LIST_MAX) < 0) {
            rc = nomem(err);
            break;
        }
        er_job *j = er_job_list_push(&due);
        if (!j) {
            rc = nomem(err);
            break;
        }
        seqs[due.len - 1] = sqlite3_column_int64(st, ER_SQ_COL_SEQ);
        if ((rc = er_sqlite_row_job(st, j, err)) < 0)
            break;
    }
    if (rc == 0 && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "reap", err);
    sqlite3_reset(st);
    for (size_t i = 0; rc == 0 && i < due.len; i++) {
        const er_job *j = &due.items[i];
        er_sqlite_queue *q;
        if ((rc = er_sqlite_queue_get(s, j->queue, &q, err)) < 0)
            break;
        int max_stalled = q->settings.max_stalled;
        er_stall_outcome why = er_stall_why(j, max_stalled);
        er_state next = why == ER_STALL_RETRY ? ER_STATE_WAITING : ER_STATE_DEAD;
        char *text = NULL;
        if (next == ER_STATE_DEAD && !(text = er_last_error_encode_stalled(j, why, now))) {
            rc = nomem(err);
            break;
        }
        if ((rc = er_sqlite_prep(s, ER_SQ_REAP_APPLY, &st, err)) == 0) {
            sqlite3_bind_int(st, 1, (int)next);
            if (text)
                sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
            else
                sqlite3_bind_null(st, 2);
            sqlite3_bind_int64(st, 3, next == ER_STATE_DEAD ? now : 0);
            sqlite3_bind_int64(st, 4, now);
            sqlite3_bind_int64(st, 5, seqs[i]);
            rc = er_sqlite_run(s, st, err);
        }
        free(text);
        if (rc == 0 && next == ER_STATE_WAITING && er_name_set_add(ns, j->queue) < 0)
            rc = nomem(err);
        if (rc == 0)
            (*n)++;
        due.items[i].state = next;
    }
    free(seqs);
    if (rc == 0 && reaped)
        rc = er_job_list_take(reaped, &due) < 0 ? nomem(err) : 0;
    er_job_list_fini(&due);
    return rc;
}

int er_sqlite_reap(er_store *s, int64_t now, int limit, int *n, char ***queues,
                   size_t *nqueues, er_job_list *reaped, er_error *err)
{
    *n = 0;
    if (queues)
        *queues = NULL;
    if (nqueues)
        *nqueues = 0;
    bool own;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_name_set ns = {0};
    int count = 0;
    rc = reap_in_tx(s, now, limit, &count, &ns, reaped, err);
    rc = er_sqlite_op_end(s, own, rc, err);
    if (rc < 0) {
        er_name_set_free(&ns);
        return rc;
    }
    *n = count;
    er_name_set_give(&ns, queues, nqueues);
    return 0;
}

/* Keeps a tombstone of a job a retention DELETE returned (its id, queue,
 * state, finished_at, set_flags), unless its id was generated or it
 * finished before the dedup window (cutoff). */
static int keep_tombstone(er_store *s, sqlite3_stmt *del, int64_t cutoff, er_error *err)
{
    if ((sqlite3_column_int(del, 4) & ER_FLAG_ID_GENERATED) ||
        sqlite3_column_int64(del, 3) <= cutoff)
        return 0;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_TOMB_PUT, &st, err);
    if (rc < 0)
        return rc;
    for (int c = 0; c < 4; c++)
        sqlite3_bind_value(st, c + 1, sqlite3_column_value(del, c));
    return er_sqlite_run(s, st, err);
}

/* Runs one bounded retention DELETE, keeping tombstones within the dedup
 * window; adds the rows deleted to *n. */
static int ret_delete(er_store *s, int id, const char *queue, int64_t arg, int64_t now,
                      int limit, int *n, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, id, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, arg);
    sqlite3_bind_int(st, 3, limit);
    bool keep = s->dedup_window_ms > 0;
    int64_t cutoff = now - s->dedup_window_ms;
    int src;
    /* the DELETE is done at the first step; its rows are read from memory */
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        (*n)++;
        if (rc == 0 && keep)
            rc = keep_tombstone(s, st, cutoff, err);
    }
    if (rc == 0 && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "retention", err);
    sqlite3_reset(st);
    return rc;
}

/* Deletes up to `limit` tombstones past the dedup window. */
static int tombstones_clean(er_store *s, int64_t now, int limit, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_TOMB_CLEAN, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, now - s->dedup_window_ms);
    sqlite3_bind_int(st, 2, limit);
    return er_sqlite_run(s, st, err);
}

static int retention_in_tx(er_store *s, int64_t now, int limit, int *n, er_error *err)
{
    er_queue_info *qs = NULL;
    size_t len = 0;
    int rc = load_queue_rows(s, &qs, &len, err);
    for (size_t i = 0; rc == 0 && i < len && *n < limit; i++) {
        const er_retention *r = &qs[i].settings.retention;
        if (r->completed_age_s > 0)
            rc = ret_delete(s, ER_SQ_RET_COMPLETED_AGE, qs[i].name,
                            er_retention_cutoff(now, r->completed_age_s), now, limit - *n, n, err);
        if (rc == 0 && r->completed_count > 0 && *n < limit)
            rc = ret_delete(s, ER_SQ_RET_COMPLETED_COUNT, qs[i].name, r->completed_count, now,
                            limit - *n, n, err);
        if (rc == 0 && r->dead_age_s > 0 && *n < limit)
            rc = ret_delete(s, ER_SQ_RET_DEAD_AGE, qs[i].name, er_retention_cutoff(now, r->dead_age_s), now,
                            limit - *n, n, err);
    }
    er_queue_info_list_free(qs, len);
    if (rc == 0)
        rc = tombstones_clean(s, now, limit, err);
    if (rc == 0) { /* group rate states in the past say nothing */
        sqlite3_stmt *st = NULL;
        if ((rc = er_sqlite_prep(s, ER_SQ_GROUP_TAT_CLEAN, &st, err)) == 0) {
            sqlite3_bind_int64(st, 1, now * ER_NS_PER_MS);
            rc = er_sqlite_run(s, st, err);
        }
    }
    return rc;
}

int er_sqlite_retention(er_store *s, int64_t now, int limit, int *n, er_error *err)
{
    *n = 0;
    bool own;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    int count = 0;
    rc = retention_in_tx(s, now, limit, &count, err);
    rc = er_sqlite_op_end(s, own, rc, err);
    if (rc == 0)
        *n = count;
    return rc;
}

static int first_value(er_store *s, int id, int64_t *v, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, id, &st, err);
    if (rc < 0)
        return rc;
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW)
        *v = sqlite3_column_int64(st, 0);
    else if (src == SQLITE_DONE)
        *v = INT64_MAX;
    else
        rc = er_sqlite_error(s->db, src, "next due", err);
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_next_due(er_store *s, int64_t *at, er_error *err)
{
    int64_t a = INT64_MAX, b = INT64_MAX;
    int rc = first_value(s, ER_SQ_NEXT_SCHEDULED, &a, err);
    if (rc == 0)
        rc = first_value(s, ER_SQ_NEXT_LEASE, &b, err);
    if (rc == 0)
        *at = a < b ? a : b;
    return rc;
}
