/* SPDX-License-Identifier: MIT
 *
 * Queue settings: defaults, the rules of a settings change and the
 * field-by-field merge (queue.h). A rejected change leaves the settings as
 * they were. The messages here are the API's (docs/api.md).
 */
#include "core/queue.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

void er_queue_settings_default(er_queue_settings *s)
{
    memset(s, 0, sizeof *s);
    s->lease_ms = ER_DEFAULT_LEASE_MS;
    s->max_stalled = ER_DEFAULT_MAX_STALLED;
    s->max_started = ER_DEFAULT_MAX_STARTED;
    s->retention.completed_age_s = ER_RETENTION_DEFAULT_AGE_S;
    s->retention.completed_count = 0;
    s->retention.dead_age_s = 0; /* keep */
}

/* ---- judging a patch ---- */

static int unknown(const er_spec_obj *o, const char *prefix, er_error *err)
{
    if (o->unknown.kind == ER_SPEC_ABSENT)
        return 0;
    char f[ER_FIELD_MAX];
    snprintf(f, sizeof f, "%s%s%.*s", prefix, *prefix ? "." : "", (int)o->unknown.n,
             o->unknown.s);
    return er_error_set(err, ER_EINVAL, f, "%s is not a known field", f);
}

/* A defaults option: null clears it, a value sets it. */
static int opt_in(const er_spec_int *v, const char *field, int64_t lo, int64_t hi, er_change *ch,
                  int64_t *out, er_error *err)
{
    if (v->kind == ER_SPEC_NULL) {
        *ch = ER_CHANGE_CLEAR;
        return 0;
    }
    int rc = er_spec_int_in(v, field, lo, hi, out, err);
    if (rc > 0)
        *ch = ER_CHANGE_SET;
    return rc < 0 ? rc : 0;
}

static int check_defaults(const er_defaults_spec *d, er_queue_change *c, er_error *err)
{
    if (d->obj.kind == ER_SPEC_ABSENT)
        return 0;
    if (d->obj.kind == ER_SPEC_NULL) {
        c->defaults = ER_CHANGE_CLEAR;
        return 0;
    }
    if (d->obj.kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "defaults",
                            "defaults must be an object {max_attempts, backoff, timeout_ms, "
                            "priority}");
    if (unknown(&d->obj, "defaults", err) < 0)
        return ER_EINVAL;
    c->defaults = ER_CHANGE_SET;
    int64_t n = 0;
    if (opt_in(&d->max_attempts, "defaults.max_attempts", 1, ER_MAX_ATTEMPTS_MAX,
               &c->d_max_attempts, &n, err) < 0)
        return ER_EINVAL;
    c->d_max_attempts_v = (int)n;
    if (d->backoff.kind == ER_SPEC_NULL) {
        c->d_backoff = ER_CHANGE_CLEAR;
    } else if (d->backoff.kind != ER_SPEC_ABSENT) {
        if (er_backoff_spec_check(&d->backoff, "defaults.backoff", &c->d_backoff_v,
                                  &c->d_backoff_given, err) < 0)
            return ER_EINVAL;
        c->d_backoff = ER_CHANGE_SET;
    }
    if (opt_in(&d->timeout_ms, "defaults.timeout_ms", 1, ER_TIMEOUT_MAX_MS, &c->d_timeout,
               &c->d_timeout_v, err) < 0)
        return ER_EINVAL;
    n = 0;
    if (opt_in(&d->priority, "defaults.priority", 0, ER_PRIORITY_MAX, &c->d_priority, &n, err) < 0)
        return ER_EINVAL;
    c->d_priority_v = (int)n;
    return 0;
}

