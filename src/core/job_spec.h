/* SPDX-License-Identifier: MIT
 *
 * What a valid job is: the enqueue request as plain values (er_job_spec),
 * its one validator (er_job_validate), and how queue and server defaults
 * fill what a request left unset. Every frontend (the HTTP API's JSON and
 * fast readers, the Faktory protocol, the outbox relay, dispatch) only fills
 * a spec; the rules and their error messages live here, and PL/pgSQL's
 * errand.enqueue_job is pinned to them by a shared corpus
 * (tests/store/enqueue_corpus.jsonl). Pure logic: no JSON parser, no I/O;
 * the time and randomness are arguments.
 */
#ifndef ER_CORE_JOB_SPEC_H
#define ER_CORE_JOB_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "util/clock.h"
#include "util/err.h"

/* What a frontend found for one field. In a job a null value counts as
 * absent (the API's "null means not given"), except a payload, which may be
 * null; where null means something else (a queue setting it clears) the
 * frontend says ER_SPEC_NULL. */
typedef enum er_spec_kind {
    ER_SPEC_ABSENT = 0,
    ER_SPEC_SET = 1,
    ER_SPEC_BAD_TYPE = 2, /* present with the wrong type (or a string holding NUL) */
    ER_SPEC_NULL = 3,     /* present and null, where null is not "absent" */
} er_spec_kind;

/* A text value: borrowed bytes s[0..n), not NUL-terminated. */
typedef struct er_spec_str {
    er_spec_kind kind;
    const char *s;
    size_t n;
} er_spec_str;

/* An integer value. A number that is not an integer (1.5, 1e2 as a real)
 * is ER_SPEC_BAD_TYPE. */
typedef struct er_spec_int {
    er_spec_kind kind;
    int64_t v;
} er_spec_int;

/* A number (integer or real). */
typedef struct er_spec_num {
    er_spec_kind kind;
    double v;
} er_spec_num;

/* The check every frontend's integer option gets: 1 and *out when set,
 * 0 when absent or null, ER_EINVAL naming field when of another type or
 * outside lo..hi ("<field> must be an integer lo..hi"; ">= lo" when hi is
 * INT_MAX or INT64_MAX, i.e. unbounded). */
int er_spec_int_in(const er_spec_int *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                   er_error *err);

/* A NUL-terminated copy of v's bytes (malloc; NULL on ENOMEM). */
char *er_spec_str_dup(const er_spec_str *v);

/* The backoff object of a request; kind ER_SPEC_BAD_TYPE when it is not an
 * object. `unknown` is its first member that is not one of these. */
typedef struct er_backoff_spec {
    er_spec_kind kind;
    er_spec_str unknown;
    er_spec_str type;
    er_spec_int delay_ms, max_delay_ms;
    er_spec_num jitter;
} er_backoff_spec;

/* One enqueue request (API.md, POST /v1/queues/{queue}/jobs), as read. */
typedef struct er_job_spec {
    er_spec_str unknown;  /* the first field that is not one of these */
    er_spec_str queue;    /* HTTP: the path; other frontends: the request */
    er_spec_str name;
    er_spec_str payload;  /* the payload serialized as compact JSON text */
    er_spec_str id;
    er_spec_int priority;
    er_spec_int delay_ms;
    er_spec_str run_at;   /* RFC 3339 text */
    er_spec_int max_attempts;
    er_backoff_spec backoff;
    er_spec_int timeout_ms;
    er_spec_str group;
    er_spec_str trace_id;
    er_spec_str idempotency_key;
    /* A Faktory job's custom object as compact JSON text (the HTTP API has
     * no such field): kept with the job, at most ER_CUSTOM_MAX bytes. */
    er_spec_str custom;
    /* Set by the Faktory frontend: with no backoff given the job gets
     * Faktory's retry schedule (ER_BACKOFF_FAKTORY, capped at
     * ER_DELAY_MAX_MS) instead of the queue's or the server's backoff. */
    bool faktory;
    /* Set by the Faktory frontend for retry 0: the job's `discard`. */
    bool discard;
    /* Optional, owned by the spec's filler: the heap buffer payload.s points
     * to; er_job_validate takes it (sets it NULL) instead of copying. */
    char *payload_buf;
} er_job_spec;

