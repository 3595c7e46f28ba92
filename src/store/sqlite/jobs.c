/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's job operations: enqueue, heartbeat, complete, fail,
 * release, get, cancel and list (fetch is fetch.c). Each checks its
 * precondition with the statement that writes (or before writing), so a
 * logical error leaves the transaction as it was. Decisions (backoff,
 * dead or retry) come from src/core; this file only persists them.
 */
#include "store/error_codec.h"
#include "store/sqlite/sqlite_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int er_sqlite_tombstone_find(er_store *s, const er_job *job, int64_t now, size_t index,
                             er_tombstone_list *tombs, er_error *err)
{
    if (job->id_generated || s->dedup_window_ms <= 0)
        return 0;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_TOMB_GET, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, now - s->dedup_window_ms);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        er_state state = (er_state)sqlite3_column_int(st, 1);
        int64_t finished_at = sqlite3_column_int64(st, 2);
        char queue[ER_NAME_MAX + 1];
        snprintf(queue, sizeof queue, "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_reset(st);
        /* a job stored again since (the window was longer when it came
         * back) is the duplicate to report */
        rc = er_sqlite_prep(s, ER_SQ_JOB_SEQ, &st, err);
        if (rc < 0)
            return rc;
        sqlite3_bind_text(st, 1, job->id, -1, SQLITE_STATIC);
        src = sqlite3_step(st);
        if (src == SQLITE_DONE && er_tombstone_list_add(tombs, index, queue, state, finished_at) < 0)
            rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    if (rc == 0 && src != SQLITE_ROW && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "read tombstone", err);
    sqlite3_reset(st);
    return rc;
}

int er_sqlite_enqueue(er_store *s, const er_job *job, bool *duplicate, er_job *existing,
                      er_tombstone_list *tombs, er_error *err)
{
    bool own;
    *duplicate = false;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_tombstone_list mine = {0};
    er_tombstone_list *tl = tombs ? tombs : &mine;
    size_t had = tl->len;
    rc = er_sqlite_tombstone_find(s, job, job->updated_at, 0, tl, err);
    bool remembered = tl->len > had;
    er_tombstone_list_fini(&mine);
    if (rc == 0 && remembered) {
        *duplicate = true;
        return er_sqlite_op_end(s, own, 0, err);
    }
    sqlite3_stmt *st = NULL;
    if (rc == 0)
        rc = er_sqlite_prep(s, ER_SQ_INSERT_JOB, &st, err);
    if (rc == 0)
        rc = er_sqlite_bind_job(s, st, job, err);
    if (rc == 0)
        rc = er_sqlite_run(s, st, err);
    if (rc == 0 && sqlite3_changes(s->db) == 0) {
        *duplicate = true;
        if (existing)
            rc = er_sqlite_load_job(s, job->id, existing, err);
    } else if (rc == 0) {
        rc = er_sqlite_queue_register(s, job->queue, err);
    }
    return er_sqlite_op_end(s, own, rc, err);
}

/* Marks the jobs of a batch whose rows the INSERT OR IGNORE skipped. The
 * rows it inserted have the consecutive seqs first..last (a new row's seq
 * is the largest so far plus one), so job i was inserted when its id's row
 * has a seq in that range not claimed by an earlier job of the batch with
 * the same id. Anything that does not add up is an internal error (the
 * caller rolls back). */
