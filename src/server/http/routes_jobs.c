/* SPDX-License-Identifier: MIT
 *
 * Job endpoints: enqueue (single and bulk), fetch (with piggy-backed acks),
 * heartbeat, complete/fail/release, batched acks, get (waiting for the
 * job's outcome with ?wait_ms) and cancel. Each
 * handler validates the whole request into an engine request before it is
 * submitted (a rejected request never reaches the engine) and formats the
 * engine's answer; the rules themselves live in src/core and the stores.
 */
#include <event2/http.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "core/trace.h"
#include "server/http/http_internal.h"
#include "server/http/job_json.h"
#include "server/http/spec_json.h"
#include "server/http/work_json.h"

#define ACKS_MAX 1000

static int dup_str(char **dst, const char *s, er_error *err)
{
    *dst = strdup(s);
    return *dst ? 0 : er_error_set(err, ER_ENOMEM, NULL, "out of memory");
}

/* err->field becomes "name[i].field" (or "name[i]" when it had none). */
static void prefix_item(er_error *err, const char *name, size_t i)
{
    char p[40];
    snprintf(p, sizeof p, err->field[0] ? "%s[%zu]." : "%s[%zu]", name, i);
    er_error_prefix(err, p);
}

/* Fails the handler: frees r and body, replies with err. */
static void reject(er_hctx *c, er_req *r, json_t *body, const er_error *err)
{
    er_req_free(r);
    json_decref(body);
    er_http_reply_error(c, err);
}

static er_req *new_req(er_hctx *c, er_req_type type, json_t *body)
{
    er_req *r = er_req_new(type);
    if (!r) {
        json_decref(body);
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
    }
    return r;
}

/* ---- enqueue ---- */

static void finish_enqueue_one(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    const er_job *job = r->job.id ? &r->job : &r->jobs[0];
    bool dup = r->duplicate && r->duplicate[0];
    er_jsonw w;
    er_http_jsonw_init(c, &w);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "job");
    if (r->tombs.len)
        er_jsonw_null(&w); /* deleted by retention; its id is remembered */
    else
        er_http_job_write_json(job, c->caller.role, &w);
    if (dup) {
        er_jsonw_key(&w, "duplicate");
        er_jsonw_bool(&w, true);
    }
    if (r->tombs.len) {
        const er_tombstone *t = &r->tombs.items[0];
        er_jsonw_key(&w, "tombstone");
        er_http_tombstone_write_json(NULL, t->queue, t->state, t->finished_at, &w);
    }
    er_jsonw_end_object(&w);
    er_http_reply_jsonw(c, dup ? 200 : 201, &w);
}

static void finish_enqueue_bulk(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_jsonw w;
    er_http_jsonw_init(c, &w);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "ids");
    er_jsonw_begin_array(&w);
    for (size_t i = 0; i < r->njobs; i++)
        er_jsonw_str(&w, r->jobs[i].id);
    er_jsonw_end_array(&w);
    er_jsonw_key(&w, "duplicates");
    er_jsonw_begin_array(&w);
    for (size_t i = 0; r->duplicate && i < r->njobs; i++)
        if (r->duplicate[i])
            er_jsonw_str(&w, r->jobs[i].id);
    er_jsonw_end_array(&w);
    er_jsonw_key(&w, "tombstones");
    er_jsonw_begin_array(&w);
    for (size_t i = 0; i < r->tombs.len; i++) {
        const er_tombstone *t = &r->tombs.items[i];
        er_http_tombstone_write_json(r->jobs[t->index].id, t->queue, t->state, t->finished_at, &w);
    }
    er_jsonw_end_array(&w);
    er_jsonw_end_object(&w);
    er_http_reply_jsonw(c, 201, &w);
}

/* A W3C traceparent header becomes the trace_id of the jobs that give
 * none (core/trace.h). A malformed one is refused: 0, or < 0 with *err. */
static int apply_traceparent(er_hctx *c, er_req *r, er_error *err)
{
    const char *tp =
        evhttp_find_header(evhttp_request_get_input_headers(c->req), "traceparent");
    if (!tp)
        return 0;
    if (!er_traceparent_ok(tp))
        return er_error_set(err, ER_EINVAL, "traceparent",
                            "traceparent must be 00-<32 hex>-<16 hex>-<2 hex> (W3C), lowercase, "
                            "ids not all zero");
    for (size_t i = 0; i < r->njobs; i++)
        if (!r->jobs[i].trace_id && !(r->jobs[i].trace_id = strdup(tp)))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
    return 0;
}

