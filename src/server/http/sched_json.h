/* SPDX-License-Identifier: MIT
 *
 * The HTTP API's JSON shapes of a scheduler (API.md "Schedulers"): the PUT
 * body read from a jansson object into an er_sched_spec, and the scheduler
 * object GET, PUT and the list show. The rules are core's (er_sched_validate);
 * the text the stores keep is the store codec's (store/sched_codec.h), not
 * this shape.
 */
#ifndef ER_SERVER_HTTP_SCHED_JSON_H
#define ER_SERVER_HTTP_SCHED_JSON_H

#include <jansson.h>

#include "core/scheduler.h"
#include "server/http/server.h"
#include "store/store.h"
#include "util/err.h"

/* Upcoming runs a scheduler object shows. */
#define ER_HTTP_SCHED_NEXT_RUNS 5

/* Fills *spec from a PUT body. Slices point into obj (borrowed: it must
 * outlive the spec); the payload is serialized into spec->payload_buf (free
 * with er_sched_spec_fini). A null job option is kept (ER_SPEC_NULL), a null
 * top-level member is absent. Returns 0, ER_EINVAL (not an object; field
 * "body") or ER_ENOMEM, the spec then holding nothing. */
int er_http_sched_spec_from_json(const json_t *obj, er_sched_spec *spec, er_error *err);

/* {"cron", "tz", "queue", "name", "payload", "missed", "max_catchup",
 * "job"?, "key", "created_at", "updated_at", "last_tick", "next_run_at",
 * "next_runs": [local times in the zone]}, as the caller `who` may see it
 * (er_http_role_sees_payloads): else "payload" is null and the object has
 * "redacted": ["payload"]. row, sc: borrowed; sc->tz must be set. Returns
 * a new reference, or NULL on ENOMEM. */
json_t *er_http_sched_to_json(const er_sched_row *row, const er_scheduler *sc, er_role who);

#endif
