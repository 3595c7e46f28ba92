/* SPDX-License-Identifier: MIT
 *
 * Queue settings: defaults, validation of a PUT /v1/queues/{queue} body, the
 * field-by-field merge, and the JSON form the stores persist and the API
 * shows. Pure logic; a rejected body leaves the settings as they were.
 */
#include "core/queue.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#define RATE_MAX_MAX 1000000000LL /* bounds keep rate arithmetic far from overflow */
#define MAX_STALLED_MAX 1000
#define MAX_STARTED_MAX 100000
#define RETENTION_DEFAULT_AGE_S (7 * 24 * 3600)

void er_queue_settings_default(er_queue_settings *s)
{
    memset(s, 0, sizeof *s);
    s->lease_ms = ER_DEFAULT_LEASE_MS;
    s->max_stalled = ER_DEFAULT_MAX_STALLED;
    s->max_started = ER_DEFAULT_MAX_STARTED;
    s->retention.completed_age_s = RETENTION_DEFAULT_AGE_S;
    s->retention.completed_count = 0;
    s->retention.dead_age_s = 0; /* keep */
}

static void field_name(char out[64], const char *prefix, const char *name)
{
    snprintf(out, 64, "%s%s%s", prefix, *prefix ? "." : "", name);
}

/* An integer lo..hi; hi of INT_MAX or more reads as ">= lo" in the message. */
static int get_int(const json_t *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                   er_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        if (hi >= INT_MAX)
            return er_error_set(err, ER_EINVAL, field, "%s must be an integer >= %lld", field,
                                (long long)lo);
        return er_error_set(err, ER_EINVAL, field, "%s must be an integer %lld..%lld", field,
                            (long long)lo, (long long)hi);
    }
    *out = json_integer_value(v);
    return 0;
}

static int unknown(const char *field, bool strict, er_error *err)
{
    if (!strict)
        return 0;
    return er_error_set(err, ER_EINVAL, field, "%s is not a known field", field);
}

/* rate_limit: null clears it; an object merges onto the current limit, and
 * afterwards both max and per_ms must be set. */
static int parse_rate(const json_t *v, bool strict, er_queue_settings *t, er_error *err)
{
    char f[64];
    if (json_is_null(v)) {
        t->rate_max = t->rate_per_ms = 0;
        return 0;
    }
    if (!json_is_object(v))
        return er_error_set(err, ER_EINVAL, "rate_limit",
                            "rate_limit must be an object {max, per_ms} or null");
    const char *key;
    json_t *val;
    int64_t n = 0;
    json_object_foreach((json_t *)v, key, val) {
        field_name(f, "rate_limit", key);
        if (strcmp(key, "max") == 0) {
            if (get_int(val, f, 1, RATE_MAX_MAX, &n, err) < 0)
                return ER_EINVAL;
            t->rate_max = n;
        } else if (strcmp(key, "per_ms") == 0) {
            if (get_int(val, f, 1, ER_DELAY_MAX_MS, &n, err) < 0)
                return ER_EINVAL;
            t->rate_per_ms = n;
        } else if (unknown(f, strict, err) < 0) {
            return ER_EINVAL;
        }
    }
    if (t->rate_max <= 0)
        return er_error_set(err, ER_EINVAL, "rate_limit.max", "rate_limit.max is required");
    if (t->rate_per_ms <= 0)
        return er_error_set(err, ER_EINVAL, "rate_limit.per_ms",
                            "rate_limit.per_ms is required");
    return 0;
}

static int parse_retention(const json_t *v, bool strict, er_retention *r, er_error *err)
{
    char f[64];
    if (!json_is_object(v))
        return er_error_set(err, ER_EINVAL, "retention",
                            "retention must be an object {completed, dead}");
    const char *key, *k2;
    json_t *val, *v2;
    int64_t n = 0;
    json_object_foreach((json_t *)v, key, val) {
        field_name(f, "retention", key);
        if (strcmp(key, "completed") == 0) {
            if (!json_is_object(val))
                return er_error_set(err, ER_EINVAL, f,
                                    "%s must be an object {age_s, count}", f);
            json_object_foreach(val, k2, v2) {
                field_name(f, "retention.completed", k2);
                if (strcmp(k2, "age_s") == 0 || strcmp(k2, "count") == 0) {
                    if (get_int(v2, f, 0, INT64_MAX, &n, err) < 0)
                        return ER_EINVAL;
                    if (k2[0] == 'a')
                        r->completed_age_s = n;
                    else
                        r->completed_count = n;
                } else if (unknown(f, strict, err) < 0) {
                    return ER_EINVAL;
                }
            }
        } else if (strcmp(key, "dead") == 0) {
            if (json_is_string(val) && strcmp(json_string_value(val), "keep") == 0) {
                r->dead_age_s = 0;
                continue;
            }
            if (!json_is_object(val))
                return er_error_set(err, ER_EINVAL, f,
                                    "%s must be \"keep\" or an object {age_s}", f);
            json_object_foreach(val, k2, v2) {
                field_name(f, "retention.dead", k2);
                if (strcmp(k2, "age_s") == 0) {
                    if (get_int(v2, f, 1, INT64_MAX, &n, err) < 0)
                        return ER_EINVAL;
                    r->dead_age_s = n;
                } else if (unknown(f, strict, err) < 0) {
                    return ER_EINVAL;
                }
            }
        } else if (unknown(f, strict, err) < 0) {
            return ER_EINVAL;
        }
    }
    return 0;
}

