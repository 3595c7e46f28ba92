/* SPDX-License-Identifier: MIT
 *
 * The Orders API: POST /orders writes the order, its payment authorization
 * and an `order.placed` outbox event in one PostgreSQL transaction and
 * answers 202; POST /orders/{id}/cancel writes `order.cancelled` the same
 * way. It never calls errand: the relay turns committed events into jobs.
 * One thread, one connection (libevent's evhttp, libpq).
 *   SHOP_DB=postgres://… SHOP_API_LISTEN=127.0.0.1:7500 shop_api
 */
#include "shop.h"

#include <errand/errand_pg.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PGconn *conn;

static void reply(struct evhttp_request *req, int status, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    struct evbuffer *out = evbuffer_new();
    if (text && out)
        evbuffer_add_printf(out, "%s\n", text);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, status, status == 202 ? "Accepted" : status < 300 ? "OK" : "Error", out);
    if (out)
        evbuffer_free(out);
    free(text);
    json_decref(body);
}

static void reply_error(struct evhttp_request *req, int status, const char *msg)
{
    reply(req, status, json_pack("{s:s}", "error", msg));
}

/* The request's trace id: a W3C traceparent's trace id, else X-Trace-Id
 * when it is 32 hex digits, else a new one. */
static void trace_of(struct evhttp_request *req, char out[33])
{
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *tp = evhttp_find_header(h, "traceparent");
    const char *x = evhttp_find_header(h, "X-Trace-Id");
    const char *cand = tp && strlen(tp) == 55 ? tp + 3 : x;
    size_t n = 0;
    while (cand && n < 32 && strchr("0123456789abcdef", cand[n]) && cand[n])
        n++;
    if (cand && n == 32 && (cand == x ? strlen(x) == 32 : 1)) {
        memcpy(out, cand, 32);
        out[32] = '\0';
        return;
    }
    shop_trace_id(out);
}

static int db_ready(void)
{
    if (conn && PQstatus(conn) == CONNECTION_OK)
        return 1;
    PQfinish(conn);
    conn = PQconnectdb(shop_env("SHOP_DB", "postgres:///shop"));
    if (PQstatus(conn) == CONNECTION_OK)
        return 1;
    shop_log("error", PQerrorMessage(conn), NULL, NULL);
    return 0;
}

static PGresult *q(const char *sql, int n, const char *const *params)
{
    return PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
}

static int q_ok(PGresult *r)
{
    int s = PQresultStatus(r);
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

static void rollback_reply(struct evhttp_request *req, const char *trace)
{
    shop_log("error", PQerrorMessage(conn), trace, NULL);
    shop_exec(conn, "ROLLBACK");
    reply_error(req, 503, "database unavailable");
}

static json_t *read_body(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in);
    if (n > 65536)
        return NULL;
    const char *p = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
    return json_loadb(p ? p : "", n, 0, NULL);
}

/* Writes the order's event to the outbox in the open transaction: small
 * and versioned, ids only, no personal data (handlers read the rest); its
 * key is "{topic}:{order}". Returns 0 or -1. */
static int write_event(const char *topic, const char *id, const char *trace)
{
    char payload[128], ekey[80];
    snprintf(payload, sizeof payload, "{\"v\":1,\"order_id\":\"%s\"}", id);
    snprintf(ekey, sizeof ekey, "%s:%s", topic, id);
    errand_outbox_event ev = {.topic = topic,
                              .payload_json = payload,
                              .idempotency_key = ekey,
                              .aggregate_id = id,
                              .trace_id = trace};
    return errand_outbox_write(conn, &ev, NULL) == ERRAND_PG_ERROR ? -1 : 0;
}

/* POST /orders {"tenant","customer_id","amount","authorization_id"}, with an
 * optional Idempotency-Key: a retried request returns the first order. */
static void place(struct evhttp_request *req)
{
    char trace[33];
    trace_of(req, trace);
    json_t *b = read_body(req);
    const char *tenant = json_string_value(json_object_get(b, "tenant"));
    const char *cust = json_string_value(json_object_get(b, "customer_id"));
    const char *auth = json_string_value(json_object_get(b, "authorization_id"));
    json_t *amt = json_object_get(b, "amount");
    if (!tenant || !*tenant || !cust || !*cust || !auth || !*auth || !json_is_integer(amt) ||
        json_integer_value(amt) <= 0) {
        json_decref(b);
        reply_error(req, 400, "need tenant, customer_id, authorization_id and amount > 0");
        return;
    }
    char amount[32];
    snprintf(amount, sizeof amount, "%lld", (long long)json_integer_value(amt));
    const char *key = evhttp_find_header(evhttp_request_get_input_headers(req), "Idempotency-Key");
    if (!db_ready()) {
        json_decref(b);
        reply_error(req, 503, "database unavailable");
        return;
    }
    if (shop_exec(conn, "BEGIN") < 0) {
        json_decref(b);
        reply_error(req, 503, "database unavailable");
        return;
    }
    const char *p1[] = {key, tenant, cust, amount};
    PGresult *r = q("INSERT INTO orders (request_key, tenant, customer_id, amount)"
                    " VALUES ($1, $2, $3, $4::bigint) ON CONFLICT (request_key) DO NOTHING"
                    " RETURNING id::text",
                    4, p1);
    if (!q_ok(r))
        goto fail;
    if (PQntuples(r) == 0) { /* the same request again: the first order stands */
        PQclear(r);
        const char *pk[] = {key};
        r = q("SELECT id::text FROM orders WHERE request_key = $1", 1, pk);
        if (!q_ok(r) || PQntuples(r) != 1)
            goto fail;
        json_t *out = json_pack("{s:s,s:b}", "order_id", PQgetvalue(r, 0, 0), "duplicate", 1);
        PQclear(r);
        shop_exec(conn, "COMMIT");
        json_decref(b);
        reply(req, 200, out);
        return;
    }
    char id[40];
    snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    const char *p2[] = {id, auth, amount};
    r = q("INSERT INTO payments (order_id, authorization_id, amount) VALUES ($1, $2, $3)", 3, p2);
    if (!q_ok(r))
        goto fail;
    PQclear(r);
    r = NULL;
    if (write_event("order.placed", id, trace) < 0)
        goto fail;
    if (shop_exec(conn, "COMMIT") < 0) {
        reply_error(req, 503, "database unavailable");
        json_decref(b);
        return;
    }
    char extra[80];
    snprintf(extra, sizeof extra, "\"order_id\":\"%s\"", id);
    shop_log("info", "order placed", trace, extra);
    json_decref(b);
    reply(req, 202,
          json_pack("{s:s,s:s,s:s}", "order_id", id, "status", "placed", "trace_id", trace));
    return;
fail:
    PQclear(r);
    json_decref(b);
    rollback_reply(req, trace);
}

