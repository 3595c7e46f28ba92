/* SPDX-License-Identifier: MIT
 *
 * The engine: runs store operations off the event loop. Requests are
 * submitted on the loop thread (or, with er_engine_submit_from, on any
 * thread), executed by the writer thread in group commits (many requests,
 * one transaction, one fsync) or by the reader thread (queries), and
 * answered on the loop thread through req->done after the commit. The
 * writer also runs maintenance (promotion of due jobs, lease reaping,
 * retention) and holds long-poll fetches that found nothing: when a later
 * transaction makes jobs ready on one of their queues, it leases them in
 * that same transaction, so the enqueue and the pickup share one commit.
 * Reads that wait for a job to finish (GET_JOB with wait_ms) are held on
 * the loop side (waits.h) and read again when a commit, here or on another
 * node, finished their job.
 */
#ifndef ER_ENGINE_ENGINE_H
#define ER_ENGINE_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/ack.h"
#include "core/fetch.h"
#include "core/job.h"
#include "core/queue.h"
#include "core/scheduler.h"
#include "store/store.h"
#include "util/err.h"

struct event_base;

typedef struct er_engine er_engine;

typedef struct er_engine_config {
    const char *store_url;        /* copied */
    er_store_options store;
    int max_batch;                /* requests per group commit, default 512 */
    int64_t maintenance_ms;       /* timer period for promote/reap, default 50 */
    int64_t retention_ms;         /* retention period, default 10000 */
    size_t metrics_max_queues;    /* queues with their own metrics, default 1000 */
    const char *otlp_endpoint;    /* export spans there (engine/otlp.h); NULL: none */
    /* GET_JOB waits (wait_ms > 0) registered at once: 0 means
     * ER_MAX_WAITERS_DEFAULT, < 0 none (a wait that would park is refused) */
    int max_waiters;
    int64_t audit_retention_ms;   /* audit rows older than this are deleted; default 90 days */
} er_engine_config;

#define ER_MAX_WAITERS_DEFAULT 10000
#define ER_MAX_WAITERS_MAX 1000000
#define ER_AUDIT_RETENTION_DEFAULT_MS (90LL * 86400000)
/* store.dedup_window_ms is the dedup window of tombstones (store.h); 0 keeps
 * none. */

