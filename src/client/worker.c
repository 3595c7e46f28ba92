/* SPDX-License-Identifier: MIT
 *
 * liberrand's worker runtime (errand.h, docs/workers.md): `concurrency`
 * handler threads fed from a local queue, two fetcher threads that keep up
 * to concurrency + prefetch jobs leased (counting what fetches in flight
 * asked for) and carry pending outcomes on their fetches, one acker thread
 * that sends outcomes as they come, and one timer thread for lease
 * heartbeats and job timeouts. One mutex guards the shared state; every
 * network call is made without it, each thread on its own client (own
 * connection). Replies and acks are read and written as text (fetched.c),
 * not jansson trees. It never prints: logs go to the configured callback.
 */
#include "client/worker_int.h"
#include "util/clock.h"
#include "util/jsonw.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ACKS 1000     /* the API's limit per request */
#define MAX_FETCH 1000    /* the API's fetch max */
#define ACK_DELAY_MS 2    /* longest wait of an outcome for others to batch with */
#define ACK_BATCH 256     /* or send as soon as this many are pending */
#define ERR_BACKOFF_MIN 100
#define ERR_BACKOFF_MAX 5000
#define FLUSH_GIVE_UP_MS 10000 /* at shutdown, stop retrying acks after this long */

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

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_mono)
{
    struct timespec ts;
    int64_t ms = until_mono;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

static int64_t backoff_next(int64_t cur)
{
    return cur <= 0 ? ERR_BACKOFF_MIN : (cur * 2 > ERR_BACKOFF_MAX ? ERR_BACKOFF_MAX : cur * 2);
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
static void log_client_error(errand_worker *w, int level, const char *msg, errand_client *c)
{
    const errand_error *e = errand_last_error(c);
    er_worker_log(w, level, json_pack("{s:s,s:s,s:s,s:I}", "msg", msg, "error", e->code_name,
                                      "message", e->message, "http_status",
                                      (json_int_t)e->http_status));
}

/* ---- configuration ------------------------------------------------------ */

void errand_worker_config_init(errand_worker_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->prefetch = -1;
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
    w->concurrency = cfg->concurrency ? cfg->concurrency : 1;
    if (w->concurrency < 1 || w->concurrency > 1000)
        return cfg_error(eb, en, "concurrency must be 1..1000 (got %d)", cfg->concurrency);
    w->prefetch = cfg->prefetch < 0 ? w->concurrency : cfg->prefetch;
    if (cfg->prefetch > 10000)
        return cfg_error(eb, en, "prefetch must be 0..10000 (got %d)", cfg->prefetch);
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

/* ---- jobs --------------------------------------------------------------- */

void er_job_unref(errand_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    free(j->msg);
    free(j->result);
    free(j); /* its strings live in the same block */
}

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

void er_ack_item(const errand_job *j, const char *kind, const char *body, er_buf *b)
{
    er_buf_reset(b);
    er_buf_adds(b, "{\"id\":");
    er_json_str(b, j->id);
    er_buf_adds(b, ",\"lease_token\":");
    er_json_str(b, j->token);
    er_buf_adds(b, ",\"");
    er_buf_adds(b, kind);
    er_buf_adds(b, "\":");
    er_buf_adds(b, body);
    er_buf_adds(b, "}");
}

/* Whether the acker should send now (locked). */
static bool acks_due_locked(errand_worker *w, int64_t now)
{
    return w->acks.n > 0 && (w->acker_force || w->fetch_parked || w->acks.n >= ACK_BATCH ||
                             now - w->acks_since >= ACK_DELAY_MS);
}

void er_push_ack_locked(errand_worker *w, const er_buf *b)
{
    if (b->err || !b->len || er_ackq_push(&w->acks, b->data, b->len) < 0) {
        w->acks_lost++; /* its lease expires and the job runs again; the acker logs it */
        if (w->ack_waiting)
            pthread_cond_signal(&w->cv_ack);
        return;
    }
    if (w->acks.n == 1)
        w->acks_since = er_mono_ms();
    /* The first item arms the acker's delay; later ones matter only when
     * they make a batch or nothing waits for a fetch to carry them. */
    if (w->ack_waiting && (w->acks.n == 1 || w->acks.n == ACK_BATCH || w->fetch_parked ||
                           w->acker_force))
        pthread_cond_signal(&w->cv_ack);
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

/* ---- sending outcomes ----------------------------------------------------- */

/* Logs the refused items of the results array `key` of a parsed reply. */
static void check_ack_results(errand_worker *w, const er_jscan *js, const char *text,
                              const char *key)
{
    long arr = er_jscan_get(js, text, 0, key);
    if (arr < 0 || js->tok[arr].type != ER_JS_ARRAY)
        return;
    for (size_t k = (size_t)arr + 1; k < js->tok[arr].next; k = js->tok[k].next) {
        if (er_jscan_get(js, text, (long)k, "error") < 0)
            continue;
        /* Rare: read the refused item with jansson to log it. */
        const er_jstok *t = &js->tok[k];
        json_t *r = json_loadb(text + t->start, t->end - t->start, 0, NULL);
        json_t *e = json_object_get(r, "error");
        er_worker_log(w, ERRAND_LOG_WARN,
                      json_pack("{s:s,s:s?,s:s?,s:s?}", "msg", "outcome refused by the server",
                                "job_id", json_string_value(json_object_get(r, "id")), "error",
                                json_string_value(json_object_get(e, "code")), "message",
                                json_string_value(json_object_get(e, "message"))));
        json_decref(r);
    }
}

/* Puts acks that could not be sent back in front (locked); takes acks. */
static void restore_acks_locked(errand_worker *w, er_ackq *acks)
{
    if (acks->n == 0) {
        er_ackq_fini(acks);
        return;
    }
    bool was_empty = w->acks.n == 0;
    if (er_ackq_prepend(&w->acks, acks) < 0) {
        w->acks_lost += (long)acks->n;
        er_ackq_fini(acks);
        return;
    }
    if (was_empty)
        w->acks_since = er_mono_ms();
    if (w->ack_waiting)
        pthread_cond_signal(&w->cv_ack);
}

/* POST /v1/acks; returns 0, a transport error (retry), or 1 when the server
 * refused the whole request (do not retry). Takes acks on 0 and 1; on an
 * error leaves in acks those still to send. js and body are scratch. */
static int send_acks(errand_worker *w, errand_client *c, er_ackq *acks, er_jscan *js,
                     er_buf *body)
{
    er_buf_reset(body);
    er_buf_adds(body, "{\"acks\":");
    er_ackq_write(acks, body);
    er_buf_adds(body, "}");
    if (body->err)
        return ERRAND_ENOMEM;
    char *text = NULL;
    size_t tlen = 0;
    int rc = er_client_call_text(c, "POST", "/v1/acks", body->data, &text, &tlen);
    if (rc == 0) {
        if (er_jscan_parse(js, text, tlen) == 0)
            check_ack_results(w, js, text, "results");
        free(text);
        atomic_fetch_add(&w->st_acks_sent, (long long)acks->n);
        er_ackq_fini(acks);
        return 0;
    }
    if (!(errand_last_status(c) >= 400 && errand_last_status(c) < 500))
        return rc;
    size_t n = acks->n;
    if (n > 1) {
        /* One bad item refuses the whole request: send them one by one,
         * so only the refused ones are dropped. */
        for (size_t i = 0; i < n; i++) {
            er_ackq one = {0};
            size_t len;
            const char *it = er_ackq_item(acks, i, &len);
            if (er_ackq_push(&one, it, len) < 0 || send_acks(w, c, &one, js, body) < 0) {
                er_ackq_fini(&one);
                /* The server went away meanwhile: keep the rest. */
                er_ackq done = {0};
                if (i > 0 && er_ackq_take(acks, i, &done) == 0)
                    er_ackq_fini(&done);
                return ERRAND_ECONNECT;
            }
        }
        er_ackq_fini(acks);
        return 1;
    }
    /* One item: rare, so read it with jansson. */
    size_t len = 0;
    const char *item = er_ackq_item(acks, 0, &len);
    json_t *it = json_loadb(item, len, 0, NULL);
    const char *id = json_string_value(json_object_get(it, "id"));
    if (errand_last_error(c)->code == ERRAND_ETOOBIG && json_object_get(it, "complete") && id) {
        /* The work is done but its result is over the server's limit:
         * a dead letter says so, where a silent re-run would not. */
        char msg[700];
        snprintf(msg, sizeof msg, "completed, but the result was refused: %s",
                 errand_last_error(c)->message);
        er_worker_log(w, ERRAND_LOG_ERROR,
                      json_pack("{s:s,s:s,s:s}", "msg", "result refused; failing the job "
                                "permanently", "job_id", id, "message", msg));
        json_t *fail = json_pack("{s:O,s:O,s:{s:{s:s,s:s}}}", "id", json_object_get(it, "id"),
                                 "lease_token", json_object_get(it, "lease_token"), "fail",
                                 "error", "class", "permanent", "message", msg);
        char *ft = fail ? json_dumps(fail, JSON_COMPACT) : NULL;
        json_decref(fail);
        er_ackq one = {0};
        int orc = ft ? er_ackq_push(&one, ft, strlen(ft)) : ERRAND_ENOMEM;
        free(ft);
        if (orc == 0 && send_acks(w, c, &one, js, body) < 0) {
            er_ackq_fini(&one);
            json_decref(it);
            return ERRAND_ECONNECT;
        }
        er_ackq_fini(&one);
    } else {
        const errand_error *e = errand_last_error(c);
        er_worker_log(w, ERRAND_LOG_ERROR,
                      json_pack("{s:s,s:s?,s:s,s:s}", "msg",
                                "outcome refused; the job's lease will expire and it will "
                                "run again",
                                "job_id", id, "error", e->code_name, "message", e->message));
    }
    json_decref(it);
    er_ackq_fini(acks);
    return 1;
}

/* ---- threads ------------------------------------------------------------ */

static errand_client *thread_client(errand_worker *w, long total_ms)
{
    errand_client *c = NULL;
    if (errand_client_new(w->url, w->token, &c) < 0)
        return NULL;
    errand_client_set_timeouts(c, 5000, total_ms);
    return c;
}

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
    restore_acks_locked(w, &rel); /* the acker or the final flush sends them first */
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
    if (acks->n) {
        er_buf_adds(b, ",\"acks\":");
        er_ackq_write(acks, b);
    }
    er_buf_adds(b, "}");
}

/* Wakes one idle handler when jobs wait and no wake-up is under way
 * (locked). A woken handler that leaves jobs behind wakes the next one, so
 * threads are woken as fast as they take jobs, not all at once per batch. */
static void wake_handler_locked(errand_worker *w)
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
    wake_handler_locked(w);
    return n;
}

static void *fetcher_main(void *arg)
{
    errand_worker *w = arg;
    errand_client *c = thread_client(w, w->poll_wait_ms + 30000);
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
        } else if (w->acks.n > 0 && er_ackq_take(&w->acks, MAX_ACKS, &acks) < 0) {
            memset(&acks, 0, sizeof acks); /* the acker sends them */
        }
        pthread_mutex_unlock(&w->mu);

        fetch_body(w, max, wait, &acks, &body);
        char *text = NULL;
        size_t tlen = 0;
        int rc = body.err ? ERRAND_ENOMEM
                          : er_client_call_text(c, "POST", "/v1/fetch", body.data, &text, &tlen);
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
                check_ack_results(w, &js, text, "acks");
                atomic_fetch_add(&w->st_acks_sent, (long long)acks.n);
            }
            er_ackq_fini(&acks);
        } else {
            log_client_error(w, ERRAND_LOG_WARN, "fetch failed; retrying", c);
            long hs = errand_last_status(c);
            if (acks.n && hs >= 400 && hs < 500) {
                /* A refused request applied nothing; resend the outcomes alone. */
                if (send_acks(w, c, &acks, &js, &body) >= 0)
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
        restore_acks_locked(w, &acks);
        if (rc < 0) {
            backoff = backoff_next(backoff);
            timed_wait(&w->cv_fetch, &w->mu, er_mono_ms() + backoff);
            continue;
        }
        backoff = 0;
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

/* Logs n outcomes that will not be sent (their jobs come back when their
 * leases expire), without holding the mutex; called and returns locked. */
static void log_dropped_locked(errand_worker *w, const char *why, size_t n)
{
    pthread_mutex_unlock(&w->mu);
    char msg[160];
    snprintf(msg, sizeof msg, "%s; those jobs will be redelivered when their leases expire", why);
    er_worker_log(w, ERRAND_LOG_ERROR, json_pack("{s:s,s:I}", "msg", msg, "count", (json_int_t)n));
    pthread_mutex_lock(&w->mu);
}

/* Sends outcomes as they come (batched by ACK_DELAY_MS and by the previous
 * send's round trip), and everything at the end. */
static void *acker_main(void *arg)
{
    errand_worker *w = arg;
    errand_client *c = thread_client(w, 30000);
    er_jscan js;
    er_jscan_init(&js);
    er_buf body;
    er_buf_init(&body, ER_WK_BODY_MAX);
    int64_t backoff = 0, failing_since = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        if (w->acks_lost > 0) {
            long lost = w->acks_lost;
            w->acks_lost = 0;
            log_dropped_locked(w, "out of memory: outcomes dropped", (size_t)lost);
            continue;
        }
        if (w->acks.n == 0 && w->acker_exit)
            break;
        int64_t now = er_mono_ms();
        if (!acks_due_locked(w, now)) {
            w->ack_waiting = true;
            if (w->acks.n > 0)
                timed_wait(&w->cv_ack, &w->mu, w->acks_since + ACK_DELAY_MS);
            else
                pthread_cond_wait(&w->cv_ack, &w->mu);
            w->ack_waiting = false;
            continue;
        }
        er_ackq acks = {0};
        if (er_ackq_take(&w->acks, MAX_ACKS, &acks) < 0) {
            timed_wait(&w->cv_ack, &w->mu, now + ERR_BACKOFF_MIN);
            continue;
        }
        if (w->acks.n)
            w->acks_since = now;
        pthread_mutex_unlock(&w->mu);
        int rc = c ? send_acks(w, c, &acks, &js, &body) : ERRAND_ENOMEM;
        if (rc < 0 && c)
            log_client_error(w, ERRAND_LOG_WARN, "sending outcomes failed; retrying", c);
        pthread_mutex_lock(&w->mu);
        if (rc >= 0) {
            backoff = failing_since = 0;
            continue;
        }
        now = er_mono_ms();
        if (!failing_since)
            failing_since = now;
        if (w->acker_exit && now - failing_since > FLUSH_GIVE_UP_MS) {
            /* Their leases will expire and the jobs run again: at-least-once holds. */
            size_t n = acks.n;
            er_ackq_fini(&acks);
            log_dropped_locked(w, "giving up sending outcomes at shutdown", n);
            continue;
        }
        restore_acks_locked(w, &acks);
        backoff = backoff_next(backoff);
        timed_wait(&w->cv_ack, &w->mu, now + backoff);
    }
    pthread_mutex_unlock(&w->mu);
    errand_client_free(c);
    er_jscan_fini(&js);
    er_buf_fini(&body);
    return NULL;
}

static void *handler_main(void *arg)
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
        wake_handler_locked(w);
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

        int rc = w->handler(j, w->user);
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

static void *timer_main(void *arg)
{
    errand_worker *w = arg;
    errand_client *c = thread_client(w, w->lease_ms / 3 > 10000 ? 10000 : w->lease_ms / 3 + 1000);
    const int64_t interval = w->lease_ms / 3;
    enum { BATCH = 64 };
    pthread_mutex_lock(&w->mu);
    while (!w->timer_exit) {
        int64_t now = er_mono_ms();
        int64_t next = now + 1000;
        errand_job *hb[BATCH], *notify[BATCH];
        int nhb = 0, nnotify = 0;
        for (errand_job *j = w->held.lnext; j != &w->held;) {
            errand_job *nx = j->lnext;
            if (j->where == ER_JOB_RUNNING) {
                if (atomic_load(&j->stop) == 0 && now >= j->deadline && nnotify < BATCH) {
                    atomic_store(&j->stop, ERRAND_STOP_TIMEOUT);
                    atomic_fetch_add(&w->st_timed_out, 1);
                    atomic_fetch_add(&j->refs, 1);
                    notify[nnotify++] = j;
                } else if (atomic_load(&j->stop) == ERRAND_STOP_TIMEOUT && now >= j->abandon_at) {
                    er_worker_abandon_locked(w, j);
                    j = nx;
                    continue;
                }
                int64_t due = atomic_load(&j->stop) == 0 ? j->deadline : j->abandon_at;
                if (due < next)
                    next = due;
            }
            if (!j->hb_busy && now >= j->next_hb && nhb < BATCH) {
                j->hb_busy = true;
                atomic_fetch_add(&j->refs, 1);
                hb[nhb++] = j;
            } else if (!j->hb_busy && j->next_hb < next) {
                next = j->next_hb;
            }
            j = nx;
        }
        if (nhb == 0 && nnotify == 0) {
            w->timer_sleeping = true;
            w->timer_wake = next;
            timed_wait(&w->cv_timer, &w->mu, next);
            w->timer_sleeping = false;
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        for (int i = 0; i < nnotify; i++) {
            er_worker_log(w, ERRAND_LOG_WARN,
                          json_pack("{s:s,s:s,s:s,s:I}", "msg", "job timed out", "job_id",
                                    notify[i]->id, "queue", notify[i]->queue, "timeout_ms",
                                    (json_int_t)notify[i]->timeout_used));
            if (w->on_stop)
                w->on_stop(notify[i], ERRAND_STOP_TIMEOUT, w->stop_user);
        }
        int hrc[BATCH];
        for (int i = 0; i < nhb; i++) {
            hrc[i] = c ? errand_heartbeat(c, hb[i]->id, hb[i]->token, w->lease_ms, NULL, NULL)
                       : ERRAND_ENOMEM;
            if (hrc[i] < 0 && hrc[i] != ERRAND_ESTALE && c)
                log_client_error(w, ERRAND_LOG_WARN, "heartbeat failed; retrying", c);
        }
        errand_job *lost[BATCH];
        int lost_kind[BATCH];
        int nlost = 0;
        pthread_mutex_lock(&w->mu);
        int64_t after = er_mono_ms();
        for (int i = 0; i < nhb; i++) {
            errand_job *j = hb[i];
            j->hb_busy = false;
            if (hrc[i] == 0) {
                j->next_hb = after + interval;
            } else if (hrc[i] == ERRAND_ESTALE || hrc[i] == ERRAND_ENOTFOUND) {
                int kind = er_worker_lose_locked(w, j);
                if (kind) {
                    lost_kind[nlost] = kind;
                    lost[nlost++] = j; /* keeps the heartbeat's reference */
                } else {
                    er_job_unref(j);
                }
                continue;
            } else {
                j->next_hb = after + 1000;
            }
            er_job_unref(j);
        }
        pthread_mutex_unlock(&w->mu);
        for (int i = 0; i < nlost; i++) {
            er_worker_log(w, ERRAND_LOG_WARN,
                          json_pack("{s:s,s:s,s:s}", "msg", "lease lost; the job must stop",
                                    "job_id", lost[i]->id, "queue", lost[i]->queue));
            if (lost_kind[i] == 2 && w->on_stop)
                w->on_stop(lost[i], ERRAND_STOP_LEASE_LOST, w->stop_user);
            er_job_unref(lost[i]);
        }
        for (int i = 0; i < nnotify; i++)
            er_job_unref(notify[i]);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    errand_client_free(c);
    return NULL;
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

static int start_thread(errand_worker *w, pthread_t *t, void *(*fn)(void *))
{
    /* Worker threads leave SIGTERM/SIGINT to the thread that called run(). */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
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
        if ((rc = start_thread(w, &w->handlers[i], handler_main)) == 0)
            w->nhandlers++;
    if (rc == 0 && (rc = start_thread(w, &w->timer, timer_main)) == 0)
        w->timer_started = true;
    if (rc == 0 && (rc = start_thread(w, &w->acker, acker_main)) == 0)
        w->acker_started = true;
    for (int i = 0; rc == 0 && i < ER_FETCHERS; i++)
        if ((rc = start_thread(w, &w->fetchers[i], fetcher_main)) == 0)
            w->nfetchers++;
    if (rc == 0) {
        er_worker_log(w, ERRAND_LOG_INFO,
                      json_pack("{s:s,s:s,s:i,s:i,s:I,s:I,s:I}", "msg", "worker started",
                                "worker_id", w->worker_id, "concurrency", w->concurrency,
                                "prefetch", w->prefetch, "lease_ms", (json_int_t)w->lease_ms,
                                "timeout_ms", (json_int_t)w->timeout_ms, "grace_ms",
                                (json_int_t)w->grace_ms));
        wait_stop(w);
    }
    er_worker_shutdown(w);
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
static atomic_int sig_count;

static void on_signal(int sig)
{
    if (atomic_fetch_add(&sig_count, 1) > 0)
        _exit(128 + sig);
    errand_worker_stop(atomic_load(&sig_worker));
}

int errand_worker_install_signal_handlers(errand_worker *w)
{
    if (!w)
        return ERRAND_EINVAL;
    atomic_store(&sig_worker, w);
    atomic_store(&sig_count, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return ERRAND_EINVAL;
    return 0;
}
