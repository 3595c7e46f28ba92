/* SPDX-License-Identifier: MIT
 *
 * Replies and the end of a request: JSON, text and error bodies (an error
 * body is formatted without allocating, so it cannot fail into another
 * error), the Date and Content-Length headers, the status counters of
 * /metrics, and the hand-off of a request to the engine: parking it,
 * watching a long poll for a hang-up, and formatting its reply when the
 * engine is done. Each reply ends the request and gives its context back
 * to the server's pool. Event-loop thread only.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/http_struct.h> /* a request's HTTP version (major, minor) */
#include <event2/keyvalq_struct.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "server/http/http_internal.h"
#include "server/http/job_json.h"
#include "util/calendar.h"
#include "util/utf8.h"

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
    if (evcon) {
        er_http_conn_set_closecb(c->s, evcon, NULL, NULL);
        er_http_conn_next(c->s, evcon);
    }
    er_http_ctx_release(c);
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
const char *er_http_date(er_server *s)
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
/* One JSON line a request: time, peer, method, path (with its query), the
 * caller's role and token name when known, status, body bytes,
 * milliseconds. Loop thread. */
void er_http_access_line(er_server *s, struct evhttp_connection *evcon, int method,
                         const char *uri, er_caller caller, int status, size_t bytes,
                         int64_t started_ms)
{
    char *peer = NULL;
    ev_uint16_t port = 0;
    if (evcon)
        evhttp_connection_get_peer(evcon, &peer, &port);
    char ts[32];
    er_time_format(er_now_ms(), ts);
    er_buf b;
    er_buf_init(&b, 16384);
    er_buf_addf(&b, "{\"ts\":\"%s\",\"peer\":\"%s:%u\",\"method\":\"%s\",\"path\":", ts,
                peer ? peer : "?", (unsigned)port, er_http_method_name(method));
    er_json_str(&b, uri ? uri : "");
    /* who: the role and name of the token that matched, never the token */
    if (caller.role != ER_ROLE_NONE)
        er_buf_addf(&b, ",\"role\":\"%s\"", er_role_name(caller.role));
    if (caller.name[0])
        er_buf_addf(&b, ",\"token\":\"%s\"", caller.name); /* [A-Za-z0-9._-] only */
    er_buf_addf(&b, ",\"status\":%d,\"bytes\":%zu,\"ms\":%lld}\n", status, bytes,
                (long long)(er_mono_ms() - started_ms));
    if (!b.err)
        fwrite(b.data, 1, b.len, s->access_log);
    er_buf_fini(&b);
}

static void access_line(er_hctx *c, int status, size_t bytes)
{
    struct evhttp_request *req = c->req;
    er_http_access_line(c->s, evhttp_request_get_connection(req),
                        (int)evhttp_request_get_command(req), evhttp_request_get_uri(req),
                        c->caller, status, bytes, c->started_ms);
}

static void send_reply(er_hctx *c, int status)
{
    count_status(c, status);
    if (c->s->access_log)
        access_line(c, status, evbuffer_get_length(evhttp_request_get_output_buffer(c->req)));
    struct evhttp_request *req = c->req;
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    if (!c->s->accepting)
        evhttp_add_header(out, "Connection", "close");
    /* Date and Content-Length given here spare libevent its printf-family
     * formatting of both; it adds neither when present. A HEAD reply gets
     * the length its GET would have, and no body (libevent would send it);
     * bodiless statuses are left to libevent. */
    evhttp_add_header(out, "Date", er_http_date(c->s));
    if (status >= 200 && status != 204 && status != 304) {
        struct evbuffer *body = evhttp_request_get_output_buffer(req);
        char len[24];
        *put_uint(len, evbuffer_get_length(body)) = '\0';
        evhttp_add_header(out, "Content-Length", len);
        if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD)
            evbuffer_drain(body, evbuffer_get_length(body));
    }
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (!evcon) { /* no connection: evhttp_send_reply only frees req */
        evhttp_send_reply(req, status, NULL, NULL);
        er_http_ctx_release(c);
        return;
    }
    c->sending = true;
    evhttp_request_set_on_complete_cb(req, on_reply_written, c);
    er_http_conn_set_closecb(c->s, evcon, on_conn_close, c);
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

/* Frees w, keeping its buffer for the next reply when the server holds
 * none and it is not too large (the counterpart of er_http_jsonw_init). */
static void jsonw_done(er_server *s, er_jsonw *w)
{
    if (!s->wbuf && w->out.data && w->out.cap <= WBUF_KEEP) {
        s->wbuf = w->out.data;
        s->wcap = w->out.cap;
        w->out.data = NULL;
    }
    er_jsonw_fini(w);
}

