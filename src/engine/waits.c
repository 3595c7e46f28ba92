/* SPDX-License-Identifier: MIT
 *
 * The registry of waits for a job's outcome (waits.h): a hash table of
 * requests by job key under one mutex (the loop thread adds, settles and
 * removes; the writer and the wake-up listener only mark), a list of woken
 * waits handed to the loop through one event, and a deadline timer per
 * parked wait. It owns no thread and runs no store call: reads go back to
 * the engine through its callbacks.
 */
#include "engine/waits.h"
#include "util/buf.h"
#include "util/clock.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

/* er_req.wstate, under the registry's mutex */
enum { W_READING, W_PARKED, W_WOKEN };

#define BUCKETS_MIN 64

struct er_waits {
    pthread_mutex_t mu;
    er_req **buckets; /* chains through wnext, nbuckets a power of two */
    size_t nbuckets;
    _Atomic size_t count; /* registered; changed under mu, read anywhere */
    er_req *woken;        /* marked by er_waits_wake or abandon, for wake_cb (under mu) */
    bool all;             /* wake_cb: every wait reads again (under mu) */
    size_t max;
    bool stopped; /* loop thread */
    struct event_base *base;
    struct event *wake_ev;
    er_waits_cbs cbs;
    uint64_t parked; /* loop thread */
};

uint32_t er_wait_key(const char *id)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    return h;
}

void er_keys_add(er_keys *k, const char *id)
{
    if (k->all)
        return;
    if (ER_GROW(&k->v, &k->cap, k->n + 1, ER_LIST_MAX) < 0) {
        k->all = true; /* a lost key would leave a wait to its deadline */
        return;
    }
    k->v[k->n++] = er_wait_key(id);
}

void er_keys_clear(er_keys *k)
{
    k->n = 0;
    k->all = false;
}

void er_keys_fini(er_keys *k)
{
    free(k->v);
    memset(k, 0, sizeof *k);
}

/* The bucket of a key: its bits mixed (murmur3's finalizer), FNV's low
 * bits being the weakest. */
static size_t bucket_of(const er_waits *w, uint32_t key)
{
    key ^= key >> 16;
    key *= 0x85ebca6bu;
    key ^= key >> 13;
    key *= 0xc2b2ae35u;
    key ^= key >> 16;
    return key & (w->nbuckets - 1);
}

/* Doubles the table; on ENOMEM keeps it (longer chains). Under mu. */
static void grow_locked(er_waits *w)
{
    size_t n = w->nbuckets * 2;
    er_req **b = calloc(n, sizeof *b);
    if (!b)
        return;
    er_req **old = w->buckets;
    size_t on = w->nbuckets;
    w->buckets = b;
    w->nbuckets = n;
    for (size_t i = 0; i < on; i++) {
        for (er_req *r = old[i], *next; r; r = next) {
            next = r->wnext;
            size_t k = bucket_of(w, r->wkey);
            r->wnext = b[k];
            b[k] = r;
        }
    }
    free(old);
}

static void unlink_locked(er_waits *w, er_req *r)
{
    for (er_req **pp = &w->buckets[bucket_of(w, r->wkey)]; *pp; pp = &(*pp)->wnext) {
        if (*pp == r) {
            *pp = r->wnext;
            r->wnext = NULL;
            atomic_fetch_sub(&w->count, 1);
            return;
        }
    }
}

/* Marks r woken: one being read reads again when its read is back; a
 * parked one goes to the woken list. True when wake_cb must run. Under mu. */
static bool mark_locked(er_waits *w, er_req *r)
{
    switch (r->wstate) {
    case W_READING: r->wrecheck = true; return false;
    case W_PARKED:
        r->wstate = W_WOKEN;
        r->wwoken = w->woken;
        w->woken = r;
        return true;
    default: return false;
    }
}

/* Ends r's time with the registry (r is unregistered). Loop thread. */
static void release(er_req *r)
{
    if (r->wtimer) {
        event_free(r->wtimer);
        r->wtimer = NULL;
    }
    r->wait_reg = false;
}

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_waits *w = arg;
    er_req *read = NULL, *gone = NULL; /* lists through wwoken */
    pthread_mutex_lock(&w->mu);
    if (w->all) {
        w->all = false;
        for (size_t i = 0; i < w->nbuckets; i++)
            for (er_req *r = w->buckets[i]; r; r = r->wnext)
                mark_locked(w, r);
    }
    er_req *r = w->woken;
    w->woken = NULL;
    while (r) {
        er_req *next = r->wwoken;
        r->wwoken = NULL;
        if (r->wstate == W_WOKEN) {
            if (atomic_load(&r->abandoned)) {
                unlink_locked(w, r); /* nobody reads the answer: no read */
                r->wwoken = gone;
                gone = r;
            } else {
                r->wstate = W_READING;
                r->wwoken = read;
                read = r;
            }
        }
        r = next;
    }
    pthread_mutex_unlock(&w->mu);
    for (er_req *q = read, *next; q; q = next) {
        next = q->wwoken;
        q->wwoken = NULL;
        w->cbs.read(q, w->cbs.arg);
    }
    for (er_req *q = gone, *next; q; q = next) {
        next = q->wwoken;
        q->wwoken = NULL;
        release(q);
        w->cbs.answer(q, w->cbs.arg);
    }
}

/* Arms r's timer for what is left of its wait, rounded up to a microsecond.
 * Returns -1 if the timer could not be added. */