static int check_retention(const er_queue_patch *p, er_queue_change *c, er_error *err)
{
    if (p->retention.kind == ER_SPEC_ABSENT)
        return 0;
    if (p->retention.kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, "retention",
                            "retention must be an object {completed, dead}");
    if (unknown(&p->retention, "retention", err) < 0)
        return ER_EINVAL;
    if (p->completed.kind != ER_SPEC_ABSENT) {
        if (p->completed.kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, "retention.completed",
                                "retention.completed must be an object {age_s, count}");
        if (unknown(&p->completed, "retention.completed", err) < 0)
            return ER_EINVAL;
        int rc = er_spec_int_in(&p->completed_age_s, "retention.completed.age_s", 0, INT64_MAX,
                                &c->completed_age_v, err);
        if (rc < 0)
            return rc;
        if (rc)
            c->completed_age = ER_CHANGE_SET;
        rc = er_spec_int_in(&p->completed_count, "retention.completed.count", 0, INT64_MAX,
                            &c->completed_count_v, err);
        if (rc < 0)
            return rc;
        if (rc)
            c->completed_count = ER_CHANGE_SET;
    }
    if (p->dead.kind != ER_SPEC_ABSENT) {
        if (p->dead.kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, "retention.dead",
                                "retention.dead must be \"keep\" or an object {age_s}");
        if (p->dead_keep) {
            c->dead_age = ER_CHANGE_SET;
            c->dead_age_v = 0;
            return 0;
        }
        if (unknown(&p->dead, "retention.dead", err) < 0)
            return ER_EINVAL;
        int rc = er_spec_int_in(&p->dead_age_s, "retention.dead.age_s", 1, INT64_MAX,
                                &c->dead_age_v, err);
        if (rc < 0)
            return rc;
        if (rc)
            c->dead_age = ER_CHANGE_SET;
    }
    return 0;
}

static int check(const er_queue_patch *p, er_queue_change *c, er_error *err)
{
    if (p->obj.kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, "settings", "queue settings must be a JSON object");
    if (unknown(&p->obj, "", err) < 0)
        return ER_EINVAL;
    if (p->paused.kind != ER_SPEC_ABSENT) {
        if (p->paused.kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, "paused", "paused must be true or false");
        c->paused = ER_CHANGE_SET;
        c->paused_v = p->paused.v;
    }
    int64_t n = 0;
    int rc = er_spec_int_in(&p->concurrency, "concurrency", 0, INT_MAX, &n, err);
    if (rc < 0)
        return rc;
    if (rc) {
        c->concurrency = ER_CHANGE_SET;
        c->concurrency_v = (int)n;
    }
    if (p->rate_limit.kind == ER_SPEC_NULL) {
        c->rate = ER_CHANGE_CLEAR;
    } else if (p->rate_limit.kind != ER_SPEC_ABSENT) {
        if (p->rate_limit.kind == ER_SPEC_BAD_TYPE)
            return er_error_set(err, ER_EINVAL, "rate_limit",
                                "rate_limit must be an object {max, per_ms} or null");
        if (unknown(&p->rate_limit, "rate_limit", err) < 0)
            return ER_EINVAL;
        c->rate = ER_CHANGE_SET;
        if ((rc = er_spec_int_in(&p->rate_max, "rate_limit.max", 1, ER_RATE_MAX_MAX,
                                 &c->rate_max_v, err)) < 0)
            return rc;
        c->rate_max_given = rc > 0;
        if ((rc = er_spec_int_in(&p->rate_per_ms, "rate_limit.per_ms", 1, ER_DELAY_MAX_MS,
                                 &c->rate_per_v, err)) < 0)
            return rc;
        c->rate_per_given = rc > 0;
    }
    if ((rc = er_spec_int_in(&p->lease_ms, "lease_ms", ER_LEASE_MIN_MS, ER_LEASE_MAX_MS,
                             &c->lease_ms_v, err)) < 0)
        return rc;
    if (rc)
        c->lease_ms = ER_CHANGE_SET;
    if ((rc = er_spec_int_in(&p->max_stalled, "max_stalled", 0, ER_MAX_STALLED_MAX, &n, err)) < 0)
        return rc;
    if (rc) {
        c->max_stalled = ER_CHANGE_SET;
        c->max_stalled_v = (int)n;
    }
    if ((rc = er_spec_int_in(&p->max_started, "max_started", 1, ER_MAX_STARTED_MAX, &n, err)) < 0)
        return rc;
    if (rc) {
        c->max_started = ER_CHANGE_SET;
        c->max_started_v = (int)n;
    }
    if (check_defaults(&p->defaults, c, err) < 0)
        return ER_EINVAL;
    return check_retention(p, c, err);
}

int er_queue_patch_check(const er_queue_patch *p, er_queue_change *out, er_error *err)
{
    er_queue_change c;
    memset(&c, 0, sizeof c);
    int rc = check(p, &c, err);
    if (rc == 0)
        *out = c;
    return rc;
}

