/* SPDX-License-Identifier: MIT
 *
 * The Faktory frontend's life and its connections: the listener (the
 * loopback rule of server/http/listen.h), a bounded number of
 * connections, each a bufferevent with a bounded input (one command line)
 * and one command in flight at a time, the greeting and the handshake gate
 * (nothing but HELLO first; an HTTP-looking first line closes at once),
 * and sending replies; with --faktory-tls-cert/-key each connection is TLS
 * (bufferevent_openssl) from its first byte. Command handlers are in cmds.c.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/faktory/fk_internal.h"
#include "server/faktory/job_map.h"
#include "server/http/listen.h"
#include "util/log.h"

#define REAP_PERIOD_S 5

/* The wid's last connection is gone: its buffered jobs go back. */
static void wid_left(er_faktory *f, const char *wid)
{
    if (!wid[0] || !f->engine)
        return;
    for (const fk_conn *o = f->conns; o; o = o->next)
        if (!o->gone && strcmp(o->wid, wid) == 0)
            return;
    er_fk_pre_release(f, er_fk_worker_find(f, wid), INT64_MAX);
}

static void conn_free(fk_conn *c)
{
    er_faktory *f = c->f;
    if (c->prev)
        c->prev->next = c->next;
    else
        f->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    f->nconns--;
    wid_left(f, c->wid);
    if (c->bev)
        bufferevent_free(c->bev);
    er_failure_fini(&c->failure);
    free(c->track_progress);
    er_fk_names_free(c);
    er_buf_fini(&c->out);
    free(c);
}

/* The socket is done with, closed now; the memory stays (process() or the
 * request in flight frees it). */
static void conn_shut(fk_conn *c)
{
    if (c->bev) {
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    c->gone = true;
    if (c->pending && c->pending->type == ER_REQ_FETCH && !c->parked)
        er_engine_abandon(c->f->engine, c->pending);
}

/* conn_shut, and the memory freed once no request is in flight and
 * process() is not on the stack. */
static void conn_close(fk_conn *c)
{
    conn_shut(c);
    if (!c->pending && !c->in_process)
        conn_free(c);
}

/* c->out onto the wire. On a plain connection with nothing queued before
 * it, the reply is written to the socket at once: no write event to add
 * and remove, and no loop turn before it leaves. What the socket does not
 * take goes to the bufferevent, which sends it in order. A TLS
 * connection's bytes always go through its bufferevent (the socket's fd
 * carries records, never plain text). */
static void send_out(fk_conn *c)
{
    const char *p = c->out.data;
    size_t n = c->out.len;
    struct evbuffer *pending = bufferevent_get_output(c->bev);
    evutil_socket_t fd = c->f->tls ? -1 : bufferevent_getfd(c->bev);
    if (fd >= 0 && evbuffer_get_length(pending) == 0) {
        ssize_t w = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        }
        /* an error (EAGAIN, or the peer gone) is left to the bufferevent:
         * it writes the rest, or reports the error to on_event */
    }
    if (n)
        bufferevent_write(c->bev, p, n);
}

void er_fk_send(fk_conn *c, bool close)
{
    if (c->gone || !c->bev) {
        er_buf_reset(&c->out);
        return;
    }
    if (c->out.err) {
        /* a reply past ER_FK_OUT_MAX or out of memory: say so instead */
        er_buf_reset(&c->out);
        er_fk_reply_error(&c->out, "ERR", "reply too large or out of memory");
    }
    if (c->out.len)
        send_out(c);
    er_buf_reset(&c->out);
    if (close) {
        c->closing = true;
        bufferevent_disable(c->bev, EV_READ);
        bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0); /* on_write once all is sent */
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            conn_close(c);
    }
}

void er_fk_send_error(fk_conn *c, const char *code, const char *msg, bool close)
{
    er_fk_reply_error(&c->out, code, msg);
    er_fk_send(c, close);
}

static void process(fk_conn *c);

