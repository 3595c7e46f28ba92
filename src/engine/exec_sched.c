/* SPDX-License-Identifier: MIT
 *
 * Engine execution of schedulers, run-once leases and cursors, and the cron
 * pass of maintenance. Rules live in core (scheduler.h, lease.h) and rows in
 * the store; this file joins them inside the writer's transaction (or on the
 * reader's connection) and builds the reply objects. Each exec context
 * caches parsed schedulers by key and spec text, because every cron pass and
 * GET would otherwise re-parse and re-validate the stored spec JSON (zones
 * themselves come from util's process-wide cache). A store without these ops
 * answers ER_EUNAVAIL "not supported by this store".
 */
#include "engine/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lease.h"
#include "core/scheduler.h"
#include "util/log.h"
#include "util/tz.h"

#define CACHE_MAX 512       /* parsed schedulers kept per context */
#define CRON_BATCH 256      /* schedulers looked at per maintenance pass */
#define CRON_RETRY_MS 60000 /* a scheduler whose spec cannot be used is retried this late */
#define NEXT_RUNS 5         /* upcoming runs shown by GET */

typedef struct cache_ent {
    char *key;
    char *spec;
    er_scheduler sc;
} cache_ent;

struct er_sched_cache {
    cache_ent *items;
    size_t len, cap;
};

static void cache_clear(struct er_sched_cache *c)
{
    for (size_t i = 0; i < c->len; i++) {
        free(c->items[i].key);
        free(c->items[i].spec);
        er_scheduler_fini(&c->items[i].sc);
    }
    c->len = 0;
}

void er_exec_ctx_fini(er_exec_ctx *x)
{
    if (!x->sched)
        return;
    cache_clear(x->sched);
    free(x->sched->items);
    free(x->sched);
    x->sched = NULL;
}

/* The parsed scheduler of row (borrowed until the next cache call). Parses
 * it and looks up its zone on a miss or when the spec changed. */