/* POST /orders/{id}/cancel: only a placed (unpaid) order can be cancelled. */
static void cancel(struct evhttp_request *req, const char *id)
{
    char trace[33];
    trace_of(req, trace);
    if (!db_ready() || shop_exec(conn, "BEGIN") < 0) {
        reply_error(req, 503, "database unavailable");
        return;
    }
    const char *p[] = {id};
    PGresult *r = q("SELECT status FROM orders WHERE id = $1::uuid FOR UPDATE", 1, p);
    if (!q_ok(r))
        goto fail;
    if (PQntuples(r) == 0 || strcmp(PQgetvalue(r, 0, 0), "placed") != 0) {
        int found = PQntuples(r) > 0;
        char st[32] = "";
        if (found)
            snprintf(st, sizeof st, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        shop_exec(conn, "ROLLBACK");
        if (!found)
            reply_error(req, 404, "no such order");
        else if (strcmp(st, "cancelled") == 0)
            reply(req, 200, json_pack("{s:s,s:s}", "order_id", id, "status", st));
        else
            reply_error(req, 409, "the order is paid: refunds are not automatic");
        return;
    }
    PQclear(r);
    r = q("UPDATE orders SET status = 'cancelled' WHERE id = $1::uuid", 1, p);
    if (!q_ok(r))
        goto fail;
    PQclear(r);
    r = NULL;
    if (write_event("order.cancelled", id, trace) < 0 || shop_exec(conn, "COMMIT") < 0)
        goto fail;
    reply(req, 202,
          json_pack("{s:s,s:s,s:s}", "order_id", id, "status", "cancelled", "trace_id", trace));
    return;
fail:
    PQclear(r);
    rollback_reply(req, trace);
}

/* 8-4-4-4-12 hex digits, so a bad id is a 404 and not a database error. */
static int is_uuid(const char *s)
{
    for (int i = 0; i < 36; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !strchr("0123456789abcdefABCDEF", s[i]) || !s[i])
            return 0;
    }
    return s[36] == '\0';
}

static void route(struct evhttp_request *req, void *arg)
{
    (void)arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    int post = evhttp_request_get_command(req) == EVHTTP_REQ_POST;
    if (!path)
        path = "";
    if (strcmp(path, "/healthz") == 0) {
        reply(req, 200, json_pack("{s:s}", "status", "ok"));
        return;
    }
    if (post && strcmp(path, "/orders") == 0) {
        place(req);
        return;
    }
    const char pre[] = "/orders/", suf[] = "/cancel";
    size_t n = strlen(path);
    if (post && n == sizeof pre - 1 + 36 + sizeof suf - 1 &&
        strncmp(path, pre, sizeof pre - 1) == 0 && strcmp(path + n - (sizeof suf - 1), suf) == 0) {
        char id[37];
        memcpy(id, path + sizeof pre - 1, 36);
        id[36] = '\0';
        if (is_uuid(id))
            cancel(req, id);
        else
            reply_error(req, 404, "no such order");
        return;
    }
    reply_error(req, 404, "not found");
}

static void on_signal(evutil_socket_t fd, short what, void *base)
{
    (void)fd, (void)what;
    event_base_loopexit(base, NULL);
}

int main(void)
{
    shop_set_prog("shop_api");
    const char *listen = shop_env("SHOP_API_LISTEN", "127.0.0.1:7500");
    char host[128];
    const char *colon = strrchr(listen, ':');
    if (!colon || (size_t)(colon - listen) >= sizeof host) {
        fprintf(stderr, "shop_api: SHOP_API_LISTEN must be host:port\n");
        return 2;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    long port = strtol(colon + 1, NULL, 10);
    signal(SIGPIPE, SIG_IGN);
    struct event_base *base = event_base_new();
    struct evhttp *http = evhttp_new(base);
    evhttp_set_max_body_size(http, 65536);
    evhttp_set_gencb(http, route, NULL);
    if (!base || !http || evhttp_bind_socket(http, host, (ev_uint16_t)port) != 0) {
        fprintf(stderr, "shop_api: cannot listen on %s\n", listen);
        return 1;
    }
    struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    char extra[160];
    snprintf(extra, sizeof extra, "\"listen\":\"%s\"", listen);
    shop_log("info", "listening", NULL, extra);
    event_base_dispatch(base);
    event_free(sigterm);
    event_free(sigint);
    evhttp_free(http);
    event_base_free(base);
    PQfinish(conn);
    return 0;
}
