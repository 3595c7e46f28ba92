/* SPDX-License-Identifier: MIT
 *
 * The job model and its one state machine (ARCHITECTURE.md §2), request
 * validation, and the failure decision (retry with backoff, dead, retry-later,
 * throttled). Pure logic: takes the time and randomness as arguments, does no
 * I/O. Frontends fill an er_job_spec (core/job_spec.h) and validate it into
 * an er_job; the stores persist jobs and call er_fail_decide to choose a
 * failed job's fate.
 */
#ifndef ER_CORE_JOB_H
#define ER_CORE_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/clock.h"
#include "util/err.h"


/* Limits. Changing one changes the API contract: update docs/api.md. */
#define ER_ID_MAX 200            /* job id, idempotency key, trace id */
#define ER_REDRIVE_MAX 99999     /* redriven copies of one dead job */
#define ER_REDRIVE_SUFFIX_MAX 14 /* "-redrive-99999" */
/* A job id a client gives: room left for a redriven copy's suffix. */
#define ER_JOB_ID_MAX 186 /* ER_ID_MAX - ER_REDRIVE_SUFFIX_MAX; a literal for the SQL text */
#define ER_NAME_MAX 128          /* queue name, job name, group, worker id */
#define ER_PAYLOAD_MAX_DEFAULT (512 * 1024)
#define ER_PRIORITY_MAX 1000
#define ER_MAX_ATTEMPTS_MAX 1000
#define ER_DELAY_MAX_MS (366LL * 24 * 3600 * 1000) /* run_at at most a year ahead */
#define ER_TIMEOUT_MAX_MS (24LL * 3600 * 1000)
#define ER_LEASE_MIN_MS 1000
#define ER_LEASE_MAX_MS (24LL * 3600 * 1000)
#define ER_FETCH_MAX 1000
#define ER_WAIT_MAX_MS 60000
#define ER_BULK_MAX 10000
#define ER_CUSTOM_MAX (64 * 1024) /* a job's custom object, serialized */
/* A list or fetch reply's size cap in bytes (--max-reply). */
#define ER_REPLY_MAX_DEFAULT ((size_t)8 << 20)
#define ER_REPLY_MAX_MIN ((size_t)64 << 10)
#define ER_REPLY_MAX_MAX ((size_t)1 << 30)

typedef enum er_state {
    ER_STATE_SCHEDULED = 0,
    ER_STATE_WAITING = 1,
    ER_STATE_ACTIVE = 2,
    ER_STATE_COMPLETED = 3,
    ER_STATE_DEAD = 4,
    ER_STATE_CANCELLED = 5,
} er_state;

/* "scheduled", "waiting", ... ; NULL for an out-of-range value. */
const char *er_state_name(er_state s);
/* True for completed, dead and cancelled: the job's outcome is known and
 * no transition leaves the state (a redrive makes a new job). */
bool er_state_finished(er_state s);
/* Parses a state name; returns 0 or ER_EINVAL. */
int er_state_parse(const char *name, er_state *out);

/* Events of the state machine. */
typedef enum er_event {
    ER_EV_PROMOTE,     /* scheduled -> waiting (run_at reached) */
    ER_EV_FETCH,       /* waiting -> active (lease) */
    ER_EV_COMPLETE,    /* active -> completed */
    ER_EV_RETRY,       /* active -> scheduled (retryable failure, retry_later, throttled) */
    ER_EV_KILL,        /* active -> dead (permanent, attempts exhausted, stalled too often) */
    ER_EV_RELEASE,     /* active -> waiting (graceful shutdown; attempt not counted) */
    ER_EV_STALL,       /* active -> waiting (lease expired, stalled < max) */
    ER_EV_CANCEL,      /* scheduled|waiting -> cancelled */
    ER_EV_RUN_NOW,     /* scheduled -> waiting (an operator's; Faktory's MUTATE requeue) */
    ER_EV_BURY,        /* scheduled -> dead (an operator's; Faktory's MUTATE kill) */
} er_event;

/* Returns the state after ev, or -1 when ev is not allowed from `from`. */
int er_state_next(er_state from, er_event ev);

