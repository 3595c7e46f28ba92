/* SPDX-License-Identifier: MIT
 *
 * One member value of a request body read into a core spec slot, the same
 * way for every body the HTTP API reads (jobs, schedulers, queue settings,
 * worker requests): a member that is absent (v NULL) leaves the slot
 * ER_SPEC_ABSENT; null gives on_null (ER_SPEC_ABSENT where null means "not
 * given", ER_SPEC_NULL where null clears or is kept as given); any other
 * type, or a string holding NUL (it would silently shorten), is
 * ER_SPEC_BAD_TYPE. Strings are borrowed from v. Core judges the values.
 */
#ifndef ER_SERVER_HTTP_SPEC_JSON_H
#define ER_SERVER_HTTP_SPEC_JSON_H

#include <jansson.h>
#include <stdbool.h>

#include "core/job_spec.h"
#include "core/queue.h"

void er_http_spec_str(const json_t *v, er_spec_kind on_null, er_spec_str *out);
void er_http_spec_int(const json_t *v, er_spec_kind on_null, er_spec_int *out);
void er_http_spec_num(const json_t *v, er_spec_kind on_null, er_spec_num *out);
void er_http_spec_bool(const json_t *v, er_spec_kind on_null, er_spec_bool *out);

/* A backoff object; its members get on_null too. */
void er_http_spec_backoff(const json_t *v, er_spec_kind on_null, er_backoff_spec *out);

/* *out = obj's first member for which known() is false (a slice of obj's
 * key, borrowed); untouched when every member is known. */
void er_http_first_unknown(const json_t *obj, bool (*known)(const char *, size_t),
                           er_spec_str *out);

#endif
