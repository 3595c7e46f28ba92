/* SPDX-License-Identifier: MIT
 *
 * `errand bench`'s load client: many keep-alive HTTP/1.1 connections on
 * loopback, each with at most one request in flight, written and read on
 * raw sockets from libevent's event loop (libevent's HTTP client cost more
 * CPU per request than the server's request handling), and the watchdog
 * that fails requests left without a reply. It knows nothing of the
 * scenarios beyond when a run cannot go on.
 */
#include "cli/bench.h"
#include "util/buf.h"
#include "util/clock.h"

#include <errno.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CONN_BUF_MAX ((size_t)1 << 30) /* bytes of one request or reply */
/* A reply not complete this long after its request is an error. */
#define REPLY_TIMEOUT_US (30 * 1000000LL)

int64_t er_bench_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

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
void er_bench_send_json(conn *c, const char *path, const char *body, size_t len, reply_fn cb)
{
    bench *b = c->b;
    if (c->fd < 0 && conn_open(c) != 0) {
        b->errors++;
        return;
    }
    c->on_reply = cb;
    c->busy = true;
    c->sent_us = er_bench_now_us();
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
void er_bench_watchdog_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bench *b = arg;
    int64_t t = er_bench_now_us();
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
            b->t1_us = er_bench_now_us();
        event_base_loopexit(b->base, NULL);
    }
}

void er_bench_conn_init(conn *c, bench *b, int idx)
{
    memset(c, 0, sizeof *c);
    c->b = b;
    c->fd = -1;
    c->idx = idx;
}

void er_bench_conn_fini(conn *c)
{
    conn_close(c);
    free(c->out);
    free(c->in);
    free(c->acks);
    free(c->q);
}
