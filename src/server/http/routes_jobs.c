/* SPDX-License-Identifier: MIT
 *
 * Job endpoints: enqueue (single and bulk), fetch (with piggy-backed acks),
 * heartbeat, complete/fail/release, batched acks, get and cancel. Each
 * handler validates the whole request into an engine request before it is
 * submitted (a rejected request never reaches the engine) and formats the
 * engine's answer; the rules themselves live in src/core and the stores.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "server/http/http_internal.h"
#include "server/http/job_json.h"

#define ACKS_MAX 1000
#define FETCH_QUEUES_MAX 16

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

static json_t *time_json(int64_t ms)
{
    char buf[32];
    er_time_format(ms, buf);
    return json_string(buf);
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
    er_http_job_write_json(job, &w);
    if (dup) {
        er_jsonw_key(&w, "duplicate");
        er_jsonw_bool(&w, true);
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
    json_t *ids = json_array(), *dups = json_array();
    int bad = !ids || !dups;
    for (size_t i = 0; i < r->njobs && !bad; i++) {
        bad |= json_array_append_new(ids, json_string(r->jobs[i].id));
        if (r->duplicate && r->duplicate[i])
            bad |= json_array_append_new(dups, json_string(r->jobs[i].id));
    }
    json_t *body = bad ? NULL : json_pack("{s:o,s:o}", "ids", ids, "duplicates", dups);
    if (bad) {
        json_decref(ids);
        json_decref(dups);
    }
    er_http_reply_json(c, 201, body);
}

/* The common single-job request read straight from the body text; false
 * when the request needs the jansson path. Either way er_job_validate
 * judges the same spec. */
static bool enqueue_fast(er_hctx *c, const char *data, size_t len, int64_t now)
{
    er_server *s = c->s;
    er_job_spec sp;
    if (!er_http_job_spec_from_text(data, len, c->param, &sp))
        return false;
    er_error err = {0};
    er_job job;
    er_job_limits lim = {.payload_max = s->payload_max};
    int rc = er_job_validate(&sp, &lim, now, &s->rand, &job, &err);
    er_job_spec_fini(&sp);
    if (rc < 0) {
        er_http_reply_error(c, &err);
        return true;
    }
    er_req *r = new_req(c, ER_REQ_ENQUEUE, NULL);
    if (!r) {
        er_job_fini(&job);
        return true;
    }
    r->jobs = malloc(sizeof *r->jobs);
    if (!r->jobs) {
        er_job_fini(&job);
        er_error_set(&err, ER_ENOMEM, "", "out of memory");
        reject(c, r, NULL, &err);
        return true;
    }
    r->jobs[0] = job;
    r->njobs = 1;
    er_http_submit(c, r, finish_enqueue_one);
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
    json_decref(body);
    er_http_submit(c, r, bulk ? finish_enqueue_bulk : finish_enqueue_one);
    return;
bad:
    reject(c, r, body, &err);
}

/* ---- acks (shared by /v1/acks, /v1/fetch and the single-job endpoints) ---- */

static int parse_result(const json_t *obj, const char *field, size_t max, char **out, er_error *err)
{
    json_t *v = json_object_get(obj, "result");
    if (!v || json_is_null(v))
        return 0;
    return er_json_to_text(v, max, field, out, err);
}

static int parse_failure(const json_t *obj, er_failure *f, er_error *err)
{
    json_t *e = json_object_get(obj, "error");
    if (!e)
        return er_error_set(err, ER_EINVAL, "error", "error is required");
    if (!json_is_object(e))
        return er_error_set(err, ER_EINVAL, "error", "error must be an object");
    /* Its errors already name "error.<field>". */
    return er_failure_from_json(e, f, err);
}

