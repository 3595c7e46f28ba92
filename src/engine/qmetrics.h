/* SPDX-License-Identifier: MIT
 *
 * Per-queue metrics for /metrics and the dashboard: counters and
 * histograms this node counted, and the gauges of the last sample of the
 * store's queue counts. A queue gets its own slot the first time it is
 * seen, up to max_queues; the rest share the slot named "_other", so no
 * enqueue can grow the set without bound. Thread-safe: one mutex, held for
 * a batch of updates (er_qm_lock) or while a reader walks the slots.
 */
#ifndef ER_ENGINE_QMETRICS_H
#define ER_ENGINE_QMETRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "store/store.h"

#define ER_QM_OTHER "_other"
#define ER_QM_MAX_QUEUES_MAX 100000
#define ER_QM_NBUCKETS 16    /* histogram upper bounds, er_qm_bucket_bounds */
#define ER_QM_HISTORY 120    /* depth samples kept: one hour at one a ER_QM_HISTORY_MS */
#define ER_QM_HISTORY_MS 30000

typedef enum er_qm_counter {
    ER_QM_ENQUEUED,
    ER_QM_FETCHED,
    ER_QM_COMPLETED,
    ER_QM_FAILED,     /* failure reports */
    ER_QM_RETRIED,    /* failures scheduled to run again */
    ER_QM_DEAD_PERMANENT,
    ER_QM_DEAD_EXHAUSTED,
    ER_QM_DEAD_STALLED,
    ER_QM_DEAD_MAX_STARTED,
    ER_QM_LEASE_EXPIRED, /* every expired lease the reaper handled */
    ER_QM_STALLED,       /* those that went back to waiting */
    ER_QM_NCOUNTERS
} er_qm_counter;

typedef enum er_qm_hist_kind { ER_QM_WAIT, ER_QM_RUN, ER_QM_NHISTS } er_qm_hist_kind;

typedef struct er_qm_hist {
    uint64_t buckets[ER_QM_NBUCKETS]; /* not cumulative: observations <= bound[i], > bound[i-1] */
    uint64_t count;                   /* including those above the last bound */
    double sum;                       /* seconds */
} er_qm_hist;

typedef struct er_qm_queue {
    char name[ER_NAME_MAX + 1];
    uint64_t c[ER_QM_NCOUNTERS];
    er_qm_hist h[ER_QM_NHISTS];
    /* the last sample (gauges); `sampled` false: the queue was not in it */
    bool sampled;
    int64_t counts[6];          /* by er_state */
    int64_t oldest_waiting_ms;  /* run_at of the oldest waiting job, 0 when none */
    int64_t hist_waiting[ER_QM_HISTORY]; /* waiting jobs, ring; -1: no sample */
} er_qm_queue;

/* The store writer's transactions, for the whole node. */
typedef struct er_qm_store {
    er_qm_hist commit;   /* seconds a commit took (its fsync) */
    er_qm_hist batch;    /* requests a transaction answered, er_qm_batch_bounds */
} er_qm_store;

/* The cron passes of this node (the maintenance leader). */
typedef struct er_qm_cron {
    er_qm_hist lateness;  /* seconds from a tick to its job's enqueue (on-time ticks) */
    uint64_t runs;        /* jobs ticks enqueued, catch-up runs included */
    uint64_t catchup;     /* of which catch-up runs of missed ticks */
    uint64_t missed;      /* scheduler passes that found due ticks missed */
} er_qm_cron;

/* One job a scheduler's tick enqueued, counted once its transaction commits. */
typedef struct er_cron_event {
    char queue[ER_NAME_MAX + 1];
    int64_t late_ms;
    bool catchup;
} er_cron_event;

typedef struct er_qmetrics er_qmetrics;

/* max_queues 1..ER_QM_MAX_QUEUES_MAX labelled queues. NULL on ENOMEM. */
er_qmetrics *er_qm_new(size_t max_queues);
void er_qm_free(er_qmetrics *m);

/* The histogram bounds, in seconds (ER_QM_NBUCKETS of them), and those of
 * the batch sizes, in requests. */
extern const double er_qm_bucket_bounds[ER_QM_NBUCKETS];
extern const double er_qm_batch_bounds[ER_QM_NBUCKETS];

void er_qm_lock(er_qmetrics *m);
void er_qm_unlock(er_qmetrics *m);

/* Locked: the slot of `queue` (made on first sight; "_other" when full). */
er_qm_queue *er_qm_slot(er_qmetrics *m, const char *queue);
/* Locked: adds an observation in seconds (negative counts as 0). */
void er_qm_observe(er_qm_queue *q, er_qm_hist_kind k, double seconds);
/* Adds an observation to h with these bounds (negative counts as 0). */
void er_qm_hist_add(er_qm_hist *h, const double *bounds, double v);
/* Locked: the node's store histograms, and its cron counters. */
er_qm_store *er_qm_store_stats(er_qmetrics *m);
er_qm_cron *er_qm_cron_stats(er_qmetrics *m);
/* Counts a committed cron pass's jobs and missed finds (takes the lock). */
void er_qm_count_cron(er_qmetrics *m, const er_cron_event *ev, size_t n, uint64_t missed);

/* Counts the jobs a reap pass handled (takes the lock). */
void er_qm_count_reaped(er_qmetrics *m, const er_job_list *reaped);

/* Locked: records a sample of the store's queues at `now` (ms), replacing
 * the gauges of every slot; queues past the bound are summed into "_other"
 * (its oldest is the oldest of them). */
void er_qm_sample(er_qmetrics *m, const er_queue_info *qs, size_t n, int64_t now);
/* Locked: forgets the last sample (this node stopped being the one that
 * reports gauges). */
void er_qm_unsample(er_qmetrics *m);
/* Locked: when the last sample was taken (ms, 0: none). */
int64_t er_qm_sampled_at(const er_qmetrics *m);

/* Locked: the slots, in the order they were made ("_other" first). */
size_t er_qm_count(const er_qmetrics *m);
const er_qm_queue *er_qm_at(const er_qmetrics *m, size_t i);
/* Locked: the slot of `queue` if it has one of its own, else NULL. */
const er_qm_queue *er_qm_find(er_qmetrics *m, const char *queue);
/* Locked: the history ring's newest index (ER_QM_HISTORY entries, oldest at
 * (head + 1) % ER_QM_HISTORY), and when the newest was taken (ms, 0: none). */
int er_qm_history_head(const er_qmetrics *m, int64_t *newest_at);

#endif
