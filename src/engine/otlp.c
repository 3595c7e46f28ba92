/* SPDX-License-Identifier: MIT
 *
 * The span exporter: a ring of pending spans under a mutex, and a thread
 * that takes a batch when it is full or ER_OTLP_FLUSH_MS after its first
 * span, writes the OTLP JSON request and POSTs it with libcurl.
 */
#include "engine/otlp.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/trace.h"
#include "util/clock.h"
#include "util/jsonw.h"
#include "util/log.h"

typedef struct span {
    char job_id[ER_ID_MAX + 1];
    er_ack_info info;
    int64_t end_ms;
    const char *outcome; /* static */
    bool error;
} span;

struct er_otlp {
    char *url;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    span *ring; /* ER_OTLP_QUEUE_MAX */
    size_t head, len;
    er_otlp_stats stats;
    int64_t last_error_log; /* monotonic ms of the last failure logged */
};

static void kv_str(er_jsonw *w, const char *k, const char *v)
{
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "key");
    er_jsonw_str(w, k);
    er_jsonw_key(w, "value");
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "stringValue");
    er_jsonw_str(w, v);
    er_jsonw_end_object(w);
    er_jsonw_end_object(w);
}

static void kv_int(er_jsonw *w, const char *k, int64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%lld", (long long)v);
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "key");
    er_jsonw_str(w, k);
    er_jsonw_key(w, "value");
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "intValue");
    er_jsonw_str(w, num); /* int64 is a string in OTLP JSON */
    er_jsonw_end_object(w);
    er_jsonw_end_object(w);
}

static void ns_str(er_jsonw *w, const char *k, int64_t ms)
{
    char num[32];
    snprintf(num, sizeof num, "%lld000000", (long long)(ms > 0 ? ms : 0));
    er_jsonw_key(w, k);
    er_jsonw_str(w, num);
}

static void write_span(er_jsonw *w, const span *sp)
{
    char trace[33], parent[17];
    er_trace_of(sp->info.trace_id[0] ? sp->info.trace_id : sp->job_id, trace, parent);
    char span_id[17];
    er_trace_span_id(sp->job_id, sp->info.attempt, span_id);
    char name[2 * ER_NAME_MAX + 8];
    snprintf(name, sizeof name, "%s %s", sp->info.queue, sp->info.name);
    int64_t start = sp->info.run_at > 0 && sp->info.run_at <= sp->end_ms ? sp->info.run_at
                    : sp->info.started_at > 0                             ? sp->info.started_at
                                                                          : sp->end_ms;
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "traceId");
    er_jsonw_str(w, trace);
    er_jsonw_key(w, "spanId");
    er_jsonw_str(w, span_id);
    if (parent[0]) {
        er_jsonw_key(w, "parentSpanId");
        er_jsonw_str(w, parent);
    }
    er_jsonw_key(w, "name");
    er_jsonw_str(w, name);
    er_jsonw_key(w, "kind");
    er_jsonw_int(w, 5); /* SPAN_KIND_CONSUMER */
    ns_str(w, "startTimeUnixNano", start);
    ns_str(w, "endTimeUnixNano", sp->end_ms);
    er_jsonw_key(w, "attributes");
    er_jsonw_begin_array(w);
    kv_str(w, "messaging.system", "errand");
    kv_str(w, "messaging.destination.name", sp->info.queue);
    kv_str(w, "errand.job.id", sp->job_id);
    kv_str(w, "errand.job.name", sp->info.name);
    kv_int(w, "errand.attempt", sp->info.attempt);
    kv_str(w, "errand.outcome", sp->outcome);
    if (sp->info.started_at > 0) {
        kv_int(w, "errand.wait_ms", sp->info.started_at - start);
        kv_int(w, "errand.run_ms", sp->end_ms - sp->info.started_at);
    }
    er_jsonw_end_array(w);
    if (sp->info.started_at > 0) {
        er_jsonw_key(w, "events");
        er_jsonw_begin_array(w);
        er_jsonw_begin_object(w);
        ns_str(w, "timeUnixNano", sp->info.started_at);
        er_jsonw_key(w, "name");
        er_jsonw_str(w, "leased");
        er_jsonw_end_object(w);
        er_jsonw_end_array(w);
    }
    er_jsonw_key(w, "status");
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "code");
    er_jsonw_int(w, sp->error ? 2 : 1); /* STATUS_CODE_ERROR : STATUS_CODE_OK */
    er_jsonw_end_object(w);
    er_jsonw_end_object(w);
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p;
    (void)arg;
    return size * n;
}

/* POSTs one batch; true when the collector answered 2xx. */
static bool post(er_otlp *o, CURL *curl, const span *spans, size_t n)
{
    er_jsonw w;
    er_jsonw_init(&w, (size_t)64 << 20);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "resourceSpans");
    er_jsonw_begin_array(&w);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "resource");
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "attributes");
    er_jsonw_begin_array(&w);
    kv_str(&w, "service.name", "errand");
    er_jsonw_end_array(&w);
    er_jsonw_end_object(&w);
    er_jsonw_key(&w, "scopeSpans");
    er_jsonw_begin_array(&w);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "scope");
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "name");
    er_jsonw_str(&w, "errand");
    er_jsonw_end_object(&w);
    er_jsonw_key(&w, "spans");
    er_jsonw_begin_array(&w);
    for (size_t i = 0; i < n; i++)
        write_span(&w, &spans[i]);
    er_jsonw_end_array(&w);
    er_jsonw_end_object(&w);
    er_jsonw_end_array(&w);
    er_jsonw_end_object(&w);
    er_jsonw_end_array(&w);
    er_jsonw_end_object(&w);
    bool ok = false;
    long status = 0;
    CURLcode cc = CURLE_OUT_OF_MEMORY;
    if (!w.failed) {
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_reset(curl);
        curl_easy_setopt(curl, CURLOPT_URL, o->url);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, w.out.data);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)w.out.len);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)ER_OTLP_TIMEOUT_MS);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        cc = curl_easy_perform(curl);
        if (cc == CURLE_OK)
            curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        ok = cc == CURLE_OK && status >= 200 && status < 300;
        curl_slist_free_all(h);
    }
    er_jsonw_fini(&w);
    if (!ok) {
        int64_t now = er_mono_ms();
        if (now - o->last_error_log >= 60000) {
            o->last_error_log = now;
            ER_LOG(ER_LOG_WARN, NULL, "otlp: exporting %zu spans failed: %s", n,
                   cc != CURLE_OK ? curl_easy_strerror(cc) : "the collector refused them");
        }
    }
    return ok;
}