static void on_done(er_req *r)
{
    fk_conn *c = r->arg;
    if (!c) {
        er_req_free(r);
        return;
    }
    c->pending = NULL;
    if (c->gone) {
        /* nobody got these: back to waiting rather than to their leases' end */
        if (r->type == ER_REQ_FETCH && !r->rc && r->list.len)
            er_fk_pre_release_jobs(c->f, r->list.items, r->list.len);
        er_req_free(r);
        if (!c->in_process)
            conn_free(c);
        return;
    }
    fk_finish fin = c->finish;
    c->finish = NULL;
    bool nested = c->in_process;
    c->in_process = true; /* fin may close c: freed below, not inside */
    fin(c, r);            /* frees r, or submits it (or another) again */
    c->in_process = nested;
    if (nested)
        return;
    if (c->gone) {
        if (!c->pending)
            conn_free(c);
        return;
    }
    if (!c->pending && !c->closing)
        process(c);
}

void er_fk_submit(fk_conn *c, er_req *r, fk_finish finish)
{
    c->pending = r;
    c->finish = finish;
    r->arg = c;
    r->done = on_done;
    er_engine_submit(c->f->engine, r);
}

void er_fk_park(fk_conn *c, er_req *r, fk_finish finish)
{
    c->pending = r;
    c->finish = finish;
    c->parked = true;
    r->arg = c;
    r->done = on_done;
}

void er_fk_wake(er_faktory *f, const char *wid)
{
    /* those parked now; a connection woken may park again, on a later refill */
    for (fk_conn *c = f->conns; c; c = c->next)
        if (c->parked && strcmp(c->wid, wid) == 0)
            c->wake = true;
    for (;;) {
        fk_conn *c = f->conns;
        while (c && !c->wake)
            c = c->next;
        if (!c)
            return;
        c->wake = false;
        c->parked = false;
        on_done(c->pending); /* may free c */
    }
}

/* The first line: only HELLO goes on; anything else closes (an HTTP
 * request without a word, so a web page learns nothing of the port). */
static bool gate(fk_conn *c, const char *line, size_t n)
{
    if (c->hello)
        return true;
    if (er_fk_looks_like_http(line, n)) {
        ER_LOG(ER_LOG_WARN, NULL, "faktory: closed a connection that spoke HTTP");
        conn_shut(c); /* only process() calls gate: it frees c */
        return false;
    }
    if (n < 5 || memcmp(line, "HELLO", 5) != 0 || (n > 5 && line[5] != ' ')) {
        er_fk_send_error(c, "ERR", "HELLO is the first command", true);
        return false;
    }
    return true;
}

static void process(fk_conn *c)
{
    c->in_process = true;
    while (!c->pending && !c->closing && !c->gone) {
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) > ER_FK_OUT_PENDING) {
            c->blocked = true; /* a peer that sends and never reads: wait for it */
            break;
        }
        struct evbuffer *in = bufferevent_get_input(c->bev);
        size_t len = evbuffer_get_length(in);
        if (len == 0)
            break;
        /* A long line arrives in many reads: look for its end only in the
         * bytes not searched yet, and make it contiguous once, when whole. */
        if (c->scanned < len) {
            struct evbuffer_ptr from;
            evbuffer_ptr_set(in, &from, c->scanned, EVBUFFER_PTR_SET);
            struct evbuffer_ptr nl = evbuffer_search(in, "\n", 1, &from);
            if (nl.pos < 0) {
                c->scanned = len;
                if (len <= c->f->line_max + 1)
                    break; /* wait for more; the reader below judges a longer one */
            }
        } else if (len <= c->f->line_max + 1) {
            break;
        }
        c->scanned = 0;
        size_t look = len < c->f->line_max + 2 ? len : c->f->line_max + 2;
        const char *buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
        size_t n = 0, used = 0;
        int rc = er_fk_line_next(buf, look, c->f->line_max, &n, &used);
        if (rc == 0)
            break;
        if (rc < 0) {
            char msg[96];
            snprintf(msg, sizeof msg, "line longer than %zu bytes", c->f->line_max);
            er_fk_send_error(c, "ERR", msg, true);
            break;
        }
        if (gate(c, buf, n))
            er_fk_run(c, buf, n);
        if (c->gone)
            break;
        evbuffer_drain(in, used);
    }
    c->in_process = false;
    if (c->gone) {
        if (!c->pending)
            conn_free(c);
        return;
    }
    /* One command runs at a time: while one is in flight, what the peer
     * sends more waits in the input, bounded by its watermark (one line),
     * so reading need not stop and start again for every command. Reading
     * stops for a peer that does not read its replies. */
    if (c->blocked)
        bufferevent_disable(c->bev, EV_READ);
    else if (!c->closing)
        bufferevent_enable(c->bev, EV_READ);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    (void)bev;
    process(arg);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    fk_conn *c = arg;
    if (c->closing && !c->gone) {
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            conn_close(c);
        else
            bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0); /* called again when empty */
        return;
    }
    if (c->blocked && !c->gone) {
        c->blocked = false;
        process(c);
    }
}

