/* SPDX-License-Identifier: MIT
 *
 * The engine's threads and the loop side. The writer thread owns the write
 * connection: it takes every queued request (up to max_batch), runs them in
 * one transaction, commits once, and only then hands them back to the loop
 * (group commit). Long-poll fetches that found nothing stay parked in the
 * writer and are served inside whichever later transaction makes jobs ready
 * on their queues. The reader thread answers queries on its own connection.
 * Reads that wait for their job to finish are held by the loop side's
 * registry (waits.h), which the writer tells after each commit which jobs
 * it finished. Requests cross threads by ownership transfer through
 * mutex-protected lists; nothing else is shared but that registry.
 */
#include "engine/engine.h"
#include "engine/exec.h"
#include "engine/notify.h"
#include "engine/otlp.h"
#include "engine/qmetrics.h"
#include "engine/upkeep.h"
#include "engine/waits.h"
#include "util/clock.h"
#include "util/jsonw.h"
#include "util/log.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parked fetch is retried at least this often, covering readiness that
 * no transaction announces (a throttle or pause running out, a lost wake). */
#define REPOLL_MS 1000

typedef struct reqq {
    er_req *head, *tail;
    size_t len;
} reqq;

static void reqq_push(reqq *q, er_req *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    q->len++;
}

/* A worker thread (writer or reader) with its inbox. */
typedef struct worker {
    er_engine *e;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    reqq inbox;
    bool stop;
    bool draining;    /* writer: answer parked fetches, park no more (under mu) */
    bool writer;
    er_exec_ctx x;
    er_req *parked;   /* writer thread only: long-poll fetches waiting for jobs */
    er_wake ext_wake; /* writer: queues other nodes made ready (under mu) */
    bool ext_all;     /* writer: wake-ups may have been lost, retry every parked fetch (under mu) */
    bool leader;      /* writer thread only: holds the maintenance lease */
    bool poke;        /* writer: look at the parked fetches now (under mu) */
    bool upkeep_running; /* writer thread only: kicked, its run not yet finished here */
} worker;

struct er_engine {
    struct event_base *base;
    er_engine_config cfg;
    char *store_url;
    const er_store_ops *ops;
    worker writer, reader;

    pthread_mutex_t done_mu;
    er_req *done_head, *done_tail; /* answered requests for the loop */
    struct event *done_ev;

    /* submitted, not yet answered: counted before the draining check, so
     * a submitter on another thread either sees draining or is waited for */
    _Atomic size_t pending;
    _Atomic bool draining;
    bool ready;
    void (*on_drained)(void *);
    void *drained_arg;
    struct event *drained_ev;

    _Atomic uint64_t commits, commit_requests, commit_failures, promoted, reaped;
    _Atomic uint64_t parked, waiting;
    _Atomic bool leader;  /* the writer runs maintenance */
    er_notify *notify;    /* wake-ups from other nodes, when the store has them */
    er_waits *waits;      /* GET_JOB waits for a job's outcome */
    er_upkeep *upkeep;    /* the store's checkpoints, NULL when it has none */
    uint64_t refused_waits; /* loop thread */
    uint64_t enqueued, fetched, completed, failed, released, dead; /* loop thread */
    er_qmetrics *qm;
    er_otlp *otlp;        /* NULL when no span export */
    char **dispatch_queues; /* loop thread: queues HTTP dispatch delivers */
    size_t ndispatch;
    void (*on_settings)(void *, const char *, const er_queue_settings *);
    void *settings_arg;
};

static void check_drained(er_engine *e);

/* ---- worker threads ---------------------------------------------------- */

/* Hands a chain of answered requests back to the loop thread. */
static void post_batch(er_engine *e, er_req *reqs)
{
    er_req *last = reqs;
    while (last->next)
        last = last->next;
    pthread_mutex_lock(&e->done_mu);
    if (e->done_tail)
        e->done_tail->next = reqs;
    else
        e->done_head = reqs;
    e->done_tail = last;
    pthread_mutex_unlock(&e->done_mu);
    event_active(e->done_ev, EV_READ, 0);
}

static void fail_all(er_req *reqs, int rc, const er_error *cause)
{
    for (er_req *r = reqs; r; r = r->next) {
        r->rc = rc;
        if (cause && cause->code)
            r->err = *cause;
        else
            er_error_set(&r->err, rc, "", "the store failed; nothing was written");
        r->err.code = rc;
        /* outputs of a rolled-back transaction must not be reported */
        er_job_list_fini(&r->list);
        er_job_fini(&r->job);
        er_job_init(&r->job);
        for (size_t i = 0; i < r->nacks; i++)
            r->acks[i].rc = rc;
    }
}

static bool wants_queue(const er_req *r, const er_wake *w)
{
    for (size_t i = 0; i < r->fetch.nqueues; i++)
        for (size_t k = 0; k < w->len; k++)
            if (strcmp(r->fetch.queues[i], w->names[k]) == 0)
                return true;
    return false;
}

