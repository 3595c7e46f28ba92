/* SPDX-License-Identifier: MIT
 *
 * The HTTP server's connections: their count (past --max-connections a new
 * one is answered 503 and closed), the backoff of a failed accept (EMFILE),
 * and each request's head and body before evhttp dispatches it. A head is
 * held back from libevent (a read low watermark) until it is whole; then
 * its route, token and Content-Length are checked and its body is counted
 * against --max-body-in-flight before libevent reads one byte of it. A
 * head has --head-timeout to arrive, a body --body-min-rate to keep up.
 * Why by hand: libevent 2.1 has no callback between a server request's
 * headers and its body (evhttp_set_newreqcb is 2.2's), so the head is
 * parsed here, from libevent's buffer, into libevent's header list.
 * Event-loop thread only.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/http/http_internal.h"
#include "util/log.h"

/* A head: request line and header lines. */
#define HEAD_MAX (ER_HTTP_MAX_HEADERS + 8192)
/* A refused connection reads (and drops) what its client still sends for
 * this long, so the client reads the refusal instead of a reset. */
#define LINGER_MS 2000
/* The low watermark that keeps evhttp from reading: no head is this big. */
#define HOLD ((size_t)1 << 40)
#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 1000
#define LOG_EVERY_MS 10000

typedef enum {
    K_HEAD,    /* waiting for a whole head, held from evhttp */
    K_SESSION, /* head held (nothing read) while its session cookie is looked up */
    K_BODY,    /* head passed; evhttp reads the body */
    K_BUSY,    /* dispatched: nothing to watch */
    K_REFUSED, /* answered by us: drops input until the client or LINGER_MS ends it */
} kstate;

typedef struct er_conn {
    er_server *s;
    struct bufferevent *bev; /* a reference of ours until the connection closes */
    struct evhttp_connection *evcon; /* NULL until bound (just after accept) */
    evutil_socket_t fd;
    struct event *timer;
    struct evbuffer_cb_entry *in_cb;
    kstate state;
    bool over_limit;  /* accepted past --max-connections */
    bool counted;     /* in s->nconns: open, and not refused */
    size_t scan;      /* K_HEAD: where the next unscanned line starts */
    int64_t deadline; /* K_HEAD, K_SESSION: the head's deadline (mono ms); 0: none yet */
    struct evbuffer *held; /* pipelined bytes set aside until evhttp starts its next request */
    int64_t body_start;
    size_t body_bytes;
    size_t reserved;  /* bytes of s->body_budget this request holds */
    /* while its head is judged, for the access log: */
    int method;
    const char *target; /* borrowed from the head's copy; NULL otherwise */
    er_caller who;
    int64_t head_start;
    /* K_SESSION: the session lookup, and the head's verdict so far */
    er_req *lookup;
    int route;
    size_t want, extra;
    bool chunked;    /* the head's body is chunked: its size is unknown */
    bool submitting; /* inside er_engine_submit */
    void (*close_cb)(struct evhttp_connection *, void *);
    void *close_arg;
} er_conn;

static er_server *servers; /* of this process, for the listener's error callback */

static void arm_ev(struct event *ev, int64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000 * 1000)};
    evtimer_add(ev, &tv);
}

static void arm(er_conn *k, int64_t ms)
{
    arm_ev(k->timer, ms);
}

static void unreserve(er_conn *k)
{
    k->s->body_inflight -= k->reserved;
    k->reserved = 0;
}

static void conn_free(er_conn *k)
{
    er_server *s = k->s;
    unreserve(k);
    if (k->lookup)
        k->lookup->arg = NULL; /* the engine's still; on_lookup frees it */
    if (k->fd >= 0 && (size_t)k->fd < s->conns_cap && s->conns[k->fd] == k)
        s->conns[k->fd] = NULL;
    if (k->counted)
        s->nconns--;
    event_free(k->timer);
    if (k->held)
        evbuffer_free(k->held);
    if (k->in_cb)
        evbuffer_remove_cb_entry(bufferevent_get_input(k->bev), k->in_cb);
    bufferevent_decref(k->bev);
    free(k);
}