/* A TLS handshake refused (a plaintext client, a bad hello): logged at
 * most once in 10 s, with OpenSSL's reason. */
static void log_tls_refused(struct bufferevent *bev)
{
    static int64_t last;
    unsigned long e = bufferevent_get_openssl_error(bev);
    int64_t now = er_now_ms();
    if (now - last < 10000)
        return;
    last = now;
    const char *why = e ? ERR_reason_error_string(e) : NULL;
    ER_LOG(ER_LOG_WARN, NULL, "faktory: closed a connection whose TLS handshake failed (%s)",
           why ? why : "connection closed");
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    fk_conn *c = arg;
    if (what & BEV_EVENT_CONNECTED)
        return; /* the TLS handshake is done: the greeting goes out now */
    if (c->f->tls && !c->hello && (what & BEV_EVENT_ERROR)) {
        log_tls_refused(bev);
        /* what the peer sent and OpenSSL did not read (a plaintext line)
         * is read and dropped, so the close is a FIN, not a reset */
        char junk[4096];
        evutil_socket_t fd = bufferevent_getfd(bev);
        for (int i = 0; fd >= 0 && i < 16 && recv(fd, junk, sizeof junk, MSG_DONTWAIT) > 0; i++)
            continue;
    }
    conn_close(c); /* EOF, error or the handshake's timeout */
}

static void greet(fk_conn *c)
{
    er_faktory *f = c->f;
    char tok[33];
    er_secure_token(tok);
    memcpy(c->salt, tok, 16);
    c->salt[16] = '\0';
    char hi[128];
    if (f->ntokens)
        snprintf(hi, sizeof hi, "HI {\"v\":2,\"s\":\"%s\",\"i\":%d}", c->salt,
                 ER_FK_HASH_ITERATIONS);
    else
        snprintf(hi, sizeof hi, "HI {\"v\":2}");
    er_fk_reply_simple(&c->out, hi);
    er_fk_send(c, false);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    er_faktory *f = arg;
    if (f->nconns >= f->max_conns) {
        static const char full[] = "-ERR too many connections\r\n";
        ssize_t w = send(fd, full, sizeof full - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)w;
        evutil_closesocket(fd);
        return;
    }
    fk_conn *c = calloc(1, sizeof *c);
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    c->f = f;
    er_buf_init(&c->out, ER_FK_OUT_MAX);
    if (f->tls) {
        SSL *ssl = SSL_new(f->tls);
        c->bev = ssl ? bufferevent_openssl_socket_new(f->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                      BEV_OPT_CLOSE_ON_FREE)
                     : NULL;
        if (!c->bev)
            SSL_free(ssl);
        else /* a peer that closes without close_notify is an EOF, not an error */
            bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
    } else {
        c->bev = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!c->bev) {
        evutil_closesocket(fd);
        er_buf_fini(&c->out);
        free(c);
        return;
    }
    c->next = f->conns;
    if (f->conns)
        f->conns->prev = c;
    f->conns = c;
    f->nconns++;
    /* input stops at one line and its end: the line reader refuses more */
    bufferevent_setwatermark(c->bev, EV_READ, 0, f->line_max + 2);
    /* on_write runs once the replies waiting are down to half the bound */
    bufferevent_setwatermark(c->bev, EV_WRITE, ER_FK_OUT_PENDING / 2, 0);
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    struct timeval hs = {ER_FK_HANDSHAKE_S, 0};
    bufferevent_set_timeouts(c->bev, &hs, NULL);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    greet(c);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_faktory *f = arg;
    int64_t now = er_now_ms();
    er_fk_workers_reap(f, now);
    er_fk_cache_sweep(&f->leases, now);
    for (fk_worker *w = f->workers; w; w = w->next)
        w->peak = w->held; /* "lately": since the last REAP_PERIOD_S tick */
}

static void on_beat_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_fk_beats_flush(arg, true);
}

static void on_prefetch_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_fk_pre_sweep(arg, er_now_ms());
}

