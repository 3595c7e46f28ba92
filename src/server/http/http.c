/* SPDX-License-Identifier: MIT
 *
 * The HTTP server: listening, the route table and dispatch (404/405, auth,
 * path parameters), request bodies and query strings, JSON replies and
 * errors, and the hand-off of requests to the engine. Handlers live in
 * routes_*.c and metrics.c. Everything runs on the event-loop thread;
 * per-request contexts are pooled so a request costs no allocation here.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "core/job.h"
#include "server/http/http_internal.h"
#include "util/calendar.h"
#include "util/log.h"
#include "util/utf8.h"

#define HTTP_TIMEOUT_S 60
#define HTTP_MAX_HEADERS 16384
#define DEFAULT_MAX_BODY (16u * 1024 * 1024)

const er_route er_routes[] = {
    {EVHTTP_REQ_GET, "/healthz", ER_ACCESS_OPEN, er_route_healthz, 0},
    {EVHTTP_REQ_GET, "/readyz", ER_ACCESS_OPEN, er_route_readyz, 0},
    {EVHTTP_REQ_GET, "/metrics", ER_ACCESS_READ, er_route_metrics, 0},
    {EVHTTP_REQ_POST, "/v1/queues/{queue}/jobs", ER_ACCESS_PRODUCE, er_route_enqueue, 0},
    {EVHTTP_REQ_GET, "/v1/queues/{queue}/jobs", ER_ACCESS_READ, er_route_list_jobs, 0},
    {EVHTTP_REQ_POST, "/v1/fetch", ER_ACCESS_WORK, er_route_fetch, 0},
    {EVHTTP_REQ_POST, "/v1/acks", ER_ACCESS_WORK, er_route_acks, 0},
    {EVHTTP_REQ_POST, "/v1/jobs/{id}/heartbeat", ER_ACCESS_WORK, er_route_heartbeat, 0},
    {EVHTTP_REQ_POST, "/v1/jobs/{id}/complete", ER_ACCESS_WORK, er_route_ack_one, ER_ACK_COMPLETE},
    {EVHTTP_REQ_POST, "/v1/jobs/{id}/fail", ER_ACCESS_WORK, er_route_ack_one, ER_ACK_FAIL},
    {EVHTTP_REQ_POST, "/v1/jobs/{id}/release", ER_ACCESS_WORK, er_route_ack_one, ER_ACK_RELEASE},
    {EVHTTP_REQ_GET, "/v1/jobs/{id}", ER_ACCESS_READ, er_route_get_job, 0},
    {EVHTTP_REQ_DELETE, "/v1/jobs/{id}", ER_ACCESS_ADMIN, er_route_cancel_job, 0},
    {EVHTTP_REQ_GET, "/v1/queues", ER_ACCESS_READ, er_route_list_queues, 0},
    {EVHTTP_REQ_GET, "/v1/queues/{queue}", ER_ACCESS_READ, er_route_get_queue, 0},
    {EVHTTP_REQ_PUT, "/v1/queues/{queue}", ER_ACCESS_ADMIN, er_route_put_queue, 0},
    {EVHTTP_REQ_POST, "/v1/queues/{queue}/pause", ER_ACCESS_ADMIN, er_route_pause_queue, 1},
    {EVHTTP_REQ_POST, "/v1/queues/{queue}/resume", ER_ACCESS_ADMIN, er_route_pause_queue, 0},
    {EVHTTP_REQ_GET, "/v1/dead", ER_ACCESS_READ, er_route_list_dead, 0},
    {EVHTTP_REQ_POST, "/v1/dead/{id}/redrive", ER_ACCESS_ADMIN, er_route_redrive, 0},
    {EVHTTP_REQ_DELETE, "/v1/dead/{id}", ER_ACCESS_ADMIN, er_route_delete_dead, 0},
    /* schedulers, cron, leases, cursors (routes_sched.c) */
    {EVHTTP_REQ_GET, "/v1/cron/next", ER_ACCESS_READ, er_route_cron_next, 0},
    {EVHTTP_REQ_GET, "/v1/schedulers", ER_ACCESS_READ, er_route_list_schedulers, 0},
    {EVHTTP_REQ_PUT, "/v1/schedulers/{key}", ER_ACCESS_ADMIN, er_route_put_scheduler, 0},
    {EVHTTP_REQ_GET, "/v1/schedulers/{key}", ER_ACCESS_READ, er_route_get_scheduler, 0},
    {EVHTTP_REQ_DELETE, "/v1/schedulers/{key}", ER_ACCESS_ADMIN, er_route_delete_scheduler, 0},
    {EVHTTP_REQ_POST, "/v1/schedulers/{key}/trigger", ER_ACCESS_ADMIN, er_route_trigger_scheduler,
     0},
    {EVHTTP_REQ_POST, "/v1/leases", ER_ACCESS_WORK, er_route_lease_acquire, 0},
    {EVHTTP_REQ_POST, "/v1/leases/renew", ER_ACCESS_WORK, er_route_lease_op, ER_REQ_LEASE_RENEW},
    {EVHTTP_REQ_POST, "/v1/leases/complete", ER_ACCESS_WORK, er_route_lease_op,
     ER_REQ_LEASE_COMPLETE},
    {EVHTTP_REQ_POST, "/v1/leases/release", ER_ACCESS_WORK, er_route_lease_op,
     ER_REQ_LEASE_RELEASE},
    {EVHTTP_REQ_GET, "/v1/cursors/{name}", ER_ACCESS_WORK, er_route_get_cursor, 0},
    {EVHTTP_REQ_PUT, "/v1/cursors/{name}", ER_ACCESS_WORK, er_route_put_cursor, 0},
};
const size_t er_nroutes = sizeof er_routes / sizeof er_routes[0];