/* One item of an "acks" array; errors name fields relative to the item. */
static int parse_ack(const json_t *item, size_t payload_max, er_ack *a, er_error *err)
{
    static const char *const keys[] = {"id", "lease_token", "complete", "fail", "release", NULL};
    static const char *const complete_keys[] = {"result", NULL};
    static const char *const fail_keys[] = {"error", NULL};
    static const char *const release_keys[] = {NULL};
    if (!json_is_object(item))
        return er_error_set(err, ER_EINVAL, "", "must be an object");
    int rc = er_json_check_keys(item, keys, "", err);
    const char *id = NULL, *token = NULL;
    if (rc == 0)
        rc = er_json_get_id(item, "id", "", &id, err);
    if (rc == 0)
        rc = er_json_get_id(item, "lease_token", "", &token, err);
    if (rc < 0)
        return rc;
    json_t *comp = json_object_get(item, "complete"), *fail = json_object_get(item, "fail"),
           *rel = json_object_get(item, "release");
    if ((comp != NULL) + (fail != NULL) + (rel != NULL) != 1)
        return er_error_set(err, ER_EINVAL, "",
                            "exactly one of complete, fail, release is required");
    const char *kname = comp ? "complete" : fail ? "fail" : "release";
    const char *prefix = comp ? "complete." : fail ? "fail." : "release.";
    json_t *k = comp ? comp : fail ? fail : rel;
    if (!json_is_object(k))
        return er_error_set(err, ER_EINVAL, kname, "%s must be an object", kname);
    if (comp) {
        a->kind = ER_ACK_COMPLETE;
        rc = er_json_check_keys(comp, complete_keys, prefix, err);
        if (rc == 0)
            rc = parse_result(comp, "complete.result", payload_max, &a->result, err);
    } else if (fail) {
        a->kind = ER_ACK_FAIL;
        rc = er_json_check_keys(fail, fail_keys, prefix, err);
        if (rc == 0 && (rc = parse_failure(fail, &a->failure, err)) < 0)
            er_error_prefix(err, prefix);
    } else {
        a->kind = ER_ACK_RELEASE;
        rc = er_json_check_keys(rel, release_keys, prefix, err);
    }
    if (rc == 0)
        rc = dup_str(&a->id, id, err);
    if (rc == 0)
        rc = dup_str(&a->token, token, err);
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
        r->nacks = i + 1; /* so er_req_free releases a half-parsed item */
        int rc = parse_ack(json_array_get(arr, i), payload_max, &r->acks[i], err);
        if (rc < 0) {
            prefix_item(err, "acks", i);
            return rc;
        }
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
            json_object_set_new(body, "run_at", time_json(a->outcome.run_at));
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
    r->acks = calloc(1, sizeof *r->acks);
    if (!r->acks) {
        er_error_set(&err, ER_ENOMEM, "", "out of memory");
        goto bad;
    }
    r->nacks = 1;
    er_ack *a = &r->acks[0];
    a->kind = kind;
    const char *token = NULL;
    const char *const *keys = kind == ER_ACK_COMPLETE ? complete_keys
                              : kind == ER_ACK_FAIL   ? fail_keys
                                                      : release_keys;
    int rc = er_json_check_keys(body, keys, "", &err);
    if (rc == 0)
        rc = er_json_get_id(body, "lease_token", "", &token, &err);
    if (rc == 0 && kind == ER_ACK_COMPLETE)
        rc = parse_result(body, "result", c->s->payload_max, &a->result, &err);
    if (rc == 0 && kind == ER_ACK_FAIL)
        rc = parse_failure(body, &a->failure, &err);
    if (rc == 0)
        rc = dup_str(&a->id, c->param, &err);
    if (rc == 0)
        rc = dup_str(&a->token, token, &err);
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
    er_http_reply_json(c, 200, json_pack("{s:o}", "lease_expires_at", time_json(r->expires_at)));
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
    const char *token = NULL;
    int64_t extend = 0;
    int rc = er_json_check_keys(body, keys, "", &err);
    if (rc == 0)
        rc = er_json_get_id(body, "lease_token", "", &token, &err);
    if (rc == 0)
        rc =
            er_json_get_int(body, "extend_ms", ER_LEASE_MIN_MS, ER_LEASE_MAX_MS, "", &extend, &err);
    json_t *progress = json_object_get(body, "progress");
    if (rc >= 0 && progress && !json_is_null(progress))
        rc = er_json_to_text(progress, c->s->payload_max, "progress", &r->progress, &err);
    if (rc >= 0)
        rc = dup_str(&r->id, c->param, &err);
    if (rc >= 0)
        rc = dup_str(&r->token, token, &err);
    if (rc < 0)
        goto bad;
    r->extend_ms = extend;
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
    er_jsonw w;
    er_http_jsonw_init(c, &w);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "jobs");
    er_jsonw_begin_array(&w);
    for (size_t i = 0; i < r->list.len; i++)
        er_http_job_write_lease_json(&r->list.items[i], &w);
    er_jsonw_end_array(&w);
    if (c->flags) {
        er_jsonw_key(&w, "acks");
        write_ack_results(&w, r);
    }
    er_jsonw_end_object(&w);
    er_http_reply_jsonw(c, 200, &w);
}

