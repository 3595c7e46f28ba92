/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's internals, shared by its files: `concurrency` handler
 * threads fed from a local queue (worker_job.c), two fetcher threads that
 * keep up to concurrency + prefetch jobs leased and carry pending outcomes
 * on their fetches (worker_fetch.c), one acker thread that sends outcomes
 * as they come (worker_ack.c), one timer thread for lease heartbeats and
 * job timeouts (worker_timer.c), and the configuration and lifecycle that
 * start and stop them (worker.c). The prefetch is fixed or sized from
 * measurements by prefetch.h. One mutex guards the shared state; every
 * network call is made without it, each thread on its own client (own
 * connection). Replies and acks are read and written as text (jscan.h,
 * fetched.h, ackq.h), not jansson trees. Not installed. Fields marked (mu) are
 * guarded by the worker's mutex; the outcome fields of a job belong to its
 * handler thread until it returns.
 */
#ifndef ER_CLIENT_WORKER_INT_H
#define ER_CLIENT_WORKER_INT_H

#include "client/client_int.h"
#include "client/ackq.h"
#include "client/fetched.h"
#include "util/buf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Request bodies and ack items: the largest request body a server accepts
 * (--max-body at most 1 GiB) fits, so an oversized one gets the server's
 * 413, not an error of ours. */
#define ER_WK_BODY_MAX ((size_t)1 << 31)

/* Fetcher threads (each with its own connection): a second fetch can be in
 * flight while the first one's reply is on its way. */
#define ER_FETCHERS 2

#define ER_WK_MAX_ACKS 1000 /* the API's limit of acks per request */
/* Retry delays after a failed fetch or ack send, ms. */
#define ER_WK_BACKOFF_MIN 100
#define ER_WK_BACKOFF_MAX 5000

enum { ER_JOB_QUEUED = 1, ER_JOB_RUNNING = 2, ER_JOB_DONE = 3 };

/* Handler outcomes (errand_job_complete and friends). */
enum { ER_OC_NONE = 0, ER_OC_COMPLETE, ER_OC_TRANSIENT, ER_OC_PERMANENT, ER_OC_RETRY_LATER,
       ER_OC_THROTTLED, ER_OC_RELEASE };

struct errand_job {
    errand_worker *w;
    atomic_int refs;  /* the worker's list, the handler, the timer while in use */
    atomic_int stop;  /* ERRAND_STOP_* */
    /* Immutable after the fetch: strings in the same allocation, after this
     * struct (er_fetched_read). */
    const char *id, *queue, *name, *idem, *trace, *token;
    const char *payload, *json; /* JSON text as the server sent it */
    int attempt;
    long started;
    long job_timeout_ms; /* the job's own timeout_ms, 0 when absent */
    const char *created_at; /* "" when absent; read only for the log line */
    /* (mu) */
    int where;
    bool in_held, hb_busy, abandoned;
    struct errand_job *qnext;        /* local ready queue */
    struct errand_job *lprev, *lnext; /* held list: leased, no outcome yet */
    int64_t next_hb;                 /* monotonic ms */
    int64_t start_mono, deadline, abandon_at, start_wall;
    long timeout_used;
    /* The handler's outcome. */
    int oc;
    char *result; /* compact JSON text; NULL: no result */
    char *msg;
    long delay_ms;
};

struct errand_worker {
    /* Settings (immutable). */
    char *url, *token, *worker_id;
    char **queues;
    size_t nqueues;
    int *queue_weights; /* NULL: in order */
    int concurrency, max_started;
    int prefetch_fixed; /* ERRAND_PREFETCH_AUTO (-1): sized by prefetch.h; else 0..10000 */
    long lease_ms, timeout_ms, grace_ms, poll_wait_ms;
    errand_handler_fn handler;
    void *user;
    errand_log_fn log;
    void *log_user;
    errand_stop_fn on_stop;
    void *stop_user;

    int stop_pipe[2];
    atomic_int stop_requested;
    atomic_int stop_now;        /* errand_worker_stop_now: no grace period */
    bool ran, sync_ready;

    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_fetch, cv_timer, cv_ack, cv_idle;
    /* (mu) */
    errand_job *q_head, *q_tail;
    int nqueued, running;
    errand_job held; /* sentinel of the held list */
    er_ackq acks;    /* pending ack items */
    int64_t acks_since; /* monotonic ms when acks became non-empty */
    long acks_lost;     /* items dropped for lack of memory (their leases expire) */
    int fetch_parked;    /* fetches in a long poll */
    long fetch_reserved; /* jobs asked for by fetches in flight */
    bool drained;        /* the last fetch got fewer than it asked for */
    int prefetch;        /* jobs leased ahead of free threads now */
    double run_us, rtt_us; /* averages of handler runs and fetch round trips; -1: none yet */
    bool acker_force, stopping, handlers_exit, timer_exit, acker_exit;
    bool timer_sleeping;
    /* Who sleeps on which condition, so wake-ups go only where they matter. */
    int fetch_waiting, idle_handlers;
    bool ack_waiting;
    bool waking; /* a handler was signalled and has not woken yet */
    int64_t timer_wake;

