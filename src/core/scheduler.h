/* SPDX-License-Identifier: MIT
 *
 * Schedulers: a cron expression in a time zone that enqueues one job per
 * tick. This module validates a scheduler spec (er_sched_spec, the plain
 * values a frontend or a store codec read), builds the job of a tick (id
 * "sched:{key}:{tick}", payload.run_key), and plans what to fire when the
 * engine looks: the ticks that came due on time, plus the missed ones the
 * policy allows (skip, once, all up to max_catchup). Pure logic: the time is
 * always an argument, and the zone arrives parsed (the caller looks
 * s->tz_name up with util's er_tz_get and attaches it with
 * er_scheduler_set_zone); no I/O, and no API or storage JSON shapes.
 */
#ifndef ER_CORE_SCHEDULER_H
#define ER_CORE_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/cron.h"
#include "core/job.h"
#include "core/job_spec.h"
#include "util/clock.h"
#include "util/err.h"

/* Limits. Changing one changes the API contract: update docs/cron.md. */
#define ER_SCHED_CRON_MAX 256        /* bytes of the cron expression */
#define ER_SCHED_CATCHUP_MAX 1000
#define ER_SCHED_CATCHUP_DEFAULT 24
/* A tick is on time when the engine notices it at most this long after it
 * came due while the server was running; older due ticks are missed and
 * follow the schedule's missed-run policy. */
#define ER_SCHED_GRACE_MS 30000
/* At most this many on-time ticks fire in one pass; the rest fire on the
 * next pass (nothing is dropped). */
#define ER_SCHED_ONTIME_MAX 1000

typedef enum er_missed {
    ER_MISSED_SKIP = 0, /* missed ticks are not run (the default) */
    ER_MISSED_ONCE = 1, /* one catch-up run, for the latest missed tick */
    ER_MISSED_ALL = 2,  /* the latest max_catchup missed ticks, oldest first */
} er_missed;

/* "skip", "once", "all". */
const char *er_missed_name(er_missed m);

/* A scheduler spec as read (PUT /v1/schedulers/{key}, or a stored spec):
 * slices borrowed from the reader's document. A null top-level member
 * counts as absent. */
typedef struct er_sched_spec {
    er_spec_str unknown;    /* the first member that is not a spec field */
    er_spec_str cron;
    er_spec_str tz;
    er_spec_str queue;
    er_spec_str name;       /* the job name */
    er_spec_str payload;    /* the payload as compact JSON text; BAD_TYPE when
                               it is not an object */
    er_spec_str missed;
    er_spec_int max_catchup;
    er_spec_kind job;       /* the job options: ABSENT, SET (an object) or BAD_TYPE */
    /* When job is SET, its members: opts.unknown is the first that is not a
     * job option (er_sched_job_field_known); a member given as null is
     * ER_SPEC_NULL (the spec keeps it as given). Only unknown, priority,
     * max_attempts, backoff, timeout_ms, group and trace_id are read. */
    er_job_spec opts;
    bool jitter_integer;    /* opts.backoff.jitter was written as an integer */
    /* Optional, owned by the spec's filler: the heap buffer payload.s
     * points to (er_sched_spec_fini frees it). */
    char *payload_buf;
} er_sched_spec;

/* Frees spec->payload_buf. NULL-safe. */
void er_sched_spec_fini(er_sched_spec *spec);

/* Whether s[0..n) names a member of a spec; of its "job" object. */
bool er_sched_spec_field_known(const char *s, size_t n);
bool er_sched_job_field_known(const char *s, size_t n);

/* A validated scheduler spec; it owns every pointer but tz (er_scheduler_fini
 * frees them). */
typedef struct er_scheduler {
    char *cron_text;   /* as given, trimmed */
    er_cron cron;
    char *tz_name;     /* "UTC" when none was given */
    const er_tz *tz;   /* borrowed (er_scheduler_set_zone), or NULL until set */
    char *queue;
    char *name;        /* job name */
    char *payload;     /* a JSON object as compact text ("{}" when none was given) */
    er_missed missed;
    int max_catchup;   /* 1..ER_SCHED_CATCHUP_MAX */
    /* The job options of the ticks ("job"), when has_job, as given: the
     * option fields of opts (priority, max_attempts, backoff, timeout_ms,
     * group, trace_id; the others stay absent) with slices into opts_text;
     * kind ER_SPEC_NULL marks a member given as null, so a stored spec
     * reads back as it was written. */
    bool has_job;
    er_job_spec opts;
    bool jitter_integer; /* opts.backoff.jitter was written as an integer */
    char *opts_text;     /* owned: the bytes opts' slices point to */
} er_scheduler;

