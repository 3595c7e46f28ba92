/* SPDX-License-Identifier: MIT
 *
 * `errand bench`: load scenarios against a running server over HTTP on
 * loopback, using libevent's HTTP client with many connections in flight.
 * Scenarios: enqueue (one job per request), bulk (batches per request),
 * process (fetch + acks carried on the next fetch), latency (a paced
 * producer, long-polling workers; enqueue -> start). Prints one JSON line
 * per scenario. Bounded in count and time; it stops by itself.
 */
#include "cli/cli.h"
#include "cli/settings.h"
#include "util/clock.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bench bench;

/* Connections the paced producer spreads its enqueues over, so one slow
 * reply does not queue the requests behind it. */
#define PRODUCERS 4

typedef struct conn {
    bench *b;
    struct evhttp_connection *ev;
    int idx;
    json_t *acks;     /* process: completes to carry on the next fetch */
    long sending;     /* enqueue/bulk: jobs in the request in flight */
    bool busy;
} conn;

struct bench {
    struct event_base *base;
    const char *scenario;
    const char *queue;
    const char *token;
    char host[128];
    int port;
    long total;       /* jobs to enqueue / process */
    long sent, acked, done, errors;
    long held;        /* process: completes waiting to ride on a fetch */
    int batch;        /* bulk size / fetch max */
    int nconns;
    conn *conns;
    int64_t t0_us, t1_us;
    int64_t deadline_mono;
    /* latency */
    int rate;
    int64_t lat_secs;
    double *lat;
    long nlat, caplat;
    struct event *tick;
    struct evhttp_connection *producers[PRODUCERS];
    double *enq_lat;  /* latency: enqueue request round trips (ms) */
    long nenq;
    long produced;
    char run_id[40];
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void issue(conn *c);

/* Bodies span several segments: without TCP_NODELAY the last one waits
 * for the server's delayed ACK (40 ms). The socket exists once a request
 * has been made on the connection. */
static void nodelay(struct evhttp_connection *ev)
{
    evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(ev));
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void send_json(conn *c, const char *path, const char *body, size_t len,
                      void (*cb)(struct evhttp_request *, void *))
{
    bench *b = c->b;
    struct evhttp_request *req = evhttp_request_new(cb, c);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", b->host);
    evhttp_add_header(h, "Content-Type", "application/json");
    if (b->token) {
        char auth[200];
        snprintf(auth, sizeof auth, "Bearer %s", b->token);
        evhttp_add_header(h, "Authorization", auth);
    }
    evbuffer_add(evhttp_request_get_output_buffer(req), body, len);
    c->busy = true;
    if (evhttp_make_request(c->ev, req, EVHTTP_REQ_POST, path) != 0) {
        b->errors++;
        c->busy = false;
    }
    nodelay(c->ev);
}

static bool finished(bench *b)
{
    if (er_mono_ms() > b->deadline_mono)
        return true;
    if (strcmp(b->scenario, "latency") == 0)
        return b->produced >= b->total && b->done >= b->produced;
    if (strcmp(b->scenario, "process") == 0)
        return b->done >= b->total;
    return b->acked >= b->total;
}

static void maybe_stop(bench *b)
{
    if (finished(b)) {
        if (!b->t1_us)
            b->t1_us = now_us();
        event_base_loopexit(b->base, NULL);
    }
}

static json_t *body_json(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    return json_loadb((const char *)evbuffer_pullup(in, (ssize_t)len), len, 0, NULL);
}

static void on_enqueue(struct evhttp_request *req, void *arg)
{
    conn *c = arg;
    bench *b = c->b;
    c->busy = false;
    int st = req ? evhttp_request_get_response_code(req) : 0;
    if (st == 201 || st == 200)
        b->acked += c->sending;
    else
        b->errors++;
    maybe_stop(b);
    issue(c);
}

static void on_fetch(struct evhttp_request *req, void *arg)
{
    conn *c = arg;
    bench *b = c->b;
    c->busy = false;
    int st = req ? evhttp_request_get_response_code(req) : 0;
    json_t *acks = json_array();
    if (st != 200) {
        b->errors++;
    } else {
        json_t *body = body_json(req);
        json_t *jobs = json_object_get(body, "jobs");
        size_t i;
        json_t *j;
        int64_t t = now_us();
        json_array_foreach(jobs, i, j)
        {
            if (strcmp(b->scenario, "latency") == 0) {
                json_t *ts = json_object_get(json_object_get(j, "payload"), "t");
                if (json_is_integer(ts) && b->nlat < b->caplat)
                    b->lat[b->nlat++] = (double)(t - json_integer_value(ts)) / 1000.0;
            }
            json_array_append_new(acks, json_pack("{s:O,s:O,s:{}}", "id", json_object_get(j, "id"),
                                                  "lease_token", json_object_get(j, "lease_token"),
                                                  "complete"));
        }
        json_decref(body);
        /* jobs acked in the previous request are done now */
        b->done += (long)json_array_size(c->acks);
        b->held += (long)json_array_size(acks) - (long)json_array_size(c->acks);
    }
    json_decref(c->acks);
    c->acks = acks;
    maybe_stop(b);
    issue(c);
}

static void issue(conn *c)
{
    bench *b = c->b;
    if (c->busy || finished(b))
        return;
    char path[256];
    if (strcmp(b->scenario, "enqueue") == 0 || strcmp(b->scenario, "bulk") == 0) {
        if (b->sent >= b->total)
            return;
        snprintf(path, sizeof path, "/v1/queues/%s/jobs", b->queue);
        json_t *body;
        if (strcmp(b->scenario, "bulk") == 0) {
            json_t *jobs = json_array();
            long n = b->total - b->sent < b->batch ? b->total - b->sent : b->batch;
            c->sending = n;
            for (long i = 0; i < n; i++)
                json_array_append_new(jobs, json_pack("{s:s,s:{s:I}}", "name", "noop", "payload",
                                                      "n", (json_int_t)b->sent++));
            body = json_pack("{s:o}", "jobs", jobs);
        } else {
            c->sending = 1;
            body = json_pack("{s:s,s:{s:I}}", "name", "noop", "payload", "n", (json_int_t)b->sent++);
        }
        char *s = json_dumps(body, JSON_COMPACT);
        send_json(c, path, s, strlen(s), on_enqueue);
        free(s);
        json_decref(body);
        return;
    }
    /* process / latency: fetch with the previous batch's acks */
    char wid[32];
    snprintf(wid, sizeof wid, "bench-%d", c->idx);
    /* near the end, do not long-poll: the last acks must not wait */
    int wait = b->done + b->held >= b->total && strcmp(b->scenario, "process") == 0 ? 0 : 1000;
    json_t *body = json_pack("{s:[s],s:s,s:i,s:i,s:O}", "queues", b->queue, "worker_id", wid, "max",
                             b->batch, "wait_ms", wait, "acks", c->acks);
    char *s = json_dumps(body, JSON_COMPACT);
    send_json(c, "/v1/fetch", s, strlen(s), on_fetch);
    free(s);
    json_decref(body);
}

typedef struct produced {
    bench *b;
    int64_t sent_us;
} produced;

static void on_produce(struct evhttp_request *req, void *arg)
{
    produced *p = arg;
    bench *b = p->b;
    int st = req ? evhttp_request_get_response_code(req) : 0;
    if (st != 201)
        b->errors++;
    else if (b->enq_lat && b->nenq < b->caplat)
        b->enq_lat[b->nenq++] = (double)(now_us() - p->sent_us) / 1000.0;
    free(p);
}

static void produce_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bench *b = arg;
    /* keep the producer on schedule: send what is due by now */
    int64_t due = (now_us() - b->t0_us) * b->rate / 1000000;
    while (b->produced < due && b->produced < b->total) {
        char body[200], path[200];
        int n = snprintf(body, sizeof body, "{\"name\":\"noop\",\"payload\":{\"t\":%lld}}",
                         (long long)now_us());
        snprintf(path, sizeof path, "/v1/queues/%s/jobs", b->queue);
        struct evhttp_connection **pc = &b->producers[b->produced % PRODUCERS];
        if (!*pc)
            *pc = evhttp_connection_base_new(b->base, NULL, b->host, (unsigned short)b->port);
        produced *p = malloc(sizeof *p);
        if (!*pc || !p) {
            free(p);
            b->errors++;
            b->produced++;
            continue;
        }
        p->b = b;
        p->sent_us = now_us();
        struct evhttp_request *req = evhttp_request_new(on_produce, p);
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        evhttp_add_header(h, "Host", b->host);
        evhttp_add_header(h, "Content-Type", "application/json");
        if (b->token) {
            char auth[200];
            snprintf(auth, sizeof auth, "Bearer %s", b->token);
            evhttp_add_header(h, "Authorization", auth);
        }
        evbuffer_add(evhttp_request_get_output_buffer(req), body, (size_t)n);
        evhttp_make_request(*pc, req, EVHTTP_REQ_POST, path);
        nodelay(*pc);
        b->produced++;
    }
    if (b->produced < b->total) {
        struct timeval tv = {0, 1000};
        evtimer_add(b->tick, &tv);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Runs b's scenario to its end on a fresh event base. */
static void run(bench *b)
{
    b->base = event_base_new();
    b->conns = calloc((size_t)b->nconns, sizeof *b->conns);
    if (!b->base || !b->conns) {
        b->errors++;
        goto out;
    }
    for (int i = 0; i < b->nconns; i++) {
        b->conns[i].b = b;
        b->conns[i].idx = i;
        b->conns[i].acks = json_array();
        b->conns[i].ev = evhttp_connection_base_new(b->base, NULL, b->host, (unsigned short)b->port);
        evhttp_connection_set_timeout(b->conns[i].ev, 30);
    }
    b->t0_us = now_us();
    for (int i = 0; i < b->nconns; i++)
        issue(&b->conns[i]);
    if (strcmp(b->scenario, "latency") == 0) {
        b->tick = evtimer_new(b->base, produce_tick, b);
        produce_tick(-1, 0, b);
    }
    event_base_dispatch(b->base);
    if (!b->t1_us)
        b->t1_us = now_us();
out:
    for (int i = 0; b->conns && i < b->nconns; i++) {
        if (b->conns[i].ev)
            evhttp_connection_free(b->conns[i].ev);
        json_decref(b->conns[i].acks);
    }
    free(b->conns);
    b->conns = NULL;
    for (int i = 0; i < PRODUCERS; i++) {
        if (b->producers[i])
            evhttp_connection_free(b->producers[i]);
        b->producers[i] = NULL;
    }
    if (b->tick)
        event_free(b->tick);
    b->tick = NULL;
    if (b->base)
        event_base_free(b->base);
    b->base = NULL;
}

/* Bulk-enqueues n jobs into queue (untimed set-up). */
static int fill(const bench *like, const char *queue, long n)
{
    bench f = {0};
    f.scenario = "bulk";
    f.queue = queue;
    f.token = like->token;
    snprintf(f.host, sizeof f.host, "%s", like->host);
    f.port = like->port;
    f.total = n;
    f.nconns = 2;
    f.batch = 1000;
    f.deadline_mono = like->deadline_mono;
    run(&f);
    return f.acked >= n && f.errors == 0 ? 0 : -1;
}

/* Resident memory of a process in KiB (VmRSS), or -1. */
static long rss_kib(int64_t pid)
{
    if (pid <= 0)
        return -1;
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%lld/status", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

static const er_setting bench_settings[] = {
    {"server", ER_SET_STRING, "http://127.0.0.1:7400", 0, 0, NULL, "server URL (ERRAND_SERVER)"},
    {"token", ER_SET_STRING, NULL, 0, 0, NULL, "bearer token"},
    {"scenario", ER_SET_ENUM, "enqueue", 0, 0, "enqueue|bulk|process|latency", "what to measure"},
    {"queue", ER_SET_STRING, "bench", 0, 0, NULL, "queue name"},
    {"jobs", ER_SET_INT, "20000", 1, 100000000, NULL,
     "jobs to enqueue or process (process enqueues them first, untimed)"},
    {"connections", ER_SET_INT, "64", 1, 4096, NULL, "concurrent connections (workers)"},
    {"batch", ER_SET_INT, "1000", 1, 10000, NULL, "bulk size, or fetch max per worker"},
    {"rate", ER_SET_INT, "500", 1, 1000000, NULL, "latency: jobs per second"},
    {"duration", ER_SET_DURATION, "10s", 100, 3600000, NULL, "latency: how long to produce"},
    {"timeout", ER_SET_DURATION, "300s", 1000, 3600000, NULL, "hard stop"},
    {"label", ER_SET_STRING, "", 0, 0, NULL, "free text copied to the JSON line"},
    {"preload", ER_SET_INT, "0", 0, 100000000, NULL,
     "jobs to enqueue first into QUEUE-backlog and leave waiting (depth tests)"},
    {"server-pid", ER_SET_INT, "0", 0, 1LL << 31, NULL,
     "the server's pid, to report its resident memory (VmRSS)"},
};

int er_cli_bench(int argc, char **argv, char **envp)
{
    er_settings st;
    er_error err;
    er_error_clear(&err);
    int rc = er_settings_init(&st, bench_settings, sizeof bench_settings / sizeof bench_settings[0],
                              &err);
    if (rc == 0)
        rc = er_settings_load(&st, argc, argv, envp, stdout, &err);
    if (rc == 1) {
        er_settings_help(&st, "usage: errand bench --scenario enqueue|bulk|process|latency ...",
                         stdout);
        er_settings_fini(&st);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "errand bench: %s\n", err.message);
        er_settings_fini(&st);
        return 2;
    }
    bench b = {0};
    b.scenario = er_settings_get(&st, "scenario")->text;
    b.queue = er_settings_get(&st, "queue")->text;
    b.token = er_settings_get(&st, "token")->text;
    b.total = er_settings_get(&st, "jobs")->num;
    b.nconns = (int)er_settings_get(&st, "connections")->num;
    b.batch = (int)er_settings_get(&st, "batch")->num;
    b.rate = (int)er_settings_get(&st, "rate")->num;
    const char *url = er_settings_get(&st, "server")->text;
    if (sscanf(url, "http://%127[^:/]:%d", b.host, &b.port) != 2) {
        fprintf(stderr, "errand bench: --server must be http://HOST:PORT\n");
        er_settings_fini(&st);
        return 2;
    }
    if (strcmp(b.scenario, "latency") == 0) {
        b.total = (long)b.rate * er_settings_get(&st, "duration")->num / 1000;
        b.caplat = b.total;
        b.lat = calloc((size_t)b.caplat + 1, sizeof *b.lat);
        b.enq_lat = calloc((size_t)b.caplat + 1, sizeof *b.enq_lat);
    }
    b.deadline_mono = er_mono_ms() + er_settings_get(&st, "timeout")->num;
    /* untimed set-up: the backlog other jobs sit beside, and the jobs a
     * process run works through (in a queue of their own) */
    int64_t preload = er_settings_get(&st, "preload")->num;
    char backlog_queue[200];
    snprintf(backlog_queue, sizeof backlog_queue, "%s-backlog", b.queue);
    if ((preload > 0 && fill(&b, backlog_queue, preload) < 0) ||
        (strcmp(b.scenario, "process") == 0 && fill(&b, b.queue, b.total) < 0)) {
        fprintf(stderr, "errand bench: could not enqueue the set-up jobs\n");
        free(b.lat);
        free(b.enq_lat);
        er_settings_fini(&st);
        return 1;
    }
    run(&b);
    double secs = (double)(b.t1_us - b.t0_us) / 1e6;
    long count = strcmp(b.scenario, "process") == 0 || strcmp(b.scenario, "latency") == 0 ? b.done
                                                                                        : b.acked;
    json_t *out = json_pack("{s:s,s:s,s:I,s:i,s:i,s:f,s:f,s:I,s:b}", "scenario", b.scenario,
                            "label", er_settings_get(&st, "label")->text, "jobs", (json_int_t)count,
                            "connections", b.nconns, "batch", b.batch, "seconds", secs,
                            "jobs_per_s", secs > 0 ? (double)count / secs : 0.0, "errors",
                            (json_int_t)b.errors, "complete", finished(&b) && count >= b.total);
    if (preload > 0)
        json_object_set_new(out, "preloaded", json_integer(preload));
    long rss = rss_kib(er_settings_get(&st, "server-pid")->num);
    if (rss >= 0)
        json_object_set_new(out, "server_rss_kib", json_integer(rss));
    if (b.nlat) {
        qsort(b.lat, (size_t)b.nlat, sizeof *b.lat, cmp_double);
        json_object_set_new(out, "rate", json_integer(b.rate));
        json_object_set_new(out, "p50_ms", json_real(b.lat[b.nlat / 2]));
        json_object_set_new(out, "p99_ms", json_real(b.lat[(long)((double)b.nlat * 0.99)]));
        json_object_set_new(out, "max_ms", json_real(b.lat[b.nlat - 1]));
    }
    if (b.nenq) {
        qsort(b.enq_lat, (size_t)b.nenq, sizeof *b.enq_lat, cmp_double);
        json_object_set_new(out, "enqueue_p50_ms", json_real(b.enq_lat[b.nenq / 2]));
        json_object_set_new(out, "enqueue_p99_ms",
                            json_real(b.enq_lat[(long)((double)b.nenq * 0.99)]));
        json_object_set_new(out, "enqueue_max_ms", json_real(b.enq_lat[b.nenq - 1]));
    }
    char *s = json_dumps(out, JSON_COMPACT);
    printf("%s\n", s);
    /* the same figures as a table row on stderr, for people */
    fprintf(stderr, "%-9s %-28s %9ld jobs %8.2f s %10.0f jobs/s %5ld errors", b.scenario,
            er_settings_get(&st, "label")->text, count, secs, secs > 0 ? (double)count / secs : 0.0,
            b.errors);
    if (b.nlat)
        fprintf(stderr, "  start p50/p99/max %.2f/%.2f/%.2f ms", b.lat[b.nlat / 2],
                b.lat[(long)((double)b.nlat * 0.99)], b.lat[b.nlat - 1]);
    if (b.nenq)
        fprintf(stderr, "  enqueue p50/p99/max %.2f/%.2f/%.2f ms", b.enq_lat[b.nenq / 2],
                b.enq_lat[(long)((double)b.nenq * 0.99)], b.enq_lat[b.nenq - 1]);
    if (rss >= 0)
        fprintf(stderr, "  server RSS %.1f MiB", (double)rss / 1024.0);
    fputc('\n', stderr);
    free(s);
    json_decref(out);
    int ok = finished(&b) && count >= b.total && b.errors == 0;
    free(b.lat);
    free(b.enq_lat);
    er_settings_fini(&st);
    return ok ? 0 : 1;
}
