/* SPDX-License-Identifier: MIT
 *
 * The job side of liberrand's worker runtime: what a handler can read
 * (errand_job_id and friends), the outcomes it reports, how an outcome
 * becomes an ack item (with the max_started safety net), the per-job log
 * line, and the graceful-stop sequence. Threads and fetching live in
 * worker.c. Nothing here prints.
 */
#include "client/worker_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- time --------------------------------------------------------------- */

int64_t er_wk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t er_wk_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void er_wk_time_format(int64_t ms, char out[32])
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    if (strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
        out[0] = '\0';
    size_t n = strlen(out);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ms % 1000));
}

/* Parses the server's "YYYY-MM-DDTHH:MM:SS[.fff]Z". */
int er_wk_time_parse(const char *s, int64_t *ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int frac = 0, n = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &n) != 6)
        return ERRAND_EINVAL;
    const char *p = s + n;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3)
                frac = frac * 10 + (*p - '0');
        for (; digits < 3; digits++)
            frac *= 10;
    }
    if (*p != 'Z')
        return ERRAND_EINVAL;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    *ms = (int64_t)timegm(&tm) * 1000 + frac;
    return 0;
}

/* ---- accessors ------------------------------------------------------------ */

const char *errand_job_id(const errand_job *job) { return job ? job->id : NULL; }
const char *errand_job_name(const errand_job *job) { return job ? job->name : NULL; }
const char *errand_job_queue(const errand_job *job) { return job ? job->queue : NULL; }
/* Dumps v once into *cache (thread-safe: a racing loser frees its copy). */
static const char *cached_dump(char *_Atomic *cache, json_t *v)
{
    char *s = atomic_load(cache);
    if (s)
        return s;
    char *mine = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("null");
    if (!mine)
        return NULL;
    char *expected = NULL;
    if (atomic_compare_exchange_strong(cache, &expected, mine))
        return mine;
    free(mine);
    return expected;
}

const char *errand_job_payload(const errand_job *job)
{
    if (!job)
        return NULL;
    errand_job *j = (errand_job *)job; /* only the cache changes */
    return cached_dump(&j->payload_text, json_object_get(j->obj, "payload"));
}

const char *errand_job_json(const errand_job *job)
{
    if (!job)
        return NULL;
    errand_job *j = (errand_job *)job;
    return cached_dump(&j->json_text, j->obj);
}
const char *errand_job_idempotency_key(const errand_job *job) { return job ? job->idem : NULL; }
const char *errand_job_trace_id(const errand_job *job) { return job ? job->trace : NULL; }
const char *errand_job_lease_token(const errand_job *job) { return job ? job->token : NULL; }
int errand_job_attempt(const errand_job *job) { return job ? job->attempt : 0; }
long errand_job_started(const errand_job *job) { return job ? job->started : 0; }

long long errand_job_deadline(const errand_job *job)
{
    return job ? (long long)(job->start_wall + job->timeout_used) : 0;
}

long long errand_job_remaining_ms(const errand_job *job)
{
    return job ? (long long)(job->deadline - er_wk_mono_ms()) : 0;
}

int errand_job_lease_lost(const errand_job *job)
{
    return job && atomic_load(&job->stop) == ERRAND_STOP_LEASE_LOST;
}

int errand_job_should_stop(const errand_job *job)
{
    return job ? atomic_load(&job->stop) : 0;
}

/* ---- outcomes ------------------------------------------------------------- */

