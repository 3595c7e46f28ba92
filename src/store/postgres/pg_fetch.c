/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's fetch: core's policy (core/fetch.h) over rows. The
 * first round trip (queue_states2) reads every queue's state and locks the
 * queues with limits; when no queue needs the group planner one lease_jobs
 * call leases from all of them, else the queues lease in turn, a planner
 * queue through er_fetch_groups and the row work here (a round's names,
 * rooms and leases one statement each; its rate states at sync, in one
 * more). This file owns the store's per-queue fetch state (planner
 * cursors, decoded settings); an er_store is used by one thread at a
 * time, so it needs no lock.
 */
#include "core/fetch.h"
#include "store/postgres/pg_int.h"
#include "util/buf.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FQ_MAX 4096 /* queues whose fetch state a store keeps */
#define POL_MAX 256 /* of them with decoded settings (~14 KB each) */

struct er_pg_policy {
    er_fairness fairness;
    er_group_limits limits;
    er_aging aging;
};

static int nomem(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* ---- per-queue fetch state ---- */

static void policy_drop(er_store *s, er_pg_fq *f)
{
    if (f->pol)
        s->npol--;
    free(f->pol);
    free(f->text);
    f->pol = NULL;
    f->text = NULL;
}

void er_pg_fq_clear(er_store *s)
{
    for (size_t i = 0; i < s->nfq; i++) {
        policy_drop(s, &s->fq[i]);
        free(s->fq[i].name);
    }
    s->nfq = 0;
    s->npol = 0;
}

/* Makes room for the state of n more queues, before a fetch: nothing is
 * dropped during one, so the policies its plan borrows stay. */
static void fq_room(er_store *s, size_t n)
{
    if (s->nfq + n > FQ_MAX)
        er_pg_fq_clear(s); /* the rotations start again */
    if (s->npol + n > POL_MAX) {
        for (size_t i = 0; i < s->nfq; i++)
            policy_drop(s, &s->fq[i]);
    }
}

/* The fetch state of a queue, made on first use; NULL on ENOMEM. Valid
 * until the next call. */
static er_pg_fq *fq_get(er_store *s, const char *queue)
{
    for (size_t i = 0; i < s->nfq; i++)
        if (strcmp(s->fq[i].name, queue) == 0)
            return &s->fq[i];
    if (ER_GROW(&s->fq, &s->capfq, s->nfq + 1, FQ_MAX) < 0)
        return NULL;
    er_pg_fq *f = &s->fq[s->nfq];
    memset(f, 0, sizeof *f);
    if (!(f->name = strdup(queue)))
        return NULL;
    s->nfq++;
    return f;
}

/* Decodes the planner's settings of f from its stored text (NULL: never
 * set), unless they were decoded from the same text before. */
static int fq_policy(er_store *s, er_pg_fq *f, const char *text, bool paused, er_error *err)
{
    if (f->pol && (text ? f->text && strcmp(f->text, text) == 0 : !f->text))
        return 0;
    policy_drop(s, f);
    er_queue_settings *qs = malloc(sizeof *qs);
    if ((f->pol = malloc(sizeof *f->pol)))
        s->npol++;
    int rc = !qs || !f->pol || (text && !(f->text = strdup(text)))
                 ? nomem(err)
                 : er_settings_decode_row(text, paused, qs, err);
    if (rc == 0) {
        f->pol->fairness = qs->fairness;
        f->pol->limits = qs->group_limits;
        f->pol->aging = qs->aging;
    } else {
        policy_drop(s, f);
    }
    free(qs);
    return rc;
}

/* ---- leased rows ---- */

/* A leased row with what orders a fetch batch. */
typedef struct leased {
    er_job job;
    size_t qi, gi; /* gi: its group's place in a lease_many, else 0 */
    int64_t seq;
} leased;

static int leased_cmp(const void *a, const void *b)
{
    const leased *x = a, *y = b;
    if (x->qi != y->qi)
        return x->qi < y->qi ? -1 : 1;
    if (x->gi != y->gi)
        return x->gi < y->gi ? -1 : 1;
    if (x->job.priority != y->job.priority)
        return x->job.priority > y->job.priority ? -1 : 1;
    if (x->job.run_at != y->job.run_at)
        return x->job.run_at < y->job.run_at ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Appends the jobs of one lease statement's result (takes res) in fetch
 * order: the fetch's queue order, then (with gots) the group order, then
 * priority, run_at, insertion. Adds each queue's count to got[its index]:
 * qi's, when the statement leased from queue qi only (else SIZE_MAX).
 * gots (NULL: none): each row's group place (1..ngots) is in the column
 * after COLS, and gots[place - 1] counts them (the caller zeroes it). */
static int take_rows(PGresult *res, const er_fetch_params *fp, size_t qi, er_job_list *out,
                     int64_t *got, int64_t *gots, size_t ngots, er_error *err)
{
    int n = PQntuples(res), rc = 0, read = 0;
    leased *rows = n ? calloc((size_t)n, sizeof *rows) : NULL;
    if (n && !rows) {
        PQclear(res);
        return nomem(err);
    }
    for (; rc == 0 && read < n; read++) {
        leased *l = &rows[read];
        er_job_init(&l->job);
        rc = er_pg_row_job(res, read, 0, &l->job, err);
        l->seq = er_pg_i64(res, read, ER_PG_COL_SEQ);
        l->gi = gots ? (size_t)er_pg_i64(res, read, ER_PG_NCOLS) : 0;
        l->qi = qi < fp->nqueues ? qi : fp->nqueues;
        for (size_t q = 0; qi >= fp->nqueues && l->job.queue && q < fp->nqueues; q++)
            if (strcmp(fp->queues[q], l->job.queue) == 0) {
                l->qi = q;
                break;
            }
    }
    PQclear(res);
    if (rc == 0 && read > 1)
        qsort(rows, (size_t)read, sizeof *rows, leased_cmp);
    for (int i = 0; rc == 0 && i < read; i++) {
        er_job *slot = er_job_list_push(out);
        if (!slot) {
            rc = nomem(err);
            break;
        }
        *slot = rows[i].job;
        er_job_init(&rows[i].job);
        if (rows[i].qi < fp->nqueues)
            got[rows[i].qi]++;
        if (gots && rows[i].gi >= 1 && rows[i].gi <= ngots)
            gots[rows[i].gi - 1]++;
    }
    for (int i = 0; i < read; i++)
        er_job_fini(&rows[i].job);
    free(rows);
    return rc;
}

/* n fresh lease tokens as an array literal (owned by ta); NULL on ENOMEM. */
static const char *tokens(er_pg_array *ta, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        char tok[33];
        er_secure_token(tok);
        er_pg_array_str(ta, tok);
    }
    return er_pg_array_done(ta);
}

/* ---- the plan ---- */

/* What the first round trip said of one queue, and the policy's answer. */
typedef struct qplan {
    er_queue_state st;
    int64_t cap, lease_ms;
    bool planner;      /* leased through er_fetch_groups */
    er_pg_policy *pol; /* borrowed from its er_pg_fq when planner */
} qplan;

/* Reads each queue's state (one round trip, which locks the queues with
 * limits so every node counts and spends them one at a time) into
 * plan[0..nqueues), and *ready_at for those that may give nothing now. */
static int plan_read(er_store *s, const er_fetch_params *fp, const char *queues, int64_t now,
                     qplan *plan, bool *any, bool *any_planner, int64_t *ready_at, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, queues);
    PGresult *res;
    int rc = er_pg_exec(s, ER_PG_QUEUE_STATES, &p, &res, err);
    if (rc < 0)
        return rc;
    for (int i = 0; rc == 0 && i < PQntuples(res) && (size_t)i < fp->nqueues; i++) {
        qplan *q = &plan[i];
        q->st = (er_queue_state){
            .paused = PQgetvalue(res, i, 0)[0] == 't',
            .throttled_until = er_pg_i64(res, i, 1),
            .concurrency = (int)er_pg_i64(res, i, 2),
            .active = er_pg_i64(res, i, 3),
            .lease_ms = er_pg_i64(res, i, 4),
            .rate_max = er_pg_i64(res, i, 5),
            .rate_per_ms = er_pg_i64(res, i, 6),
            .rate_burst = er_pg_i64(res, i, 7),
            .rate_tat = er_pg_i64(res, i, 8),
        };
        q->cap = er_fetch_cap(&q->st, now);
        for (int k = 0; k < i && q->cap > 0; k++)
            if (strcmp(fp->queues[k], fp->queues[i]) == 0)
                q->cap = 0; /* named again: its first turn took what it could */
        q->lease_ms = er_fetch_lease_ms(&q->st, fp->lease_ms);
        if (q->cap <= 0) {
            int64_t at = er_fetch_ready_at(&q->st, now);
            if (at < *ready_at)
                *ready_at = at;
            continue;
        }
        *any = true;
        if (PQgetvalue(res, i, 10)[0] != 't')
            continue;
        er_pg_fq *f = fq_get(s, fp->queues[i]);
        rc = f ? fq_policy(s, f, PQgetisnull(res, i, 11) ? NULL : PQgetvalue(res, i, 11),
                           q->st.paused, err)
               : nomem(err);
        if (rc == 0) {
            q->pol = f->pol;
            er_fetch_group_policy pol = {&f->pol->fairness, &f->pol->limits, &f->pol->aging};
            q->planner = er_fetch_grouped(&pol, PQgetvalue(res, i, 9)[0] == 't');
            *any_planner |= q->planner;
        }
    }
    PQclear(res);
    return rc;
}