static int arm_left(er_req *r)
{
    int64_t left_us = (r->deadline_mono * 1000000 - er_mono_ns() + 999) / 1000;
    if (left_us < 0)
        left_us = 0;
    struct timeval tv = {(time_t)(left_us / 1000000), (suseconds_t)(left_us % 1000000)};
    return evtimer_add(r->wtimer, &tv);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_req *r = arg;
    er_waits *w = r->wowner;
    /* libevent measures from the time it cached before this loop turn, so
     * a timer can fire a little early: never answer before the deadline */
    if (er_mono_ns() < r->deadline_mono * 1000000 && arm_left(r) == 0)
        return;
    pthread_mutex_lock(&w->mu);
    r->wexpired = true;
    bool parked = r->wstate == W_PARKED;
    if (parked)
        r->wstate = W_READING; /* the job as it is now */
    pthread_mutex_unlock(&w->mu);
    if (parked)
        w->cbs.read(r, w->cbs.arg);
}

int er_waits_new(struct event_base *base, size_t max, const er_waits_cbs *cbs, er_waits **out)
{
    *out = NULL;
    er_waits *w = calloc(1, sizeof *w);
    if (!w)
        return ER_ENOMEM;
    w->buckets = calloc(BUCKETS_MIN, sizeof *w->buckets);
    w->nbuckets = BUCKETS_MIN;
    w->wake_ev = event_new(base, -1, 0, wake_cb, w);
    if (!w->buckets || !w->wake_ev) {
        if (w->wake_ev)
            event_free(w->wake_ev);
        free(w->buckets);
        free(w);
        return ER_ENOMEM;
    }
    pthread_mutex_init(&w->mu, NULL);
    w->base = base;
    w->max = max;
    w->cbs = *cbs;
    *out = w;
    return 0;
}

void er_waits_free(er_waits *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nbuckets; i++) {
        for (er_req *r = w->buckets[i], *next; r; r = next) {
            next = r->wnext;
            r->wnext = r->wwoken = NULL;
            bool held = r->wstate != W_READING; /* else the done list has it */
            release(r);
            if (held)
                er_req_free(r);
        }
    }
    event_free(w->wake_ev);
    pthread_mutex_destroy(&w->mu);
    free(w->buckets);
    free(w);
}

int er_waits_add(er_waits *w, er_req *r)
{
    if (atomic_load(&w->count) >= w->max)
        return ER_EUNAVAIL;
    r->wtimer = evtimer_new(w->base, timer_cb, r);
    if (!r->wtimer)
        return ER_ENOMEM;
    r->wowner = w;
    r->wkey = er_wait_key(r->id);
    r->wstate = W_READING;
    r->wrecheck = r->wexpired = r->warmed = false;
    r->wwoken = NULL;
    /* whole milliseconds, rounded up: never before wait_ms has passed */
    r->deadline_mono = (er_mono_ns() + 999999) / 1000000 + r->wait_ms;
    r->wait_reg = true;
    pthread_mutex_lock(&w->mu);
    if (atomic_load(&w->count) >= w->nbuckets)
        grow_locked(w);
    size_t k = bucket_of(w, r->wkey);
    r->wnext = w->buckets[k];
    w->buckets[k] = r;
    atomic_fetch_add(&w->count, 1); /* before the first read begins */
    pthread_mutex_unlock(&w->mu);
    return 0;
}

bool er_waits_settle(er_waits *w, er_req *r)
{
    bool done =
        r->rc != 0 || er_state_finished(r->job.state) || atomic_load(&r->abandoned) || w->stopped;
    pthread_mutex_lock(&w->mu);
    done = done || r->wexpired;
    if (done) {
        unlink_locked(w, r);
    } else if (r->wrecheck) {
        r->wrecheck = false; /* finished after this read began, perhaps */
    } else {
        r->wstate = W_PARKED;
    }
    bool parked = !done && r->wstate == W_PARKED;
    pthread_mutex_unlock(&w->mu);
    if (done) {
        release(r);
        return true;
    }
    if (!parked) {
        w->cbs.read(r, w->cbs.arg);
        return false;
    }
    if (!r->warmed) {
        r->warmed = true;
        w->parked++;
        /* no timer, no wait: answered now, as if it ran out */
        if (arm_left(r) < 0)
            event_active(r->wtimer, EV_TIMEOUT, 0);
    }
    return false;
}

void er_waits_abandon(er_waits *w, er_req *r)
{
    if (!r->wait_reg)
        return;
    pthread_mutex_lock(&w->mu);
    bool wake = mark_locked(w, r); /* wake_cb answers it without a read */
    pthread_mutex_unlock(&w->mu);
    if (wake)
        event_active(w->wake_ev, EV_READ, 0);
}

void er_waits_stop(er_waits *w)
{
    if (w->stopped)
        return;
    w->stopped = true; /* settle answers every wait from now on */
    pthread_mutex_lock(&w->mu);
    w->all = true;
    pthread_mutex_unlock(&w->mu);
    event_active(w->wake_ev, EV_READ, 0);
}

bool er_waits_stopped(const er_waits *w)
{
    return w->stopped;
}

void er_waits_wake(er_waits *w, const uint32_t *keys, size_t n)
{
    if (atomic_load(&w->count) == 0)
        return;
    bool wake = false;
    pthread_mutex_lock(&w->mu);
    if (!keys) {
        wake = !w->all;
        w->all = true;
    } else {
        for (size_t i = 0; i < n; i++)
            for (er_req *r = w->buckets[bucket_of(w, keys[i])]; r; r = r->wnext)
                if (r->wkey == keys[i])
                    wake |= mark_locked(w, r);
    }
    pthread_mutex_unlock(&w->mu);
    if (wake)
        event_active(w->wake_ev, EV_READ, 0);
}

size_t er_waits_count(const er_waits *w)
{
    return atomic_load(&w->count);
}

void er_waits_get_stats(const er_waits *w, er_waits_stats *out)
{
    memset(out, 0, sizeof *out);
    out->parked = w->parked;
    out->waiting = atomic_load(&w->count);
}
