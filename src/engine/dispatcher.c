/* SPDX-License-Identifier: MIT
 *
 * HTTP dispatch (dispatcher.h). libcurl's multi interface runs on the
 * event loop through its socket API: curl says which sockets to watch and
 * when to time out, libevent watches them and calls back. Each dispatch
 * queue has at most one fetch out (a long-poll, so new jobs go out at once)
 * and a window of requests in flight. Header values are never logged.
 */
#include "engine/dispatcher.h"
#include "core/http_outcome.h"
#include "core/trace.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/utf8.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_WINDOW 32        /* requests in flight per queue and node */
#define FETCH_WAIT_MS 1000     /* long-poll of a dispatch queue's fetch */
#define RETRY_MS 1000          /* after a fetch the store refused */
#define LEASE_MARGIN_MS 15000  /* the lease outlasts the request timeout by this */
#define CONNECT_MAX_MS 10000
#define MAX_REDIRECTS 5
#define ERROR_BODY_MAX 1024    /* body bytes kept in a failure's message */
#define TEXT_RESULT_MAX 4096   /* a 2xx body that is not JSON: kept as a string this long */

typedef struct dq {
    struct dq *next;
    er_dispatcher *d;
    char *name;
    er_dispatch cfg;   /* cfg.on false: no longer a dispatch queue */
    er_req *fetch;     /* the fetch out, NULL when none */
    int inflight;      /* leased and not yet acked */
    int64_t retry_at;  /* mono: no fetch before then (a refused fetch) */
    bool seen;         /* discovery mark */
} dq;

typedef struct delivery {
    struct delivery *prev, *next; /* in d->active while the request runs */
    er_dispatcher *d;
    dq *q;
    er_job job;        /* the leased job (owned) */
    er_dispatch cfg;   /* the target as leased */
    CURL *easy;
    struct curl_slist *headers;
    er_buf body;       /* the response's start */
    size_t body_bytes; /* all of it */
    char curl_err[CURL_ERROR_SIZE];
} delivery;

struct er_dispatcher {
    struct event_base *base;
    er_engine *engine;
    er_dispatcher_config cfg;
    char *node_id;
    CURLM *multi;
    struct event *timer, *discover, *pump_ev, *stop_ev, *grace;
    dq *queues;
    delivery *active;
    int64_t inflight;     /* requests running + acks out */
    bool listing;         /* a discovery is out */
    bool stopping;
    void (*on_stopped)(void *);
    void *stopped_arg;
    er_dispatcher_stats stats;
};

static void pump(er_dispatcher *d);

/* ---- logs: job facts as JSON members, never header values ---- */

static void log_job(int level, const er_job *job, const char *msg, long status,
                    const char *cls, const char *detail)
{
    if (level < er_log_level)
        return;
    json_t *o = json_pack("{s:s, s:s, s:i}", "job_id", job->id, "queue", job->queue, "attempt",
                          job->attempts);
    if (!o)
        return;
    if (job->trace_id)
        json_object_set_new(o, "trace_id", json_string(job->trace_id));
    if (status >= 0)
        json_object_set_new(o, "status", json_integer(status));
    if (cls)
        json_object_set_new(o, "class", json_string(cls));
    if (detail)
        json_object_set_new(o, "detail", json_string(detail));
    char *t = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!t)
        return;
    size_t n = strlen(t);
    t[n - 1] = '\0'; /* the members, without the braces */
    er_log_write(level, t + 1, "%s", msg);
    free(t);
}

/* ---- curl on the loop ---- */

static void check_done(er_dispatcher *d);

static void on_socket(evutil_socket_t fd, short what, void *arg)
{
    er_dispatcher *d = arg;
    int flags = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(d->multi, fd, flags, &running);
    check_done(d);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_dispatcher *d = arg;
    int running;
    curl_multi_socket_action(d->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(d);
}

/* CURLMOPT_SOCKETFUNCTION: watch s for what curl wants. */
static int socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)easy;
    er_dispatcher *d = userp;
    struct event *ev = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (ev)
            event_free(ev);
        curl_multi_assign(d->multi, s, NULL);
        return 0;
    }
    short kind = (short)(EV_PERSIST | (what & CURL_POLL_IN ? EV_READ : 0) |
                         (what & CURL_POLL_OUT ? EV_WRITE : 0));
    if (ev) {
        event_del(ev);
        event_assign(ev, d->base, s, kind, on_socket, d);
    } else {
        ev = event_new(d->base, s, kind, on_socket, d);
        if (!ev)
            return -1;
        curl_multi_assign(d->multi, s, ev);
    }
    event_add(ev, NULL);
    return 0;
}