static int mark_skipped(er_store *s, const er_job *jobs, size_t n, int64_t inserted,
                        bool *duplicate, er_error *err)
{
    int64_t last = sqlite3_last_insert_rowid(s->db);
    int64_t first = last - inserted + 1;
    bool *claimed = calloc(inserted > 0 ? (size_t)inserted : 1, sizeof *claimed);
    if (!claimed)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_JOB_SEQ, &st, err);
    int64_t found = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        sqlite3_bind_text(st, 1, jobs[i].id, -1, SQLITE_STATIC);
        int src = sqlite3_step(st);
        if (src == SQLITE_ROW) {
            int64_t seq = sqlite3_column_int64(st, 0);
            bool mine = seq >= first && seq <= last && !claimed[seq - first];
            if (mine)
                claimed[seq - first] = true;
            duplicate[i] = !mine;
            found += mine;
        } else if (src == SQLITE_DONE) {
            rc = er_error_set(err, ER_EINTERNAL, "", "store: job '%s' was not inserted",
                              jobs[i].id);
        } else {
            rc = er_sqlite_error(s->db, src, "read job", err);
        }
        sqlite3_reset(st);
    }
    free(claimed);
    if (rc == 0 && found != inserted)
        rc = er_error_set(err, ER_EINTERNAL, "", "store: batch insert accounting failed");
    return rc;
}

/* Inserts the batch with one INSERT OR IGNORE ... SELECT FROM er_newjobs,
 * which is what n calls of enqueue do, in order: a job whose id is stored
 * already, or came earlier in the batch, is skipped (a duplicate). Any
 * failure is a storage error: the statement has no journal of its own, so
 * the caller must roll the transaction back. */
static int insert_many(er_store *s, const er_job *jobs, size_t n, bool *duplicate,
                       er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_INSERT_MANY, &st, err);
    if (rc < 0)
        return rc;
    s->newjobs = jobs;
    s->nnew = n;
    rc = er_sqlite_run(s, st, err);
    s->newjobs = NULL;
    s->nnew = 0;
    int64_t inserted = rc == 0 ? sqlite3_changes64(s->db) : 0;
    if (rc == 0 && inserted != (int64_t)n)
        rc = mark_skipped(s, jobs, n, inserted, duplicate, err);
    const char *registered = NULL;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (duplicate[i] || (registered && strcmp(registered, jobs[i].queue) == 0))
            continue;
        rc = er_sqlite_queue_register(s, jobs[i].queue, err);
        registered = jobs[i].queue;
    }
    /* a logical code would let the caller go on with part of the batch */
    if (rc < 0 && rc != ER_EUNAVAIL && rc != ER_EFULL && rc != ER_ENOMEM) {
        rc = ER_EINTERNAL;
        if (err)
            err->code = rc;
    }
    return rc;
}

/* Appends the tombstones that remember ids of the batch (in job order) to
 * *tl: none to look for when no id is a client's or the table is empty
 * (one step), else one statement over er_newjobs. */
static int find_tombstones(er_store *s, const er_job *jobs, size_t n, er_tombstone_list *tl,
                           er_error *err)
{
    size_t given = 0;
    for (size_t i = 0; i < n; i++)
        given += !jobs[i].id_generated;
    if (given == 0 || s->dedup_window_ms <= 0)
        return 0;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_TOMB_ANY, &st, err);
    if (rc < 0)
        return rc;
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    if (src == SQLITE_DONE)
        return 0;
    if (src != SQLITE_ROW)
        return er_sqlite_error(s->db, src, "read tombstones", err);
    if ((rc = er_sqlite_prep(s, ER_SQ_TOMB_MANY, &st, err)) < 0)
        return rc;
    sqlite3_bind_int64(st, 1, jobs[0].updated_at - s->dedup_window_ms);
    s->newjobs = jobs;
    s->nnew = n;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(st, 0);
        if (rc == 0 && i >= 0 && (size_t)i < n &&
            er_tombstone_list_add(tl, (size_t)i, (const char *)sqlite3_column_text(st, 1),
                                  (er_state)sqlite3_column_int(st, 2),
                                  sqlite3_column_int64(st, 3)) < 0)
            rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    s->newjobs = NULL;
    s->nnew = 0;
    if (rc == 0 && src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "read tombstones", err);
    sqlite3_reset(st);
    return rc;
}

/* insert_many for the jobs no tombstone remembers: the others are
 * duplicates, and the rest go in as one batch of shallow copies. */