/* Limits that are settings of the server (the others are ER_* constants). */
typedef struct er_job_limits {
    size_t payload_max; /* bytes of the serialized payload */
} er_job_limits;

/* The field names of an enqueue request, in the order er_job_validate
 * checks them ("queue" first); NULL-terminated. Frontends use it to find
 * unknown fields. */
extern const char *const er_job_spec_fields[];
/* Whether s[0..n) names a field of the request body (not "queue"). */
bool er_job_spec_field_known(const char *s, size_t n);
/* The same for a member of the backoff object. */
bool er_backoff_spec_field_known(const char *s, size_t n);

/* Checks a backoff object read into *b, naming fields "<field>.<member>":
 * its type, an unknown member, each member's rule, max_delay_ms >= delay_ms
 * when both are given. Fills *vals with the given members and *given with
 * ER_BACKOFF_GIVEN_* bits. Returns 0 or ER_EINVAL. */
int er_backoff_spec_check(const er_backoff_spec *b, const char *field, er_backoff *vals,
                          unsigned *given, er_error *err);
/* The given members of vals over base; when max_delay_ms was not given and
 * the delay passes base's cap, the cap rises to the delay. */
er_backoff er_backoff_merge(const er_backoff *base, const er_backoff *vals, unsigned given);

/* Frees spec->payload_buf (when the spec was not validated). NULL-safe. */
void er_job_spec_fini(er_job_spec *spec);

/* Validates a request and builds its job: state scheduled or waiting by
 * run_at against now, created_at = updated_at = now, id generated with r
 * when absent, idempotency_key = id when absent, unset options holding the
 * server's values (er_job_apply_defaults fills them later). Checks, in this
 * order: unknown field, queue, name, payload size, id, priority, delay_ms and
 * run_at, max_attempts, backoff (unknown member, type, delay_ms,
 * max_delay_ms, jitter, max >= delay when both are given), timeout_ms,
 * group, trace_id, idempotency_key. On success fills *job (owned strings;
 * spec->payload_buf is taken) and returns 0. On failure returns ER_EINVAL,
 * ER_ETOOBIG (payload) or ER_ENOMEM with *err naming the field, and *job
 * holds nothing (spec->payload_buf stays the caller's). */
int er_job_validate(er_job_spec *spec, const er_job_limits *lim, int64_t now, er_rand *r,
                    er_job *job, er_error *err);

/* Fills the options a request left unset, first from the queue's defaults,
 * then from the server's. A backoff the request gave only in part is merged
 * field by field: its given members over the queue's default backoff (or
 * the server's). queue may be NULL. */
void er_job_apply_defaults(er_job *job, const er_job_defaults *queue,
                           const er_job_defaults *server);

/* The set_flags encoding the stores keep with a job: which options its
 * request gave. Bits 0..3: max_attempts, backoff, timeout_ms, priority;
 * bits 4..7: backoff type, delay_ms, max_delay_ms, jitter. A row written
 * before bits 4..7 existed (backoff bit alone) reads as the whole backoff
 * given, which is what it was then. Bit 8 (ER_FLAG_ID_GENERATED): the id
 * was generated; a row written before it existed reads as a client's id,
 * so retention keeps its tombstone (the safe side). The stores' SQL tests
 * this bit by its value, 256. */
#define ER_FLAG_ID_GENERATED 256
/* Bit 9: er_job.discard (a Faktory job pushed with retry 0). */
#define ER_FLAG_DISCARD 512
int er_job_set_flags(const er_job *job);
void er_job_set_flags_apply(er_job *job, int flags);

#endif