void er_http_reply_jsonw(er_hctx *c, int status, er_jsonw *w)
{
    if (w->failed) {
        er_jsonw_fini(w);
        er_http_reply_json(c, 503, NULL);
        return;
    }
    evbuffer_add(evhttp_request_get_output_buffer(c->req), w->out.data, w->out.len);
    jsonw_done(c->s, w);
    send_reply(c, status);
}

/* ---- job lists, whole or streamed ---- */

/* A streamed reply: the jobs (taken from the engine's request), the next
 * one to write, and the text after the last one. */
typedef struct er_stream {
    er_job_list list;
    size_t next;
    bool lease;
    char *tail; /* "]" and the other members, "}" */
    size_t tail_len;
    size_t bytes; /* written so far: the access log's */
    int status;
} er_stream;

/* The text after the jobs' array: "]" then rest's members (rest an
 * object, or NULL) then "}"; malloc'ed, NULL on ENOMEM. */
static char *jobs_tail(er_jsonw *rest, size_t *len)
{
    const char *m = "}";
    size_t n = 1;
    if (rest && !rest->failed && rest->out.len > 2) { /* "{...}": its members */
        m = rest->out.data + 1;
        n = rest->out.len - 1;
    }
    char *t = malloc(n + 3); /* "]", ",", the members with their "}", NUL */
    if (t) {
        t[0] = ']';
        size_t k = 0;
        if (n > 1)
            t[++k] = ',';
        memcpy(t + k + 1, m, n);
        *len = k + 1 + n;
        t[*len] = '\0';
    }
    return t;
}

static void write_job(er_hctx *c, const er_job *job, bool lease, er_jsonw *w)
{
    if (lease)
        er_http_job_write_lease_json(job, w);
    else
        er_http_job_write_json(job, c->caller.role, w);
}

void er_http_stream_free(er_hctx *c)
{
    er_stream *st = c->stream;
    if (!st)
        return;
    c->stream = NULL;
    er_job_list_fini(&st->list);
    free(st->tail);
    free(st);
}

static void stream_more(struct evhttp_connection *evcon, void *arg);

/* The connection of a streamed reply is being freed (the client went away
 * mid-stream, or a write failed): libevent detached the request, which
 * is not done, so it is ours to free, with the stream. */
static void on_stream_close(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    er_hctx *c = arg;
    struct evhttp_request *req = c->req;
    c->req = NULL;
    if (req && evhttp_request_get_connection(req) == NULL)
        evhttp_request_free(req);
    er_http_ctx_release(c); /* frees the stream */
}

/* Writes the next slice of a streamed reply, or its end: called when the
 * connection's output has drained (evhttp_send_reply_chunk_with_cb). One
 * slice a call, so every other connection gets its turn in between. */
static void stream_more(struct evhttp_connection *evcon, void *arg)
{
    (void)evcon;
    er_hctx *c = arg;
    er_stream *st = c->stream;
    struct evhttp_request *req = c->req;
    if (st->next >= st->list.len) {
        if (c->s->access_log)
            access_line(c, st->status, st->bytes);
        er_http_stream_free(c);
        evhttp_send_reply_end(req); /* on_reply_written follows */
        return;
    }
    er_jsonw w;
    er_http_jsonw_init(c, &w);
    er_jsonw_begin_array(&w); /* for the commas; the "[" is not sent */
    size_t first = st->next;
    while (st->next < st->list.len && (st->next == first || w.out.len < ER_HTTP_STREAM_SLICE)) {
        write_job(c, &st->list.items[st->next], st->lease, &w);
        er_job_fini(&st->list.items[st->next]); /* written: its memory goes now */
        st->next++;
    }
    struct evbuffer *chunk = evbuffer_new();
    bool ok = chunk && !w.failed;
    if (ok && first > 0)
        ok = evbuffer_add(chunk, ",", 1) == 0;
    if (ok)
        ok = evbuffer_add(chunk, w.out.data + 1, w.out.len - 1) == 0;
    if (ok && st->next >= st->list.len)
        ok = evbuffer_add(chunk, st->tail, st->tail_len) == 0;
    jsonw_done(c->s, &w);
    if (!ok) { /* out of memory mid-reply: end it short, the client sees bad JSON */
        if (chunk)
            evbuffer_free(chunk);
        st->next = st->list.len;
        er_http_stream_free(c);
        evhttp_send_reply_end(req);
        return;
    }
    st->bytes += evbuffer_get_length(chunk);
    evhttp_send_reply_chunk_with_cb(req, chunk, stream_more, c);
    evbuffer_free(chunk);
}

/* Starts a streamed reply of r's jobs (taken); false when it could not
 * (out of memory before anything was sent): the caller writes it whole. */
