/* SPDX-License-Identifier: MIT
 *
 * How the stores keep a queue's settings: one JSON text per queue (the
 * queues.settings column of both stores; PostgreSQL's errand.enqueue_job
 * reads its "defaults" member). This is the stored format, owned here and
 * separate from the HTTP API's shape (src/server/http/queue_json.c), so
 * either can change without the other.
 *
 * Format version 1: the text releases up to 0.1 stored, byte for byte:
 * {"paused","concurrency","rate_limit","lease_ms","max_stalled",
 * "max_started","defaults","retention"} in that order, compact; it has no
 * "v". Version 2 (ER_SETTINGS_CODEC_VERSION): {"v":2} then the same
 * members, then "dispatch": null or {"url","method","headers" (the real
 * values: the store must keep them to send them),"timeout_ms","trusted",
 * "follow_redirects"}, then "throttle_max_ms" (added before version 2
 * was released; a version 2 text without it has the default). Version 3
 * adds "rate_limit"."burst" (absent: 1), then "fairness", "group_limits"
 * and "aging" (er_settings_policy_json; absent: off). To change it: keep decoding every earlier version (a
 * text without "v" is version 1), write "v": N in the new one, bump the
 * constant, and add a test that decodes text of the previous version
 * (tests/unit/test_queue.c holds version 1's).
 */
#ifndef ER_STORE_SETTINGS_CODEC_H
#define ER_STORE_SETTINGS_CODEC_H

#include <jansson.h>
#include <stdbool.h>

#include "core/queue.h"
#include "util/err.h"

#define ER_SETTINGS_CODEC_VERSION 3

/* A dispatch target as a JSON object (null when off), the same members in
 * the stored text and in the HTTP API's settings: with hide_values every
 * header value is ER_DISPATCH_HIDDEN (the API's view). New reference, NULL
 * on ENOMEM. */
json_t *er_settings_dispatch_json(const er_dispatch *d, bool hide_values);

/* Reads a dispatch object's "headers" member h (NULL: absent; null or
 * another type: ER_SPEC_BAD_TYPE) into d->headers_obj and d->headers (names
 * and values borrowed from h; a value that is not a string, or holds NUL,
 * is ER_SPEC_BAD_TYPE). */
void er_settings_dispatch_headers(const json_t *h, er_dispatch_spec *d);

/* Notes in out->unknown the first member of object o not in known (a
 * NULL-terminated list). */
void er_settings_first_unknown(const json_t *o, const char *const *known, er_spec_obj *out);

/* Reads the fetch policy's members of a settings object o ("rate_limit",
 * "fairness", "group_limits", "aging") into p, the first unknown member of
 * each noted: the same reading for a PUT body and for a stored text. */
void er_settings_read_policy(const json_t *o, er_queue_patch *p);

/* Sets those members of o from *s (each null when off): the stored text's
 * and the API's shape. 0, or -1 on ENOMEM. */
int er_settings_policy_json(const er_queue_settings *s, json_t *o);

/* The stored text of *s: returns owned text (free()) or NULL on ENOMEM. */
char *er_settings_encode(const er_queue_settings *s);

/* Reads a stored text (NULL: never set, the defaults) into *out: members it
 * does not know are ignored (a newer server may have written them); a value
 * that breaks its rule is ER_EINVAL naming it, *out unchanged. */
int er_settings_decode(const char *text, er_queue_settings *out, er_error *err);

/* er_settings_decode for a stored row whose paused flag lives in its own
 * column: a text that does not decode is the store's fault (ER_EINTERNAL,
 * "store: stored queue settings: ..."). */
int er_settings_decode_row(const char *text, bool paused, er_queue_settings *out, er_error *err);

#endif