typedef enum er_req_type {
    ER_REQ_ENQUEUE,      /* in: jobs (1 or more, all validated); out: dup flags, job */
    ER_REQ_FETCH,        /* in: acks (optional), fetch params; out: ack results, jobs */
    ER_REQ_ACKS,         /* in: acks; out: per-ack results */
    ER_REQ_HEARTBEAT,    /* in: id, token, extend_ms, progress; out: expires_at */
    ER_REQ_GET_JOB,      /* in: id, wait_ms; out: job, wait_refused */
    ER_REQ_CANCEL,       /* in: id; out: job */
    ER_REQ_LIST_JOBS,    /* in: queue, state, limit, cursor; out: jobs, next_cursor */
    ER_REQ_LIST_QUEUES,  /* out: queues */
    ER_REQ_LIST_SETTINGS, /* out: queues, settings only (counts zero) */
    ER_REQ_GET_QUEUE,    /* in: queue; out: settings */
    ER_REQ_PUT_QUEUE,    /* in: queue, change (merged onto the stored settings); out: settings */
    ER_REQ_LIST_DEAD,    /* in: queue (may be NULL), limit, cursor; out: jobs, next_cursor */
    ER_REQ_REDRIVE,      /* in: id; out: job (the new copy) */
    ER_REQ_DELETE_DEAD,  /* in: id */
    /* schedulers, leases, cursors (exec_sched.c) */
    ER_REQ_PUT_SCHEDULER,    /* in: id (key), sched; out: scheds (1), created */
    ER_REQ_GET_SCHEDULER,    /* in: id; out: scheds (1) */
    ER_REQ_LIST_SCHEDULERS,  /* in: cursor (last key seen), max; out: scheds, next_cursor */
    ER_REQ_DELETE_SCHEDULER, /* in: id */
    ER_REQ_TRIGGER_SCHEDULER, /* in: id; out: job, created (false: the tick's job existed) */
    ER_REQ_LEASE_ACQUIRE,    /* in: lease_type, lease_code, lease_run_key, extend_ms (ttl);
                                out: lease (also on ER_ECONFLICT) */
    ER_REQ_LEASE_RENEW,      /* in: token, extend_ms (ttl); out: lease */
    ER_REQ_LEASE_COMPLETE,   /* in: token; out: lease */
    ER_REQ_LEASE_RELEASE,    /* in: token; out: lease */
    ER_REQ_GET_CURSOR,       /* in: id (name); out: value, updated_at */
    ER_REQ_PUT_CURSOR,       /* in: id, text (value), expected, has_expected; out: updated_at
                                (on ER_ECONFLICT: value, the current one) */
    ER_REQ_LIST_LEASES,      /* in: cursor (last key seen), max; out: leases, next_cursor */
    ER_REQ_LIST_CURSORS,     /* in: cursor (last name seen), max; out: cursors, next_cursor */
    /* dashboard sessions and the audit log (exec_ui.c) */
    ER_REQ_SESSION_PUT,      /* in: id (the hash), session */
    ER_REQ_SESSION_TOUCH,    /* in: id (the hash), extend_ms (idle limit); out: session */
    ER_REQ_SESSION_DELETE,   /* in: id (the hash) */
    ER_REQ_AUDIT_ADD,        /* in: audit (only) */
    ER_REQ_AUDIT_LIST,       /* in: max, cursor (seq before, decimal); out: audits, next_cursor */
    ER_REQ_BULK,             /* in: bulk (ids, or a filter and after); out: bulk.done,
                                bulk.after, bulk.more. One chunk of at most ER_BULK_CHUNK */
    ER_REQ_BULK_COUNT,       /* in: bulk.filter; out: bulk.count */
    /* the Faktory worker registry (exec_workers.c) */
    ER_REQ_WORKER_BEATS,     /* in: workers (rows to write), wids (rows to read back),
                                extend_ms (the ttl); reaps the rows past the ttl; out:
                                worker_rows: the live signalled rows, then the wids' rows */
    ER_REQ_WORKER_SIGNAL,    /* in: id (wid), worker_state, extend_ms (the ttl); out:
                                worker_rows (the row after) */
    ER_REQ_WORKER_LIST,      /* in: extend_ms (the ttl), max; out: worker_rows (live ones) */
    ER_REQ_WORKER_COUNT,     /* in: extend_ms (the ttl); out: worker_count (live rows) */
} er_req_type;

typedef struct er_req er_req;

/* A unique lock an ENQUEUE takes for one of its jobs (docs/faktory.md,
 * "Unique jobs"): the run-once lease (req->lease_type, the job's queue,
 * run_key) for ttl_ms, acquired in the enqueue's own transaction. A job
 * whose lock is held is not enqueued; a job enqueued keeps the lock's
 * token (er_job.unique_token, which the store reads back when the job
 * completes, so the complete gives it back); a job whose id exists gives
 * back the lock it took. */
typedef struct er_enqueue_lock {
    bool on;                          /* in: this job takes a lock */
    char run_key[65];                 /* in */
    int64_t ttl_ms;                   /* in */
    int rc;                           /* out: 0, or ER_ECONFLICT when held (nothing enqueued for
                                         the job; its duplicate flag is set) */
    char token[ER_LEASE_TOKEN_SIZE];  /* out: the lock's owner token when taken; "" else */
} er_enqueue_lock;

/* A bulk action's chunk (exec_ui.c): redrive or delete dead letters,
 * cancel waiting or scheduled jobs, or send scheduled jobs to the dead
 * letters (kill) or to waiting now (run_now), by ids or by a filter. */
typedef enum er_bulk_action {
    ER_BULK_REDRIVE = 1,
    ER_BULK_DELETE = 2,
    ER_BULK_CANCEL = 3,
    ER_BULK_KILL = 4,    /* last_error: class permanent, bulk.reason as its message */
    ER_BULK_RUN_NOW = 5,
} er_bulk_action;