static const char *method_name(int m)
{
    switch (m) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_PATCH: return "PATCH";
    default: return "OTHER";
    }
}

/* ---- request contexts ---- */

static er_hctx *ctx_get(er_server *s)
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
    c->next_free = NULL;
    return c;
}

static void ctx_release(er_hctx *c)
{
    er_server *s = c->s;
    s->inflight--;
    if (s->nfree < ER_HTTP_CTX_CACHE) {
        c->next_free = s->free_ctx;
        s->free_ctx = c;
        s->nfree++;
    } else {
        free(c);
    }
}

static void count_status(er_hctx *c, int status)
{
    int cls = status / 100 - 1;
    if (cls < 0 || cls > 4)
        cls = 4;
    c->s->http_counts[(size_t)c->route * 5 + (size_t)cls]++;
}

/* ---- replies ---- */

/* Dumps into one contiguous buffer and adds it in one piece: jansson's
 * callback would call evbuffer_add for every token. Loop thread only. */
static int dump_json(const json_t *body, struct evbuffer *out)
{
    static char stack[64 * 1024];
    size_t n = json_dumpb(body, stack, sizeof stack, JSON_COMPACT);
    if (n == 0)
        return -1;
    if (n <= sizeof stack)
        return evbuffer_add(out, stack, n);
    char *big = malloc(n);
    if (!big)
        return -1;
    size_t m = json_dumpb(body, big, n, JSON_COMPACT);
    int rc = m == n ? evbuffer_add(out, big, n) : -1;
    free(big);
    return rc;
}

static void on_conn_close(struct evhttp_connection *evcon, void *arg);

/* The reply was written out: the request is answered. */
static void on_reply_written(struct evhttp_request *req, void *arg)
{
    er_hctx *c = arg;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (evcon)
        evhttp_connection_set_closecb(evcon, NULL, NULL);
    ctx_release(c);
}

