/* SPDX-License-Identifier: MIT
 *
 * Fetching: what a valid fetch request is (er_fetch_spec, filled by every
 * frontend, judged by er_fetch_validate), and the fetch policy both stores
 * follow (er_fetch_cap, er_fetch_lease_ms): which queues a fetch may lease
 * from, how many jobs each may give, and for how long. The stores do only
 * the row work: they read each queue's state, ask these, and lease up to
 * the cap in their documented order (store.h). docs/design/ARCHITECTURE.md
 * says why the policy lives here. Pure logic: the time is an argument.
 */
#ifndef ER_CORE_FETCH_H
#define ER_CORE_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "core/job_spec.h"
#include "core/queue.h"
#include "util/clock.h"
#include "util/err.h"

#define ER_FETCH_QUEUES_MAX 16 /* queues one fetch names */

/* A fetch request as a frontend read it. */
typedef struct er_fetch_spec {
    er_spec_kind queues_kind;  /* ER_SPEC_SET: queues[0..nqueues) */
    const er_spec_str *queues; /* borrowed; BAD_TYPE items are not strings */
    size_t nqueues;
    er_spec_str worker_id;
    er_spec_int max;      /* absent: 1 */
    er_spec_int wait_ms;  /* absent: 0 (no long-poll) */
    er_spec_int lease_ms; /* absent: each queue's lease_ms */
    /* queue_weights: its first members (one more than allowed) */
    er_spec_kind weights_kind;
    struct {
        er_spec_str queue;
        er_spec_int weight;
    } weights[ER_FETCH_QUEUES_MAX + 1];
    size_t nweights;
} er_fetch_spec;

#define ER_FETCH_WEIGHT_MAX 1000

/* A valid fetch request. Strings are owned (er_fetch_args_fini). */
typedef struct er_fetch_args {
    char **queues; /* in the order they are tried */
    size_t nqueues;
    char *worker_id;
    int max;          /* 1..ER_FETCH_MAX */
    int64_t wait_ms;  /* 0..ER_WAIT_MAX_MS */
    int64_t lease_ms; /* 0 = each queue's, else ER_LEASE_MIN_MS..ER_LEASE_MAX_MS */
    bool dispatcher;  /* set by HTTP dispatch only: it may lease a dispatch queue's jobs */
    int *weights;     /* NULL: queues in order; else a weighted mix, weights[i] >= 1 */
} er_fetch_args;

/* Checks a fetch request: queues (1..ER_FETCH_QUEUES_MAX names), worker_id
 * (a name), max, wait_ms, lease_ms, queue_weights (an object of queues it
 * names: 1..ER_FETCH_WEIGHT_MAX; the others weigh 1), in that order. Fills *out (owned) and
 * returns 0, or ER_EINVAL / ER_ENOMEM with *err naming the field (*out then
 * holds nothing). */
int er_fetch_validate(const er_fetch_spec *spec, er_fetch_args *out, er_error *err);
void er_fetch_args_fini(er_fetch_args *a);

/* ---- rate limits: GCRA ----
 * A limit of max per per_ms with burst b spaces leases by T = per_ms/max
 * (in ns, rounded up) and lets b of them go at once: a lease at t is
 * allowed when tat <= t + (b - 1)T, and moves tat to max(tat, t) + T. The
 * state, tat (ns; 0 = never used), lives in the store, so every server
 * shares one budget. So any window of per_ms holds at most max + b - 1
 * leases, plus 1 at its closing edge. Times are in ms, so b is at least
 * the leases one ms holds (per_ms * 1e6 / max ns apart) for limits faster
 * than one per ms. */
#define ER_NS_PER_MS 1000000LL

/* How many leases the limit allows at now (ms), at most want; *next_ns is
 * then the state after taking n of them (er_rate_taken). */
int64_t er_rate_allowed(int64_t max, int64_t per_ms, int64_t burst, int64_t tat_ns, int64_t now,
                        int64_t want);
/* The state after n leases at now. */
int64_t er_rate_taken(int64_t max, int64_t per_ms, int64_t tat_ns, int64_t now, int64_t n);
/* When (ms) the limit next allows a lease: now when it does now. */
int64_t er_rate_next_ms(int64_t max, int64_t per_ms, int64_t burst, int64_t tat_ns, int64_t now);

/* A weighted mix across a fetch's queues (a->weights): an order of the
 * queues, each next one drawn with probability weight / (weights left), and
 * how many of the fetch's max each is asked for first, each job drawn by
 * weight. A store call per queue leases its quota, then one call in the
 * order leases what the others could not give. So a queue's expected share
 * of a fetch is its weight over the sum while every queue has jobs, and no
 * job is left waiting while another queue's slot goes unused. */
void er_fetch_mix(const er_fetch_args *a, er_rand *r, size_t *order, int *quota);

/* What the fetch policy needs to know of one queue, as its store keeps it. */
typedef struct er_queue_state {
    bool paused;
    int64_t throttled_until; /* ms; fetching waits until then (a throttled failure) */
    int concurrency;         /* 0 = unlimited */
    int64_t active;          /* its leased jobs now; read only when concurrency > 0 */
    int64_t lease_ms;        /* the queue's setting; 0 = ER_DEFAULT_LEASE_MS */
    int64_t rate_max, rate_per_ms, rate_burst; /* rate_max 0: no rate limit */
    int64_t rate_tat;        /* the limit's state (ns), read only when rate_max > 0 */
} er_queue_state;

/* How many jobs a fetch may lease from a queue at `now`: 0 when it is
 * paused, throttled, at its concurrency limit or out of rate budget, else
 * the room under the limits (INT64_MAX when unlimited). A store leases
 * min(cap, what the fetch still wants) from the queues in the fetch's
 * order, and, for a rate-limited queue, stores er_rate_taken after. */
