/* SPDX-License-Identifier: MIT
 *
 * POST /v1/bulk (docs/api.md): redrive or delete dead letters, or cancel
 * waiting or scheduled jobs, by ids (at most ER_BULK_CHUNK) or by a filter
 * (queue, state, name), with a dry run that only counts. A filter's action
 * runs as a chain of engine requests of at most ER_BULK_CHUNK jobs each:
 * every chunk is its own transaction, with its own audit row (its count),
 * and the writer serves other requests between chunks. Loop thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "server/http/http_internal.h"

static const char *action_name(er_bulk_action a)
{
    switch (a) {
    case ER_BULK_REDRIVE: return "redrive";
    case ER_BULK_DELETE: return "delete";
    case ER_BULK_CANCEL: return "cancel";
    case ER_BULK_KILL: return "kill"; /* Faktory's MUTATE only */
    case ER_BULK_RUN_NOW: return "run_now";
    }
    return "?";
}

static void reply(er_hctx *c, const er_req *r, int64_t total, int64_t chunks)
{
    json_t *o = json_pack("{s:s, s:I, s:I}", "action", action_name(r->bulk.action), "count",
                          (json_int_t)total, "chunks", (json_int_t)chunks);
    er_http_reply_json(c, 200, o);
}

static void finish_count(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    json_t *o = json_pack("{s:s, s:I, s:b}", "action", action_name(r->bulk.action), "count",
                          (json_int_t)r->bulk.count, "dry_run", 1);
    er_http_reply_json(c, 200, o);
}

/* Copies the filter, the action and the running totals of r into a new
 * request for the chunk after r's; NULL on ENOMEM. */
static er_req *next_chunk(const er_hctx *c, const er_req *r)
{
    er_req *n = er_req_new(ER_REQ_BULK);
    if (!n)
        return NULL;
    n->bulk.action = r->bulk.action;
    n->bulk.filter = r->bulk.filter;
    n->bulk.filter.queue = r->bulk.filter.queue ? strdup(r->bulk.filter.queue) : NULL;
    n->bulk.filter.name = r->bulk.filter.name ? strdup(r->bulk.filter.name) : NULL;
    n->bulk.after = r->bulk.after;
    n->max = r->max + 1;                 /* chunks so far */
    n->extend_ms = r->extend_ms + r->bulk.done; /* jobs so far */
    n->audit = er_http_audit_new(c, r->audit->action, r->audit->target, 0);
    if ((r->bulk.filter.queue && !n->bulk.filter.queue) ||
        (r->bulk.filter.name && !n->bulk.filter.name) || !n->audit) {
        er_req_free(n);
        return NULL;
    }
    return n;
}

/* A chunk committed: the next one, or the answer. A failed chunk answers
 * with its error; the chunks before it stay done (their audit rows say so). */
