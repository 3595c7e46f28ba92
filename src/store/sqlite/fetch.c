/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's fetch: the queues' states for core's fetch policy
 * (core/fetch.h), a plain queue's lease in one UPDATE ... RETURNING, and
 * the row work of core's group planner (er_fetch_rows): seeks in
 * jobs_grouped and jobs_waiting, a round's picks leased with one statement,
 * its groups' rooms read and rate states written with one each.
 */
#include "core/fetch.h"
#include "store/sqlite/sqlite_int.h"
#include "util/buf.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A leased row with its insertion order, for sorting a fetch batch. */
typedef struct leased {
    er_job job;
    int64_t seq;
} leased;

/* Batch order: the planner's picks keep their order (seq holds it). */
static int pick_cmp(const void *a, const void *b)
{
    const leased *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int leased_cmp(const void *a, const void *b)
{
    const leased *x = a, *y = b;
    if (x->job.priority != y->job.priority)
        return x->job.priority > y->job.priority ? -1 : 1;
    if (x->job.run_at != y->job.run_at)
        return x->job.run_at < y->job.run_at ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Columns of ER_SQ_FETCH's RETURNING list. */
enum {
    F_ID, F_QUEUE, F_NAME, F_PAYLOAD, F_PRIORITY, F_GRP, F_RUN_AT, F_MAX_ATTEMPTS, F_TIMEOUT_MS,
    F_TRACE_ID, F_IDEM_KEY, F_ATTEMPTS, F_STARTED, F_LEASE_TOKEN, F_CREATED_AT, F_CUSTOM,
    F_UNIQUE_TOKEN, F_SET_FLAGS, F_SEQ
};

/* Reads one leased row: the lease view's fields, run_at and what the fetch
 * set (state, lease owner and expiry, start and update times). The fields
 * a lease does not show (backoff, last_error, result, ...) stay unset. */
static int row_leased(sqlite3_stmt *st, const er_fetch_params *p, int64_t expires, er_job *j)
{
    int bad = 0;
    bad |= er_sqlite_col_text(st, F_ID, &j->id, NULL);
    bad |= er_sqlite_col_text(st, F_QUEUE, &j->queue, NULL);
    bad |= er_sqlite_col_text(st, F_NAME, &j->name, NULL);
    bad |= er_sqlite_col_text(st, F_PAYLOAD, &j->payload, &j->payload_len);
    bad |= er_sqlite_col_text(st, F_GRP, &j->group, NULL);
    bad |= er_sqlite_col_text(st, F_TRACE_ID, &j->trace_id, NULL);
    bad |= er_sqlite_col_text(st, F_IDEM_KEY, &j->idempotency_key, NULL);
    bad |= er_sqlite_col_text(st, F_LEASE_TOKEN, &j->lease_token, NULL);
    bad |= er_sqlite_col_text(st, F_CUSTOM, &j->custom, NULL);
    bad |= er_sqlite_col_text(st, F_UNIQUE_TOKEN, &j->unique_token, NULL);
    er_job_set_flags_apply(j, sqlite3_column_int(st, F_SET_FLAGS));
    if (!(j->lease_owner = strdup(p->worker_id ? p->worker_id : "")))
        bad = -1;
    j->state = ER_STATE_ACTIVE;
    j->priority = sqlite3_column_int(st, F_PRIORITY);
    j->run_at = sqlite3_column_int64(st, F_RUN_AT);
    j->max_attempts = sqlite3_column_int(st, F_MAX_ATTEMPTS);
    j->timeout_ms = sqlite3_column_int64(st, F_TIMEOUT_MS);
    j->attempts = sqlite3_column_int(st, F_ATTEMPTS);
    j->started = sqlite3_column_int(st, F_STARTED);
    j->lease_expires_at = expires;
    j->created_at = sqlite3_column_int64(st, F_CREATED_AT);
    j->started_at = j->updated_at = p->now;
    return bad ? ER_ENOMEM : 0;
}

/* The picks of a planner's lease turn: seqs[i] is leased i-th. */
typedef struct picks {
    int64_t *seqs;
    size_t n, cap;
    char *json; /* the array as text, for ER_SQ_LEASE_SEQS */
} picks;

static int pick_pos_cmp(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Where seq stands among the picks (sorted (seq, position) pairs). */
static int64_t pick_pos(const int64_t *pairs, size_t n, int64_t seq)
{
    const int64_t *hit = bsearch(&seq, pairs, n, 2 * sizeof *pairs, pick_pos_cmp);
    return hit ? hit[1] : INT64_MAX;
}

/* Leases up to `take` jobs of one queue with one UPDATE ... RETURNING (stmt:
 * ER_SQ_FETCH, one of a group's, group and priority bound to ?6, ?7, or
 * ER_SQ_LEASE_SEQS with the picks *pk) and appends them to *out in fetch
 * order (the picks': theirs). ER_SQ_FETCH_BUDGET leases under the reply
 * budget (er_fetch_params.max_bytes) with *used_bytes spent. */
static int fetch_queue(er_store *s, const er_fetch_params *p, int stmt, const char *queue,
                       const char *group, int priority, int take, int64_t lease_ms,
                       const picks *pk, const size_t *used_bytes, er_job_list *out,
                       int *got, er_error *err)
{
    *got = 0;
    leased *rows = calloc((size_t)take, sizeof *rows);
    if (!rows)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, stmt, &st, err);
    int n = 0;
    if (rc == 0) {
        sqlite3_bind_text(st, 1, p->worker_id ? p->worker_id : "", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, p->now + lease_ms);
        sqlite3_bind_int64(st, 3, p->now);
        sqlite3_bind_text(st, 4, queue, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 5, take);
        if (stmt == ER_SQ_FETCH_BUDGET) {
            size_t used = used_bytes ? *used_bytes : 0;
            sqlite3_bind_int64(st, 8, (int64_t)er_job_lease_fixed_bytes(p->worker_id));
            sqlite3_bind_int64(st, 9, (int64_t)used);
            sqlite3_bind_int64(st, 10, p->max_bytes && p->max_bytes < INT64_MAX / 2
                                           ? (int64_t)p->max_bytes
                                           : INT64_MAX / 2);
        }
        if (stmt == ER_SQ_FETCH_GROUP_AT)
            sqlite3_bind_text(st, 6, group, -1, SQLITE_STATIC);
        if (stmt == ER_SQ_FETCH_GROUP_AT || stmt == ER_SQ_FETCH_UNGROUPED_AT)
            sqlite3_bind_int(st, 7, priority);
        int64_t *pairs = NULL;
        if (stmt == ER_SQ_LEASE_SEQS) {
            sqlite3_bind_text(st, 6, pk->json, -1, SQLITE_STATIC);
            if (!(pairs = malloc(pk->n * 2 * sizeof *pairs)))
                rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
            for (size_t i = 0; pairs && i < pk->n; i++) {
                pairs[2 * i] = pk->seqs[i];
                pairs[2 * i + 1] = (int64_t)i;
            }
            if (pairs)
                qsort(pairs, pk->n, 2 * sizeof *pairs, pick_pos_cmp);
        }
        int src = SQLITE_DONE;
        while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW && n < take) {
            er_job_init(&rows[n].job);
            rows[n].seq = sqlite3_column_int64(st, F_SEQ);
            if (pairs)
                rows[n].seq = pick_pos(pairs, pk->n, rows[n].seq);
            rc = row_leased(st, p, p->now + lease_ms, &rows[n].job);
            n++;
            if (rc < 0) {
                rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
                break;
            }
        }
        if (rc == 0 && src != SQLITE_DONE && src != SQLITE_ROW)
            rc = er_sqlite_error(s->db, src, "fetch", err);
        sqlite3_reset(st);
        free(pairs);
    }
    if (rc == 0) {
        qsort(rows, (size_t)n, sizeof *rows, stmt == ER_SQ_LEASE_SEQS ? pick_cmp : leased_cmp);
        for (int i = 0; i < n; i++) {
            er_job *slot = er_job_list_push(out);
            if (!slot) {
                rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
                break;
            }
            *slot = rows[i].job;
            er_job_init(&rows[i].job);
            (*got)++;
        }
    }
    for (int i = 0; i < n; i++)
        er_job_fini(&rows[i].job);
    free(rows);
    return rc;
}

/* A one-row query binding ?1 queue, ?2 text (when not NULL), ?3 num: *v
 * its first column as an integer, or out (ER_NAME_MAX + 1) as text;
 * *found whether a row came. */
static int one_row(er_store *s, int stmt, const char *queue, const char *text, int64_t num,
                   int64_t *v, char *out, bool *found, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, stmt, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, queue, -1, SQLITE_STATIC);
    if (text)
        sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    if (sqlite3_bind_parameter_count(st) >= 3)
        sqlite3_bind_int64(st, 3, num);
    int src = sqlite3_step(st);
    *found = src == SQLITE_ROW;
    if (src == SQLITE_ROW) {
        if (v)
            *v = sqlite3_column_int64(st, 0);
        if (out)
            snprintf(out, ER_NAME_MAX + 1, "%s", (const char *)sqlite3_column_text(st, 0));
    } else if (src != SQLITE_DONE) {
        rc = er_sqlite_error(s->db, src, "fetch", err);
    }
    sqlite3_reset(st);
    return rc;
}

