/* SPDX-License-Identifier: MIT
 *
 * Engine requests of the dashboard: sessions (put, touch, delete) and the
 * audit log (add, list), the audit row an administrative request carries
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

#define AUDIT_LIST_MAX 1000

bool er_ui_req_is_read(const er_req *req)
{
    return req->type == ER_REQ_AUDIT_LIST;
}

static bool supported(er_exec_ctx *x, er_req *req)
{
    if (x->ops->session_put && x->ops->audit_add)
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