/* Writes the decimal digits of v at p; returns the end. */
static char *put_uint(char *p, uint64_t v)
{
    char b[24];
    size_t n = sizeof b;
    do {
        b[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(p, b + n, sizeof b - n);
    return p + (sizeof b - n);
}

/* The IMF-fixdate of the current second ("Sun, 06 Nov 1994 08:49:37 GMT"),
 * remade once a second: libevent would format it with gmtime_r and
 * snprintf for every reply. Loop thread only. */
static const char *date_header(er_server *s)
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    int64_t secs = er_now_ms() / 1000;
    if (secs == s->date_secs && s->date[0])
        return s->date;
    s->date_secs = secs;
    if (secs < 0)
        secs = 0;
    int64_t days_since = secs / 86400, y;
    int sod = (int)(secs % 86400), m, d;
    er_civil_from_days(days_since, &y, &m, &d);
    char *p = s->date;
    memcpy(p, days[er_weekday(days_since)], 3);
    p[3] = ',';
    p[4] = ' ';
    p[5] = (char)('0' + d / 10);
    p[6] = (char)('0' + d % 10);
    p[7] = ' ';
    memcpy(p + 8, months[m - 1], 3);
    p[11] = ' ';
    p[12] = (char)('0' + y / 1000 % 10);
    p[13] = (char)('0' + y / 100 % 10);
    p[14] = (char)('0' + y / 10 % 10);
    p[15] = (char)('0' + y % 10);
    p[16] = ' ';
    int hms[3] = {sod / 3600, sod / 60 % 60, sod % 60};
    for (int i = 0; i < 3; i++) {
        p[17 + 3 * i] = (char)('0' + hms[i] / 10);
        p[18 + 3 * i] = (char)('0' + hms[i] % 10);
        p[19 + 3 * i] = i < 2 ? ':' : ' ';
    }
    memcpy(p + 26, "GMT", 4);
    return s->date;
}

/* The request stays in flight until its reply is written (or the connection
 * fails), so a graceful shutdown does not exit with replies still queued. */
static void send_reply(er_hctx *c, int status)
{
    count_status(c, status);
    struct evhttp_request *req = c->req;
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    if (!c->s->accepting)
        evhttp_add_header(out, "Connection", "close");
    /* Date and Content-Length given here spare libevent its printf-family
     * formatting of both; it adds neither when present. HEAD and bodiless
     * statuses are left to libevent. */
    evhttp_add_header(out, "Date", date_header(c->s));
    if (evhttp_request_get_command(req) != EVHTTP_REQ_HEAD && status >= 200 && status != 204 &&
        status != 304) {
        char len[24];
        *put_uint(len, evbuffer_get_length(evhttp_request_get_output_buffer(req))) = '\0';
        evhttp_add_header(out, "Content-Length", len);
    }
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (!evcon) { /* no connection: evhttp_send_reply only frees req */
        evhttp_send_reply(req, status, NULL, NULL);
        ctx_release(c);
        return;
    }
    c->sending = true;
    evhttp_request_set_on_complete_cb(req, on_reply_written, c);
    evhttp_connection_set_closecb(evcon, on_conn_close, c);
    evhttp_send_reply(req, status, NULL, NULL);
}

void er_http_reply_json(er_hctx *c, int status, json_t *body)
{
    struct evbuffer *out = evhttp_request_get_output_buffer(c->req);
    if (!body || dump_json(body, out) != 0) {
        json_decref(body);
        evbuffer_drain(out, evbuffer_get_length(out));
        static const char oom[] =
            "{\"error\":{\"code\":\"unavailable\",\"message\":\"out of memory\",\"field\":null}}";
        evbuffer_add(out, oom, sizeof oom - 1);
        send_reply(c, 503);
        return;
    }
    json_decref(body);
    send_reply(c, status);
}

/* Largest reply written with er_jsonw: a full fetch of big payloads. */
#define REPLY_MAX ((size_t)1 << 30)
/* A reply buffer larger than this is freed rather than kept. */
#define WBUF_KEEP (256u * 1024)

void er_http_jsonw_init(er_hctx *c, er_jsonw *w)
{
    er_server *s = c->s;
    er_jsonw_init_buf(w, REPLY_MAX, s->wbuf, s->wcap);
    s->wbuf = NULL;
    s->wcap = 0;
}

void er_http_reply_jsonw(er_hctx *c, int status, er_jsonw *w)
{
    if (w->failed) {
        er_jsonw_fini(w);
        er_http_reply_json(c, 503, NULL);
        return;
    }
    evbuffer_add(evhttp_request_get_output_buffer(c->req), w->out.data, w->out.len);
    er_server *s = c->s;
    if (!s->wbuf && w->out.data && w->out.cap <= WBUF_KEEP) {
        s->wbuf = w->out.data; /* kept for the next reply */
        s->wcap = w->out.cap;
        w->out.data = NULL;
    }
    er_jsonw_fini(w);
    send_reply(c, status);
}

/* Appends s as a JSON string body (no quotes) at out[*o]; bytes that are
 * not valid UTF-8 become \ufffd. The caller sized out for the worst case
 * (6 bytes per input byte). */
static void put_escaped(char *out, size_t *o, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        bool ok;
        size_t k = er_utf8_seq(s + i, n - i, &ok);
        if (!ok) {
            memcpy(out + *o, "\\ufffd", 6);
            *o += 6;
            i += k;
        } else if (ch == '"' || ch == '\\') {
            out[(*o)++] = '\\';
            out[(*o)++] = (char)ch;
            i++;
        } else if (ch < 0x20) {
            memcpy(out + *o, "\\u00", 4);
            out[*o + 4] = hex[ch >> 4];
            out[*o + 5] = hex[ch & 15];
            *o += 6;
            i++;
        } else {
            memcpy(out + *o, s + i, k);
            *o += k;
            i += k;
        }
    }
}

