/* SPDX-License-Identifier: MIT
 *
 * Fetch requests and the fetch policy (fetch.h). The messages here are the
 * API's (docs/api.md).
 */
#include "core/fetch.h"
#include "core/queue.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void er_fetch_args_fini(er_fetch_args *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->nqueues; i++)
        free(a->queues[i]);
    free(a->queues);
    free(a->worker_id);
    free(a->weights);
    memset(a, 0, sizeof *a);
}

static int validate_weights(const er_fetch_spec *sp, er_fetch_args *a, er_error *err)
{
    if (sp->weights_kind == ER_SPEC_ABSENT || sp->weights_kind == ER_SPEC_NULL)
        return 0;
    if (sp->weights_kind != ER_SPEC_SET || sp->nweights > ER_FETCH_QUEUES_MAX)
        return er_error_set(err, ER_EINVAL, "queue_weights",
                            "queue_weights must be an object {queue: weight} of queues named "
                            "in queues");
    if (!(a->weights = calloc(a->nqueues, sizeof *a->weights)))
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    for (size_t i = 0; i < a->nqueues; i++)
        a->weights[i] = 1;
    for (size_t k = 0; k < sp->nweights; k++) {
        const er_spec_str *q = &sp->weights[k].queue;
        char f[ER_FIELD_MAX + ER_NAME_MAX];
        snprintf(f, sizeof f, "queue_weights.%.*s", (int)(q->n < ER_NAME_MAX ? q->n : ER_NAME_MAX),
                 q->s);
        size_t i = 0;
        while (i < a->nqueues &&
               !(strlen(a->queues[i]) == q->n && memcmp(a->queues[i], q->s, q->n) == 0))
            i++;
        if (i == a->nqueues)
            return er_error_set(err, ER_EINVAL, f, "%s: the queue is not one of queues", f);
        int64_t w = 0;
        if (er_spec_int_in(&sp->weights[k].weight, f, 1, ER_FETCH_WEIGHT_MAX, &w, err) <= 0)
            return er_error_set(err, ER_EINVAL, f, "%s must be an integer 1..%d", f,
                                ER_FETCH_WEIGHT_MAX);
        a->weights[i] = (int)w;
    }
    return 0;
}

static int validate(const er_fetch_spec *sp, er_fetch_args *a, er_error *err)
{
    if (sp->queues_kind == ER_SPEC_ABSENT)
        return er_error_set(err, ER_EINVAL, "queues", "queues is required");
    if (sp->queues_kind == ER_SPEC_BAD_TYPE || sp->nqueues < 1 ||
        sp->nqueues > ER_FETCH_QUEUES_MAX)
        return er_error_set(err, ER_EINVAL, "queues",
                            "queues must be an array of 1..%d queue names", ER_FETCH_QUEUES_MAX);
    for (size_t i = 0; i < sp->nqueues; i++) {
        char f[32];
        snprintf(f, sizeof f, "queues[%zu]", i);
        const er_spec_str *q = &sp->queues[i];
        if (q->kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, f, "%s must be a string", f);
        if (!er_name_ok(q->s, q->n))
            return er_name_validate(NULL, f, err);
    }
    if (sp->worker_id.kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, "worker_id", "worker_id is required (a string)");
    if (!er_name_ok(sp->worker_id.s, sp->worker_id.n))
        return er_name_validate(NULL, "worker_id", err);
    int64_t max = 1, wait = 0, lease = 0;
    if (er_spec_int_in(&sp->max, "max", 1, ER_FETCH_MAX, &max, err) < 0 ||
        er_spec_int_in(&sp->wait_ms, "wait_ms", 0, ER_WAIT_MAX_MS, &wait, err) < 0 ||
        er_spec_int_in(&sp->lease_ms, "lease_ms", ER_LEASE_MIN_MS, ER_LEASE_MAX_MS, &lease,
                       err) < 0)
        return ER_EINVAL;
    a->max = (int)max;
    a->wait_ms = wait;
    a->lease_ms = lease;
    if (!(a->queues = calloc(sp->nqueues, sizeof *a->queues)) ||
        !(a->worker_id = er_spec_str_dup(&sp->worker_id)))
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    for (size_t i = 0; i < sp->nqueues; i++) {
        if (!(a->queues[i] = er_spec_str_dup(&sp->queues[i])))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        a->nqueues = i + 1;
    }
    return validate_weights(sp, a, err);
}