static int insert_unremembered(er_store *s, const er_job *jobs, size_t n, bool *duplicate,
                               const er_tombstone_list *tl, er_error *err)
{
    er_job *rest = malloc(n * sizeof *rest);
    bool *rdup = calloc(n, sizeof *rdup);
    size_t *at = malloc(n * sizeof *at);
    int rc = 0;
    if (!rest || !rdup || !at) {
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
        goto out;
    }
    size_t m = 0, t = 0;
    for (size_t i = 0; i < n; i++) {
        if (t < tl->len && tl->items[t].index == i) {
            duplicate[i] = true;
            t++;
            continue;
        }
        rest[m] = jobs[i];
        at[m++] = i;
    }
    if (m == 1)
        rc = er_sqlite_enqueue(s, &rest[0], &rdup[0], NULL, NULL, err);
    else if (m > 1)
        rc = insert_many(s, rest, m, rdup, err);
    for (size_t k = 0; rc == 0 && k < m; k++)
        duplicate[at[k]] = rdup[k];
out:
    free(rest);
    free(rdup);
    free(at);
    return rc;
}

int er_sqlite_enqueue_many(er_store *s, const er_job *jobs, size_t n, bool *duplicate,
                           er_tombstone_list *tombs, er_error *err)
{
    for (size_t i = 0; i < n; i++)
        duplicate[i] = false;
    if (n == 0)
        return 0;
    bool own;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    er_tombstone_list found = {0};
    rc = find_tombstones(s, jobs, n, &found, err);
    if (rc == 0 && found.len)
        rc = insert_unremembered(s, jobs, n, duplicate, &found, err);
    else if (rc == 0 && n == 1)
        rc = er_sqlite_enqueue(s, &jobs[0], &duplicate[0], NULL, NULL, err);
    else if (rc == 0)
        rc = insert_many(s, jobs, n, duplicate, err);
    if (rc == 0 && tombs) {
        for (size_t i = 0; rc == 0 && i < found.len; i++) {
            const er_tombstone *t = &found.items[i];
            if (er_tombstone_list_add(tombs, t->index, t->queue, t->state, t->finished_at) < 0)
                rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
        }
    }
    er_tombstone_list_fini(&found);
    if (rc < 0) {
        for (size_t i = 0; i < n; i++)
            duplicate[i] = false;
    }
    return er_sqlite_op_end(s, own, rc, err);
}

/* Explains why a lease-checked UPDATE matched no row. */
static int lease_refused(er_store *s, const char *id, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_LEASE_STATE, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_DONE || src == SQLITE_ROW)
        rc = er_job_lease_refused(src == SQLITE_ROW,
                                  src == SQLITE_ROW ? (er_state)sqlite3_column_int(st, 0) : 0, id,
                                  err);
    else
        rc = er_sqlite_error(s->db, src, "read job", err);
    sqlite3_reset(st);
    return rc;
}

/* Runs a prepared lease-checked UPDATE; on no match explains why. */
static int lease_update(er_store *s, sqlite3_stmt *st, const char *id, er_error *err)
{
    int rc = er_sqlite_run(s, st, err);
    if (rc == 0 && sqlite3_changes(s->db) == 0)
        rc = lease_refused(s, id, err);
    return rc;
}

int er_sqlite_heartbeat(er_store *s, const char *id, const char *token, int64_t extend_ms,
                        const char *progress, int64_t now, int64_t *expires_at, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_HEARTBEAT, &st, err);
    if (rc < 0)
        return rc;
    int64_t until = now + extend_ms;
    sqlite3_bind_int64(st, 1, until);
    if (progress)
        sqlite3_bind_text(st, 2, progress, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 2);
    sqlite3_bind_int64(st, 3, now);
    sqlite3_bind_text(st, 4, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, token ? token : "", -1, SQLITE_STATIC);
    rc = lease_update(s, st, id, err);
    if (rc == 0 && expires_at)
        *expires_at = until;
    return rc;
}

