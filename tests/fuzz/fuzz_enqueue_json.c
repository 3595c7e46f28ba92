/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for the enqueue and failure request decoders: bytes go
 * through json_loadb (as the HTTP frontend calls it) and then
 * er_job_from_json, er_failure_from_json and, for a {"jobs":[...]} body,
 * every item. Checks the contracts the frontend relies on: a rejected
 * request names an error code and leaves the job empty; an accepted job is
 * complete and serializes.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "util/clock.h"
#include "util/err.h"

#define T0 1764460800000LL /* 2025-11-30T00:00:00Z */

static void check_job(const json_t *obj, er_rand *r)
{
    er_job job;
    er_job_init(&job);
    er_error err = {0};
    int rc = er_job_from_json(obj, "fuzz", T0, 4096, r, &job, &err);
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
    json_t *out = er_job_to_json(&job);
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
    er_error err = {0};
    if (er_failure_from_json(obj, &f, &err) < 0) {
        if (f.message || f.backtrace)
            abort();
        return;
    }
    char *text = er_failure_to_json_text(&f, 1, T0);
    free(text);
    er_failure_fini(&f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
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