/* When a parked fetch looks again on its own: within REPOLL_MS, sooner when
 * a rate limit or throttle of its queues lets go before. */
static int64_t repoll_at(const er_req *r, int64_t now, int64_t mono)
{
    int64_t in = REPOLL_MS;
    if (r->ready_at != INT64_MAX && r->ready_at - now < in)
        in = r->ready_at > now ? r->ready_at - now : 1;
    return mono + in;
}

/* Leases jobs for parked fetches whose queues got ready jobs in this
 * transaction (or whose periodic retry is due). Served ones are flagged
 * `served` by a non-empty list. Returns 0 or a storage error. */
static int serve_parked(worker *w, int64_t now, int64_t mono)
{
    for (er_req *r = w->parked; r; r = r->next) {
        if (!wants_queue(r, &w->x.wake) && mono < r->repoll_mono)
            continue;
        int rc = er_exec_fetch_again(&w->x, r, now);
        if (rc < 0)
            return rc;
        r->repoll_mono = repoll_at(r, now, mono);
    }
    return 0;
}

/* Whether this node runs maintenance now: always without a lease op
 * (SQLite); else while the writer's connection holds the store's lease. */
static bool maintenance_leader(worker *w)
{
    er_engine *e = w->e;
    if (!e->ops->maintenance_lease) {
        atomic_store(&e->leader, true);
        return true;
    }
    er_error err;
    er_error_clear(&err);
    bool leader = false;
    if (e->ops->maintenance_lease(w->x.store, &leader, &err) < 0)
        ER_LOG(ER_LOG_DEBUG, NULL, "maintenance lease: %s", err.message);
    if (leader != w->leader)
        ER_LOG(ER_LOG_INFO, NULL, "%s", leader ? "maintenance leadership acquired"
                                               : "maintenance leadership lost");
    w->leader = leader;
    atomic_store(&e->leader, leader);
    return leader;
}

/* Logs a line about one attempt of a job with the fields of its story:
 * job_id, queue, name, attempt, trace_id (when it has one), duration_ms
 * (since the lease) and age_ms (since it became due), then `key`: `val`
 * (a string) and `key2`: `n` (a number) when given. Values are escaped. */
static void log_attempt(int level, const char *id, const er_ack_info *in, int64_t now,
                        const char *key, const char *val, const char *key2, int64_t n,
                        const char *msg)
{
    if (level < er_log_level)
        return;
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "job_id");
    er_jsonw_str(&w, id);
    er_jsonw_key(&w, "queue");
    er_jsonw_str(&w, in->queue);
    er_jsonw_key(&w, "name");
    er_jsonw_str(&w, in->name);
    er_jsonw_key(&w, "attempt");
    er_jsonw_int(&w, in->attempt);
    if (in->trace_id[0]) {
        er_jsonw_key(&w, "trace_id");
        er_jsonw_str(&w, in->trace_id);
    }
    if (in->started_at > 0) {
        er_jsonw_key(&w, "duration_ms");
        er_jsonw_int(&w, now - in->started_at);
    }
    if (in->run_at > 0) {
        er_jsonw_key(&w, "age_ms");
        er_jsonw_int(&w, now - in->run_at);
    }
    if (key) {
        er_jsonw_key(&w, key);
        er_jsonw_str(&w, val);
    }
    if (key2) {
        er_jsonw_key(&w, key2);
        er_jsonw_int(&w, n);
    }
    er_jsonw_end_object(&w);
    if (!w.failed && w.out.len >= 2) {
        w.out.data[w.out.len - 1] = '\0'; /* the members, without the braces */
        er_log_write(level, w.out.data + 1, "%s", msg);
    }
    er_jsonw_fini(&w);
}

/* One line per expired lease, and per job it sent to the dead letters. */
static void log_reaped(er_otlp *otlp, const er_job_list *l, int64_t now)
{
    for (size_t i = 0; i < l->len; i++) {
        const er_job *j = &l->items[i];
        er_ack_info info;
        er_ack_info_set(&info, j->queue, j->name, j->trace_id, j->attempts, j->run_at,
                        j->started_at);
        if (otlp)
            er_otlp_attempt(otlp, j->id, &info, now, "lease_expired", true);
        bool dead = j->state == ER_STATE_DEAD;
        log_attempt(ER_LOG_WARN, j->id, &info, now, "worker_id",
                    j->lease_owner ? j->lease_owner : "", "stalled", j->stalled + 1,
                    !dead ? "lease expired: job back to waiting"
                    : j->attempts >= j->max_attempts ? "job dead: lease expired on the last attempt"
                                                     : "job dead: lease expired and max_stalled reached");
    }
}