/* What a completing UPDATE's RETURNING says, from column `col` on: queue,
 * name, trace_id, attempts, run_at, started_at. */
static void info_of_row(er_ack_info *info, sqlite3_stmt *st, int col)
{
    er_ack_info_set(info, (const char *)sqlite3_column_text(st, col),
                    (const char *)sqlite3_column_text(st, col + 1),
                    (const char *)sqlite3_column_text(st, col + 2), sqlite3_column_int(st, col + 3),
                    sqlite3_column_int64(st, col + 4), sqlite3_column_int64(st, col + 5));
}

int er_sqlite_complete(er_store *s, const char *id, const char *token, const char *result,
                       int64_t now, er_ack_info *info, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_COMPLETE, &st, err);
    if (rc < 0)
        return rc;
    if (result)
        sqlite3_bind_text(st, 1, result, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 1);
    sqlite3_bind_int64(st, 2, now);
    sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, token ? token : "", -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    bool done = src == SQLITE_ROW;
    if (done) {
        info_of_row(info, st, 0);
        er_ack_info_set_unique(info, (const char *)sqlite3_column_text(st, 6));
        src = sqlite3_step(st);
    }
    rc = src == SQLITE_DONE ? 0 : er_sqlite_error(s->db, src, "complete", err);
    sqlite3_reset(st);
    if (rc == 0 && !done)
        rc = lease_refused(s, id, err);
    return rc;
}

/* The items one by one, as the engine would call complete. */
static int complete_each(er_store *s, er_complete_item *items, size_t n, int64_t now,
                         er_error *err)
{
    for (size_t i = 0; i < n; i++) {
        er_complete_item *it = &items[i];
        er_error ierr;
        int rc = er_sqlite_complete(s, it->id, it->token, it->result, now, it->info, &ierr);
        if (rc < 0 && it->err)
            *it->err = ierr;
        if (rc < 0 && rc != ER_ESTALE && rc != ER_ENOTFOUND) {
            if (err)
                *err = ierr;
            return rc;
        }
        it->rc = rc;
    }
    return 0;
}

/* Orders item indexes by id (qsort_r). */
static int by_id(const void *a, const void *b, void *items)
{
    const er_complete_item *it = items;
    return strcmp(it[*(const size_t *)a].id, it[*(const size_t *)b].id);
}

/* The item indexes in id order (owned), or NULL when two items name the
 * same job or there is no memory to tell. */
static size_t *distinct_ids(const er_complete_item *items, size_t n)
{
    size_t *ord = malloc(n * sizeof *ord);
    if (!ord)
        return NULL;
    for (size_t i = 0; i < n; i++)
        ord[i] = i;
    qsort_r(ord, n, sizeof *ord, by_id, (void *)items);
    for (size_t i = 1; i < n; i++)
        if (strcmp(items[ord[i - 1]].id, items[ord[i]].id) == 0) {
            free(ord);
            return NULL;
        }
    return ord;
}