int er_fetch_validate(const er_fetch_spec *spec, er_fetch_args *out, er_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = validate(spec, out, err);
    if (rc < 0)
        er_fetch_args_fini(out);
    return rc;
}

/* ---- rate limits ---- */

static int64_t rate_interval_ns(int64_t max, int64_t per_ms)
{
    /* rounded up: never faster than the limit (per_ms <= ER_DELAY_MAX_MS) */
    int64_t t = (per_ms * ER_NS_PER_MS + max - 1) / max;
    return t > 0 ? t : 1;
}

/* The tolerance: burst - 1 intervals, and at least what fits in one ms (the
 * clock's resolution), so a limit faster than 1/ms is not held to 1/ms. */
static int64_t rate_tolerance_ns(int64_t t, int64_t burst)
{
    int64_t per_tick = ER_NS_PER_MS / t;
    if (burst < per_tick)
        burst = per_tick;
    return (burst > 1 ? burst - 1 : 0) * t;
}

int64_t er_rate_allowed(int64_t max, int64_t per_ms, int64_t burst, int64_t tat_ns, int64_t now,
                        int64_t want)
{
    if (max <= 0 || want <= 0)
        return want > 0 ? want : 0;
    int64_t t = rate_interval_ns(max, per_ms), now_ns = now * ER_NS_PER_MS;
    int64_t tau = rate_tolerance_ns(t, burst);
    int64_t base = tat_ns > now_ns ? tat_ns : now_ns;
    if (base > now_ns + tau)
        return 0;
    int64_t n = (now_ns + tau - base) / t + 1;
    return n < want ? n : want;
}

int64_t er_rate_taken(int64_t max, int64_t per_ms, int64_t tat_ns, int64_t now, int64_t n)
{
    int64_t now_ns = now * ER_NS_PER_MS;
    int64_t base = tat_ns > now_ns ? tat_ns : now_ns;
    return n > 0 && max > 0 ? base + n * rate_interval_ns(max, per_ms) : tat_ns;
}

int64_t er_rate_next_ms(int64_t max, int64_t per_ms, int64_t burst, int64_t tat_ns, int64_t now)
{
    if (max <= 0)
        return now;
    int64_t t = rate_interval_ns(max, per_ms), now_ns = now * ER_NS_PER_MS;
    int64_t at = tat_ns - rate_tolerance_ns(t, burst); /* the first ns it allows */
    if (at <= now_ns)
        return now;
    return (at + ER_NS_PER_MS - 1) / ER_NS_PER_MS;
}

int64_t er_fetch_cap(const er_queue_state *q, int64_t now)
{
    if (q->paused || q->throttled_until > now)
        return 0;
    int64_t cap = INT64_MAX;
    if (q->concurrency > 0)
        cap = q->active >= q->concurrency ? 0 : q->concurrency - q->active;
    if (q->rate_max > 0)
        cap = er_rate_allowed(q->rate_max, q->rate_per_ms, q->rate_burst, q->rate_tat, now, cap);
    return cap;
}

int64_t er_fetch_ready_at(const er_queue_state *q, int64_t now)
{
    if (q->paused)
        return INT64_MAX; /* resuming wakes fetches */
    if (q->throttled_until > now)
        return q->throttled_until;
    int64_t at = INT64_MAX;
    if (q->rate_max > 0) {
        at = er_rate_next_ms(q->rate_max, q->rate_per_ms, q->rate_burst, q->rate_tat, now);
        if (at <= now)
            at = INT64_MAX;
    }
    if (q->concurrency > 0 && q->active >= q->concurrency && now + ER_FETCH_LIMIT_RECHECK_MS < at)
        at = now + ER_FETCH_LIMIT_RECHECK_MS;
    return at;
}

