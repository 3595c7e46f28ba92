/* SPDX-License-Identifier: MIT
 *
 * Scheduler, cron, run-once lease and cursor endpoints (API.md "Schedulers",
 * "Leases"; docs/api.md). Requests are validated here with core's rules
 * before anything is submitted; the engine joins the rules with the store
 * (exec_sched.c) and hands back typed results, formatted here (schedulers
 * in sched_json.c). GET /v1/cron/next touches no store and is answered
 * here, on the loop thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cron.h"
#include "core/lease.h"
#include "core/scheduler.h"
#include "server/http/http_internal.h"
#include "server/http/job_json.h"
#include "server/http/sched_json.h"
#include "util/tz.h"

#define LIST_LIMIT_DEFAULT 100
#define CRON_COUNT_MAX 1000
#define CRON_COUNT_DEFAULT 5
#define LEASE_TTL_DEFAULT_MS 60000
#define TOKEN_MAX 64
#define CURSOR_VALUE_MAX 65536

static er_req *new_req(er_hctx *c, er_req_type type)
{
    er_req *r = er_req_new(type);
    if (!r)
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
    return r;
}

/* Copies s into *dst; on ENOMEM replies, frees r and returns -1. */
static int set(er_hctx *c, er_req *r, char **dst, const char *s)
{
    if (!s)
        return 0;
    if ((*dst = strdup(s)))
        return 0;
    er_req_free(r);
    er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
    return -1;
}

/* A logical error that carries a body (lease and cursor conflicts): body
 * (taken) gets the error member. */
static void reply_error_with(er_hctx *c, er_req *r, json_t *body)
{
    er_error err = r->err;
    if (!err.code)
        err.code = r->rc;
    if (body)
        json_object_set_new(
            body, "error",
            json_pack("{s:s,s:s,s:o}", "code", er_error_code_name(err.code), "message",
                      err.message[0] ? err.message : er_error_code_name(err.code), "field",
                      err.field[0] ? json_string(err.field) : json_null()));
    er_http_reply_json(c, er_error_http_status(err.code), body);
}

/* {key: [items], "next_cursor"}: items (taken; NULL on ENOMEM) a page of
 * request r. */
static void reply_page(er_hctx *c, er_req *r, const char *key, json_t *items)
{
    json_t *next = r->next_cursor ? json_string(r->next_cursor) : json_null();
    er_http_reply_json(c, 200, json_pack("{s:o,s:o}", key, items, "next_cursor", next));
}

/* {"scheduler": ...}: PUT (201 for a new key) and GET. */
static void finish_sched(er_hctx *c, er_req *r)
{
    if (r->rc || r->nscheds != 1) {
        er_http_reply_req_error(c, r);
        return;
    }
    const er_sched_view *v = &r->scheds[0];
    json_t *o = er_http_sched_to_json(&v->row, &v->sc, c->caller.role);
    er_http_reply_json(c, r->created ? 201 : 200, json_pack("{s:o}", "scheduler", o));
}

/* {"schedulers": [...], "next_cursor"}; one that cannot be shown is
 * {"key", "error"}. */
static void finish_list(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < r->nscheds; i++) {
        const er_sched_view *v = &r->scheds[i];
        json_t *o = v->rc == 0 ? er_http_sched_to_json(&v->row, &v->sc, c->caller.role)
                               : json_pack("{s:s,s:s}", "key", v->row.key, "error", v->err.message);
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    reply_page(c, r, "schedulers", arr);
}

static void finish_ok(er_hctx *c, er_req *r)
{
    if (r->rc)
        er_http_reply_req_error(c, r);
    else
        er_http_reply_json(c, 200, json_pack("{s:b}", "ok", 1));
}

static void submit_param(er_hctx *c, er_req_type type, void (*finish)(er_hctx *c, er_req *r))
{
    er_req *r = new_req(c, type);
    if (r && set(c, r, &r->id, c->param) == 0)
        er_http_submit(c, r, finish);
}