int64_t er_fetch_cap(const er_queue_state *q, int64_t now);

/* When (ms) a queue that gave nothing at now may give again because of its
 * limits (throttle, rate; at its concurrency limit, now +
 * ER_FETCH_LIMIT_RECHECK_MS: a lease may end any time): INT64_MAX when
 * none of them holds it. A long-poll fetch looks again then. */
#define ER_FETCH_LIMIT_RECHECK_MS 100
int64_t er_fetch_ready_at(const er_queue_state *q, int64_t now);

/* ---- within a queue: groups, their limits, aging ----
 * docs/api.md "Fetch order". The groups that have waiting jobs take turns
 * by deficit round-robin, in the byte order of their names (the jobs
 * without a group are the group "", first): a group's turn gives up to its
 * weight of jobs, then the next group's turn begins. A group at its
 * concurrency or rate limit is passed over (no head-of-line blocking) and
 * loses the rest of its turn. Within a group, the highest effective
 * priority first, then the oldest run_at, then insertion order.
 *
 * The store offers the row work below, each in its indexes' order; the
 * planner (er_fetch_groups) decides. A fetch of n jobs costs O((n + s) log N)
 * row work for N waiting jobs and s groups passed over at their limits
 * (at most n + ER_FETCH_PASS_MAX), whatever the number of groups. With
 * aging, each job costs one look at the head of every priority level within
 * max_boost of the highest. */
#define ER_FETCH_PASS_MAX 64 /* groups at their limits one fetch passes over */

/* Where a queue's round-robin stands on this server (a store keeps one per
 * queue; zeroed: at the start). */
typedef struct er_fetch_cursor {
    bool set;                    /* false: the first group's turn is next */
    char group[ER_NAME_MAX + 1]; /* the group of the last turn ("": no group) */
    int64_t left;                /* jobs left in its turn; 0: the next group's turn */
} er_fetch_cursor;

typedef struct er_fetch_rows {
    void *ctx;
    /* The first group with a waiting job after `after` (from the start when
     * NULL), byte order: *found false when none. out holds ER_NAME_MAX + 1. */
    int (*next_group)(void *ctx, const char *after, char *out, bool *found, er_error *err);
    /* Optional (NULL: next_group one by one): up to k groups with waiting
     * jobs after `after` (from the start when NULL), in order, into
     * out[0..*n); fewer when there are no more (no wrapping round). */
    int (*next_groups)(void *ctx, const char *after, size_t k, char (*out)[ER_NAME_MAX + 1],
                       size_t *n, er_error *err);
    /* A group's leased jobs now. */
    int (*group_active)(void *ctx, const char *group, int64_t *n, er_error *err);
    /* Optional (NULL: group_active and group_tat one by one): for each of
     * groups[0..n), its leased jobs (when active) and rate state (when
     * tat), at once. */
    int (*rooms)(void *ctx, const char *const *groups, size_t n, bool active, bool tat,
                 int64_t *actives, int64_t *tats, er_error *err);
    /* A group's rate state (ns; 0 when none), and storing it (a store may
     * hold the write until sync). */
    int (*group_tat)(void *ctx, const char *group, int64_t *tat_ns, er_error *err);
    int (*set_group_tat)(void *ctx, const char *group, int64_t tat_ns, er_error *err);
    /* The highest priority below `below` (INT_MAX: any) among the group's
     * waiting jobs, and the oldest run_at at it: *found false when none. */
    int (*level)(void *ctx, const char *group, int below, int *priority, int64_t *run_at,
                 bool *found, er_error *err);
    /* Leases up to take of the group's waiting jobs in fetch order (only of
     * priority `priority` unless it is INT_MIN), appended to the fetch's
     * result; *got says how many. */
    int (*lease)(void *ctx, const char *group, int priority, int64_t take, int64_t *got,
                 er_error *err);
    /* Optional (NULL: lease group by group): leases takes[i] of the waiting
     * jobs of each groups[i], in that order, each group's in fetch order;
     * gots[i] says how many. Not used with aging. */
    int (*lease_many)(void *ctx, const char *const *groups, const int64_t *takes, size_t n,
                      int64_t *gots, er_error *err);
    /* A store may defer the leases of one round (priority INT_MIN) and do
     * them at once: the planner calls this (NULL: not needed) before it
     * looks at the rows again, and last. */
    int (*sync)(void *ctx, er_error *err);
} er_fetch_rows;

/* What a queue's settings say about fetching within it. */
typedef struct er_fetch_group_policy {
    const er_fairness *fairness;
    const er_group_limits *limits;
    const er_aging *aging;
} er_fetch_group_policy;

/* Whether a queue needs the planner: it has grouped waiting jobs, group
 * limits or aging. Otherwise one lease of its cap, in priority order, is
 * the same answer, and the store's fast path. */
bool er_fetch_grouped(const er_fetch_group_policy *pol, bool has_grouped_jobs);

/* Leases up to want jobs of one queue by the rules above, moving *cur.
 * *got says how many; *ready_at (ms, INT64_MAX: none) when a group held
 * back by its rate limit may give again. */
int er_fetch_groups(const er_fetch_rows *rows, const er_fetch_group_policy *pol,
                    er_fetch_cursor *cur, int64_t want, int64_t now, int64_t *got,
                    int64_t *ready_at, er_error *err);

/* The lease a fetch gives a queue's jobs: its own lease_ms when it asked
 * for one, else the queue's setting, else ER_DEFAULT_LEASE_MS. */
int64_t er_fetch_lease_ms(const er_queue_state *q, int64_t request_lease_ms);

#endif