/* Validates specs[0..n) into one enqueue request and submits it, or
 * answers the first refusal (a bulk request's names jobs[i]). */
static void submit_specs(er_hctx *c, er_job_spec *sp, size_t n, bool bulk, int64_t now)
{
    er_server *s = c->s;
    er_error err = {0};
    er_req *r = new_req(c, ER_REQ_ENQUEUE, NULL);
    if (!r)
        return;
    if (!(r->jobs = calloc(n, sizeof *r->jobs))) {
        er_error_set(&err, ER_ENOMEM, "", "out of memory");
        reject(c, r, NULL, &err);
        return;
    }
    er_job_limits lim = {.payload_max = s->payload_max};
    for (size_t i = 0; i < n; i++) {
        if (er_job_validate(&sp[i], &lim, now, &s->rand, &r->jobs[i], &err) < 0) {
            if (bulk)
                prefix_item(&err, "jobs", i);
            reject(c, r, NULL, &err);
            return;
        }
        r->njobs = i + 1;
    }
    if (apply_traceparent(c, r, &err) < 0) {
        reject(c, r, NULL, &err);
        return;
    }
    er_http_submit(c, r, bulk ? finish_enqueue_bulk : finish_enqueue_one);
}

/* The common single-job request, or a bulk body of them, read straight
 * from the body text; false when the body needs the jansson path. Either
 * way er_job_validate judges the same specs. */
static bool enqueue_fast(er_hctx *c, const char *data, size_t len, int64_t now)
{
    er_job_spec sp;
    if (er_http_job_spec_from_text(data, len, c->param, &sp)) {
        submit_specs(c, &sp, 1, false, now);
        er_job_spec_fini(&sp);
        return true;
    }
    er_job_spec *specs;
    size_t n;
    if (!er_http_job_specs_from_text(data, len, c->param, ER_BULK_MAX, &specs, &n))
        return false;
    submit_specs(c, specs, n, true, now);
    er_http_job_specs_free(specs, n);
    return true;
}

void er_route_enqueue(er_hctx *c)
{
    const char *data;
    size_t len;
    if (er_http_body_text(c, &data, &len) < 0)
        return;
    int64_t now = er_now_ms();
    if (enqueue_fast(c, data, len, now))
        return;
    json_t *body;
    if (er_http_body_parse(c, data, len, &body) < 0)
        return;
    er_req *r = new_req(c, ER_REQ_ENQUEUE, body);
    if (!r)
        return;
    er_error err = {0};
    er_server *s = c->s;
    er_job_limits lim = {.payload_max = s->payload_max};
    json_t *arr = json_object_get(body, "jobs");
    bool bulk = arr != NULL;
    if (bulk) {
        static const char *const keys[] = {"jobs", NULL};
        if (er_json_check_keys(body, keys, "", &err) < 0)
            goto bad;
        if (!json_is_array(arr)) {
            er_error_set(&err, ER_EINVAL, "jobs", "jobs must be an array of job objects");
            goto bad;
        }
        size_t n = json_array_size(arr);
        if (n == 0 || n > ER_BULK_MAX) {
            er_error_set(&err, ER_EINVAL, "jobs", "jobs must hold 1..%d items", ER_BULK_MAX);
            goto bad;
        }
        r->jobs = calloc(n, sizeof *r->jobs);
        if (!r->jobs) {
            er_error_set(&err, ER_ENOMEM, "", "out of memory");
            goto bad;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *item = json_array_get(arr, i);
            if (!json_is_object(item)) {
                er_error_set(&err, ER_EINVAL, "", "must be a job object");
                prefix_item(&err, "jobs", i);
                goto bad;
            }
            if (er_http_job_from_json(item, c->param, &lim, now, &s->rand, &r->jobs[i], &err) < 0) {
                prefix_item(&err, "jobs", i);
                goto bad;
            }
            r->njobs = i + 1;
        }
    } else {
        r->jobs = calloc(1, sizeof *r->jobs);
        if (!r->jobs) {
            er_error_set(&err, ER_ENOMEM, "", "out of memory");
            goto bad;
        }
        if (er_http_job_from_json(body, c->param, &lim, now, &s->rand, &r->jobs[0], &err) < 0)
            goto bad;
        r->njobs = 1;
    }
    if (apply_traceparent(c, r, &err) < 0)
        goto bad;
    json_decref(body);
    er_http_submit(c, r, bulk ? finish_enqueue_bulk : finish_enqueue_one);
    return;
bad:
    reject(c, r, body, &err);
}