/* {"error":{"code","message","field"}} written into a buffer on the stack:
 * formatting an error reply allocates nothing, so it cannot fail into a
 * different error. */
static void send_error(er_hctx *c, int status, const char *code_name, const char *message,
                       const char *field)
{
    char body[64 + 6 * ER_MESSAGE_MAX + 6 * ER_FIELD_MAX];
    size_t o = 0;
#define PUT(lit) (memcpy(body + o, lit, sizeof lit - 1), o += sizeof lit - 1)
    PUT("{\"error\":{\"code\":\"");
    put_escaped(body, &o, code_name);
    PUT("\",\"message\":\"");
    put_escaped(body, &o, strnlen(message, ER_MESSAGE_MAX) < ER_MESSAGE_MAX ? message : "");
    PUT("\",\"field\":");
    if (field && field[0] && strnlen(field, ER_FIELD_MAX) < ER_FIELD_MAX) {
        PUT("\"");
        put_escaped(body, &o, field);
        PUT("\"}}");
    } else {
        PUT("null}}");
    }
#undef PUT
    struct evbuffer *out = evhttp_request_get_output_buffer(c->req);
    evbuffer_drain(out, evbuffer_get_length(out));
    evbuffer_add(out, body, o);
    send_reply(c, status);
}

void er_http_reply_error(er_hctx *c, const er_error *err)
{
    int code = err->code ? err->code : ER_EINTERNAL;
    const char *msg = err->message[0] ? err->message : er_error_code_name(code);
    if (code == ER_EAUTH)
        evhttp_add_header(evhttp_request_get_output_headers(c->req), "WWW-Authenticate", "Bearer");
    send_error(c, er_error_http_status(code), er_error_code_name(code), msg, err->field);
}

void er_http_fail(er_hctx *c, int code, const char *field, const char *fmt, ...)
{
    er_error err;
    va_list ap;
    va_start(ap, fmt);
    er_error_vset(&err, code, field, fmt, ap);
    va_end(ap);
    er_http_reply_error(c, &err);
}

void er_http_reply_req_error(er_hctx *c, const er_req *r)
{
    er_error err = r->err;
    if (!err.code)
        err.code = r->rc ? r->rc : ER_EINTERNAL;
    er_http_reply_error(c, &err);
}

void er_http_reply_text(er_hctx *c, int status, const char *content_type, const char *text,
                        size_t len)
{
    evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type", content_type);
    if (text)
        evbuffer_add(evhttp_request_get_output_buffer(c->req), text, len);
    send_reply(c, status);
}

/* ---- engine hand-off ---- */

