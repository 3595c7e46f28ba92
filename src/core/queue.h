/* SPDX-License-Identifier: MIT
 *
 * Queue settings: parsing, validation and the field-by-field merge that
 * PUT /v1/queues/{queue} performs. Pure logic; the stores persist the
 * settings as the JSON text er_queue_settings_to_json produces.
 */
#ifndef ER_CORE_QUEUE_H
#define ER_CORE_QUEUE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/job.h"
#include "util/err.h"

#define ER_DEFAULT_LEASE_MS 60000
#define ER_DEFAULT_MAX_STALLED 3

typedef struct er_retention {
    /* completed jobs: delete when older than age_s (0 = no age limit) or
     * beyond the newest `count` (0 = no count limit). Both 0: keep. */
    int64_t completed_age_s;
    int64_t completed_count;
    /* dead jobs: delete when older than age_s; 0 = keep forever. */
    int64_t dead_age_s;
} er_retention;

typedef struct er_queue_settings {
    bool paused;
    int concurrency;        /* 0 = unlimited */
    int64_t rate_max;       /* 0 = no rate limit */
    int64_t rate_per_ms;
    int64_t lease_ms;       /* default lease for fetches that give none */
    int max_stalled;
    int max_started;
    er_job_defaults defaults;
    er_retention retention;
} er_queue_settings;

/* The settings of a queue nobody configured. */
void er_queue_settings_default(er_queue_settings *s);

/* Merges a PUT body into *s, field by field (absent fields keep their value).
 * Validates everything first: on error returns ER_EINVAL naming the field
 * and *s is unchanged. */
int er_queue_settings_merge(er_queue_settings *s, const json_t *body, er_error *err);

/* The settings as the JSON object API.md shows (new reference, NULL on ENOMEM). */
json_t *er_queue_settings_to_json(const er_queue_settings *s);

/* Parses what er_queue_settings_to_json produced (as stored); unknown or
 * missing fields keep defaults. Returns 0 or ER_EINVAL. */
int er_queue_settings_from_json(const json_t *obj, er_queue_settings *s, er_error *err);

#endif