/* ---- acks (shared by /v1/acks, /v1/fetch and the single-job endpoints) ---- */

/* One item of an "acks" array; errors name fields relative to the item
 * ("complete.result", "fail.error.class"). */
static int parse_ack(const json_t *item, size_t payload_max, er_ack *a, er_error *err)
{
    er_ack_spec sp;
    char *text = NULL;
    int rc = er_http_ack_item_spec(item, &sp, &text, err);
    if (rc == 0 && (rc = er_ack_validate(&sp, payload_max, a, err)) < 0 &&
        (strcmp(err->field, "result") == 0 || strncmp(err->field, "error", 5) == 0)) {
        char p[16];
        snprintf(p, sizeof p, "%s.", er_ack_kind_name(sp.kind));
        er_error_prefix(err, p);
    }
    free(text);
    return rc;
}

/* Fills r->acks from an "acks" array member. */
static int parse_acks(const json_t *arr, size_t payload_max, er_req *r, er_error *err)
{
    if (!json_is_array(arr))
        return er_error_set(err, ER_EINVAL, "acks", "acks must be an array");
    size_t n = json_array_size(arr);
    if (n > ACKS_MAX)
        return er_error_set(err, ER_EINVAL, "acks", "acks must hold at most %d items", ACKS_MAX);
    if (n == 0)
        return 0;
    r->acks = calloc(n, sizeof *r->acks);
    if (!r->acks)
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int rc = parse_ack(json_array_get(arr, i), payload_max, &r->acks[i], err);
        if (rc < 0) {
            prefix_item(err, "acks", i);
            return rc;
        }
        r->nacks = i + 1;
    }
    return 0;
}

/* {"code","message","field"} of a failed ack. */
static void write_error(er_jsonw *w, const er_error *e, int rc)
{
    int code = e->code ? e->code : (rc ? rc : ER_EINTERNAL);
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "code");
    er_jsonw_str(w, er_error_code_name(code));
    er_jsonw_key(w, "message");
    er_jsonw_str(w, e->message[0] ? e->message : er_error_code_name(code));
    er_jsonw_key(w, "field");
    er_jsonw_str(w, e->field[0] ? e->field : NULL);
    er_jsonw_end_object(w);
}

/* Writes the "results" array of r's acks: {"id", "ok"} (with "state" and,
 * when scheduled, "run_at" for a fail) or {"id", "error"}. */
static void write_ack_results(er_jsonw *w, const er_req *r)
{
    er_jsonw_begin_array(w);
    for (size_t i = 0; i < r->nacks; i++) {
        const er_ack *a = &r->acks[i];
        er_jsonw_begin_object(w);
        er_jsonw_key(w, "id");
        er_jsonw_str(w, a->id);
        if (a->rc) {
            er_jsonw_key(w, "error");
            write_error(w, &a->err, a->rc);
        } else {
            er_jsonw_key(w, "ok");
            er_jsonw_bool(w, true);
            if (a->kind == ER_ACK_FAIL) {
                er_jsonw_key(w, "state");
                er_jsonw_str(w, er_state_name(a->outcome.state));
                if (a->outcome.state == ER_STATE_SCHEDULED) {
                    er_jsonw_key(w, "run_at");
                    er_jsonw_time(w, a->outcome.run_at);
                }
            }
        }
        er_jsonw_end_object(w);
    }
    er_jsonw_end_array(w);
}

static void finish_acks(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_jsonw w;
    er_http_jsonw_init(c, &w);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "results");
    write_ack_results(&w, r);
    er_jsonw_end_object(&w);
    er_http_reply_jsonw(c, 200, &w);
}

