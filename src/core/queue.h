/* SPDX-License-Identifier: MIT
 *
 * Queue settings: their defaults, what a valid change is, and the
 * field-by-field merge PUT /v1/queues/{queue} performs. A frontend reads a
 * body into an er_queue_patch; er_queue_patch_check judges it on its own
 * (every rule, with the API's messages) into a pointer-free er_queue_change
 * the engine carries; er_queue_settings_change merges that onto the stored
 * settings. Pure logic; the stores keep settings through their own codec
 * (store/settings_codec.h).
 */
#ifndef ER_CORE_QUEUE_H
#define ER_CORE_QUEUE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/job.h"
#include "core/job_spec.h"
#include "util/err.h"

#define ER_DEFAULT_LEASE_MS 60000
#define ER_DEFAULT_MAX_STALLED 3
#define ER_RATE_MAX_MAX 1000000000LL /* bounds keep rate arithmetic far from overflow */
#define ER_MAX_STALLED_MAX 1000
#define ER_MAX_STARTED_MAX 100000
#define ER_RETENTION_DEFAULT_AGE_S (7 * 24 * 3600)
/* Retention ages are at most 100 years (so age_s * 1000 stays far from
 * overflow), counts at most 10^12 jobs. */
#define ER_RETENTION_AGE_MAX_S (36525LL * 24 * 3600)
#define ER_RETENTION_COUNT_MAX 1000000000000LL
/* throttle_max_ms: the longest a throttled failure pauses the queue (and
 * delays its job); a worker may ask for up to ER_DELAY_MAX_MS. */
#define ER_THROTTLE_MAX_DEFAULT_MS 3600000LL
#define ER_THROTTLE_MAX_MIN_MS 1000LL
#define ER_THROTTLE_MAX_MAX_MS 604800000LL /* 7 days */
/* Fairness across groups, group limits and aging (docs/api.md "Fetch order"). */
#define ER_FAIR_WEIGHTS_MAX 100     /* groups with a weight of their own */
#define ER_FAIR_WEIGHT_MAX 1000
#define ER_GROUP_CONCURRENCY_MAX 1000000
#define ER_AGING_PER_S_MAX 1000.0

typedef struct er_retention {
    /* completed jobs: delete when older than age_s (0 = no age limit) or
     * beyond the newest `count` (0 = no count limit). Both 0: keep. */
    int64_t completed_age_s;
    int64_t completed_count;
    /* dead jobs: delete when older than age_s; 0 = keep forever. */
    int64_t dead_age_s;
} er_retention;

/* The finished_at (ms) before which a job older than age_s is deleted at
 * now: now - age_s * 1000, with age_s clamped to 0..ER_RETENTION_AGE_MAX_S
 * and the result saturated at INT64_MIN, so no input overflows. */
int64_t er_retention_cutoff(int64_t now, int64_t age_s);

/* An HTTP dispatch target (docs/api.md "HTTP dispatch"): errand itself
 * delivers the queue's jobs to it. Fixed-size, so settings stay plain
 * values that copy with `=`. */
#define ER_DISPATCH_URL_MAX 1024
#define ER_DISPATCH_HEADERS_MAX 8
#define ER_DISPATCH_HEADER_NAME_MAX 64
#define ER_DISPATCH_HEADER_VALUE_MAX 512
#define ER_DISPATCH_TIMEOUT_MIN_MS 100
#define ER_DISPATCH_TIMEOUT_MAX_MS 600000
#define ER_DISPATCH_TIMEOUT_DEFAULT_MS 30000
/* A header value that settings replies show, and that a PUT may send back
 * to keep the stored value (values are write-only). */
#define ER_DISPATCH_HIDDEN "***"

typedef enum er_dispatch_method {
    ER_DISPATCH_POST = 0,
    ER_DISPATCH_PUT = 1,
    ER_DISPATCH_PATCH = 2,
} er_dispatch_method;

typedef struct er_dispatch_header {
    char name[ER_DISPATCH_HEADER_NAME_MAX + 1];
    char value[ER_DISPATCH_HEADER_VALUE_MAX + 1];
} er_dispatch_header;

