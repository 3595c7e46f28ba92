/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's internals, shared by worker.c (threads, fetching,
 * heartbeats) and worker_job.c (job accessors, outcomes, shutdown). Not
 * installed. Fields marked (mu) are guarded by the worker's mutex; the
 * outcome fields of a job belong to its handler thread until it returns.
 */
#ifndef ER_CLIENT_WORKER_INT_H
#define ER_CLIENT_WORKER_INT_H

#include "client/client_int.h"
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

enum { ER_JOB_QUEUED = 1, ER_JOB_RUNNING = 2, ER_JOB_DONE = 3 };

/* Handler outcomes (errand_job_complete and friends). */
enum { ER_OC_NONE = 0, ER_OC_COMPLETE, ER_OC_TRANSIENT, ER_OC_PERMANENT, ER_OC_RETRY_LATER,
       ER_OC_THROTTLED };

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
    int concurrency, prefetch, max_started;
    long lease_ms, timeout_ms, grace_ms, poll_wait_ms;
    errand_handler_fn handler;
    void *user;
    errand_log_fn log;
    void *log_user;
    errand_stop_fn on_stop;
    void *stop_user;

    int stop_pipe[2];
    atomic_int stop_requested;
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
};

/* Logs fields (taken) plus ts and level through the log callback. */
void er_worker_log(errand_worker *w, int level, json_t *fields);

void er_job_unref(errand_job *j);
void er_held_remove_locked(errand_worker *w, errand_job *j);
/* Writes the ack item {"id","lease_token",kind: body} of j into b (reset
 * first); body is JSON text. */
void er_ack_item(const errand_job *j, const char *kind, const char *body, er_buf *b);
/* Queues the ack item text of b (copied) and wakes the acker if it is due. */
void er_push_ack_locked(errand_worker *w, const er_buf *b);
/* Wakes the fetcher when it sleeps and a fetch is now due. */
void er_wake_fetcher_locked(errand_worker *w);

/* What is left to do for a finished job once the mutex is released. */
typedef struct er_finish {
    const char *outcome;
    int64_t dur;
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
/* The graceful stop sequence of run(). */
void er_worker_shutdown(errand_worker *w);

#endif