/* ---- GET /v1/cron/next ---- */

typedef struct cron_query {
    char expr[ER_SCHED_CRON_MAX + 1];
    char tz[129];
    int64_t from;
    int count;
    bool has_expr;
    er_error *err;
} cron_query;

static int cron_param(void *arg, const char *k, const char *v)
{
    cron_query *q = arg;
    if (strcmp(k, "expr") == 0) {
        if (strlen(v) > ER_SCHED_CRON_MAX)
            return er_error_set(q->err, ER_EINVAL, "expr", "expr is longer than %d bytes",
                                ER_SCHED_CRON_MAX);
        snprintf(q->expr, sizeof q->expr, "%s", v);
        q->has_expr = true;
    } else if (strcmp(k, "tz") == 0) {
        if (strlen(v) >= sizeof q->tz)
            return er_error_set(q->err, ER_EINVAL, "tz", "tz is too long");
        snprintf(q->tz, sizeof q->tz, "%s", v);
    } else if (strcmp(k, "from") == 0) {
        if (er_time_parse(v, &q->from) < 0)
            return er_error_set(q->err, ER_EINVAL, "from",
                                "from must be an RFC 3339 time such as 2026-03-08T00:00:00Z");
    } else if (strcmp(k, "count") == 0) {
        return er_query_int("count", v, 1, CRON_COUNT_MAX, &q->count, q->err);
    } else {
        return er_query_unknown(k, q->err);
    }
    return 0;
}

void er_route_cron_next(er_hctx *c)
{
    er_error err = {0};
    cron_query q = {.from = er_now_ms(), .count = CRON_COUNT_DEFAULT, .err = &err};
    er_cron cron;
    if (er_query_foreach(c->query, cron_param, &q, &err) < 0 ||
        (!q.has_expr && er_error_set(&err, ER_EINVAL, "expr", "expr is required") < 0) ||
        er_cron_parse(q.expr, &cron, &err) < 0) {
        if (strcmp(err.field, "cron") == 0)
            snprintf(err.field, sizeof err.field, "expr");
        er_http_reply_error(c, &err);
        return;
    }
    /* Pure computation, so it runs here on the loop: at most CRON_COUNT_MAX
     * next-fire steps (about 12 ms in a release build for the sparsest case
     * measured, 1000 Feb 29ths in a DST zone; under 1 ms for daily ones)
     * over a zone from util's process-wide cache. The first request for a
     * zone reads its one small TZif file from tzdata (a few KB on local
     * disk); later ones read nothing. */
    const er_tz *tz;
    int64_t *out = NULL;
    int rc = er_tz_get(q.tz, &tz, &err); /* "" is UTC */
    if (rc == 0 && !(out = calloc((size_t)q.count, sizeof *out)))
        rc = er_error_set(&err, ER_ENOMEM, "", "out of memory");
    if (rc == 0) /* never fires, start out of range: field "cron", as before */
        rc = er_cron_next_n(&cron, tz, q.from, q.count, out, &err);
    if (rc < 0) {
        free(out);
        er_http_reply_error(c, &err);
        return;
    }
    json_t *arr = json_array();
    for (int i = 0; arr && i < q.count; i++) {
        char buf[32];
        er_time_format(out[i], buf);
        json_array_append_new(arr, json_string(buf));
    }
    free(out);
    er_http_reply_json(c, 200, json_pack("{s:o,s:s}", "next", arr, "tz", er_tz_name(tz)));
}

/* ---- lists by key: schedulers, leases, cursors ---- */

/* ?limit=1..1000 (default 100) & cursor=the last key of the previous page
 * (opaque to clients: the next_cursor a page gave). */
typedef struct list_query {
    int limit;
    char cursor[ER_NAME_MAX + 1];
    er_error *err;
} list_query;

