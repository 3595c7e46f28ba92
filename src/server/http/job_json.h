/* SPDX-License-Identifier: MIT
 *
 * The HTTP API's JSON shapes of a job: reading an enqueue request into an
 * er_job_spec (from a jansson object, or straight from the body text for
 * the common request), and writing a job and its lease view. The rules a
 * request must follow are core's (er_job_validate); this module only reads
 * and writes.
 */
#ifndef ER_SERVER_HTTP_JOB_JSON_H
#define ER_SERVER_HTTP_JOB_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/job_spec.h"
#include "server/http/server.h"
#include "util/jsonw.h"

/* Fills *spec from one request object. The spec's slices point into obj
 * and queue (borrowed: both must outlive the spec); the payload is
 * serialized into spec->payload_buf (free with er_job_spec_fini unless
 * er_job_validate took it). Returns 0, ER_EINVAL (not an object; field
 * `job`) or ER_ENOMEM. */
int er_http_job_spec_from_json(const json_t *obj, const char *queue, er_job_spec *spec,
                               er_error *err);

/* Reads the job options of obj (priority, max_attempts, backoff, timeout_ms,
 * group, trace_id) into *spec, slices borrowed from obj; a member (or
 * backoff member) given as null gets kind on_null: ER_SPEC_ABSENT in an
 * enqueue, ER_SPEC_NULL where null is kept as given (a scheduler's "job"). */
void er_http_job_options_from_json(const json_t *obj, er_spec_kind on_null, er_job_spec *spec);

/* er_http_job_spec_from_json and er_job_validate: the job of one request object. */
int er_http_job_from_json(const json_t *obj, const char *queue, const er_job_limits *lim,
                          int64_t now, er_rand *r, er_job *job, er_error *err);

/* Fills *spec from the body text (text[0..len), borrowed until the spec is
 * validated; no NUL needed) for the common request, exactly as json_loadb
 * (JSON_REJECT_DUPLICATES) and er_http_job_spec_from_json would. Returns false, the
 * spec empty, for anything it is not sure of (escapes, non-ASCII, reals,
 * long integers, backoff, run_at, unknown or repeated fields, bad syntax):
 * the caller then takes the jansson path. */
bool er_http_job_spec_from_text(const char *text, size_t len, const char *queue,
                                er_job_spec *spec);

/* The same for a bulk body, {"jobs":[request, ...]} with 1..max requests
 * and no other member: *out (returns owned, free with
 * er_http_job_specs_free) gets *n specs in request order, borrowing the
 * text like er_http_job_spec_from_text's. Returns false, *out NULL, when
 * any part needs the jansson path, which then judges the whole body. */
bool er_http_job_specs_from_text(const char *text, size_t len, const char *queue, size_t max,
                                 er_job_spec **out, size_t *n);
void er_http_job_specs_free(er_job_spec *specs, size_t n);

/* A time as the API shows it in a jansson reply: RFC 3339 UTC, or null
 * when unset (<= 0) or never (INT64_MAX). New reference; NULL on ENOMEM. */
json_t *er_http_time_json(int64_t ms);

/* Whether a caller of this role is shown what jobs carry (payload,
 * result; a scheduler's payload): every role but the viewer. The one rule
 * every writer of a job or a payload follows. */
bool er_http_role_sees_payloads(er_role role);

/* The job object API.md shows (times as RFC 3339), as the caller `who`
 * (c->caller.role) may see it: for a role that does not see payloads,
 * "payload" and "result" are null and the object ends with
 * "redacted": ["payload", "result"]; otherwise there is no "redacted". */
void er_http_job_write_json(const er_job *job, er_role who, er_jsonw *w);
/* The lease view a fetch returns: id, queue, name, payload, attempt,
 * max_attempts, started, lease_token, lease_expires_at, idempotency_key,
 * trace_id, group, priority, timeout_ms, created_at. Worker routes only
 * (a viewer cannot fetch), so never redacted. */
void er_http_job_write_lease_json(const er_job *job, er_jsonw *w);
/* A tombstone as an enqueue reply shows it: {"id" (only when id is not
 * NULL), "queue", "state", "finished_at"}. */
void er_http_tombstone_write_json(const char *id, const char *queue, er_state state,
                                  int64_t finished_at, er_jsonw *w);
/* er_http_job_write_json as a jansson object (new reference; NULL on ENOMEM). */
json_t *er_http_job_to_json(const er_job *job, er_role who);

#endif