int er_queue_change_enforceable(const er_queue_change *c, er_error *err)
{
    if (c->rate == ER_CHANGE_SET)
        return er_error_set(err, ER_EINVAL, "rate_limit",
                            "rate_limit is not enforced by this version, so it is refused rather "
                            "than stored and ignored (null clears one stored before)");
    return 0;
}

/* ---- merging ---- */

static int merge_defaults(er_job_defaults *d, const er_queue_change *c, er_error *err)
{
    if (c->defaults == ER_CHANGE_CLEAR) {
        memset(d, 0, sizeof *d); /* back to the server's */
        return 0;
    }
    if (c->defaults != ER_CHANGE_SET)
        return 0;
    if (c->d_max_attempts != ER_CHANGE_KEEP) {
        d->has_max_attempts = c->d_max_attempts == ER_CHANGE_SET;
        d->max_attempts = d->has_max_attempts ? c->d_max_attempts_v : 0;
    }
    if (c->d_backoff == ER_CHANGE_CLEAR) {
        d->has_backoff = false;
        memset(&d->backoff, 0, sizeof d->backoff);
    } else if (c->d_backoff == ER_CHANGE_SET) {
        /* onto the current default backoff, or the server's */
        er_backoff base;
        if (d->has_backoff) {
            base = d->backoff;
        } else {
            er_job_defaults srv;
            er_job_defaults_server(&srv);
            base = srv.backoff;
        }
        er_backoff b = er_backoff_merge(&base, &c->d_backoff_v, c->d_backoff_given);
        if ((c->d_backoff_given & ER_BACKOFF_GIVEN_MAX) && b.max_delay_ms < b.delay_ms)
            return er_error_set(err, ER_EINVAL, "defaults.backoff.max_delay_ms",
                                "defaults.backoff.max_delay_ms must be >= delay_ms");
        d->backoff = b;
        d->has_backoff = true;
    }
    if (c->d_timeout != ER_CHANGE_KEEP) {
        d->has_timeout = c->d_timeout == ER_CHANGE_SET;
        d->timeout_ms = d->has_timeout ? c->d_timeout_v : 0;
    }
    if (c->d_priority != ER_CHANGE_KEEP) {
        d->has_priority = c->d_priority == ER_CHANGE_SET;
        d->priority = d->has_priority ? c->d_priority_v : 0;
    }
    return 0;
}

int er_queue_settings_change(er_queue_settings *s, const er_queue_change *c, er_error *err)
{
    er_queue_settings t = *s;
    if (c->paused == ER_CHANGE_SET)
        t.paused = c->paused_v;
    if (c->concurrency == ER_CHANGE_SET)
        t.concurrency = c->concurrency_v;
    if (c->rate == ER_CHANGE_CLEAR) {
        t.rate_max = t.rate_per_ms = 0;
    } else if (c->rate == ER_CHANGE_SET) {
        if (c->rate_max_given)
            t.rate_max = c->rate_max_v;
        if (c->rate_per_given)
            t.rate_per_ms = c->rate_per_v;
        if (t.rate_max <= 0)
            return er_error_set(err, ER_EINVAL, "rate_limit.max", "rate_limit.max is required");
        if (t.rate_per_ms <= 0)
            return er_error_set(err, ER_EINVAL, "rate_limit.per_ms",
                                "rate_limit.per_ms is required");
    }
    if (c->lease_ms == ER_CHANGE_SET)
        t.lease_ms = c->lease_ms_v;
    if (c->max_stalled == ER_CHANGE_SET)
        t.max_stalled = c->max_stalled_v;
    if (c->max_started == ER_CHANGE_SET)
        t.max_started = c->max_started_v;
    if (merge_defaults(&t.defaults, c, err) < 0)
        return ER_EINVAL;
    if (c->completed_age == ER_CHANGE_SET)
        t.retention.completed_age_s = c->completed_age_v;
    if (c->completed_count == ER_CHANGE_SET)
        t.retention.completed_count = c->completed_count_v;
    if (c->dead_age == ER_CHANGE_SET)
        t.retention.dead_age_s = c->dead_age_v;
    *s = t;
    return 0;
}