/* CURLMOPT_TIMERFUNCTION: one timer for the whole multi handle. */
static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    er_dispatcher *d = userp;
    if (timeout_ms < 0) {
        evtimer_del(d->timer);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(d->timer, &tv);
    return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    delivery *dl = arg;
    size_t len = size * n;
    dl->body_bytes += len;
    size_t room = dl->body.max - dl->body.len;
    er_buf_add(&dl->body, p, len < room ? len : room);
    return len; /* read it all, keep the start */
}

/* ---- the request ---- */

static int add_header(struct curl_slist **l, const char *name, const char *value)
{
    char line[ER_DISPATCH_HEADER_NAME_MAX + ER_DISPATCH_HEADER_VALUE_MAX + 300];
    /* "Name;" sends an empty value ("Name:" would remove the header) */
    if (*value)
        snprintf(line, sizeof line, "%s: %s", name, value);
    else
        snprintf(line, sizeof line, "%s;", name);
    struct curl_slist *n = curl_slist_append(*l, line);
    if (!n)
        return ER_ENOMEM;
    *l = n;
    return 0;
}

static int build_headers(delivery *dl)
{
    const er_job *job = &dl->job;
    char attempt[16], tp[64];
    snprintf(attempt, sizeof attempt, "%d", job->attempts);
    int rc = add_header(&dl->headers, "Content-Type", "application/json");
    struct curl_slist *n = rc == 0 ? curl_slist_append(dl->headers, "Expect:") : NULL;
    if (n) /* "Expect:" sends none: no 100-continue round trip */
        dl->headers = n;
    else
        rc = ER_ENOMEM;
    if (rc == 0) /* stable across retries: the key, or the id when the job has none */
        rc = add_header(&dl->headers, "Idempotency-Key",
                        job->idempotency_key ? job->idempotency_key : job->id);
    if (rc == 0)
        rc = add_header(&dl->headers, "X-Errand-Job-Id", job->id);
    if (rc == 0)
        rc = add_header(&dl->headers, "X-Errand-Attempt", attempt);
    if (dl->cfg.trusted) {
        if (rc == 0 && er_trace_header(job->trace_id, job->id, job->attempts, tp))
            rc = add_header(&dl->headers, "traceparent", tp);
        for (int i = 0; rc == 0 && i < dl->cfg.nheaders; i++)
            rc = add_header(&dl->headers, dl->cfg.headers[i].name, dl->cfg.headers[i].value);
    }
    return rc;
}

static int64_t lease_for(const er_dispatch *cfg)
{
    int64_t l = cfg->timeout_ms + LEASE_MARGIN_MS;
    return l < ER_LEASE_MIN_MS ? ER_LEASE_MIN_MS : l > ER_LEASE_MAX_MS ? ER_LEASE_MAX_MS : l;
}

static int setup_easy(delivery *dl)
{
    CURL *c = dl->easy;
    const er_dispatch *cfg = &dl->cfg;
    /* the job's own timeout too, when shorter: the lease covers the target's */
    long timeout = (long)cfg->timeout_ms;
    if (dl->job.timeout_ms > 0 && dl->job.timeout_ms < timeout)
        timeout = (long)dl->job.timeout_ms;
    int bad = 0;
    bad |= curl_easy_setopt(c, CURLOPT_URL, cfg->url);
    bad |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    bad |= curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    bad |= curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, cfg->follow_redirects ? 1L : 0L);
    bad |= curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)MAX_REDIRECTS);
    bad |= curl_easy_setopt(c, CURLOPT_POSTREDIR, (long)CURL_REDIR_POST_ALL);
    bad |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout);
    bad |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                            timeout < CONNECT_MAX_MS ? timeout : (long)CONNECT_MAX_MS);
    bad |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    bad |= curl_easy_setopt(c, CURLOPT_POST, 1L);
    if (cfg->method != ER_DISPATCH_POST)
        bad |= curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, er_dispatch_method_name(cfg->method));
    bad |= curl_easy_setopt(c, CURLOPT_POSTFIELDS, dl->job.payload);
    bad |= curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)dl->job.payload_len);
    bad |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, dl->headers);
    bad |= curl_easy_setopt(c, CURLOPT_USERAGENT, "errand/" ER_VERSION);
    bad |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    bad |= curl_easy_setopt(c, CURLOPT_WRITEDATA, dl);
    bad |= curl_easy_setopt(c, CURLOPT_ERRORBUFFER, dl->curl_err);
    bad |= curl_easy_setopt(c, CURLOPT_PRIVATE, dl);
    return bad ? ER_EINTERNAL : 0;
}