static void writer_batch(worker *w, er_req *reqs, bool maint, bool retention)
{
    er_engine *e = w->e;
    er_exec_ctx *x = &w->x;
    er_error err;
    er_error_clear(&err);
    if (maint && !maintenance_leader(w))
        maint = retention = false;
    int64_t now = er_now_ms(), mono = er_mono_ms();
    size_t n = 0;
    for (er_req *r = reqs; r; r = r->next)
        n++;
    bool draining, all;
    pthread_mutex_lock(&w->mu);
    draining = w->draining;
    /* other nodes' wake-ups count as this transaction's own */
    for (size_t i = 0; i < w->ext_wake.len; i++)
        er_wake_add(&x->wake, w->ext_wake.names[i], w->ext_wake.counts[i]);
    er_wake_fini(&w->ext_wake);
    all = w->ext_all;
    w->ext_all = w->poke = false;
    pthread_mutex_unlock(&w->mu);
    if (all)
        for (er_req *r = w->parked; r; r = r->next)
            r->repoll_mono = mono;

    /* answer parked fetches whose wait ran out (all of them when draining) */
    er_req *out = NULL, **out_tail = &out;
    for (er_req **pp = &w->parked; *pp;) {
        er_req *r = *pp;
        if (draining || mono >= r->deadline_mono || atomic_load(&r->abandoned)) {
            atomic_fetch_sub(&e->waiting, 1);
            *pp = r->next;
            r->next = NULL;
            *out_tail = r;
            out_tail = &r->next;
        } else {
            pp = &r->next;
        }
    }

    int rc = 0;
    if (reqs || maint || w->parked) {
        rc = e->ops->begin(x->store, &err);
        if (rc == 0 && maint)
            rc = er_exec_maintenance(x, now, retention, &err);
        /* runs of enqueues share one store call */
        for (er_req *r = reqs, *next; rc == 0 && r; r = next) {
            rc = er_exec_write_run(x, r, &next, now);
            if (rc < 0)
                err = r->err;
        }
        /* fetches of this batch that found nothing may still be served by
         * jobs this batch made ready */
        for (er_req *r = reqs; rc == 0 && x->wake.len && r; r = r->next)
            if (r->type == ER_REQ_FETCH && r->rc == 0 && r->list.len == 0 && r->fetch.wait_ms > 0 &&
                wants_queue(r, &x->wake))
                rc = er_exec_fetch_again(x, r, now);
        if (rc == 0 && w->parked)
            rc = serve_parked(w, now, mono);
        int64_t commit_ns = er_mono_ns();
        /* other nodes' waits hear of the jobs this transaction finished
         * with its commit (no round trip of its own) */
        if (rc == 0 && e->ops->finished && (x->done.n || x->done.all)) {
            rc = e->ops->finished(x->store, x->done.all ? NULL : x->done.v, x->done.n, &err);
            if (rc == ER_ENOMEM) /* "any job", which needs no memory, rather than a 503 */
                rc = e->ops->finished(x->store, NULL, 0, &err);
        }
        if (rc == 0)
            rc = e->ops->commit(x->store, &err);
        commit_ns = er_mono_ns() - commit_ns;
        if (rc < 0) {
            e->ops->rollback(x->store);
            atomic_fetch_add(&e->commit_failures, 1);
            ER_LOG(ER_LOG_ERROR, NULL, "commit of %zu requests failed: %s", n,
                   err.message[0] ? err.message : er_error_code_name(rc));
            fail_all(reqs, rc == ER_EFULL ? ER_EFULL : ER_EUNAVAIL, &err);
            /* parked fetches stay parked; what they leased was rolled back */
            for (er_req *r = w->parked; r; r = r->next)
                er_job_list_fini(&r->list);
        } else {
            atomic_fetch_add(&e->commits, 1);
            atomic_fetch_add(&e->commit_requests, n);
            atomic_fetch_add(&e->promoted, (uint64_t)x->promoted);
            atomic_fetch_add(&e->reaped, (uint64_t)x->reaped);
            log_reaped(e->otlp, &x->reaped_jobs, now);
            er_qm_count_reaped(e->qm, &x->reaped_jobs);
            er_qm_count_cron(e->qm, x->cron_ev, x->ncron_ev, x->cron_missed);
            er_qm_lock(e->qm);
            er_qm_store *ss = er_qm_store_stats(e->qm);
            er_qm_hist_add(&ss->commit, er_qm_bucket_bounds, (double)commit_ns / 1e9);
            er_qm_hist_add(&ss->batch, er_qm_batch_bounds, (double)n);
            er_qm_unlock(e->qm);
            /* after the commit: a wait registered before this look reads
             * again; one registered after it reads what was committed */
            if ((x->done.n || x->done.all) && er_waits_count(e->waits))
                er_waits_wake(e->waits, x->done.all ? NULL : x->done.v, x->done.n);
        }
        x->promoted = x->reaped = 0;
        er_job_list_fini(&x->reaped_jobs);
        x->ncron_ev = 0;
        x->cron_missed = 0;
    }
    er_wake_fini(&x->wake); /* served above, or for nobody parked here */
    er_keys_clear(&x->done);

    /* parked fetches that got jobs are answered now */
    for (er_req **pp = &w->parked; *pp;) {
        er_req *r = *pp;
        if (r->list.len) {
            atomic_fetch_sub(&e->waiting, 1);
            *pp = r->next;
            r->next = NULL;
            *out_tail = r;
            out_tail = &r->next;
        } else {
            pp = &r->next;
        }
    }
    /* committed fetches that found nothing and may wait are parked, at the
     * end: the longest-waiting fetcher is served first */
    er_req **park_tail = &w->parked;
    while (*park_tail)
        park_tail = &(*park_tail)->next;
    for (er_req *r = reqs, *next; r; r = next) {
        next = r->next;
        r->next = NULL;
        if (r->type == ER_REQ_FETCH && rc == 0) {
            r->acks_applied = true;
            if (r->rc == 0 && r->list.len == 0 && !draining && mono < r->deadline_mono &&
                !atomic_load(&r->abandoned)) {
                r->repoll_mono = repoll_at(r, now, mono);
                *park_tail = r;
                park_tail = &r->next;
                atomic_fetch_add(&e->parked, 1);
                atomic_fetch_add(&e->waiting, 1);
                continue;
            }
        }
        *out_tail = r;
        out_tail = &r->next;
    }
    if (out)
        post_batch(e, out);
    /* store upkeep (SQLite's checkpoint) on its own thread, off this path;
     * after each run, the little left is finished here (upkeep.h) */
    if (!e->upkeep) {
    } else if (w->upkeep_running) {
        if (er_upkeep_ran(e->upkeep)) {
            w->upkeep_running = false;
            if (e->ops->checkpoint(x->store, &err) < 0)
                ER_LOG(ER_LOG_WARN, NULL, "checkpoint: %s", err.message);
        }
    } else if (e->ops->checkpoint_due(x->store)) {
        w->upkeep_running = true;
        er_upkeep_kick(e->upkeep);
    }
}