/* The row work of core's group planner (core/fetch.h er_fetch_rows). */
typedef struct rows_ctx {
    er_store *s;
    const er_fetch_params *p;
    const char *queue;
    int64_t lease_ms;
    er_job_list *out;
    picks pk; /* picked, not leased yet: every other callback leases them first */
    er_buf tats; /* rate states to store: a JSON array of [group, tat], open */
    size_t ntats;
} rows_ctx;

/* Leases the picks so far with one statement (er_fetch_rows.sync). */
static int flush_picks(void *ctx, er_error *err)
{
    rows_ctx *c = ctx;
    picks *pk = &c->pk;
    if (pk->n == 0)
        return 0;
    free(pk->json);
    size_t cap = pk->n * 21 + 3, len = 1;
    if (!(pk->json = malloc(cap)))
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    pk->json[0] = '[';
    for (size_t i = 0; i < pk->n; i++) /* 21 bytes hold ",-9223372036854775808" */
        len += (size_t)snprintf(pk->json + len, cap - len, i ? ",%" PRId64 : "%" PRId64,
                                pk->seqs[i]);
    snprintf(pk->json + len, cap - len, "]");
    int got = 0;
    int rc = fetch_queue(c->s, c->p, ER_SQ_LEASE_SEQS, c->queue, NULL, INT_MIN, (int)pk->n,
                         c->lease_ms, pk, NULL, c->out, &got, err);
    /* the picks are waiting jobs of this transaction: all are leased */
    if (rc == 0 && (size_t)got != pk->n)
        rc = er_error_set(err, ER_EINTERNAL, "", "store: %d of %zu picked jobs leased", got,
                          pk->n);
    pk->n = 0;
    return rc;
}