static void delivery_free(delivery *dl)
{
    if (dl->easy)
        curl_easy_cleanup(dl->easy);
    curl_slist_free_all(dl->headers);
    er_buf_fini(&dl->body);
    er_job_fini(&dl->job);
    free(dl);
}

/* ---- acks ---- */

static void ack_done(er_req *r)
{
    delivery *dl = r->arg;
    er_dispatcher *d = dl->d;
    const er_ack *a = &r->acks[0];
    int rc = r->rc < 0 ? r->rc : a->rc;
    if (rc < 0)
        log_job(ER_LOG_WARN, &dl->job, "dispatch outcome not recorded", -1, NULL,
                r->rc < 0 ? r->err.message : a->err.message);
    dl->q->inflight--;
    d->inflight--;
    delivery_free(dl);
    er_req_free(r);
    pump(d);
}

/* Sends the outcome of dl's job (takes ack's contents). */
static void send_ack(delivery *dl, er_ack *ack)
{
    er_dispatcher *d = dl->d;
    er_req *r = er_req_new(ER_REQ_ACKS);
    if (r)
        r->acks = calloc(1, sizeof *r->acks);
    ack->id = strdup(dl->job.id);
    ack->token = strdup(dl->job.lease_token ? dl->job.lease_token : "");
    if (!r || !r->acks || !ack->id || !ack->token) {
        /* the lease runs out and the job comes back: logged, not lost */
        log_job(ER_LOG_ERROR, &dl->job, "dispatch: out of memory for an outcome", -1, NULL, NULL);
        er_ack_fini(ack);
        er_req_free(r);
        dl->q->inflight--;
        d->inflight--;
        delivery_free(dl);
        return;
    }
    r->acks[0] = *ack;
    r->nacks = 1;
    r->arg = dl;
    r->done = ack_done;
    er_engine_submit(d->engine, r);
}

static void release(delivery *dl)
{
    er_ack a = {.kind = ER_ACK_RELEASE};
    dl->d->stats.released++;
    send_ack(dl, &a);
}

/* The body's start as a JSON string value (valid UTF-8, at most max bytes). */
static json_t *body_string(const delivery *dl, size_t max)
{
    size_t n = dl->body.len < max ? dl->body.len : max;
    char *t = malloc(n + 1);
    if (!t)
        return NULL;
    er_utf8_copy(t, n + 1, dl->body.data ? dl->body.data : "", n);
    json_t *s = json_string(t);
    free(t);
    return s;
}

/* A 2xx body as the job's result: none when empty; the JSON it holds when
 * it is JSON within the limit; else a JSON string of its start. */
static char *result_of(const delivery *dl)
{
    if (dl->body_bytes == 0)
        return NULL;
    json_t *v = NULL;
    if (dl->body_bytes == dl->body.len)
        v = json_loadb(dl->body.data, dl->body.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                       NULL);
    if (!v)
        v = body_string(dl, TEXT_RESULT_MAX);
    char *t = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    if (t && strlen(t) > dl->d->cfg.result_max) { /* escapes can grow a string */
        free(t);
        t = strdup("\"(result over the size limit)\"");
    }
    return t;
}