typedef enum er_backoff_type {
    ER_BACKOFF_EXPONENTIAL = 0, /* delay * 2^(attempt-1), capped at max_delay */
    ER_BACKOFF_FIXED = 1,       /* delay */
    ER_BACKOFF_CAPPED = 2,      /* same as exponential; max_delay is required to matter */
    /* Faktory's retry schedule: c^4 + 15 + rand(0..29) * (c + 1) seconds for
     * retry c = attempt - 1, capped at max_delay; delay_ms and jitter are
     * unused. Given only by the Faktory frontend (er_job_spec.faktory); a
     * request cannot name it. */
    ER_BACKOFF_FAKTORY = 3,
} er_backoff_type;

/* Which members of a backoff a request gave (er_job.backoff_given). */
enum {
    ER_BACKOFF_GIVEN_TYPE = 1,
    ER_BACKOFF_GIVEN_DELAY = 2,
    ER_BACKOFF_GIVEN_MAX = 4,
    ER_BACKOFF_GIVEN_JITTER = 8,
    ER_BACKOFF_GIVEN_ALL = 15,
};

typedef struct er_backoff {
    er_backoff_type type;
    int64_t delay_ms;     /* base delay, >= 0 */
    int64_t max_delay_ms; /* cap, >= delay_ms */
    double jitter;        /* 0..1: the delay is spread over [d*(1-jitter), d] */
} er_backoff;

/* Server-wide defaults; a queue may override any of them. */
#define ER_DEFAULT_MAX_ATTEMPTS 8
#define ER_DEFAULT_BACKOFF_DELAY_MS 2000
#define ER_DEFAULT_BACKOFF_MAX_MS 900000
#define ER_DEFAULT_JITTER 0.5
#define ER_DEFAULT_TIMEOUT_MS 30000
#define ER_DEFAULT_MAX_STARTED 100 /* bound on retry_later loops */

/* "exponential", "fixed", "capped" or "faktory" (an out-of-range type
 * reads as exponential). */
const char *er_backoff_type_name(er_backoff_type t);
/* The type named by s[0..n) among those a request may name (exponential,
 * fixed, capped), or -1. */
int er_backoff_type_parse(const char *s, size_t n);

/* Computes the delay before retry number `attempt` (1 = first retry after
 * the first failure). Pure: randomness from r. Result in [0, max_delay_ms]. */
int64_t er_backoff_delay(const er_backoff *b, int attempt, er_rand *r);

/* Job options that a queue's "defaults" and the server provide when a job
 * does not. A field with has_* false is unset. */
typedef struct er_job_defaults {
    bool has_max_attempts, has_backoff, has_timeout, has_priority;
    int max_attempts;
    er_backoff backoff; /* when has_backoff, every field is set */
    int64_t timeout_ms;
    int priority;
} er_job_defaults;

/* The server's own defaults (ER_DEFAULT_*). */
void er_job_defaults_server(er_job_defaults *d);

/* A job as the store holds it. Strings are owned by the struct (heap) and
 * freed by er_job_fini. payload/result/progress are JSON texts. */
typedef struct er_job {
    char *id;
    char *queue;
    char *name;
    char *payload;       /* JSON text, never NULL after validation */
    size_t payload_len;
    er_state state;
    int priority;        /* 0..1000, higher runs first */
    char *group;         /* NULL when none */
    int64_t run_at;      /* ms since epoch */
    int max_attempts;
    er_backoff backoff;
    int64_t timeout_ms;
    char *trace_id;        /* NULL when none */
    char *idempotency_key; /* never NULL after validation: defaults to id */
    int attempts;        /* failures counted against max_attempts, plus the running one */
    int started;         /* times leased (including retry_later and stalls) */
    int stalled;         /* times its lease expired */
    char *lease_owner;   /* worker id; NULL unless active */
    char *lease_token;   /* NULL unless active */
    int64_t lease_expires_at; /* 0 unless active */
    char *last_error;    /* JSON text {"class","message",...}; NULL when none */
    char *result;        /* JSON text; NULL when none */
    char *progress;      /* JSON text; NULL when none */
    char *custom;        /* JSON object text a Faktory client gave ("custom"); NULL when none */
    char *unique_token;  /* the owner token of the unique lock (a run-once lease) its enqueue
                            took (docs/faktory.md, "Unique jobs"); NULL when none. A secret:
                            never shown */
    int64_t created_at, updated_at, started_at, finished_at; /* 0 when never */
    int64_t redriven_at; /* dead jobs: when redriven, 0 when not */
    int redrive_count;   /* dead jobs: copies made so far */
    /* Set by er_job_validate: which options the request gave, so queue
     * defaults can fill the rest (er_job_apply_defaults); backoff_given
     * (ER_BACKOFF_GIVEN_*) says which backoff members, when set_backoff. */
    bool set_max_attempts, set_backoff, set_timeout, set_priority;
    unsigned backoff_given;
    /* The id was generated (er_job_new_id), not given by a client: it can
     * collide with no other, so it needs no tombstone (store.h). */
    bool id_generated;
    /* A Faktory job pushed with retry 0 (ER_FLAG_DISCARD): Faktory drops it
     * on failure; errand keeps it in the dead letters with the reason
     * "discarded (retry 0)". */
    bool discard;
} er_job;