/* The budget of a lease statement: the bytes used so far, the budget. */
static int64_t budget_cap(const er_fetch_params *fp)
{
    return fp->max_bytes && fp->max_bytes < INT64_MAX / 2 ? (int64_t)fp->max_bytes
                                                          : INT64_MAX / 2;
}

/* Leases from queues [first, first + n) in order with one lease_jobs2 call,
 * up to each one's cap and max in all, under the reply budget with `used`
 * bytes spent. */
static int lease_plain(er_store *s, const er_fetch_params *fp, const qplan *plan, size_t first,
                       size_t n, int64_t max, int64_t now, size_t used, er_job_list *out,
                       int64_t *got, er_error *err)
{
    er_pg_array qa = {0}, ca = {0}, la = {0}, ta = {0};
    for (size_t i = first; i < first + n; i++) {
        er_pg_array_str(&qa, fp->queues[i]);
        er_pg_array_i64(&ca, plan[i].cap > max ? max : plan[i].cap);
        er_pg_array_i64(&la, plan[i].lease_ms);
    }
    const char *queues = er_pg_array_done(&qa), *caps = er_pg_array_done(&ca),
               *leases = er_pg_array_done(&la), *toks = tokens(&ta, max);
    int rc = 0;
    PGresult *res = NULL;
    if (!queues || !caps || !leases || !toks) {
        rc = nomem(err);
    } else {
        er_pg_params p = {0};
        er_pg_p_str(&p, queues);
        er_pg_p_str(&p, caps);
        er_pg_p_str(&p, leases);
        er_pg_p_str(&p, fp->worker_id ? fp->worker_id : "");
        er_pg_p_i64(&p, max);
        er_pg_p_i64(&p, now);
        er_pg_p_str(&p, toks);
        er_pg_p_i64(&p, (int64_t)er_job_lease_fixed_bytes(fp->worker_id));
        er_pg_p_i64(&p, fp->max_bytes ? (int64_t)used : 0);
        er_pg_p_i64(&p, budget_cap(fp));
        rc = er_pg_exec(s, ER_PG_FETCH, &p, &res, err);
    }
    er_pg_array_fini(&qa);
    er_pg_array_fini(&ca);
    er_pg_array_fini(&la);
    er_pg_array_fini(&ta);
    return rc < 0 ? rc : take_rows(res, fp, n == 1 ? first : SIZE_MAX, out, got, NULL, 0, err);
}