void er_route_acks(er_hctx *c)
{
    static const char *const keys[] = {"acks", NULL};
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    er_req *r = new_req(c, ER_REQ_ACKS, body);
    if (!r)
        return;
    er_error err = {0};
    json_t *arr = json_object_get(body, "acks");
    if (er_json_check_keys(body, keys, "", &err) < 0)
        goto bad;
    if (!arr) {
        er_error_set(&err, ER_EINVAL, "acks", "acks is required");
        goto bad;
    }
    if (parse_acks(arr, c->s->payload_max, r, &err) < 0)
        goto bad;
    json_decref(body);
    if (r->nacks == 0) {
        er_req_free(r);
        er_http_reply_json(c, 200, json_pack("{s:[]}", "results"));
        return;
    }
    er_http_submit(c, r, finish_acks);
    return;
bad:
    reject(c, r, body, &err);
}

/* ---- complete / fail / release of one job ---- */

static void finish_ack_one(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    const er_ack *a = &r->acks[0];
    if (a->rc) {
        er_error e = a->err;
        if (!e.code)
            e.code = a->rc;
        er_http_reply_error(c, &e);
        return;
    }
    json_t *body;
    if (a->kind == ER_ACK_FAIL) {
        body = json_pack("{s:s}", "state", er_state_name(a->outcome.state));
        if (body && a->outcome.state == ER_STATE_SCHEDULED)
            json_object_set_new(body, "run_at", er_http_time_json(a->outcome.run_at));
    } else {
        body = json_pack("{s:b}", "ok", 1);
    }
    er_http_reply_json(c, 200, body);
}

void er_route_ack_one(er_hctx *c)
{
    static const char *const complete_keys[] = {"lease_token", "result", NULL};
    static const char *const fail_keys[] = {"lease_token", "error", NULL};
    static const char *const release_keys[] = {"lease_token", NULL};
    er_ack_kind kind = (er_ack_kind)c->flags;
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    er_req *r = new_req(c, ER_REQ_ACKS, body);
    if (!r)
        return;
    er_error err = {0};
    char *text = NULL;
    const char *const *keys = kind == ER_ACK_COMPLETE ? complete_keys
                              : kind == ER_ACK_FAIL   ? fail_keys
                                                      : release_keys;
    er_ack_spec sp = {.kind_given = 1, .kind = kind};
    sp.id = (er_spec_str){ER_SPEC_SET, c->param, strlen(c->param)};
    er_http_spec_str(json_object_get(body, "lease_token"), ER_SPEC_ABSENT, &sp.lease_token);
    int rc = er_json_check_keys(body, keys, "", &err);
    if (rc == 0 && kind == ER_ACK_COMPLETE)
        rc = er_http_json_text(json_object_get(body, "result"), &sp.result, &text, &err);
    if (rc == 0 && kind == ER_ACK_FAIL)
        rc = er_http_failure_spec(json_object_get(body, "error"), &sp.failure, &text, &err);
    if (rc == 0 && (r->acks = calloc(1, sizeof *r->acks)) == NULL)
        rc = er_error_set(&err, ER_ENOMEM, "", "out of memory");
    if (rc == 0 && (rc = er_ack_validate(&sp, c->s->payload_max, &r->acks[0], &err)) == 0)
        r->nacks = 1;
    free(text);
    if (rc < 0)
        goto bad;
    json_decref(body);
    er_http_submit(c, r, finish_ack_one);
    return;
bad:
    reject(c, r, body, &err);
}

/* ---- heartbeat ---- */

static void finish_heartbeat(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_http_reply_json(c, 200,
                       json_pack("{s:o}", "lease_expires_at", er_http_time_json(r->expires_at)));
}

void er_route_heartbeat(er_hctx *c)
{
    static const char *const keys[] = {"lease_token", "extend_ms", "progress", NULL};
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    er_req *r = new_req(c, ER_REQ_HEARTBEAT, body);
    if (!r)
        return;
    er_error err = {0};
    char *text = NULL;
    er_heartbeat_spec sp = {0};
    er_http_spec_str(json_object_get(body, "lease_token"), ER_SPEC_ABSENT, &sp.lease_token);
    er_http_spec_int(json_object_get(body, "extend_ms"), ER_SPEC_ABSENT, &sp.extend_ms);
    int rc = er_json_check_keys(body, keys, "", &err);
    if (rc == 0)
        rc = er_http_json_text(json_object_get(body, "progress"), &sp.progress, &text, &err);
    if (rc == 0)
        rc = er_heartbeat_validate(&sp, c->s->payload_max, &r->token, &r->extend_ms,
                                   &r->progress, &err);
    if (rc == 0)
        rc = dup_str(&r->id, c->param, &err);
    free(text);
    if (rc < 0)
        goto bad;
    json_decref(body);
    er_http_submit(c, r, finish_heartbeat);
    return;
bad:
    reject(c, r, body, &err);
}

