/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's fetcher threads (two, each on its own connection):
 * they keep up to concurrency + prefetch jobs leased, counting what fetches
 * in flight asked for, carry pending outcomes on their fetches, time each
 * round trip for the prefetch rule (prefetch.h), read the leased jobs of a
 * reply as text (fetched.h) and hand them to the handlers' ready queue and
 * the held list. Jobs fetched after a stop are released at
 * once. No network call is made with the mutex held.
 */
#include "client/worker_int.h"
#include "util/clock.h"
#include "util/jsonw.h"

#include <stdlib.h>
#include <string.h>

#define MAX_FETCH 1000    /* the API's fetch max */

/* ---- jobs --------------------------------------------------------------- */

/* A job from the leased job object at token obj of a fetch reply (copied);
 * NULL when it is not an object, lacks id or token, or memory ran out. */
static errand_job *job_read(errand_worker *w, const char *text, const er_jscan *js, long obj,
                            int64_t now)
{
    er_fetched f;
    errand_job *j = er_fetched_read(text, js, obj, sizeof *j, &f);
    if (!j)
        return NULL;
    atomic_init(&j->refs, 1);
    atomic_init(&j->stop, 0);
    j->w = w;
    j->id = f.id;
    j->token = f.token;
    j->queue = f.queue;
    j->name = f.name;
    j->idem = f.idem;
    j->trace = f.trace;
    j->payload = f.payload;
    j->json = f.json;
    j->attempt = (int)f.attempt;
    j->started = (long)f.started;
    j->job_timeout_ms = (long)f.timeout_ms;
    j->created_at = f.created_at;
    j->next_hb = now + w->lease_ms / 3;
    return j;
}

static void held_add_locked(errand_worker *w, errand_job *j)
{
    j->lprev = w->held.lprev;
    j->lnext = &w->held;
    w->held.lprev->lnext = j;
    w->held.lprev = j;
    j->in_held = true;
}

void er_held_remove_locked(errand_worker *w, errand_job *j)
{
    (void)w;
    if (!j->in_held)
        return;
    j->lprev->lnext = j->lnext;
    j->lnext->lprev = j->lprev;
    j->lprev = j->lnext = NULL;
    j->in_held = false;
}

/* Room for more leased jobs, and whether a fetch is due (locked): half of
 * concurrency + prefetch is free (not running, queued, or asked for by a
 * fetch in flight), so with two fetchers one batch is on its way while the
 * other half runs; or a thread is free, nothing is queued and no fetch is on
 * its way. */
static long fetch_room_locked(errand_worker *w)
{
    return (long)w->concurrency + w->prefetch - w->nqueued - w->running - w->fetch_reserved;
}

static bool fetch_due_locked(errand_worker *w)
{
    long total = (long)w->concurrency + w->prefetch, room = fetch_room_locked(w);
    long low = total / 2 > 0 ? total / 2 : 1;
    return room > 0 && (room >= low || (w->nqueued == 0 && w->fetch_reserved == 0));
}

void er_wake_fetcher_locked(errand_worker *w)
{
    if (w->fetch_waiting > 0 && fetch_due_locked(w))
        pthread_cond_signal(&w->cv_fetch);
}

/* ---- the fetcher threads --------------------------------------------- */

/* Releases the jobs of a list (linked by qnext) at once through the acker;
 * used for jobs fetched after a stop. */
static void release_now(errand_worker *w, errand_job *list)
{
    er_ackq rel = {0};
    er_buf b;
    er_buf_init(&b, ER_WK_BODY_MAX);
    long lost = 0;
    size_t n = 0;
    while (list) {
        errand_job *next = list->qnext;
        er_ack_item(list, "release", "{}", &b);
        if (b.err || er_ackq_push(&rel, b.data, b.len) < 0)
            lost++;
        n++;
        er_job_unref(list);
        list = next;
    }
    er_buf_fini(&b);
    if (n == 0)
        return;
    atomic_fetch_add(&w->st_released, (long long)n);
    er_worker_log(w, ERRAND_LOG_INFO,
                  json_pack("{s:s,s:I}", "msg", "released prefetched jobs", "count", (json_int_t)n));
    pthread_mutex_lock(&w->mu);
    w->acks_lost += lost;
    er_restore_acks_locked(w, &rel); /* the acker or the final flush sends them first */
    pthread_cond_signal(&w->cv_ack);
    pthread_mutex_unlock(&w->mu);
}