static void finish_delivery(delivery *dl, CURLcode cc)
{
    er_dispatcher *d = dl->d;
    long status = 0;
    if (cc == CURLE_OK)
        curl_easy_getinfo(dl->easy, CURLINFO_RESPONSE_CODE, &status);
    struct curl_header *h = NULL;
    const char *retry_after = NULL;
    if (cc == CURLE_OK &&
        curl_easy_header(dl->easy, "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK)
        retry_after = h->value;
    int64_t delay = 0;
    er_http_class cls = er_http_classify(status, retry_after, er_now_ms(), ER_HTTP_DELAY_MAX_MS,
                                         &delay);
    d->stats.requests++;
    d->stats.by_class[cls]++;
    er_ack a = {.kind = cls == ER_HTTP_SUCCESS ? ER_ACK_COMPLETE : ER_ACK_FAIL};
    char msg[ERROR_BODY_MAX + 300]; /* < ER_FAILURE_MESSAGE_MAX: never cut there */
    if (cls == ER_HTTP_SUCCESS) {
        a.result = result_of(dl);
    } else {
        static const er_error_class map[] = {
            [ER_HTTP_TRANSIENT] = ER_ERR_TRANSIENT,
            [ER_HTTP_PERMANENT] = ER_ERR_PERMANENT,
            [ER_HTTP_RETRY_LATER] = ER_ERR_RETRY_LATER,
            [ER_HTTP_THROTTLED] = ER_ERR_THROTTLED,
        };
        a.failure.cls = map[cls];
        a.failure.delay_ms = cls == ER_HTTP_RETRY_LATER ? delay : 0;
        a.failure.retry_after_ms = cls == ER_HTTP_THROTTLED ? delay : 0;
        if (cc != CURLE_OK) {
            snprintf(msg, sizeof msg, "dispatch: %s", dl->curl_err[0] ? dl->curl_err
                                                                      : curl_easy_strerror(cc));
        } else {
            json_t *s = body_string(dl, ERROR_BODY_MAX);
            bool any = s && json_string_length(s) > 0;
            snprintf(msg, sizeof msg, "HTTP %ld%s%s", status, any ? ": " : "",
                     any ? json_string_value(s) : "");
            json_decref(s);
            /* 2 KiB, escaped, stays within the backtrace limit */
            json_t *bt = json_pack("{s:i, s:o}", "http_status", (int)status, "body",
                                   body_string(dl, 2 * ERROR_BODY_MAX));
            a.failure.backtrace = bt ? json_dumps(bt, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            json_decref(bt);
        }
        a.failure.message = strdup(msg);
    }
    log_job(cls == ER_HTTP_SUCCESS ? ER_LOG_DEBUG : ER_LOG_INFO, &dl->job, "dispatched",
            cc == CURLE_OK ? status : 0, er_http_class_name(cls),
            cc == CURLE_OK ? NULL : curl_easy_strerror(cc));
    send_ack(dl, &a);
}

static void unlink_active(er_dispatcher *d, delivery *dl)
{
    if (dl->prev)
        dl->prev->next = dl->next;
    else
        d->active = dl->next;
    if (dl->next)
        dl->next->prev = dl->prev;
    dl->prev = dl->next = NULL;
    curl_multi_remove_handle(d->multi, dl->easy);
}

static void check_done(er_dispatcher *d)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(d->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        delivery *dl = NULL;
        CURLcode cc = m->data.result;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&dl);
        unlink_active(d, dl);
        finish_delivery(dl, cc);
    }
}

/* Starts the request for a leased job (takes *job). */
static void deliver(er_dispatcher *d, dq *q, er_job *job)
{
    delivery *dl = calloc(1, sizeof *dl);
    if (!dl) {
        er_job_fini(job);
        return; /* the lease runs out and the job comes back */
    }
    dl->d = d;
    dl->q = q;
    dl->job = *job;
    er_job_init(job);
    dl->cfg = q->cfg;
    er_buf_init(&dl->body, d->cfg.result_max + 1);
    q->inflight++;
    d->inflight++;
    if (d->stopping || !dl->cfg.on) {
        release(dl);
        return;
    }
    dl->easy = curl_easy_init();
    int rc = dl->easy ? build_headers(dl) : ER_ENOMEM;
    if (rc == 0)
        rc = setup_easy(dl);
    if (rc == 0 && curl_multi_add_handle(d->multi, dl->easy) != CURLM_OK)
        rc = ER_EINTERNAL;
    if (rc < 0) {
        log_job(ER_LOG_ERROR, &dl->job, "dispatch: cannot start the request", -1, NULL, NULL);
        release(dl);
        return;
    }
    dl->next = d->active;
    if (d->active)
        d->active->prev = dl;
    d->active = dl;
}

/* ---- leasing ---- */

static void fetch_done(er_req *r)
{
    dq *q = r->arg;
    er_dispatcher *d = q->d;
    q->fetch = NULL;
    if (r->rc < 0) {
        q->retry_at = er_mono_ms() + RETRY_MS;
        if (r->rc != ER_EUNAVAIL || !d->stopping)
            ER_LOG(ER_LOG_WARN, NULL, "dispatch: fetch of queue %s failed: %s", q->name,
                   r->err.message);
    }
    for (size_t i = 0; i < r->list.len; i++)
        deliver(d, q, &r->list.items[i]);
    er_req_free(r);
    pump(d);
}

static void stop_check(er_dispatcher *d)
{
    if (!d->stopping || d->inflight > 0 || !d->on_stopped)
        return;
    for (dq *q = d->queues; q; q = q->next)
        if (q->fetch)
            return;
    event_active(d->stop_ev, EV_TIMEOUT, 0);
}

static void pump(er_dispatcher *d)
{
    int64_t now = er_mono_ms(), next_retry = 0;
    for (dq *q = d->queues; q && !d->stopping; q = q->next) {
        if (!q->cfg.on || q->fetch)
            continue;
        if (q->retry_at > now) {
            if (!next_retry || q->retry_at < next_retry)
                next_retry = q->retry_at;
            continue;
        }
        int64_t room = d->cfg.max_inflight - d->inflight;
        if (room > QUEUE_WINDOW - q->inflight)
            room = QUEUE_WINDOW - q->inflight;
        if (room <= 0)
            continue;
        er_req *r = er_req_new(ER_REQ_FETCH);
        char **names = calloc(1, sizeof *names);
        if (r && names && (names[0] = strdup(q->name)) &&
            (r->fetch.worker_id = strdup(d->node_id))) {
            r->fetch.queues = names;
            r->fetch.nqueues = 1;
            names = NULL;
        } else {
            if (names)
                free(names[0]);
            free(names);
            er_req_free(r);
            q->retry_at = now + RETRY_MS;
            continue;
        }
        r->fetch.max = (int)room;
        r->fetch.wait_ms = FETCH_WAIT_MS;
        r->fetch.lease_ms = lease_for(&q->cfg);
        r->fetch.dispatcher = true;
        r->arg = q;
        r->done = fetch_done;
        q->fetch = r;
        er_engine_submit(d->engine, r);
    }
    if (next_retry) {
        int64_t ms = next_retry - now;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(d->pump_ev, &tv);
    }
    stop_check(d);
}

/* ---- discovery ---- */

static dq *find_queue(er_dispatcher *d, const char *name)
{
    for (dq *q = d->queues; q; q = q->next)
        if (strcmp(q->name, name) == 0)
            return q;
    return NULL;
}

/* Records queue's target (on or off); ENOMEM skips it until next time. */
static void note_queue(er_dispatcher *d, const char *name, const er_dispatch *cfg)
{
    dq *q = find_queue(d, name);
    if (!q && cfg->on) {
        q = calloc(1, sizeof *q);
        if (!q || !(q->name = strdup(name))) {
            free(q);
            return;
        }
        q->d = d;
        q->next = d->queues;
        d->queues = q;
        d->stats.queues++;
        ER_LOG(ER_LOG_INFO, NULL, "dispatch: delivering queue %s", name);
    }
    if (!q)
        return;
    if (q->cfg.on && !cfg->on)
        ER_LOG(ER_LOG_INFO, NULL, "dispatch: queue %s no longer dispatched", name);
    q->cfg = *cfg;
    q->seen = true;
}

static void list_done(er_req *r)
{
    er_dispatcher *d = r->arg;
    d->listing = false;
    if (r->rc == 0) {
        for (dq *q = d->queues; q; q = q->next)
            q->seen = false;
        const char **names = calloc(r->nqueue_infos + 1, sizeof *names);
        size_t n = 0;
        for (size_t i = 0; i < r->nqueue_infos; i++) {
            const er_queue_info *qi = &r->queue_infos[i];
            note_queue(d, qi->name, &qi->settings.dispatch);
            if (qi->settings.dispatch.on && names)
                names[n++] = qi->name;
        }
        static const er_dispatch off;
        for (dq *q = d->queues; q; q = q->next)
            if (!q->seen && q->cfg.on)
                note_queue(d, q->name, &off);
        if (names)
            er_engine_set_dispatch_queues(d->engine, names, n);
        free(names);
    } else if (r->rc != ER_EUNAVAIL) {
        ER_LOG(ER_LOG_WARN, NULL, "dispatch: reading queue settings failed: %s", r->err.message);
    }
    er_req_free(r);
    pump(d);
}

static void on_discover(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_dispatcher *d = arg;
    if (d->stopping || d->listing)
        return;
    er_req *r = er_req_new(ER_REQ_LIST_SETTINGS);
    if (!r)
        return;
    r->arg = d;
    r->done = list_done;
    d->listing = true;
    er_engine_submit(d->engine, r);
}

/* A settings change this node answered: noticed at once. */
static void on_settings(void *arg, const char *queue, const er_queue_settings *s)
{
    er_dispatcher *d = arg;
    note_queue(d, queue, &s->dispatch);
    pump(d);
}

static void on_pump(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pump(arg);
}

/* ---- stopping ---- */

static void on_stop_ev(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_dispatcher *d = arg;
    if (!d->on_stopped || d->inflight > 0)
        return;
    for (dq *q = d->queues; q; q = q->next)
        if (q->fetch)
            return;
    evtimer_del(d->grace);
    void (*cb)(void *) = d->on_stopped;
    d->on_stopped = NULL;
    cb(d->stopped_arg);
}

static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_dispatcher *d = arg;
    /* the grace period is over: cut the requests still running and give
     * their jobs back */
    while (d->active) {
        delivery *dl = d->active;
        unlink_active(d, dl);
        log_job(ER_LOG_WARN, &dl->job, "dispatch: request cut at shutdown, job released", -1,
                NULL, NULL);
        release(dl);
    }
    stop_check(d);
}

