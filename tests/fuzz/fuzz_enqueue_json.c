/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for the enqueue and failure request decoders: bytes go
 * through json_loadb (as the HTTP frontend calls it) and then the job
 * reader and er_job_validate, er_failure_validate and, for a
 * {"jobs":[...]} body, every item. Checks the contracts the frontend relies
 * on: a rejected request names an error code and leaves the job empty; an
 * accepted job is complete and serializes; what the plain-text fast
 * readers read (one request, or a bulk body's items) gets the JSON path's
 * verdict (the same error or the same job).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "store/error_codec.h"
#include "server/http/job_json.h"
#include "server/http/work_json.h"
#include "util/clock.h"
#include "util/err.h"

#define T0 1764460800000LL /* 2025-11-30T00:00:00Z */

static void check_job(const json_t *obj, er_rand *r)
{
    er_job job;
    er_job_init(&job);
    er_error err = {0};
    er_job_limits lim = {.payload_max = 4096};
    int rc = er_http_job_from_json(obj, "fuzz", &lim, T0, r, &job, &err);
    if (rc < 0) {
        /* Nothing may be left behind, and the error must be a real code. */
        if (err.code != rc || (rc != ER_EINVAL && rc != ER_ETOOBIG && rc != ER_ENOMEM))
            abort();
        if (job.id || job.payload || job.name || job.queue)
            abort();
        return;
    }
    if (!job.id || !job.queue || !job.payload || !job.idempotency_key || strcmp(job.queue, "fuzz"))
        abort();
    if (job.priority < 0 || job.priority > ER_PRIORITY_MAX)
        abort();
    if (job.state != ER_STATE_SCHEDULED && job.state != ER_STATE_WAITING)
        abort();
    json_t *out = er_http_job_to_json(&job, ER_ROLE_ADMIN);
    if (out) {
        char *text = json_dumps(out, JSON_COMPACT);
        free(text);
        json_decref(out);
    }
    er_job_fini(&job);
}

static void check_failure(const json_t *obj)
{
    er_failure f;
    memset(&f, 0, sizeof f);
    er_error err = {0};
    er_failure_spec sp;
    char *bt = NULL;
    int rc = er_http_failure_spec(obj, &sp, &bt, &err);
    if (rc == 0)
        rc = er_failure_validate(&sp, &f, &err);
    free(bt);
    if (rc < 0) {
        if (f.message || f.backtrace || err.code != rc)
            abort();
        return;
    }
    char *text = er_last_error_encode(&f, 1, NULL, T0);
    free(text);
    er_failure_fini(&f);
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* The fast reader's verdict on a spec must be the JSON path's on obj: the
 * same error, or the same job. Both draw from generators seeded alike. */
static void check_same(er_job_spec *sp, const json_t *obj, er_rand *rf, er_rand *rs)
{
    er_job_limits lim = {.payload_max = 4096};
    er_job fast, slow;
    er_error fe = {0}, se = {0};
    int frc = er_job_validate(sp, &lim, T0, rf, &fast, &fe);
    if (!json_is_object(obj))
        abort();
    int src = er_http_job_from_json(obj, "fuzz", &lim, T0, rs, &slow, &se);
    if (frc != src)
        abort();
    if (frc < 0) {
        if (strcmp(fe.field, se.field) != 0 || strcmp(fe.message, se.message) != 0)
            abort();
        return;
    }
    if (!same_str(fast.id, slow.id) || !same_str(fast.name, slow.name) ||
        !same_str(fast.payload, slow.payload) || fast.payload_len != slow.payload_len ||
        !same_str(fast.group, slow.group) || !same_str(fast.trace_id, slow.trace_id) ||
        !same_str(fast.idempotency_key, slow.idempotency_key) || fast.priority != slow.priority ||
        fast.run_at != slow.run_at || fast.state != slow.state ||
        fast.max_attempts != slow.max_attempts || fast.timeout_ms != slow.timeout_ms ||
        fast.set_priority != slow.set_priority || fast.set_timeout != slow.set_timeout ||
        fast.set_max_attempts != slow.set_max_attempts || fast.set_backoff != slow.set_backoff)
        abort();
    er_job_fini(&fast);
    er_job_fini(&slow);
}

/* What the frontend's fast readers read must get the JSON path's verdict:
 * for one request, and for each item of a bulk body (which must then be
 * {"jobs": [...]} with as many items for jansson too). */
static void check_fast(const uint8_t *data, size_t size, const json_t *root)
{
    er_rand rf, rs;
    er_job_spec sp;
    if (er_http_job_spec_from_text((const char *)data, size, "fuzz", &sp)) {
        er_rand_init_seeded(&rf, 42);
        er_rand_init_seeded(&rs, 42);
        check_same(&sp, root, &rf, &rs);
        er_job_spec_fini(&sp);
    }
    er_job_spec *specs;
    size_t n;
    if (!er_http_job_specs_from_text((const char *)data, size, "fuzz", 64, &specs, &n))
        return;
    const json_t *jobs = json_object_get(root, "jobs");
    if (!json_is_object(root) || json_object_size(root) != 1 || !json_is_array(jobs) ||
        json_array_size(jobs) != n)
        abort();
    er_rand_init_seeded(&rf, 42);
    er_rand_init_seeded(&rs, 42);
    for (size_t i = 0; i < n; i++)
        check_same(&specs[i], json_array_get(jobs, i), &rf, &rs);
    er_http_job_specs_free(specs, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    check_fast(data, size, root);
    if (!root)
        return 0;
    er_rand r;
    er_rand_init_seeded(&r, 42);
    if (json_is_object(root)) {
        json_t *jobs = json_object_get(root, "jobs");
        if (json_is_array(jobs)) {
            size_t i;
            json_t *item;
            json_array_foreach(jobs, i, item)
            {
                if (json_is_object(item))
                    check_job(item, &r);
            }
        } else {
            check_job(root, &r);
        }
        json_t *e = json_object_get(root, "error");
        check_failure(json_is_object(e) ? e : root);
    }
    json_decref(root);
    return 0;
}