void er_job_init(er_job *job);

/* The fixed part of er_job_reply_bytes: keys, numbers, times and states
 * of a job's full view (the lease view has fewer). */
#define ER_JOB_REPLY_FIXED 1024

/* The bytes a job adds to a reply (its full or lease view), an estimate
 * that is never short of the truth: its JSON texts, twice its short
 * strings (room for escapes) and a fixed part for keys, numbers and times.
 * The one rule every reply cap uses. Exactly, in bytes of each field:
 *   ER_JOB_REPLY_FIXED
 *   + payload + result + last_error + progress + custom
 *   + 2 * (id + queue + name + group + trace_id + idempotency_key
 *          + lease_owner + lease_token)
 * (a NULL field counts 0). A store that sizes a job before leasing it (the
 * fetch budget, er_fetch_params.max_bytes) counts the same columns of the
 * row, plus er_job_lease_fixed_bytes for the fixed part and the lease it
 * is about to set, so its sum is never below this one. */
size_t er_job_reply_bytes(const er_job *job);
/* What er_job_reply_bytes counts for a job leased to worker_id besides the
 * row's own columns: the fixed part, twice the lease owner (worker_id) and
 * twice a lease token (ER_LEASE_TOKEN_SIZE - 1 hex chars). A store's
 * estimate of a row is this + the row's payload, result, last_error,
 * progress and custom + 2 * (id, queue, name, group, trace_id,
 * idempotency_key), in bytes, NULL as 0. */
size_t er_job_lease_fixed_bytes(const char *worker_id);
/* How many more jobs of at most `worst` bytes each fit in a reply budget
 * of `cap` bytes with `used` spent, up to `want`: at least 1 when used is
 * 0 (a reply always takes its first job). */
int er_reply_fit(size_t used, size_t cap, size_t worst, int want);
/* The most a leased job of at most payload_max payload bytes can add to a
 * fetch reply (the lease view by er_job_reply_bytes' rule). */
size_t er_job_lease_bytes_max(size_t payload_max);
/* Whether a reply of `n` jobs using `used` bytes still takes one of `next`
 * bytes under `cap`: always the first job, then while the total fits. */
bool er_reply_takes(size_t n, size_t used, size_t next, size_t cap);
/* Frees every string; leaves *job zeroed. NULL-safe. */
void er_job_fini(er_job *job);
/* Deep copy; returns 0 or ER_ENOMEM (dst then untouched-and-zeroed). */
int er_job_copy(er_job *dst, const er_job *src);

/* The name and id rules on bytes s[0..n). */
bool er_name_ok(const char *s, size_t n);
bool er_id_ok(const char *s, size_t n);

/* Validates a queue name, job name, group or worker id: 1..ER_NAME_MAX bytes
 * of [A-Za-z0-9_.:-]. `field` names the field in the error. */
int er_name_validate(const char *s, const char *field, er_error *err);
/* Validates a job id / idempotency key / trace id: 1..ER_ID_MAX printable
 * ASCII bytes, no spaces or '/'. */
int er_id_validate(const char *s, const char *field, er_error *err);
/* The extra rules of a job id a client gives (s[0..n) is an id already):
 * at most ER_JOB_ID_MAX bytes, and not ending in "-redrive-" and digits,
 * the form of redriven copies. 0, or ER_EINVAL naming `field`. */
int er_job_id_check(const char *s, size_t n, const char *field, er_error *err);

