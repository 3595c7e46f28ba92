/* SPDX-License-Identifier: MIT
 *
 * Fetch requests and the fetch policy (fetch.h). The messages here are the
 * API's (docs/api.md).
 */
#include "core/fetch.h"
#include "core/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void er_fetch_args_fini(er_fetch_args *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->nqueues; i++)
        free(a->queues[i]);
    free(a->queues);
    free(a->worker_id);
    memset(a, 0, sizeof *a);
}

static int validate(const er_fetch_spec *sp, er_fetch_args *a, er_error *err)
{
    if (sp->queues_kind == ER_SPEC_ABSENT)
        return er_error_set(err, ER_EINVAL, "queues", "queues is required");
    if (sp->queues_kind == ER_SPEC_BAD_TYPE || sp->nqueues < 1 ||
        sp->nqueues > ER_FETCH_QUEUES_MAX)
        return er_error_set(err, ER_EINVAL, "queues",
                            "queues must be an array of 1..%d queue names", ER_FETCH_QUEUES_MAX);
    for (size_t i = 0; i < sp->nqueues; i++) {
        char f[32];
        snprintf(f, sizeof f, "queues[%zu]", i);
        const er_spec_str *q = &sp->queues[i];
        if (q->kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, f, "%s must be a string", f);
        if (!er_name_ok(q->s, q->n))
            return er_name_validate(NULL, f, err);
    }
    if (sp->worker_id.kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, "worker_id", "worker_id is required (a string)");
    if (!er_name_ok(sp->worker_id.s, sp->worker_id.n))
        return er_name_validate(NULL, "worker_id", err);
    int64_t max = 1, wait = 0, lease = 0;
    if (er_spec_int_in(&sp->max, "max", 1, ER_FETCH_MAX, &max, err) < 0 ||
        er_spec_int_in(&sp->wait_ms, "wait_ms", 0, ER_WAIT_MAX_MS, &wait, err) < 0 ||
        er_spec_int_in(&sp->lease_ms, "lease_ms", ER_LEASE_MIN_MS, ER_LEASE_MAX_MS, &lease,
                       err) < 0)
        return ER_EINVAL;
    a->max = (int)max;
    a->wait_ms = wait;
    a->lease_ms = lease;
    if (!(a->queues = calloc(sp->nqueues, sizeof *a->queues)) ||
        !(a->worker_id = er_spec_str_dup(&sp->worker_id)))
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    for (size_t i = 0; i < sp->nqueues; i++) {
        if (!(a->queues[i] = er_spec_str_dup(&sp->queues[i])))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        a->nqueues = i + 1;
    }
    return 0;
}

int er_fetch_validate(const er_fetch_spec *spec, er_fetch_args *out, er_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = validate(spec, out, err);
    if (rc < 0)
        er_fetch_args_fini(out);
    return rc;
}

int64_t er_fetch_cap(const er_queue_state *q, int64_t now)
{
    if (q->paused || q->throttled_until > now)
        return 0;
    if (q->concurrency <= 0)
        return INT64_MAX;
    return q->active >= q->concurrency ? 0 : q->concurrency - q->active;
}

int64_t er_fetch_lease_ms(const er_queue_state *q, int64_t request_lease_ms)
{
    if (request_lease_ms > 0)
        return request_lease_ms;
    return q->lease_ms > 0 ? q->lease_ms : ER_DEFAULT_LEASE_MS;
}