/* libevent is freeing the connection of a parked request or of a reply
 * being written. */
static void on_conn_close(struct evhttp_connection *evcon, void *arg)
{
    er_hctx *c = arg;
    if (c->sending) {
        ctx_release(c); /* the reply is lost; libevent frees the request */
        return;
    }
    if (!c->req)
        return;
    if (evhttp_request_get_connection(c->req) == NULL)
        c->orphan = true; /* detached from the connection: ours to free */
    else
        c->req = NULL; /* freed together with the connection */
    if (c->parked && c->ereq) /* a long-poll must not lease jobs for nobody */
        er_engine_abandon(c->s->engine, c->ereq);
    if (c->closed_ev) { /* before libevent closes the socket */
        event_free(c->closed_ev);
        c->closed_ev = NULL;
    }
}

/* evhttp reads nothing while a request waits for its reply, so it cannot
 * see a client hang up; a parked long-poll watches for that itself
 * (EV_CLOSED: epoll's EPOLLRDHUP), so the engine stops leasing jobs for it. */
static void on_peer_closed(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    er_hctx *c = arg;
    if (c->parked && c->ereq)
        er_engine_abandon(c->s->engine, c->ereq);
    event_free(c->closed_ev);
    c->closed_ev = NULL;
}

static void watch_hangup(er_hctx *c, struct evhttp_connection *evcon)
{
    struct event_base *base = c->s->base;
    if (!(event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE))
        return;
    evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(evcon));
    if (fd < 0)
        return;
    c->closed_ev = event_new(base, fd, EV_CLOSED, on_peer_closed, c);
    if (c->closed_ev && event_add(c->closed_ev, NULL) < 0) {
        event_free(c->closed_ev);
        c->closed_ev = NULL;
    }
}

static void on_engine_done(er_req *r)
{
    er_hctx *c = r->arg;
    c->parked = false;
    c->ereq = NULL;
    if (c->closed_ev) {
        event_free(c->closed_ev);
        c->closed_ev = NULL;
    }
    if (!c->req || c->orphan) {
        if (c->req)
            evhttp_request_free(c->req);
        ctx_release(c);
        er_req_free(r);
        return;
    }
    c->finish(c, r); /* replies: send_reply replaces the close callback */
    er_req_free(r);
}

void er_http_submit(er_hctx *c, er_req *r, er_finish_fn finish)
{
    c->finish = finish;
    c->parked = true;
    c->ereq = r;
    r->done = on_engine_done;
    r->arg = c;
    struct evhttp_connection *evcon = evhttp_request_get_connection(c->req);
    if (evcon) {
        evhttp_connection_set_closecb(evcon, on_conn_close, c);
        if (r->type == ER_REQ_FETCH && r->fetch.wait_ms > 0)
            watch_hangup(c, evcon);
    }
    er_engine_submit(c->s->engine, r);
}

/* ---- request parsing ---- */

static bool content_type_json(const char *ct)
{
    static const char want[] = "application/json";
    if (!ct)
        return false;
    while (*ct == ' ')
        ct++;
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return false;
    char next = ct[sizeof want - 1];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

int er_http_body_text(er_hctx *c, const char **data, size_t *len_out)
{
    *data = NULL;
    *len_out = 0;
    struct evbuffer *in = evhttp_request_get_input_buffer(c->req);
    size_t len = evbuffer_get_length(in);
    if (len > c->s->max_body) {
        er_http_fail(c, ER_ETOOBIG, "body", "request body exceeds %zu bytes", c->s->max_body);
        return ER_ETOOBIG;
    }
    if (len == 0) {
        er_http_fail(c, ER_EINVAL, "body", "a JSON object body is required");
        return ER_EINVAL;
    }
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(c->req), "Content-Type");
    if (!content_type_json(ct)) {
        er_http_fail(c, ER_EINVAL, "content-type", "Content-Type must be application/json");
        return ER_EINVAL;
    }
    *data = (const char *)evbuffer_pullup(in, -1);
    if (!*data) {
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return ER_ENOMEM;
    }
    *len_out = len;
    return 0;
}