/* ---- within a queue ---- */

bool er_fetch_grouped(const er_fetch_group_policy *pol, bool has_grouped_jobs)
{
    return has_grouped_jobs || pol->limits->concurrency > 0 || pol->limits->rate.max > 0 ||
           pol->aging->per_s > 0;
}

/* One group of a round: its weight, its room under its limits, and what
 * the round gives it. */
typedef struct turn {
    char name[ER_NAME_MAX + 1];
    int64_t weight, room, alloc;
    int64_t got; /* of alloc, what lease_many leased */
    int64_t tat; /* its rate state, when it has a rate limit */
    bool held;   /* at a limit: passed over */
} turn;

/* The room a group's limits leave it at now (INT64_MAX: none), from its
 * active jobs and rate state. */
static int64_t room_of(const er_group_limits *l, int64_t active, int64_t tat, int64_t now,
                       int64_t *ready_at)
{
    int64_t room = INT64_MAX;
    if (l->concurrency > 0) {
        room = active >= l->concurrency ? 0 : l->concurrency - active;
        if (room == 0 && now + ER_FETCH_LIMIT_RECHECK_MS < *ready_at)
            *ready_at = now + ER_FETCH_LIMIT_RECHECK_MS;
    }
    if (l->rate.max > 0 && room > 0) {
        room = er_rate_allowed(l->rate.max, l->rate.per_ms, l->rate.burst, tat, now, room);
        if (room == 0) {
            int64_t at = er_rate_next_ms(l->rate.max, l->rate.per_ms, l->rate.burst, tat, now);
            if (at < *ready_at)
                *ready_at = at;
        }
    }
    return room;
}

/* The rooms of ts[0..n): with one call of the store's rooms when it has
 * one, else group by group. */
static int rooms_of(const er_fetch_rows *r, const er_fetch_group_policy *pol, turn *ts, size_t n,
                    int64_t now, int64_t *ready_at, er_error *err)
{
    const er_group_limits *l = pol->limits;
    bool conc = l->concurrency > 0, rate = l->rate.max > 0;
    if (n == 0)
        return 0;
    int64_t act[ER_FETCH_MAX + ER_FETCH_PASS_MAX + 1];
    const char *names[ER_FETCH_MAX + ER_FETCH_PASS_MAX + 1];
    for (size_t i = 0; i < n; i++) {
        act[i] = ts[i].tat = 0;
        names[i] = ts[i].name;
    }
    int rc = 0;
    if ((conc || rate) && r->rooms) {
        int64_t tats[ER_FETCH_MAX + ER_FETCH_PASS_MAX + 1];
        rc = r->rooms(r->ctx, names, n, conc, rate, act, tats, err);
        for (size_t i = 0; rc == 0 && i < n; i++)
            ts[i].tat = tats[i];
    } else {
        for (size_t i = 0; rc == 0 && i < n; i++) {
            if (conc)
                rc = r->group_active(r->ctx, names[i], &act[i], err);
            if (rc == 0 && rate)
                rc = r->group_tat(r->ctx, names[i], &ts[i].tat, err);
        }
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        ts[i].room = room_of(l, act[i], ts[i].tat, now, ready_at);
        ts[i].held = ts[i].room <= 0;
    }
    return rc;
}

static int64_t boosted(const er_aging *a, int priority, int64_t run_at, int64_t now)
{
    double waited = now > run_at ? (double)(now - run_at) / 1000.0 : 0;
    double boost = a->per_s * waited;
    return (int64_t)(((double)priority + (boost < a->max_boost ? boost : a->max_boost)) * 1000);
}

/* Leases up to take of a group's jobs one at a time, each the head of the
 * priority level with the highest effective priority (ties: the older). */
