/* SPDX-License-Identifier: MIT
 *
 * The HTTP server's life: the listen address (a non-loopback one needs
 * tokens), binding with TCP_NODELAY, libevent's limits (body, headers,
 * timeout), and the pool of per-request contexts the server owns, so a
 * request costs no allocation here. Dispatch is in http_dispatch.c, replies
 * and the engine hand-off in http_reply.c, request parsing in http_parse.c,
 * handlers in routes_*.c and metrics.c. Everything runs on the event-loop
 * thread.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/job.h"
#include "server/http/http_internal.h"
#include "server/http/listen.h"
#include "util/log.h"

#define HTTP_TIMEOUT_S 60
#define DEFAULT_MAX_BODY (16u * 1024 * 1024)

/* ---- request contexts ---- */

er_hctx *er_http_ctx_get(er_server *s)
{
    er_hctx *c = s->free_ctx;
    if (c) {
        s->free_ctx = c->next_free;
        s->nfree--;
    } else {
        c = malloc(sizeof *c);
        if (!c)
            return NULL;
    }
    c->s = s;
    c->req = NULL;
    c->route = (int)er_nroutes;
    c->flags = 0;
    c->param[0] = '\0';
    c->query = NULL;
    c->finish = NULL;
    c->ereq = NULL;
    c->closed_ev = NULL;
    c->orphan = false;
    c->parked = false;
    c->sending = false;
    c->started_ms = s->access_log ? er_mono_ms() : 0;
    c->pv = c->pname = NULL;
    c->pl = 0;
    c->who[0] = '\0';
    c->by_session = false;
    c->sid_hash[0] = '\0';
    c->caller = (er_caller){ER_ROLE_NONE, ""};
    c->stream = NULL;
    c->next_free = NULL;
    return c;
}

void er_http_ctx_release(er_hctx *c)
{
    er_server *s = c->s;
    er_http_stream_free(c);
    s->inflight--;
    if (s->nfree < ER_HTTP_CTX_CACHE) {
        c->next_free = s->free_ctx;
        s->free_ctx = c;
        s->nfree++;
    } else {
        free(c);
    }
}

/* ---- lifecycle ---- */

/* --allowed-hosts: a comma-separated list of host names (no port, no spaces).
 * With s NULL it only checks. */
static int split_hosts(er_server *s, const char *list, er_error *err)
{
    const char *p = list;
    do {
        size_t n = strcspn(p, ",");
        if (n == 0 || n > 253)
            return er_error_set(err, ER_EINVAL, "allowed-hosts", "--allowed-hosts names must be 1..253 "
                                "characters, comma-separated");
        for (size_t i = 0; i < n; i++) {
            char ch = p[i];
            bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '.' || ch == '-';
            if (!ok)
                return er_error_set(err, ER_EINVAL, "allowed-hosts",
                                    "--allowed-hosts names may hold only A-Z a-z 0-9 . -");
        }
        if (s) {
            char **v = realloc(s->allowed_hosts, (s->nallowed_hosts + 1) * sizeof *v);
            if (!v)
                return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
            s->allowed_hosts = v;
            if (!(v[s->nallowed_hosts] = strndup(p, n)))
                return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
            s->nallowed_hosts++;
        }
        p += n;
    } while (*p++ == ',');
    return 0;
}

int er_server_check_allowed_hosts(const char *list, er_error *err)
{
    return list ? split_hosts(NULL, list, err) : 0;
}

static void flush_access_log(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_server *s = arg;
    fflush(s->access_log);
}

static void sample_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_metrics_sample_tick(arg);
}

