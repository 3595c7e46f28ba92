/* SPDX-License-Identifier: MIT
 *
 * OpenTelemetry span export over OTLP/HTTP with the JSON encoding: one
 * span per job attempt, from when the attempt became due to its outcome,
 * in the job's trace (core/trace.h). Spans are queued in memory (at most
 * ER_OTLP_QUEUE_MAX; past it they are dropped and counted) and sent in
 * batches by a thread of its own with blocking libcurl, so nothing waits
 * for the collector: a collector that is down loses spans, never jobs.
 */
#ifndef ER_ENGINE_OTLP_H
#define ER_ENGINE_OTLP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/ack.h"
#include "util/err.h"

#define ER_OTLP_QUEUE_MAX 4096 /* spans waiting to be sent */
#define ER_OTLP_BATCH_MAX 512  /* spans in one request */
#define ER_OTLP_FLUSH_MS 1000  /* the longest a span waits for its batch */
#define ER_OTLP_TIMEOUT_MS 5000 /* one request, connection included */

typedef struct er_otlp er_otlp;

typedef struct er_otlp_stats {
    uint64_t exported;     /* spans the collector accepted */
    uint64_t dropped_full; /* spans dropped because the queue was full */
    uint64_t dropped_failed; /* spans in requests that failed */
    uint64_t failures;     /* requests that failed */
} er_otlp_stats;

/* Starts the exporter thread for `endpoint` (http:// or https://; "/v1/traces"
 * is appended unless the URL ends with it). ER_EINVAL for another URL. */
int er_otlp_start(const char *endpoint, er_otlp **out, er_error *err);
/* Sends what is queued (for at most ER_OTLP_TIMEOUT_MS), stops the thread
 * and frees. NULL-safe. */
void er_otlp_stop(er_otlp *o);

/* Queues the span of one attempt of job `job_id` (what the store told of
 * it in *info) that ended at end_ms with `outcome` ("completed", "retried",
 * "dead", "lease_expired", ...); `error` marks the span's status. Any
 * thread; never blocks on the network. */
void er_otlp_attempt(er_otlp *o, const char *job_id, const er_ack_info *info, int64_t end_ms,
                     const char *outcome, bool error);

void er_otlp_get_stats(er_otlp *o, er_otlp_stats *out);

#endif