typedef struct er_bulk {
    er_bulk_action action;
    char **ids;            /* in: the jobs (owned), at most ER_BULK_CHUNK; NULL: the filter */
    size_t nids;
    er_bulk_filter filter; /* in: its strings owned (freed with the request) */
    bool strict;           /* in: ids too are taken only when the filter takes them */
    /* in, optional: a job is taken only when match(job, pattern) (run on
     * the writer thread: pure); pattern owned */
    bool (*match)(const er_job *job, const char *pattern);
    char *pattern;
    char *reason;          /* in: KILL: the dead letter's message (owned) */
    int64_t after;         /* in: the seq after which this chunk starts; out: its last */
    int64_t done;          /* out: jobs this chunk changed */
    int64_t count;         /* out: BULK_COUNT */
    bool more;             /* out: a filter chunk that was full: submit another */
} er_bulk;

/* A scheduler as a reply shows it (exec_sched.c). */
typedef struct er_sched_view {
    er_sched_row row;  /* the stored row */
    er_scheduler sc;   /* its spec, decoded, with its zone attached */
    int rc;            /* LIST: 0, or why the spec cannot be used (e.g. its zone
                          file vanished; message in err), sc then empty */
    er_error err;
} er_sched_view;

void er_sched_view_fini(er_sched_view *v);

struct er_req {
    er_req_type type;
    /* Called on the loop thread once the request is answered (after its
     * commit). The callee owns req and frees it with er_req_free. */
    void (*done)(er_req *req);
    void *arg;                 /* the submitter's, untouched */

    /* inputs (owned by the request; er_req_free frees them) */
    er_job *jobs;              /* ENQUEUE: validated jobs, defaults not yet applied */
    size_t njobs;
    er_enqueue_lock *locks;    /* ENQUEUE, optional: njobs unique locks (lease_type their
                                  type); owned */
    er_ack *acks;              /* FETCH, ACKS: valid outcomes (er_ack_validate) */
    size_t nacks;
    er_fetch_args fetch;       /* FETCH: a valid request (er_fetch_validate) */
    int max;                   /* LIST_*: page size */
    char *id;                  /* HEARTBEAT, GET_JOB, CANCEL, REDRIVE, DELETE_DEAD */
    int64_t wait_ms;           /* GET_JOB: 0..ER_WAIT_MAX_MS, how long to wait for the job to
                                  finish (completed, dead or cancelled); 0 answers at once */
    char *token;               /* HEARTBEAT */
    int64_t extend_ms;         /* HEARTBEAT: 0 = the queue's lease_ms */
    char *progress;            /* HEARTBEAT: JSON text or NULL */
    char *queue;               /* LIST_JOBS, GET/PUT_QUEUE, LIST_DEAD (NULL = all) */
    er_state state;            /* LIST_JOBS */
    char *cursor;              /* LIST_*: NULL for the first page */
    er_queue_change *change;   /* PUT_QUEUE: a judged change (er_queue_patch_check);
                                  settings are large, so these two are on the heap */

    /* outputs */
    int rc;                    /* 0 or ER_E* for the whole request */
    er_error err;
    bool *duplicate;           /* ENQUEUE: njobs flags */
    er_tombstone_list tombs;   /* ENQUEUE, TRIGGER_SCHEDULER: the duplicates a tombstone
                                  remembers (index: which job), in job order */
    er_job job;                /* ENQUEUE (single: the stored job), GET_JOB, CANCEL, REDRIVE */
    er_job_list list;          /* FETCH (leased jobs), LIST_JOBS, LIST_DEAD */
    char *next_cursor;         /* LIST_*: owned, NULL when the last page */
    int64_t expires_at;        /* HEARTBEAT */
    er_queue_info *queue_infos; /* LIST_QUEUES */
    size_t nqueue_infos;
    er_queue_settings *settings; /* GET/PUT_QUEUE: set when rc is 0 */