int er_http_body_parse(er_hctx *c, const char *data, size_t len, json_t **out)
{
    *out = NULL;
    json_error_t je;
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        er_http_fail(c, ER_EINVAL, "body", "invalid JSON at line %d, column %d: %s", je.line,
                     je.column, je.text);
        return ER_EINVAL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        er_http_fail(c, ER_EINVAL, "body", "the body must be a JSON object");
        return ER_EINVAL;
    }
    *out = j;
    return 0;
}

int er_http_body_object(er_hctx *c, json_t **out)
{
    const char *data;
    size_t len;
    *out = NULL;
    int rc = er_http_body_text(c, &data, &len);
    return rc < 0 ? rc : er_http_body_parse(c, data, len, out);
}

/* out = prefix + key, cut to 63 bytes (as snprintf would). */
static void join_field(char out[64], const char *prefix, const char *key)
{
    size_t n = 0;
    for (const char *p = prefix ? prefix : ""; *p && n < 63; p++)
        out[n++] = *p;
    for (const char *p = key; *p && n < 63; p++)
        out[n++] = *p;
    out[n] = '\0';
}

int er_json_check_keys(const json_t *obj, const char *const *allowed, const char *prefix,
                       er_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(*a, key) == 0;
        if (!ok) {
            char f[64];
            join_field(f, prefix, key);
            return er_error_set(err, ER_EINVAL, f, "unknown field %s", f);
        }
    }
    return 0;
}

int er_json_get_int(const json_t *obj, const char *key, int64_t min, int64_t max,
                    const char *prefix, int64_t *out, er_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    char f[64];
    join_field(f, prefix, key);
    if (!json_is_integer(v))
        return er_error_set(err, ER_EINVAL, f, "%s must be an integer", f);
    json_int_t n = json_integer_value(v);
    if (n < min || n > max)
        return er_error_set(err, ER_EINVAL, f, "%s must be %lld..%lld", f, (long long)min,
                            (long long)max);
    *out = (int64_t)n;
    return 1;
}

int er_json_get_id(const json_t *obj, const char *key, const char *prefix, const char **out,
                   er_error *err)
{
    char f[64];
    join_field(f, prefix, key);
    json_t *v = json_object_get(obj, key);
    if (!v)
        return er_error_set(err, ER_EINVAL, f, "%s is required", f);
    if (!json_is_string(v))
        return er_error_set(err, ER_EINVAL, f, "%s must be a string", f);
    int rc = er_id_validate(json_string_value(v), f, err);
    if (rc < 0)
        return rc;
    *out = json_string_value(v);
    return 0;
}

int er_json_to_text(const json_t *v, size_t max, const char *field, char **out, er_error *err)
{
    *out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!*out)
        return er_error_set(err, ER_ENOMEM, field, "out of memory");
    if (strlen(*out) > max) {
        free(*out);
        *out = NULL;
        return er_error_set(err, ER_ETOOBIG, field, "%s exceeds %zu bytes", field, max);
    }
    return 0;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Percent-decodes src[0..n) into dst (cap includes the NUL). Returns the
 * length, or -1 on a bad escape, an embedded NUL or overflow. */