/* libevent frees the connection (its bufferevent next). */
static void on_close(struct evhttp_connection *evcon, void *arg)
{
    er_conn *k = arg;
    if (k->close_cb)
        k->close_cb(evcon, k->close_arg);
    conn_free(k);
}

static er_conn *find(er_server *s, struct evhttp_connection *evcon)
{
    evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(evcon));
    if (fd < 0 || (size_t)fd >= s->conns_cap)
        return NULL;
    er_conn *k = s->conns[fd];
    return k && k->evcon == evcon ? k : NULL;
}

static const char *reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
    }
}

/* Answers with an error and ends the request: written straight to the
 * socket (a few hundred bytes into an idle socket's send buffer) since
 * evhttp has not seen this request. The connection then lingers, reading
 * and dropping, and closes. route: an index of er_routes or er_nroutes. */
static void refuse(er_conn *k, int route, int status, const char *code_name, const char *field,
                   const char *headers, const char *message)
{
    er_server *s = k->s;
    char body[ER_HTTP_ERROR_BODY_MAX];
    size_t blen = er_http_error_body(body, code_name, message, field);
    char out[sizeof body + 512];
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n%s\r\n",
                     status, reason(status), er_http_date(s), blen, headers ? headers : "");
    if (n > 0 && (size_t)n + blen <= sizeof out) {
        memcpy(out + n, body, blen);
        (void)send(k->fd, out, (size_t)n + blen, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    shutdown(k->fd, SHUT_WR);
    if (s->access_log && k->target)
        er_http_access_line(s, k->evcon, k->method, k->target, k->who, status, blen,
                            k->head_start);
    int cls = status / 100 - 1;
    s->http_counts[(size_t)route * 5 + (size_t)(cls < 0 || cls > 4 ? 4 : cls)]++;
    unreserve(k);
    if (k->counted) { /* going away: no longer holds a place */
        k->counted = false;
        s->nconns--;
    }
    k->state = K_REFUSED;
    bufferevent_setwatermark(k->bev, EV_READ, HOLD, 0);
    bufferevent_enable(k->bev, EV_READ);
    struct evbuffer *in = bufferevent_get_input(k->bev);
    evbuffer_drain(in, evbuffer_get_length(in));
    arm(k, LINGER_MS);
}

static void refuse_err(er_conn *k, int route, const er_error *e, const char *headers)
{
    refuse(k, route, er_error_http_status(e->code), er_error_code_name(e->code), e->field, headers,
           e->message);
}

/* Closes now, with a best-effort 408 (a slow client may not read it). */
static void cut(er_conn *k, const char *message)
{
    char body[ER_HTTP_ERROR_BODY_MAX];
    size_t blen = er_http_error_body(body, "timeout", message, NULL);
    char out[sizeof body + 256];
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 408 Request Timeout\r\nDate: %s\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                     er_http_date(k->s), blen);
    if (n > 0 && (size_t)n + blen <= sizeof out) {
        memcpy(out + n, body, blen);
        (void)send(k->fd, out, (size_t)n + blen, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    k->s->http_counts[er_nroutes * 5 + 3]++;
    evhttp_connection_free(k->evcon); /* on_close frees k */
}

/* Learns evhttp's connection (the bufferevent's callback argument) once
 * evhttp has set it up. False when evhttp gave up on it (k is freed). */
static bool bind_conn(er_conn *k)
{
    if (k->evcon)
        return true;
    er_server *s = k->s;
    void *arg = NULL;
    bufferevent_getcb(k->bev, NULL, NULL, NULL, &arg);
    evutil_socket_t fd = bufferevent_getfd(k->bev);
    if (!arg || fd < 0) {
        conn_free(k);
        return false;
    }
    if ((size_t)fd >= s->conns_cap) {
        size_t cap = s->conns_cap ? s->conns_cap : 64;
        while (cap <= (size_t)fd)
            cap *= 2;
        er_conn **v = realloc(s->conns, cap * sizeof *v);
        if (!v) {
            k->evcon = arg;
            k->fd = fd; /* not in s->conns: only refused */
            evhttp_connection_set_closecb(k->evcon, on_close, k);
            refuse(k, (int)er_nroutes, 503, "unavailable", NULL, "Retry-After: 1\r\n",
                   "out of memory");
            return true;
        }
        memset(v + s->conns_cap, 0, (cap - s->conns_cap) * sizeof *v);
        s->conns = v;
        s->conns_cap = cap;
    }
    k->evcon = arg;
    k->fd = fd;
    s->conns[fd] = k;
    evhttp_connection_set_closecb(k->evcon, on_close, k);
    if (k->over_limit) {
        s->conns_refused++;
        int64_t now = er_mono_ms();
        if (now >= s->refuse_log_next) {
            s->refuse_log_next = now + LOG_EVERY_MS;
            char extra[96];
            snprintf(extra, sizeof extra, "\"refused\":%llu,\"max_connections\":%zu",
                     (unsigned long long)s->conns_refused, s->max_connections);
            s->conns_refused = 0;
            ER_LOG(ER_LOG_WARN, extra, "connections refused: --max-connections reached");
        }
        refuse(k, (int)er_nroutes, 503, "unavailable", NULL, "Retry-After: 1\r\n",
               "too many connections; retry later");
        return true;
    }
    k->head_start = er_mono_ms();
    k->deadline = k->head_start + s->head_timeout_ms;
    arm(k, s->head_timeout_ms);
    return true;
}

/* ---- the head ---- */

static int method_of(const char *m)
{
    static const struct {
        const char *name;
        int method;
    } ms[] = {{"GET", EVHTTP_REQ_GET},         {"POST", EVHTTP_REQ_POST},
              {"PUT", EVHTTP_REQ_PUT},         {"DELETE", EVHTTP_REQ_DELETE},
              {"HEAD", EVHTTP_REQ_HEAD},       {"OPTIONS", EVHTTP_REQ_OPTIONS},
              {"PATCH", EVHTTP_REQ_PATCH}};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        if (strcmp(ms[i].name, m) == 0)
            return ms[i].method;
    return 0;
}

static bool token_char(unsigned char ch)
{
    return ch > 0x20 && ch < 0x7f && !strchr("()<>@,;:\\\"/[]?={}", ch);
}

/* The next line of h[*at..end): NUL-terminated in place (CR LF or LF, as
 * libevent's EVBUFFER_EOL_CRLF). NULL at the end. */
static char *next_line(char *h, size_t *at, size_t end)
{
    if (*at >= end)
        return NULL;
    char *p = h + *at;
    char *nl = memchr(p, '\n', end - *at);
    if (!nl)
        return NULL;
    *at = (size_t)(nl - h) + 1;
    if (nl > p && nl[-1] == '\r')
        nl--;
    *nl = '\0';
    return p;
}

static void headers_init(struct evkeyvalq *q)
{
    q->tqh_first = NULL; /* TAILQ_INIT */
    q->tqh_last = &q->tqh_first;
}

const char *er_http_head_parse(char *h, size_t len, er_http_head *out)
{
    out->method = out->minor = 0;
    out->major = 1;
    out->target = NULL;
    out->uri = NULL;
    headers_init(&out->headers);
    struct evkeyvalq *hdrs = &out->headers;
    /* header entries so far */
    size_t n = 0;
    if (memchr(h, '\0', len)) /* C strings would cut a line short where libevent does too */
        return "a NUL byte in the request head";
    size_t at = 0;
    char *line = next_line(h, &at, len);
    if (!line)
        return "malformed request line";
    char *sp1 = strchr(line, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || strchr(sp2 + 1, ' '))
        return "malformed request line";
    *sp1 = *sp2 = '\0';
    const char *ver = sp2 + 1;
    if (strncmp(ver, "HTTP/1.", 7) != 0 || ver[7] < '0' || ver[7] > '9' || ver[8])
        return "unsupported HTTP version";
    out->minor = ver[7] - '0';
    out->method = method_of(line);
    if (!out->method)
        return "unsupported method";
    out->uri = sp1[1] ? evhttp_uri_parse_with_flags(sp1 + 1, EVHTTP_URI_NONCONFORMANT) : NULL;
    if (!out->uri)
        return "malformed request target";
    out->target = sp1 + 1;
    while ((line = next_line(h, &at, len)) != NULL && *line) {
        if (*line == ' ' || *line == '\t')
            return "folded header lines are refused";
        char *colon = strchr(line, ':');
        if (!colon || colon == line)
            return "malformed header line";
        for (char *p = line; p < colon; p++)
            if (!token_char((unsigned char)*p))
                return "malformed header name";
        *colon = '\0';
        char *v = colon + 1;
        v += strspn(v, " \t");
        size_t vl = strlen(v);
        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
            v[--vl] = '\0';
        if (strchr(v, '\r')) /* evhttp_add_header refuses a CR in a value too */
            return "malformed header value";
        struct evkeyval *kv = n < ER_HTTP_HEAD_SLOTS ? &out->slots[n] : malloc(sizeof *kv);
        if (!kv)
            return "out of memory";
        n++;
        kv->key = line;
        kv->value = v;
        kv->next.tqe_next = NULL; /* TAILQ_INSERT_TAIL */
        kv->next.tqe_prev = hdrs->tqh_last;
        *hdrs->tqh_last = kv;
        hdrs->tqh_last = &kv->next.tqe_next;
    }
    return NULL;
}

void er_http_head_fini(er_http_head *h)
{
    if (h->uri)
        evhttp_uri_free(h->uri);
    h->uri = NULL;
    size_t i = 0;
    for (struct evkeyval *kv = h->headers.tqh_first, *next; kv; kv = next, i++) {
        next = kv->next.tqe_next;
        if (i >= ER_HTTP_HEAD_SLOTS)
            free(kv);
    }
    headers_init(&h->headers);
}

/* Route and bearer token of a request that announced a body (or asked
 * for 100 Continue): its route index, or -1 when refused. sid: the
 * session cookie to look up first, "" when none. */
static int early_check(er_conn *k, int method, const struct evhttp_uri *uri,
                       const struct evkeyvalq *hdrs, size_t want, char sid[65])
{
    er_server *s = k->s;
    const char *path = evhttp_uri_get_path(uri);
    if (!path || !*path)
        path = "/";
    char allow[64];
    const char *pv, *pname;
    size_t pl;
    int route = er_http_route_find(method, path, allow, &pv, &pl, &pname);
    if (route < 0) {
        if (allow[0]) {
            char hdr[96], msg[128];
            snprintf(hdr, sizeof hdr, "Allow: %s\r\n", allow);
            snprintf(msg, sizeof msg, "method %s not allowed; allowed: %s",
                     er_http_method_name(method), allow);
            refuse(k, (int)er_nroutes, 405, "invalid_argument", "method", hdr, msg);
        } else {
            refuse(k, (int)er_nroutes, 404, "not_found", NULL, NULL, "no such endpoint");
        }
        return -1;
    }
    const er_route *rt = &er_routes[route];
    /* a bearer token is checked now; a dashboard session cookie (sid
     * set) is looked up in the store before the body is read */
    sid[0] = '\0';
    const char *authz = evhttp_find_header(hdrs, "Authorization");
    bool guarded = s->ntokens > 0 && rt->access != ER_ACCESS_OPEN && rt->access != ER_ACCESS_UI;
    bool bearer = authz || !er_ui_cookie_headers(hdrs, sid);
    if (!guarded || bearer)
        explicit_bzero(sid, 65);
    if (guarded && bearer) {
        er_error e = {0};
        if (er_http_authorize(s, authz, rt->access, &k->who, &e) < 0) {
            char *peer = NULL;
            ev_uint16_t port = 0;
            evhttp_connection_get_peer(k->evcon, &peer, &port);
            er_http_log_auth_failure(s, peer, port, rt, &e);
            refuse_err(k, route, &e, e.code == ER_EAUTH ? "WWW-Authenticate: Bearer\r\n" : NULL);
            return -1;
        }
    }
    return route;
}

/* The head passed: evhttp reads it and its body (want bytes announced,
 * `extra` of them already buffered), held against the budget. */
static void release(er_conn *k, size_t want, size_t extra)
{
    er_server *s = k->s;
    /* an open route reads no body bigger than a login form */
    bool open = k->route < (int)er_nroutes && er_routes[k->route].access == ER_ACCESS_OPEN;
    size_t limit = open ? ER_HTTP_OPEN_BODY_MAX : s->max_body;
    if (k->chunked && want)
        want = limit;
    if (want > limit) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body exceeds %zu bytes", limit);
        refuse(k, k->route, 413, "payload_too_large", "body", NULL, msg);
        return;
    }
    if (want > s->body_budget - s->body_inflight) {
        refuse(k, k->route, 503, "unavailable", "body", "Retry-After: 1\r\n",
               "too many request bodies in flight; retry later");
        return;
    }
    k->reserved = want;
    s->body_inflight += want;
    /* libevent cuts a chunked body off past what was counted for it */
    evhttp_connection_set_max_body_size(k->evcon, (ev_ssize_t)(k->chunked ? want : limit));
    k->state = want ? K_BODY : K_BUSY;
    k->body_start = er_mono_ms();
    k->body_bytes = extra;
    evtimer_del(k->timer);
    if (want && s->body_min_rate)
        arm(k, 1000);
    /* evhttp reads it past the low watermark: at once when called from
     * on_input (its readcb runs next), else through bufferevent_trigger;
     * it answers Expect: 100-continue now, and only now */
    bufferevent_setwatermark(k->bev, EV_READ, 0, 0);
}

/* The session lookup of a cookie-borne head is done (engine, loop thread). */
static void on_lookup(er_req *r)
{
    er_conn *k = r->arg;
    if (!k) { /* the connection closed meanwhile */
        er_req_free(r);
        return;
    }
    k->lookup = NULL;
    er_server *s = k->s;
    const er_route *rt = &er_routes[k->route];
    bufferevent_enable(k->bev, EV_READ);
    bool released = false;
    if (r->rc == ER_ENOTFOUND) {
        er_error e;
        er_error_set(&e, ER_EAUTH, "session", "the session is unknown or expired; log in");
        char *peer = NULL;
        ev_uint16_t port = 0;
        evhttp_connection_get_peer(k->evcon, &peer, &port);
        er_http_log_auth_failure(s, peer, port, rt, &e);
        refuse_err(k, k->route, &e, "WWW-Authenticate: Bearer\r\n");
    } else if (r->rc) {
        er_error e = r->err;
        if (!e.code)
            e.code = r->rc;
        refuse_err(k, k->route, &e, NULL);
    } else if (!er_http_role_allows((er_role)r->session.role, rt->access)) {
        refuse(k, k->route, 403, "permission_denied", "session", NULL,
               "this session's role may not call this endpoint");
    } else if (!k->submitting) {
        release(k, k->want, k->extra);
        released = k->state != K_REFUSED;
    } else { /* answered inside er_engine_submit: only a refusal is */
        refuse(k, k->route, 503, "unavailable", NULL, NULL, "shutting down");
    }
    explicit_bzero(&r->session, sizeof r->session);
    er_req_free(r);
    if (released) /* last: evhttp may end the connection (and free k) in it */
        bufferevent_trigger(k->bev, EV_READ, 0);
}

/* Holds a head sent with a session cookie (and no Authorization) while its
 * session is looked up: nothing more is read meanwhile. */
static void start_lookup(er_conn *k, const char sid[65], int route, size_t want, size_t extra)
{
    er_server *s = k->s;
    er_req *r = er_req_new(ER_REQ_SESSION_TOUCH);
    char hash[65];
    er_ui_hash(sid, hash);
    if (!r || !(r->id = strdup(hash))) {
        er_req_free(r);
        refuse(k, route, 503, "unavailable", NULL, NULL, "out of memory");
        return;
    }
    r->extend_ms = s->ui_idle_ms;
    r->done = on_lookup;
    r->arg = k;
    k->lookup = r;
    k->state = K_SESSION;
    k->route = route;
    k->want = want;
    k->extra = extra;
    bufferevent_disable(k->bev, EV_READ);
    k->submitting = true;
    er_engine_submit(s->engine, r); /* on_lookup may run inside it (shutting down) */
    k->submitting = false;
}

/* The head is whole (h is its copy): refuse it, or let evhttp read it and
 * its body. */
static void check_head(er_conn *k, char *h, size_t hlen, size_t buffered)
{
    er_server *s = k->s;
    int route = (int)er_nroutes;
    er_http_head hd;
    k->who = (er_caller){ER_ROLE_NONE, ""};
    const char *bad = er_http_head_parse(h, hlen, &hd);
    k->method = hd.method;
    k->target = hd.target;
    if (!bad)
        bad = er_http_framing_problem(&hd.headers, hd.major, hd.minor);
    if (bad) {
        refuse(k, (int)er_nroutes, 400, "invalid_argument", "headers", NULL, bad);
        goto out;
    }
    size_t want = 0;
    const char *cl = evhttp_find_header(&hd.headers, "Content-Length");
    k->chunked = evhttp_find_header(&hd.headers, "Transfer-Encoding") != NULL;
    if (k->chunked) {
        want = s->max_body; /* unknown: release() counts it as the route's most */
    } else if (cl) {
        errno = 0;
        unsigned long long n = strtoull(cl, NULL, 10);
        want = errno || n > SIZE_MAX ? SIZE_MAX : (size_t)n;
    }
    if (hd.method == EVHTTP_REQ_HEAD)
        want = 0; /* evhttp reads no body for HEAD */
    /* a request without a body is left to dispatch, which answers it the
     * same way and keeps the connection */
    char sid[65] = "";
    if ((want > 0 || evhttp_find_header(&hd.headers, "Expect")) &&
        (route = early_check(k, hd.method, hd.uri, &hd.headers, want, sid)) < 0)
        goto out;
    if (sid[0]) {
        start_lookup(k, sid, route, want, buffered - hlen);
        explicit_bzero(sid, sizeof sid);
        goto out;
    }
    k->route = route;
    release(k, want, buffered - hlen);
out:
    k->target = NULL;
    er_http_head_fini(&hd);
}

/* Finds the blank line ending the head, scanning from where it stopped. */
static void scan_head(er_conn *k, struct evbuffer *in)
{
    static char copy[HEAD_MAX + 1]; /* loop thread only */
    size_t len = evbuffer_get_length(in);
    for (;;) {
        struct evbuffer_ptr p;
        if (evbuffer_ptr_set(in, &p, k->scan, EVBUFFER_PTR_SET) < 0)
            break;
        size_t eol = 0;
        struct evbuffer_ptr e = evbuffer_search_eol(in, &p, &eol, EVBUFFER_EOL_CRLF);
        if (e.pos < 0 || (size_t)e.pos > HEAD_MAX)
            break;
        if ((size_t)e.pos == k->scan) {
            if (k->scan == 0) { /* blank lines before a request are skipped */
                evbuffer_drain(in, eol);
                len -= eol;
                continue;
            }
            size_t hlen = (size_t)e.pos + eol;
            if (hlen > HEAD_MAX)
                break;
            if (evbuffer_copyout(in, copy, hlen) != (ev_ssize_t)hlen) {
                refuse(k, (int)er_nroutes, 503, "unavailable", NULL, NULL, "out of memory");
                return;
            }
            copy[hlen] = '\0';
            check_head(k, copy, hlen, len);
            return;
        }
        k->scan = (size_t)e.pos + eol;
    }
    if (len > HEAD_MAX)
        refuse(k, (int)er_nroutes, 431, "invalid_argument", "headers", NULL,
               "the request head is too large");
}

/* Every change to the connection's input buffer, before evhttp sees it. */
static void on_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
    er_conn *k = arg;
    if (info->n_added == 0)
        return;
    if (!bind_conn(k))
        return;
    switch (k->state) {
    case K_HEAD:
        if (k->held && evbuffer_get_length(k->held) > 0)
            break; /* refeed puts these behind the set-aside bytes */
        if (!k->deadline) {
            k->head_start = er_mono_ms();
            k->deadline = k->head_start + k->s->head_timeout_ms;
            arm(k, k->s->head_timeout_ms);
        }
        scan_head(k, in);
        break;
    case K_BODY:
        k->body_bytes += info->n_added;
        break;
    case K_REFUSED:
        evbuffer_drain(in, evbuffer_get_length(in));
        break;
    case K_SESSION:
    case K_BUSY:
        break;
    }
}