/* ---- the group planner's row work (core/fetch.h er_fetch_rows) ---- */

typedef struct rows_ctx {
    er_store *s;
    const er_fetch_params *fp;
    const char *queue;
    int64_t now, lease_ms;
    er_job_list *out;
    int64_t *got; /* per queue of the fetch */
    size_t qi;    /* queue's index in the fetch */
    /* the first group, read with a next_group that found none after */
    bool first_known, first_found;
    char first[ER_NAME_MAX + 1];
    /* rate states set, stored at sync (owned; one per group) */
    struct tat_put {
        char group[ER_NAME_MAX + 1];
        int64_t tat;
    } *tats;
    size_t ntats, captats;
} rows_ctx;

/* Runs statement id on queue (and group, when not "") and then the
 * integer args; *res (PQclear it) holds a row when *found. */
static int group_row(rows_ctx *c, int id, const char *group, const int64_t *args, int nargs,
                     PGresult **res, bool *found, er_error *err)
{
    er_pg_params p = {0};
    er_pg_p_str(&p, c->queue);
    if (group && *group)
        er_pg_p_str(&p, group);
    for (int i = 0; i < nargs; i++)
        er_pg_p_i64(&p, args[i]);
    int rc = er_pg_exec(c->s, id, &p, res, err);
    if (rc < 0)
        return rc;
    *found = PQntuples(*res) > 0;
    if (!*found) {
        PQclear(*res);
        *res = NULL;
    }
    return 0;
}