static void finish_chunk(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    if (!r->bulk.more) {
        reply(c, r, r->extend_ms + r->bulk.done, r->max + 1);
        return;
    }
    er_req *n = next_chunk(c, r);
    if (!n) {
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    er_http_submit(c, n, finish_chunk);
}

static int parse_filter(json_t *f, er_bulk_action action, er_bulk_filter *out, er_error *err)
{
    static const char *const keys[] = {"queue", "state", "name", NULL};
    if (!json_is_object(f))
        return er_error_set(err, ER_EINVAL, "filter", "filter must be an object");
    int rc = er_json_check_keys(f, keys, "filter.", err);
    if (rc < 0)
        return rc;
    json_t *q = json_object_get(f, "queue"), *st = json_object_get(f, "state"),
           *nm = json_object_get(f, "name");
    if (q && !json_is_null(q)) {
        if (!json_is_string(q) || er_name_validate(json_string_value(q), "filter.queue", err) < 0)
            return er_error_set(err, ER_EINVAL, "filter.queue",
                                "filter.queue must be a queue name");
        out->queue = json_string_value(q);
    }
    if (nm && !json_is_null(nm)) {
        if (!json_is_string(nm) || er_name_validate(json_string_value(nm), "filter.name", err) < 0)
            return er_error_set(err, ER_EINVAL, "filter.name", "filter.name must be a job name");
        out->name = json_string_value(nm);
    }
    er_state state = action == ER_BULK_CANCEL ? ER_STATE_WAITING : ER_STATE_DEAD;
    if (st && !json_is_null(st)) {
        if (!json_is_string(st) || er_state_parse(json_string_value(st), &state) < 0)
            return er_error_set(err, ER_EINVAL, "filter.state", "filter.state must be a state");
    }
    bool ok = action == ER_BULK_CANCEL
                  ? (state == ER_STATE_WAITING || state == ER_STATE_SCHEDULED)
                  : state == ER_STATE_DEAD;
    if (!ok)
        return er_error_set(err, ER_EINVAL, "filter.state",
                            action == ER_BULK_CANCEL
                                ? "cancel takes waiting or scheduled jobs"
                                : "redrive and delete take dead letters (state dead)");
    out->state = state;
    out->not_redriven = action == ER_BULK_REDRIVE;
    return 0;
}

/* The audit row's "which": the filter, or the ids (the first few). */
static void describe(const er_bulk_filter *f, json_t *ids, char *out, size_t cap)
{
    if (!ids) {
        snprintf(out, cap, "queue=%s state=%s name=%s", f->queue ? f->queue : "*",
                 er_state_name(f->state), f->name ? f->name : "*");
        return;
    }
    size_t o = 0, n = json_array_size(ids);
    for (size_t i = 0; i < n && o + 1 < cap; i++) {
        int w = snprintf(out + o, cap - o, "%s%s", i ? "," : "",
                         json_string_value(json_array_get(ids, i)));
        if (w < 0 || (size_t)w >= cap - o) {
            char more[40];
            snprintf(more, sizeof more, ",... (%zu ids)", n);
            size_t at = o < cap - sizeof more ? o : cap - sizeof more;
            memcpy(out + at, more, strlen(more) + 1);
            return;
        }
        o += (size_t)w;
    }
}

void er_route_bulk(er_hctx *c)
{
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    static const char *const keys[] = {"action", "ids", "filter", "dry_run", NULL};
    er_error err = {0};
    er_bulk_action action = 0;
    er_bulk_filter filter = {0};
    json_t *ids = json_object_get(body, "ids"), *f = json_object_get(body, "filter"),
           *dry = json_object_get(body, "dry_run"), *act = json_object_get(body, "action");
    int rc = er_json_check_keys(body, keys, "", &err);
    if (rc == 0) {
        const char *a = json_is_string(act) ? json_string_value(act) : "";
        action = strcmp(a, "redrive") == 0   ? ER_BULK_REDRIVE
                 : strcmp(a, "delete") == 0  ? ER_BULK_DELETE
                 : strcmp(a, "cancel") == 0  ? ER_BULK_CANCEL
                                             : 0;
        if (!action)
            rc = er_error_set(&err, ER_EINVAL, "action",
                              "action must be redrive, delete or cancel");
    }
    if (rc == 0 && dry && !json_is_boolean(dry))
        rc = er_error_set(&err, ER_EINVAL, "dry_run", "dry_run must be a boolean");
    bool dry_run = json_is_true(dry);
    if (rc == 0 && !ids == !f)
        rc = er_error_set(&err, ER_EINVAL, ids ? "filter" : "ids",
                          "give either ids or a filter");
    if (rc == 0 && ids) {
        size_t n = json_array_size(ids);
        if (!json_is_array(ids) || n == 0 || n > ER_BULK_CHUNK)
            rc = er_error_set(&err, ER_EINVAL, "ids", "ids must be an array of 1..%d job ids",
                              ER_BULK_CHUNK);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            char field[32];
            snprintf(field, sizeof field, "ids[%zu]", i);
            json_t *v = json_array_get(ids, i);
            rc = json_is_string(v) ? er_id_validate(json_string_value(v), field, &err)
                                   : er_error_set(&err, ER_EINVAL, field, "%s must be a string",
                                                  field);
        }
        if (rc == 0 && dry_run)
            rc = er_error_set(&err, ER_EINVAL, "dry_run",
                              "dry_run counts a filter's jobs; ids are counted already");
    }
    if (rc == 0 && f)
        rc = parse_filter(f, action, &filter, &err);
    if (rc < 0) {
        json_decref(body);
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = er_req_new(dry_run ? ER_REQ_BULK_COUNT : ER_REQ_BULK);
    bool oom = !r;
    if (r) {
        r->bulk.action = action;
        r->bulk.filter = filter;
        r->bulk.filter.queue = filter.queue ? strdup(filter.queue) : NULL;
        r->bulk.filter.name = filter.name ? strdup(filter.name) : NULL;
        oom = (filter.queue && !r->bulk.filter.queue) || (filter.name && !r->bulk.filter.name);
    }
    if (!oom && r && ids) {
        size_t n = json_array_size(ids);
        r->bulk.ids = calloc(n, sizeof *r->bulk.ids);
        oom = !r->bulk.ids;
        for (size_t i = 0; !oom && i < n; i++) {
            r->bulk.ids[i] = strdup(json_string_value(json_array_get(ids, i)));
            oom = !r->bulk.ids[i];
            r->bulk.nids += !oom;
        }
    }
    if (!oom && r && !dry_run) {
        char action_s[32], which[1024];
        snprintf(action_s, sizeof action_s, "bulk.%s", action_name(action));
        describe(&filter, ids, which, sizeof which);
        r->audit = er_http_audit_new(c, action_s, which, 0);
        oom = !r->audit;
    }
    json_decref(body);
    if (oom) {
        er_req_free(r);
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return;
    }
    er_http_submit(c, r, dry_run ? finish_count : finish_chunk);
}