static int list_param(void *arg, const char *k, const char *v)
{
    list_query *q = arg;
    if (strcmp(k, "limit") == 0) {
        return er_query_int("limit", v, 1, ER_HTTP_LIST_LIMIT_MAX, &q->limit, q->err);
    } else if (strcmp(k, "cursor") == 0) {
        if (*v && er_name_validate(v, "cursor", q->err) < 0)
            return ER_EINVAL;
        snprintf(q->cursor, sizeof q->cursor, "%s", v);
    } else {
        return er_query_unknown(k, q->err);
    }
    return 0;
}

static void submit_list(er_hctx *c, er_req_type type, er_finish_fn finish)
{
    er_error err = {0};
    list_query q = {.limit = LIST_LIMIT_DEFAULT, .err = &err};
    if (er_query_foreach(c->query, list_param, &q, &err) < 0) {
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = new_req(c, type);
    if (!r || set(c, r, &r->cursor, q.cursor[0] ? q.cursor : NULL) < 0)
        return;
    r->max = q.limit;
    er_http_submit(c, r, finish);
}

void er_route_list_schedulers(er_hctx *c)
{
    submit_list(c, ER_REQ_LIST_SCHEDULERS, finish_list);
}

void er_route_put_scheduler(er_hctx *c)
{
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    er_error err = {0};
    er_sched_spec spec;
    er_scheduler sc;
    /* here only the zone's name is checked; the engine looks the zone up */
    int rc = er_http_sched_spec_from_json(body, &spec, &err);
    if (rc == 0)
        rc = er_sched_validate(&spec, c->s->payload_max, &sc, &err);
    er_sched_spec_fini(&spec);
    json_decref(body);
    if (rc < 0) {
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = new_req(c, ER_REQ_PUT_SCHEDULER);
    if (!r || set(c, r, &r->id, c->param) < 0) {
        er_scheduler_fini(&sc);
        return;
    }
    r->sched = sc;
    er_http_submit(c, r, finish_sched);
}

void er_route_get_scheduler(er_hctx *c)
{
    submit_param(c, ER_REQ_GET_SCHEDULER, finish_sched);
}

void er_route_delete_scheduler(er_hctx *c)
{
    submit_param(c, ER_REQ_DELETE_SCHEDULER, finish_ok);
}

/* {"job": ..., "duplicate": bool}: 201 when the tick's job is new; "job":
 * null and a "tombstone" when retention deleted it. */
static void finish_trigger(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_jsonw w;
    er_http_jsonw_init(c, &w);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "job");
    if (r->tombs.len)
        er_jsonw_null(&w); /* the tick's job was deleted by retention */
    else
        er_http_job_write_json(&r->job, c->caller.role, &w);
    er_jsonw_key(&w, "duplicate");
    er_jsonw_bool(&w, !r->created);
    if (r->tombs.len) {
        const er_tombstone *t = &r->tombs.items[0];
        er_jsonw_key(&w, "tombstone");
        er_http_tombstone_write_json(NULL, t->queue, t->state, t->finished_at, &w);
    }
    er_jsonw_end_object(&w);
    er_http_reply_jsonw(c, r->created ? 201 : 200, &w);
}

void er_route_trigger_scheduler(er_hctx *c)
{
    er_req *r = new_req(c, ER_REQ_TRIGGER_SCHEDULER);
    if (r && set(c, r, &r->id, c->param) == 0)
        er_http_submit(c, r, finish_trigger);
}

/* ---- leases ---- */

static json_t *lease_json(const er_lease *l, bool with_token)
{
    char exp[32];
    er_time_format(l->expires_at, exp);
    json_t *o = json_pack("{s:s,s:I,s:s}", "idempotency_key", l->idempotency_key, "fence",
                          (json_int_t)l->fence, "state", er_lease_state_name(l->state));
    if (o && l->state == ER_LEASE_HELD)
        json_object_set_new(o, "expires_at", json_string(exp));
    if (o && with_token)
        json_object_set_new(o, "owner_token", json_string(l->owner_token));
    return o;
}

static void finish_lease(er_hctx *c, er_req *r)
{
    if (r->rc == ER_ECONFLICT && r->type == ER_REQ_LEASE_ACQUIRE) {
        reply_error_with(c, r, lease_json(&r->lease, false)); /* {"state": "held" | "done", ...} */
        return;
    }
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_http_reply_json(c, 200, lease_json(&r->lease, r->type == ER_REQ_LEASE_ACQUIRE));
}

/* A lease as GET /v1/leases shows it: lease_json's members (never the
 * owner token) and the parts of its key, its times, completed_at when done. */
static json_t *lease_row_json(const er_lease_row *row)
{
    json_t *o = lease_json(&row->lease, false);
    int bad = !o || json_object_set_new(o, "type", json_string(row->type)) != 0 ||
              json_object_set_new(o, "code", json_string(row->code)) != 0 ||
              json_object_set_new(o, "run_key", json_string(row->run_key)) != 0 ||
              json_object_set_new(o, "created_at", er_http_time_json(row->created_at)) != 0 ||
              json_object_set_new(o, "updated_at", er_http_time_json(row->updated_at)) != 0 ||
              (row->lease.state == ER_LEASE_DONE &&
               json_object_set_new(o, "completed_at",
                                   er_http_time_json(row->lease.completed_at)) != 0);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void finish_list_leases(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < r->leases.len; i++) {
        if (json_array_append_new(arr, lease_row_json(&r->leases.items[i])) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    reply_page(c, r, "leases", arr);
}

void er_route_list_leases(er_hctx *c)
{
    submit_list(c, ER_REQ_LIST_LEASES, finish_list_leases);
}

static int ttl_of(const json_t *body, int64_t *ttl, er_error *err)
{
    *ttl = LEASE_TTL_DEFAULT_MS;
    json_t *v = json_object_get(body, "ttl_ms");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v))
            return er_error_set(err, ER_EINVAL, "ttl_ms", "ttl_ms must be an integer");
        *ttl = json_integer_value(v);
    }
    return er_lease_ttl_validate(*ttl, err);
}

