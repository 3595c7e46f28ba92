/* SPDX-License-Identifier: MIT
 *
 * `errand bench`: load scenarios against a running server over HTTP on
 * loopback, with many keep-alive HTTP/1.1 connections in flight (a small
 * client of its own on libevent's event loop: libevent's HTTP client cost
 * more CPU per request than the server's request handling).
 * Scenarios: enqueue (one job per request), bulk (batches per request),
 * process (fetch + acks carried on the next fetch), latency (a paced
 * producer, long-polling workers; enqueue -> start). Prints one JSON line
 * per scenario. Bounded in count and time; it stops by itself.
 */
#include "cli/cli.h"
#include "cli/settings.h"
#include "util/buf.h"
#include "util/clock.h"

#include "util/jsonw.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/util.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct bench bench;

/* Connections the paced producer spreads its enqueues over, so one slow
 * reply does not queue the requests behind it. */
#define PRODUCERS 4
#define CONN_BUF_MAX ((size_t)1 << 30) /* bytes of one request or reply */
/* A reply not complete this long after its request is an error. */
#define REPLY_TIMEOUT_US (30 * 1000000LL)

typedef enum scenario { SC_ENQUEUE, SC_BULK, SC_PROCESS, SC_LATENCY } scenario;

typedef struct conn conn;
/* A complete reply (status 0: the connection failed); body borrowed. */
typedef void (*reply_fn)(conn *c, int status, const char *body, size_t len);

/* One keep-alive HTTP/1.1 connection with at most one request in flight.
 * Its read event stays registered, so a request costs one send() and
 * (usually) one recv(), and no epoll_ctl. */
struct conn {
    bench *b;
    int fd; /* -1: not connected */
    struct event *rev, *wev;
    char *out;        /* request being written */
    size_t outlen, outoff, outcap;
    char *in;         /* reply bytes read so far */
    size_t inlen, incap;
    reply_fn on_reply;
    int64_t sent_us;  /* when the request in flight was queued */
    int idx;
    char *acks;       /* process: serialized completes for the next fetch ("" when none) */
    long nacks;
    long sending;     /* enqueue/bulk: jobs in the request in flight */
    bool busy;
    /* latency producers: production times not yet sent, FIFO */
    int64_t *q;
    size_t qhead, qlen, qcap;
};

struct bench {
    struct event_base *base;
    const char *scenario;
    scenario sc;
    const char *queue;
    const char *token;
    char host[128];
    int port;
    struct sockaddr_storage addr;
    socklen_t addrlen;
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
    struct event *tick, *watchdog;
    conn producers[PRODUCERS];
    double *enq_lat;  /* latency: enqueue request round trips (ms) */
    long nenq;
    long produced;
    char run_id[40];
    char enq_path[256]; /* /v1/queues/QUEUE/jobs */
    char hdr[512];      /* Host, Content-Type and Authorization header lines */
    size_t hdrlen;
};

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void issue(conn *c);

/* ---- transport: a minimal keep-alive HTTP/1.1 client ---- */

/* Room for need bytes in a connection's buffer. */
static bool reserve(char **buf, size_t *cap, size_t need)
{
    return ER_GROW(buf, cap, need, CONN_BUF_MAX) == 0;
}

static void on_readable(evutil_socket_t fd, short what, void *arg);
static void on_writable(evutil_socket_t fd, short what, void *arg);

static void conn_close(conn *c)
{
    if (c->rev)
        event_free(c->rev);
    if (c->wev)
        event_free(c->wev);
    c->rev = c->wev = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->inlen = 0;
}

/* Connects (loopback: a blocking connect is quick), then non-blocking. */
static int conn_open(conn *c)
{
    bench *b = c->b;
    int fd = socket(b->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* Bodies span several segments: without TCP_NODELAY the last one waits
     * for the server's delayed ACK (40 ms). */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&b->addr, b->addrlen) != 0 ||
        evutil_make_socket_nonblocking(fd) != 0) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->rev = event_new(b->base, fd, EV_READ | EV_PERSIST, on_readable, c);
    c->wev = event_new(b->base, fd, EV_WRITE, on_writable, c);
    if (!c->rev || !c->wev || event_add(c->rev, NULL) != 0) {
        conn_close(c);
        return -1;
    }
    return 0;
}