/* One round trip per call: the group after `after`, or when there is none
 * the first group, kept for the planner's next call, which asks for it. */
static int rows_next_group(void *ctx, const char *after, char *out, bool *found, er_error *err)
{
    rows_ctx *c = ctx;
    if (!after && c->first_known) {
        c->first_known = false;
        *found = c->first_found;
        snprintf(out, ER_NAME_MAX + 1, "%s", c->first);
        return 0;
    }
    c->first_known = false;
    er_pg_params p = {0};
    er_pg_p_str(&p, c->queue);
    if (after)
        er_pg_p_str(&p, after);
    PGresult *r;
    int rc = er_pg_exec(c->s, after ? ER_PG_NEXT_GROUP : ER_PG_FIRST_GROUP, &p, &r, err);
    if (rc < 0)
        return rc;
    bool row = PQntuples(r) > 0;
    const char *g = row ? PQgetvalue(r, 0, 0) : "";
    if (after && (!row || er_pg_i64(r, 0, 1) != 0)) {
        c->first_known = true; /* the ring closed */
        c->first_found = row;
        snprintf(c->first, sizeof c->first, "%s", g);
        *found = false;
    } else {
        *found = row;
        if (row)
            snprintf(out, ER_NAME_MAX + 1, "%s", g);
    }
    PQclear(r);
    return 0;
}

static int rows_group_active(void *ctx, const char *group, int64_t *n, er_error *err)
{
    PGresult *r = NULL;
    bool found;
    int rc = group_row(ctx, *group ? ER_PG_GROUP_ACTIVE : ER_PG_UNGROUPED_ACTIVE, group, NULL, 0,
                       &r, &found, err);
    *n = found ? er_pg_i64(r, 0, 0) : 0;
    PQclear(r);
    return rc;
}

/* Held until sync; a later state of the same group replaces it. */
static int rows_set_group_tat(void *ctx, const char *group, int64_t tat, er_error *err)
{
    rows_ctx *c = ctx;
    size_t i = 0;
    while (i < c->ntats && strcmp(c->tats[i].group, group) != 0)
        i++;
    if (i == c->ntats) {
        if (ER_GROW(&c->tats, &c->captats, c->ntats + 1,
                    (size_t)ER_FETCH_MAX + ER_FETCH_PASS_MAX + 1) < 0)
            return nomem(err);
        snprintf(c->tats[i].group, sizeof c->tats[i].group, "%s", group);
        c->ntats++;
    }
    c->tats[i].tat = tat;
    return 0;
}

/* er_fetch_rows.sync: stores the rate states held, with one statement. */
static int rows_sync(void *ctx, er_error *err)
{
    rows_ctx *c = ctx;
    if (c->ntats == 0)
        return 0;
    er_pg_array na = {0}, va = {0};
    for (size_t i = 0; i < c->ntats; i++) {
        er_pg_array_str(&na, c->tats[i].group);
        er_pg_array_i64(&va, c->tats[i].tat);
    }
    c->ntats = 0;
    const char *names = er_pg_array_done(&na), *tats = er_pg_array_done(&va);
    er_pg_params p = {0};
    er_pg_p_str(&p, c->queue);
    er_pg_p_str(&p, names);
    er_pg_p_str(&p, tats);
    int rc = names && tats ? er_pg_run(c->s, ER_PG_GROUP_TATS_PUT, &p, NULL, err) : nomem(err);
    er_pg_array_fini(&na);
    er_pg_array_fini(&va);
    return rc;
}