static int lease_aged(const er_fetch_rows *r, const er_aging *a, const char *g, int64_t take,
                      int64_t now, int64_t *got, er_error *err)
{
    *got = 0;
    while (*got < take) {
        int below = INT_MAX, best_p = INT_MIN, p;
        int64_t best_eff = 0, best_run = 0, run_at;
        bool found;
        for (;;) {
            int rc = r->level(r->ctx, g, below, &p, &run_at, &found, err);
            if (rc < 0)
                return rc;
            /* a lower level's best is p + max_boost: past the best, stop */
            if (!found || (best_p != INT_MIN && ((int64_t)p + a->max_boost) * 1000 < best_eff))
                break;
            int64_t eff = boosted(a, p, run_at, now);
            if (best_p == INT_MIN || eff > best_eff || (eff == best_eff && run_at < best_run)) {
                best_p = p;
                best_eff = eff;
                best_run = run_at;
            }
            below = p;
        }
        if (best_p == INT_MIN)
            return 0;
        int64_t one = 0;
        int rc = r->lease(r->ctx, g, best_p, 1, &one, err);
        if (rc < 0)
            return rc;
        if (one == 0)
            return 0;
        *got += one;
    }
    return 0;
}

/* Names the store gave ahead (er_fetch_rows.next_groups), used in order. */
typedef struct names_ahead {
    char names[ER_FETCH_MAX][ER_NAME_MAX + 1];
    size_t n, at;
    bool end;   /* the store had no more after names[n - 1] */
    bool start; /* they are the first ones (with end: all of them) */
} names_ahead;

/* The group after `after`, wrapping round to the first: from the names
 * given ahead (nb, when the store has next_groups), else one call
 * (next_groups asks for one more than `more`, so that its answer says
 * whether it reached the last group). */
static int next_name(const er_fetch_rows *r, names_ahead *nb, const char *after, int64_t more,
                     char *out, bool *found, er_error *err)
{
    if (!nb) {
        int rc = r->next_group(r->ctx, after, out, found, err);
        if (rc == 0 && !*found)
            rc = r->next_group(r->ctx, NULL, out, found, err);
        return rc;
    }
    /* the names ahead, else those after `after` (unless the last answer
     * ended there), else those from the start (the same names again when
     * the answer at hand held them all) */
    for (int pass = 0;; pass++) {
        if (nb->at < nb->n) {
            snprintf(out, ER_NAME_MAX + 1, "%s", nb->names[nb->at++]);
            *found = true;
            return 0;
        }
        if (pass == 2 || (pass == 1 && !after))
            break;
        if (pass == 0 && after && nb->end)
            continue;
        nb->at = 0;
        if (pass == 1 && nb->start && nb->end)
            continue;
        size_t k = more < 1 ? 2 : more >= ER_FETCH_MAX ? ER_FETCH_MAX : (size_t)more + 1;
        int rc = r->next_groups(r->ctx, pass == 0 ? after : NULL, k, nb->names, &nb->n, err);
        if (rc < 0)
            return rc;
        nb->end = nb->n < k;
        nb->start = pass == 1 || !after;
    }
    *found = false;
    return 0;
}

/* Collects the groups of the coming turns, from the cursor, until their
 * turns add up to want, the ring closes or too many are held: names in
 * chunks of what could still be wanted, then their rooms. The first is the
 * cursor's group when its turn goes on (*continuing). */
