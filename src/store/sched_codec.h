/* SPDX-License-Identifier: MIT
 *
 * The text a store keeps for a scheduler's spec (schedulers.spec): the
 * encoding of a validated er_scheduler and its decoding. It is the storage
 * format, owned here and not by the HTTP API, so the API's JSON can change
 * without a data migration. Equal specs encode to equal text: the engine
 * compares the stored text with a new one to tell an unchanged PUT (which
 * keeps the pending ticks) from a changed one.
 */
#ifndef ER_STORE_SCHED_CODEC_H
#define ER_STORE_SCHED_CODEC_H

#include "core/scheduler.h"
#include "util/err.h"

/* The format of the text, version 1: a JSON object, compact, keys sorted
 * (at every depth), every default spelled out:
 *   {"cron","job"?,"max_catchup","missed","name","payload","queue","tz"}
 * "job" holds the job options as given (members given as null stay null;
 * jitter keeps its integer or real form). Version 1 carries no version
 * member: it is what every release so far has written.
 * To change the format:
 *  1. bump this constant and write it in the new text as "v": N;
 *  2. keep decoding every earlier version (no "v" = 1): rows are never
 *     rewritten, so a store holds whatever any release wrote;
 *  3. keep the tests of tests/store/test_sched_codec.c for the old versions
 *     and add the new one's;
 *  4. an old row's text then differs from a new encoding of the same spec:
 *     make the engine compare decoded specs (put_scheduler), or the first
 *     unchanged PUT after the upgrade resets the schedule's pending ticks. */
#define ER_SCHED_CODEC_VERSION 1

/* Encodes s (validated: er_sched_validate or er_sched_codec_decode; its zone
 * need not be attached). On success *out = owned text (free()) and returns
 * 0; ER_ENOMEM otherwise (*out NULL). Thread-safe. */
int er_sched_codec_encode(const er_scheduler *s, char **out, er_error *err);

/* Decodes stored text of any version into *out, validated as a PUT would be
 * (without the payload limit) and with out->tz NULL (attach the zone with
 * er_scheduler_set_zone). text: borrowed. Returns 0; ER_EINTERNAL (field
 * "spec") for text that is not a JSON object; a validation error of
 * er_sched_validate (e.g. ER_EINVAL); or ER_ENOMEM. On failure *out holds
 * nothing. Thread-safe. */
int er_sched_codec_decode(const char *text, er_scheduler *out, er_error *err);

#endif