    /* schedulers, leases, cursors (exec_sched.c) */
    er_scheduler sched;        /* PUT_SCHEDULER: validated (er_sched_validate), no zone */
    char *text;                /* PUT_CURSOR: the value (canonical JSON text) */
    char *expected;            /* PUT_CURSOR: the value expected now (NULL: no cursor yet) */
    bool has_expected;         /* PUT_CURSOR: compare-and-set; false writes unconditionally */
    char *lease_type, *lease_code, *lease_run_key; /* LEASE_ACQUIRE */
    bool created;              /* out: PUT_SCHEDULER new key, TRIGGER new job */
    er_sched_view *scheds;     /* out: PUT/GET_SCHEDULER (one), LIST_SCHEDULERS (a page) */
    size_t nscheds;
    er_lease lease;            /* out: LEASE_* */
    char *value;               /* out: GET_CURSOR the value; PUT_CURSOR on ER_ECONFLICT the
                                  current one (NULL: none). JSON text, owned */
    int64_t updated_at;        /* out: GET_CURSOR, PUT_CURSOR */
    er_lease_list leases;      /* out: LIST_LEASES (a page; no owner tokens) */
    er_cursor_list cursors;    /* out: LIST_CURSORS (a page) */
    bool wait_refused;         /* out: GET_JOB with ER_EUNAVAIL: the job is not finished and
                                  max_waiters waits are registered (retry later) */

    /* dashboard sessions and the audit log (exec_ui.c) */
    er_session session;        /* SESSION_PUT in, SESSION_TOUCH out */
    er_audit *audit;           /* any write: when set, appended in the same transaction once
                                  the request succeeded (rc 0); owned */
    er_audit_list audits;      /* out: AUDIT_LIST */
    er_bulk bulk;              /* BULK, BULK_COUNT */

    /* the Faktory worker registry (exec_workers.c) */
    er_worker_list workers;    /* WORKER_BEATS in */
    char **wids;               /* WORKER_BEATS in: owned */
    size_t nwids;
    er_worker_state worker_state; /* WORKER_SIGNAL in */
    er_worker_list worker_rows; /* out */
    int64_t worker_count;      /* out: WORKER_COUNT */

    /* engine-private */
    er_req *next;
    int64_t deadline_mono;     /* FETCH long-poll */
    int64_t repoll_mono;       /* FETCH: parked; next unconditional retry */
    int64_t ready_at;          /* FETCH: when a limit in time lets a named queue give
                                  again (ms, INT64_MAX: none; er_fetch_params) */
    bool acks_applied;         /* FETCH: acks are applied on the first pass only */
    _Atomic bool abandoned;    /* FETCH, GET_JOB: nobody waits for the answer
                                  (er_engine_abandon) */
    /* GET_JOB with wait_ms (waits.c) */
    bool wait_reg;             /* registered with the engine's waits */
    bool wait_over;            /* not registered (max_waiters): one read, and a 503
                                  unless the job is finished */
    int wstate;                /* reading, parked or woken (under the waits' mutex) */
    bool wrecheck, wexpired;   /* read again / the wait ran out (under the mutex) */
    bool warmed;               /* its deadline timer is set */
    uint32_t wkey;             /* er_wait_key(id) */
    er_req *wnext, *wwoken;    /* hash chain; woken list */
    struct event *wtimer;      /* its deadline (loop thread) */
    void *wowner;              /* the er_waits */
};

/* A zeroed request of `type`; NULL on ENOMEM. */
er_req *er_req_new(er_req_type type);
/* Frees the request and everything it owns. NULL-safe. */
void er_req_free(er_req *req);

/* Opens the store (creating/migrating it), starts the writer and reader
 * threads and the maintenance timers on `base`, and a wake-up listener
 * thread when the store has listener ops (store.h). `base` must be
 * notifiable from other threads (evthread_use_pthreads() before it was
 * made). Blocking (opens files). Returns 0 or a negative code with *err. */
int er_engine_start(struct event_base *base, const er_engine_config *cfg, er_engine **out,
                    er_error *err);

