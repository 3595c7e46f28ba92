/* SPDX-License-Identifier: MIT
 *
 * The dashboard's routes (docs/dashboard.md): its pages and assets, served
 * from the binary with strict security headers; login (a form with a
 * token, Origin- and Host-checked), logout and the session's CSRF token;
 * the audit log's list; and the helpers dispatch uses for session cookies
 * (parsing, hashing, the Host check). Session ids and CSRF tokens come from
 * the kernel's CSPRNG; the store keeps only the SHA-256 of a session id.
 * Event-loop thread only.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/http/http_internal.h"
#include "server/http/ui_assets.h"
#include "util/clock.h"

#define COOKIE "errand_session"
#define LOGIN_BODY_MAX ER_HTTP_OPEN_BODY_MAX

/* ---- helpers for dispatch ---- */

static bool host_eq(const char *host, const char *want)
{
    return strcasecmp(host, want) == 0;
}

bool er_host_ok(const er_server *s, struct evhttp_request *req)
{
    const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
    if (!host || !*host || strlen(host) > 300)
        return false;
    if (host_eq(host, s->host_self))
        return true;
    if (s->host_loopback) {
        static const char *const names[] = {"localhost", "127.0.0.1", "[::1]"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char want[64];
            snprintf(want, sizeof want, "%s:%d", names[i], s->port);
            if (host_eq(host, want) || host_eq(host, names[i])) /* no port: a client's default */
                return true;
        }
    }
    for (size_t i = 0; i < s->nallowed_hosts; i++) {
        size_t n = strlen(s->allowed_hosts[i]);
        if (strncasecmp(host, s->allowed_hosts[i], n) != 0)
            continue;
        const char *rest = host + n;
        if (!*rest || (rest[0] == ':' && rest[1] && strspn(rest + 1, "0123456789") == strlen(rest + 1)))
            return true;
    }
    return false;
}

bool er_ui_origin_ok(const er_server *s, struct evhttp_request *req)
{
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *origin = evhttp_find_header(in, "Origin");
    if (!origin)
        return true;
    const char *host = evhttp_find_header(in, "Host");
    if (!host || !er_host_ok(s, req))
        return false;
    char want[320], want_tls[320];
    snprintf(want, sizeof want, "http://%s", host);
    snprintf(want_tls, sizeof want_tls, "https://%s", host); /* behind a TLS proxy */
    return strcasecmp(origin, want) == 0 || strcasecmp(origin, want_tls) == 0;
}

bool er_ui_cookie_in(const char *value, char sid[65])
{
    const char *p = value;
    while (*p) {
        while (*p == ' ' || *p == ';')
            p++;
        size_t n = strcspn(p, ";");
        if (n > sizeof COOKIE && strncmp(p, COOKIE "=", sizeof COOKIE) == 0) {
            const char *v = p + sizeof COOKIE;
            size_t vl = n - sizeof COOKIE;
            while (vl > 0 && v[vl - 1] == ' ')
                vl--;
            if (vl == 64 && strspn(v, "0123456789abcdef") >= 64) {
                memcpy(sid, v, 64);
                sid[64] = '\0';
                return true;
            }
        }
        p += n;
    }
    return false;
}

bool er_ui_cookie(struct evhttp_request *req, char sid[65])
{
    return er_ui_cookie_headers(evhttp_request_get_input_headers(req), sid);
}

bool er_ui_cookie_headers(const struct evkeyvalq *h, char sid[65])
{
    for (struct evkeyval *kv = h->tqh_first; kv; kv = kv->next.tqe_next)
        if (strcasecmp(kv->key, "Cookie") == 0 && er_ui_cookie_in(kv->value, sid))
            return true;
    return false;
}

static void hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void er_ui_hash(const char *sid, char out[65])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    if (EVP_Digest(sid, strlen(sid), d, &dl, EVP_sha256(), NULL) != 1 || dl != 32)
        memset(d, 0, sizeof d); /* never matches a stored hash of a real id */
    hex(d, 32, out);
}

/* 32 bytes of the CSPRNG as 64 hex characters. */
static void secret(char out[65])
{
    unsigned char b[32];
    er_secure_random(b, sizeof b);
    hex(b, sizeof b, out);
    explicit_bzero(b, sizeof b);
}

/* Headers of every dashboard reply: no framing, no sniffing, scripts and
 * styles from this origin only (nothing inline). */
