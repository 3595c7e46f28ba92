/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for scheduler specs (PUT /v1/schedulers/{key}): the HTTP
 * frontend's reader and er_sched_validate without opening the zone, then
 * the store codec. A refused spec gives a real error code and holds
 * nothing; an accepted spec's stored text decodes to a scheduler that
 * encodes to the same text, and makes the same tick job.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/scheduler.h"
#include "server/http/sched_json.h"
#include "store/sched_codec.h"
#include "util/err.h"

#define PAYLOAD_MAX 4096

/* The payload of s's tick job at a fixed instant (owned), or abort(). */
static char *tick_payload(const er_scheduler *s)
{
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_job j;
    er_error err = {0};
    if (er_scheduler_job(s, "fuzz", 1796007600000LL, 1796007600000LL, &r, &j, &err) < 0)
        abort(); /* validation accepted the options a tick uses */
    char *p = j.payload;
    j.payload = NULL;
    er_job_fini(&j);
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!body)
        return 0;
    er_sched_spec spec;
    er_scheduler s;
    er_error err = {0};
    er_scheduler_init(&s);
    int rc = er_http_sched_spec_from_json(body, &spec, &err);
    if (rc == 0)
        rc = er_sched_validate(&spec, PAYLOAD_MAX, &s, &err);
    er_sched_spec_fini(&spec);
    json_decref(body);
    if (rc < 0) {
        if (err.code != rc || (rc != ER_EINVAL && rc != ER_ETOOBIG && rc != ER_ENOMEM))
            abort();
        if (s.cron_text || s.tz_name || s.queue || s.name || s.payload || s.opts_text ||
            s.has_job || s.tz)
            abort();
        return 0;
    }
    if (!s.cron_text || !s.tz_name || !s.queue || !s.name || !s.payload || s.tz)
        abort();
    /* NULL here means out of memory, which a fuzz run does not reach. */
    char *text = NULL, *text2 = NULL;
    er_scheduler s2;
    if (er_sched_codec_encode(&s, &text, &err) < 0 || er_sched_codec_decode(text, &s2, &err) < 0 ||
        er_sched_codec_encode(&s2, &text2, &err) < 0 || strcmp(text, text2) != 0)
        abort();
    char *p1 = tick_payload(&s), *p2 = tick_payload(&s2);
    json_t *j1 = json_loads(p1, 0, NULL), *j2 = json_loads(p2, 0, NULL);
    if (!json_equal(j1, j2)) /* member order may differ: s2's is sorted */
        abort();
    json_decref(j1);
    json_decref(j2);
    free(p1);
    free(p2);
    free(text2);
    free(text);
    er_scheduler_fini(&s2);
    er_scheduler_fini(&s);
    return 0;
}
