/* SPDX-License-Identifier: MIT
 *
 * Engine execution of schedulers, run-once leases and cursors, and the cron
 * pass of maintenance. Rules live in core (scheduler.h, lease.h), rows in
 * the store and the stored spec's text in the store codec (sched_codec.h);
 * this file joins them inside the writer's transaction (or on the reader's
 * connection) and answers with typed results, which the frontends format.
 * Each exec context caches decoded schedulers by key and spec text, because
 * every cron pass and GET would otherwise re-parse and re-validate the
 * stored spec (zones themselves come from util's process-wide cache). A
 * store without these ops answers ER_EUNAVAIL "not supported by this store".
 */
#include "engine/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lease.h"
#include "core/scheduler.h"
#include "store/sched_codec.h"
#include "util/log.h"
#include "util/tz.h"

#define CACHE_MAX 512       /* parsed schedulers kept per context */
#define CRON_BATCH 256      /* schedulers looked at per maintenance pass */
#define CRON_RETRY_MS 60000 /* a scheduler whose spec cannot be used is retried this late */

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
    er_scheduler sc;
    const er_tz *tz;
    int rc = er_sched_codec_decode(spec, &sc, err);
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
    case ER_REQ_LIST_LEASES:
    case ER_REQ_LIST_CURSORS:
        return true;
    default:
        return false;
    }
}

/* Appends a view of row (moved into it: *row is left empty) and its
 * scheduler from the cache. A spec that cannot be used fails the request,
 * or, with keep_bad (a list), is kept with the reason. */
static int add_view(er_exec_ctx *x, er_req *req, er_sched_row *row, bool keep_bad)
{
    er_sched_view *v = realloc(req->scheds, (req->nscheds + 1) * sizeof *v);
    if (!v)
        return er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    req->scheds = v;
    v = &req->scheds[req->nscheds];
    memset(v, 0, sizeof *v);
    er_scheduler *sc;
    int rc = cache_get(x, row->key, row->spec, &sc, &v->err);
    if (rc == 0)
        rc = er_scheduler_copy(&v->sc, sc, &v->err);
    if (rc < 0 && (!keep_bad || rc == ER_ENOMEM)) {
        req->err = v->err;
        return rc;
    }
    v->rc = rc;
    v->row = *row;
    memset(row, 0, sizeof *row);
    req->nscheds++;
    return 0;
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
    case ER_REQ_LIST_LEASES:
        ok = o->lease_list != NULL;
        break;
    case ER_REQ_LIST_CURSORS:
        ok = o->cursor_list != NULL;
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
    char *text = NULL;
    er_scheduler *sc;
    rc = er_sched_codec_encode(&req->sched, &text, &req->err);
    if (rc == 0)
        rc = cache_get(x, req->id, text, &sc, &req->err);
    if (rc < 0) {
        free(text);
        er_sched_row_fini(&old);
        return rc; /* an unknown zone is ER_EINVAL: nothing stored */
    }
    /* An unchanged spec keeps its pending ticks (a redeploy must not skip
     * or repeat them); a changed one starts from now. */
    int64_t next = exists && strcmp(old.spec, text) == 0 ? old.next_run_at
                                                          : er_scheduler_next(sc, now);
    er_sched_row_fini(&old);
    er_sched_row in = {.key = req->id, .spec = text, .next_run_at = next};
    er_sched_row out = {0};
    rc = x->ops->scheduler_put(x->store, &in, now, &req->created, &out, &req->err);
    if (rc == 0)
        rc = add_view(x, req, &out, false);
    er_sched_row_fini(&out);
    free(text);
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
        rc = er_exec_enqueue_job(x, &job, now, &dup, &req->job, &req->tombs, &req->err);
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
                                req->extend_ms, now, &req->lease, &req->err);
    }
    case ER_REQ_LEASE_RENEW:
        return o->lease_renew(s, req->token, req->extend_ms, now, &req->lease, &req->err);
    case ER_REQ_LEASE_COMPLETE:
        return o->lease_complete(s, req->token, now, &req->lease, &req->err);
    default:
        return o->lease_release(s, req->token, now, &req->lease, &req->err);
    }
}

static int put_cursor(er_exec_ctx *x, er_req *req, int64_t now)
{
    int rc = x->ops->cursor_cas(x->store, req->id, req->has_expected, req->expected, req->text,
                                now, &req->value, &req->err);
    if (rc != ER_ECONFLICT) {
        free(req->value); /* the current value is the answer to a conflict only */
        req->value = NULL;
    }
    if (rc == 0)
        req->updated_at = now;
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

/* The cursor of the next page of a list by key: the last key of a full
 * page (a page of exactly the last rows costs one more, empty, page). */
static int page_next(er_req *req, size_t len, const char *last_key)
{
    if (len == 0 || (int)len != req->max)
        return 0;
    if (!(req->next_cursor = strdup(last_key)))
        return er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    return 0;
}

static int list_schedulers(er_exec_ctx *x, er_req *req)
{
    er_sched_list l = {0};
    int rc = x->ops->scheduler_list(x->store, req->cursor, req->max, &l, &req->err);
    /* e.g. a zone file that vanished: still listed, with the reason */
    for (size_t i = 0; rc == 0 && i < l.len; i++)
        rc = add_view(x, req, &l.items[i], true);
    if (rc == 0 && l.len > 0)
        rc = page_next(req, l.len, req->scheds[req->nscheds - 1].row.key);
    er_sched_list_fini(&l);
    return rc;
}

static int list_leases(er_exec_ctx *x, er_req *req, int64_t now)
{
    er_lease_list *l = &req->leases;
    int rc = x->ops->lease_list(x->store, req->cursor, req->max, now, l, &req->err);
    if (rc == 0 && l->len > 0)
        rc = page_next(req, l->len, l->items[l->len - 1].lease.idempotency_key);
    return rc;
}

static int list_cursors(er_exec_ctx *x, er_req *req)
{
    er_cursor_list *l = &req->cursors;
    int rc = x->ops->cursor_list(x->store, req->cursor, req->max, l, &req->err);
    if (rc == 0 && l->len > 0)
        rc = page_next(req, l->len, l->items[l->len - 1].name);
    return rc;
}

void er_exec_sched_read(er_exec_ctx *x, er_req *req, int64_t now)
{
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
            rc = add_view(x, req, &row, false);
        er_sched_row_fini(&row);
        break;
    case ER_REQ_LIST_SCHEDULERS:
        rc = list_schedulers(x, req);
        break;
    case ER_REQ_GET_CURSOR:
        rc = x->ops->cursor_get(x->store, req->id, &req->value, &req->updated_at, &req->err);
        break;
    case ER_REQ_LIST_LEASES:
        rc = list_leases(x, req, now);
        break;
    case ER_REQ_LIST_CURSORS:
        rc = list_cursors(x, req);
        break;
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
        rc = er_exec_enqueue_job(x, &job, now, &dup, NULL, NULL, &err);
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
