/* SPDX-License-Identifier: MIT
 *
 * `errand bench`'s scenarios over the load client: enqueue (one job per
 * request), bulk (batches per request), process (fetch + acks carried on
 * the next fetch), latency (a paced producer spread over PRODUCERS
 * connections, long-polling workers; enqueue -> start), and the untimed
 * set-up fill. Each run is bounded in count and time; it stops by itself.
 */
#include "cli/bench.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/jsonw.h"

#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void issue(conn *c);

/* ---- scenarios ---- */

bool er_bench_finished(bench *b)
{
    if (er_mono_ms() > b->deadline_mono)
        return true;
    if (b->sc == SC_LATENCY)
        return b->produced >= b->total && b->done >= b->produced;
    if (b->sc == SC_PROCESS)
        return b->done >= b->total;
    return b->acked >= b->total;
}

static void maybe_stop(bench *b)
{
    if (er_bench_finished(b)) {
        if (!b->t1_us)
            b->t1_us = er_bench_now_us();
        event_base_loopexit(b->base, NULL);
    }
}

static void on_enqueue(conn *c, int st, const char *body, size_t len)
{
    (void)body;
    (void)len;
    bench *b = c->b;
    if (st == 201 || st == 200)
        b->acked += c->sending;
    else
        b->errors++;
    maybe_stop(b);
    issue(c);
}

static void on_fetch(conn *c, int st, const char *text, size_t len)
{
    bench *b = c->b;
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 30);
    er_jsonw_begin_array(&w);
    long n = 0;
    if (st != 200) {
        b->errors++;
    } else {
        json_t *body = json_loadb(text, len, 0, NULL);
        json_t *jobs = json_object_get(body, "jobs");
        size_t i;
        json_t *j;
        int64_t t = er_bench_now_us();
        json_array_foreach(jobs, i, j)
        {
            if (b->sc == SC_LATENCY) {
                json_t *ts = json_object_get(json_object_get(j, "payload"), "t");
                if (json_is_integer(ts) && b->nlat < b->caplat)
                    b->lat[b->nlat++] = (double)(t - json_integer_value(ts)) / 1000.0;
            }
            er_jsonw_begin_object(&w);
            er_jsonw_key(&w, "id");
            er_jsonw_str(&w, json_string_value(json_object_get(j, "id")));
            er_jsonw_key(&w, "lease_token");
            er_jsonw_str(&w, json_string_value(json_object_get(j, "lease_token")));
            er_jsonw_key(&w, "complete");
            er_jsonw_begin_object(&w);
            er_jsonw_end_object(&w);
            er_jsonw_end_object(&w);
            n++;
        }
        json_decref(body);
        /* jobs acked in the previous request are done now */
        b->done += c->nacks;
        b->held += n - c->nacks;
    }
    er_jsonw_end_array(&w);
    free(c->acks);
    c->acks = NULL;
    c->nacks = 0;
    if (st == 200 && !w.failed && (c->acks = er_buf_take(&w.out, NULL)))
        c->nacks = n;
    else if (st == 200)
        b->errors++;
    er_jsonw_fini(&w);
    maybe_stop(b);
    issue(c);
}