static void deadline_in(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

static void *run(void *arg)
{
    er_otlp *o = arg;
    CURL *curl = curl_easy_init();
    span *batch = malloc(ER_OTLP_BATCH_MAX * sizeof *batch);
    int64_t stop_deadline = 0;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (o->len == 0 && !o->stop)
            pthread_cond_wait(&o->cv, &o->mu);
        if (o->len == 0)
            break;
        if (!o->stop && o->len < ER_OTLP_BATCH_MAX) {
            struct timespec ts;
            deadline_in(&ts, ER_OTLP_FLUSH_MS);
            while (!o->stop && o->len < ER_OTLP_BATCH_MAX &&
                   pthread_cond_timedwait(&o->cv, &o->mu, &ts) == 0) {
            }
        }
        if (o->stop && stop_deadline == 0)
            stop_deadline = er_mono_ms() + ER_OTLP_TIMEOUT_MS;
        size_t n = o->len < ER_OTLP_BATCH_MAX ? o->len : ER_OTLP_BATCH_MAX;
        for (size_t i = 0; batch && i < n; i++)
            batch[i] = o->ring[(o->head + i) % ER_OTLP_QUEUE_MAX];
        o->head = (o->head + n) % ER_OTLP_QUEUE_MAX;
        o->len -= n;
        pthread_mutex_unlock(&o->mu);
        bool ok = curl && batch && post(o, curl, batch, n);
        pthread_mutex_lock(&o->mu);
        if (ok) {
            o->stats.exported += n;
        } else {
            o->stats.failures++;
            o->stats.dropped_failed += n;
        }
        if (o->stop && er_mono_ms() >= stop_deadline) {
            o->stats.dropped_failed += o->len;
            o->len = 0;
        }
    }
    pthread_mutex_unlock(&o->mu);
    free(batch);
    if (curl)
        curl_easy_cleanup(curl);
    return NULL;
}

int er_otlp_start(const char *endpoint, er_otlp **out, er_error *err)
{
    *out = NULL;
    if (!endpoint || (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0))
        return er_error_set(err, ER_EINVAL, "otlp-endpoint",
                            "otlp-endpoint must be an http:// or https:// URL");
    size_t n = strlen(endpoint);
    if (n > 2000)
        return er_error_set(err, ER_EINVAL, "otlp-endpoint", "otlp-endpoint is too long");
    er_otlp *o = calloc(1, sizeof *o);
    if (!o)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    static const char suffix[] = "/v1/traces";
    bool has = n >= sizeof suffix - 1 && strcmp(endpoint + n - (sizeof suffix - 1), suffix) == 0;
    while (!has && n > 0 && endpoint[n - 1] == '/')
        n--;
    o->url = malloc(n + sizeof suffix);
    o->ring = malloc(ER_OTLP_QUEUE_MAX * sizeof *o->ring);
    if (!o->url || !o->ring) {
        free(o->url);
        free(o->ring);
        free(o);
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    memcpy(o->url, endpoint, n);
    memcpy(o->url + n, has ? "" : suffix, has ? 1 : sizeof suffix);
    if (has)
        o->url[n] = '\0';
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&o->mu, NULL);
    if (pthread_create(&o->thread, NULL, run, o) != 0) {
        pthread_cond_destroy(&o->cv);
        pthread_mutex_destroy(&o->mu);
        free(o->url);
        free(o->ring);
        free(o);
        return er_error_set(err, ER_ENOMEM, "", "cannot start the span exporter");
    }
    *out = o;
    return 0;
}

void er_otlp_stop(er_otlp *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o->url);
    free(o->ring);
    free(o);
}

void er_otlp_attempt(er_otlp *o, const char *job_id, const er_ack_info *info, int64_t end_ms,
                     const char *outcome, bool error)
{
    if (!o || !info->queue[0])
        return;
    pthread_mutex_lock(&o->mu);
    if (o->len >= ER_OTLP_QUEUE_MAX || o->stop) {
        o->stats.dropped_full++;
        pthread_mutex_unlock(&o->mu);
        return;
    }
    span *sp = &o->ring[(o->head + o->len) % ER_OTLP_QUEUE_MAX];
    size_t n = strnlen(job_id, ER_ID_MAX);
    memcpy(sp->job_id, job_id, n);
    sp->job_id[n] = '\0';
    sp->info = *info;
    sp->end_ms = end_ms;
    sp->outcome = outcome;
    sp->error = error;
    o->len++;
    if (o->len == 1 || o->len == ER_OTLP_BATCH_MAX)
        pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

void er_otlp_get_stats(er_otlp *o, er_otlp_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    *out = o->stats;
    pthread_mutex_unlock(&o->mu);
}