/* When the writer must wake next: maintenance or a parked fetch's deadline
 * or retry. */
static int64_t writer_wake_at(const worker *w, int64_t next_maint)
{
    int64_t at = next_maint;
    for (const er_req *r = w->parked; r; r = r->next) {
        if (r->deadline_mono < at)
            at = r->deadline_mono;
        if (r->repoll_mono < at)
            at = r->repoll_mono;
    }
    return at;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    er_engine *e = w->e;
    pthread_setname_np(pthread_self(), w->writer ? "errand-writer" : "errand-reader");
    int64_t next_maint = er_mono_ms();
    int64_t next_retention = er_mono_ms() + e->cfg.retention_ms;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->inbox.head && !w->stop) {
            if (!w->writer) {
                pthread_cond_wait(&w->cv, &w->mu);
                continue;
            }
            int64_t now = er_mono_ms();
            int64_t wake_at = writer_wake_at(w, next_maint);
            if (now >= wake_at || (w->draining && w->parked) ||
                (w->parked && (w->ext_wake.len || w->ext_all || w->poke)))
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t wait = wake_at - now;
            ts.tv_sec += wait / 1000;
            ts.tv_nsec += (wait % 1000) * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        }
        if (w->stop && !w->inbox.head)
            break;
        /* take up to max_batch requests */
        er_req *reqs = w->inbox.head, *last = NULL;
        size_t n = 0;
        for (er_req *r = reqs; r && (int)n < e->cfg.max_batch; r = r->next) {
            last = r;
            n++;
        }
        if (last) {
            w->inbox.head = last->next;
            if (!w->inbox.head)
                w->inbox.tail = NULL;
            w->inbox.len -= n;
            last->next = NULL;
        }
        pthread_mutex_unlock(&w->mu);

        if (w->writer) {
            int64_t now = er_mono_ms();
            bool maint = now >= next_maint;
            bool retention = maint && now >= next_retention;
            if (maint)
                next_maint = now + e->cfg.maintenance_ms;
            if (retention)
                next_retention = now + e->cfg.retention_ms;
            writer_batch(w, reqs, maint, retention);
        } else {
            int64_t now = er_now_ms();
            for (er_req *r = reqs; r; r = r->next)
                er_exec_read(&w->x, r, now);
            if (reqs)
                post_batch(e, reqs);
        }
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int worker_start(er_engine *e, worker *w, bool writer, er_error *err)
{
    w->e = e;
    w->writer = writer;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    er_rand_init_system(&w->x.rand);
    er_job_defaults_server(&w->x.server_defaults);
    /* Ticks due before this server started were missed (their policy
     * applies); ticks due while it ran, even before it became the
     * maintenance leader, are on time, so a takeover loses none. */
    w->x.sched_since = er_now_ms();
    w->x.audit_retention_ms = e->cfg.audit_retention_ms;
    w->x.reply_max = e->cfg.store.reply_max ? e->cfg.store.reply_max : ER_REPLY_MAX_DEFAULT;
    w->x.payload_max =
        e->cfg.store.limits.payload_max ? e->cfg.store.limits.payload_max : ER_PAYLOAD_MAX_DEFAULT;
    w->x.ops = e->ops;
    int rc = e->ops->open(e->store_url, &e->cfg.store, &w->x.store, err);
    if (rc < 0)
        return rc;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
        e->ops->close(w->x.store);
        w->x.store = NULL;
        return er_error_set(err, ER_ENOMEM, "", "cannot start a thread");
    }
    w->started = true;
    return 0;
}