/* Puts set-aside pipelined bytes back in front of the input, where
 * on_input judges them; lets evhttp read them when their head passed. */
static void refeed(er_conn *k)
{
    struct evbuffer *in = bufferevent_get_input(k->bev);
    if (evbuffer_prepend_buffer(in, k->held) != 0) {
        refuse(k, (int)er_nroutes, 503, "unavailable", NULL, NULL, "out of memory");
        return;
    }
    if (k->state == K_HEAD) {
        int64_t left = k->deadline - er_mono_ms();
        arm(k, left > 0 ? left : 0);
    } else if (k->state == K_BODY || k->state == K_BUSY) {
        bufferevent_trigger(k->bev, EV_READ, 0); /* last: evhttp may free k in it */
    }
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_conn *k = arg;
    if (!k->evcon) {
        bind_conn(k); /* just accepted */
        return;
    }
    er_server *s = k->s;
    if (k->state == K_HEAD && k->held && evbuffer_get_length(k->held) > 0) {
        refeed(k);
        return;
    }
    int64_t now = er_mono_ms();
    switch (k->state) {
    case K_HEAD:
    case K_SESSION:
        if (k->deadline && now >= k->deadline) {
            char msg[96];
            snprintf(msg, sizeof msg, "the request head took longer than %lld ms",
                     (long long)s->head_timeout_ms);
            cut(k, msg);
        } else if (k->deadline) {
            arm(k, k->deadline - now);
        }
        break;
    case K_BODY: {
        int64_t t = now - k->body_start - 1000;
        if (t > 0 && k->body_bytes < (size_t)((double)s->body_min_rate * (double)t / 1000.0)) {
            char msg[96];
            snprintf(msg, sizeof msg, "the request body came slower than %zu bytes a second",
                     s->body_min_rate);
            cut(k, msg);
            return;
        }
        arm(k, 1000);
        break;
    }
    case K_REFUSED:
        evhttp_connection_free(k->evcon); /* on_close frees k */
        break;
    case K_BUSY:
        break;
    }
}

