/* SPDX-License-Identifier: MIT
 *
 * Engine requests of the Faktory worker registry (docs/faktory.md,
 * "Workers"): a node's batch of beats (written together, the rows past
 * the ttl reaped, and what the node must learn read back in the same
 * transaction), an operator's signal, the list and the count. A store without the
 * worker ops answers ER_EUNAVAIL. Writer or reader thread, as exec.c.
 */
#include <stdint.h>

#include "engine/exec.h"

/* The most rows one request reads or reaps. */
#define WORKERS_MAX 100000
#define REAP_LIMIT 5000

bool er_workers_req_is_read(const er_req *req)
{
    return req->type == ER_REQ_WORKER_LIST || req->type == ER_REQ_WORKER_COUNT;
}

static bool supported(er_exec_ctx *x, er_req *req)
{
    if (x->ops->worker_beat && x->ops->worker_signal && x->ops->worker_get &&
        x->ops->worker_list && x->ops->worker_reap && x->ops->worker_count)
        return true;
    req->rc = er_error_set(&req->err, ER_EUNAVAIL, "",
                           "the worker registry is not supported by this store");
    return false;
}

/* Rows beating after this are live. */
static int64_t live_after(const er_req *req, int64_t now)
{
    return now - req->extend_ms;
}

static int exec_beats(er_exec_ctx *x, er_req *req, int64_t now)
{
    int rc = x->ops->worker_beat(x->store, req->workers.items, req->workers.len, &req->err);
    int n = 0;
    if (rc == 0)
        rc = x->ops->worker_reap(x->store, live_after(req, now), REAP_LIMIT, &n, &req->err);
    if (rc == 0)
        rc = x->ops->worker_list(x->store, live_after(req, now), true, NULL, WORKERS_MAX,
                                 &req->worker_rows, &req->err);
    for (size_t i = 0; rc == 0 && i < req->nwids; i++) {
        er_worker_row *w = er_worker_list_push(&req->worker_rows);
        if (!w)
            return er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
        er_error e;
        rc = x->ops->worker_get(x->store, req->wids[i], w, &e);
        if (rc == ER_ENOTFOUND) {
            req->worker_rows.len--; /* gone: nothing to learn */
            rc = 0;
        } else if (rc < 0) {
            req->err = e;
        }
    }
    return rc;
}

int er_exec_workers_write(er_exec_ctx *x, er_req *req, int64_t now)
{
    if (!supported(x, req))
        return 0;
    switch (req->type) {
    case ER_REQ_WORKER_BEATS:
        return exec_beats(x, req, now);
    case ER_REQ_WORKER_SIGNAL: {
        er_worker_row *w = er_worker_list_push(&req->worker_rows);
        if (!w)
            return er_error_set(&req->err, ER_ENOMEM, "", "out of memory");
        int rc = x->ops->worker_signal(x->store, req->id, req->worker_state,
                                       live_after(req, now), w, &req->err);
        if (rc < 0)
            req->worker_rows.len--;
        return rc;
    }
    default:
        return er_error_set(&req->err, ER_EINTERNAL, "", "not a worker registry request");
    }
}

void er_exec_workers_read(er_exec_ctx *x, er_req *req, int64_t now)
{
    if (!supported(x, req))
        return;
    if (req->type == ER_REQ_WORKER_COUNT) {
        req->rc = x->ops->worker_count(x->store, live_after(req, now), &req->worker_count,
                                       &req->err);
        return;
    }
    int max = req->max > 0 && req->max <= WORKERS_MAX ? req->max : WORKERS_MAX;
    req->rc = x->ops->worker_list(x->store, live_after(req, now), false, NULL, max,
                                  &req->worker_rows, &req->err);
}