    pthread_t *handlers;
    int nhandlers;
    pthread_t fetchers[ER_FETCHERS], timer, acker;
    int nfetchers;
    bool timer_started, acker_started;

    atomic_llong st_fetched, st_completed, st_failed, st_released, st_lease_lost, st_timed_out,
        st_fetches, st_acks_sent;
    atomic_int st_prefetch;
};

/* ---- shared helpers (worker.c) ---- */

/* Logs fields (taken) plus ts and level through the log callback. */
void er_worker_log(errand_worker *w, int level, json_t *fields);
/* Logs msg with the last error of client c. */
void er_worker_log_client_error(errand_worker *w, int level, const char *msg, errand_client *c);
/* A client of its own for a worker thread (returns owned, free with
 * errand_client_free; NULL on ENOMEM), total_ms its request timeout. */
errand_client *er_worker_thread_client(errand_worker *w, long total_ms);
/* Waits on cv (with mu held) until the monotonic time until_mono, in ms. */
void er_worker_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_mono);
/* The next retry delay after cur (0: the first), ER_WK_BACKOFF_MIN doubling
 * up to ER_WK_BACKOFF_MAX. */
int64_t er_worker_backoff_next(int64_t cur);

/* ---- the threads' bodies, started by errand_worker_run (arg: the worker) ---- */

void *er_worker_handler_main(void *arg); /* worker_job.c */
void *er_worker_fetcher_main(void *arg); /* worker_fetch.c */
void *er_worker_acker_main(void *arg);   /* worker_ack.c */
void *er_worker_timer_main(void *arg);   /* worker_timer.c */

/* ---- jobs, the held list and the ready queue ---- */

void er_job_unref(errand_job *j); /* worker_job.c */
/* worker_fetch.c: */
void er_held_remove_locked(errand_worker *w, errand_job *j);
/* Wakes the fetcher when it sleeps and a fetch is now due. */
void er_wake_fetcher_locked(errand_worker *w);
/* Wakes one idle handler when jobs wait and no wake-up is under way. */
void er_wake_handler_locked(errand_worker *w);
/* Records a measurement (run_ns of a handler, or rtt_ns of a fetch; -1:
 * none) and resizes an adaptive prefetch (prefetch.h). */
void er_prefetch_measure_locked(errand_worker *w, int64_t run_ns, int64_t rtt_ns);

/* ---- outcomes to the server (worker_ack.c) ---- */

/* Writes the ack item {"id","lease_token",kind: body} of j into b (reset
 * first); body is JSON text. */
void er_ack_item(const errand_job *j, const char *kind, const char *body, er_buf *b);
/* Queues the ack item text of b (copied) and wakes the acker if it is due. */
void er_push_ack_locked(errand_worker *w, const er_buf *b);
/* Puts acks that could not be sent back in front; takes acks. */
void er_restore_acks_locked(errand_worker *w, er_ackq *acks);
/* Logs the refused items of the results array `key` of a parsed reply. */
void er_check_ack_results(errand_worker *w, const er_jscan *js, const char *text, const char *key);
/* POST /v1/acks on c; returns 0, a transport error (retry), or 1 when the
 * server refused the whole request (do not retry). Takes acks on 0 and 1;
 * on an error leaves in acks those still to send. js and body are scratch. */
int er_send_acks(errand_worker *w, errand_client *c, er_ackq *acks, er_jscan *js, er_buf *body);

/* ---- a job's end (worker_job.c) ---- */

/* What is left to do for a finished job once the mutex is released. */
typedef struct er_finish {
    const char *outcome;
    int64_t dur;
    int64_t run_ns; /* the handler's run, for the prefetch rule */
    int stop;
    bool drop_list_ref;
} er_finish;

/* After the handler returned rc, without the mutex: turns its outcome into
 * an ack item in *item. */
void er_worker_outcome(errand_worker *w, errand_job *j, int rc, er_buf *item, er_finish *f);
/* (mu) Records the end of j: queues *item unless the job was stopped. */
void er_worker_finish_locked(errand_worker *w, errand_job *j, er_buf *item, er_finish *f);
/* Without the mutex: counters, the job's log line, and its references. */
void er_worker_finish_post(errand_worker *w, errand_job *j, const er_finish *f);
/* The handler outlived its timeout by the abandon window: fail the job as
 * transient now and ignore the handler's outcome. */
void er_worker_abandon_locked(errand_worker *w, errand_job *j);
/* A heartbeat found the lease gone: drops a queued job (returns 1), marks
 * a running one (returns 2; notify its handler), or returns 0 when the job
 * already had its outcome. */
int er_worker_lose_locked(errand_worker *w, errand_job *j);

#endif