static int collect(const er_fetch_rows *r, names_ahead *nb, const er_fetch_group_policy *pol,
                   const er_fetch_cursor *cur, int64_t want, int64_t now, turn *ts, size_t cap,
                   size_t *n, bool *ring, bool *continuing, int64_t *ready_at, er_error *err)
{
    *n = 0;
    *ring = false;
    *continuing = cur->set && cur->left > 0;
    int64_t turns = 0;
    int held = 0;
    char name[ER_NAME_MAX + 1];
    bool found = false;
    int rc = 0;
    if (nb) {
        nb->n = nb->at = 0;
        nb->end = nb->start = false;
    }
    if (*continuing) {
        snprintf(name, sizeof name, "%s", cur->group);
        found = true;
    } else if (nb) { /* the first name comes with those after it */
        rc = next_name(r, nb, cur->set ? cur->group : NULL, want, name, &found, err);
    } else {
        const char *after = cur->set ? cur->group : NULL;
        rc = r->next_group(r->ctx, after, name, &found, err);
        if (rc == 0 && !found && after)
            rc = r->next_group(r->ctx, NULL, name, &found, err);
    }
    while (rc == 0 && found && *n < cap && turns < want) {
        size_t start = *n;
        while (rc == 0 && found && *n < cap && (int64_t)(*n - start) < want - turns) {
            /* back at the first group next_group gave (or at the cursor's,
             * which may have run out and not come round): the ring closed */
            size_t first = *continuing ? 1 : 0;
            if ((*n > first && strcmp(name, ts[first].name) == 0) ||
                (*n > 0 && strcmp(name, ts[0].name) == 0)) {
                *ring = true;
                found = false;
                break;
            }
            turn *t = &ts[(*n)++];
            snprintf(t->name, sizeof t->name, "%s", name);
            t->weight = er_fairness_weight(pol->fairness, name);
            t->alloc = 0;
            rc = next_name(r, nb, t->name, want - turns - (int64_t)(*n - start), name, &found,
                           err);
        }
        if (rc == 0)
            rc = rooms_of(r, pol, ts + start, *n - start, now, ready_at, err);
        for (size_t i = start; rc == 0 && i < *n; i++) {
            if (ts[i].held && ++held > ER_FETCH_PASS_MAX) {
                *n = i + 1;
                return 0;
            }
            if (!ts[i].held)
                turns += i == 0 && *continuing ? cur->left : ts[i].weight;
            if (turns >= want) {
                *n = i + 1; /* the rest of the chunk is not needed this time */
                break;
            }
        }
        if (held > ER_FETCH_PASS_MAX)
            break;
    }
    return rc;
}