/* Appends the decimal digits of u at p; returns the end. */
static char *put_digits(char *p, unsigned long u)
{
    char d[24];
    size_t k = sizeof d;
    do {
        d[--k] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    memcpy(p, d + k, sizeof d - k);
    return p + (sizeof d - k);
}

/* Appends `{"name":"noop","payload":{"n":N}}` at p, with `"group":"gK"`
 * (K = N mod groups) when groups > 0; returns the end (at most 80 bytes). */
static char *put_noop_job(char *p, long n, long groups)
{
    static const char head[] = "{\"name\":\"noop\",\"payload\":{\"n\":";
    memcpy(p, head, sizeof head - 1);
    p = put_digits(p + sizeof head - 1, (unsigned long)n);
    *p++ = '}';
    if (groups > 0) {
        static const char g[] = ",\"group\":\"g";
        memcpy(p, g, sizeof g - 1);
        p = put_digits(p + sizeof g - 1, (unsigned long)(n % groups));
        *p++ = '"';
    }
    *p++ = '}';
    return p;
}

static void issue(conn *c)
{
    bench *b = c->b;
    if (c->busy || er_bench_finished(b))
        return;
    const char *path = b->enq_path;
    if (b->sc == SC_ENQUEUE || b->sc == SC_BULK) {
        if (b->sent >= b->total)
            return;
        if (b->sc == SC_BULK) {
            long n = b->total - b->sent < b->batch ? b->total - b->sent : b->batch;
            char *body = malloc((size_t)n * 96 + 16);
            if (!body) {
                b->errors++;
                return;
            }
            char *p = body;
            memcpy(p, "{\"jobs\":[", 9);
            p += 9;
            for (long i = 0; i < n; i++) {
                if (i)
                    *p++ = ',';
                p = put_noop_job(p, b->sent++, b->groups);
            }
            *p++ = ']';
            *p++ = '}';
            c->sending = n;
            er_bench_send_json(c, path, body, (size_t)(p - body), on_enqueue);
            free(body);
        } else {
            char body[96];
            char *p = put_noop_job(body, b->sent++, b->groups);
            c->sending = 1;
            er_bench_send_json(c, path, body, (size_t)(p - body), on_enqueue);
        }
        return;
    }
    /* process / latency: fetch with the previous batch's acks */
    /* near the end, do not long-poll: the last acks must not wait */
    int wait = b->done + b->held >= b->total && b->sc == SC_PROCESS ? 0 : 1000;
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 30);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "queues");
    er_jsonw_begin_array(&w);
    er_jsonw_str(&w, b->queue);
    er_jsonw_end_array(&w);
    char wid[32];
    snprintf(wid, sizeof wid, "bench-%d", c->idx);
    er_jsonw_key(&w, "worker_id");
    er_jsonw_str(&w, wid);
    er_jsonw_key(&w, "max");
    er_jsonw_int(&w, b->batch);
    er_jsonw_key(&w, "wait_ms");
    er_jsonw_int(&w, wait);
    er_jsonw_key(&w, "acks");
    er_jsonw_raw(&w, c->acks ? c->acks : "[]", c->acks ? strlen(c->acks) : 2);
    er_jsonw_end_object(&w);
    if (w.failed) {
        er_jsonw_fini(&w);
        b->errors++;
        return;
    }
    er_bench_send_json(c, "/v1/fetch", w.out.data, w.out.len, on_fetch);
    er_jsonw_fini(&w);
}

static void produce_next(conn *c);

static void on_produce(conn *c, int st, const char *body, size_t len)
{
    (void)body;
    (void)len;
    bench *b = c->b;
    if (st != 201)
        b->errors++;
    else if (b->enq_lat && b->nenq < b->caplat)
        b->enq_lat[b->nenq++] = (double)(er_bench_now_us() - c->sent_us) / 1000.0;
    produce_next(c);
}

/* Sends the producer's oldest queued job when its connection is idle. */
static void produce_next(conn *c)
{
    if (c->busy || c->qlen == 0)
        return;
    bench *b = c->b;
    int64_t t = c->q[c->qhead];
    c->qhead = (c->qhead + 1) % c->qcap;
    c->qlen--;
    char body[200];
    int n = snprintf(body, sizeof body, "{\"name\":\"noop\",\"payload\":{\"t\":%lld}}", (long long)t);
    er_bench_send_json(c, b->enq_path, body, (size_t)n, on_produce);
    c->sent_us = t; /* round trips count from production, queueing included */
}

static void produce_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bench *b = arg;
    /* keep the producer on schedule: send what is due by now */
    int64_t due = (er_bench_now_us() - b->t0_us) * b->rate / 1000000;
    while (b->produced < due && b->produced < b->total) {
        conn *c = &b->producers[b->produced % PRODUCERS];
        b->produced++;
        if (c->qlen == c->qcap) {
            size_t old = c->qcap;
            if (ER_GROW(&c->q, &c->qcap, c->qlen + 1, (size_t)b->total + 1) < 0) {
                b->errors++;
                continue;
            }
            /* the ring's older part [qhead, old) moves to the new end */
            if (c->qhead) {
                size_t n = old - c->qhead;
                memmove(c->q + c->qcap - n, c->q + c->qhead, n * sizeof *c->q);
                c->qhead = c->qcap - n;
            }
        }
        c->q[(c->qhead + c->qlen) % c->qcap] = er_bench_now_us();
        c->qlen++;
        produce_next(c);
    }
    if (b->produced < b->total) {
        struct timeval tv = {0, 1000};
        evtimer_add(b->tick, &tv);
    }
}