int er_server_start(struct event_base *base, er_engine *engine, const er_server_config *cfg,
                    er_server **out, er_error *err)
{
    *out = NULL;
    char host[128];
    int port = 0;
    int rc = er_listen_prepare(cfg->listen, cfg->ntokens, "listen", host, sizeof host, &port, err);
    if (rc < 0)
        return rc;
    er_server *s = calloc(1, sizeof *s);
    if (!s)
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    s->base = base;
    s->engine = engine;
    s->tokens = cfg->tokens;
    s->ntokens = cfg->ntokens;
    s->max_body = cfg->max_body ? cfg->max_body : DEFAULT_MAX_BODY;
    s->payload_max = cfg->payload_max ? cfg->payload_max : ER_PAYLOAD_MAX_DEFAULT;
    s->outbox = cfg->outbox;
    s->max_connections = cfg->max_connections > 0 ? (size_t)cfg->max_connections : 10000;
    s->head_timeout_ms = cfg->head_timeout_ms > 0 ? cfg->head_timeout_ms : 10000;
    s->body_min_rate = cfg->body_min_rate;
    s->body_budget = cfg->max_body_in_flight ? cfg->max_body_in_flight : 64u << 20;
    if (s->body_budget < s->max_body) {
        size_t budget = s->body_budget, max_body = s->max_body;
        er_server_free(s);
        return er_error_set(err, ER_EINVAL, "max-body-in-flight",
                            "--max-body-in-flight (%zu) must be at least --max-body (%zu)",
                            budget, max_body);
    }
    s->ui_idle_ms = cfg->ui_session_idle_ms > 0 ? cfg->ui_session_idle_ms
                                                : ER_UI_SESSION_IDLE_DEFAULT_MS;
    if (cfg->allowed_hosts && split_hosts(s, cfg->allowed_hosts, err) < 0) {
        er_server_free(s);
        return err->code;
    }
    if (cfg->access_log) {
        /* buffered, flushed by a timer: the loop never waits on each line */
        s->access_log = fopen(cfg->access_log, "a");
        if (!s->access_log) {
            int e = errno;
            er_server_free(s);
            return er_error_set(err, ER_EINVAL, "access-log", "cannot open %s: %s",
                                cfg->access_log, strerror(e));
        }
        setvbuf(s->access_log, NULL, _IOFBF, 64 * 1024);
        s->access_flush = event_new(base, -1, EV_PERSIST, flush_access_log, s);
        struct timeval second = {1, 0};
        if (!s->access_flush || event_add(s->access_flush, &second) != 0) {
            er_server_free(s);
            return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
        }
    }
    er_rand_init_system(&s->rand);
    s->sample_ev = event_new(base, -1, EV_PERSIST, sample_tick, s);
    struct timeval quarter = {0, 250000};
    if (!s->sample_ev || event_add(s->sample_ev, &quarter) != 0) {
        er_server_free(s);
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    }
    s->http_counts = calloc((er_nroutes + 1) * 5, sizeof *s->http_counts);
    s->http = evhttp_new(base);
    if (!s->http_counts || !s->http) {
        er_server_free(s);
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    }
    /* Bodies up to max_body get our JSON 413; libevent cuts off anything
     * far beyond it (with its own 413) so memory stays bounded. */
    size_t hard = s->max_body * 2 > s->max_body + 65536 ? s->max_body * 2 : s->max_body + 65536;
    evhttp_set_max_body_size(s->http, (ev_ssize_t)hard);
    evhttp_set_max_headers_size(s->http, ER_HTTP_MAX_HEADERS);
    evhttp_set_timeout(s->http, HTTP_TIMEOUT_S);
    evhttp_set_default_content_type(s->http, "application/json");
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, er_http_on_request, s);
    if (er_http_conn_init(s, err) < 0) {
        er_server_free(s);
        return err->code;
    }

    /* A reply written to a vanished client must not kill the process. */
    struct sigaction old;
    if (sigaction(SIGPIPE, NULL, &old) == 0 && old.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);

    s->bound = evhttp_bind_socket_with_handle(s->http, host, (ev_uint16_t)port);
    if (!s->bound) {
        int e = errno;
        er_server_free(s);
        return er_error_set(err, ER_EUNAVAIL, "listen", "cannot listen on %s: %s", cfg->listen,
                            strerror(e));
    }
    /* Accepted sockets inherit TCP_NODELAY from the listener on Linux:
     * replies go out at once instead of waiting behind Nagle. */
    int one = 1;
    setsockopt(evhttp_bound_socket_get_fd(s->bound), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char addr[sizeof s->host_self], extra[128];
    rc = er_listen_bound(evhttp_bound_socket_get_fd(s->bound), cfg->ntokens, "listen", addr,
                         sizeof addr, &s->port, &s->host_loopback, err);
    if (rc < 0) {
        er_server_free(s);
        return rc;
    }
    snprintf(s->host_self, sizeof s->host_self, "%s", addr);
    snprintf(extra, sizeof extra, "\"listen\":\"%s\"", addr);
    s->accepting = true;
    er_http_conn_listen(s);
    ER_LOG(ER_LOG_INFO, extra, "listening");
    *out = s;
    return 0;
}

void er_server_set_dispatcher(er_server *s, er_dispatcher *d)
{
    s->dispatcher = d;
}

void er_server_set_faktory(er_server *s, struct er_faktory *f)
{
    s->faktory = f;
}

int er_server_port(const er_server *s)
{
    return s->port;
}

void er_server_stop_accepting(er_server *s)
{
    if (!s)
        return;
    if (s->bound) {
        evhttp_del_accept_socket(s->http, s->bound);
        s->bound = NULL;
    }
    s->accepting = false;
}

size_t er_server_inflight(const er_server *s)
{
    return s->inflight;
}

void er_server_free(er_server *s)
{
    if (!s)
        return;
    if (s->inflight)
        ER_LOG(ER_LOG_WARN, NULL, "server freed with %zu requests in flight", s->inflight);
    if (s->http)
        evhttp_free(s->http);
    er_http_conn_fini(s);
    while (s->free_ctx) {
        er_hctx *c = s->free_ctx;
        s->free_ctx = c->next_free;
        free(c);
    }
    if (s->access_flush)
        event_free(s->access_flush);
    if (s->sample_ev)
        event_free(s->sample_ev);
    if (s->access_log)
        fclose(s->access_log);
    free(s->http_counts);
    free(s->wbuf);
    for (size_t i = 0; i < s->nallowed_hosts; i++)
        free(s->allowed_hosts[i]);
    free(s->allowed_hosts);
    free(s);
}