static void security_headers(er_hctx *c, const char *cache)
{
    struct evkeyvalq *out = evhttp_request_get_output_headers(c->req);
    evhttp_add_header(out, "Content-Security-Policy",
                      "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                      "connect-src 'self'; form-action 'self'; base-uri 'none'; "
                      "object-src 'none'; frame-ancestors 'none'");
    evhttp_add_header(out, "X-Content-Type-Options", "nosniff");
    evhttp_add_header(out, "X-Frame-Options", "DENY");
    evhttp_add_header(out, "Referrer-Policy", "same-origin");
    evhttp_add_header(out, "Cache-Control", cache);
}

void er_ui_redirect(er_hctx *c, const char *location)
{
    security_headers(c, "no-store");
    evhttp_add_header(evhttp_request_get_output_headers(c->req), "Location", location);
    er_http_reply_text(c, 303, "text/plain; charset=utf-8", "", 0);
}

void er_http_set_who(er_hctx *c)
{
    if (c->s->ntokens == 0 || c->caller.role == ER_ROLE_NONE)
        snprintf(c->who, sizeof c->who, "open");
    else if (c->caller.name[0])
        snprintf(c->who, sizeof c->who, "%s@%s", er_role_name(c->caller.role), c->caller.name);
    else
        snprintf(c->who, sizeof c->who, "%s", er_role_name(c->caller.role));
}

er_audit *er_http_audit_new(const er_hctx *c, const char *action, const char *target,
                            int64_t count)
{
    er_audit *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->who = strdup(c->who[0] ? c->who : "open");
    a->action = strdup(action);
    a->target = target ? strdup(target) : NULL;
    a->count = count;
    if (!a->who || !a->action || (target && !a->target)) {
        er_audit_fini(a);
        free(a);
        return NULL;
    }
    return a;
}

int er_http_audit(const er_hctx *c, er_req *r, const char *action, const char *target)
{
    er_audit *a = er_http_audit_new(c, action, target, 1);
    if (!a)
        return ER_ENOMEM;
    r->audit = a;
    return 0;
}

/* ---- pages and assets ---- */

static const er_ui_asset *find_asset(const char *name)
{
    for (size_t i = 0; i < er_ui_nassets; i++)
        if (strcmp(er_ui_assets[i].name, name) == 0)
            return &er_ui_assets[i];
    return NULL;
}

static const char *content_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {{".html", "text/html; charset=utf-8"},
                 {".js", "text/javascript; charset=utf-8"},
                 {".css", "text/css; charset=utf-8"},
                 {".svg", "image/svg+xml"},
                 {".png", "image/png"}};
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

static void send_asset(er_hctx *c, const er_ui_asset *a, const char *cache)
{
    security_headers(c, cache);
    er_http_reply_text(c, 200, content_type(a->name), (const char *)a->data, a->len);
}

void er_route_ui_page(er_hctx *c)
{
    if (c->flags == 0) {
        er_ui_redirect(c, "/ui/");
        return;
    }
    const er_ui_asset *a = find_asset(c->flags == 1 ? "index.html" : "login.html");
    if (!a) {
        er_http_fail(c, ER_ENOTFOUND, NULL, "no such page");
        return;
    }
    send_asset(c, a, "no-store");
}

void er_route_ui_asset(er_hctx *c)
{
    const er_ui_asset *a = find_asset(c->param);
    if (!a || strcmp(a->name, "index.html") == 0 || strcmp(a->name, "login.html") == 0) {
        er_http_fail(c, ER_ENOTFOUND, "name", "no such asset");
        return;
    }
    /* no version in the names: revalidate each time, so an upgrade shows at once */
    send_asset(c, a, "no-cache");
}

/* ---- sessions ---- */

