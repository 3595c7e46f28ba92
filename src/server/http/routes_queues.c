/* SPDX-License-Identifier: MIT
 *
 * Queue and dead-letter endpoints: listing queues with their counts and
 * settings, paging a queue's jobs, changing settings (PUT, pause, resume),
 * and listing, redriving and deleting dead jobs. Query parameters and
 * settings patches are validated here before anything is submitted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "core/queue.h"
#include "engine/qmetrics.h"
#include "server/http/http_internal.h"
#include "server/http/job_json.h"
#include "server/http/queue_json.h"

#define LIST_LIMIT_DEFAULT 50
#define CURSOR_MAX 512

static er_req *new_req(er_hctx *c, er_req_type type)
{
    er_req *r = er_req_new(type);
    if (!r)
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
    return r;
}

static int set_str(char **dst, const char *s, er_error *err)
{
    *dst = strdup(s);
    return *dst ? 0 : er_error_set(err, ER_ENOMEM, NULL, "out of memory");
}

/* ---- queue info ---- */

/* throttled_until: RFC 3339 while a throttled failure pauses fetching,
 * else null. */
static json_t *queue_info_json(const er_queue_info *q, int64_t now)
{
    int64_t oldest = q->oldest_waiting_ms;
    int64_t age = oldest > 0 && now > oldest ? now - oldest : 0;
    json_t *throttled = json_null();
    if (q->throttled_until > now) {
        char t[32];
        er_time_format(q->throttled_until, t);
        throttled = json_string(t);
    }
    const int64_t *counts = q->counts;
    return json_pack(
        "{s:s,s:{s:I,s:I,s:I,s:I,s:I,s:I},s:I,s:b,s:o,s:o}", "name", q->name, "counts", "scheduled",
        (json_int_t)counts[ER_STATE_SCHEDULED], "waiting", (json_int_t)counts[ER_STATE_WAITING],
        "active", (json_int_t)counts[ER_STATE_ACTIVE], "completed",
        (json_int_t)counts[ER_STATE_COMPLETED], "dead", (json_int_t)counts[ER_STATE_DEAD],
        "cancelled", (json_int_t)counts[ER_STATE_CANCELLED], "oldest_waiting_age_ms",
        (json_int_t)age, "paused", q->settings.paused, "throttled_until", throttled, "settings",
        er_http_settings_json(&q->settings));
}

/* {"interval_ms", "until", "waiting": [...]}: the waiting jobs of the
 * last hour's samples, oldest first, null where this node took none. */
static json_t *history_json(er_qmetrics *m, const char *queue)
{
    er_qm_lock(m);
    int64_t at = 0;
    int head = er_qm_history_head(m, &at);
    const er_qm_queue *q = er_qm_find(m, queue);
    json_t *arr = json_array();
    for (int k = 1; arr && k <= ER_QM_HISTORY; k++) {
        int64_t v = q && head >= 0 ? q->hist_waiting[(head + k) % ER_QM_HISTORY] : -1;
        json_array_append_new(arr, v >= 0 ? json_integer((json_int_t)v) : json_null());
    }
    er_qm_unlock(m);
    json_t *until = json_null();
    if (at > 0) {
        char t[32];
        er_time_format(at, t);
        until = json_string(t);
    }
    return json_pack("{s:I,s:o,s:o}", "interval_ms", (json_int_t)ER_QM_HISTORY_MS, "until", until,
                     "waiting", arr);
}

/* A queue's object, with its history when the request asked (flags). */
static json_t *queue_json(er_hctx *c, const er_queue_info *q, int64_t now)
{
    json_t *o = queue_info_json(q, now);
    if (o && c->flags)
        json_object_set_new(o, "history", history_json(er_engine_qmetrics(c->s->engine), q->name));
    return o;
}

typedef struct history_arg {
    er_hctx *c;
    er_error *err;
} history_arg;

static int history_param(void *arg, const char *k, const char *v)
{
    history_arg *h = arg;
    if (strcmp(k, "history") != 0)
        return er_query_unknown(k, h->err);
    if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0)
        h->c->flags = 1;
    else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0)
        h->c->flags = 0;
    else
        return er_error_set(h->err, ER_EINVAL, "history", "history must be 1, 0, true or false");
    return 0;
}