/* The request in flight failed: the connection is dropped (the next
 * request opens a new one) and the reply callback sees status 0. */
static void conn_fail(conn *c)
{
    conn_close(c);
    if (c->busy) {
        c->busy = false;
        c->on_reply(c, 0, NULL, 0);
    }
}

static void flush_out(conn *c)
{
    while (c->outoff < c->outlen) {
        ssize_t n = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_NOSIGNAL);
        if (n > 0) {
            c->outoff += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (event_add(c->wev, NULL) != 0)
                conn_fail(c);
            return;
        }
        conn_fail(c);
        return;
    }
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    flush_out(arg);
}

static bool ci_prefix(const char *p, const char *end, const char *want)
{
    for (; *want; p++, want++)
        if (p >= end || (*p | 0x20) != (*want | 0x20))
            return false;
    return true;
}

/* Parses a complete reply at the start of c->in. Returns its total length
 * (0: incomplete, -1: malformed or unsupported); *status, *body, *blen and
 * *close_after on success. */
static long parse_reply(const conn *c, int *status, size_t *body, size_t *blen, bool *close_after)
{
    const char *p = c->in, *end = c->in + c->inlen;
    const char *hend = memmem(p, c->inlen, "\r\n\r\n", 4);
    if (!hend)
        return c->inlen > 65536 ? -1 : 0;
    if (c->inlen < 12 || memcmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ')
        return -1;
    int st = 0;
    for (int i = 9; i < 12; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        st = st * 10 + (p[i] - '0');
    }
    bool have_len = false, cl = p[7] == '0';
    size_t len = 0;
    for (const char *l = (const char *)memchr(p, '\n', (size_t)(hend - p)) + 1; l < hend + 2;) {
        const char *eol = memchr(l, '\n', (size_t)(end - l));
        if (ci_prefix(l, eol, "content-length:")) {
            const char *v = l + 15;
            while (*v == ' ' || *v == '\t')
                v++;
            if (*v < '0' || *v > '9')
                return -1;
            for (len = 0; *v >= '0' && *v <= '9'; v++) {
                if (len > ((size_t)1 << 40))
                    return -1;
                len = len * 10 + (size_t)(*v - '0');
            }
            have_len = true;
        } else if (ci_prefix(l, eol, "transfer-encoding:")) {
            return -1; /* the server never chunks its replies */
        } else if (ci_prefix(l, eol, "connection:")) {
            const char *v = l + 11;
            while (*v == ' ' || *v == '\t')
                v++;
            cl = ci_prefix(v, eol, "close") ? true : ci_prefix(v, eol, "keep-alive") ? false : cl;
        }
        l = eol + 1;
    }
    if (!have_len)
        len = 0;
    size_t hlen = (size_t)(hend + 4 - p);
    if (c->inlen < hlen + len)
        return 0;
    *status = st;
    *body = hlen;
    *blen = len;
    *close_after = cl;
    return (long)(hlen + len);
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    conn *c = arg;
    for (;;) {
        if (!reserve(&c->in, &c->incap, c->inlen + 65536)) {
            conn_fail(c);
            return;
        }
        ssize_t n = recv(fd, c->in + c->inlen, c->incap - c->inlen, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) { /* closed by the server, or an error */
            conn_fail(c);
            return;
        }
        c->inlen += (size_t)n;
        int st = 0; /* set when total > 0; gcc -O1 cannot tell */
        size_t body = 0, blen = 0;
        bool close_after = false;
        long total = parse_reply(c, &st, &body, &blen, &close_after);
        if (total < 0 || (total > 0 && !c->busy)) {
            conn_fail(c);
            return;
        }
        if (total == 0)
            return; /* level-triggered: called again while bytes wait */
        c->busy = false;
        /* the callback may issue the next request on c: hand it a copy-free
         * view and reset the buffer first (nothing else was sent, so no
         * further bytes can follow this reply) */
        c->inlen = 0;
        if (close_after)
            conn_close(c);
        c->on_reply(c, st, c->in + body, blen);
        return;
    }
}

static char *put_str(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

static char *put_ulong(char *p, unsigned long u)
{
    char d[24];
    size_t k = sizeof d;
    do {
        d[--k] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    return put_str(p, d + k, sizeof d - k);
}

/* Sends one POST with a JSON body; the reply goes to cb. When no
 * connection can be opened the request counts as an error and c stays
 * idle (the watchdog ends a run that cannot go on). */
static void send_json(conn *c, const char *path, const char *body, size_t len, reply_fn cb)
{
    bench *b = c->b;
    if (c->fd < 0 && conn_open(c) != 0) {
        b->errors++;
        return;
    }
    c->on_reply = cb;
    c->busy = true;
    c->sent_us = now_us();
    size_t plen = strlen(path);
    if (!reserve(&c->out, &c->outcap, plen + b->hdrlen + len + 64)) {
        conn_fail(c);
        return;
    }
    char *p = put_str(c->out, "POST ", 5);
    p = put_str(p, path, plen);
    p = put_str(p, " HTTP/1.1\r\n", 11);
    p = put_str(p, b->hdr, b->hdrlen);
    p = put_str(p, "Content-Length: ", 16);
    p = put_ulong(p, (unsigned long)len);
    p = put_str(p, "\r\n\r\n", 4);
    p = put_str(p, body, len);
    c->outlen = (size_t)(p - c->out);
    c->outoff = 0;
    flush_out(c);
}

/* Fails requests that got no complete reply within REPLY_TIMEOUT_US. */
static void watchdog_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bench *b = arg;
    int64_t t = now_us();
    bool busy = false;
    for (int i = 0; i < b->nconns; i++) {
        if (b->conns[i].busy && t - b->conns[i].sent_us > REPLY_TIMEOUT_US)
            conn_fail(&b->conns[i]);
        busy |= b->conns[i].busy;
    }
    for (int i = 0; i < PRODUCERS; i++) {
        if (b->producers[i].busy && t - b->producers[i].sent_us > REPLY_TIMEOUT_US)
            conn_fail(&b->producers[i]);
        busy |= b->producers[i].busy;
    }
    /* past the deadline, or nothing in flight and nothing left to produce:
     * the run cannot go on */
    if (er_mono_ms() > b->deadline_mono || (!busy && (b->sc != SC_LATENCY || b->produced >= b->total))) {
        if (!b->t1_us)
            b->t1_us = now_us();
        event_base_loopexit(b->base, NULL);
    }
}

/* ---- scenarios ---- */

static bool finished(bench *b)
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
    if (finished(b)) {
        if (!b->t1_us)
            b->t1_us = now_us();
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
        int64_t t = now_us();
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

/* Appends `{"name":"noop","payload":{"n":N}}` at p; returns the end. */
static char *put_noop_job(char *p, long n)
{
    static const char head[] = "{\"name\":\"noop\",\"payload\":{\"n\":";
    memcpy(p, head, sizeof head - 1);
    p += sizeof head - 1;
    char d[24];
    size_t k = sizeof d;
    unsigned long u = (unsigned long)n;
    do {
        d[--k] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    memcpy(p, d + k, sizeof d - k);
    p += sizeof d - k;
    *p++ = '}';
    *p++ = '}';
    return p;
}

static void issue(conn *c)
{
    bench *b = c->b;
    if (c->busy || finished(b))
        return;
    const char *path = b->enq_path;
    if (b->sc == SC_ENQUEUE || b->sc == SC_BULK) {
        if (b->sent >= b->total)
            return;
        if (b->sc == SC_BULK) {
            long n = b->total - b->sent < b->batch ? b->total - b->sent : b->batch;
            char *body = malloc((size_t)n * 64 + 16);
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
                p = put_noop_job(p, b->sent++);
            }
            *p++ = ']';
            *p++ = '}';
            c->sending = n;
            send_json(c, path, body, (size_t)(p - body), on_enqueue);
            free(body);
        } else {
            char body[96];
            char *p = put_noop_job(body, b->sent++);
            c->sending = 1;
            send_json(c, path, body, (size_t)(p - body), on_enqueue);
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
    send_json(c, "/v1/fetch", w.out.data, w.out.len, on_fetch);
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
        b->enq_lat[b->nenq++] = (double)(now_us() - c->sent_us) / 1000.0;
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
    send_json(c, b->enq_path, body, (size_t)n, on_produce);
    c->sent_us = t; /* round trips count from production, queueing included */
}

static void produce_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bench *b = arg;
    /* keep the producer on schedule: send what is due by now */
    int64_t due = (now_us() - b->t0_us) * b->rate / 1000000;
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
        c->q[(c->qhead + c->qlen) % c->qcap] = now_us();
        c->qlen++;
        produce_next(c);
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

static void conn_init(conn *c, bench *b, int idx)
{
    memset(c, 0, sizeof *c);
    c->b = b;
    c->fd = -1;
    c->idx = idx;
}

static void conn_fini(conn *c)
{
    conn_close(c);
    free(c->out);
    free(c->in);
    free(c->acks);
    free(c->q);
}

/* Resolves the server address and prepares the fixed request parts. */
static int prepare(bench *b)
{
    b->sc = strcmp(b->scenario, "bulk") == 0      ? SC_BULK
            : strcmp(b->scenario, "process") == 0 ? SC_PROCESS
            : strcmp(b->scenario, "latency") == 0 ? SC_LATENCY
                                                  : SC_ENQUEUE;
    int n = snprintf(b->enq_path, sizeof b->enq_path, "/v1/queues/%s/jobs", b->queue);
    int h = snprintf(b->hdr, sizeof b->hdr, "Host: %s\r\nContent-Type: application/json\r\n%s%s%s",
                     b->host, b->token ? "Authorization: Bearer " : "", b->token ? b->token : "",
                     b->token ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof b->enq_path || h < 0 || (size_t)h >= sizeof b->hdr)
        return -1;
    b->hdrlen = (size_t)h;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", b->port);
    if (getaddrinfo(b->host, port, &hints, &ai) != 0 || !ai)
        return -1;
    memcpy(&b->addr, ai->ai_addr, ai->ai_addrlen);
    b->addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* Runs b's scenario to its end on a fresh event base. */
static void run(bench *b)
{
    if (prepare(b) != 0) {
        b->errors++;
        return;
    }
    b->base = event_base_new();
    b->conns = calloc((size_t)b->nconns, sizeof *b->conns);
    for (int i = 0; i < PRODUCERS; i++)
        conn_init(&b->producers[i], b, -1);
    if (!b->base || !b->conns) {
        b->errors++;
        goto out;
    }
    for (int i = 0; i < b->nconns; i++)
        conn_init(&b->conns[i], b, i);
    b->watchdog = event_new(b->base, -1, EV_PERSIST, watchdog_tick, b);
    struct timeval sec = {1, 0};
    if (!b->watchdog || event_add(b->watchdog, &sec) != 0) {
        b->errors++;
        goto out;
    }
    b->t0_us = now_us();
    for (int i = 0; i < b->nconns; i++)
        issue(&b->conns[i]);
    if (b->sc == SC_LATENCY) {
        b->tick = evtimer_new(b->base, produce_tick, b);
        produce_tick(-1, 0, b);
    }
    event_base_dispatch(b->base);
    if (!b->t1_us)
        b->t1_us = now_us();
out:
    for (int i = 0; b->conns && i < b->nconns; i++)
        conn_fini(&b->conns[i]);
    free(b->conns);
    b->conns = NULL;
    for (int i = 0; i < PRODUCERS; i++)
        conn_fini(&b->producers[i]);
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
