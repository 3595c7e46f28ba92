/* SPDX-License-Identifier: MIT
 *
 * Execution of engine requests against one store connection, on the writer
 * or reader thread. Internal to src/engine.
 */
#ifndef ER_ENGINE_EXEC_H
#define ER_ENGINE_EXEC_H

#include <stdbool.h>

#include "core/job_spec.h"
#include "engine/engine.h"
#include "engine/waits.h"

/* Queues that got ready jobs in a transaction, with how many, so parked
 * fetchers on them can be woken. */
typedef struct er_wake {
    char **names;
    int *counts;
    size_t len, cap, ccap; /* cap: of names, ccap: of counts */
} er_wake;

void er_wake_add(er_wake *w, const char *queue, int count);
void er_wake_fini(er_wake *w);

struct er_sched_cache;

typedef struct er_exec_ctx {
    const er_store_ops *ops;
    er_store *store;
    er_rand rand;
    er_job_defaults server_defaults;
    er_wake wake;              /* filled by writes in the current transaction */
    er_keys done;              /* jobs the current transaction finished (completed, dead,
                                  cancelled), for waits on their outcome */
    int promoted, reaped;      /* by maintenance in the current transaction */
    er_job_list reaped_jobs;   /* the jobs reaped, as the store returned them */
    struct er_cron_event *cron_ev; /* the jobs cron ticks enqueued (engine/qmetrics.h) */
    size_t ncron_ev, cron_cap;
    uint64_t cron_missed;      /* scheduler passes that found missed ticks */
    struct er_sched_cache *sched; /* parsed schedulers by key (exec_sched.c) */
    int64_t sched_since;       /* server start: due ticks before it were missed */
    int64_t audit_retention_ms; /* audit rows older than this go at retention */
    size_t reply_max;          /* a fetch reply's cap in bytes (--max-reply) */
    size_t payload_max;        /* the largest payload a job may have */
} er_exec_ctx;

/* Frees what the context caches (call when its thread is done). */
void er_exec_ctx_fini(er_exec_ctx *x);

/* True when the request only reads (runs on the reader thread). */
bool er_req_is_read(const er_req *req);

/* Runs one request inside the writer's open transaction. Returns 0 when the
 * transaction may continue (the request's own rc may still be a logical
 * error), or a storage error code: the caller must roll back the batch. */
int er_exec_write(er_exec_ctx *x, er_req *req, int64_t now);

/* Runs `first` like er_exec_write and, when it and the requests after it
 * are enqueues, those too, with one store call for all their jobs (or,
 * when they are acks that only complete, one call for all their acks);
 * each request gets the answer it would have had alone. *next = the first
 * request not run. Returns 0, or a storage error (in first->err): the
 * caller must roll back the batch. */
int er_exec_write_run(er_exec_ctx *x, er_req *first, er_req **next, int64_t now);

/* Runs only the lease part of a FETCH (its acks were applied before), for
 * a long-poll fetch parked in the writer. Same return convention. */
int er_exec_fetch_again(er_exec_ctx *x, er_req *req, int64_t now);

/* Runs one read request on the reader's connection; sets req->rc. */
void er_exec_read(er_exec_ctx *x, er_req *req, int64_t now);

/* Maintenance in the writer's open transaction: promotion, reaping and,
 * when with_retention, retention. Returns 0 or a storage error (*err says
 * what the store said, when it said anything). */
int er_exec_maintenance(er_exec_ctx *x, int64_t now, bool with_retention, er_error *err);

/* True for codes that mean the store failed (roll back, answer 503). */
bool er_is_storage_error(int rc);

/* Enqueues one validated job the way ER_REQ_ENQUEUE does (queue defaults,
 * wake-ups of parked fetchers). `existing` (may be NULL) receives the
 * stored job on a duplicate, `tombs` (may be NULL) the tombstone of a
 * remembered id. Returns 0 or a negative code. */
int er_exec_enqueue_job(er_exec_ctx *x, er_job *job, int64_t now, bool *duplicate,
                        er_job *existing, er_tombstone_list *tombs, er_error *err);

/* Schedulers, leases, cursors (exec_sched.c). */
bool er_sched_req_is_read(const er_req *req);
/* Runs a write request of exec_sched.c's types; same contract as er_exec_write. */
int er_exec_sched_write(er_exec_ctx *x, er_req *req, int64_t now);
/* Runs a read request of exec_sched.c's types; sets req->rc. */
void er_exec_sched_read(er_exec_ctx *x, er_req *req, int64_t now);
/* The cron pass of maintenance: fires the due ticks of every due scheduler
 * per its missed-run policy and advances it. Returns 0 or a storage error. */
int er_exec_cron(er_exec_ctx *x, int64_t now);

/* Dashboard sessions and the audit log (exec_ui.c). */
bool er_ui_req_is_read(const er_req *req);
/* Runs a write request of exec_ui.c's types; same contract as er_exec_write. */
int er_exec_ui_write(er_exec_ctx *x, er_req *req, int64_t now);
/* Runs a read request of exec_ui.c's types; sets req->rc. */
void er_exec_ui_read(er_exec_ctx *x, er_req *req);
/* Appends req->audit (when set and the request succeeded) in the open
 * transaction. Returns 0 or a storage error. */
int er_exec_audit(er_exec_ctx *x, er_req *req, int64_t now);
/* The retention pass's sweep of expired sessions and old audit rows. */
int er_exec_ui_sweep(er_exec_ctx *x, int64_t now);

/* Wakes parked fetchers for the jobs of an enqueue that are ready now and
 * not duplicates (exec.c). */
void er_exec_wake_enqueued(er_exec_ctx *x, const er_req *req);
/* An ENQUEUE with locks, its defaults applied and its duplicate flags
 * allocated (exec_unique.c); same contract as er_exec_write. */
int er_exec_enqueue_locked(er_exec_ctx *x, er_req *req, int64_t now);
/* Gives back the unique lock whose owner token is `token` (a lock already
 * given back or taken again is left as it is). 0, or a storage error with
 * req->err set. */
int er_exec_unique_release(er_exec_ctx *x, er_req *req, const char *token, int64_t now);

/* The Faktory worker registry (exec_workers.c). */
bool er_workers_req_is_read(const er_req *req);
/* Runs a write request of exec_workers.c's types; same contract as er_exec_write. */
int er_exec_workers_write(er_exec_ctx *x, er_req *req, int64_t now);
/* Runs a read request of exec_workers.c's types; sets req->rc. */
void er_exec_workers_read(er_exec_ctx *x, er_req *req, int64_t now);

#endif