/* Turns *job (a copy of a dead job) into its redrive: a fresh waiting job
 * with id new_id (copied), the same payload and options, no attempts, lease,
 * error or result. Returns 0, or ER_ENOMEM with *job unchanged. */
int er_job_reset_for_redrive(er_job *job, const char *new_id, int64_t now);

/* The redrive of `dead`: *copy (er_job_init'd by this call) becomes its
 * fresh waiting copy with id "{id}-redrive-{n}", n = redrive_count + 1 (in
 * *count; the store records it on the dead job). ER_ENOTFOUND (field id)
 * when `dead` is not dead; ER_ECONFLICT when it was redriven ER_REDRIVE_MAX
 * times or the copy's id would pass ER_ID_MAX (a copy of a copy); ER_ENOMEM;
 * *copy then holds nothing. */
int er_job_redrive_plan(const er_job *dead, int64_t now, er_job *copy, int *count,
                        er_error *err);

/* Why a lease-checked change (heartbeat, complete, fail, release) of job id
 * was refused, from what the store found: no such job (ER_ENOTFOUND), a job
 * not active, or an active job whose lease token is another (ER_ESTALE,
 * field lease_token). */
int er_job_lease_refused(bool found, er_state state, const char *id, er_error *err);

/* The lease check itself: 0 when `job` (NULL: not found) is active under
 * `token`, else er_job_lease_refused's answer. */
int er_job_lease_check(const er_job *job, const char *id, const char *token, er_error *err);

/* Generates a job id: time-ordered, 26 chars, into out[32]. */
void er_job_new_id(int64_t now, er_rand *r, char out[32]);

/* Error classes a worker reports. */
typedef enum er_error_class {
    ER_ERR_TRANSIENT = 0,
    ER_ERR_PERMANENT = 1,
    ER_ERR_RETRY_LATER = 2,
    ER_ERR_THROTTLED = 3,
} er_error_class;

typedef struct er_failure {
    er_error_class cls;
    char *message;        /* owned; may be NULL */
    char *backtrace;      /* owned JSON text or NULL */
    char *errtype;        /* owned; the error's type as a Faktory worker names it, or NULL */
    int64_t delay_ms;     /* retry_later: required, >= 0 */
    int64_t retry_after_ms; /* throttled: required, >= 0 */
} er_failure;

void er_failure_fini(er_failure *f);
/* "transient", "permanent", "retry_later", "throttled". */
const char *er_error_class_name(er_error_class c);

/* The decision for a failed active job. */
typedef struct er_fail_outcome {
    er_state state;        /* ER_STATE_SCHEDULED or ER_STATE_DEAD */
    const char *reason;    /* dead: why, when not the failure's class (static text); or NULL */
    int64_t run_at;        /* when scheduled */
    int attempts;          /* new value of job->attempts */
    int64_t queue_pause_until; /* throttled: fetching on the queue pauses until then; else 0 */
} er_fail_outcome;

/* Decides what a failure does to `job` (which is active, attempts counting the
 * running attempt). A job with `discard` that goes dead has the reason
 * "discarded (retry 0)". transient: retry after backoff unless attempts exhausted
 * (dead); permanent: dead; retry_later: scheduled after delay, attempt not
 * counted, dead when started >= max_started; throttled: like retry_later
 * after retry_after_ms, and the queue pauses for that long, both capped at
 * throttle_max_ms (the queue's setting; <= 0 caps at 0). Times saturate at
 * INT64_MAX. */
void er_fail_decide(const er_job *job, const er_failure *f, int max_started,
                    int64_t throttle_max_ms, int64_t now, er_rand *r, er_fail_outcome *out);

/* What the reaper does with an active job whose lease expired. The stall
 * used up the attempt it leased: the job is dead when that was its last
 * (attempts >= max_attempts), or when stalled would exceed max_stalled;
 * else it waits again (stalled counted). */
typedef enum er_stall_outcome {
    ER_STALL_RETRY = 0,    /* back to waiting */
    ER_STALL_LAST_ATTEMPT, /* dead: its attempts are used up */
    ER_STALL_TOO_OFTEN,    /* dead: past max_stalled */
} er_stall_outcome;

er_stall_outcome er_stall_why(const er_job *job, int max_stalled);


#endif