static int cache_get(er_exec_ctx *x, const char *key, const char *spec, er_scheduler **out,
                     er_error *err)
{
    if (!x->sched && !(x->sched = calloc(1, sizeof *x->sched)))
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    struct er_sched_cache *c = x->sched;
    cache_ent *e = NULL;
    for (size_t i = 0; i < c->len && !e; i++)
        if (strcmp(c->items[i].key, key) == 0)
            e = &c->items[i];
    if (e && strcmp(e->spec, spec) == 0) {
        *out = &e->sc;
        return 0;
    }
    json_error_t je;
    json_t *obj = json_loads(spec, 0, &je);
    if (!obj)
        return er_error_set(err, ER_EINTERNAL, "spec", "stored spec of '%s' is not JSON: %s",
                            key, je.text);
    er_scheduler sc;
    const er_tz *tz;
    int rc = er_scheduler_from_json(obj, (size_t)-1, &sc, err);
    json_decref(obj);
    if (rc == 0 && (rc = er_tz_get(sc.tz_name, &tz, err)) == 0)
        rc = er_scheduler_set_zone(&sc, tz, err);
    if (rc < 0) {
        er_scheduler_fini(&sc);
        return rc;
    }
    char *spec_copy = strdup(spec);
    if (!spec_copy) {
        er_scheduler_fini(&sc);
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    if (e) {
        free(e->spec);
        er_scheduler_fini(&e->sc);
    } else {
        if (c->len >= CACHE_MAX)
            cache_clear(c);
        if (c->len == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 16;
            cache_ent *items = realloc(c->items, cap * sizeof *items);
            if (!items) {
                free(spec_copy);
                er_scheduler_fini(&sc);
                return er_error_set(err, ER_ENOMEM, "", "out of memory");
            }
            c->items = items;
            c->cap = cap;
        }
        e = &c->items[c->len];
        if (!(e->key = strdup(key))) {
            free(spec_copy);
            er_scheduler_fini(&sc);
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        }
        c->len++;
    }
    e->spec = spec_copy;
    e->sc = sc;
    *out = &e->sc;
    return 0;
}

bool er_sched_req_is_read(const er_req *req)
{
    switch (req->type) {
    case ER_REQ_GET_SCHEDULER:
    case ER_REQ_LIST_SCHEDULERS:
    case ER_REQ_GET_CURSOR:
        return true;
    default:
        return false;
    }
}

static json_t *time_json(int64_t ms)
{
    if (ms <= 0 || ms == INT64_MAX)
        return json_null();
    char buf[32];
    er_time_format(ms, buf);
    return json_string(buf);
}

/* {"key", spec fields..., "created_at", "updated_at", "last_tick",
 * "next_run_at", "next_runs": [local times]} */
static json_t *sched_json(const er_sched_row *row, const er_scheduler *sc)
{
    json_t *o = er_scheduler_spec_json(sc);
    json_t *runs = json_array();
    if (!o || !runs) {
        json_decref(o);
        json_decref(runs);
        return NULL;
    }
    int64_t t = row->next_run_at;
    for (int i = 0; i < NEXT_RUNS && t != INT64_MAX; i++) {
        char buf[32];
        er_time_format_local(t, sc->tz, buf);
        json_array_append_new(runs, json_string(buf));
        t = er_scheduler_next(sc, t);
    }
    json_object_set_new(o, "key", json_string(row->key));
    json_object_set_new(o, "created_at", time_json(row->created_at));
    json_object_set_new(o, "updated_at", time_json(row->updated_at));
    json_object_set_new(o, "last_tick", time_json(row->last_tick));
    json_object_set_new(o, "next_run_at", time_json(row->next_run_at));
    json_object_set_new(o, "next_runs", runs);
    return o;
}

/* Wraps sched_json of row as {"scheduler": ...} into req->reply. */
static int reply_sched(er_exec_ctx *x, er_req *req, const er_sched_row *row)
{
    er_scheduler *sc;
    int rc = cache_get(x, row->key, row->spec, &sc, &req->err);
    if (rc < 0)
        return rc;
    req->reply = json_pack("{s:o}", "scheduler", sched_json(row, sc));
    return req->reply ? 0 : er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
}

static bool supported(er_exec_ctx *x, er_req *req)
{
    const er_store_ops *o = x->ops;
    bool ok;
    switch (req->type) {
    case ER_REQ_LEASE_ACQUIRE:
    case ER_REQ_LEASE_RENEW:
    case ER_REQ_LEASE_COMPLETE:
    case ER_REQ_LEASE_RELEASE:
        ok = o->lease_acquire && o->lease_renew && o->lease_complete && o->lease_release;
        break;
    case ER_REQ_GET_CURSOR:
    case ER_REQ_PUT_CURSOR:
        ok = o->cursor_get && o->cursor_cas;
        break;
    default:
        ok = o->scheduler_put && o->scheduler_get && o->scheduler_list &&
             o->scheduler_delete && o->scheduler_due && o->scheduler_advance;
        break;
    }
    if (!ok)
        req->rc = er_error_set(&req->err, ER_EUNAVAIL, "",
                               "not supported by this store (%s)", o->name);
    return ok;
}

/* ---- writes ---- */

static int put_scheduler(er_exec_ctx *x, er_req *req, int64_t now)
{
    er_sched_row old = {0};
    int rc = x->ops->scheduler_get(x->store, req->id, &old, &req->err);
    if (rc < 0 && rc != ER_ENOTFOUND)
        return rc;
    bool exists = rc == 0;
    er_scheduler *sc;
    rc = cache_get(x, req->id, req->text, &sc, &req->err);
    if (rc < 0) {
        er_sched_row_fini(&old);
        return rc; /* an unknown zone is ER_EINVAL: nothing stored */
    }
    /* An unchanged spec keeps its pending ticks (a redeploy must not skip
     * or repeat them); a changed one starts from now. */
    int64_t next = exists && strcmp(old.spec, req->text) == 0 ? old.next_run_at
                                                               : er_scheduler_next(sc, now);
    er_sched_row_fini(&old);
    er_sched_row in = {.key = req->id, .spec = req->text, .next_run_at = next};
    er_sched_row out = {0};
    rc = x->ops->scheduler_put(x->store, &in, now, &req->created, &out, &req->err);
    if (rc == 0)
        rc = reply_sched(x, req, &out);
    er_sched_row_fini(&out);
    return rc;
}

static int trigger_scheduler(er_exec_ctx *x, er_req *req, int64_t now)
{
    er_sched_row row = {0};
    int rc = x->ops->scheduler_get(x->store, req->id, &row, &req->err);
    er_scheduler *sc = NULL;
    if (rc == 0)
        rc = cache_get(x, row.key, row.spec, &sc, &req->err);
    er_job job;
    er_job_init(&job);
    if (rc == 0)
        rc = er_scheduler_job(sc, row.key, now - now % 1000, now, &x->rand, &job, &req->err);
    bool dup = false;
    if (rc == 0)
        rc = er_exec_enqueue_job(x, &job, now, &dup, &req->job, &req->err);
    if (rc == 0 && !dup) {
        er_job_fini(&req->job);
        rc = er_job_copy(&req->job, &job) < 0 ? er_error_set(&req->err, ER_ENOMEM, "", "oom") : 0;
    }
    if (rc == 0)
        req->created = !dup;
    er_job_fini(&job);
    er_sched_row_fini(&row);
    return rc;
}

static int lease_write(er_exec_ctx *x, er_req *req, int64_t now)
{
    er_store *s = x->store;
    const er_store_ops *o = x->ops;
    switch (req->type) {
    case ER_REQ_LEASE_ACQUIRE: {
        char key[ER_LEASE_KEY_SIZE];
        int rc = er_lease_key(req->lease_type, req->lease_code, req->lease_run_key, key,
                              &req->err);
        if (rc < 0)
            return rc;
        return o->lease_acquire(s, req->lease_type, req->lease_code, req->lease_run_key, key,
                                req->extend_ms, now, &x->rand, &req->lease, &req->err);
    }
    case ER_REQ_LEASE_RENEW:
        return o->lease_renew(s, req->token, req->extend_ms, now, &req->lease, &req->err);
    case ER_REQ_LEASE_COMPLETE:
        return o->lease_complete(s, req->token, now, &req->lease, &req->err);
    default:
        return o->lease_release(s, req->token, now, &req->lease, &req->err);
    }
}

static json_t *value_json(const char *text)
{
    json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    return v ? v : json_null();
}

static int put_cursor(er_exec_ctx *x, er_req *req, int64_t now)
{
    char *current = NULL;
    int rc = x->ops->cursor_cas(x->store, req->id, req->has_expected, req->expected, req->text,
                                now, &current, &req->err);
    if (rc == 0)
        req->reply = json_pack("{s:s,s:o,s:o}", "name", req->id, "value", value_json(req->text),
                               "updated_at", time_json(now));
    else if (rc == ER_ECONFLICT)
        req->reply = json_pack("{s:o}", "current", value_json(current));
    free(current);
    return rc;
}

int er_exec_sched_write(er_exec_ctx *x, er_req *req, int64_t now)
{
    if (!supported(x, req))
        return 0;
    int rc;
    switch (req->type) {
    case ER_REQ_PUT_SCHEDULER:
        rc = put_scheduler(x, req, now);
        break;
    case ER_REQ_DELETE_SCHEDULER:
        rc = x->ops->scheduler_delete(x->store, req->id, &req->err);
        if (rc == 0 && !(req->reply = json_pack("{s:b}", "ok", 1)))
            rc = er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
        break;
    case ER_REQ_TRIGGER_SCHEDULER:
        rc = trigger_scheduler(x, req, now);
        break;
    case ER_REQ_LEASE_ACQUIRE:
    case ER_REQ_LEASE_RENEW:
    case ER_REQ_LEASE_COMPLETE:
    case ER_REQ_LEASE_RELEASE:
        rc = lease_write(x, req, now);
        break;
    case ER_REQ_PUT_CURSOR:
        rc = put_cursor(x, req, now);
        break;
    default:
        rc = er_error_set(&req->err, ER_EINTERNAL, "", "not a write request");
        break;
    }
    if (er_is_storage_error(rc))
        return rc;
    if (rc < 0)
        req->rc = rc;
    return 0;
}

/* ---- reads ---- */

static int list_schedulers(er_exec_ctx *x, er_req *req)
{
    er_sched_list l = {0};
    int rc = x->ops->scheduler_list(x->store, req->cursor, req->max, &l, &req->err);
    json_t *arr = json_array();
    for (size_t i = 0; rc == 0 && i < l.len; i++) {
        er_scheduler *sc;
        er_error e2 = {0};
        json_t *o;
        if (cache_get(x, l.items[i].key, l.items[i].spec, &sc, &e2) == 0)
            o = sched_json(&l.items[i], sc);
        else /* e.g. its zone file vanished: still list it, with the reason */
            o = json_pack("{s:s,s:s}", "key", l.items[i].key, "error", e2.message);
        if (!arr || !o || json_array_append_new(arr, o) != 0)
            rc = er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    }
    if (rc == 0) {
        json_t *next = (int)l.len == req->max && l.len > 0
                           ? json_string(l.items[l.len - 1].key)
                           : json_null();
        req->reply = json_pack("{s:O,s:o}", "schedulers", arr, "next_cursor", next);
        if (!req->reply)
            rc = er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    }
    json_decref(arr);
    er_sched_list_fini(&l);
    return rc;
}

void er_exec_sched_read(er_exec_ctx *x, er_req *req, int64_t now)
{
    (void)now;
    er_error_clear(&req->err);
    req->rc = 0;
    if (!supported(x, req))
        return;
    int rc;
    er_sched_row row = {0};
    switch (req->type) {
    case ER_REQ_GET_SCHEDULER:
        rc = x->ops->scheduler_get(x->store, req->id, &row, &req->err);
        if (rc == 0)
            rc = reply_sched(x, req, &row);
        er_sched_row_fini(&row);
        break;
    case ER_REQ_LIST_SCHEDULERS:
        rc = list_schedulers(x, req);
        break;
    case ER_REQ_GET_CURSOR: {
        char *value = NULL;
        int64_t at = 0;
        rc = x->ops->cursor_get(x->store, req->id, &value, &at, &req->err);
        if (rc == 0 && !(req->reply = json_pack("{s:s,s:o,s:o}", "name", req->id, "value",
                                                value_json(value), "updated_at", time_json(at))))
            rc = er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
        free(value);
        break;
    }
    default:
        rc = er_error_set(&req->err, ER_EINTERNAL, "", "not a read request");
        break;
    }
    req->rc = rc;
}

/* ---- the cron pass ---- */

static int cron_one(er_exec_ctx *x, const er_sched_row *row, int64_t now, er_error *errp)
{
    char extra[200];
    snprintf(extra, sizeof extra, "\"scheduler\":\"%s\"", row->key); /* key: [A-Za-z0-9_.:-] */
    er_error err = {0};
    er_scheduler *sc;
    int rc = cache_get(x, row->key, row->spec, &sc, &err);
    *errp = err;
    if (rc == ER_ENOMEM)
        return rc;
    if (rc < 0) {
        ER_LOG(ER_LOG_ERROR, extra, "scheduler cannot run: %s", err.message);
        rc = x->ops->scheduler_advance(x->store, row->key, row->next_run_at, 0,
                                       now + CRON_RETRY_MS, &err);
        return er_is_storage_error(rc) ? rc : 0;
    }
    int64_t on_time_after = now - ER_SCHED_GRACE_MS;
    if (on_time_after < x->sched_since)
        on_time_after = x->sched_since;
    er_sched_plan p;
    if ((rc = er_scheduler_plan(sc, row->next_run_at, now, on_time_after, &p, &err)) < 0)
        return rc;
    int64_t last = 0;
    for (size_t i = 0; i < p.n; i++) {
        er_job job;
        rc = er_scheduler_job(sc, row->key, p.ticks[i], now, &x->rand, &job, &err);
        if (rc < 0) {
            if (er_is_storage_error(rc))
                break;
            ER_LOG(ER_LOG_ERROR, extra, "scheduler tick job refused: %s", err.message);
            rc = 0;
            continue;
        }
        bool dup = false;
        rc = er_exec_enqueue_job(x, &job, now, &dup, NULL, &err);
        er_job_fini(&job);
        if (er_is_storage_error(rc))
            break;
        if (rc < 0) {
            ER_LOG(ER_LOG_ERROR, extra, "scheduler tick not enqueued: %s", err.message);
            rc = 0;
            continue;
        }
        last = p.ticks[i];
    }
    if (rc == 0 && p.had_missed)
        ER_LOG(ER_LOG_INFO, extra, "scheduler missed ticks while the server was down; "
               "policy %s fired %zu catch-up run(s)", er_missed_name(sc->missed), p.missed_fired);
    if (rc == 0) {
        rc = x->ops->scheduler_advance(x->store, row->key, row->next_run_at, last, p.next_run_at,
                                       &err);
        if (!er_is_storage_error(rc))
            rc = 0; /* changed or deleted meanwhile: the next pass sees the new row */
    }
    er_sched_plan_fini(&p);
    if (rc < 0)
        *errp = err;
    return rc;
}

int er_exec_cron(er_exec_ctx *x, int64_t now)
{
    if (!x->ops->scheduler_due || !x->ops->scheduler_advance)
        return 0;
    if (x->sched_since == 0)
        x->sched_since = now;
    er_sched_list due = {0};
    er_error err = {0};
    int rc = x->ops->scheduler_due(x->store, now, CRON_BATCH, &due, &err);
    for (size_t i = 0; rc == 0 && i < due.len; i++)
        rc = cron_one(x, &due.items[i], now, &err);
    er_sched_list_fini(&due);
    if (rc < 0)
        ER_LOG(ER_LOG_ERROR, NULL, "cron pass failed: %s", err.message);
    return rc;
}
