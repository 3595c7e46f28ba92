/* SPDX-License-Identifier: MIT
 *
 * liberrand's worker runtime (errand.h, docs/workers.md): its configuration,
 * its life (new, run, the graceful stop, free, stats, signal handlers) and
 * the helpers its threads share (the log line, a client per thread, timed
 * waits, back-off). Run starts the handler threads (worker_job.c), the
 * timer (worker_timer.c), the acker (worker_ack.c) and the fetchers
 * (worker_fetch.c); worker_int.h says how they share the state. It never
 * prints: logs go to the configured callback.
 */
#include "client/worker_int.h"
#include "client/prefetch.h"
#include "util/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- small helpers ------------------------------------------------------ */

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == ':' || ch == '-'))
            return false;
    }
    return true;
}

void er_worker_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_mono)
{
    struct timespec ts;
    int64_t ms = until_mono;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

int64_t er_worker_backoff_next(int64_t cur)
{
    return cur <= 0 ? ER_WK_BACKOFF_MIN
                    : (cur * 2 > ER_WK_BACKOFF_MAX ? ER_WK_BACKOFF_MAX : cur * 2);
}

void er_worker_log(errand_worker *w, int level, json_t *fields)
{
    if (!w->log) {
        json_decref(fields);
        return;
    }
    static const char *names[] = {"debug", "info", "warn", "error"};
    json_t *line = json_object();
    char ts[32];
    er_time_format(er_now_ms(), ts);
    json_object_set_new(line, "ts", json_string(ts));
    json_object_set_new(line, "level", json_string(names[level & 3]));
    json_object_update(line, fields);
    json_decref(fields);
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(line);
    if (text)
        w->log(level, text, w->log_user);
    free(text);
}

/* Logs msg with the last error of client c. */
void er_worker_log_client_error(errand_worker *w, int level, const char *msg, errand_client *c)
{
    const errand_error *e = errand_last_error(c);
    er_worker_log(w, level, json_pack("{s:s,s:s,s:s,s:I}", "msg", msg, "error", e->code_name,
                                      "message", e->message, "http_status",
                                      (json_int_t)e->http_status));
}

errand_client *er_worker_thread_client(errand_worker *w, long total_ms)
{
    errand_client *c = NULL;
    if (errand_client_new(w->url, w->token, &c) < 0)
        return NULL;
    errand_client_set_timeouts(c, 5000, total_ms);
    return c;
}

/* ---- configuration ------------------------------------------------------ */

void errand_worker_config_init(errand_worker_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->prefetch = ERRAND_PREFETCH_AUTO;
}

void er_prefetch_measure_locked(errand_worker *w, int64_t run_ns, int64_t rtt_ns)
{
    if (run_ns >= 0)
        w->run_us = er_prefetch_ewma(w->run_us, (double)run_ns / 1000.0);
    if (rtt_ns >= 0)
        w->rtt_us = er_prefetch_ewma(w->rtt_us, (double)rtt_ns / 1000.0);
    if (w->prefetch_fixed != ERRAND_PREFETCH_AUTO)
        return;
    er_prefetch_in in = {.concurrency = w->concurrency, .run_us = w->run_us, .rtt_us = w->rtt_us,
                         .lease_ms = w->lease_ms};
    int n = er_prefetch_size(&in);
    if (n == w->prefetch)
        return;
    bool more = n > w->prefetch;
    w->prefetch = n;
    atomic_store(&w->st_prefetch, n);
    if (more)
        er_wake_fetcher_locked(w);
}

static int cfg_error(char *errbuf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int cfg_error(char *errbuf, size_t n, const char *fmt, ...)
{
    if (errbuf && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, n, fmt, ap);
        va_end(ap);
    }
    return ERRAND_EINVAL;
}

/* Checks cfg and fills w's settings (defaults applied). */
static int check_config(const errand_worker_config *cfg, errand_worker *w, char *eb, size_t en)
{
    if (!cfg->server_url || !*cfg->server_url)
        return cfg_error(eb, en, "server URL is required");
    if (!cfg->queues || cfg->nqueues == 0)
        return cfg_error(eb, en, "at least one queue is required");
    if (cfg->nqueues > 16)
        return cfg_error(eb, en, "at most 16 queues (got %zu)", cfg->nqueues);
    for (size_t i = 0; i < cfg->nqueues; i++)
        if (!cfg->queues[i] || !valid_name(cfg->queues[i]))
            return cfg_error(eb, en,
                             "queue '%s' is not a valid name (1..128 of A-Z a-z 0-9 _ . : -)",
                             cfg->queues[i] ? cfg->queues[i] : "(null)");
    for (size_t i = 0; cfg->queue_weights && i < cfg->nqueues; i++)
        if (cfg->queue_weights[i] < 1 || cfg->queue_weights[i] > 1000)
            return cfg_error(eb, en, "queue weight of '%s' must be 1..1000 (got %d)",
                             cfg->queues[i], cfg->queue_weights[i]);
    w->concurrency = cfg->concurrency ? cfg->concurrency : 1;
    if (w->concurrency < 1 || w->concurrency > 1000)
        return cfg_error(eb, en, "concurrency must be 1..1000 (got %d)", cfg->concurrency);
    if (cfg->prefetch < ERRAND_PREFETCH_AUTO || cfg->prefetch > ER_PREFETCH_MAX)
        return cfg_error(eb, en, "prefetch must be 0..%d, or ERRAND_PREFETCH_AUTO (-1) (got %d)",
                         ER_PREFETCH_MAX, cfg->prefetch);
    w->prefetch_fixed = cfg->prefetch;
    /* Adaptive: nothing ahead until a run and a round trip are measured. */
    w->prefetch = cfg->prefetch == ERRAND_PREFETCH_AUTO ? 0 : cfg->prefetch;
    w->run_us = w->rtt_us = -1;
    atomic_init(&w->st_prefetch, w->prefetch);
    w->lease_ms = cfg->lease_ms ? cfg->lease_ms : 60000;
    w->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 30000;
    w->grace_ms = cfg->grace_ms ? cfg->grace_ms : 45000;
    w->poll_wait_ms = cfg->poll_wait_ms ? cfg->poll_wait_ms : 2000;
    if (w->lease_ms < 1000 || w->lease_ms > 86400000)
        return cfg_error(eb, en, "lease must be 1s..24h (got %ld ms)", w->lease_ms);
    if (w->timeout_ms < 1)
        return cfg_error(eb, en, "timeout must be positive (got %ld ms)", w->timeout_ms);
    if (w->grace_ms < 1)
        return cfg_error(eb, en, "grace must be positive (got %ld ms)", w->grace_ms);
    /* The three numbers: a job ends (or is timed out) before the grace ends,
     * and the grace ends before an unrenewed lease would. */
    if (w->timeout_ms >= w->grace_ms)
        return cfg_error(eb, en,
                         "timeout (%ld ms) must be shorter than grace (%ld ms): "
                         "need timeout < grace < lease",
                         w->timeout_ms, w->grace_ms);
    if (w->grace_ms >= w->lease_ms)
        return cfg_error(eb, en,
                         "grace (%ld ms) must be shorter than lease (%ld ms): "
                         "need timeout < grace < lease",
                         w->grace_ms, w->lease_ms);
    if (w->poll_wait_ms < 100 || w->poll_wait_ms > 60000)
        return cfg_error(eb, en, "poll wait must be 100ms..60s (got %ld ms)", w->poll_wait_ms);
    if (cfg->max_started < 0)
        return cfg_error(eb, en, "max_started must be 0 or more (got %d)", cfg->max_started);
    w->max_started = cfg->max_started;
    if (cfg->worker_id && !valid_name(cfg->worker_id))
        return cfg_error(eb, en, "worker id '%s' is not a valid name", cfg->worker_id);
    return 0;
}

int errand_worker_new(const errand_worker_config *cfg, errand_handler_fn handler, void *user,
                      errand_worker **out, char *errbuf, size_t errbuf_size)
{
    if (errbuf && errbuf_size)
        errbuf[0] = '\0';
    if (!cfg || !handler || !out)
        return cfg_error(errbuf, errbuf_size, "config, handler and out are required");
    errand_worker *w = calloc(1, sizeof *w);
    if (!w)
        return ERRAND_ENOMEM;
    int rc = check_config(cfg, w, errbuf, errbuf_size);
    if (rc < 0) {
        free(w);
        return rc;
    }
    /* A client now, so a bad URL or token is refused here, not in run(). */
    errand_client *probe = NULL;
    rc = errand_client_new(cfg->server_url, cfg->token, &probe);
    errand_client_free(probe);
    if (rc < 0) {
        free(w);
        return rc == ERRAND_EINVAL
                   ? cfg_error(errbuf, errbuf_size, "bad server URL or token: %s", cfg->server_url)
                   : rc;
    }
    w->handler = handler;
    w->user = user;
    w->log = cfg->log;
    w->log_user = cfg->log_user;
    w->on_stop = cfg->on_stop;
    w->stop_user = cfg->stop_user;
    w->stop_pipe[0] = w->stop_pipe[1] = -1;
    w->url = strdup(cfg->server_url);
    w->token = cfg->token ? strdup(cfg->token) : NULL;
    w->queues = calloc(cfg->nqueues, sizeof *w->queues);
    w->nqueues = cfg->nqueues;
    char wid[160];
    if (cfg->worker_id) {
        snprintf(wid, sizeof wid, "%s", cfg->worker_id);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        for (char *p = host; *p; p++)
            if (!valid_name((char[]){*p, '\0'}))
                *p = '-';
        snprintf(wid, sizeof wid, "%.100s-%ld", host, (long)getpid());
    }
    w->worker_id = strdup(wid);
    w->held.lnext = w->held.lprev = &w->held;
    bool ok = w->url && (!cfg->token || w->token) && w->queues && w->worker_id &&
              pipe2(w->stop_pipe, O_CLOEXEC | O_NONBLOCK) == 0;
    for (size_t i = 0; ok && i < cfg->nqueues; i++)
        ok = (w->queues[i] = strdup(cfg->queues[i])) != NULL;
    if (ok && cfg->queue_weights) {
        ok = (w->queue_weights = malloc(cfg->nqueues * sizeof *w->queue_weights)) != NULL;
        if (ok)
            memcpy(w->queue_weights, cfg->queue_weights, cfg->nqueues * sizeof *w->queue_weights);
    }
    if (!ok) {
        errand_worker_free(w);
        return ERRAND_ENOMEM;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_t *cvs[] = {&w->cv_work, &w->cv_fetch, &w->cv_timer, &w->cv_ack, &w->cv_idle};
    for (size_t i = 0; i < sizeof cvs / sizeof cvs[0]; i++)
        pthread_cond_init(cvs[i], &ca);
    pthread_condattr_destroy(&ca);
    w->sync_ready = true;
    *out = w;
    return 0;
}

/* ---- run and stop ----------------------------------------------------------- */

void errand_worker_stop(errand_worker *w)
{
    if (!w)
        return;
    atomic_store(&w->stop_requested, 1);
    char b = 1;
    ssize_t r = write(w->stop_pipe[1], &b, 1); /* full pipe: a byte is already there */
    (void)r;
}

void errand_worker_stop_now(errand_worker *w)
{
    if (!w)
        return;
    atomic_store(&w->stop_now, 1);
    errand_worker_stop(w);
}

static int start_thread(errand_worker *w, pthread_t *t, void *(*fn)(void *))
{
    /* Worker threads leave SIGTERM/SIGINT/SIGQUIT to the thread that called run(). */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = pthread_create(t, NULL, fn, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc == 0 ? 0 : ERRAND_ENOMEM;
}

/* Waits until the stop pipe is readable. */
static void wait_stop(errand_worker *w)
{
    struct pollfd p = {.fd = w->stop_pipe[0], .events = POLLIN};
    while (!atomic_load(&w->stop_requested)) {
        int n = poll(&p, 1, 1000);
        if (n > 0 || (n < 0 && errno != EINTR))
            break;
    }
}

/* The graceful stop sequence of run(). */
static void graceful_stop(errand_worker *w)
{
    er_ackq rel = {0};
    er_buf b;
    er_buf_init(&b, ER_WK_BODY_MAX);
    long lost = 0;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    /* Prefetched jobs go back at once: another worker can start them now. */
    errand_job *j = w->q_head;
    size_t nprefetched = 0;
    while (j) {
        errand_job *nx = j->qnext;
        er_ack_item(j, "release", "{}", &b);
        if (b.err || er_ackq_push(&rel, b.data, b.len) < 0)
            lost++; /* its lease expires instead */
        nprefetched++;
        er_held_remove_locked(w, j);
        j->where = ER_JOB_DONE;
        j->qnext = NULL;
        er_job_unref(j);
        j = nx;
    }
    w->q_head = w->q_tail = NULL;
    w->nqueued = 0;
    if (rel.n && er_ackq_prepend(&w->acks, &rel) < 0)
        lost += (long)rel.n;
    er_ackq_fini(&rel);
    w->acks_lost += lost;
    w->acker_force = true;
    pthread_cond_signal(&w->cv_ack);
    pthread_cond_broadcast(&w->cv_work);
    pthread_cond_broadcast(&w->cv_fetch);
    int running = w->running;
    pthread_mutex_unlock(&w->mu);
    er_buf_fini(&b);
    atomic_fetch_add(&w->st_released, (long long)nprefetched);
    er_worker_log(w, ERRAND_LOG_INFO,
                  json_pack("{s:s,s:i,s:I,s:I}", "msg", "stopping: no more fetches", "running",
                            running, "released_prefetched", (json_int_t)nprefetched, "grace_ms",
                            (json_int_t)w->grace_ms));

    /* Running handlers get up to the grace period. */
    errand_job *notify[1000];
    int nnotify = 0;
    pthread_mutex_lock(&w->mu);
    int64_t until = er_mono_ms() + w->grace_ms;
    /* Waits of at most 50 ms: a stop_now from a signal handler cannot wake
     * the condition variable. */
    while (w->running > 0 && !atomic_load(&w->stop_now) && er_mono_ms() < until) {
        int64_t t = er_mono_ms() + 50 < until ? er_mono_ms() + 50 : until;
        struct timespec ts = {.tv_sec = (time_t)(t / 1000), .tv_nsec = (long)(t % 1000) * 1000000L};
        pthread_cond_timedwait(&w->cv_idle, &w->mu, &ts);
    }
    /* Then the leases of jobs still running are released, not failed. */
    for (errand_job *h = w->held.lnext; h != &w->held;) {
        errand_job *nx = h->lnext;
        if (h->where == ER_JOB_RUNNING) {
            atomic_store(&h->stop, ERRAND_STOP_SHUTDOWN);
            er_buf rb;
            er_buf_init(&rb, ER_WK_BODY_MAX);
            er_ack_item(h, "release", "{}", &rb);
            er_push_ack_locked(w, &rb);
            er_buf_fini(&rb);
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

    for (int i = 0; i < w->nfetchers; i++)
        pthread_join(w->fetchers[i], NULL);
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
    w->nfetchers = 0;
    w->timer_started = w->acker_started = false;

    errand_worker_stats st;
    errand_worker_get_stats(w, &st);
    er_worker_log(w, ERRAND_LOG_INFO,
                  json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:i}", "msg", "worker stopped",
                            "fetched", (json_int_t)st.fetched, "completed",
                            (json_int_t)st.completed, "failed", (json_int_t)st.failed,
                            "released", (json_int_t)st.released, "lease_lost",
                            (json_int_t)st.lease_lost, "timed_out", (json_int_t)st.timed_out,
                            "prefetch", st.prefetch));
}

int errand_worker_run(errand_worker *w)
{
    if (!w || w->ran)
        return ERRAND_EINVAL;
    w->ran = true;
    w->handlers = calloc((size_t)w->concurrency, sizeof *w->handlers);
    if (!w->handlers)
        return ERRAND_ENOMEM;
    int rc = 0;
    for (int i = 0; rc == 0 && i < w->concurrency; i++)
        if ((rc = start_thread(w, &w->handlers[i], er_worker_handler_main)) == 0)
            w->nhandlers++;
    if (rc == 0 && (rc = start_thread(w, &w->timer, er_worker_timer_main)) == 0)
        w->timer_started = true;
    if (rc == 0 && (rc = start_thread(w, &w->acker, er_worker_acker_main)) == 0)
        w->acker_started = true;
    for (int i = 0; rc == 0 && i < ER_FETCHERS; i++)
        if ((rc = start_thread(w, &w->fetchers[i], er_worker_fetcher_main)) == 0)
            w->nfetchers++;
    if (rc == 0) {
        json_t *pf = w->prefetch_fixed == ERRAND_PREFETCH_AUTO ? json_string("auto")
                                                               : json_integer(w->prefetch_fixed);
        er_worker_log(w, ERRAND_LOG_INFO,
                      json_pack("{s:s,s:s,s:i,s:o,s:I,s:I,s:I}", "msg", "worker started",
                                "worker_id", w->worker_id, "concurrency", w->concurrency,
                                "prefetch", pf, "lease_ms", (json_int_t)w->lease_ms,
                                "timeout_ms", (json_int_t)w->timeout_ms, "grace_ms",
                                (json_int_t)w->grace_ms));
        wait_stop(w);
    }
    graceful_stop(w);
    return rc;
}

void errand_worker_get_stats(errand_worker *w, errand_worker_stats *out)
{
    if (!w || !out)
        return;
    out->fetched = atomic_load(&w->st_fetched);
    out->completed = atomic_load(&w->st_completed);
    out->failed = atomic_load(&w->st_failed);
    out->released = atomic_load(&w->st_released);
    out->lease_lost = atomic_load(&w->st_lease_lost);
    out->timed_out = atomic_load(&w->st_timed_out);
    out->fetches = atomic_load(&w->st_fetches);
    out->acks_sent = atomic_load(&w->st_acks_sent);
    out->prefetch = atomic_load(&w->st_prefetch);
}

void errand_worker_free(errand_worker *w)
{
    if (!w)
        return;
    if (w->ran && w->sync_ready) {
        pthread_mutex_lock(&w->mu);
        w->stopping = w->handlers_exit = true;
        pthread_cond_broadcast(&w->cv_work);
        pthread_mutex_unlock(&w->mu);
    }
    for (int i = 0; i < w->nhandlers; i++)
        pthread_join(w->handlers[i], NULL);
    free(w->handlers);
    while (w->q_head) {
        errand_job *j = w->q_head;
        w->q_head = j->qnext;
        er_job_unref(j);
    }
    if (w->sync_ready) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv_work);
        pthread_cond_destroy(&w->cv_fetch);
        pthread_cond_destroy(&w->cv_timer);
        pthread_cond_destroy(&w->cv_ack);
        pthread_cond_destroy(&w->cv_idle);
    }
    for (size_t i = 0; w->queues && i < w->nqueues; i++)
        free(w->queues[i]);
    free(w->queues);
    free(w->queue_weights);
    free(w->url), free(w->token), free(w->worker_id);
    er_ackq_fini(&w->acks);
    if (w->stop_pipe[0] >= 0)
        close(w->stop_pipe[0]);
    if (w->stop_pipe[1] >= 0)
        close(w->stop_pipe[1]);
    free(w);
}

/* ---- signals ------------------------------------------------------------------ */

static errand_worker *_Atomic sig_worker;
static atomic_int sig_ints;

static void on_signal(int sig)
{
    errand_worker *w = atomic_load(&sig_worker);
    if (sig == SIGQUIT || (sig == SIGINT && atomic_fetch_add(&sig_ints, 1) > 0))
        errand_worker_stop_now(w);
    else
        errand_worker_stop(w);
}

int errand_worker_install_signal_handlers(errand_worker *w)
{
    if (!w)
        return ERRAND_EINVAL;
    atomic_store(&sig_worker, w);
    atomic_store(&sig_ints, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0 ||
        sigaction(SIGQUIT, &sa, NULL) != 0)
        return ERRAND_EINVAL;
    return 0;
}