static const char *str_member(const json_t *body, const char *key)
{
    return json_string_value(json_object_get(body, key));
}

void er_route_lease_acquire(er_hctx *c)
{
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    static const char *const fields[] = {"type", "code", "run_key", "ttl_ms", NULL};
    er_error err = {0};
    int64_t ttl = 0;
    char key[ER_LEASE_KEY_SIZE];
    const char *type = str_member(body, "type"), *code = str_member(body, "code"),
               *run_key = str_member(body, "run_key");
    int rc = er_json_check_keys(body, fields, "", &err);
    if (rc == 0)
        rc = er_lease_key(type, code, run_key, key, &err); /* checks the three parts */
    if (rc == 0)
        rc = ttl_of(body, &ttl, &err);
    if (rc < 0) {
        json_decref(body);
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = new_req(c, ER_REQ_LEASE_ACQUIRE);
    if (r && set(c, r, &r->lease_type, type) == 0 && set(c, r, &r->lease_code, code) == 0 &&
        set(c, r, &r->lease_run_key, run_key) == 0) {
        r->extend_ms = ttl;
        er_http_submit(c, r, finish_lease);
    }
    json_decref(body);
}

void er_route_lease_op(er_hctx *c)
{
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    static const char *const renew_fields[] = {"owner_token", "ttl_ms", NULL};
    static const char *const other_fields[] = {"owner_token", NULL};
    er_req_type type = (er_req_type)c->flags;
    er_error err = {0};
    int64_t ttl = 0;
    const char *tok = str_member(body, "owner_token");
    int rc = er_json_check_keys(body, type == ER_REQ_LEASE_RENEW ? renew_fields : other_fields,
                                "", &err);
    if (rc == 0 && (!tok || !*tok || strlen(tok) > TOKEN_MAX))
        rc = er_error_set(&err, ER_EINVAL, "owner_token",
                          "owner_token is required: the string the acquire returned");
    if (rc == 0 && type == ER_REQ_LEASE_RENEW)
        rc = ttl_of(body, &ttl, &err);
    if (rc < 0) {
        json_decref(body);
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = new_req(c, type);
    if (r && set(c, r, &r->token, tok) == 0) {
        r->extend_ms = ttl;
        er_http_submit(c, r, finish_lease);
    }
    json_decref(body);
}

/* ---- cursors ---- */

/* A stored cursor value (canonical JSON text) as a JSON value; null when
 * there is none. */
static json_t *value_json(const char *text)
{
    json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    return v ? v : json_null();
}

/* {"name", "value", "updated_at"}; a conflict is {"current"} and the error. */
static void finish_cursor(er_hctx *c, er_req *r)
{
    if (r->rc == ER_ECONFLICT && r->type == ER_REQ_PUT_CURSOR) {
        reply_error_with(c, r, json_pack("{s:o}", "current", value_json(r->value)));
        return;
    }
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    const char *value = r->type == ER_REQ_PUT_CURSOR ? r->text : r->value;
    er_http_reply_json(c, 200,
                       json_pack("{s:s,s:o,s:o}", "name", r->id, "value", value_json(value),
                                 "updated_at", er_http_time_json(r->updated_at)));
}

void er_route_get_cursor(er_hctx *c)
{
    submit_param(c, ER_REQ_GET_CURSOR, finish_cursor);
}

/* A cursor's value is an application's position (how far a job got), not
 * what a job carries, so every role sees it, a viewer too. */
static void finish_list_cursors(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < r->cursors.len; i++) {
        const er_cursor_row *row = &r->cursors.items[i];
        json_t *o = json_pack("{s:s,s:o,s:o}", "name", row->name, "value", value_json(row->value),
                              "updated_at", er_http_time_json(row->updated_at));
        if (json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    reply_page(c, r, "cursors", arr);
}

void er_route_list_cursors(er_hctx *c)
{
    submit_list(c, ER_REQ_LIST_CURSORS, finish_list_cursors);
}

/* Canonical text of a cursor value: compact, sorted keys. */
static int canon(const json_t *v, const char *field, char **out, er_error *err)
{
    *out = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (!*out)
        return er_error_set(err, ER_ENOMEM, field, "out of memory");
    if (strlen(*out) > CURSOR_VALUE_MAX) {
        free(*out);
        *out = NULL;
        return er_error_set(err, ER_ETOOBIG, field, "%s exceeds %d bytes", field,
                            CURSOR_VALUE_MAX);
    }
    return 0;
}

void er_route_put_cursor(er_hctx *c)
{
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    static const char *const fields[] = {"value", "expected", NULL};
    er_error err = {0};
    char *value = NULL, *expected = NULL;
    json_t *v = json_object_get(body, "value"), *e = json_object_get(body, "expected");
    int rc = er_json_check_keys(body, fields, "", &err);
    if (rc == 0 && (!v || json_is_null(v)))
        rc = er_error_set(&err, ER_EINVAL, "value", "value is required and must not be null");
    if (rc == 0)
        rc = canon(v, "value", &value, &err);
    if (rc == 0 && e && !json_is_null(e))
        rc = canon(e, "expected", &expected, &err);
    if (rc < 0) {
        json_decref(body);
        free(value);
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = new_req(c, ER_REQ_PUT_CURSOR);
    if (!r || set(c, r, &r->id, c->param) < 0) {
        free(value);
        free(expected);
        json_decref(body);
        return;
    }
    r->text = value;
    r->expected = expected;
    r->has_expected = e != NULL; /* "expected": null = the cursor must not exist yet */
    json_decref(body);
    er_http_submit(c, r, finish_cursor);
}