void er_scheduler_init(er_scheduler *s);
/* Frees what *s owns; leaves it as after er_scheduler_init. NULL-safe. */
void er_scheduler_fini(er_scheduler *s);

/* Copies src into *dst (er_scheduler_init'd by this call; tz is shared).
 * Returns 0, or ER_ENOMEM with *dst holding nothing. */
int er_scheduler_copy(er_scheduler *dst, const er_scheduler *src, er_error *err);

/* Validates a scheduler key: er_name_validate rules, field "key". */
int er_scheduler_key_validate(const char *key, er_error *err);

/* Validates a spec and builds its scheduler. Checks, in this order: unknown
 * member, cron (required, trimmed, at most ER_SCHED_CRON_MAX bytes, parses),
 * tz (UTC when absent or empty; only the name's syntax: out->tz stays NULL
 * until er_scheduler_set_zone), queue, name, payload (an object of at most
 * payload_max bytes), missed, max_catchup, and the job options (unknown
 * member, then er_job_validate's rules, the field prefixed "job."). spec:
 * copied. On success fills *out (er_scheduler_init'd by this call) and
 * returns 0; on failure returns ER_EINVAL / ER_ETOOBIG / ER_ENOMEM with
 * *err naming the field, and *out holds nothing. */
int er_sched_validate(const er_sched_spec *spec, size_t payload_max, er_scheduler *out,
                      er_error *err);

/* Attaches tz, the zone named s->tz_name (from er_tz_get), and checks that
 * the expression fires in it. tz: borrowed; must outlive s (er_tz_get's
 * zones live as long as the process). Returns 0, or ER_EINVAL with field
 * "cron" ("cron '...' never fires", e.g. "0 0 30 2 *"), s then unchanged. */
int er_scheduler_set_zone(er_scheduler *s, const er_tz *tz, er_error *err);

/* The id of the job of `tick` (ms since the epoch): "sched:{key}:{tick as
 * RFC 3339 UTC}". out must hold ER_ID_MAX + 1 bytes. */
void er_scheduler_tick_id(const char *key, int64_t tick, char out[ER_ID_MAX + 1]);

/* Builds the validated job of `tick`: id as er_scheduler_tick_id, the
 * spec's queue, name, job options, and payload with "run_key" set to the
 * tick (RFC 3339 UTC): the payload's members keep their order, an existing
 * run_key is replaced where it stands, a new one comes last. Fills *job
 * (owned: er_job_fini) and returns 0, or a negative code with *err (*job
 * then holds nothing). */
int er_scheduler_job(const er_scheduler *s, const char *key, int64_t tick, int64_t now,
                     er_rand *r, er_job *job, er_error *err);

/* What one look at a scheduler decides. */
typedef struct er_sched_plan {
    int64_t *ticks;      /* owned (er_sched_plan_fini): the ticks to enqueue now, oldest first */
    size_t n;
    size_t missed_fired; /* how many of them are catch-up runs of missed ticks */
    bool had_missed;     /* some due ticks were missed (fired or not) */
    int64_t next_run_at; /* the first tick not yet handled; INT64_MAX when none */
} er_sched_plan;

void er_sched_plan_fini(er_sched_plan *p);

/* Plans a scheduler whose earliest unhandled tick is next_run_at. s->tz must
 * be set. Due ticks are those in [next_run_at, now]. A due tick after
 * on_time_after fires (it came due while the server ran and was noticed in
 * time); due ticks at or before on_time_after were missed and follow
 * s->missed: skip fires none, once fires the latest, all fires the latest
 * max_catchup of them, oldest first. The engine passes on_time_after =
 * max(when it started, now - ER_SCHED_GRACE_MS). The work is bounded by
 * max_catchup and ER_SCHED_ONTIME_MAX, not by the length of the downtime.
 * Returns 0 and *out (which the caller fini's), or ER_ENOMEM. */
int er_scheduler_plan(const er_scheduler *s, int64_t next_run_at, int64_t now,
                      int64_t on_time_after, er_sched_plan *out, er_error *err);

/* The first tick strictly after `after`, or INT64_MAX when the expression
 * never fires again within the cron horizon. s->tz must be set. */
int64_t er_scheduler_next(const er_scheduler *s, int64_t after);

/* Formats a whole-second instant as RFC 3339 local time in tz with its
 * offset ("2026-03-08T03:00:00-04:00") into out[32]. */
void er_time_format_local(int64_t ms, const er_tz *tz, char out[32]);

#endif