/* evhttp's bufferevent for a connection it just accepted. */
static struct bufferevent *new_bev(struct event_base *base, void *arg)
{
    er_server *s = arg;
    s->accept_backoff_ms = 0;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, 0);
    er_conn *k = bev ? calloc(1, sizeof *k) : NULL;
    if (!k)
        return bev; /* unwatched: evhttp alone serves it */
    k->s = s;
    k->bev = bev;
    k->fd = -1;
    k->timer = evtimer_new(base, on_timer, k);
    k->in_cb = k->timer ? evbuffer_add_cb(bufferevent_get_input(bev), on_input, k) : NULL;
    if (!k->in_cb) {
        if (k->timer)
            event_free(k->timer);
        free(k);
        return bev;
    }
    bufferevent_incref(bev); /* a use-after-free guard, should evhttp give it up */
    bufferevent_setwatermark(bev, EV_READ, HOLD, 0);
    s->nconns++;
    k->counted = true;
    k->over_limit = s->nconns > s->max_connections;
    event_active(k->timer, EV_TIMEOUT, 1); /* binds once evhttp has set it up */
    return bev;
}

void er_http_conn_request(er_server *s, struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    er_conn *k = evcon ? find(s, evcon) : NULL;
    if (k && k->state != K_REFUSED) {
        k->state = K_BUSY;
        evtimer_del(k->timer);
    }
}