static int rows_group_tat(void *ctx, const char *group, int64_t *tat, er_error *err)
{
    rows_ctx *c = ctx;
    int rc = rows_sync(c, err); /* the states held first */
    if (rc < 0)
        return rc;
    er_pg_params p = {0};
    er_pg_p_str(&p, c->queue);
    er_pg_p_str(&p, group);
    PGresult *r;
    rc = er_pg_exec(c->s, ER_PG_GROUP_TAT, &p, &r, err);
    if (rc < 0)
        return rc;
    *tat = PQntuples(r) > 0 ? er_pg_i64(r, 0, 0) : 0;
    PQclear(r);
    return 0;
}

static int rows_level(void *ctx, const char *group, int below, int *priority, int64_t *run_at,
                      bool *found, er_error *err)
{
    PGresult *r = NULL;
    int64_t arg = below;
    int rc = group_row(ctx, *group ? ER_PG_LEVEL_GROUPED : ER_PG_LEVEL_UNGROUPED, group, &arg, 1,
                       &r, found, err);
    if (rc == 0 && *found) {
        *priority = (int)er_pg_i64(r, 0, 0);
        *run_at = er_pg_i64(r, 0, 1);
    }
    PQclear(r);
    return rc;
}

/* The lease statements' first parameters: worker, lease expiry, now, queue. */
static void lease_params(const rows_ctx *c, er_pg_params *p)
{
    er_pg_p_str(p, c->fp->worker_id ? c->fp->worker_id : "");
    er_pg_p_i64(p, c->now + c->lease_ms);
    er_pg_p_i64(p, c->now);
    er_pg_p_str(p, c->queue);
}

static int rows_lease(void *ctx, const char *group, int priority, int64_t take, int64_t *got,
                      er_error *err)
{
    rows_ctx *c = ctx;
    bool at = priority != INT_MIN;
    int id = *group ? (at ? ER_PG_FETCH_GROUP_AT : ER_PG_FETCH_GROUP)
                    : (at ? ER_PG_FETCH_UNGROUPED_AT : ER_PG_FETCH_UNGROUPED);
    er_pg_array ta = {0};
    const char *toks = tokens(&ta, take);
    if (!toks) {
        er_pg_array_fini(&ta);
        return nomem(err);
    }
    er_pg_params p = {0};
    lease_params(c, &p);
    er_pg_p_i64(&p, take);
    er_pg_p_str(&p, toks);
    if (*group)
        er_pg_p_str(&p, group);
    if (at)
        er_pg_p_i64(&p, priority);
    PGresult *res;
    int rc = er_pg_exec(c->s, id, &p, &res, err);
    er_pg_array_fini(&ta);
    if (rc < 0)
        return rc;
    int64_t had = c->got[c->qi];
    rc = take_rows(res, c->fp, c->qi, c->out, c->got, NULL, 0, err);
    *got = c->got[c->qi] - had;
    return rc;
}

/* er_fetch_rows.next_groups: one round trip for up to k names. */
static int rows_next_groups(void *ctx, const char *after, size_t k, char (*out)[ER_NAME_MAX + 1],
                            size_t *n, er_error *err)
{
    rows_ctx *c = ctx;
    *n = 0;
    c->first_known = false;
    er_pg_params p = {0};
    er_pg_p_str(&p, c->queue);
    er_pg_p_str(&p, after);
    er_pg_p_i64(&p, (int64_t)k);
    PGresult *r;
    int rc = er_pg_exec(c->s, ER_PG_NEXT_GROUPS, &p, &r, err);
    if (rc < 0)
        return rc;
    for (int i = 0; i < PQntuples(r) && *n < k; i++)
        snprintf(out[(*n)++], ER_NAME_MAX + 1, "%s", PQgetvalue(r, i, 0));
    PQclear(r);
    return 0;
}

