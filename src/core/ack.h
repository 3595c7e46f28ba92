/* SPDX-License-Identifier: MIT
 *
 * What a worker reports about a leased job: its outcome (complete with a
 * result, fail with an error, release) and its heartbeats. Every frontend
 * fills these specs and the validators here judge them, with the API's
 * messages; the engine carries the valid er_ack to the store. Pure logic.
 */
#ifndef ER_CORE_ACK_H
#define ER_CORE_ACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "core/job_spec.h"
#include "core/lease.h"
#include "util/err.h"

#define ER_FAILURE_MESSAGE_MAX 4096          /* longer messages are cut, not refused */
#define ER_FAILURE_BACKTRACE_MAX (16 * 1024) /* serialized size; larger is refused */
#define ER_FAILURE_ERRTYPE_MAX 200           /* longer error types are cut, not refused */

typedef enum er_ack_kind { ER_ACK_COMPLETE, ER_ACK_FAIL, ER_ACK_RELEASE } er_ack_kind;

/* What a store tells of the job an acknowledgement finished, for metrics
 * and logs. */
typedef struct er_ack_info {
    char queue[ER_NAME_MAX + 1]; /* "" when not told */
    char name[ER_NAME_MAX + 1];
    char trace_id[ER_ID_MAX + 1]; /* "" when the job has none */
    int attempt;                  /* the acknowledged attempt's number */
    int64_t run_at;               /* when that attempt became due */
    int64_t started_at;           /* when it was leased; 0 when not told */
    char unique_token[ER_LEASE_TOKEN_SIZE]; /* complete: the owner token of the job's
                                               unique lock (er_job.unique_token); "" when none */
} er_ack_info;

/* Fills *info (NULL-safe); NULL strings count as "". */
void er_ack_info_set(er_ack_info *info, const char *queue, const char *name,
                     const char *trace_id, int attempt, int64_t run_at, int64_t started_at);
/* Sets info->unique_token (NULL-safe); NULL counts as "". */
void er_ack_info_set_unique(er_ack_info *info, const char *token);

/* One acknowledgement (complete, fail or release) of an active job. */
typedef struct er_ack {
    char *id;          /* owned */
    char *token;       /* owned */
    er_ack_kind kind;
    char *result;      /* owned JSON text or NULL (complete) */
    er_failure failure; /* fail */
    /* out */
    int rc;            /* 0 or ER_E* for this item alone */
    er_error err;
    er_fail_outcome outcome; /* fail: the decision */
    er_ack_info info;        /* complete, fail: what the store told */
} er_ack;

void er_ack_fini(er_ack *a);

/* The error object of a failure, as read. Fields are named "error.<x>". */
typedef struct er_failure_spec {
    er_spec_kind kind;     /* ER_SPEC_BAD_TYPE: not an object */
    er_spec_str unknown;   /* its first member that is not one of these */
    er_spec_str cls;       /* "class" */
    er_spec_str message;
    er_spec_int delay_ms;       /* required by retry_later */
    er_spec_int retry_after_ms; /* required by throttled */
    er_spec_str backtrace;      /* any JSON value, serialized compactly */
    er_spec_str errtype;        /* Faktory's errtype (the HTTP API has no such member) */
} er_failure_spec;

/* Checks an error object: unknown member, class, message (cut to
 * ER_FAILURE_MESSAGE_MAX bytes at a character boundary), errtype (a string,
 * cut to ER_FAILURE_ERRTYPE_MAX bytes the same way), delay_ms,
 * retry_after_ms (each required by its class, checked with any class),
 * backtrace (ER_ETOOBIG past ER_FAILURE_BACKTRACE_MAX). Fills *f (owned:
 * er_failure_fini) and returns 0, or a negative code with *err naming the
 * field (*f then holds nothing). */
int er_failure_validate(const er_failure_spec *spec, er_failure *f, er_error *err);

/* One outcome as read. kind_given: how many of complete/fail/release the
 * request named (exactly one is valid); kind_bad_type: the one named is not
 * an object. Fields are named relative to the outcome ("id",
 * "lease_token", "result", "error.class"): a frontend prefixes them. */
typedef struct er_ack_spec {
    int kind_given;
    bool kind_bad_type;
    er_ack_kind kind;
    er_spec_str unknown;     /* the first member of the kind's object that it lacks */
    er_spec_str id;
    er_spec_str lease_token;
    er_spec_str result;      /* complete: any JSON value, serialized; absent: none */
    er_failure_spec failure; /* fail */
} er_ack_spec;

/* The name of an outcome kind in requests: "complete", "fail", "release". */
const char *er_ack_kind_name(er_ack_kind k);

/* Checks one outcome: id, lease_token (each required, an id), exactly one
 * kind, an object with no unknown member ("complete.x"), then its result
 * (ER_ETOOBIG past result_max) or error. Fills *out
 * (owned: er_ack_fini) and returns 0, or a negative code with *err naming
 * the field (*out then holds nothing). */
int er_ack_validate(const er_ack_spec *spec, size_t result_max, er_ack *out, er_error *err);

/* A heartbeat as read. */
typedef struct er_heartbeat_spec {
    er_spec_str lease_token;
    er_spec_int extend_ms;   /* absent: the queue's lease_ms */
    er_spec_str progress;    /* any JSON value, serialized; absent: unchanged */
} er_heartbeat_spec;

/* Checks a heartbeat: lease_token, extend_ms (ER_LEASE_MIN_MS..MAX), progress
 * (ER_ETOOBIG past progress_max). Sets *extend_ms (0 when absent) and copies
 * the token and progress (owned, progress NULL when absent). */
int er_heartbeat_validate(const er_heartbeat_spec *spec, size_t progress_max, char **token,
                          int64_t *extend_ms, char **progress, er_error *err);

#endif
