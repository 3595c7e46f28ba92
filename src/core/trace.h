/* SPDX-License-Identifier: MIT
 *
 * Trace context for the spans errand exports (engine/otlp.h) and the
 * traceparent HTTP dispatch sends. A job's trace_id is any id
 * (core/job.h); a W3C traceparent ("00-<32 hex trace>-<16 hex parent>-<2
 * hex flags>") given at enqueue is kept as the trace_id whole, so the
 * job's spans join that trace under that parent. A trace_id of 32 hex
 * digits is the trace itself; any other is hashed (SHA-256, first 16
 * bytes) to one, so equal ids share a trace. Each attempt's span id is
 * derived from the job id and the attempt number.
 */
#ifndef ER_CORE_TRACE_H
#define ER_CORE_TRACE_H

#include <stdbool.h>

#define ER_TRACEPARENT_LEN 55

/* Whether s is a version-00 traceparent with a nonzero trace and parent id
 * in lowercase hex (what an enqueue's traceparent header must be). */
bool er_traceparent_ok(const char *s);

/* The trace (32 lowercase hex digits) and parent span (16, or "" for none)
 * of a job's trace_id, as the header comment says. Returns true when the
 * trace_id named the trace (a traceparent or 32 hex digits, any case),
 * false when the trace was hashed from it. */
bool er_trace_of(const char *trace_id, char trace[33], char parent[17]);

/* The span id of attempt `attempt` of job `job_id`: 16 hex digits, never
 * all zero. */
void er_trace_span_id(const char *job_id, int attempt, char out[17]);

/* The traceparent of that attempt's span, "00-<trace>-<span id>-<flags>"
 * (flags from a traceparent trace_id, else 01), when the trace_id names
 * the trace; false (and nothing written) when the job has none or it is
 * hashed. */
bool er_trace_header(const char *trace_id, const char *job_id, int attempt, char out[64]);

#endif