static long pct_decode(const char *src, size_t n, bool plus_space, char *dst, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = src[i];
        if (ch == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hexval(src[i + 1]), lo = hexval(src[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            ch = (char)(hi * 16 + lo);
            i += 2;
            if (ch == '\0')
                return -1;
        } else if (ch == '+' && plus_space) {
            ch = ' ';
        }
        if (o + 1 >= cap)
            return -1;
        dst[o++] = ch;
    }
    dst[o] = '\0';
    return (long)o;
}

int er_query_foreach(const char *query, int (*fn)(void *arg, const char *k, const char *v),
                     void *arg, er_error *err)
{
    char k[64], v[1024];
    const char *p = query;
    while (p && *p) {
        size_t n = strcspn(p, "&");
        const char *eq = memchr(p, '=', n);
        size_t kn = eq ? (size_t)(eq - p) : n;
        if (n > 0) {
            if (pct_decode(p, kn, true, k, sizeof k) < 0)
                return er_error_set(err, ER_EINVAL, "query", "malformed query parameter name");
            long vn = eq ? pct_decode(eq + 1, n - kn - 1, true, v, sizeof v) : 0;
            if (!eq)
                v[0] = '\0';
            if (vn < 0)
                return er_error_set(err, ER_EINVAL, k, "malformed or too long value");
            int rc = fn(arg, k, v);
            if (rc)
                return rc;
        }
        p += n;
        if (*p == '&')
            p++;
    }
    return 0;
}

/* ---- dispatch ---- */

/* Matches path against pattern; "{name}" matches one non-empty segment. */
static bool route_match(const char *pat, const char *path, const char **pv, size_t *pl,
                        const char **pname)
{
    while (*pat) {
        if (*pat == '{') {
            size_t n = strcspn(path, "/");
            if (n == 0)
                return false;
            *pname = pat + 1;
            *pv = path;
            *pl = n;
            path += n;
            pat = strchr(pat, '}') + 1;
        } else if (*pat++ != *path++) {
            return false;
        }
    }
    return *path == '\0';
}

static void on_request(struct evhttp_request *req, void *arg)
{
    er_server *s = arg;
    s->inflight++;
    er_hctx *c = ctx_get(s);
    if (!c) {
        s->inflight--;
        evhttp_send_error(req, 503, NULL);
        return;
    }
    c->req = req;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !*path)
        path = "/";
    c->query = uri ? evhttp_uri_get_query(uri) : NULL;
    int method = (int)evhttp_request_get_command(req);

    const char *pv = NULL, *pname = NULL;
    size_t pl = 0;
    char allow[64];
    size_t alen = 0;
    allow[0] = '\0';
    const er_route *rt = NULL;
    for (size_t i = 0; i < er_nroutes; i++) {
        const char *v = NULL, *nm = NULL;
        size_t l = 0;
        if (!route_match(er_routes[i].pattern, path, &v, &l, &nm))
            continue;
        if (er_routes[i].method == method) {
            rt = &er_routes[i];
            c->route = (int)i;
            pv = v;
            pl = l;
            pname = nm;
            break;
        }
        int w = snprintf(allow + alen, sizeof allow - alen, "%s%s", alen ? ", " : "",
                         method_name(er_routes[i].method));
        if (w > 0 && (size_t)w < sizeof allow - alen)
            alen += (size_t)w;
    }
    if (!rt) {
        if (alen) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
            er_error e;
            er_error_set(&e, ER_EINVAL, "method", "method %s not allowed; allowed: %s",
                         method_name(method), allow);
            send_error(c, 405, er_error_code_name(ER_EINVAL), e.message, e.field);
        } else {
            er_http_fail(c, ER_ENOTFOUND, NULL, "no such endpoint");
        }
        return;
    }
    c->flags = rt->flags;

    er_error err = {0};
    if (rt->access != ER_ACCESS_OPEN && s->ntokens > 0) {
        const char *authz =
            evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
        if (er_http_authorize(s, authz, rt->access, &err) < 0) {
            er_http_reply_error(c, &err);
            return;
        }
    }
    if (pname) {
        /* {id} is a job id; {queue}, {key} and {name} follow the name rule */
        char field[16];
        size_t fl = strcspn(pname, "}");
        if (fl >= sizeof field)
            fl = sizeof field - 1;
        memcpy(field, pname, fl);
        field[fl] = '\0';
        bool is_id = strcmp(field, "id") == 0;
        if (pct_decode(pv, pl, false, c->param, sizeof c->param) < 0) {
            er_http_fail(c, ER_EINVAL, field, "malformed or too long %s in the path", field);
            return;
        }
        int rc = is_id ? er_id_validate(c->param, field, &err)
                       : er_name_validate(c->param, field, &err);
        if (rc < 0) {
            er_http_reply_error(c, &err);
            return;
        }
    }
    rt->fn(c);
}

/* ---- lifecycle ---- */