static void worker_push(worker *w, er_req *r)
{
    pthread_mutex_lock(&w->mu);
    reqq_push(&w->inbox, r);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void worker_stop(er_engine *e, worker *w)
{
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        w->started = false;
    }
    while (w->parked) {
        er_req *r = w->parked;
        w->parked = r->next;
        er_req_free(r);
    }
    if (w->x.store)
        e->ops->close(w->x.store);
    w->x.store = NULL;
    er_wake_fini(&w->x.wake);
    er_keys_fini(&w->x.done);
    er_exec_ctx_fini(&w->x);
    er_wake_fini(&w->ext_wake);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

/* ---- loop side --------------------------------------------------------- */

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

bool er_engine_is_dispatch_queue(const er_engine *e, const char *queue)
{
    for (size_t i = 0; i < e->ndispatch; i++)
        if (strcmp(e->dispatch_queues[i], queue) == 0)
            return true;
    return false;
}

int er_engine_set_dispatch_queues(er_engine *e, const char *const *names, size_t n)
{
    char **copy = n ? calloc(n, sizeof *copy) : NULL;
    if (n && !copy)
        return ER_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!(copy[i] = strdup(names[i]))) {
            free_names(copy, i);
            return ER_ENOMEM;
        }
    }
    free_names(e->dispatch_queues, e->ndispatch);
    e->dispatch_queues = copy;
    e->ndispatch = n;
    return 0;
}

/* One queue in or out of the set; out of memory leaves it for the next
 * discovery. */
static void set_dispatch_queue(er_engine *e, const char *queue, bool on)
{
    for (size_t i = 0; i < e->ndispatch; i++) {
        if (strcmp(e->dispatch_queues[i], queue) != 0)
            continue;
        if (!on) {
            free(e->dispatch_queues[i]);
            e->dispatch_queues[i] = e->dispatch_queues[--e->ndispatch];
        }
        return;
    }
    if (!on)
        return;
    char **grown = realloc(e->dispatch_queues, (e->ndispatch + 1) * sizeof *grown);
    if (!grown)
        return;
    e->dispatch_queues = grown;
    if ((grown[e->ndispatch] = strdup(queue)))
        e->ndispatch++;
}

void er_engine_on_settings(er_engine *e,
                           void (*fn)(void *arg, const char *queue, const er_queue_settings *s),
                           void *arg)
{
    e->on_settings = fn;
    e->settings_arg = arg;
}

/* A worker's fetch naming a dispatch queue: refused, naming it. */
static bool refuse_dispatch_fetch(er_engine *e, er_req *req)
{
    if (req->type != ER_REQ_FETCH || req->fetch.dispatcher || e->ndispatch == 0)
        return false;
    for (size_t i = 0; i < req->fetch.nqueues; i++) {
        if (!er_engine_is_dispatch_queue(e, req->fetch.queues[i]))
            continue;
        char field[32];
        snprintf(field, sizeof field, "queues[%zu]", i);
        req->rc = er_error_set(&req->err, ER_EINVAL, field,
                               "queue %s is delivered by HTTP dispatch (its settings have a "
                               "dispatch target): workers cannot fetch its jobs",
                               req->fetch.queues[i]);
        return true;
    }
    return false;
}

/* The dead-letter reason of a failure that sent its job there. */
static er_qm_counter dead_reason(const er_failure *f)
{
    switch (f->cls) {
    case ER_ERR_PERMANENT: return ER_QM_DEAD_PERMANENT;
    case ER_ERR_TRANSIENT: return ER_QM_DEAD_EXHAUSTED;
    default: return ER_QM_DEAD_MAX_STARTED; /* retry_later, throttled */
    }
}

static const char *dead_reason_text(er_qm_counter c)
{
    return c == ER_QM_DEAD_PERMANENT ? "permanent failure"
           : c == ER_QM_DEAD_EXHAUSTED ? "attempts exhausted"
                                       : "max_started reached";
}

/* Counts the acknowledgements of r per queue, and logs each job they sent
 * to the dead letters. Locked. */