void er_http_conn_next(er_server *s, struct evhttp_connection *evcon)
{
    er_conn *k = find(s, evcon);
    if (!k || k->state == K_REFUSED)
        return;
    unreserve(k);
    k->scan = 0;
    k->deadline = 0;
    k->state = K_HEAD;
    evtimer_del(k->timer);
    bufferevent_setwatermark(k->bev, EV_READ, HOLD, 0);
    struct evbuffer *in = bufferevent_get_input(k->bev);
    if (evbuffer_get_length(in) == 0)
        return;
    /* A pipelined request: evhttp would read what is buffered as soon as
     * it starts its next request, past any watermark. Set aside here, the
     * bytes go back (refeed) after evhttp has started it, and are judged
     * as any head. */
    if (!k->held && !(k->held = evbuffer_new())) {
        refuse(k, (int)er_nroutes, 503, "unavailable", NULL, NULL, "out of memory");
        return;
    }
    evbuffer_add_buffer(k->held, in);
    k->head_start = er_mono_ms();
    k->deadline = k->head_start + s->head_timeout_ms;
    event_active(k->timer, EV_TIMEOUT, 1);
}

void er_http_conn_set_closecb(er_server *s, struct evhttp_connection *evcon,
                              void (*cb)(struct evhttp_connection *, void *), void *arg)
{
    er_conn *k = find(s, evcon);
    if (!k) {
        evhttp_connection_set_closecb(evcon, cb, arg);
        return;
    }
    k->close_cb = cb;
    k->close_arg = arg;
}