/* ---- fetch ---- */

static void finish_fetch(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    if (!c->flags) {
        er_http_reply_jobs(c, r, true, NULL);
        return;
    }
    er_jsonw rest;
    er_jsonw_init(&rest, (size_t)1 << 30);
    er_jsonw_begin_object(&rest);
    er_jsonw_key(&rest, "acks");
    write_ack_results(&rest, r);
    er_jsonw_end_object(&rest);
    er_http_reply_jobs(c, r, true, &rest);
}

void er_route_fetch(er_hctx *c)
{
    static const char *const keys[] = {"queues",   "worker_id", "max", "wait_ms",
                                       "lease_ms", "acks",      "queue_weights", NULL};
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    er_req *r = new_req(c, ER_REQ_FETCH, body);
    if (!r)
        return;
    er_error err = {0};
    er_fetch_spec sp;
    er_spec_str *queues = NULL;
    int rc = er_json_check_keys(body, keys, "", &err);
    if (rc == 0)
        rc = er_http_fetch_spec(body, &sp, &queues, &err);
    if (rc == 0)
        rc = er_fetch_validate(&sp, &r->fetch, &err);
    free(queues);
    if (rc < 0)
        goto bad;
    json_t *acks = json_object_get(body, "acks");
    c->flags = acks != NULL;
    if (acks && parse_acks(acks, c->s->payload_max, r, &err) < 0)
        goto bad;
    json_decref(body);
    er_http_submit(c, r, finish_fetch);
    return;
bad:
    reject(c, r, body, &err);
}

/* ---- get / cancel ---- */

static void finish_job(er_hctx *c, er_req *r)
{
    if (r->rc) {
        if (r->wait_refused) /* too many waits now: soon there may be room */
            evhttp_add_header(evhttp_request_get_output_headers(c->req), "Retry-After", "1");
        er_http_reply_req_error(c, r);
        return;
    }
    er_http_reply_json(c, 200,
                       json_pack("{s:o}", "job", er_http_job_to_json(&r->job, c->caller.role)));
}

static void submit_by_id(er_hctx *c, er_req_type type, er_finish_fn finish)
{
    er_req *r = new_req(c, type, NULL);
    if (!r)
        return;
    er_error err = {0};
    if (dup_str(&r->id, c->param, &err) < 0)
        goto bad;
    er_http_submit(c, r, finish);
    return;
bad:
    reject(c, r, NULL, &err);
}

typedef struct get_query {
    int wait_ms;
    er_error *err;
} get_query;

/* ?wait_ms=N: decimal digits only, 0..ER_WAIT_MAX_MS; no other parameter. */
static int get_job_param(void *arg, const char *k, const char *v)
{
    get_query *q = arg;
    if (strcmp(k, "wait_ms") != 0)
        return er_query_unknown(k, q->err);
    if (strspn(v, "0123456789") != strlen(v) ||
        er_query_int("wait_ms", v, 0, ER_WAIT_MAX_MS, &q->wait_ms, q->err) < 0)
        return er_error_set(q->err, ER_EINVAL, "wait_ms", "wait_ms must be an integer 0..%d",
                            ER_WAIT_MAX_MS);
    return 0;
}

void er_route_get_job(er_hctx *c)
{
    er_error err = {0};
    get_query q = {.err = &err};
    if (er_query_foreach(c->query, get_job_param, &q, &err) < 0) {
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = new_req(c, ER_REQ_GET_JOB, NULL);
    if (!r)
        return;
    r->wait_ms = q.wait_ms;
    if (dup_str(&r->id, c->param, &err) < 0) {
        reject(c, r, NULL, &err);
        return;
    }
    er_http_submit(c, r, finish_job);
}

void er_route_cancel_job(er_hctx *c)
{
    submit_by_id(c, ER_REQ_CANCEL, finish_job);
}