/* Resolves the server address and prepares the fixed request parts. */
static int prepare(bench *b)
{
    b->sc = strcmp(b->scenario, "bulk") == 0      ? SC_BULK
            : strcmp(b->scenario, "process") == 0 ? SC_PROCESS
            : strcmp(b->scenario, "latency") == 0 ? SC_LATENCY
                                                  : SC_ENQUEUE;
    int n = snprintf(b->enq_path, sizeof b->enq_path, "/v1/queues/%s/jobs", b->queue);
    char port[16];
    snprintf(port, sizeof port, "%d", b->port);
    int h = snprintf(b->hdr, sizeof b->hdr,
                     "Host: %s:%s\r\nContent-Type: application/json\r\n%s%s%s", b->host, port,
                     b->token ? "Authorization: Bearer " : "", b->token ? b->token : "",
                     b->token ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof b->enq_path || h < 0 || (size_t)h >= sizeof b->hdr)
        return -1;
    b->hdrlen = (size_t)h;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(b->host, port, &hints, &ai) != 0 || !ai)
        return -1;
    memcpy(&b->addr, ai->ai_addr, ai->ai_addrlen);
    b->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* Runs b's scenario to its end on a fresh event base. */
void er_bench_run(bench *b)
{
    if (prepare(b) != 0) {
        b->errors++;
        return;
    }
    b->base = event_base_new();
    b->conns = calloc((size_t)b->nconns, sizeof *b->conns);
    for (int i = 0; i < PRODUCERS; i++)
        er_bench_conn_init(&b->producers[i], b, -1);
    if (!b->base || !b->conns) {
        b->errors++;
        goto out;
    }
    for (int i = 0; i < b->nconns; i++)
        er_bench_conn_init(&b->conns[i], b, i);
    b->watchdog = event_new(b->base, -1, EV_PERSIST, er_bench_watchdog_tick, b);
    struct timeval sec = {1, 0};
    if (!b->watchdog || event_add(b->watchdog, &sec) != 0) {
        b->errors++;
        goto out;
    }
    b->t0_us = er_bench_now_us();
    for (int i = 0; i < b->nconns; i++)
        issue(&b->conns[i]);
    if (b->sc == SC_LATENCY) {
        b->tick = evtimer_new(b->base, produce_tick, b);
        produce_tick(-1, 0, b);
    }
    event_base_dispatch(b->base);
    if (!b->t1_us)
        b->t1_us = er_bench_now_us();
out:
    for (int i = 0; b->conns && i < b->nconns; i++)
        er_bench_conn_fini(&b->conns[i]);
    free(b->conns);
    b->conns = NULL;
    for (int i = 0; i < PRODUCERS; i++)
        er_bench_conn_fini(&b->producers[i]);
    if (b->tick)
        event_free(b->tick);
    b->tick = NULL;
    if (b->watchdog)
        event_free(b->watchdog);
    b->watchdog = NULL;
    if (b->base)
        event_base_free(b->base);
    b->base = NULL;
}

/* Bulk-enqueues n jobs into queue (untimed set-up). */
int er_bench_fill(const bench *like, const char *queue, long n)
{
    bench f = {0};
    f.scenario = "bulk";
    f.queue = queue;
    f.token = like->token;
    snprintf(f.host, sizeof f.host, "%s", like->host);
    f.port = like->port;
    f.total = n;
    f.groups = like->groups;
    f.nconns = 2;
    f.batch = 1000;
    f.deadline_mono = like->deadline_mono;
    er_bench_run(&f);
    return f.acked >= n && f.errors == 0 ? 0 : -1;
}