/* ---- accepting ---- */

static void on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_server *s = arg;
    if (s->accepting && s->bound)
        evconnlistener_enable(evhttp_bound_socket_get_listener(s->bound));
}

/* accept failed (EMFILE, ENFILE, ENOBUFS...): the listener would fire again
 * at once, so it pauses, 10 ms doubling to 1 s while failures go on; one
 * log line every 10 s at most. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    er_server *s = servers;
    while (s && s->http != arg)
        s = s->next_server;
    int e = EVUTIL_SOCKET_ERROR();
    evconnlistener_disable(l);
    if (!s)
        return;
    s->accept_backoff_ms = s->accept_backoff_ms ? s->accept_backoff_ms * 2 : BACKOFF_MIN_MS;
    if (s->accept_backoff_ms > BACKOFF_MAX_MS)
        s->accept_backoff_ms = BACKOFF_MAX_MS;
    arm_ev(s->accept_ev, s->accept_backoff_ms);
    s->accept_failures++;
    int64_t now = er_mono_ms();
    if (now >= s->accept_log_next) {
        s->accept_log_next = now + LOG_EVERY_MS;
        char extra[96];
        snprintf(extra, sizeof extra, "\"failures\":%llu,\"connections\":%zu",
                 (unsigned long long)s->accept_failures, s->nconns);
        s->accept_failures = 0;
        ER_LOG(ER_LOG_WARN, extra, "accept failed: %s; pausing accepts", strerror(e));
    }
}

int er_http_conn_init(er_server *s, er_error *err)
{
    s->accept_ev = evtimer_new(s->base, on_accept_retry, s);
    if (!s->accept_ev)
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    evhttp_set_bevcb(s->http, new_bev, s);
    s->next_server = servers;
    servers = s;
    return 0;
}

void er_http_conn_listen(er_server *s)
{
    if (s->bound)
        evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(s->bound), on_accept_error);
}

void er_http_conn_fini(er_server *s)
{
    for (er_server **p = &servers; *p; p = &(*p)->next_server) {
        if (*p == s) {
            *p = s->next_server;
            break;
        }
    }
    if (s->accept_ev)
        event_free(s->accept_ev);
    free(s->conns);
}
