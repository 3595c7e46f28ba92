/* SPDX-License-Identifier: MIT
 *
 * The HTTP API's JSON shapes of a worker's requests: fetch, outcomes
 * (complete, fail, release; one at a time or as an "acks" array) and
 * heartbeats, read into core's specs (core/fetch.h, core/ack.h), which core
 * validates. Only the shapes live here: which members an object may hold
 * and where each value sits.
 */
#ifndef ER_SERVER_HTTP_WORK_JSON_H
#define ER_SERVER_HTTP_WORK_JSON_H

#include <jansson.h>

#include "core/ack.h"
#include "core/fetch.h"

/* Reads a fetch body's values (the caller checked its members). *queues
 * returns the owned array spec->queues points into (free()). Strings are
 * borrowed from obj. Returns 0 or ER_ENOMEM. */
int er_http_fetch_spec(const json_t *obj, er_fetch_spec *spec, er_spec_str **queues,
                       er_error *err);

/* Reads an "error" member value (NULL: absent) into *spec. Strings are
 * borrowed from v; the backtrace is serialized into *backtrace (owned,
 * free()). Returns 0 or ER_ENOMEM. */
int er_http_failure_spec(const json_t *v, er_failure_spec *spec, char **backtrace,
                         er_error *err);

/* Reads one item of an "acks" array ({"id", "lease_token", "complete":
 * {"result"} | "fail": {"error"} | "release": {}}) into *spec. *text
 * returns the owned serialized result or backtrace (free()). Returns 0,
 * ER_EINVAL (not an object, or an unknown member; fields relative to the
 * item) or ER_ENOMEM. */
int er_http_ack_item_spec(const json_t *item, er_ack_spec *spec, char **text, er_error *err);

/* Serializes any JSON value compactly into *out (owned; NULL on ENOMEM) and
 * describes it in *spec. */
int er_http_json_text(const json_t *v, er_spec_str *spec, char **out, er_error *err);

#endif