/* Stores the rate states set so far with one statement. */
static int flush_tats(rows_ctx *c, er_error *err)
{
    if (c->ntats == 0)
        return 0;
    c->ntats = 0;
    if (er_buf_adds(&c->tats, "]") < 0)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(c->s, ER_SQ_GROUP_TATS_PUT, &st, err);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, c->queue, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, er_buf_str(&c->tats), -1, SQLITE_STATIC);
        rc = er_sqlite_run(c->s, st, err);
    }
    er_buf_reset(&c->tats);
    return rc;
}

/* er_fetch_rows.sync: the leases and rate states held so far. */
static int rows_sync(void *ctx, er_error *err)
{
    rows_ctx *c = ctx;
    int rc = flush_picks(c, err);
    return rc < 0 ? rc : flush_tats(c, err);
}

static int rows_next_group(void *ctx, const char *after, char *out, bool *found, er_error *err)
{
    rows_ctx *c = ctx;
    if (rows_sync(c, err) < 0)
        return err->code;
    if (!after) {
        int rc = one_row(c->s, ER_SQ_ANY_UNGROUPED, c->queue, NULL, 0, NULL, NULL, found, err);
        if (rc < 0 || *found) {
            out[0] = '\0';
            return rc;
        }
        after = "";
    }
    return one_row(c->s, ER_SQ_NEXT_GROUP, c->queue, after, 0, NULL, out, found, err);
}

