/* SPDX-License-Identifier: MIT
 *
 * The engine's threads and the loop side. The writer thread owns the write
 * connection: it takes every queued request (up to max_batch), runs them in
 * one transaction, commits once, and only then hands them back to the loop
 * (group commit). The reader thread answers queries on its own connection.
 * The loop side parks long-poll fetches and resubmits them when a commit
 * made jobs ready on their queues. Requests cross threads by ownership
 * transfer through mutex-protected lists; nothing else is shared.
 */
#include "engine/engine.h"
#include "engine/exec.h"
#include "util/clock.h"
#include "util/log.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A parked fetch re-polls at least this often, covering wake-ups that went
 * to another fetcher which then took jobs from a different queue. */
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
    bool writer;
    er_exec_ctx x;
} worker;

/* A finished batch handed back to the loop. */
typedef struct batch {
    er_req *reqs;
    er_wake wake;
    struct batch *next;
} batch;

struct er_engine {
    struct event_base *base;
    er_engine_config cfg;
    char *store_url;
    const er_store_ops *ops;
    worker writer, reader;

    pthread_mutex_t done_mu;
    batch *done_head, *done_tail;
    struct event *done_ev;

    er_req *parked_head; /* loop thread only */
    size_t pending;      /* submitted, not yet answered; loop thread only */
    bool ready, draining;
    void (*on_drained)(void *);
    void *drained_arg;
    struct event *drained_ev;

    _Atomic uint64_t commits, commit_requests, commit_failures;
    uint64_t enqueued, fetched, completed, failed, released, parked; /* loop thread */
};

static void deliver(er_engine *e, er_req *r);
static void check_drained(er_engine *e);

/* ---- worker threads ---------------------------------------------------- */

static void post_batch(er_engine *e, er_req *reqs, er_wake *wake)
{
    batch *b = calloc(1, sizeof *b);
    if (!b) {
        /* Cannot hand back: answer nothing would leak clients; spin until memory. */
        while (!(b = calloc(1, sizeof *b)))
            ;
    }
    b->reqs = reqs;
    if (wake) {
        b->wake = *wake;
        memset(wake, 0, sizeof *wake);
    }
    pthread_mutex_lock(&e->done_mu);
    if (e->done_tail)
        e->done_tail->next = b;
    else
        e->done_head = b;
    e->done_tail = b;
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

static void writer_batch(worker *w, er_req *reqs, bool maint, bool retention)
{
    er_engine *e = w->e;
    er_exec_ctx *x = &w->x;
    er_error err;
    er_error_clear(&err);
    int64_t now = er_now_ms();
    size_t n = 0;
    for (er_req *r = reqs; r; r = r->next)
        n++;
    int rc = e->ops->begin(x->store, &err);
    if (rc == 0 && maint)
        rc = er_exec_maintenance(x, now, retention);
    for (er_req *r = reqs; rc == 0 && r; r = r->next) {
        rc = er_exec_write(x, r, now);
        if (rc < 0)
            err = r->err;
    }
    if (rc == 0)
        rc = e->ops->commit(x->store, &err);
    if (rc < 0) {
        e->ops->rollback(x->store);
        atomic_fetch_add(&e->commit_failures, 1);
        er_wake_fini(&x->wake);
        ER_LOG(ER_LOG_ERROR, NULL, "commit of %zu requests failed: %s", n, err.message);
        fail_all(reqs, rc == ER_EFULL ? ER_EFULL : ER_EUNAVAIL, &err);
    } else {
        atomic_fetch_add(&e->commits, 1);
        atomic_fetch_add(&e->commit_requests, n);
        for (er_req *r = reqs; r; r = r->next)
            if (r->type == ER_REQ_FETCH)
                r->acks_applied = true;
    }
    if (reqs || x->wake.len)
        post_batch(e, reqs, &x->wake);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    er_engine *e = w->e;
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
            if (now >= next_maint)
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t wait = next_maint - now;
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
            if (reqs || maint)
                writer_batch(w, reqs, maint, retention);
        } else {
            int64_t now = er_now_ms();
            for (er_req *r = reqs; r; r = r->next)
                er_exec_read(&w->x, r, now);
            post_batch(e, reqs, NULL);
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
    if (w->x.store)
        e->ops->close(w->x.store);
    w->x.store = NULL;
    er_wake_fini(&w->x.wake);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}

/* ---- loop side --------------------------------------------------------- */

static void unpark(er_engine *e, er_req *r)
{
    if (r->park_prev)
        r->park_prev->park_next = r->park_next;
    else
        e->parked_head = r->park_next;
    if (r->park_next)
        r->park_next->park_prev = r->park_prev;
    r->park_prev = r->park_next = NULL;
    r->parked = false;
    if (r->timer) {
        event_free(r->timer);
        r->timer = NULL;
    }
}

static void finish(er_engine *e, er_req *r)
{
    e->pending--;
    switch (r->type) {
    case ER_REQ_ENQUEUE:
        if (r->rc == 0)
            for (size_t i = 0; i < r->njobs; i++)
                e->enqueued += !r->duplicate[i];
        break;
    case ER_REQ_FETCH:
    case ER_REQ_ACKS:
        e->fetched += r->list.len;
        for (size_t i = 0; i < r->nacks; i++) {
            if (r->acks[i].rc != 0)
                continue;
            e->completed += r->acks[i].kind == ER_ACK_COMPLETE;
            e->failed += r->acks[i].kind == ER_ACK_FAIL;
            e->released += r->acks[i].kind == ER_ACK_RELEASE;
        }
        break;
    default:
        break;
    }
    r->done(r);
    check_drained(e);
}

static void resubmit(er_engine *e, er_req *r)
{
    unpark(e, r);
    e->pending--; /* er_engine_submit counts it again */
    er_engine_submit(e, r);
}

static void park_fire(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_req *r = arg;
    er_engine *e = r->owner;
    if (er_mono_ms() >= r->deadline_mono || e->draining) {
        unpark(e, r);
        finish(e, r);
    } else {
        resubmit(e, r);
    }
}

static void park(er_engine *e, er_req *r)
{
    int64_t now = er_mono_ms();
    int64_t wait = r->deadline_mono - now;
    if (wait > REPOLL_MS)
        wait = REPOLL_MS;
    if (wait < 0)
        wait = 0;
    r->timer = evtimer_new(e->base, park_fire, r);
    if (!r->timer) {
        finish(e, r); /* answer empty rather than hold it without a timer */
        return;
    }
    struct timeval tv = {.tv_sec = wait / 1000, .tv_usec = (wait % 1000) * 1000};
    evtimer_add(r->timer, &tv);
    r->parked = true;
    r->park_prev = NULL;
    r->park_next = e->parked_head;
    if (e->parked_head)
        e->parked_head->park_prev = r;
    e->parked_head = r;
    e->parked++;
}

static bool wants_queue(const er_req *r, const char *q)
{
    for (size_t i = 0; i < r->nqueues; i++)
        if (strcmp(r->queues[i], q) == 0)
            return true;
    return false;
}

/* Wakes parked fetchers of each queue until their capacity covers the jobs
 * that became ready there. Oldest parked first. */
static void wake(er_engine *e, const er_wake *w)
{
    for (size_t i = 0; i < w->len; i++) {
        int left = w->counts[i];
        er_req *oldest = e->parked_head;
        while (oldest && oldest->park_next)
            oldest = oldest->park_next;
        for (er_req *r = oldest; r && left > 0;) {
            er_req *prev = r->park_prev;
            if (wants_queue(r, w->names[i])) {
                left -= r->max;
                resubmit(e, r);
            }
            r = prev;
        }
    }
}

static void deliver(er_engine *e, er_req *r)
{
    if (r->type == ER_REQ_FETCH && r->rc == 0 && r->list.len == 0 && !e->draining &&
        er_mono_ms() < r->deadline_mono) {
        park(e, r);
        return;
    }
    finish(e, r);
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_engine *e = arg;
    pthread_mutex_lock(&e->done_mu);
    batch *b = e->done_head;
    e->done_head = e->done_tail = NULL;
    pthread_mutex_unlock(&e->done_mu);
    while (b) {
        batch *nb = b->next;
        /* answer first, then wake: a woken fetch joins the next commit */
        er_req *r = b->reqs;
        while (r) {
            er_req *nr = r->next;
            r->next = NULL;
            deliver(e, r);
            r = nr;
        }
        if (b->wake.len)
            wake(e, &b->wake);
        er_wake_fini(&b->wake);
        free(b);
        b = nb;
    }
}

static void drained_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_engine *e = arg;
    if (e->on_drained) {
        void (*cb)(void *) = e->on_drained;
        e->on_drained = NULL;
        cb(e->drained_arg);
    }
}