static void count_acks(er_engine *e, const er_req *r, int64_t now)
{
    for (size_t i = 0; i < r->nacks; i++) {
        const er_ack *a = &r->acks[i];
        if (a->rc != 0)
            continue;
        bool dead = a->kind == ER_ACK_FAIL && a->outcome.state == ER_STATE_DEAD;
        e->completed += a->kind == ER_ACK_COMPLETE;
        e->failed += a->kind == ER_ACK_FAIL;
        e->dead += dead;
        e->released += a->kind == ER_ACK_RELEASE;
        if (!a->info.queue[0])
            continue; /* a release: the store does not say whose */
        if (e->otlp)
            er_otlp_attempt(e->otlp, a->id, &a->info, now,
                            a->kind == ER_ACK_COMPLETE ? "completed" : dead ? "dead" : "retried",
                            a->kind != ER_ACK_COMPLETE);
        er_qm_queue *q = er_qm_slot(e->qm, a->info.queue);
        if (a->kind == ER_ACK_COMPLETE) {
            q->c[ER_QM_COMPLETED]++;
            if (a->info.started_at > 0)
                er_qm_observe(q, ER_QM_RUN, (double)(now - a->info.started_at) / 1000.0);
        } else {
            q->c[ER_QM_FAILED]++;
            q->c[dead ? dead_reason(&a->failure) : ER_QM_RETRIED]++;
        }
        if (dead) {
            char msg[64];
            snprintf(msg, sizeof msg, "job dead: %s", dead_reason_text(dead_reason(&a->failure)));
            log_attempt(ER_LOG_WARN, a->id, &a->info, now, "error_class",
                        er_error_class_name(a->failure.cls), NULL, 0, msg);
        }
    }
}

/* A wait past max_waiters read its job once: finished, or not there, it is
 * answered as any read; else refused, to be retried. */
static void refuse_wait(er_engine *e, er_req *r)
{
    r->wait_over = false;
    if (r->rc != 0 || er_state_finished(r->job.state))
        return;
    e->refused_waits++;
    er_job_fini(&r->job);
    er_job_init(&r->job);
    r->wait_refused = true;
    if (e->cfg.max_waiters < 0)
        r->rc = er_error_set(&r->err, ER_EUNAVAIL, "wait_ms",
                             "this server does not wait for jobs (--max-waiters 0); retry "
                             "without wait_ms, or on another server");
    else
        r->rc = er_error_set(&r->err, ER_EUNAVAIL, "wait_ms",
                             "%d requests already wait for jobs on this server "
                             "(--max-waiters); retry later",
                             e->cfg.max_waiters);
}

static void finish(er_engine *e, er_req *r)
{
    if (r->wait_reg && !er_waits_settle(e->waits, r))
        return; /* still waiting: parked, or reading again */
    if (r->wait_over)
        refuse_wait(e, r);
    atomic_fetch_sub(&e->pending, 1);
    switch (r->type) {
    case ER_REQ_ENQUEUE:
        if (r->rc == 0) {
            er_qm_lock(e->qm);
            for (size_t i = 0; i < r->njobs; i++) {
                e->enqueued += !r->duplicate[i];
                if (!r->duplicate[i])
                    er_qm_slot(e->qm, r->jobs[i].queue)->c[ER_QM_ENQUEUED]++;
            }
            er_qm_unlock(e->qm);
        }
        break;
    case ER_REQ_FETCH:
    case ER_REQ_ACKS: {
        int64_t now = er_now_ms();
        e->fetched += r->list.len;
        er_qm_lock(e->qm);
        for (size_t i = 0; i < r->list.len; i++) {
            const er_job *j = &r->list.items[i];
            er_qm_queue *q = er_qm_slot(e->qm, j->queue);
            q->c[ER_QM_FETCHED]++;
            er_qm_observe(q, ER_QM_WAIT, (double)(j->started_at - j->run_at) / 1000.0);
        }
        count_acks(e, r, now);
        er_qm_unlock(e->qm);
        break;
    }
    case ER_REQ_REDRIVE: /* a redrive enqueues a copy of the dead job */
        if (r->rc == 0 && r->job.queue) {
            e->enqueued++;
            er_qm_lock(e->qm);
            er_qm_slot(e->qm, r->job.queue)->c[ER_QM_ENQUEUED]++;
            er_qm_unlock(e->qm);
        }
        break;
    case ER_REQ_PUT_QUEUE:
        if (r->rc == 0) {
            set_dispatch_queue(e, r->queue, r->settings->dispatch.on);
            if (e->on_settings)
                e->on_settings(e->settings_arg, r->queue, r->settings);
        }
        break;
    default:
        break;
    }
    r->done(r);
    check_drained(e);
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_engine *e = arg;
    pthread_mutex_lock(&e->done_mu);
    er_req *r = e->done_head;
    e->done_head = e->done_tail = NULL;
    pthread_mutex_unlock(&e->done_mu);
    while (r) {
        er_req *nr = r->next;
        r->next = NULL;
        finish(e, r);
        r = nr;
    }
}

static void drained_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_engine *e = arg;
    /* a request submitted from another thread since check_drained ran is
     * waited for: its finish() checks again */
    if (e->on_drained && atomic_load(&e->pending) == 0) {
        void (*cb)(void *) = e->on_drained;
        e->on_drained = NULL;
        cb(e->drained_arg);
    }
}

static void check_drained(er_engine *e)
{
    if (atomic_load(&e->draining) && atomic_load(&e->pending) == 0 && e->on_drained &&
        e->drained_ev)
        event_active(e->drained_ev, EV_TIMEOUT, 0);
}

/* ---- wake-ups from other nodes (listener thread) ----------------------- */

