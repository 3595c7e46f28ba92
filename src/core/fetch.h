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

#include "core/job_spec.h"
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
} er_fetch_spec;

/* A valid fetch request. Strings are owned (er_fetch_args_fini). */
typedef struct er_fetch_args {
    char **queues; /* in the order they are tried */
    size_t nqueues;
    char *worker_id;
    int max;          /* 1..ER_FETCH_MAX */
    int64_t wait_ms;  /* 0..ER_WAIT_MAX_MS */
    int64_t lease_ms; /* 0 = each queue's, else ER_LEASE_MIN_MS..ER_LEASE_MAX_MS */
    bool dispatcher;  /* set by HTTP dispatch only: it may lease a dispatch queue's jobs */
} er_fetch_args;

/* Checks a fetch request: queues (1..ER_FETCH_QUEUES_MAX names), worker_id
 * (a name), max, wait_ms, lease_ms, in that order. Fills *out (owned) and
 * returns 0, or ER_EINVAL / ER_ENOMEM with *err naming the field (*out then
 * holds nothing). */
int er_fetch_validate(const er_fetch_spec *spec, er_fetch_args *out, er_error *err);
void er_fetch_args_fini(er_fetch_args *a);

/* What the fetch policy needs to know of one queue, as its store keeps it. */
typedef struct er_queue_state {
    bool paused;
    int64_t throttled_until; /* ms; fetching waits until then (a throttled failure) */
    int concurrency;         /* 0 = unlimited */
    int64_t active;          /* its leased jobs now; read only when concurrency > 0 */
    int64_t lease_ms;        /* the queue's setting; 0 = ER_DEFAULT_LEASE_MS */
} er_queue_state;

/* How many jobs a fetch may lease from a queue at `now`: 0 when it is
 * paused, throttled or at its concurrency limit, else the room under the
 * limit (INT64_MAX when unlimited). A store leases min(cap, what the fetch
 * still wants) from the queues in the fetch's order. */
int64_t er_fetch_cap(const er_queue_state *q, int64_t now);

/* The lease a fetch gives a queue's jobs: its own lease_ms when it asked
 * for one, else the queue's setting, else ER_DEFAULT_LEASE_MS. */
int64_t er_fetch_lease_ms(const er_queue_state *q, int64_t request_lease_ms);

#endif