void er_route_fetch(er_hctx *c)
{
    static const char *const keys[] = {"queues",   "worker_id", "max", "wait_ms",
                                       "lease_ms", "acks",      NULL};
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    er_req *r = new_req(c, ER_REQ_FETCH, body);
    if (!r)
        return;
    er_error err = {0};
    if (er_json_check_keys(body, keys, "", &err) < 0)
        goto bad;

    json_t *qs = json_object_get(body, "queues");
    if (!qs) {
        er_error_set(&err, ER_EINVAL, "queues", "queues is required");
        goto bad;
    }
    size_t nq = json_array_size(qs);
    if (!json_is_array(qs) || nq < 1 || nq > FETCH_QUEUES_MAX) {
        er_error_set(&err, ER_EINVAL, "queues", "queues must be an array of 1..%d queue names",
                     FETCH_QUEUES_MAX);
        goto bad;
    }
    r->queues = calloc(nq, sizeof *r->queues);
    if (!r->queues) {
        er_error_set(&err, ER_ENOMEM, "", "out of memory");
        goto bad;
    }
    for (size_t i = 0; i < nq; i++) {
        json_t *q = json_array_get(qs, i);
        char f[32];
        snprintf(f, sizeof f, "queues[%zu]", i);
        if (!json_is_string(q)) {
            er_error_set(&err, ER_EINVAL, f, "%s must be a string", f);
            goto bad;
        }
        if (er_name_validate(json_string_value(q), f, &err) < 0 ||
            dup_str(&r->queues[i], json_string_value(q), &err) < 0)
            goto bad;
        r->nqueues = i + 1;
    }

    json_t *w = json_object_get(body, "worker_id");
    if (!w || !json_is_string(w)) {
        er_error_set(&err, ER_EINVAL, "worker_id", "worker_id is required (a string)");
        goto bad;
    }
    if (er_name_validate(json_string_value(w), "worker_id", &err) < 0 ||
        dup_str(&r->worker_id, json_string_value(w), &err) < 0)
        goto bad;

    int64_t max = 1, wait = 0, lease = 0;
    if (er_json_get_int(body, "max", 1, ER_FETCH_MAX, "", &max, &err) < 0 ||
        er_json_get_int(body, "wait_ms", 0, ER_WAIT_MAX_MS, "", &wait, &err) < 0 ||
        er_json_get_int(body, "lease_ms", ER_LEASE_MIN_MS, ER_LEASE_MAX_MS, "", &lease, &err) < 0)
        goto bad;
    r->max = (int)max;
    r->wait_ms = wait;
    r->lease_ms = lease;

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
        er_http_reply_req_error(c, r);
        return;
    }
    er_http_reply_json(c, 200, json_pack("{s:o}", "job", er_http_job_to_json(&r->job)));
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

void er_route_get_job(er_hctx *c)
{
    submit_by_id(c, ER_REQ_GET_JOB, finish_job);
}

void er_route_cancel_job(er_hctx *c)
{
    submit_by_id(c, ER_REQ_CANCEL, finish_job);
}