/* Reads ?history=1|0 into c->flags; replies with the error and returns < 0
 * on another parameter or value. */
static int read_history(er_hctx *c)
{
    er_error err = {0};
    history_arg h = {c, &err};
    c->flags = 0;
    if (er_query_foreach(c->query, history_param, &h, &err) != 0) {
        er_http_reply_error(c, &err);
        return -1;
    }
    return 0;
}

static void finish_list_queues(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    int64_t now = er_now_ms();
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < r->nqueue_infos; i++) {
        const er_queue_info *q = &r->queue_infos[i];
        json_t *o = queue_json(c, q, now);
        if (json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    er_http_reply_json(c, 200, json_pack("{s:o}", "queues", arr));
}

void er_route_list_queues(er_hctx *c)
{
    if (read_history(c) < 0)
        return;
    er_req *r = new_req(c, ER_REQ_LIST_QUEUES);
    if (r)
        er_http_submit(c, r, finish_list_queues);
}

/* One queue: the store lists known queues; an unknown one has no jobs and
 * default settings, like GET_QUEUE answers for it. */
static void finish_get_queue(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    int64_t now = er_now_ms();
    for (size_t i = 0; i < r->nqueue_infos; i++) {
        const er_queue_info *q = &r->queue_infos[i];
        if (strcmp(q->name, c->param) == 0) {
            er_http_reply_json(c, 200, json_pack("{s:o}", "queue", queue_json(c, q, now)));
            return;
        }
    }
    er_queue_info unknown = {.name = c->param};
    er_queue_settings_default(&unknown.settings);
    er_http_reply_json(c, 200, json_pack("{s:o}", "queue", queue_json(c, &unknown, now)));
}

void er_route_get_queue(er_hctx *c)
{
    if (read_history(c) < 0)
        return;
    er_req *r = new_req(c, ER_REQ_LIST_QUEUES);
    if (r)
        er_http_submit(c, r, finish_get_queue);
}

/* ---- settings ---- */

static void finish_settings(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_http_reply_json(c, 200,
                       json_pack("{s:o}", "settings", er_http_settings_json(r->settings)));
}

static void submit_change(er_hctx *c, const er_queue_change *change)
{
    er_error err = {0};
    er_req *r = new_req(c, ER_REQ_PUT_QUEUE);
    if (!r)
        return;
    r->change = malloc(sizeof *r->change);
    if (r->change)
        *r->change = *change;
    else
        er_error_set(&err, ER_ENOMEM, "", "out of memory");
    if (!r->change || set_str(&r->queue, c->param, &err) < 0) {
        er_req_free(r);
        er_http_reply_error(c, &err);
        return;
    }
    er_http_submit(c, r, finish_settings);
}

void er_route_put_queue(er_hctx *c)
{
    json_t *body;
    if (er_http_body_object(c, &body) < 0)
        return;
    /* The change is judged on its own before the engine merges it onto the
     * stored settings, so a bad one never reaches the engine. */
    er_queue_patch p;
    er_http_queue_patch(body, &p);
    er_queue_change change;
    er_error err = {0};
    int rc = er_queue_patch_check(&p, &change, &err);
    json_decref(body);
    if (rc < 0) {
        er_http_reply_error(c, &err);
        return;
    }
    submit_change(c, &change);
}

void er_route_pause_queue(er_hctx *c)
{
    er_queue_change change = {.paused = ER_CHANGE_SET, .paused_v = c->flags != 0};
    submit_change(c, &change);
}

/* ---- pages of jobs ---- */

typedef struct page_query {
    bool want_state, want_queue;
    er_state state;
    int limit;
    char cursor[CURSOR_MAX + 1];
    bool has_cursor;
    char queue[ER_NAME_MAX + 1];
    bool has_queue;
    er_error *err;
} page_query;

static int page_param(void *arg, const char *k, const char *v)
{
    page_query *q = arg;
    if (strcmp(k, "limit") == 0) {
        return er_query_int("limit", v, 1, ER_HTTP_LIST_LIMIT_MAX, &q->limit, q->err);
    } else if (strcmp(k, "cursor") == 0) {
        size_t n = strlen(v);
        if (n > CURSOR_MAX)
            return er_error_set(q->err, ER_EINVAL, "cursor", "cursor is too long");
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] > 0x7e)
                return er_error_set(q->err, ER_EINVAL, "cursor", "malformed cursor");
        memcpy(q->cursor, v, n + 1);
        q->has_cursor = n > 0;
    } else if (strcmp(k, "state") == 0 && q->want_state) {
        if (er_state_parse(v, &q->state) < 0)
            return er_error_set(q->err, ER_EINVAL, "state",
                                "state must be scheduled, waiting, active, completed, dead or "
                                "cancelled");
    } else if (strcmp(k, "queue") == 0 && q->want_queue) {
        if (!*v) {
            q->has_queue = false;
            return 0;
        }
        int rc = er_name_validate(v, "queue", q->err);
        if (rc < 0)
            return rc;
        snprintf(q->queue, sizeof q->queue, "%s", v);
        q->has_queue = true;
    } else {
        return er_query_unknown(k, q->err);
    }
    return 0;
}