static int parse_listen(const char *listen, char *host, size_t hcap, int *port, er_error *err)
{
    if (!listen || !*listen)
        return er_error_set(err, ER_EINVAL, "listen", "listen address is empty");
    const char *hs, *he, *colon;
    if (listen[0] == '[') {
        hs = listen + 1;
        he = strchr(hs, ']');
        if (!he || he[1] != ':')
            return er_error_set(err, ER_EINVAL, "listen", "expected [IPv6]:PORT");
        colon = he + 1;
    } else {
        hs = listen;
        colon = strrchr(listen, ':');
        if (!colon || memchr(listen, ':', (size_t)(colon - listen)))
            return er_error_set(err, ER_EINVAL, "listen", "expected HOST:PORT or [IPv6]:PORT");
        he = colon;
    }
    size_t hl = (size_t)(he - hs);
    if (hl == 0 || hl >= hcap)
        return er_error_set(err, ER_EINVAL, "listen", "bad host in listen address");
    memcpy(host, hs, hl);
    host[hl] = '\0';
    const char *ps = colon + 1;
    char *end;
    errno = 0;
    long p = strtol(ps, &end, 10);
    if (!*ps || *end || errno || p < 0 || p > 65535)
        return er_error_set(err, ER_EINVAL, "listen", "port must be 0..65535");
    *port = (int)p;
    return 0;
}

/* 1 loopback, 0 not, -1 unknown (a host name). */
static int literal_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return -1;
}

static bool sockaddr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        return IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) ||
               (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127);
    }
    return false;
}

int er_server_start(struct event_base *base, er_engine *engine, const er_server_config *cfg,
                    er_server **out, er_error *err)
{
    *out = NULL;
    char host[128];
    int port = 0;
    int rc = parse_listen(cfg->listen, host, sizeof host, &port, err);
    if (rc < 0)
        return rc;
    if (cfg->ntokens == 0 && literal_is_loopback(host) == 0)
        return er_error_set(err, ER_EINVAL, "listen",
                            "refusing to listen on non-loopback %s without tokens", host);
    er_server *s = calloc(1, sizeof *s);
    if (!s)
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    s->base = base;
    s->engine = engine;
    s->tokens = cfg->tokens;
    s->ntokens = cfg->ntokens;
    s->max_body = cfg->max_body ? cfg->max_body : DEFAULT_MAX_BODY;
    s->payload_max = cfg->payload_max ? cfg->payload_max : ER_PAYLOAD_MAX_DEFAULT;
    er_rand_init_system(&s->rand);
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
    evhttp_set_max_headers_size(s->http, HTTP_MAX_HEADERS);
    evhttp_set_timeout(s->http, HTTP_TIMEOUT_S);
    evhttp_set_default_content_type(s->http, "application/json");
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_HEAD |
                                            EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(s->http, on_request, s);

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
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(s->bound), (struct sockaddr *)&ss, &sl) != 0) {
        int e = errno;
        er_server_free(s);
        return er_error_set(err, ER_EINTERNAL, "listen", "getsockname: %s", strerror(e));
    }
    if (cfg->ntokens == 0 && !sockaddr_is_loopback(&ss)) {
        er_server_free(s);
        return er_error_set(err, ER_EINVAL, "listen",
                            "refusing to listen on non-loopback %s without tokens", host);
    }
    char addr[INET6_ADDRSTRLEN], extra[128];
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof addr);
        s->port = ntohs(a->sin6_port);
        snprintf(extra, sizeof extra, "\"listen\":\"[%s]:%d\"", addr, s->port);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, addr, sizeof addr);
        s->port = ntohs(a->sin_port);
        snprintf(extra, sizeof extra, "\"listen\":\"%s:%d\"", addr, s->port);
    }
    s->accepting = true;
    ER_LOG(ER_LOG_INFO, extra, "listening");
    *out = s;
    return 0;
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
    while (s->free_ctx) {
        er_hctx *c = s->free_ctx;
        s->free_ctx = c->next_free;
        free(c);
    }
    free(s->http_counts);
    free(s->wbuf);
    free(s);
}