typedef struct er_dispatch {
    bool on;                       /* false: no target (workers fetch the jobs) */
    char url[ER_DISPATCH_URL_MAX + 1];
    er_dispatch_method method;
    int nheaders;
    er_dispatch_header headers[ER_DISPATCH_HEADERS_MAX]; /* sent to trusted targets only */
    int64_t timeout_ms;
    bool trusted;                  /* may receive the headers and traceparent */
    bool follow_redirects;
} er_dispatch;

/* "POST", "PUT", "PATCH". */
const char *er_dispatch_method_name(er_dispatch_method m);

/* A rate limit: at most max leases per per_ms, burst of them at once
 * (GCRA, core/fetch.h). max 0: none. */
typedef struct er_rate {
    int64_t max;
    int64_t per_ms;
    int64_t burst; /* 1..max */
} er_rate;

/* Deficit round-robin weights: a group's share of its queue's fetches. */
typedef struct er_fair_weight {
    char group[ER_NAME_MAX + 1];
    int weight;
} er_fair_weight;

typedef struct er_fairness {
    int default_weight; /* 1..ER_FAIR_WEIGHT_MAX */
    int nweights;
    er_fair_weight weights[ER_FAIR_WEIGHTS_MAX];
} er_fairness;

/* Limits each group of a queue has (the jobs without a group are one). */
typedef struct er_group_limits {
    int concurrency; /* 0 = none */
    er_rate rate;
} er_group_limits;

/* A waiting job's effective priority: priority + min(max_boost, per_s x
 * seconds waited). per_s 0: strict priority. */
typedef struct er_aging {
    double per_s;
    int max_boost;
} er_aging;

typedef struct er_queue_settings {
    bool paused;
    int concurrency;        /* 0 = unlimited */
    int64_t rate_max;       /* 0 = no rate limit */
    int64_t rate_per_ms;
    int64_t rate_burst;
    int64_t lease_ms;       /* default lease for fetches that give none */
    int max_stalled;
    int max_started;
    int64_t throttle_max_ms; /* cap of a throttled failure's delays */
    er_job_defaults defaults;
    er_retention retention;
    er_dispatch dispatch;
    er_fairness fairness;
    er_group_limits group_limits;
    er_aging aging;
} er_queue_settings;

/* The weight of a group ("" or NULL: the jobs without one). */
int er_fairness_weight(const er_fairness *f, const char *group);

/* The settings of a queue nobody configured. */
void er_queue_settings_default(er_queue_settings *s);

/* ---- a change, as read ---- */

typedef struct er_spec_bool {
    er_spec_kind kind;
    bool v;
} er_spec_bool;

/* An object member that is itself an object: its kind (SET, BAD_TYPE, or
 * NULL where null clears it) and its first unknown member. */
typedef struct er_spec_obj {
    er_spec_kind kind;
    er_spec_str unknown;
} er_spec_obj;

/* The job options a queue gives its jobs ("defaults"). null clears one
 * option, or all of them (obj.kind NULL: back to the server's). */
typedef struct er_defaults_spec {
    er_spec_obj obj;
    er_spec_int max_attempts;
    er_backoff_spec backoff; /* kind NULL: unset */
    er_spec_int timeout_ms;
    er_spec_int priority;
} er_defaults_spec;

/* A dispatch object as read: headers[0..min(nheaders, MAX + 1)) are its
 * first members (one more than allowed, so "too many" is seen). */
typedef struct er_dispatch_spec {
    er_spec_obj obj; /* NULL removes the target */
    er_spec_str url, method;
    er_spec_obj headers_obj;
    struct {
        er_spec_str name, value; /* value BAD_TYPE: not a string */
    } headers[ER_DISPATCH_HEADERS_MAX + 1];
    size_t nheaders;
    er_spec_int timeout_ms;
    er_spec_bool trusted, follow_redirects;
} er_dispatch_spec;

/* A rate_limit object as read; obj NULL: no rate limit. */
typedef struct er_rate_spec {
    er_spec_obj obj;
    er_spec_int max, per_ms, burst;
} er_rate_spec;

/* A fairness object as read: weights[0..min(nweights, MAX + 1)) are the
 * first members of "weights" (one more than allowed, so "too many" is seen). */
