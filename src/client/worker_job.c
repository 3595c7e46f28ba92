/* SPDX-License-Identifier: MIT
 *
 * The job side of liberrand's worker runtime: the handler threads that run
 * jobs from the ready queue, what a handler can read (errand_job_id and
 * friends), the outcomes it reports, how an outcome becomes an ack item
 * (with the max_started safety net), the per-job log line, a job's end
 * (finished, abandoned, lease lost) and its references. The other threads
 * live in worker_fetch.c, worker_ack.c and worker_timer.c. Nothing here
 * prints.
 */
#include "client/worker_int.h"
#include "util/clock.h"
#include "util/jsonw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- references ----------------------------------------------------------- */

void er_job_unref(errand_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    free(j->msg);
    free(j->result);
    free(j); /* its strings live in the same block */
}

/* ---- accessors ------------------------------------------------------------ */

const char *errand_job_id(const errand_job *job) { return job ? job->id : NULL; }
const char *errand_job_name(const errand_job *job) { return job ? job->name : NULL; }
const char *errand_job_queue(const errand_job *job) { return job ? job->queue : NULL; }
const char *errand_job_payload(const errand_job *job)
{
    return job ? job->payload : NULL;
}

const char *errand_job_json(const errand_job *job)
{
    return job ? job->json : NULL;
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
    return job ? (long long)(job->deadline - er_mono_ms()) : 0;
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

static void set_outcome(errand_job *job, int oc, const char *msg, long delay, char *result)
{
    free(job->msg);
    job->msg = msg ? strdup(msg) : NULL;
    if (job->msg)
        for (char *p = job->msg; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
    free(job->result);
    job->result = result;
    job->oc = oc;
    job->delay_ms = delay;
}

int errand_job_complete(errand_job *job, const char *result_json)
{
    if (!job)
        return ERRAND_EINVAL;
    char *text = NULL;
    if (result_json) {
        /* Checked and made compact here, so the ack carries valid JSON. */
        json_t *r = json_loads(result_json, JSON_DECODE_ANY, NULL);
        if (!r)
            return ERRAND_EINVAL;
        text = json_dumps(r, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(r);
        if (!text)
            return ERRAND_ENOMEM;
    }
    set_outcome(job, ER_OC_COMPLETE, NULL, 0, text);
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

/* The server refuses a longer delay, and the job would run again at once. */
static long delay_bound(long ms)
{
    return ms > ERRAND_DELAY_MAX_MS ? (long)ERRAND_DELAY_MAX_MS : ms;
}

int errand_job_retry_later(errand_job *job, long delay_ms)
{
    if (!job || delay_ms < 0)
        return ERRAND_EINVAL;
    set_outcome(job, ER_OC_RETRY_LATER, NULL, delay_bound(delay_ms), NULL);
    return 0;
}

int errand_job_throttled(errand_job *job, long retry_after_ms)
{
    if (!job || retry_after_ms < 0)
        return ERRAND_EINVAL;
    set_outcome(job, ER_OC_THROTTLED, NULL, delay_bound(retry_after_ms), NULL);
    return 0;
}

int errand_job_release(errand_job *job)
{
    if (!job)
        return ERRAND_EINVAL;
    set_outcome(job, ER_OC_RELEASE, NULL, 0, NULL);
    return 0;
}

static const char *oc_names[] = {"none", "completed", "transient", "permanent", "retry_later",
                                  "throttled", "released"};

/* Writes the fail item of class cls (message msg may be NULL) into b. */
static void fail_item(const errand_job *j, const char *cls, const char *msg, const char *dkey,
                      long delay, er_buf *b)
{
    er_buf e;
    er_buf_init(&e, ER_WK_BODY_MAX);
    er_buf_adds(&e, "{\"error\":{\"class\":");
    er_json_str(&e, cls);
    if (msg) {
        er_buf_adds(&e, ",\"message\":");
        er_json_str(&e, msg);
    }
    if (dkey)
        er_buf_addf(&e, ",\"%s\":%ld", dkey, delay);
    er_buf_adds(&e, "}}");
    er_ack_item(j, "fail", e.err ? "{}" : e.data, b);
    if (e.err)
        er_buf_fail(b, e.err);
    er_buf_fini(&e);
}

/* The ack for the handler's outcome into b; may rewrite j->oc and j->msg. */
static void outcome_item(errand_worker *w, errand_job *j, int rc, er_buf *b)
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
    case ER_OC_COMPLETE:
        if (!j->result) {
            er_ack_item(j, "complete", "{}", b);
        } else {
            er_buf body;
            er_buf_init(&body, ER_WK_BODY_MAX);
            er_buf_adds(&body, "{\"result\":");
            er_buf_adds(&body, j->result);
            er_buf_adds(&body, "}");
            er_ack_item(j, "complete", body.err ? "{}" : body.data, b);
            if (body.err)
                er_buf_fail(b, body.err);
            er_buf_fini(&body);
        }
        return;
    case ER_OC_TRANSIENT: fail_item(j, "transient", j->msg, NULL, 0, b); return;
    case ER_OC_PERMANENT: fail_item(j, "permanent", j->msg, NULL, 0, b); return;
    case ER_OC_RETRY_LATER: fail_item(j, "retry_later", NULL, "delay_ms", j->delay_ms, b); return;
    case ER_OC_RELEASE: er_ack_item(j, "release", "{}", b); return;
    default: fail_item(j, "throttled", NULL, "retry_after_ms", j->delay_ms, b); return;
    }
}

static void timeout_item(const errand_job *j, bool late, er_buf *b)
{
    char buf[160];
    snprintf(buf, sizeof buf, "timed out after %ld ms%s", j->timeout_used,
             late ? "; the handler did not return" : "");
    fail_item(j, "transient", buf, NULL, 0, b);
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
    int64_t created;
    if (j->created_at[0] && er_time_parse(j->created_at, &created) == 0)
        json_object_set_new(f, "age_ms", json_integer(er_now_ms() - created));
    if (j->trace[0])
        json_object_set_new(f, "trace_id", json_string(j->trace));
    if (j->msg && strcmp(outcome, "completed") != 0)
        json_object_set_new(f, "error", json_string(j->msg));
    if (j->oc == ER_OC_RETRY_LATER || j->oc == ER_OC_THROTTLED)
        json_object_set_new(f, "delay_ms", json_integer(j->delay_ms));
    er_worker_log(w, level, f);
}

void er_worker_outcome(errand_worker *w, errand_job *j, int rc, er_buf *item, er_finish *f)
{
    f->dur = w->log ? er_mono_ms() - j->start_mono : 0; /* only the log line shows it */
    outcome_item(w, j, rc, item);
    f->outcome = oc_names[j->oc];
}

void er_worker_finish_locked(errand_worker *w, errand_job *j, er_buf *item, er_finish *f)
{
    w->running--;
    int stop = atomic_load(&j->stop);
    f->stop = stop;
    f->drop_list_ref = false;
    if (j->where == ER_JOB_DONE) {
        f->outcome = "timeout"; /* abandoned: the timer already failed it */
    } else {
        if (stop == ERRAND_STOP_TIMEOUT) {
            timeout_item(j, false, item);
            f->outcome = "timeout";
        } else if (stop == ERRAND_STOP_LEASE_LOST) {
            f->outcome = "lease_lost";
        } else if (stop == ERRAND_STOP_SHUTDOWN) {
            f->outcome = "released";
        }
        if (stop == 0 || stop == ERRAND_STOP_TIMEOUT)
            er_push_ack_locked(w, item);
        er_held_remove_locked(w, j);
        j->where = ER_JOB_DONE;
        f->drop_list_ref = true;
    }
    er_prefetch_measure_locked(w, f->run_ns, -1);
    er_wake_fetcher_locked(w); /* a handler thread is free */
    if (w->stopping && w->running == 0)
        pthread_cond_broadcast(&w->cv_idle);
}

void er_worker_finish_post(errand_worker *w, errand_job *j, const er_finish *f)
{
    if (strcmp(f->outcome, "completed") == 0)
        atomic_fetch_add(&w->st_completed, 1);
    else if (f->drop_list_ref && f->stop == 0 && strcmp(f->outcome, "released") == 0)
        atomic_fetch_add(&w->st_released, 1); /* errand_job_release */
    else if (f->drop_list_ref && (f->stop == 0 || f->stop == ERRAND_STOP_TIMEOUT))
        atomic_fetch_add(&w->st_failed, 1);
    job_line(w, j, f->outcome, f->dur);
    if (f->drop_list_ref)
        er_job_unref(j);
    er_job_unref(j); /* the handler's reference */
}

void er_worker_abandon_locked(errand_worker *w, errand_job *j)
{
    er_buf b;
    er_buf_init(&b, ER_WK_BODY_MAX);
    timeout_item(j, true, &b);
    er_push_ack_locked(w, &b);
    er_buf_fini(&b);
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
    er_wake_fetcher_locked(w);
    return 1;
}

/* ---- handler threads ---------------------------------------------------- */

void *er_worker_handler_main(void *arg)
{
    errand_worker *w = arg;
    er_buf item;
    er_buf_init(&item, ER_WK_BODY_MAX);
    errand_job *done = NULL; /* finished; the rest of its end waits for the next unlock */
    er_finish fin = {0};
    pthread_mutex_lock(&w->mu);
    for (;;) {
        if (done && !w->q_head) {
            pthread_mutex_unlock(&w->mu);
            er_worker_finish_post(w, done, &fin);
            done = NULL;
            pthread_mutex_lock(&w->mu);
            continue;
        }
        while (!w->q_head && !w->stopping && !w->handlers_exit) {
            w->idle_handlers++;
            pthread_cond_wait(&w->cv_work, &w->mu);
            w->idle_handlers--;
            w->waking = false;
        }
        if (w->stopping || w->handlers_exit)
            break;
        /* Takes the next job in the same critical section that reported
         * the last one. */
        errand_job *j = w->q_head;
        w->q_head = j->qnext;
        if (!w->q_head)
            w->q_tail = NULL;
        j->qnext = NULL;
        w->nqueued--;
        w->running++;
        j->where = ER_JOB_RUNNING;
        er_wake_handler_locked(w);
        int64_t now = er_mono_ms();
        long t = w->timeout_ms;
        if (j->job_timeout_ms > 0 && j->job_timeout_ms < t)
            t = j->job_timeout_ms;
        j->timeout_used = t;
        j->start_mono = now;
        j->start_wall = er_now_ms();
        j->deadline = now + t;
        j->abandon_at = j->deadline + (w->grace_ms - w->timeout_ms);
        if (w->timer_sleeping && j->deadline < w->timer_wake)
            pthread_cond_signal(&w->cv_timer);
        atomic_fetch_add(&j->refs, 1); /* the handler's reference */
        pthread_mutex_unlock(&w->mu);
        if (done) {
            er_worker_finish_post(w, done, &fin);
            done = NULL;
        }

        int64_t t0 = er_mono_ns();
        int rc = w->handler(j, w->user);
        fin.run_ns = er_mono_ns() - t0;
        er_worker_outcome(w, j, rc, &item, &fin);

        pthread_mutex_lock(&w->mu);
        er_worker_finish_locked(w, j, &item, &fin);
        done = j;
    }
    pthread_mutex_unlock(&w->mu);
    if (done)
        er_worker_finish_post(w, done, &fin);
    er_buf_fini(&item);
    return NULL;
}