static int parse_page(er_hctx *c, page_query *q, er_error *err)
{
    q->limit = LIST_LIMIT_DEFAULT;
    q->err = err;
    int rc = er_query_foreach(c->query, page_param, q, err);
    return rc < 0 ? rc : 0;
}

static void finish_page(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_jsonw rest;
    er_jsonw_init(&rest, 4096);
    er_jsonw_begin_object(&rest);
    er_jsonw_key(&rest, "next_cursor");
    er_jsonw_str(&rest, r->next_cursor);
    er_jsonw_end_object(&rest);
    er_http_reply_jobs(c, r, false, &rest);
}

static void submit_page(er_hctx *c, er_req *r, const page_query *q, const char *queue)
{
    er_error err = {0};
    r->max = q->limit;
    r->state = q->state;
    if ((q->has_cursor && set_str(&r->cursor, q->cursor, &err) < 0) ||
        (queue && set_str(&r->queue, queue, &err) < 0)) {
        er_req_free(r);
        er_http_reply_error(c, &err);
        return;
    }
    er_http_submit(c, r, finish_page);
}

void er_route_list_jobs(er_hctx *c)
{
    er_error err = {0};
    page_query q = {.want_state = true, .state = ER_STATE_WAITING};
    if (parse_page(c, &q, &err) < 0) {
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = new_req(c, ER_REQ_LIST_JOBS);
    if (r)
        submit_page(c, r, &q, c->param);
}

void er_route_list_dead(er_hctx *c)
{
    er_error err = {0};
    page_query q = {.want_queue = true};
    if (parse_page(c, &q, &err) < 0) {
        er_http_reply_error(c, &err);
        return;
    }
    er_req *r = new_req(c, ER_REQ_LIST_DEAD);
    if (r)
        submit_page(c, r, &q, q.has_queue ? q.queue : NULL);
}

/* ---- dead letters ---- */

static void finish_redrive(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_http_reply_json(c, 201,
                       json_pack("{s:o}", "job", er_http_job_to_json(&r->job, c->caller.role)));
}

static void finish_delete_dead(er_hctx *c, er_req *r)
{
    if (r->rc) {
        er_http_reply_req_error(c, r);
        return;
    }
    er_http_reply_json(c, 200, json_pack("{s:b}", "ok", 1));
}

static void submit_id(er_hctx *c, er_req_type type, er_finish_fn finish)
{
    er_error err = {0};
    er_req *r = new_req(c, type);
    if (!r)
        return;
    if (set_str(&r->id, c->param, &err) < 0) {
        er_req_free(r);
        er_http_reply_error(c, &err);
        return;
    }
    er_http_submit(c, r, finish);
}

void er_route_redrive(er_hctx *c)
{
    submit_id(c, ER_REQ_REDRIVE, finish_redrive);
}

void er_route_delete_dead(er_hctx *c)
{
    submit_id(c, ER_REQ_DELETE_DEAD, finish_delete_dead);
}