static int rows_group_active(void *ctx, const char *group, int64_t *n, er_error *err)
{
    rows_ctx *c = ctx;
    if (rows_sync(c, err) < 0)
        return err->code;
    bool found;
    if (*group)
        return one_row(c->s, ER_SQ_GROUP_ACTIVE, c->queue, group, 0, n, NULL, &found, err);
    int64_t all = 0, grouped = 0;
    int rc = one_row(c->s, ER_SQ_COUNT_ACTIVE, c->queue, NULL, 0, &all, NULL, &found, err);
    if (rc == 0)
        rc = one_row(c->s, ER_SQ_GROUPED_ACTIVE, c->queue, NULL, 0, &grouped, NULL, &found, err);
    *n = all - grouped;
    return rc;
}

static int rows_group_tat(void *ctx, const char *group, int64_t *tat, er_error *err)
{
    rows_ctx *c = ctx;
    if (rows_sync(c, err) < 0)
        return err->code;
    bool found;
    *tat = 0;
    return one_row(c->s, ER_SQ_GROUP_TAT, c->queue, group, 0, tat, NULL, &found, err);
}

/* Held until sync (names are of [A-Za-z0-9_.:-], no JSON escapes). */
static int rows_set_group_tat(void *ctx, const char *group, int64_t tat, er_error *err)
{
    rows_ctx *c = ctx;
    if (er_buf_addf(&c->tats, "%s[\"%s\",%" PRId64 "]", c->ntats ? "," : "[", group, tat) < 0)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    c->ntats++;
    return 0;
}

static int rows_group_tat(void *ctx, const char *group, int64_t *tat, er_error *err);

/* er_fetch_rows.rooms: one statement for the named groups, the jobs
 * without a group ("") one by one. */
static int rows_rooms(void *ctx, const char *const *groups, size_t n, bool active, bool tat,
                      int64_t *actives, int64_t *tats, er_error *err)
{
    rows_ctx *c = ctx;
    int rc = rows_sync(c, err);
    er_buf names;
    er_buf_init(&names, (size_t)1 << 20);
    size_t *at = malloc((n ? n : 1) * sizeof *at), k = 0;
    if (!at)
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        actives[i] = tats[i] = 0;
        if (*groups[i]) {
            er_buf_addf(&names, "%s\"%s\"", k ? "," : "[", groups[i]);
            at[k++] = i;
            continue;
        }
        if (active)
            rc = rows_group_active(c, "", &actives[i], err);
        if (rc == 0 && tat)
            rc = rows_group_tat(c, "", &tats[i], err);
    }
    sqlite3_stmt *st = NULL;
    if (rc == 0 && k > 0 && er_buf_adds(&names, "]") < 0)
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
    if (rc == 0 && k > 0 && (rc = er_sqlite_prep(c->s, ER_SQ_GROUP_ROOMS, &st, err)) == 0) {
        sqlite3_bind_text(st, 1, c->queue, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, er_buf_str(&names), -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, active);
        sqlite3_bind_int(st, 4, tat);
        int src;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t j = sqlite3_column_int64(st, 0);
            if (j >= 0 && (size_t)j < k) {
                actives[at[j]] = sqlite3_column_int64(st, 1);
                tats[at[j]] = sqlite3_column_int64(st, 2);
            }
        }
        if (src != SQLITE_DONE)
            rc = er_sqlite_error(c->s->db, src, "fetch", err);
        sqlite3_reset(st);
    }
    free(at);
    er_buf_fini(&names);
    return rc;
}

