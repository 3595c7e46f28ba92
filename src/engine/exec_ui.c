/* SPDX-License-Identifier: MIT
 *
 * Engine requests of the dashboard: sessions (put, touch, delete), the
 * audit log (add, list), bulk actions (one chunk a request, so the writer
 * serves others between chunks; and their count), the audit row an administrative request carries
 * (written in the request's own transaction, after it succeeded), and the
 * retention sweep of expired sessions and old audit rows. A store without
 * these ops answers ER_EUNAVAIL. Writer or reader thread, as exec.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/exec.h"
#include "store/error_codec.h"

#define AUDIT_LIST_MAX 1000

bool er_ui_req_is_read(const er_req *req)
{
    return req->type == ER_REQ_AUDIT_LIST || req->type == ER_REQ_BULK_COUNT;
}

/* Whether the filter takes a job as read (strict ids). */
static bool filter_takes(const er_bulk_filter *f, const er_job *j)
{
    return j->state == f->state && (!f->queue || strcmp(f->queue, j->queue) == 0) &&
           (!f->name || strcmp(f->name, j->name) == 0) &&
           (!f->not_redriven || j->redriven_at == 0) &&
           (f->tries != ER_BULK_TRIES_SOME || j->attempts > 0) &&
           (f->tries != ER_BULK_TRIES_NONE || j->attempts == 0);
}

/* KILL and RUN_NOW of one scheduled job `cur`: rc as ops->move_scheduled. */
static int bulk_move(er_exec_ctx *x, er_req *req, const er_job *cur, int64_t now, er_error *e)
{
    char *text = NULL;
    if (req->bulk.action == ER_BULK_KILL) {
        er_failure f = {.cls = ER_ERR_PERMANENT, .message = req->bulk.reason};
        if (!(text = er_last_error_encode(&f, cur->attempts, NULL, now)))
            return er_error_set(e, ER_ENOMEM, "", "out of memory");
    }
    char *queue = NULL;
    int rc = x->ops->move_scheduled(x->store, cur->id, text, now, &queue, e);
    free(text);
    if (rc == 0 && req->bulk.action == ER_BULK_RUN_NOW)
        er_wake_add(&x->wake, queue, 1);
    else if (rc == 0)
        er_keys_add(&x->done, cur->id);
    free(queue);
    return rc;
}

/* One job of a bulk action; a job that is not (any more) in the state the
 * action takes, or that the filter or match does not take, is skipped.
 * Returns 0 or a storage error. */
static int bulk_one(er_exec_ctx *x, er_req *req, const char *id, int64_t now)
{
    er_error e;
    er_job job;
    er_job_init(&job);
    int rc;
    er_bulk *b = &req->bulk;
    bool move = b->action == ER_BULK_KILL || b->action == ER_BULK_RUN_NOW;
    if (move || b->strict || b->match) {
        er_job cur;
        er_job_init(&cur);
        rc = x->ops->get_job(x->store, id, &cur, &e);
        if (rc == 0 && ((b->strict && !filter_takes(&b->filter, &cur)) ||
                        (b->match && !b->match(&cur, b->pattern)) ||
                        (move && cur.state != ER_STATE_SCHEDULED)))
            rc = ER_ENOTFOUND; /* skipped */
        if (rc == 0 && move) {
            rc = bulk_move(x, req, &cur, now, &e);
            er_job_fini(&cur);
            goto out;
        }
        er_job_fini(&cur);
        if (rc != 0)
            goto out;
    }
    switch (req->bulk.action) {
    case ER_BULK_REDRIVE:
        rc = x->ops->redrive(x->store, id, now, &job, &e);
        if (rc == 0 && job.queue)
            er_wake_add(&x->wake, job.queue, 1);
        break;
    case ER_BULK_DELETE:
        rc = x->ops->delete_dead(x->store, id, &e);
        break;
    case ER_BULK_CANCEL:
        rc = x->ops->cancel(x->store, id, now, &job, &e);
        if (rc == 0)
            er_keys_add(&x->done, id);
        break;
    default:
        rc = er_error_set(&e, ER_EINVAL, "action", "unknown bulk action");
        break;
    }
out:
    er_job_fini(&job);
    if (er_is_storage_error(rc)) {
        req->err = e;
        return rc;
    }
    req->bulk.done += rc == 0;
    return 0;
}

/* One chunk: the given ids, or the next ER_BULK_CHUNK jobs of the filter
 * after bulk.after, all in this transaction. */