typedef struct er_fairness_spec {
    er_spec_obj obj; /* NULL: back to equal weights */
    er_spec_obj weights_obj;
    struct {
        er_spec_str group;
        er_spec_int weight;
    } weights[ER_FAIR_WEIGHTS_MAX + 1];
    size_t nweights;
    er_spec_int default_weight;
} er_fairness_spec;

typedef struct er_group_limits_spec {
    er_spec_obj obj; /* NULL: no group limits */
    er_spec_int concurrency;
    er_rate_spec rate;
} er_group_limits_spec;

typedef struct er_aging_spec {
    er_spec_obj obj; /* NULL: strict priority */
    er_spec_num per_s;
    er_spec_int max_boost;
} er_aging_spec;

/* A settings body (PUT /v1/queues/{queue}). */
typedef struct er_queue_patch {
    er_spec_obj obj; /* BAD_TYPE: the body is not an object */
    er_spec_bool paused;
    er_spec_int concurrency;
    er_rate_spec rate;
    er_spec_int lease_ms;
    er_spec_int max_stalled;
    er_spec_int max_started;
    er_spec_int throttle_max_ms;
    er_defaults_spec defaults;
    er_spec_obj retention;
    er_spec_obj completed;           /* retention.completed */
    er_spec_int completed_age_s, completed_count;
    er_spec_obj dead;                /* retention.dead: an object... */
    bool dead_keep;                  /* ...or the string "keep" (dead.kind SET) */
    er_spec_int dead_age_s;
    er_dispatch_spec dispatch;
    er_fairness_spec fairness;
    er_group_limits_spec group_limits;
    er_aging_spec aging;
} er_queue_patch;

/* ---- a change, judged ---- */

typedef enum er_change { ER_CHANGE_KEEP = 0, ER_CHANGE_SET, ER_CHANGE_CLEAR } er_change;

typedef struct er_queue_change {
    er_change paused, concurrency, rate, lease_ms, max_stalled, max_started, throttle_max_ms;
    bool paused_v;
    int concurrency_v, max_stalled_v, max_started_v;
    int64_t lease_ms_v, throttle_max_ms_v;
    bool rate_max_given, rate_per_given, rate_burst_given;
    int64_t rate_max_v, rate_per_v, rate_burst_v;
    er_change defaults; /* CLEAR: every option back to the server's */
    er_change d_max_attempts, d_backoff, d_timeout, d_priority;
    int d_max_attempts_v, d_priority_v;
    int64_t d_timeout_v;
    er_backoff d_backoff_v;  /* the given members (d_backoff_given) */
    unsigned d_backoff_given;
    er_change completed_age, completed_count, dead_age;
    int64_t completed_age_v, completed_count_v, dead_age_v; /* dead 0: keep */
    er_change dispatch;   /* SET: the target becomes dispatch_v; CLEAR: none */
    er_dispatch dispatch_v;
    unsigned dispatch_keep; /* bit i: header i keeps its stored value ("***") */
    er_change fairness, group_limits, aging; /* SET replaces the whole object */
    er_fairness fairness_v;
    er_group_limits group_limits_v;
    er_aging aging_v;
} er_queue_change;

/* Judges a patch on its own, in field order: not an object, then paused,
 * concurrency, rate_limit, lease_ms, max_stalled, max_started,
 * throttle_max_ms, defaults, retention, dispatch, fairness, group_limits,
 * aging (unknown members first at each level). A dispatch
 * object replaces the whole target: url (http:// or https://, no user
 * info), method, headers (names of token characters, not one errand sets
 * itself; values of visible ASCII, space and tab), timeout_ms, trusted,
 * follow_redirects; headers need trusted. Fills *out and returns 0,
 * or ER_EINVAL naming the field. */
int er_queue_patch_check(const er_queue_patch *p, er_queue_change *out, er_error *err);

/* Merges a judged change onto *s, field by field: an absent field keeps its
 * value; a dispatch header given as "***" keeps the stored value of the
 * header of that name (ER_EINVAL when there is none); a rate_limit given in
 * part merges onto the current one, which must then have both max and
 * per_ms, and a burst of at most max (1 when never given); a defaults backoff merges onto the current
 * one (or the server's). On error (a rule the merged value breaks) returns
 * ER_EINVAL naming the field and *s is unchanged. */
int er_queue_settings_change(er_queue_settings *s, const er_queue_change *c, er_error *err);

#endif