static void remote_ready(const char *queue, void *arg)
{
    worker *w = arg;
    pthread_mutex_lock(&w->mu);
    er_wake_add(&w->ext_wake, queue, ER_FETCH_MAX);
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void remote_all(void *arg)
{
    worker *w = arg;
    pthread_mutex_lock(&w->mu);
    w->ext_all = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    er_waits_wake(w->e->waits, NULL, 0);
}

static void remote_finished(const uint32_t *keys, size_t n, void *arg)
{
    worker *w = arg;
    er_waits_wake(w->e->waits, n ? keys : NULL, n);
}

/* ---- waits for a job's outcome (waits.h's callbacks, loop thread) ------ */

static void wait_read(er_req *r, void *arg)
{
    er_engine *e = arg;
    er_job_fini(&r->job);
    er_job_init(&r->job);
    r->rc = 0;
    er_error_clear(&r->err);
    worker_push(&e->reader, r); /* still counted in pending since its submit */
}

static void wait_answer(er_req *r, void *arg)
{
    finish(arg, r);
}

/* ---- public ------------------------------------------------------------ */

int er_engine_start(struct event_base *base, const er_engine_config *cfg, er_engine **out,
                    er_error *err)
{
    er_engine *e = calloc(1, sizeof *e);
    if (!e)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    e->base = base;
    e->cfg = *cfg;
    if (e->cfg.max_batch <= 0)
        e->cfg.max_batch = 512;
    if (e->cfg.maintenance_ms <= 0)
        e->cfg.maintenance_ms = 50;
    if (e->cfg.retention_ms <= 0)
        e->cfg.retention_ms = 10000;
    if (e->cfg.max_waiters == 0)
        e->cfg.max_waiters = ER_MAX_WAITERS_DEFAULT;
    if (e->cfg.max_waiters > ER_MAX_WAITERS_MAX)
        e->cfg.max_waiters = ER_MAX_WAITERS_MAX;
    if (e->cfg.audit_retention_ms <= 0)
        e->cfg.audit_retention_ms = ER_AUDIT_RETENTION_DEFAULT_MS;
    pthread_mutex_init(&e->done_mu, NULL);
    const char *rest = NULL;
    int rc = er_store_resolve(cfg->store_url, &e->ops, &rest, err);
    if (rc < 0)
        goto fail;
    e->qm = er_qm_new(cfg->metrics_max_queues ? cfg->metrics_max_queues : 1000);
    if (!e->qm) {
        rc = er_error_set(err, ER_EINVAL, "metrics_max_queues", "metrics_max_queues must be 1..%d",
                          ER_QM_MAX_QUEUES_MAX);
        goto fail;
    }
    e->cfg.otlp_endpoint = NULL;
    if (cfg->otlp_endpoint && (rc = er_otlp_start(cfg->otlp_endpoint, &e->otlp, err)) < 0)
        goto fail;
    e->store_url = strdup(rest);
    e->cfg.store_url = NULL;
    if (!e->store_url) {
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
        goto fail;
    }
    evthread_make_base_notifiable(base);
    e->done_ev = event_new(base, -1, 0, done_cb, e);
    e->drained_ev = event_new(base, -1, 0, drained_cb, e);
    if (!e->done_ev || !e->drained_ev) {
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
        goto fail;
    }
    er_waits_cbs wcbs = {.read = wait_read, .answer = wait_answer, .arg = e};
    if (er_waits_new(base, e->cfg.max_waiters > 0 ? (size_t)e->cfg.max_waiters : 0, &wcbs,
                     &e->waits) < 0) {
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
        goto fail;
    }
    rc = er_upkeep_start(e->ops, &e->upkeep, err);
    if (rc < 0)
        goto fail;
    /* the writer opens first: it creates and migrates the schema */
    rc = worker_start(e, &e->writer, true, err);
    if (rc < 0)
        goto fail;
    rc = worker_start(e, &e->reader, false, err);
    if (rc < 0)
        goto fail;
    if (e->upkeep && (rc = er_upkeep_open(e->upkeep, e->store_url, &e->cfg.store, err)) < 0)
        goto fail;
    if (e->ops->listener_open) {
        er_notify_cbs cbs = {.ready = remote_ready,
                             .finished = remote_finished,
                             .all = remote_all,
                             .arg = &e->writer};
        rc = er_notify_start(e->ops, e->store_url, &cbs, &e->notify, err);
        if (rc < 0)
            goto fail;
    }
    e->ready = true;
    *out = e;
    return 0;
fail:
    er_engine_free(e);
    return rc;
}

/* Counts req as pending and hands it to its worker; false (req answered
 * with ER_EUNAVAIL but not yet finished) once draining began. Any thread. */
static bool take(er_engine *e, er_req *req)
{
    atomic_fetch_add(&e->pending, 1);
    if (atomic_load(&e->draining)) {
        req->rc = er_error_set(&req->err, ER_EUNAVAIL, "", "the server is shutting down");
        return false;
    }
    if (req->type == ER_REQ_FETCH && req->deadline_mono == 0)
        req->deadline_mono = er_mono_ms() + req->fetch.wait_ms;
    worker_push(er_req_is_read(req) ? &e->reader : &e->writer, req);
    return true;
}

/* A GET_JOB that waits: registered before its first read, or (past
 * max_waiters) read once and refused unless finished; once waits stopped,
 * answered at once. */
static void submit_wait(er_engine *e, er_req *req)
{
    if (er_waits_stopped(e->waits)) {
        req->wait_ms = 0;
        return;
    }
    int rc = er_waits_add(e->waits, req);
    if (rc == ER_EUNAVAIL)
        req->wait_over = true;
    else if (rc < 0)
        req->wait_ms = 0; /* out of memory: as a plain read */
}

void er_engine_submit(er_engine *e, er_req *req)
{
    if (req->type == ER_REQ_GET_JOB && req->wait_ms > 0)
        submit_wait(e, req);
    if (refuse_dispatch_fetch(e, req)) {
        atomic_fetch_add(&e->pending, 1); /* finish() counts it out */
        finish(e, req);
        return;
    }
    if (!take(e, req))
        finish(e, req);
}

void er_engine_submit_from(er_engine *e, er_req *req)
{
    if (!take(e, req)) {
        req->next = NULL;
        post_batch(e, req); /* finished on the loop thread, like any answer */
    }
}

void er_engine_abandon(er_engine *e, er_req *req)
{
    atomic_store(&req->abandoned, true);
    if (req->type == ER_REQ_GET_JOB)
        er_waits_abandon(e->waits, req);
    if (req->type != ER_REQ_FETCH)
        return;
    /* a parked fetch is answered by the writer's next pass */
    pthread_mutex_lock(&e->writer.mu);
    e->writer.poke = true;
    pthread_cond_signal(&e->writer.cv);
    pthread_mutex_unlock(&e->writer.mu);
}

bool er_engine_ready(const er_engine *e)
{
    return e && e->ready && !atomic_load(&e->draining);
}

void er_engine_stop_waits(er_engine *e)
{
    er_waits_stop(e->waits);
}

void er_engine_drain(er_engine *e, void (*on_drained)(void *arg), void *arg)
{
    er_waits_stop(e->waits); /* answered through the reader, which still runs */
    e->on_drained = on_drained;
    e->drained_arg = arg;
    atomic_store(&e->draining, true);
    pthread_mutex_lock(&e->writer.mu);
    e->writer.draining = true; /* the writer answers its parked fetches */
    pthread_cond_signal(&e->writer.cv);
    pthread_mutex_unlock(&e->writer.mu);
    check_drained(e);
}

void er_engine_free(er_engine *e)
{
    if (!e)
        return;
    er_notify_stop(e->notify); /* it signals the writer: stopped first */
    worker_stop(e, &e->reader);
    worker_stop(e, &e->writer);
    er_upkeep_stop(e->upkeep); /* after the writer: it kicks */
    er_otlp_stop(e->otlp); /* after the writer: reaps may still add spans */
    er_waits_free(e->waits); /* before the done list: reads answered late are in it */
    if (e->ops && e->ops->release_idle)
        e->ops->release_idle();
    /* requests answered after the loop stopped are dropped */
    for (er_req *r = e->done_head; r;) {
        er_req *nr = r->next;
        er_req_free(r);
        r = nr;
    }
    if (e->done_ev)
        event_free(e->done_ev);
    if (e->drained_ev)
        event_free(e->drained_ev);
    pthread_mutex_destroy(&e->done_mu);
    free_names(e->dispatch_queues, e->ndispatch);
    er_qm_free(e->qm);
    free(e->store_url);
    free(e);
}

void er_engine_get_stats(const er_engine *e, er_engine_stats *out)
{
    memset(out, 0, sizeof *out);
    out->commits = atomic_load(&e->commits);
    out->commit_requests = atomic_load(&e->commit_requests);
    out->commit_failures = atomic_load(&e->commit_failures);
    out->enqueued = e->enqueued;
    out->fetched = e->fetched;
    out->completed = e->completed;
    out->failed = e->failed;
    out->released = e->released;
    out->promoted = atomic_load(&e->promoted);
    out->reaped = atomic_load(&e->reaped);
    out->dead = e->dead;
    out->parked_fetches = atomic_load(&e->parked);
    out->waiting_fetches = atomic_load(&e->waiting);
    if (e->waits) {
        er_waits_stats ws;
        er_waits_get_stats(e->waits, &ws);
        out->parked_waits = ws.parked;
        out->waiting_waits = ws.waiting;
    }
    out->refused_waits = e->refused_waits;
    out->maintenance_leader = atomic_load(&e->leader);
    out->store_connections = e->ops && e->ops->connections ? e->ops->connections() : -1;
}

er_qmetrics *er_engine_qmetrics(er_engine *e)
{
    return e->qm;
}

er_otlp *er_engine_otlp(er_engine *e)
{
    return e->otlp;
}