/* The item whose id is `id`, through ord (distinct_ids), or NULL. */
static er_complete_item *item_of(er_complete_item *items, const size_t *ord, size_t n,
                                 const char *id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(items[ord[mid]].id, id);
        if (c == 0)
            return &items[ord[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int run_stmt(er_store *s, int id, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, id, &st, err);
    return rc < 0 ? rc : er_sqlite_run(s, st, err);
}

/* One UPDATE ... FROM er_acks for the whole batch, inside a savepoint. When
 * it changed every item's job (the usual case) that is what n calls of
 * complete would have done: the ids are distinct, so no item sees another's
 * change. Otherwise (a stale token, an unknown id) the savepoint is undone
 * and the items run one by one, in order; so does a batch naming an id
 * twice (the join would pair that job with both items). */
int er_sqlite_complete_many(er_store *s, er_complete_item *items, size_t n, int64_t now,
                            er_error *err)
{
    for (size_t i = 0; i < n; i++)
        items[i].rc = 0;
    size_t *ord = n < 2 ? NULL : distinct_ids(items, n);
    if (!ord)
        return complete_each(s, items, n, now, err);
    int rc = run_stmt(s, ER_SQ_SAVEPOINT, err);
    if (rc < 0) {
        free(ord);
        return rc;
    }
    sqlite3_stmt *st = NULL;
    size_t changed = 0;
    rc = er_sqlite_prep(s, ER_SQ_COMPLETE_MANY, &st, err);
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, now);
        s->acks = items;
        s->nacks = n;
        int src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            changed++;
            er_complete_item *it = item_of(items, ord, n, (const char *)sqlite3_column_text(st, 0));
            if (it) {
                info_of_row(it->info, st, 1);
                er_ack_info_set_unique(it->info, (const char *)sqlite3_column_text(st, 7));
            }
        }
        if (src != SQLITE_DONE)
            rc = er_sqlite_error(s->db, src, "complete", err);
        sqlite3_reset(st);
        s->acks = NULL;
        s->nacks = 0;
    }
    free(ord);
    bool all = rc == 0 && changed == n;
    if (rc == 0 && !all)
        rc = run_stmt(s, ER_SQ_SAVEPOINT_UNDO, err);
    if (rc == 0)
        rc = run_stmt(s, ER_SQ_SAVEPOINT_RELEASE, err);
    if (rc == 0 && !all)
        return complete_each(s, items, n, now, err);
    if (rc < 0 && !sqlite3_get_autocommit(s->db)) {
        /* the caller rolls back; leave no savepoint open meanwhile */
        (void)run_stmt(s, ER_SQ_SAVEPOINT_UNDO, NULL);
        (void)run_stmt(s, ER_SQ_SAVEPOINT_RELEASE, NULL);
    }
    return rc;
}

int er_sqlite_release(er_store *s, const char *id, const char *token, int64_t now,
                      er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_RELEASE, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, token ? token : "", -1, SQLITE_STATIC);
    return lease_update(s, st, id, err);
}

static int fail_in_tx(er_store *s, const char *id, const char *token, const er_failure *f,
                          int64_t now, er_rand *r, er_fail_outcome *outcome, er_ack_info *info,
                          er_error *err)
{
    er_job job;
    int rc = er_sqlite_load_job(s, id, &job, err);
    if (rc < 0)
        return rc;
    if ((rc = er_job_lease_check(&job, id, token, err)) < 0) {
        er_job_fini(&job);
        return rc;
    }
    er_sqlite_queue *q;
    rc = er_sqlite_queue_get(s, job.queue, &q, err);
    if (rc < 0)
        goto out;
    er_fail_outcome o;
    memset(&o, 0, sizeof o);
    int max_started = q->settings.max_started > 0 ? q->settings.max_started
                                                  : ER_DEFAULT_MAX_STARTED;
    er_fail_decide(&job, f, max_started, q->settings.throttle_max_ms, now, r, &o);
    char *text = er_last_error_encode(f, job.attempts, o.reason, now);
    if (!text) {
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
        goto out;
    }
    sqlite3_stmt *st = NULL;
    rc = er_sqlite_prep(s, ER_SQ_FAIL_APPLY, &st, err);
    if (rc == 0) {
        sqlite3_bind_int(st, 1, (int)o.state);
        sqlite3_bind_int64(st, 2, o.state == ER_STATE_SCHEDULED ? o.run_at : job.run_at);
        sqlite3_bind_int(st, 3, o.attempts);
        sqlite3_bind_text(st, 4, text, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, now);
        sqlite3_bind_int64(st, 6, o.state == ER_STATE_DEAD ? now : 0);
        sqlite3_bind_text(st, 7, id, -1, SQLITE_STATIC);
        rc = er_sqlite_run(s, st, err);
    }
    free(text);
    if (rc == 0 && o.queue_pause_until > 0) {
        rc = er_sqlite_prep(s, ER_SQ_QUEUE_THROTTLE, &st, err);
        if (rc == 0) {
            sqlite3_bind_text(st, 1, job.queue, -1, SQLITE_STATIC);
            sqlite3_bind_int64(st, 2, o.queue_pause_until);
            rc = er_sqlite_run(s, st, err);
        }
        if (rc == 0) {
            q->in_table = true;
            if (o.queue_pause_until > q->throttled_until)
                q->throttled_until = o.queue_pause_until;
        }
    }
    if (rc == 0 && outcome)
        *outcome = o;
    if (rc == 0)
        er_ack_info_set(info, job.queue, job.name, job.trace_id, job.attempts, job.run_at,
                        job.started_at);
out:
    er_job_fini(&job);
    return rc;
}