static void set_cookie(er_hctx *c, const char *sid)
{
    char v[384]; /* room for all of c->param, so gcc -O3 sees no truncation */
    if (sid)
        snprintf(v, sizeof v, COOKIE "=%s; HttpOnly; SameSite=Strict; Path=/", sid);
    else
        snprintf(v, sizeof v, COOKIE "=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    evhttp_add_header(evhttp_request_get_output_headers(c->req), "Set-Cookie", v);
}

static void session_json(er_hctx *c, const er_session *ss, bool created)
{
    json_t *o = json_pack("{s:s, s:s?, s:s, s:b, s:I}", "role",
                          er_role_name((er_role)ss->role), "name",
                          ss->name[0] ? ss->name : NULL, "csrf_token", ss->csrf, "open",
                          c->s->ntokens == 0, "idle_s", (json_int_t)(c->s->ui_idle_ms / 1000));
    security_headers(c, "no-store");
    er_http_reply_json(c, created ? 201 : 200, o);
}

/* A new session's id lives in c->param until the reply (a dashboard route
 * has no path parameter). */
static void on_session_created(er_hctx *c, er_req *r)
{
    if (r->rc != 0) {
        explicit_bzero(c->param, sizeof c->param);
        er_http_reply_req_error(c, r);
        return;
    }
    set_cookie(c, c->param);
    explicit_bzero(c->param, sizeof c->param);
    if (r->type == ER_REQ_SESSION_PUT && c->flags == 1) {
        session_json(c, &r->session, true);
        return;
    }
    er_ui_redirect(c, "/ui/");
}

/* Creates a session for token t (NULL: no tokens configured, an "open"
 * admin session) and replies through on_session_created (json 1: the JSON
 * of GET /ui/session, else the redirect of a login). */
static void create_session(er_hctx *c, const er_token *t, int json)
{
    er_req *r = er_req_new(ER_REQ_SESSION_PUT);
    char hash[65];
    secret(c->param);
    er_ui_hash(c->param, hash);
    if (!r || !(r->id = strdup(hash))) {
        er_req_free(r);
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    int64_t now = er_now_ms();
    r->session.role = (int)(t ? t->role : ER_ROLE_ADMIN);
    snprintf(r->session.name, sizeof r->session.name, "%s", t ? t->name : "");
    secret(r->session.csrf);
    r->session.created_at = now;
    r->session.expires_at = now + c->s->ui_idle_ms;
    if (t) {
        c->caller.role = t->role;
        c->caller.name = t->name;
    }
    er_http_set_who(c);
    if (er_http_audit(c, r, "ui.login", NULL) < 0) {
        er_req_free(r);
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    c->flags = json;
    er_http_submit(c, r, on_session_created);
}

static void on_login_failed(er_hctx *c, er_req *r)
{
    (void)r; /* a failed audit write does not change the answer */
    security_headers(c, "no-store");
    evhttp_add_header(evhttp_request_get_output_headers(c->req), "Location",
                      "/ui/login?failed=1");
    er_http_reply_text(c, 303, "text/plain; charset=utf-8", "", 0);
}

struct login_form {
    const char *token; /* into the scratch of er_query_foreach: copied at once */
    char tok[128];
    size_t tlen;
    bool seen, unknown;
};

static int login_field(void *arg, const char *k, const char *v)
{
    struct login_form *f = arg;
    if (strcmp(k, "token") != 0) {
        f->unknown = true;
        return 1;
    }
    f->seen = true;
    f->tlen = strnlen(v, sizeof f->tok);
    if (f->tlen < sizeof f->tok)
        memcpy(f->tok, v, f->tlen + 1);
    else
        f->tlen = 0; /* too long: no token matches */
    return 0;
}

/* The login form is not session-protected, so it is checked by where it
 * comes from: Host must be this server's and Origin must be present and be
 * http:// or https:// (behind a TLS proxy) <that Host> (browsers send
 * Origin with every form POST). */
void er_route_ui_login(er_hctx *c)
{
    er_server *s = c->s;
    struct evkeyvalq *in = evhttp_request_get_input_headers(c->req);
    if (!er_host_ok(s, c->req)) {
        er_http_fail(c, ER_EPERM, "host", "Host must name this server to log in");
        return;
    }
    if (!evhttp_find_header(in, "Origin") || !er_ui_origin_ok(s, c->req)) {
        er_http_fail(c, ER_EPERM, "origin", "a login must come from this server's own page");
        return;
    }
    const char *ct = evhttp_find_header(in, "Content-Type");
    static const char form[] = "application/x-www-form-urlencoded";
    if (!ct || strncasecmp(ct, form, sizeof form - 1) != 0 ||
        (ct[sizeof form - 1] && ct[sizeof form - 1] != ';')) {
        er_http_fail(c, ER_EINVAL, "content-type",
                     "Content-Type must be application/x-www-form-urlencoded");
        return;
    }
    struct evbuffer *body = evhttp_request_get_input_buffer(c->req);
    size_t len = evbuffer_get_length(body);
    if (len > LOGIN_BODY_MAX) {
        er_http_fail(c, ER_ETOOBIG, "body", "a login form is at most %d bytes", LOGIN_BODY_MAX);
        return;
    }
    char text[LOGIN_BODY_MAX + 1];
    evbuffer_copyout(body, text, len);
    text[len] = '\0';
    if (memchr(text, '\0', len)) {
        er_http_fail(c, ER_EINVAL, "body", "malformed form");
        return;
    }
    struct login_form f = {0};
    er_error err = {0};
    int rc = er_query_foreach(text, login_field, &f, &err);
    explicit_bzero(text, sizeof text);
    if (rc < 0 || f.unknown || !f.seen) {
        explicit_bzero(&f, sizeof f);
        er_http_fail(c, ER_EINVAL, rc < 0 ? err.field : "token",
                     "%s", rc < 0 ? err.message : "the form takes one field, token");
        return;
    }
    const er_token *t = s->ntokens == 0 ? NULL : er_http_token_find(s, f.tok, f.tlen);
    explicit_bzero(&f, sizeof f);
    if (s->ntokens > 0 && !t) {
        er_req *r = er_req_new(ER_REQ_AUDIT_ADD);
        snprintf(c->who, sizeof c->who, "unknown");
        if (!r || er_http_audit(c, r, "ui.login_failed", NULL) < 0) {
            er_req_free(r);
            on_login_failed(c, NULL);
            return;
        }
        er_http_submit(c, r, on_login_failed);
        return;
    }
    create_session(c, t, 0);
}

static void on_logout(er_hctx *c, er_req *r)
{
    if (r->rc != 0) {
        er_http_reply_req_error(c, r);
        return;
    }
    set_cookie(c, NULL);
    security_headers(c, "no-store");
    er_http_reply_text(c, 204, "text/plain; charset=utf-8", "", 0);
}

void er_route_ui_logout(er_hctx *c)
{
    if (!c->by_session) {
        er_http_fail(c, ER_EINVAL, "session", "no session to log out of");
        return;
    }
    er_req *r = er_req_new(ER_REQ_SESSION_DELETE);
    if (!r || !(r->id = strdup(c->sid_hash)) || er_http_audit(c, r, "ui.logout", NULL) < 0) {
        er_req_free(r);
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    er_http_submit(c, r, on_logout);
}

void er_route_ui_session(er_hctx *c)
{
    if (c->by_session) {
        session_json(c, &c->session, false);
        return;
    }
    if (c->s->ntokens == 0) { /* open: a session for its CSRF token */
        if (!er_host_ok(c->s, c->req)) {
            er_http_fail(c, ER_EPERM, "host", "Host must name this server");
            return;
        }
        create_session(c, NULL, 1);
        return;
    }
    er_http_fail(c, ER_EAUTH, "session", "no session; log in at /ui/login");
}

/* ---- the audit log ---- */

static void on_audit(er_hctx *c, er_req *r)
{
    if (r->rc != 0) {
        er_http_reply_req_error(c, r);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; items && i < r->audits.len; i++) {
        const er_audit *a = &r->audits.items[i];
        char at[32];
        er_time_format(a->at, at);
        json_array_append_new(items, json_pack("{s:I, s:s, s:s, s:s, s:s?, s:I}", "seq",
                                               (json_int_t)a->seq, "at", at, "who", a->who,
                                               "action", a->action, "target", a->target,
                                               "count", (json_int_t)a->count));
    }
    json_t *o = items ? json_pack("{s:o, s:s?}", "entries", items, "next_cursor", r->next_cursor)
                      : NULL;
    er_http_reply_json(c, 200, o);
}

void er_route_list_audit(er_hctx *c)
{
    int limit = 100;
    char cursor[32] = "";
    const char *p = c->query;
    er_error err = {0};
    while (p && *p) {
        size_t n = strcspn(p, "&");
        char kv[64];
        if (n >= sizeof kv) {
            er_http_fail(c, ER_EINVAL, "query", "query parameter too long");
            return;
        }
        memcpy(kv, p, n);
        kv[n] = '\0';
        char *eq = strchr(kv, '=');
        const char *v = eq ? eq + 1 : "";
        if (eq)
            *eq = '\0';
        if (strcmp(kv, "limit") == 0) {
            if (er_query_int("limit", v, 1, ER_HTTP_LIST_LIMIT_MAX, &limit, &err) < 0) {
                er_http_reply_error(c, &err);
                return;
            }
        } else if (strcmp(kv, "cursor") == 0) {
            size_t vl = strlen(v);
            if (vl == 0 || vl > 19 || strspn(v, "0123456789") != vl) {
                er_http_fail(c, ER_EINVAL, "cursor", "malformed cursor");
                return;
            }
            memcpy(cursor, v, vl + 1);
        } else if (n > 0) {
            er_query_unknown(kv, &err);
            er_http_reply_error(c, &err);
            return;
        }
        p += n;
        if (*p == '&')
            p++;
    }
    er_req *r = er_req_new(ER_REQ_AUDIT_LIST);
    if (!r || (cursor[0] && !(r->cursor = strdup(cursor)))) {
        er_req_free(r);
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    r->max = limit;
    er_http_submit(c, r, on_audit);
}