static void set_outcome(errand_job *job, int oc, const char *msg, long delay, json_t *result)
{
    free(job->msg);
    job->msg = msg ? strdup(msg) : NULL;
    if (job->msg)
        for (char *p = job->msg; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
    json_decref(job->result);
    job->result = result;
    job->oc = oc;
    job->delay_ms = delay;
}

int errand_job_complete(errand_job *job, const char *result_json)
{
    if (!job)
        return ERRAND_EINVAL;
    json_t *r = NULL;
    if (result_json && !(r = json_loads(result_json, JSON_DECODE_ANY, NULL)))
        return ERRAND_EINVAL;
    set_outcome(job, ER_OC_COMPLETE, NULL, 0, r);
    return 0;
}

int errand_job_fail_transient(errand_job *job, const char *msg)
{
    if (!job)
        return ERRAND_EINVAL;
    set_outcome(job, ER_OC_TRANSIENT, msg, 0, NULL);
    return 0;
}

int errand_job_fail_permanent(errand_job *job, const char *msg)
{
    if (!job)
        return ERRAND_EINVAL;
    set_outcome(job, ER_OC_PERMANENT, msg, 0, NULL);
    return 0;
}

int errand_job_retry_later(errand_job *job, long delay_ms)
{
    if (!job || delay_ms < 0)
        return ERRAND_EINVAL;
    set_outcome(job, ER_OC_RETRY_LATER, NULL, delay_ms, NULL);
    return 0;
}

int errand_job_throttled(errand_job *job, long retry_after_ms)
{
    if (!job || retry_after_ms < 0)
        return ERRAND_EINVAL;
    set_outcome(job, ER_OC_THROTTLED, NULL, retry_after_ms, NULL);
    return 0;
}

static const char *oc_names[] = {"none", "completed", "transient", "permanent", "retry_later",
                                  "throttled"};

/* The fail item of class cls (message msg may be NULL). */
static json_t *fail_item(const errand_job *j, const char *cls, const char *msg, const char *dkey,
                         long delay)
{
    json_t *e = json_pack("{s:s}", "class", cls);
    if (msg)
        json_object_set_new(e, "message", json_string(msg));
    if (dkey)
        json_object_set_new(e, dkey, json_integer(delay));
    return er_ack_item(j, "fail", json_pack("{s:o}", "error", e));
}

/* The ack for the handler's outcome; may rewrite j->oc and j->msg. */
static json_t *outcome_item(errand_worker *w, errand_job *j, int rc)
{
    char buf[160];
    if (j->oc == ER_OC_NONE) {
        if (rc == 0) {
            j->oc = ER_OC_COMPLETE;
        } else {
            snprintf(buf, sizeof buf, "handler returned %d without an outcome", rc);
            set_outcome(j, ER_OC_TRANSIENT, buf, 0, NULL);
        }
    }
    if ((j->oc == ER_OC_RETRY_LATER || j->oc == ER_OC_THROTTLED) && w->max_started > 0 &&
        j->started >= w->max_started) {
        snprintf(buf, sizeof buf, "%s limit reached: leased %ld times, max_started is %d",
                 oc_names[j->oc], j->started, w->max_started);
        set_outcome(j, ER_OC_PERMANENT, buf, 0, NULL);
    }
    switch (j->oc) {
    case ER_OC_COMPLETE: {
        json_t *body = json_object();
        if (j->result)
            json_object_set(body, "result", j->result);
        return er_ack_item(j, "complete", body);
    }
    case ER_OC_TRANSIENT: return fail_item(j, "transient", j->msg, NULL, 0);
    case ER_OC_PERMANENT: return fail_item(j, "permanent", j->msg, NULL, 0);
    case ER_OC_RETRY_LATER: return fail_item(j, "retry_later", NULL, "delay_ms", j->delay_ms);
    default: return fail_item(j, "throttled", NULL, "retry_after_ms", j->delay_ms);
    }
}

static json_t *timeout_item(const errand_job *j, bool late)
{
    char buf[160];
    snprintf(buf, sizeof buf, "timed out after %ld ms%s", j->timeout_used,
             late ? "; the handler did not return" : "");
    return fail_item(j, "transient", buf, NULL, 0);
}

static void job_line(errand_worker *w, const errand_job *j, const char *outcome, int64_t dur)
{
    int level = strcmp(outcome, "completed") == 0 ? ERRAND_LOG_INFO : ERRAND_LOG_WARN;
    if (!w->log)
        return;
    json_t *f = json_pack("{s:s,s:s,s:s,s:s,s:i,s:I,s:s}", "msg", "job done", "job_id", j->id,
                          "queue", j->queue, "name", j->name, "attempt", j->attempt,
                          "duration_ms", (json_int_t)dur, "outcome", outcome);
    if (!f)
        return;
    if (j->created_wall)
        json_object_set_new(f, "age_ms", json_integer(er_wk_now_ms() - j->created_wall));
    if (j->trace[0])
        json_object_set_new(f, "trace_id", json_string(j->trace));
    if (j->msg && strcmp(outcome, "completed") != 0)
        json_object_set_new(f, "error", json_string(j->msg));
    if (j->oc == ER_OC_RETRY_LATER || j->oc == ER_OC_THROTTLED)
        json_object_set_new(f, "delay_ms", json_integer(j->delay_ms));
    er_worker_log(w, level, f);
}

void er_worker_finish(errand_worker *w, errand_job *j, int rc)
{
    int64_t dur = er_wk_mono_ms() - j->start_mono;
    json_t *item = outcome_item(w, j, rc);
    const char *outcome = oc_names[j->oc];
    bool drop_list_ref = false;
    pthread_mutex_lock(&w->mu);
    w->running--;
    int stop = atomic_load(&j->stop);
    if (j->where == ER_JOB_DONE) {
        outcome = "timeout"; /* abandoned: the timer already failed it */
    } else {
        if (stop == ERRAND_STOP_TIMEOUT) {
            json_decref(item);
            item = timeout_item(j, false);
            outcome = "timeout";
        } else if (stop == ERRAND_STOP_LEASE_LOST) {
            outcome = "lease_lost";
        } else if (stop == ERRAND_STOP_SHUTDOWN) {
            outcome = "released";
        }
        if (stop == 0 || stop == ERRAND_STOP_TIMEOUT) {
            er_push_ack_locked(w, item);
            item = NULL;
        }
        er_held_remove_locked(w, j);
        j->where = ER_JOB_DONE;
        drop_list_ref = true;
    }
    pthread_cond_signal(&w->cv_fetch); /* a handler thread is free */
    if (w->stopping && w->running == 0)
        pthread_cond_broadcast(&w->cv_idle);
    pthread_mutex_unlock(&w->mu);
    json_decref(item);
    if (strcmp(outcome, "completed") == 0)
        atomic_fetch_add(&w->st_completed, 1);
    else if (drop_list_ref && (stop == 0 || stop == ERRAND_STOP_TIMEOUT))
        atomic_fetch_add(&w->st_failed, 1);
    job_line(w, j, outcome, dur);
    if (drop_list_ref)
        er_job_unref(j);
}

void er_worker_abandon_locked(errand_worker *w, errand_job *j)
{
    er_push_ack_locked(w, timeout_item(j, true));
    er_held_remove_locked(w, j);
    j->where = ER_JOB_DONE;
    j->abandoned = true;
    atomic_fetch_add(&w->st_failed, 1);
    er_worker_log(w, ERRAND_LOG_ERROR,
                  json_pack("{s:s,s:s,s:s}", "msg",
                            "handler still running after its timeout; the job is failed as "
                            "transient and the handler thread stays busy until it returns",
                            "job_id", j->id, "queue", j->queue));
    er_job_unref(j); /* the list's reference; the handler holds its own */
}

int er_worker_lose_locked(errand_worker *w, errand_job *j)
{
    if (!j->in_held || j->where == ER_JOB_DONE)
        return 0;
    atomic_store(&j->stop, ERRAND_STOP_LEASE_LOST);
    atomic_fetch_add(&w->st_lease_lost, 1);
    er_held_remove_locked(w, j);
    if (j->where == ER_JOB_RUNNING)
        return 2;
    /* Queued: unlink it from the ready queue. */
    errand_job **pp = &w->q_head, *prev = NULL;
    while (*pp && *pp != j) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (*pp) {
        *pp = j->qnext;
        if (w->q_tail == j)
            w->q_tail = prev;
        w->nqueued--;
    }
    j->qnext = NULL;
    j->where = ER_JOB_DONE;
    er_job_unref(j); /* the list's reference; the caller holds one */
    pthread_cond_signal(&w->cv_fetch);
    return 1;
}

void er_worker_shutdown(errand_worker *w)
{
    json_t *rel = json_array();
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    /* Prefetched jobs go back at once: another worker can start them now. */
    errand_job *j = w->q_head;
    while (j) {
        errand_job *nx = j->qnext;
        json_array_append_new(rel, er_ack_item(j, "release", json_object()));
        er_held_remove_locked(w, j);
        j->where = ER_JOB_DONE;
        j->qnext = NULL;
        er_job_unref(j);
        j = nx;
    }
    size_t nprefetched = json_array_size(rel);
    w->q_head = w->q_tail = NULL;
    w->nqueued = 0;
    json_array_extend(rel, w->acks);
    json_decref(w->acks);
    w->acks = rel;
    w->acker_force = true;
    pthread_cond_signal(&w->cv_ack);
    pthread_cond_broadcast(&w->cv_work);
    pthread_cond_broadcast(&w->cv_fetch);
    int running = w->running;
    pthread_mutex_unlock(&w->mu);
    atomic_fetch_add(&w->st_released, (long long)nprefetched);
    er_worker_log(w, ERRAND_LOG_INFO,
                  json_pack("{s:s,s:i,s:I,s:I}", "msg", "stopping: no more fetches", "running",
                            running, "released_prefetched", (json_int_t)nprefetched, "grace_ms",
                            (json_int_t)w->grace_ms));

    /* Running handlers get up to the grace period. */
    errand_job *notify[1000];
    int nnotify = 0;
    pthread_mutex_lock(&w->mu);
    int64_t until = er_wk_mono_ms() + w->grace_ms;
    while (w->running > 0 && er_wk_mono_ms() < until) {
        struct timespec ts = {.tv_sec = (time_t)(until / 1000),
                              .tv_nsec = (long)(until % 1000) * 1000000L};
        pthread_cond_timedwait(&w->cv_idle, &w->mu, &ts);
    }
    /* Then the leases of jobs still running are released, not failed. */
    for (errand_job *h = w->held.lnext; h != &w->held;) {
        errand_job *nx = h->lnext;
        if (h->where == ER_JOB_RUNNING) {
            atomic_store(&h->stop, ERRAND_STOP_SHUTDOWN);
            er_push_ack_locked(w, er_ack_item(h, "release", json_object()));
            er_held_remove_locked(w, h);
            atomic_fetch_add(&w->st_released, 1);
            if (nnotify < 1000) {
                atomic_fetch_add(&h->refs, 1);
                notify[nnotify++] = h;
            }
        }
        h = nx;
    }
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < nnotify; i++) {
        er_worker_log(w, ERRAND_LOG_WARN,
                      json_pack("{s:s,s:s,s:s}", "msg",
                                "grace period over: lease released, the job will be redelivered",
                                "job_id", notify[i]->id, "queue", notify[i]->queue));
        if (w->on_stop)
            w->on_stop(notify[i], ERRAND_STOP_SHUTDOWN, w->stop_user);
        er_job_unref(notify[i]);
    }

    if (w->fetcher_started)
        pthread_join(w->fetcher, NULL);
    pthread_mutex_lock(&w->mu);
    w->handlers_exit = w->timer_exit = true;
    pthread_cond_broadcast(&w->cv_work);
    pthread_cond_signal(&w->cv_timer);
    pthread_mutex_unlock(&w->mu);
    if (w->timer_started)
        pthread_join(w->timer, NULL);
    pthread_mutex_lock(&w->mu);
    w->acker_exit = w->acker_force = true;
    pthread_cond_signal(&w->cv_ack);
    pthread_mutex_unlock(&w->mu);
    if (w->acker_started)
        pthread_join(w->acker, NULL);
    w->fetcher_started = w->timer_started = w->acker_started = false;

    errand_worker_stats st;
    errand_worker_get_stats(w, &st);
    er_worker_log(w, ERRAND_LOG_INFO,
                  json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "msg", "worker stopped", "fetched",
                            (json_int_t)st.fetched, "completed", (json_int_t)st.completed,
                            "failed", (json_int_t)st.failed, "released",
                            (json_int_t)st.released, "lease_lost", (json_int_t)st.lease_lost,
                            "timed_out", (json_int_t)st.timed_out));
}