/* er_fetch_rows.rooms: one round trip for every group's room. */
static int rows_rooms(void *ctx, const char *const *groups, size_t n, bool active, bool tat,
                      int64_t *actives, int64_t *tats, er_error *err)
{
    rows_ctx *c = ctx;
    for (size_t i = 0; i < n; i++)
        actives[i] = tats[i] = 0;
    int rc = rows_sync(c, err); /* the states held first */
    if (rc < 0 || n == 0)
        return rc;
    er_pg_array ga = {0};
    for (size_t i = 0; i < n; i++)
        er_pg_array_str(&ga, groups[i]);
    const char *names = er_pg_array_done(&ga);
    er_pg_params p = {0};
    er_pg_p_str(&p, c->queue);
    er_pg_p_str(&p, names);
    er_pg_p_bool(&p, active);
    er_pg_p_bool(&p, tat);
    PGresult *r = NULL;
    rc = names ? er_pg_exec(c->s, ER_PG_GROUP_ROOMS, &p, &r, err) : nomem(err);
    er_pg_array_fini(&ga);
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        int64_t at = er_pg_i64(r, i, 0);
        if (at >= 0 && (size_t)at < n) {
            actives[at] = er_pg_i64(r, i, 1);
            tats[at] = er_pg_i64(r, i, 2);
        }
    }
    PQclear(r);
    return rc;
}

/* er_fetch_rows.lease_many: one round trip for every group's lease. */
static int rows_lease_many(void *ctx, const char *const *groups, const int64_t *takes, size_t n,
                           int64_t *gots, er_error *err)
{
    rows_ctx *c = ctx;
    er_pg_array ga = {0}, ka = {0}, ta = {0};
    int64_t all = 0;
    for (size_t i = 0; i < n; i++) {
        gots[i] = 0;
        er_pg_array_str(&ga, groups[i]);
        er_pg_array_i64(&ka, takes[i]);
        all += takes[i];
    }
    const char *names = er_pg_array_done(&ga), *ks = er_pg_array_done(&ka),
               *toks = tokens(&ta, all);
    int rc = 0;
    PGresult *res = NULL;
    if (!names || !ks || !toks) {
        rc = nomem(err);
    } else {
        er_pg_params p = {0};
        lease_params(c, &p);
        er_pg_p_str(&p, names);
        er_pg_p_str(&p, ks);
        er_pg_p_str(&p, toks);
        rc = er_pg_exec(c->s, ER_PG_FETCH_GROUPS, &p, &res, err);
    }
    er_pg_array_fini(&ga);
    er_pg_array_fini(&ka);
    er_pg_array_fini(&ta);
    return rc < 0 ? rc : take_rows(res, c->fp, c->qi, c->out, c->got, gots, n, err);
}

/* Leases up to take jobs of queue i through the group planner. */
static int lease_groups(er_store *s, const er_fetch_params *fp, const qplan *q, size_t i,
                        int64_t take, int64_t now, er_job_list *out, int64_t *got,
                        int64_t *ready_at, er_error *err)
{
    er_pg_fq *f = fq_get(s, fp->queues[i]);
    if (!f)
        return nomem(err);
    rows_ctx c = {s, fp, fp->queues[i], now, q->lease_ms, out, got, i, false, false, "",
                  NULL, 0, 0};
    er_fetch_rows rows = {.ctx = &c,
                          .next_group = rows_next_group,
                          .next_groups = rows_next_groups,
                          .group_active = rows_group_active,
                          .rooms = rows_rooms,
                          .group_tat = rows_group_tat,
                          .set_group_tat = rows_set_group_tat,
                          .level = rows_level,
                          .lease = rows_lease,
                          .lease_many = rows_lease_many,
                          .sync = rows_sync};
    er_fetch_group_policy pol = {&q->pol->fairness, &q->pol->limits, &q->pol->aging};
    int64_t n = 0, at = INT64_MAX;
    int rc = er_fetch_groups(&rows, &pol, &f->cur, take, now, &n, &at, err);
    free(c.tats); /* held states are dropped with the failed fetch */
    if (at < *ready_at)
        *ready_at = at;
    return rc;
}