int er_sqlite_fail(er_store *s, const char *id, const char *token, const er_failure *f,
                   int64_t now, er_rand *r, er_fail_outcome *outcome, er_ack_info *info,
                   er_error *err)
{
    bool own;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    rc = fail_in_tx(s, id, token, f, now, r, outcome, info, err);
    return er_sqlite_op_end(s, own, rc, err);
}

int er_sqlite_get_job(er_store *s, const char *id, er_job *out, er_error *err)
{
    return er_sqlite_load_job(s, id, out, err);
}

int er_sqlite_cancel(er_store *s, const char *id, int64_t now, er_job *out, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_CANCEL, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
    er_job j;
    er_job_init(&j);
    bool found = false;
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        found = true;
        if (rc == 0)
            rc = er_sqlite_row_job(st, &j, err);
    }
    if (src != SQLITE_DONE)
        rc = er_sqlite_error(s->db, src, "cancel", err);
    sqlite3_reset(st);
    if (rc < 0) {
        er_job_fini(&j);
        return rc;
    }
    if (!found) {
        er_job cur;
        rc = er_sqlite_load_job(s, id, &cur, err);
        if (rc < 0)
            return rc;
        const char *name = er_state_name(cur.state);
        rc = er_error_set(err, ER_ECONFLICT, "id", "job '%s' is %s and cannot be cancelled", id,
                          name ? name : "?");
        er_job_fini(&cur);
        return rc;
    }
    if (out)
        *out = j;
    else
        er_job_fini(&j);
    return 0;
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

int er_sqlite_list_jobs(er_store *s, const char *queue, er_state state, int limit,
                        const char *cursor, er_job_list *out, char **next_cursor, er_error *err)
{
    *next_cursor = NULL;
    int64_t after;
    int rc = parse_seq(cursor, &after, err);
    if (rc < 0)
        return rc;
    if (limit < 1)
        limit = 1;
    sqlite3_stmt *st = NULL;
    rc = er_sqlite_prep(s, state == ER_STATE_ACTIVE ? ER_SQ_LIST_ACTIVE : ER_SQ_LIST_JOBS, &st,
                        err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    if (state != ER_STATE_ACTIVE)
        sqlite3_bind_int(st, 2, (int)state);
    sqlite3_bind_int64(st, 3, after);
    sqlite3_bind_int64(st, 4, (int64_t)limit + 1); /* one more tells whether a page follows */
    size_t base = out->len;
    int n = 0, src = SQLITE_DONE;
    int64_t last = 0;
    size_t used = 0;
    bool more = false;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == limit) {
            more = true;
            continue;
        }
        er_job *j = er_job_list_push(out);
        if (!j) {
            rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
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
        last = sqlite3_column_int64(st, ER_SQ_COL_SEQ);
        n++;
    }
    if (rc == 0 && src != SQLITE_DONE && src != SQLITE_ROW)
        rc = er_sqlite_error(s->db, src, "list jobs", err);
    sqlite3_reset(st);
    if (rc == 0 && more) {
        char buf[32];
        snprintf(buf, sizeof buf, "%" PRId64, last);
        if (!(*next_cursor = strdup(buf)))
            rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    if (rc < 0) {
        while (out->len > base)
            er_job_fini(&out->items[--out->len]);
    }
    return rc;
}