static void fetch_body(errand_worker *w, int max, long wait_ms, const er_ackq *acks, er_buf *b)
{
    er_buf_reset(b);
    er_buf_adds(b, "{\"queues\":[");
    for (size_t i = 0; i < w->nqueues; i++) {
        if (i)
            er_buf_adds(b, ",");
        er_json_str(b, w->queues[i]);
    }
    er_buf_adds(b, "],\"worker_id\":");
    er_json_str(b, w->worker_id);
    er_buf_addf(b, ",\"max\":%d,\"wait_ms\":%ld,\"lease_ms\":%ld", max, wait_ms, w->lease_ms);
    for (size_t i = 0; w->queue_weights && i < w->nqueues; i++) {
        er_buf_adds(b, i ? "," : ",\"queue_weights\":{");
        er_json_str(b, w->queues[i]);
        er_buf_addf(b, ":%d", w->queue_weights[i]);
        if (i + 1 == w->nqueues)
            er_buf_adds(b, "}");
    }
    if (acks->n) {
        er_buf_adds(b, ",\"acks\":");
        er_ackq_write(acks, b);
    }
    er_buf_adds(b, "}");
}

/* Wakes one idle handler when jobs wait and no wake-up is under way
 * (locked). A woken handler that leaves jobs behind wakes the next one, so
 * threads are woken as fast as they take jobs, not all at once per batch. */
void er_wake_handler_locked(errand_worker *w)
{
    if (w->q_head && w->idle_handlers > 0 && !w->waking) {
        w->waking = true;
        pthread_cond_signal(&w->cv_work);
    }
}

/* Hands the jobs of a list to the handlers (locked); returns how many. */
static int enqueue_jobs_locked(errand_worker *w, errand_job *list)
{
    int n = 0;
    for (errand_job *j = list; j; j = j->qnext) {
        j->where = ER_JOB_QUEUED;
        held_add_locked(w, j);
        n++;
    }
    if (!list)
        return 0;
    errand_job *last = list;
    while (last->qnext)
        last = last->qnext;
    if (w->q_tail)
        w->q_tail->qnext = list;
    else
        w->q_head = list;
    w->q_tail = last;
    w->nqueued += n;
    er_wake_handler_locked(w);
    return n;
}

