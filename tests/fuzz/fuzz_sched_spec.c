/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for scheduler specs (PUT /v1/schedulers/{key}):
 * er_scheduler_from_json without opening the zone, then
 * er_scheduler_spec_text. A refused spec gives a real error code and holds
 * nothing; an accepted spec's canonical text parses again to the same
 * canonical text.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/scheduler.h"
#include "util/err.h"

#define PAYLOAD_MAX 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *spec = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!spec)
        return 0;
    er_scheduler s;
    er_error err = {0};
    int rc = er_scheduler_from_json(spec, PAYLOAD_MAX, &s, &err);
    json_decref(spec);
    if (rc < 0) {
        if (err.code != rc || (rc != ER_EINVAL && rc != ER_ETOOBIG && rc != ER_ENOMEM))
            abort();
        if (s.cron_text || s.tz_name || s.queue || s.name || s.payload || s.job || s.tz)
            abort();
        return 0;
    }
    if (!s.cron_text || !s.tz_name || !s.queue || !s.name || !json_is_object(s.payload) || s.tz)
        abort();
    /* NULL here means out of memory, which a fuzz run does not reach. */
    char *text = er_scheduler_spec_text(&s);
    json_t *again = text ? json_loads(text, JSON_REJECT_DUPLICATES, &je) : NULL;
    er_scheduler s2;
    if (!again || er_scheduler_from_json(again, PAYLOAD_MAX, &s2, &err) < 0)
        abort();
    char *text2 = er_scheduler_spec_text(&s2);
    if (!text2 || strcmp(text, text2) != 0)
        abort();
    free(text2);
    er_scheduler_fini(&s2);
    json_decref(again);
    free(text);
    er_scheduler_fini(&s);
    return 0;
}