/* OpenSSL's reason for the last error, or `fallback`. */
static const char *tls_reason(const char *fallback)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : fallback;
}

/* The TLS context of cfg's certificate chain and key into f->tls, or an
 * error naming the flag and the file. */
static int tls_load(er_faktory *f, const er_faktory_config *cfg, er_error *err)
{
    if (!cfg->tls_cert != !cfg->tls_key)
        return er_error_set(err, ER_EINVAL, cfg->tls_cert ? "faktory-tls-key" : "faktory-tls-cert",
                            "--faktory-tls-cert and --faktory-tls-key go together (%s is missing)",
                            cfg->tls_cert ? "--faktory-tls-key" : "--faktory-tls-cert");
    if (!cfg->tls_cert)
        return 0;
    const char *files[2] = {cfg->tls_cert, cfg->tls_key};
    static const char *const flags[2] = {"faktory-tls-cert", "faktory-tls-key"};
    for (int i = 0; i < 2; i++)
        if (access(files[i], R_OK) != 0)
            return er_error_set(err, ER_EINVAL, flags[i], "--%s %s: %s", flags[i], files[i],
                                strerror(errno));
    ERR_clear_error();
    f->tls = SSL_CTX_new(TLS_server_method());
    if (!f->tls)
        return er_error_set(err, ER_ENOMEM, NULL, "TLS: %s", tls_reason("out of memory"));
    SSL_CTX_set_min_proto_version(f->tls, TLS1_2_VERSION);
    SSL_CTX_set_options(f->tls, SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(f->tls, cfg->tls_cert) != 1)
        return er_error_set(err, ER_EINVAL, flags[0],
                            "--faktory-tls-cert %s: not a usable PEM certificate chain (%s)",
                            cfg->tls_cert, tls_reason("unreadable"));
    bool loaded = SSL_CTX_use_PrivateKey_file(f->tls, cfg->tls_key, SSL_FILETYPE_PEM) == 1;
    unsigned long e = ERR_peek_last_error();
    bool mismatch = ERR_GET_LIB(e) == ERR_LIB_X509 && ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH;
    if (!loaded && !mismatch)
        return er_error_set(err, ER_EINVAL, flags[1],
                            "--faktory-tls-key %s: not a usable PEM private key (%s)",
                            cfg->tls_key, tls_reason("unreadable"));
    if (mismatch || SSL_CTX_check_private_key(f->tls) != 1)
        return er_error_set(err, ER_EINVAL, flags[1],
                            "--faktory-tls-key %s is not the key of the certificate in "
                            "--faktory-tls-cert %s",
                            cfg->tls_key, cfg->tls_cert);
    return 0;
}

int er_faktory_tls_check(const char *cert, const char *key, er_error *err)
{
    er_faktory probe = {0};
    er_faktory_config cfg = {.tls_cert = cert, .tls_key = key};
    int rc = tls_load(&probe, &cfg, err);
    SSL_CTX_free(probe.tls);
    return rc;
}