static int rows_level(void *ctx, const char *group, int below, int *priority, int64_t *run_at,
                      bool *found, er_error *err)
{
    rows_ctx *c = ctx;
    if (rows_sync(c, err) < 0)
        return err->code;
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(c->s, *group ? ER_SQ_LEVEL_GROUPED : ER_SQ_LEVEL_UNGROUPED, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, c->queue, -1, SQLITE_STATIC);
    if (*group)
        sqlite3_bind_text(st, 2, group, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, below);
    int src = sqlite3_step(st);
    *found = src == SQLITE_ROW;
    if (*found) {
        *priority = sqlite3_column_int(st, 0);
        *run_at = sqlite3_column_int64(st, 1);
    } else if (src != SQLITE_DONE) {
        rc = er_sqlite_error(c->s->db, src, "fetch", err);
    }
    sqlite3_reset(st);
    return rc;
}

static int rows_lease(void *ctx, const char *group, int priority, int64_t take, int64_t *got,
                      er_error *err)
{
    rows_ctx *c = ctx;
    *got = 0;
    if (priority != INT_MIN) { /* aging: one at a time, each seen by the next look */
        if (flush_picks(c, err) < 0)
            return err->code;
        int n = 0;
        int rc = fetch_queue(c->s, c->p, *group ? ER_SQ_FETCH_GROUP_AT : ER_SQ_FETCH_UNGROUPED_AT,
                             c->queue, group, priority, (int)take, c->lease_ms, NULL, NULL,
                             c->out, &n, err);
        *got = n;
        return rc;
    }
    picks *pk = &c->pk;
    if (ER_GROW(&pk->seqs, &pk->cap, pk->n + (size_t)take, (size_t)ER_FETCH_MAX) < 0)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(c->s, *group ? ER_SQ_PICK_GROUP : ER_SQ_PICK_UNGROUPED, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, c->queue, -1, SQLITE_STATIC);
    if (*group)
        sqlite3_bind_text(st, 2, group, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, take);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW)
        pk->seqs[pk->n++] = sqlite3_column_int64(st, 0), (*got)++;
    if (src != SQLITE_DONE)
        rc = er_sqlite_error(c->s->db, src, "fetch", err);
    sqlite3_reset(st);
    return rc;
}

/* Whether the reply budget can stop a lease of take jobs short: not when
 * all of them fit even at the largest a job can be (the plain statement
 * then gives the same jobs without sizing them). */
static bool budget_binds(const er_fetch_params *p, size_t used, int take)
{
    if (!p->max_bytes)
        return false;
    size_t room = used < p->max_bytes ? p->max_bytes - used : 0;
    return p->job_bytes_max == 0 || room / p->job_bytes_max < (size_t)take;
}

/* Leases up to take jobs of one queue: in priority order when nothing in
 * it needs the group planner, else by core's planner. */
static int fetch_one_queue(er_store *s, const er_fetch_params *p, er_sqlite_queue *q, int take,
                           int64_t lease_ms, size_t used, er_job_list *out, int *got,
                           int64_t *ready_at, er_error *err)
{
    const er_queue_settings *qs = &q->settings;
    er_fetch_group_policy pol = {&qs->fairness, &qs->group_limits, &qs->aging};
    bool grouped = false;
    int rc = one_row(s, ER_SQ_ANY_GROUPED, q->name, NULL, 0, NULL, NULL, &grouped, err);
    if (rc < 0)
        return rc;
    if (!er_fetch_grouped(&pol, grouped))
        return fetch_queue(s, p, budget_binds(p, used, take) ? ER_SQ_FETCH_BUDGET : ER_SQ_FETCH,
                           q->name, NULL, INT_MIN, take, lease_ms, NULL, &used, out, got, err);
    /* the planner's leases cannot size a row first: as many as fit at the
     * largest a job can be, and the caller calls again (store.h) */
    if (p->max_bytes) {
        int fit = er_reply_fit(used, p->max_bytes, p->job_bytes_max, take);
        if (fit < take && p->more)
            *p->more = true;
        take = fit;
        if (take <= 0)
            return 0;
    }
    er_fetch_cursor *cur = er_sqlite_rr_get(s, q->name);
    if (!cur)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    rows_ctx c = {s, p, q->name, lease_ms, out, {0}, {0}, 0};
    er_buf_init(&c.tats, (size_t)1 << 20);
    er_fetch_rows rows = {.ctx = &c,
                          .next_group = rows_next_group,
                          .group_active = rows_group_active,
                          .rooms = rows_rooms,
                          .group_tat = rows_group_tat,
                          .set_group_tat = rows_set_group_tat,
                          .level = rows_level,
                          .lease = rows_lease,
                          .sync = rows_sync};
    int64_t n = 0, at = INT64_MAX;
    rc = er_fetch_groups(&rows, &pol, cur, take, p->now, &n, &at, err);
    free(c.pk.seqs);
    free(c.pk.json);
    er_buf_fini(&c.tats);
    *got = (int)n;
    if (at < *ready_at)
        *ready_at = at;
    return rc;
}

