/* SPDX-License-Identifier: MIT
 *
 * What the outbox relay turns an event into (docs/outbox.md): the routes
 * (topic -> queue and job name), the deterministic job id of an event on
 * one route, and the job itself, judged by er_job_validate like every
 * other enqueue. Pure logic: the relay (engine/outbox_relay.c) reads the
 * file and the rows.
 */
#ifndef ER_CORE_OUTBOX_H
#define ER_CORE_OUTBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "core/job_spec.h"
#include "util/clock.h"
#include "util/err.h"

#define ER_OUTBOX_TOPIC_MAX 200  /* bytes of a routed topic */
#define ER_OUTBOX_ROUTES_MAX 64  /* routes of one topic */
#define ER_OUTBOX_TOPICS_MAX 4096
/* "outbox:" + a uuid (36) + ":" + 16 hex digits */
#define ER_OUTBOX_JOB_ID_LEN 60

typedef struct er_outbox_route {
    char *queue;
    char *name;
} er_outbox_route;

typedef struct er_outbox_topic {
    char *topic;
    er_outbox_route *routes;
    size_t nroutes;
} er_outbox_topic;

typedef struct er_outbox_routes {
    er_outbox_topic *topics; /* sorted by topic */
    size_t ntopics;
} er_outbox_routes;

/* Reads a routes file's text: {"topic": [{"queue": Q, "name": N}, ...], ...}.
 * Each topic is 1..ER_OUTBOX_TOPIC_MAX printable ASCII bytes and has
 * 1..ER_OUTBOX_ROUTES_MAX routes; queue and name follow the name rule; a
 * route has no other member and no topic lists one route twice. Returns 0,
 * or ER_EINVAL with a message that starts "line N: " where it can point to
 * a line, or ER_ENOMEM. *out holds nothing on failure. */
int er_outbox_routes_parse(const char *text, size_t len, er_outbox_routes *out, er_error *err);
void er_outbox_routes_fini(er_outbox_routes *r);
/* The routes of `topic`, or NULL. */
const er_outbox_topic *er_outbox_routes_find(const er_outbox_routes *r, const char *topic);

/* "outbox:{event_id}:{h}", h the first 16 hex digits of SHA-256 of
 * queue "\n" name, into out[ER_OUTBOX_JOB_ID_LEN + 1]. event_id must be a
 * 36-character uuid text (ER_EINVAL otherwise). */
int er_outbox_job_id(const char *event_id, const char *queue, const char *name,
                     char out[ER_OUTBOX_JOB_ID_LEN + 1], er_error *err);

/* One outbox row, as the relay read it. */
typedef struct er_outbox_event {
    const char *id;              /* uuid text */
    const char *topic;
    const char *payload;         /* JSON text of the payload column */
    bool payload_is_object;
    const char *idempotency_key; /* NULL when none */
    const char *trace_id;        /* NULL when none */
} er_outbox_event;

/* Whether a row's failure to become a job can change on a later try:
 * a payload that is not an object cannot (the relay sets the row aside at
 * once); the relay retries the rest with backoff. */
typedef enum er_outbox_failure {
    ER_OUTBOX_RETRY = 0,
    ER_OUTBOX_SET_ASIDE = 1,
} er_outbox_failure;

/* The job of `ev` on route `rt`: id er_outbox_job_id, the envelope
 * {"event_id","topic","trace_id","payload"} as payload, idempotency key the
 * row's or else the event id, the row's trace id. Judged by er_job_validate
 * with lim. On failure *err names the problem and *why says whether to
 * retry. */
int er_outbox_job(const er_outbox_event *ev, const er_outbox_route *rt, const er_job_limits *lim,
                  int64_t now, er_rand *r, er_job *job, er_outbox_failure *why, er_error *err);

/* When a row that failed `attempts` times (>= 1) is tried again: 1 s
 * doubling to 5 min. */
int64_t er_outbox_retry_delay_ms(int attempts);
/* Tries before a retryable row is set aside. */
#define ER_OUTBOX_MAX_ATTEMPTS 8

#endif