/* Stores the rate states of the rate-limited queues that gave jobs. */
static int rates_store(er_store *s, const er_fetch_params *fp, const qplan *plan,
                       const int64_t *got, int64_t now, er_error *err)
{
    er_pg_array na = {0}, va = {0};
    for (size_t i = 0; i < fp->nqueues; i++) {
        const er_queue_state *q = &plan[i].st;
        if (q->rate_max <= 0 || got[i] <= 0)
            continue;
        er_pg_array_str(&na, fp->queues[i]);
        er_pg_array_i64(&va, er_rate_taken(q->rate_max, q->rate_per_ms, q->rate_tat, now, got[i]));
    }
    int rc = 0;
    if (na.n > 0) {
        const char *names = er_pg_array_done(&na), *tats = er_pg_array_done(&va);
        er_pg_params p = {0};
        er_pg_p_str(&p, names);
        er_pg_p_str(&p, tats);
        rc = names && tats ? er_pg_run(s, ER_PG_QUEUE_RATE, &p, NULL, err) : nomem(err);
    }
    er_pg_array_fini(&na);
    er_pg_array_fini(&va);
    return rc;
}

/* Leases per the policy: the queues' states, then the row work. */
static int fetch_in_tx(er_store *s, const er_fetch_params *fp, er_job_list *out, int64_t *ready_at,
                       er_error *err)
{
    if (fp->max < 1 || fp->nqueues == 0)
        return 0;
    int64_t now = er_pg_now(s, fp->now);
    er_pg_array qa = {0};
    for (size_t i = 0; i < fp->nqueues; i++)
        er_pg_array_str(&qa, fp->queues[i]);
    const char *queues = er_pg_array_done(&qa);
    qplan *plan = calloc(fp->nqueues, sizeof *plan);
    int64_t *got = calloc(fp->nqueues, sizeof *got);
    bool any = false, any_planner = false;
    fq_room(s, fp->nqueues);
    int rc = queues && plan && got
                 ? plan_read(s, fp, queues, now, plan, &any, &any_planner, ready_at, err)
                 : nomem(err);
    er_pg_array_fini(&qa);
    if (rc == 0 && any && !any_planner) {
        /* the fast path: one lease_jobs2 call for every queue */
        rc = lease_plain(s, fp, plan, 0, fp->nqueues, fp->max, now, fp->used_bytes, out, got,
                         err);
    } else if (rc == 0 && any) {
        int64_t left = fp->max;
        size_t used = fp->used_bytes;
        for (size_t i = 0; rc == 0 && i < fp->nqueues && left > 0; i++) {
            int64_t take = plan[i].cap < left ? plan[i].cap : left, had = got[i];
            if (take <= 0)
                continue;
            if (fp->max_bytes && used >= fp->max_bytes && used > 0)
                break; /* the reply budget is spent */
            size_t before = out->len;
            if (plan[i].planner) {
                /* the planner's leases cannot size a row first: as many as
                 * fit at the largest a job can be, and the caller calls
                 * again (store.h) */
                if (fp->max_bytes) {
                    int fit = er_reply_fit(used, fp->max_bytes, fp->job_bytes_max,
                                           take > INT_MAX ? INT_MAX : (int)take);
                    if (fit < take && fp->more)
                        *fp->more = true;
                    take = fit;
                }
                if (take > 0)
                    rc = lease_groups(s, fp, &plan[i], i, take, now, out, got, ready_at, err);
            } else {
                rc = lease_plain(s, fp, plan, i, 1, take, now, used, out, got, err);
            }
            for (size_t k = before; k < out->len; k++)
                used += er_job_reply_bytes(&out->items[k]);
            left -= got[i] - had;
        }
    }
    if (rc == 0 && any)
        rc = rates_store(s, fp, plan, got, now, err);
    free(plan);
    free(got);
    return rc;
}

int er_pg_fetch(er_store *s, const er_fetch_params *p, er_job_list *out, er_error *err)
{
    size_t base = out->len;
    int64_t ready_at = INT64_MAX;
    bool own;
    int rc = er_pg_op_begin(s, &own, err);
    if (rc < 0)
        return rc;
    rc = fetch_in_tx(s, p, out, &ready_at, err);
    rc = er_pg_op_end(s, own, rc, err);
    if (rc < 0) {
        /* nothing leased: drop what this call appended */
        while (out->len > base)
            er_job_fini(&out->items[--out->len]);
    }
    if (p->ready_at)
        *p->ready_at = ready_at;
    return rc;
}