void er_dispatcher_stop(er_dispatcher *d, int64_t grace_ms, void (*on_stopped)(void *arg),
                        void *arg)
{
    d->stopping = true;
    d->on_stopped = on_stopped;
    d->stopped_arg = arg;
    evtimer_del(d->discover);
    evtimer_del(d->pump_ev);
    for (dq *q = d->queues; q; q = q->next)
        if (q->fetch)
            er_engine_abandon(d->engine, q->fetch);
    struct timeval tv = {grace_ms / 1000, (grace_ms % 1000) * 1000};
    evtimer_add(d->grace, &tv);
    stop_check(d);
}

/* ---- life ---- */

int er_dispatcher_start(struct event_base *base, er_engine *engine,
                        const er_dispatcher_config *cfg, er_dispatcher **out, er_error *err)
{
    er_dispatcher *d = calloc(1, sizeof *d);
    if (!d)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    d->base = base;
    d->engine = engine;
    d->cfg = *cfg;
    if (d->cfg.discover_ms <= 0)
        d->cfg.discover_ms = 1000;
    if (d->cfg.max_inflight <= 0)
        d->cfg.max_inflight = 64;
    d->node_id = strdup(cfg->node_id ? cfg->node_id : "errand");
    d->cfg.node_id = NULL;
    d->multi = curl_multi_init();
    d->timer = evtimer_new(base, on_timer, d);
    d->discover = event_new(base, -1, EV_PERSIST, on_discover, d);
    d->pump_ev = evtimer_new(base, on_pump, d);
    d->stop_ev = event_new(base, -1, 0, on_stop_ev, d);
    d->grace = evtimer_new(base, on_grace, d);
    if (!d->node_id || !d->multi || !d->timer || !d->discover || !d->pump_ev || !d->stop_ev ||
        !d->grace) {
        er_dispatcher_free(d);
        return er_error_set(err, ER_ENOMEM, "", "out of memory starting HTTP dispatch");
    }
    curl_multi_setopt(d->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(d->multi, CURLMOPT_SOCKETDATA, d);
    curl_multi_setopt(d->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(d->multi, CURLMOPT_TIMERDATA, d);
    struct timeval tv = {d->cfg.discover_ms / 1000, (d->cfg.discover_ms % 1000) * 1000};
    event_add(d->discover, &tv);
    event_active(d->discover, EV_TIMEOUT, 0); /* discover at once */
    er_engine_on_settings(engine, on_settings, d);
    *out = d;
    return 0;
}

void er_dispatcher_get_stats(const er_dispatcher *d, er_dispatcher_stats *out)
{
    *out = d->stats;
    out->inflight = d->inflight;
}

void er_dispatcher_free(er_dispatcher *d)
{
    if (!d)
        return;
    if (d->engine)
        er_engine_on_settings(d->engine, NULL, NULL);
    while (d->active) {
        delivery *dl = d->active;
        unlink_active(d, dl);
        delivery_free(dl);
    }
    while (d->queues) {
        dq *q = d->queues;
        d->queues = q->next;
        free(q->name);
        free(q);
    }
    if (d->multi)
        curl_multi_cleanup(d->multi);
    struct event *evs[] = {d->timer, d->discover, d->pump_ev, d->stop_ev, d->grace};
    for (size_t i = 0; i < sizeof evs / sizeof *evs; i++)
        if (evs[i])
            event_free(evs[i]);
    free(d->node_id);
    free(d);
}