/* Hands req to the engine (takes ownership until req->done runs). Must be
 * called on the loop thread. After er_engine_drain began, requests are
 * answered at once with ER_EUNAVAIL: req->done runs before this returns.
 * A fetch (not fetch.dispatcher) naming a queue HTTP dispatch delivers is
 * answered at once the same way with ER_EINVAL, field "queues[i]". */
void er_engine_submit(er_engine *e, er_req *req);

/* er_engine_submit for any thread (the outbox relay, HTTP dispatch): takes
 * ownership of req until req->done runs, and req->done always runs on the
 * loop thread, never inside this call. A request submitted before
 * er_engine_drain began is answered before on_drained runs; one submitted
 * after gets ER_EUNAVAIL. Never blocks on the store (a mutex only).
 * Callers must stop calling it before er_engine_free; requests the loop
 * did not answer by then are freed without req->done. */
void er_engine_submit_from(er_engine *e, er_req *req);

/* Tells the engine nobody waits for req's answer any more (its client went
 * away): a fetch leases nothing more and stops waiting; outcomes it carries
 * are still applied; a wait for a job's outcome stops waiting (it frees its
 * place under max_waiters). req->done still runs, never inside this call.
 * Loop thread; req is still the engine's. */
void er_engine_abandon(er_engine *e, er_req *req);

/* Answers every GET_JOB wait now (after one more read: the job as it is)
 * and answers later ones at once, as with wait_ms 0: the first step of a
 * shutdown (er_engine_drain does it too). Loop thread. */
void er_engine_stop_waits(er_engine *e);

/* True once the store is open and the threads are running, false while
 * draining. */
bool er_engine_ready(const er_engine *e);

/* Stops taking requests, answers parked long-polls with empty results and
 * waits with their jobs as they are, lets the writer finish its queue and
 * current commit, then calls on_drained(arg) on the loop thread. */
void er_engine_drain(er_engine *e, void (*on_drained)(void *arg), void *arg);

/* Joins the threads, closes the store, frees the engine. Call after
 * on_drained ran, or on a start-up error path. NULL-safe. */
void er_engine_free(er_engine *e);

/* ---- HTTP dispatch's queues (loop thread) ----
 * The engine knows which queues have a dispatch target, to refuse worker
 * fetches of them; the dispatcher (dispatcher.h) tells it what it found in
 * the settings, and a settings change answered here updates it at once. */

/* Replaces the set of dispatch queues (names copied). 0 or ER_ENOMEM (the
 * set is then unchanged). */
int er_engine_set_dispatch_queues(er_engine *e, const char *const *names, size_t n);

/* True when `queue` is in the set. */
bool er_engine_is_dispatch_queue(const er_engine *e, const char *queue);

/* fn(arg, queue, settings) runs on the loop thread after each settings
 * change the engine answered (PUT_QUEUE), before the submitter's done;
 * borrowed arguments. One listener; NULL removes it. */
void er_engine_on_settings(er_engine *e,
                           void (*fn)(void *arg, const char *queue, const er_queue_settings *s),
                           void *arg);

/* Counters for /metrics (loop thread). */
typedef struct er_engine_stats {
    uint64_t commits, commit_requests, commit_failures;
    uint64_t enqueued, fetched, completed, failed, released, promoted, reaped, dead;
    uint64_t parked_fetches;   /* long-polls parked so far */
    uint64_t waiting_fetches;  /* long-polls parked now */
    uint64_t parked_waits;     /* GET_JOB waits that found their job unfinished and waited */
    uint64_t waiting_waits;    /* GET_JOB waits registered now */
    uint64_t refused_waits;    /* GET_JOB waits refused (max_waiters) */
    bool maintenance_leader; /* this node runs promotion, reaping, retention */
    int64_t store_connections; /* held to the store now; -1 when the store does not say */
} er_engine_stats;

void er_engine_get_stats(const er_engine *e, er_engine_stats *out);

/* The per-queue metrics (engine/qmetrics.h); lives as long as the engine. */
struct er_qmetrics *er_engine_qmetrics(er_engine *e);
/* The span exporter (engine/otlp.h), NULL when none. */
struct er_otlp *er_engine_otlp(er_engine *e);

#endif