static void check_drained(er_engine *e)
{
    if (e->draining && e->pending == 0 && e->on_drained && e->drained_ev)
        event_active(e->drained_ev, EV_TIMEOUT, 0);
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
    pthread_mutex_init(&e->done_mu, NULL);
    const char *rest = NULL;
    int rc = er_store_resolve(cfg->store_url, &e->ops, &rest, err);
    if (rc < 0)
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
    /* the writer opens first: it creates and migrates the schema */
    rc = worker_start(e, &e->writer, true, err);
    if (rc < 0)
        goto fail;
    rc = worker_start(e, &e->reader, false, err);
    if (rc < 0)
        goto fail;
    e->ready = true;
    *out = e;
    return 0;
fail:
    er_engine_free(e);
    return rc;
}

void er_engine_submit(er_engine *e, er_req *req)
{
    req->owner = e;
    e->pending++;
    if (e->draining && !(req->type == ER_REQ_FETCH && req->acks_applied)) {
        req->rc = er_error_set(&req->err, ER_EUNAVAIL, "", "the server is shutting down");
        finish(e, req);
        return;
    }
    if (req->type == ER_REQ_FETCH && req->deadline_mono == 0)
        req->deadline_mono = er_mono_ms() + req->wait_ms;
    worker_push(er_req_is_read(req) ? &e->reader : &e->writer, req);
}

bool er_engine_ready(const er_engine *e)
{
    return e && e->ready && !e->draining;
}

void er_engine_drain(er_engine *e, void (*on_drained)(void *arg), void *arg)
{
    e->draining = true;
    e->on_drained = on_drained;
    e->drained_arg = arg;
    while (e->parked_head) {
        er_req *r = e->parked_head;
        unpark(e, r);
        finish(e, r);
    }
    check_drained(e);
}

void er_engine_free(er_engine *e)
{
    if (!e)
        return;
    worker_stop(e, &e->reader);
    worker_stop(e, &e->writer);
    /* answer nothing further: batches still queued are dropped with their requests */
    batch *b = e->done_head;
    while (b) {
        batch *nb = b->next;
        for (er_req *r = b->reqs; r;) {
            er_req *nr = r->next;
            er_req_free(r);
            r = nr;
        }
        er_wake_fini(&b->wake);
        free(b);
        b = nb;
    }
    while (e->parked_head) {
        er_req *r = e->parked_head;
        unpark(e, r);
        er_req_free(r);
    }
    if (e->done_ev)
        event_free(e->done_ev);
    if (e->drained_ev)
        event_free(e->drained_ev);
    pthread_mutex_destroy(&e->done_mu);
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
    out->parked_fetches = e->parked;
}