static int bulk_chunk(er_exec_ctx *x, er_req *req, int64_t now)
{
    er_bulk *b = &req->bulk;
    b->done = 0;
    b->more = false;
    if ((b->action == ER_BULK_KILL || b->action == ER_BULK_RUN_NOW) && !x->ops->move_scheduled) {
        req->rc = er_error_set(&req->err, ER_EUNAVAIL, "",
                               "moving scheduled jobs is not supported by this store");
        return 0;
    }
    if (b->ids) {
        for (size_t i = 0; i < b->nids; i++) {
            int rc = bulk_one(x, req, b->ids[i], now);
            if (rc < 0)
                return rc;
        }
    } else {
        char **ids = NULL;
        size_t n = 0;
        int64_t last = b->after;
        int rc = x->ops->bulk_ids(x->store, &b->filter, b->after, ER_BULK_CHUNK, &ids, &n, &last,
                                  &req->err);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = bulk_one(x, req, ids[i], now);
        for (size_t i = 0; i < n; i++)
            free(ids[i]);
        free(ids);
        if (rc < 0)
            return rc;
        b->after = last;
        b->more = n == ER_BULK_CHUNK;
    }
    if (req->audit)
        req->audit->count = b->done;
    return 0;
}

static bool supported(er_exec_ctx *x, er_req *req)
{
    if (x->ops->session_put && x->ops->audit_add && x->ops->bulk_ids)
        return true;
    er_error_set(&req->err, ER_EUNAVAIL, "", "sessions and audit are not supported by this store");
    return false;
}

int er_exec_ui_write(er_exec_ctx *x, er_req *req, int64_t now)
{
    if (!supported(x, req)) {
        req->rc = ER_EUNAVAIL;
        return 0;
    }
    switch (req->type) {
    case ER_REQ_SESSION_PUT:
        return x->ops->session_put(x->store, req->id, &req->session, &req->err);
    case ER_REQ_SESSION_TOUCH:
        return x->ops->session_touch(x->store, req->id, now, req->extend_ms, &req->session,
                                     &req->err);
    case ER_REQ_SESSION_DELETE:
        return x->ops->session_delete(x->store, req->id, &req->err);
    case ER_REQ_AUDIT_ADD:
        return 0; /* the row itself is written by er_exec_audit */
    case ER_REQ_BULK:
        return bulk_chunk(x, req, now);
    default:
        return er_error_set(&req->err, ER_EINTERNAL, "", "not a dashboard request");
    }
}

int er_exec_audit(er_exec_ctx *x, er_req *req, int64_t now)
{
    if (!req->audit || req->rc != 0)
        return 0;
    if (!x->ops->audit_add) {
        req->rc = er_error_set(&req->err, ER_EUNAVAIL, "", "audit is not supported by this store");
        return 0;
    }
    if (req->audit->at == 0)
        req->audit->at = now;
    int rc = x->ops->audit_add(x->store, req->audit, &req->err);
    if (er_is_storage_error(rc))
        return rc;
    if (rc < 0)
        req->rc = rc;
    return 0;
}

void er_exec_ui_read(er_exec_ctx *x, er_req *req)
{
    if (!supported(x, req)) {
        req->rc = ER_EUNAVAIL;
        return;
    }
    if (req->type == ER_REQ_BULK_COUNT) {
        req->rc = x->ops->bulk_count(x->store, &req->bulk.filter, &req->bulk.count, &req->err);
        return;
    }
    int64_t before = INT64_MAX;
    if (req->cursor && *req->cursor) {
        char *end;
        errno = 0;
        long long v = strtoll(req->cursor, &end, 10);
        if (*end || errno || v <= 0) {
            req->rc = er_error_set(&req->err, ER_EINVAL, "cursor", "malformed cursor");
            return;
        }
        before = v;
    }
    int max = req->max > 0 && req->max <= AUDIT_LIST_MAX ? req->max : 100;
    /* one more than asked tells whether another page follows */
    int rc = x->ops->audit_list(x->store, before, max + 1, &req->audits, &req->err);
    if (rc == 0 && req->audits.len > (size_t)max) {
        er_audit_fini(&req->audits.items[max]);
        req->audits.len = (size_t)max;
        char buf[24];
        int n = snprintf(buf, sizeof buf, "%lld", (long long)req->audits.items[max - 1].seq);
        req->next_cursor = n > 0 ? strdup(buf) : NULL;
        if (!req->next_cursor)
            rc = er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
    }
    req->rc = rc;
}

int er_exec_ui_sweep(er_exec_ctx *x, int64_t now)
{
    if (!x->ops->ui_sweep)
        return 0;
    er_error err;
    int n = 0;
    return x->ops->ui_sweep(x->store, now, now - x->audit_retention_ms, ER_UI_SWEEP_LIMIT, &n,
                            &err);
}