/* Applies body onto *s; on error *s is unchanged. `strict` refuses unknown
 * fields (requests); stored text is read leniently so a newer server's
 * fields do not make an older one fail. */
static int apply(er_queue_settings *s, const json_t *body, bool strict, er_error *err)
{
    if (!json_is_object(body))
        return er_error_set(err, ER_EINVAL, "settings", "queue settings must be a JSON object");
    er_queue_settings t = *s;
    const char *key;
    json_t *val;
    int64_t n = 0;
    json_object_foreach((json_t *)body, key, val) {
        if (strcmp(key, "paused") == 0) {
            if (!json_is_boolean(val))
                return er_error_set(err, ER_EINVAL, key, "paused must be true or false");
            t.paused = json_is_true(val);
        } else if (strcmp(key, "concurrency") == 0) {
            if (get_int(val, key, 0, INT_MAX, &n, err) < 0)
                return ER_EINVAL;
            t.concurrency = (int)n;
        } else if (strcmp(key, "rate_limit") == 0) {
            if (parse_rate(val, strict, &t, err) < 0)
                return ER_EINVAL;
        } else if (strcmp(key, "lease_ms") == 0) {
            if (get_int(val, key, ER_LEASE_MIN_MS, ER_LEASE_MAX_MS, &n, err) < 0)
                return ER_EINVAL;
            t.lease_ms = n;
        } else if (strcmp(key, "max_stalled") == 0) {
            if (get_int(val, key, 0, MAX_STALLED_MAX, &n, err) < 0)
                return ER_EINVAL;
            t.max_stalled = (int)n;
        } else if (strcmp(key, "max_started") == 0) {
            if (get_int(val, key, 1, MAX_STARTED_MAX, &n, err) < 0)
                return ER_EINVAL;
            t.max_started = (int)n;
        } else if (strcmp(key, "defaults") == 0) {
            if (json_is_null(val))
                memset(&t.defaults, 0, sizeof t.defaults); /* back to the server's */
            else if (er_job_defaults_merge(&t.defaults, val, "defaults", strict, err) < 0)
                return ER_EINVAL;
        } else if (strcmp(key, "retention") == 0) {
            if (parse_retention(val, strict, &t.retention, err) < 0)
                return ER_EINVAL;
        } else if (unknown(key, strict, err) < 0) {
            return ER_EINVAL;
        }
    }
    *s = t;
    return 0;
}

int er_queue_settings_merge(er_queue_settings *s, const json_t *body, er_error *err)
{
    return apply(s, body, true, err);
}

int er_queue_settings_from_json(const json_t *obj, er_queue_settings *s, er_error *err)
{
    er_queue_settings t;
    er_queue_settings_default(&t);
    int rc = apply(&t, obj, false, err);
    if (rc == 0)
        *s = t;
    return rc;
}

json_t *er_queue_settings_to_json(const er_queue_settings *s)
{
    json_t *rate = s->rate_max > 0 ? json_pack("{s:I, s:I}", "max", (json_int_t)s->rate_max,
                                               "per_ms", (json_int_t)s->rate_per_ms)
                                   : json_null();
    json_t *dead = s->retention.dead_age_s > 0
                       ? json_pack("{s:I}", "age_s", (json_int_t)s->retention.dead_age_s)
                       : json_string("keep");
    /* json_pack's "o" steals each value, and fails on a NULL one. */
    return json_pack("{s:b, s:i, s:o, s:I, s:i, s:i, s:o, s:{s:{s:I, s:I}, s:o}}", "paused",
                     (int)s->paused, "concurrency", s->concurrency, "rate_limit", rate,
                     "lease_ms", (json_int_t)s->lease_ms, "max_stalled", s->max_stalled,
                     "max_started", s->max_started, "defaults",
                     er_job_defaults_to_json(&s->defaults), "retention", "completed", "age_s",
                     (json_int_t)s->retention.completed_age_s, "count",
                     (json_int_t)s->retention.completed_count, "dead", dead);
}