static bool stream_start(er_hctx *c, er_req *r, bool lease, er_jsonw *rest)
{
    er_stream *st = calloc(1, sizeof *st);
    if (!st || !(st->tail = jobs_tail(rest, &st->tail_len))) {
        free(st);
        return false;
    }
    st->list = r->list;
    r->list = (er_job_list){0};
    st->lease = lease;
    st->status = 200;
    c->stream = st;
    struct evhttp_request *req = c->req;
    count_status(c, 200);
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    if (!c->s->accepting)
        evhttp_add_header(out, "Connection", "close");
    evhttp_add_header(out, "Date", er_http_date(c->s));
    c->sending = true;
    evhttp_request_set_on_complete_cb(req, on_reply_written, c);
    er_http_conn_set_closecb(c->s, evhttp_request_get_connection(req), on_stream_close, c);
    evhttp_send_reply_start(req, 200, "OK");
    /* the head, then the first slice at once */
    static const char head[] = "{\"jobs\":[";
    struct evbuffer *h = evbuffer_new();
    if (h && evbuffer_add(h, head, sizeof head - 1) == 0) {
        st->bytes += sizeof head - 1;
        evhttp_send_reply_chunk(req, h);
    }
    if (h)
        evbuffer_free(h);
    stream_more(NULL, c);
    return true;
}

void er_http_reply_jobs(er_hctx *c, er_req *r, bool lease, er_jsonw *rest)
{
    size_t est = 0;
    for (size_t i = 0; i < r->list.len; i++)
        est += er_job_reply_bytes(&r->list.items[i]);
    struct evhttp_request *req = c->req;
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (est > ER_HTTP_STREAM_MIN && r->list.len > 1 && req->major == 1 && req->minor >= 1 &&
        (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_POST) && evhttp_request_get_connection(req) &&
        stream_start(c, r, lease, rest)) {
        if (rest)
            er_jsonw_fini(rest);
        return;
    }
    /* the common case: a few jobs, written whole with a Content-Length */
    er_jsonw w;
    er_http_jsonw_init(c, &w);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "jobs");
    er_jsonw_begin_array(&w);
    for (size_t i = 0; i < r->list.len; i++)
        write_job(c, &r->list.items[i], lease, &w);
    er_jsonw_end_array(&w);
    if (rest && (rest->failed || rest->out.len > 2)) {
        /* rest's members after "jobs" */
        if (rest->failed)
            w.failed = true;
        else if (er_buf_add(&w.out, ",", 1) < 0 ||
                 er_buf_add(&w.out, rest->out.data + 1, rest->out.len - 2) < 0)
            w.failed = true;
    }
    er_jsonw_end_object(&w);
    if (rest)
        er_jsonw_fini(rest);
    er_http_reply_jsonw(c, 200, &w);
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
size_t er_http_error_body(char *body, const char *code_name, const char *message,
                          const char *field)
{
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
    return o;
}

void er_http_send_error(er_hctx *c, int status, const char *code_name, const char *message,
                        const char *field)
{
    char body[ER_HTTP_ERROR_BODY_MAX];
    size_t o = er_http_error_body(body, code_name, message, field);
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
    er_http_send_error(c, er_error_http_status(code), er_error_code_name(code), msg, err->field);
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
        er_http_ctx_release(c); /* the reply is lost; libevent frees the request */
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
 * see a client hang up; a parked long-poll (a fetch, or a wait for a job's
 * outcome) watches for that itself (EV_CLOSED: epoll's EPOLLRDHUP), so the
 * engine stops leasing jobs for it, or frees its place among the waits. */
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
        er_http_ctx_release(c);
        er_req_free(r);
        return;
    }
    c->finish(c, r); /* replies: send_reply replaces the close callback */
    er_req_free(r);
}

void er_http_submit(er_hctx *c, er_req *r, er_finish_fn finish)
{
    const char *action = (size_t)c->route < er_nroutes ? er_routes[c->route].audit : NULL;
    if (action && r->type != ER_REQ_SESSION_TOUCH && !r->audit && !(r->audit = er_http_audit_new(c, action, c->param, 1))) {
        er_req_free(r); /* never run an administrative action unaudited */
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    c->finish = finish;
    c->parked = true;
    c->ereq = r;
    r->done = on_engine_done;
    r->arg = c;
    struct evhttp_connection *evcon = evhttp_request_get_connection(c->req);
    if (evcon) {
        er_http_conn_set_closecb(c->s, evcon, on_conn_close, c);
        if ((r->type == ER_REQ_FETCH && r->fetch.wait_ms > 0) ||
            (r->type == ER_REQ_GET_JOB && r->wait_ms > 0))
            watch_hangup(c, evcon);
    }
    er_engine_submit(c->s->engine, r);
}
