/* SPDX-License-Identifier: MIT
 *
 * How the stores keep a job's last error: one JSON text per job (the
 * jobs.last_error column of both stores), which the HTTP API shows as it is.
 * Owned here, apart from the API, so either may change without the other.
 *
 * Format version 1 (ER_LAST_ERROR_CODEC_VERSION): {"class","message",
 * "attempt","at"} plus "delay_ms" (retry_later), "retry_after_ms"
 * (throttled), "errtype", "backtrace" and "reason" when given; a stall that kills a job writes
 * {"class":"stalled","message","attempt","stalled","at"}. Compact, in that
 * order, as every release so far has written it. To change it: add members
 * (readers ignore unknown ones) or write "v": N, bump the constant, and keep
 * the API's view of older texts the same.
 */
#ifndef ER_STORE_ERROR_CODEC_H
#define ER_STORE_ERROR_CODEC_H

#include <stdint.h>

#include "core/job.h"

#define ER_LAST_ERROR_CODEC_VERSION 1

/* The last_error text of a failure reported for `attempt` at `now`, with
 * "reason" (er_fail_outcome.reason) when not NULL; returns owned text
 * (free()) or NULL on ENOMEM. */
char *er_last_error_encode(const er_failure *f, int attempt, const char *reason, int64_t now);

/* The last_error text of a job the reaper sends to the dead letters
 * (stalled too often); owned text or NULL on ENOMEM. */
char *er_last_error_encode_stalled(const er_job *job, int64_t now);

#endif