int er_fetch_groups(const er_fetch_rows *r, const er_fetch_group_policy *pol,
                    er_fetch_cursor *cur, int64_t want, int64_t now, int64_t *got,
                    int64_t *ready_at, er_error *err)
{
    *got = 0;
    *ready_at = INT64_MAX;
    size_t cap = (size_t)(want < ER_FETCH_MAX ? want : ER_FETCH_MAX) + ER_FETCH_PASS_MAX + 1;
    turn *ts = calloc(cap, sizeof *ts);
    names_ahead *nb = r->next_groups ? calloc(1, sizeof *nb) : NULL;
    if (!ts || (r->next_groups && !nb)) {
        free(ts);
        free(nb);
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    int rc = 0;
    /* each round ends with a group's jobs all taken, or with want met */
    for (int round = 0; rc == 0 && *got < want && round < 4; round++) {
        if (round > 0 && r->sync && (rc = r->sync(r->ctx, err)) < 0)
            break;
        size_t n = 0;
        bool ring = false, continuing = false;
        rc = collect(r, nb, pol, cur, want - *got, now, ts, cap, &n, &ring, &continuing,
                     ready_at, err);
        if (rc < 0 || n == 0)
            break;
        /* deal the turns: once round the collected groups, again and again
         * when they are all there is (the ring closed) */
        int64_t remaining = want - *got, last_left = 0;
        size_t last = 0;
        bool dealt = false;
        for (int pass = 0; remaining > 0; pass++) {
            bool gave = false;
            for (size_t i = 0; i < n && remaining > 0; i++) {
                turn *t = &ts[i];
                if (t->held || t->alloc >= t->room)
                    continue;
                int64_t q = pass == 0 && i == 0 && continuing ? cur->left : t->weight;
                int64_t give = q;
                if (give > t->room - t->alloc)
                    give = t->room - t->alloc;
                if (give > remaining)
                    give = remaining;
                t->alloc += give;
                remaining -= give;
                last = i;
                /* a group whose room ran out loses the rest of its turn */
                last_left = t->alloc >= t->room ? 0 : q - give;
                gave = dealt = true;
            }
            if (!ring || !gave)
                break;
        }
        /* the cursor: the last group dealt, with what is left of its turn;
         * past every group passed over when none was dealt */
        snprintf(cur->group, sizeof cur->group, "%s", ts[dealt ? last : n - 1].name);
        cur->left = dealt ? last_left : 0;
        cur->set = true;
        bool short_of = false;
        bool many = pol->aging->per_s <= 0 && r->lease_many;
        if (many) { /* every group's lease of this round at once */
            const char *names[ER_FETCH_MAX + ER_FETCH_PASS_MAX + 1];
            int64_t takes[ER_FETCH_MAX + ER_FETCH_PASS_MAX + 1];
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                if (ts[i].alloc > 0) {
                    names[k] = ts[i].name;
                    takes[k++] = ts[i].alloc;
                }
            int64_t g[ER_FETCH_MAX + ER_FETCH_PASS_MAX + 1];
            rc = k ? r->lease_many(r->ctx, names, takes, k, g, err) : 0;
            for (size_t i = 0, j = 0; rc == 0 && i < n; i++)
                ts[i].got = ts[i].alloc > 0 ? g[j++] : 0;
        }
        for (size_t i = 0; rc == 0 && i < n; i++) {
            turn *t = &ts[i];
            if (t->alloc <= 0)
                continue;
            int64_t g = 0;
            if (many)
                g = t->got;
            else if (pol->aging->per_s > 0)
                rc = lease_aged(r, pol->aging, t->name, t->alloc, now, &g, err);
            else
                rc = r->lease(r->ctx, t->name, INT_MIN, t->alloc, &g, err);
            if (rc == 0 && g > 0 && pol->limits->rate.max > 0) {
                const er_rate *lr = &pol->limits->rate;
                rc = r->set_group_tat(r->ctx, t->name,
                                      er_rate_taken(lr->max, lr->per_ms, t->tat, now, g), err);
            }
            *got += g;
            if (g < t->alloc) {
                short_of = true; /* it ran out of jobs */
                if (strcmp(t->name, cur->group) == 0)
                    cur->left = 0;
            }
        }
        if (!short_of)
            break;
    }
    free(ts);
    free(nb);
    if (rc == 0 && r->sync)
        rc = r->sync(r->ctx, err);
    return rc;
}

void er_fetch_mix(const er_fetch_args *a, er_rand *r, size_t *order, int *quota)
{
    size_t n = a->nqueues;
    int64_t left = 0;
    for (size_t i = 0; i < n; i++) {
        order[i] = i;
        quota[i] = 0;
        left += a->weights[i];
    }
    for (size_t k = 0; k < n; k++) { /* a weighted draw without replacement */
        int64_t x = (int64_t)(er_rand_unit(r) * (double)left);
        size_t j = k;
        while (j + 1 < n && x >= a->weights[order[j]])
            x -= a->weights[order[j++]];
        size_t t = order[k];
        order[k] = order[j];
        order[j] = t;
        left -= a->weights[order[k]];
    }
    int64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += a->weights[i];
    for (int m = 0; m < a->max; m++) { /* each slot drawn by weight */
        int64_t x = (int64_t)(er_rand_unit(r) * (double)total);
        size_t i = 0;
        while (i + 1 < n && x >= a->weights[i])
            x -= a->weights[i++];
        quota[i]++;
    }
}

int64_t er_fetch_lease_ms(const er_queue_state *q, int64_t request_lease_ms)
{
    if (request_lease_ms > 0)
        return request_lease_ms;
    return q->lease_ms > 0 ? q->lease_ms : ER_DEFAULT_LEASE_MS;
}