/* Stores a queue's rate limit state after a fetch leased from it. */
static int rate_store(er_store *s, er_sqlite_queue *q, int64_t tat, er_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = er_sqlite_prep(s, ER_SQ_QUEUE_RATE, &st, err);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, q->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, tat);
    rc = er_sqlite_run(s, st, err);
    if (rc == 0) {
        q->rate_tat = tat;
        q->in_table = true;
    }
    return rc;
}

int er_sqlite_fetch(er_store *s, const er_fetch_params *p, er_job_list *out,
                    er_error *err)
{
    size_t base = out->len;
    bool own;
    int64_t ready_at = INT64_MAX;
    int rc = er_sqlite_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    int remaining = p->max;
    size_t used = p->used_bytes;
    for (size_t i = 0; rc == 0 && i < p->nqueues && remaining > 0; i++) {
        if (p->max_bytes && used >= p->max_bytes && used > 0)
            break; /* the reply budget is spent */
        er_sqlite_queue *q;
        rc = er_sqlite_queue_get(s, p->queues[i], &q, err);
        if (rc < 0)
            break;
        /* the fetch policy is core's (core/fetch.h): this reads its inputs */
        er_queue_state qs = {
            .paused = q->settings.paused,
            .throttled_until = q->throttled_until,
            .concurrency = q->settings.concurrency,
            .lease_ms = q->settings.lease_ms,
            .rate_max = q->settings.rate_max,
            .rate_per_ms = q->settings.rate_per_ms,
            .rate_burst = q->settings.rate_burst,
            .rate_tat = q->rate_tat,
        };
        if (qs.concurrency > 0 && !qs.paused && qs.throttled_until <= p->now) {
            bool found;
            rc = one_row(s, ER_SQ_COUNT_ACTIVE, p->queues[i], NULL, 0, &qs.active, NULL, &found,
                         err);
            if (rc < 0)
                break;
        }
        int64_t cap = er_fetch_cap(&qs, p->now);
        if (cap <= 0) {
            int64_t at = er_fetch_ready_at(&qs, p->now);
            if (at < ready_at)
                ready_at = at;
            continue;
        }
        int take = cap < remaining ? (int)cap : remaining;
        int got = 0;
        size_t had = out->len;
        rc = fetch_one_queue(s, p, q, take, er_fetch_lease_ms(&qs, p->lease_ms), used, out,
                             &got, &ready_at, err);
        for (size_t k = had; k < out->len; k++)
            used += er_job_reply_bytes(&out->items[k]);
        if (rc == 0 && got > 0 && qs.rate_max > 0)
            rc = rate_store(s, q,
                            er_rate_taken(qs.rate_max, qs.rate_per_ms, qs.rate_tat, p->now, got),
                            err);
        remaining -= got;
    }
    rc = er_sqlite_op_end(s, own, rc, err);
    if (rc < 0) {
        /* nothing leased: drop what this call appended */
        while (out->len > base)
            er_job_fini(&out->items[--out->len]);
    }
    if (p->ready_at)
        *p->ready_at = ready_at;
    return rc;
}