int er_faktory_start(struct event_base *base, er_engine *engine, const er_faktory_config *cfg,
                     er_faktory **out, er_error *err)
{
    *out = NULL;
    char host[128], portstr[16];
    int port = 0;
    int rc = er_listen_prepare(cfg->listen, cfg->ntokens, "faktory-listen", host, sizeof host,
                               &port, err);
    if (rc < 0)
        return rc;
    er_faktory *f = calloc(1, sizeof *f);
    if (!f)
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    f->base = base;
    f->engine = engine;
    f->tokens = cfg->tokens;
    f->ntokens = cfg->ntokens;
    f->line_max = cfg->line_max ? cfg->line_max : ER_FK_LINE_MAX_DEFAULT;
    f->payload_max = cfg->payload_max ? cfg->payload_max : ER_PAYLOAD_MAX_DEFAULT;
    f->max_conns = cfg->max_connections > 0 ? cfg->max_connections : 10000;
    f->reserve_min_ms = cfg->reserve_min_ms > 0 ? cfg->reserve_min_ms : ER_FK_RESERVE_MIN_MS;
    if (cfg->prefetch < 0 || cfg->prefetch > ER_FK_PREFETCH_MAX) {
        free(f);
        return er_error_set(err, ER_EINVAL, "faktory-prefetch", "faktory-prefetch must be 1..%d",
                            ER_FK_PREFETCH_MAX);
    }
    f->prefetch = cfg->prefetch ? cfg->prefetch : ER_FK_PREFETCH_DEFAULT;
    f->started_ms = er_now_ms();
    er_rand_init_system(&f->rand);
    if ((rc = tls_load(f, cfg, err)) < 0) {
        er_faktory_free(f);
        return rc;
    }
    snprintf(f->node, sizeof f->node, "%s", cfg->node_id ? cfg->node_id : "errand");

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    snprintf(portstr, sizeof portstr, "%d", port);
    if (getaddrinfo(host, portstr, &hints, &ai) != 0 || !ai) {
        er_faktory_free(f);
        return er_error_set(err, ER_EINVAL, "faktory-listen", "cannot use address %s", host);
    }
    f->lev = evconnlistener_new_bind(base, on_accept, f,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128, ai->ai_addr,
                                     (int)ai->ai_addrlen);
    int e = errno;
    freeaddrinfo(ai);
    if (!f->lev) {
        er_faktory_free(f);
        return er_error_set(err, ER_EUNAVAIL, "faktory-listen", "cannot listen on %s: %s",
                            cfg->listen, strerror(e));
    }
    int fd = evconnlistener_get_fd(f->lev);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char addr[80], extra[128];
    bool loopback;
    rc = er_listen_bound(fd, cfg->ntokens, "faktory-listen", addr, sizeof addr, &f->port,
                         &loopback, err);
    if (rc < 0) {
        er_faktory_free(f);
        return rc;
    }
    f->reap_ev = event_new(base, -1, EV_PERSIST, on_reap, f);
    struct timeval period = {REAP_PERIOD_S, 0};
    if (!f->reap_ev || event_add(f->reap_ev, &period) != 0) {
        er_faktory_free(f);
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    }
    f->pre_ev = event_new(base, -1, EV_PERSIST, on_prefetch_sweep, f);
    struct timeval sweep = {0, ER_FK_PREFETCH_SWEEP_MS * 1000};
    if (!f->pre_ev || event_add(f->pre_ev, &sweep) != 0) {
        er_faktory_free(f);
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    }
    f->beat_ev = event_new(base, -1, EV_PERSIST, on_beat_flush, f);
    struct timeval flush = {ER_FK_BEAT_FLUSH_MS / 1000, (ER_FK_BEAT_FLUSH_MS % 1000) * 1000};
    if (!f->beat_ev || event_add(f->beat_ev, &flush) != 0) {
        er_faktory_free(f);
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    }
    snprintf(extra, sizeof extra, "\"listen\":\"%s\",\"tls\":%s", addr,
             f->tls ? "true" : "false");
    ER_LOG(ER_LOG_INFO, extra, "faktory listening");
    *out = f;
    return 0;
}

int er_faktory_port(const er_faktory *f)
{
    return f->port;
}

void er_faktory_stop_accepting(er_faktory *f)
{
    if (!f)
        return;
    if (f->lev) {
        evconnlistener_free(f->lev);
        f->lev = NULL;
    }
    f->stopping = true; /* buffered jobs go back while the engine still takes requests */
    for (fk_worker *w = f->workers; w; w = w->next)
        er_fk_pre_release(f, w, INT64_MAX);
}

void er_faktory_free(er_faktory *f)
{
    if (!f)
        return;
    f->engine = NULL; /* no releases from here: the leases expire */
    er_faktory_stop_accepting(f);
    while (f->conns) {
        fk_conn *c = f->conns;
        if (c->parked) {
            er_req_free(c->pending); /* never submitted */
            c->pending = NULL;
        } else if (c->pending) {
            /* the engine is gone by now or answers later: forget the link */
            c->pending->arg = NULL;
            c->pending = NULL;
        }
        conn_free(c);
    }
    if (f->reap_ev)
        event_free(f->reap_ev);
    if (f->pre_ev)
        event_free(f->pre_ev);
    if (f->beat_ev)
        event_free(f->beat_ev);
    er_fk_pre_refills_forget(f);
    for (int i = 0; i < ER_FK_BEATS_INFLIGHT; i++)
        if (f->beats[i])
            f->beats[i]->arg = NULL; /* answered later, or freed with the engine */
    er_fk_workers_free(f);
    er_fk_cache_free(&f->leases);
    SSL_CTX_free(f->tls);
    free(f);
}
