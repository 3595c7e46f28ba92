/* SPDX-License-Identifier: MIT
 *
 * The route table and dispatch: a request's method and path pick a route
 * (404 when no path matches, 405 with Allow when only the method differs),
 * the route's access level is checked (auth.c: a bearer token; or a
 * dashboard session cookie, looked up in the store, with its Host and CSRF
 * checks, docs/dashboard.md), and the path parameter is
 * decoded and validated before the handler runs. It answers only these
 * routing errors itself; handlers reply through http_reply.c. Event-loop
 * thread only.
 */
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <stdio.h>
#include <string.h>

#include "core/job.h"
#include "server/http/http_internal.h"
#include "util/log.h"

const er_route er_routes[] = {
    {EVHTTP_REQ_GET, "/healthz", ER_ACCESS_OPEN, er_route_healthz, 0, NULL},
    {EVHTTP_REQ_GET, "/readyz", ER_ACCESS_OPEN, er_route_readyz, 0, NULL},
    {EVHTTP_REQ_GET, "/metrics", ER_ACCESS_READ, er_route_metrics, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/queues/{queue}/jobs", ER_ACCESS_PRODUCE, er_route_enqueue, 0, NULL},
    {EVHTTP_REQ_GET, "/v1/queues/{queue}/jobs", ER_ACCESS_READ, er_route_list_jobs, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/fetch", ER_ACCESS_WORK, er_route_fetch, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/acks", ER_ACCESS_WORK, er_route_acks, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/jobs/{id}/heartbeat", ER_ACCESS_WORK, er_route_heartbeat, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/jobs/{id}/complete", ER_ACCESS_WORK, er_route_ack_one, ER_ACK_COMPLETE, NULL},
    {EVHTTP_REQ_POST, "/v1/jobs/{id}/fail", ER_ACCESS_WORK, er_route_ack_one, ER_ACK_FAIL, NULL},
    {EVHTTP_REQ_POST, "/v1/jobs/{id}/release", ER_ACCESS_WORK, er_route_ack_one, ER_ACK_RELEASE, NULL},
    {EVHTTP_REQ_GET, "/v1/jobs/{id}", ER_ACCESS_READ, er_route_get_job, 0, NULL},
    {EVHTTP_REQ_DELETE, "/v1/jobs/{id}", ER_ACCESS_ADMIN, er_route_cancel_job, 0, "job.cancel"},
    {EVHTTP_REQ_GET, "/v1/queues", ER_ACCESS_READ, er_route_list_queues, 0, NULL},
    {EVHTTP_REQ_GET, "/v1/queues/{queue}", ER_ACCESS_READ, er_route_get_queue, 0, NULL},
    {EVHTTP_REQ_PUT, "/v1/queues/{queue}", ER_ACCESS_ADMIN, er_route_put_queue, 0,
     "queue.settings"},
    {EVHTTP_REQ_POST, "/v1/queues/{queue}/pause", ER_ACCESS_ADMIN, er_route_pause_queue, 1,
     "queue.pause"},
    {EVHTTP_REQ_POST, "/v1/queues/{queue}/resume", ER_ACCESS_ADMIN, er_route_pause_queue, 0,
     "queue.resume"},
    {EVHTTP_REQ_GET, "/v1/dead", ER_ACCESS_READ, er_route_list_dead, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/dead/{id}/redrive", ER_ACCESS_ADMIN, er_route_redrive, 0,
     "dead.redrive"},
    {EVHTTP_REQ_DELETE, "/v1/dead/{id}", ER_ACCESS_ADMIN, er_route_delete_dead, 0, "dead.delete"},
    /* schedulers, cron, leases, cursors (routes_sched.c) */
    {EVHTTP_REQ_GET, "/v1/cron/next", ER_ACCESS_READ, er_route_cron_next, 0, NULL},
    {EVHTTP_REQ_GET, "/v1/schedulers", ER_ACCESS_READ, er_route_list_schedulers, 0, NULL},
    {EVHTTP_REQ_PUT, "/v1/schedulers/{key}", ER_ACCESS_ADMIN, er_route_put_scheduler, 0,
     "scheduler.put"},
    {EVHTTP_REQ_GET, "/v1/schedulers/{key}", ER_ACCESS_READ, er_route_get_scheduler, 0, NULL},
    {EVHTTP_REQ_DELETE, "/v1/schedulers/{key}", ER_ACCESS_ADMIN, er_route_delete_scheduler, 0,
     "scheduler.delete"},
    {EVHTTP_REQ_POST, "/v1/schedulers/{key}/trigger", ER_ACCESS_ADMIN, er_route_trigger_scheduler,
     0, "scheduler.trigger"},
    {EVHTTP_REQ_GET, "/v1/leases", ER_ACCESS_READ, er_route_list_leases, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/leases", ER_ACCESS_WORK, er_route_lease_acquire, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/leases/renew", ER_ACCESS_WORK, er_route_lease_op, ER_REQ_LEASE_RENEW, NULL},
    {EVHTTP_REQ_POST, "/v1/leases/complete", ER_ACCESS_WORK, er_route_lease_op,
     ER_REQ_LEASE_COMPLETE, NULL},
    {EVHTTP_REQ_POST, "/v1/leases/release", ER_ACCESS_WORK, er_route_lease_op,
     ER_REQ_LEASE_RELEASE, NULL},
    {EVHTTP_REQ_GET, "/v1/cursors", ER_ACCESS_READ, er_route_list_cursors, 0, NULL},
    {EVHTTP_REQ_GET, "/v1/cursors/{name}", ER_ACCESS_WORK, er_route_get_cursor, 0, NULL},
    {EVHTTP_REQ_PUT, "/v1/cursors/{name}", ER_ACCESS_WORK, er_route_put_cursor, 0, NULL},
    {EVHTTP_REQ_GET, "/v1/audit", ER_ACCESS_ADMIN, er_route_list_audit, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/bulk", ER_ACCESS_ADMIN, er_route_bulk, 0, NULL},
    /* Faktory worker processes (routes_workers.c) */
    {EVHTTP_REQ_GET, "/v1/workers", ER_ACCESS_READ, er_route_list_workers, 0, NULL},
    {EVHTTP_REQ_POST, "/v1/workers/{wid}/quiet", ER_ACCESS_ADMIN, er_route_signal_worker, 0,
     "worker.quiet"},
    {EVHTTP_REQ_POST, "/v1/workers/{wid}/terminate", ER_ACCESS_ADMIN, er_route_signal_worker, 1,
     "worker.terminate"},
    /* the dashboard (routes_ui.c) */
    {EVHTTP_REQ_GET, "/ui", ER_ACCESS_OPEN, er_route_ui_page, 0, NULL},
    {EVHTTP_REQ_GET, "/ui/", ER_ACCESS_UI, er_route_ui_page, 1, NULL},
    {EVHTTP_REQ_GET, "/ui/login", ER_ACCESS_OPEN, er_route_ui_page, 2, NULL},
    {EVHTTP_REQ_POST, "/ui/login", ER_ACCESS_OPEN, er_route_ui_login, 0, NULL},
    {EVHTTP_REQ_POST, "/ui/logout", ER_ACCESS_READ, er_route_ui_logout, 0, NULL},
    {EVHTTP_REQ_GET, "/ui/session", ER_ACCESS_READ, er_route_ui_session, 0, NULL},
    {EVHTTP_REQ_GET, "/ui/assets/{name}", ER_ACCESS_OPEN, er_route_ui_asset, 0, NULL},
};
const size_t er_nroutes = sizeof er_routes / sizeof er_routes[0];

const char *er_http_method_name(int m)
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

/* Framing a proxy in front of errand might read otherwise: NULL when
 * none, else why the request is refused. libevent reads the body by the
 * first Content-Length and accepts "+12"; errand refuses both, and an
 * HTTP/1.1 request without exactly one Host. (A folded header line
 * cannot be seen here: libevent has unfolded it already.) */
static const char *framing_problem(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    int lengths = 0, hosts = 0;
    for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next) {
        if (evutil_ascii_strcasecmp(kv->key, "Content-Length") == 0) {
            lengths++;
            size_t n = strlen(kv->value);
            if (n == 0 || strspn(kv->value, "0123456789") != n)
                return "Content-Length must be decimal digits only";
        } else if (evutil_ascii_strcasecmp(kv->key, "Host") == 0) {
            hosts++;
        }
    }
    if (lengths > 1)
        return "more than one Content-Length header";
    if (hosts > 1)
        return "more than one Host header";
    if (hosts == 0 && req->major == 1 && req->minor >= 1)
        return "an HTTP/1.1 request needs a Host header";
    return NULL;
}

/* One log line a second at most for refused tokens, with how many were
 * refused since the last line; the token itself is never logged. */
static void log_auth_failure(er_server *s, struct evhttp_request *req, const er_route *rt,
                             const er_error *err)
{
    s->auth_failures++;
    int64_t now = er_mono_ms();
    if (now < s->auth_log_next)
        return;
    s->auth_log_next = now + 1000;
    const char *peer = "?";
    ev_uint16_t port = 0;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    if (evcon) {
        char *addr = NULL;
        evhttp_connection_get_peer(evcon, &addr, &port);
        if (addr)
            peer = addr;
    }
    char extra[256];
    snprintf(extra, sizeof extra, "\"peer\":\"%.64s:%u\",\"route\":\"%s %s\",\"refused\":%llu",
             peer, (unsigned)port, er_http_method_name(rt->method), rt->pattern,
             (unsigned long long)s->auth_failures);
    s->auth_failures = 0;
    ER_LOG(ER_LOG_WARN, extra, "authentication failed: %s", err->message);
}

/* Decodes and checks the path parameter, then runs the handler. */
static void run_route(er_hctx *c)
{
    const er_route *rt = &er_routes[c->route];
    er_error err = {0};
    if (c->pname) {
        /* {id} is a job id; {queue}, {key} and {name} follow the name rule */
        char field[16];
        size_t fl = strcspn(c->pname, "}");
        if (fl >= sizeof field)
            fl = sizeof field - 1;
        memcpy(field, c->pname, fl);
        field[fl] = '\0';
        bool is_id = strcmp(field, "id") == 0;
        if (er_http_pct_decode(c->pv, c->pl, false, c->param, sizeof c->param) < 0) {
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

static bool state_changing(int method)
{
    return method == EVHTTP_REQ_POST || method == EVHTTP_REQ_PUT ||
           method == EVHTTP_REQ_DELETE || method == EVHTTP_REQ_PATCH;
}

/* 1 when the two NUL-terminated strings are equal; time depends on the
 * lengths only. */
static bool ct_streq(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la && i < lb; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* The session lookup of a cookie-authenticated request finished. */
static void on_session(er_hctx *c, er_req *r)
{
    er_server *s = c->s;
    const er_route *rt = &er_routes[c->route];
    if (r->rc == ER_ENOTFOUND) {
        if (s->ntokens == 0) { /* open: a stale cookie is no cookie */
            snprintf(c->who, sizeof c->who, "open");
            run_route(c);
        } else if (rt->access == ER_ACCESS_UI) {
            er_ui_redirect(c, "/ui/login");
        } else {
            er_error e;
            er_error_set(&e, ER_EAUTH, "session", "the session is unknown or expired; log in");
            log_auth_failure(s, c->req, rt, &e);
            er_http_reply_error(c, &e);
        }
        return;
    }
    if (r->rc != 0) {
        er_http_reply_req_error(c, r);
        return;
    }
    c->by_session = true;
    c->session = r->session;
    snprintf(c->sid_hash, sizeof c->sid_hash, "%s", r->id);
    if (s->ntokens > 0) { /* a session carries its token's role and name */
        c->caller.role = (er_role)c->session.role;
        c->caller.name = c->session.name;
    }
    er_http_set_who(c);
    if (s->ntokens > 0 && !er_http_role_allows((er_role)c->session.role, rt->access)) {
        er_http_fail(c, ER_EPERM, "session", "this session's role may not call this endpoint");
        return;
    }
    if (state_changing((int)evhttp_request_get_command(c->req))) {
        const char *csrf =
            evhttp_find_header(evhttp_request_get_input_headers(c->req), "X-CSRF-Token");
        if (!csrf || !ct_streq(csrf, c->session.csrf)) {
            er_http_fail(c, ER_EPERM, "X-CSRF-Token",
                         "a request made with a session needs its X-CSRF-Token header");
            return;
        }
    }
    run_route(c);
}

/* Who may call: a bearer token (or none configured), else a dashboard
 * session cookie, looked up in the store (any node's), Host-checked and,
 * for a state-changing method, CSRF-checked. */
static void authorize(er_hctx *c, const er_route *rt)
{
    er_server *s = c->s;
    struct evhttp_request *req = c->req;
    snprintf(c->who, sizeof c->who, "open");
    if (rt->access == ER_ACCESS_OPEN) {
        run_route(c);
        return;
    }
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *authz = evhttp_find_header(in, "Authorization");
    char sid[65];
    bool cookie = er_ui_cookie(req, sid);
    if (authz || !cookie) {
        if (s->ntokens == 0) {
            /* open: a change a browser sends from another site's page (or
             * through a rebound name) is refused; clients send no Origin */
            if (state_changing((int)evhttp_request_get_command(req)) &&
                !er_ui_origin_ok(s, req)) {
                er_http_fail(c, ER_EPERM, "origin",
                             "a change from another site's page is refused");
                return;
            }
            run_route(c);
            return;
        }
        if (rt->access == ER_ACCESS_UI) {
            er_ui_redirect(c, "/ui/login");
            return;
        }
        er_error err = {0};
        if (er_http_authorize(s, authz, rt->access, &c->caller, &err) < 0) {
            log_auth_failure(s, req, rt, &err);
            er_http_reply_error(c, &err);
            return;
        }
        er_http_set_who(c);
        run_route(c);
        return;
    }
    if (!er_ui_host_ok(s, req)) {
        er_http_fail(c, ER_EPERM, "host",
                     "a request with a session cookie must name this server in Host");
        return;
    }
    er_req *r = er_req_new(ER_REQ_SESSION_TOUCH);
    char hash[65];
    er_ui_hash(sid, hash);
    if (!r || !(r->id = strdup(hash))) {
        er_req_free(r);
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    explicit_bzero(sid, sizeof sid);
    r->extend_ms = s->ui_idle_ms;
    er_http_submit(c, r, on_session);
}

void er_http_on_request(struct evhttp_request *req, void *arg)
{
    er_server *s = arg;
    s->inflight++;
    er_hctx *c = er_http_ctx_get(s);
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
    const char *framing = framing_problem(req);
    if (framing) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        er_http_fail(c, ER_EINVAL, "headers", "%s", framing);
        return;
    }

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
        /* HEAD answers like GET; libevent sends no body (http_reply.c) */
        if (er_routes[i].method == method ||
            (method == EVHTTP_REQ_HEAD && er_routes[i].method == EVHTTP_REQ_GET)) {
            rt = &er_routes[i];
            c->route = (int)i;
            pv = v;
            pl = l;
            pname = nm;
            break;
        }
        int w = snprintf(allow + alen, sizeof allow - alen, "%s%s", alen ? ", " : "",
                         er_http_method_name(er_routes[i].method));
        if (w > 0 && (size_t)w < sizeof allow - alen)
            alen += (size_t)w;
    }
    if (!rt) {
        if (alen) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
            er_error e;
            er_error_set(&e, ER_EINVAL, "method", "method %s not allowed; allowed: %s",
                         er_http_method_name(method), allow);
            er_http_send_error(c, 405, er_error_code_name(ER_EINVAL), e.message, e.field);
        } else {
            er_http_fail(c, ER_ENOTFOUND, NULL, "no such endpoint");
        }
        return;
    }
    c->flags = rt->flags;
    c->pv = pv;
    c->pl = pl;
    c->pname = pname;
    authorize(c, rt);
}