void *er_worker_fetcher_main(void *arg)
{
    errand_worker *w = arg;
    errand_client *c = er_worker_thread_client(w, w->poll_wait_ms + 30000);
    er_jscan js;
    er_jscan_init(&js);
    er_buf body;
    er_buf_init(&body, ER_WK_BODY_MAX);
    int64_t backoff = 0;
    pthread_mutex_lock(&w->mu);
    while (c) {
        while (!w->stopping && !fetch_due_locked(w)) {
            w->fetch_waiting++;
            pthread_cond_wait(&w->cv_fetch, &w->mu);
            w->fetch_waiting--;
        }
        if (w->stopping)
            break;
        long room = fetch_room_locked(w);
        int max = room > MAX_FETCH ? MAX_FETCH : (int)room;
        long wait = w->drained ? w->poll_wait_ms : 0;
        w->fetch_reserved += max;
        er_ackq acks = {0};
        if (wait > 0) {
            /* A long poll answers late: outcomes go through the acker meanwhile. */
            w->fetch_parked++;
            if (w->acks.n > 0 && w->ack_waiting)
                pthread_cond_signal(&w->cv_ack);
        } else if (w->acks.n > 0 && er_ackq_take(&w->acks, ER_WK_MAX_ACKS, &acks) < 0) {
            memset(&acks, 0, sizeof acks); /* the acker sends them */
        }
        pthread_mutex_unlock(&w->mu);

        fetch_body(w, max, wait, &acks, &body);
        char *text = NULL;
        size_t tlen = 0;
        int64_t t0 = er_mono_ns();
        int rc = body.err ? ERRAND_ENOMEM
                          : er_client_call_text(c, "POST", "/v1/fetch", body.data, &text, &tlen);
        /* A round trip for the prefetch rule; a long poll's waits for jobs. */
        int64_t rtt = rc == 0 && wait == 0 ? er_mono_ns() - t0 : -1;
        atomic_fetch_add(&w->st_fetches, 1);
        if (rc == 0) {
            int prc = er_jscan_parse(&js, text, tlen);
            if (prc < 0)
                rc = er_client_error(c, prc == ERRAND_ENOMEM ? ERRAND_ENOMEM : ERRAND_EINTERNAL,
                                     "", "%s", prc == ERRAND_ENOMEM ? "out of memory"
                                                                    : "reply is not JSON");
        }
        if (rc == 0) {
            if (acks.n) {
                er_check_ack_results(w, &js, text, "acks");
                atomic_fetch_add(&w->st_acks_sent, (long long)acks.n);
            }
            er_ackq_fini(&acks);
        } else {
            er_worker_log_client_error(w, ERRAND_LOG_WARN, "fetch failed; retrying", c);
            long hs = errand_last_status(c);
            if (acks.n && hs >= 400 && hs < 500) {
                /* A refused request applied nothing; resend the outcomes alone. */
                if (er_send_acks(w, c, &acks, &js, &body) >= 0)
                    memset(&acks, 0, sizeof acks);
            }
        }
        /* Read the jobs before taking the mutex. */
        errand_job *head = NULL, **tail = &head;
        long got = 0, fetched = 0;
        if (rc == 0) {
            long arr = er_jscan_get(&js, text, 0, "jobs");
            if (arr >= 0 && js.tok[arr].type == ER_JS_ARRAY) {
                int64_t now = er_mono_ms();
                for (size_t k = (size_t)arr + 1; k < js.tok[arr].next; k = js.tok[k].next) {
                    got++;
                    errand_job *j = job_read(w, text, &js, (long)k, now);
                    if (!j) {
                        er_worker_log(w, ERRAND_LOG_ERROR,
                                      json_pack("{s:s}", "msg",
                                                "cannot read a leased job; its lease will "
                                                "expire and it will be redelivered"));
                        continue;
                    }
                    fetched++;
                    *tail = j;
                    tail = &j->qnext;
                }
            }
        }
        free(text);
        atomic_fetch_add(&w->st_fetched, fetched);

        pthread_mutex_lock(&w->mu);
        if (wait > 0)
            w->fetch_parked--;
        w->fetch_reserved -= max;
        er_restore_acks_locked(w, &acks);
        if (rc < 0) {
            backoff = er_worker_backoff_next(backoff);
            er_worker_timed_wait(&w->cv_fetch, &w->mu, er_mono_ms() + backoff);
            continue;
        }
        backoff = 0;
        if (rtt >= 0)
            er_prefetch_measure_locked(w, -1, rtt);
        errand_job *late = NULL; /* fetched after a stop: release at once */
        if (w->stopping)
            late = head;
        else
            enqueue_jobs_locked(w, head);
        if (got && w->timer_sleeping)
            pthread_cond_signal(&w->cv_timer);
        w->drained = got < max;
        er_wake_fetcher_locked(w); /* the other fetcher may have room now */
        if (late) {
            pthread_mutex_unlock(&w->mu);
            release_now(w, late);
            pthread_mutex_lock(&w->mu);
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (!c)
        er_worker_log(w, ERRAND_LOG_ERROR, json_pack("{s:s}", "msg", "fetcher: out of memory"));
    errand_client_free(c);
    er_jscan_fini(&js);
    er_buf_fini(&body);
    return NULL;
}
