/* SPDX-License-Identifier: MIT
 *
 * Scheduler specs, tick jobs and the missed-run planner (scheduler.h). The
 * planner never walks the whole downtime: on-time ticks are bounded by the
 * grace window, and missed ticks are found by searching backwards from the
 * end of the downtime in doubling windows, so a year offline costs about
 * as much as a minute.
 */
#include "core/scheduler.h"
#include "core/job_spec.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TZ_NAME_MAX 128

const char *er_missed_name(er_missed m)
{
    switch (m) {
    case ER_MISSED_ONCE: return "once";
    case ER_MISSED_ALL: return "all";
    case ER_MISSED_SKIP:
    default: return "skip";
    }
}

void er_scheduler_init(er_scheduler *s)
{
    memset(s, 0, sizeof *s);
    s->max_catchup = ER_SCHED_CATCHUP_DEFAULT;
}

void er_scheduler_fini(er_scheduler *s)
{
    if (!s)
        return;
    free(s->cron_text);
    free(s->tz_name);
    free(s->queue);
    free(s->name);
    json_decref(s->payload);
    json_decref(s->job);
    er_scheduler_init(s);
}

int er_scheduler_key_validate(const char *key, er_error *err)
{
    return er_name_validate(key, "key", err);
}

static int oom(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* util's zone name rule, and a spec's own length limit; no file is read. */
static int tz_name_check(const char *name, er_error *err)
{
    if (strlen(name) > TZ_NAME_MAX || !er_tz_name_valid(name))
        return er_error_set(err, ER_EINVAL, "tz", "tz '%.64s' is not a valid zone name", name);
    return 0;
}

static const char *const spec_fields[] = {"cron", "tz", "queue", "name", "payload",
                                          "missed", "max_catchup", "job", NULL};
/* Job options a schedule may set; id, run_at and the rest belong to the tick. */
static const char *const job_fields[] = {"priority", "max_attempts", "backoff",
                                         "timeout_ms", "group", "trace_id", NULL};

static int check_keys(const json_t *obj, const char *const *allowed, const char *prefix,
                      er_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(*a, key) == 0;
        if (!ok) {
            char f[64];
            snprintf(f, sizeof f, "%s%s", prefix, key);
            return er_error_set(err, ER_EINVAL, f, "unknown field %s", f);
        }
    }
    return 0;
}

static int get_string(const json_t *obj, const char *key, bool required, const char **out,
                      er_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            return er_error_set(err, ER_EINVAL, key, "%s is required", key);
        *out = NULL;
        return 0;
    }
    if (!json_is_string(v))
        return er_error_set(err, ER_EINVAL, key, "%s must be a string", key);
    *out = json_string_value(v);
    return 0;
}

static int parse(const json_t *spec, size_t payload_max, er_scheduler *s, er_error *err)
{
    if (!json_is_object(spec))
        return er_error_set(err, ER_EINVAL, "body", "a scheduler spec must be a JSON object");
    int rc = check_keys(spec, spec_fields, "", err);
    const char *str = NULL;
    if (rc == 0)
        rc = get_string(spec, "cron", true, &str, err);
    if (rc < 0)
        return rc;
    while (isspace((unsigned char)*str))
        str++;
    size_t n = strlen(str);
    while (n > 0 && isspace((unsigned char)str[n - 1]))
        n--;
    if (n == 0)
        return er_error_set(err, ER_EINVAL, "cron", "cron must not be empty");
    if (n > ER_SCHED_CRON_MAX)
        return er_error_set(err, ER_EINVAL, "cron", "cron is longer than %d bytes",
                            ER_SCHED_CRON_MAX);
    if (!(s->cron_text = strndup(str, n)))
        return oom(err);
    if ((rc = er_cron_parse(s->cron_text, &s->cron, err)) < 0)
        return rc;

    if ((rc = get_string(spec, "tz", false, &str, err)) < 0)
        return rc;
    if (!str || !*str)
        str = "UTC";
    if ((rc = tz_name_check(str, err)) < 0)
        return rc;
    if (!(s->tz_name = strdup(str)))
        return oom(err);

    if ((rc = get_string(spec, "queue", true, &str, err)) < 0 ||
        (rc = er_name_validate(str, "queue", err)) < 0)
        return rc;
    if (!(s->queue = strdup(str)))
        return oom(err);
    if ((rc = get_string(spec, "name", true, &str, err)) < 0 ||
        (rc = er_name_validate(str, "name", err)) < 0)
        return rc;
    if (!(s->name = strdup(str)))
        return oom(err);

    json_t *v = json_object_get(spec, "payload");
    if (!v || json_is_null(v)) {
        s->payload = json_object();
    } else if (!json_is_object(v)) {
        return er_error_set(err, ER_EINVAL, "payload",
                            "payload must be a JSON object (the tick adds run_key to it)");
    } else {
        s->payload = json_deep_copy(v);
    }
    if (!s->payload)
        return oom(err);
    char *text = json_dumps(s->payload, JSON_COMPACT);
    if (!text)
        return oom(err);
    size_t plen = strlen(text);
    free(text);
    if (plen > payload_max)
        return er_error_set(err, ER_ETOOBIG, "payload", "payload is %zu bytes; the limit is %zu",
                            plen, payload_max);

    if ((rc = get_string(spec, "missed", false, &str, err)) < 0)
        return rc;
    if (!str || strcmp(str, "skip") == 0)
        s->missed = ER_MISSED_SKIP;
    else if (strcmp(str, "once") == 0)
        s->missed = ER_MISSED_ONCE;
    else if (strcmp(str, "all") == 0)
        s->missed = ER_MISSED_ALL;
    else
        return er_error_set(err, ER_EINVAL, "missed", "missed must be skip, once or all");

    v = json_object_get(spec, "max_catchup");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > ER_SCHED_CATCHUP_MAX)
            return er_error_set(err, ER_EINVAL, "max_catchup",
                                "max_catchup must be an integer 1..%d", ER_SCHED_CATCHUP_MAX);
        s->max_catchup = (int)json_integer_value(v);
    }

    v = json_object_get(spec, "job");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return er_error_set(err, ER_EINVAL, "job", "job must be an object of job options");
        if ((rc = check_keys(v, job_fields, "job.", err)) < 0)
            return rc;
        if (!(s->job = json_deep_copy(v)))
            return oom(err);
        /* validate the options as an enqueue would */
        er_rand r;
        er_rand_init_seeded(&r, 1);
        er_job probe;
        rc = er_scheduler_job(s, "probe", 0, 0, &r, &probe, err);
        if (rc < 0) {
            if (err && rc == ER_EINVAL && strncmp(err->field, "job.", 4) != 0) {
                char f[sizeof err->field];
                memcpy(f, err->field, sizeof f);
                snprintf(err->field, sizeof err->field, "job.%.59s", f);
            }
            return rc;
        }
        er_job_fini(&probe);
    }
    return 0;
}

int er_scheduler_from_json(const json_t *spec, size_t payload_max, er_scheduler *out,
                           er_error *err)
{
    er_scheduler_init(out);
    int rc = parse(spec, payload_max, out, err);
    if (rc < 0)
        er_scheduler_fini(out);
    return rc;
}

int er_scheduler_set_zone(er_scheduler *s, const er_tz *tz, er_error *err)
{
    int64_t next;
    /* "0 0 30 2 *" parses but never fires: refuse it now */
    if (er_cron_next(&s->cron, tz, 0, &next, err) < 0)
        return er_error_set(err, ER_EINVAL, "cron", "cron '%.64s' never fires", s->cron_text);
    s->tz = tz;
    return 0;
}

json_t *er_scheduler_spec_json(const er_scheduler *s)
{
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:O,s:s,s:i}", "cron", s->cron_text, "tz",
                          s->tz_name, "queue", s->queue, "name", s->name, "payload", s->payload,
                          "missed", er_missed_name(s->missed), "max_catchup", s->max_catchup);
    if (o && s->job && json_object_set(o, "job", s->job) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *er_scheduler_spec_text(const er_scheduler *s)
{
    json_t *o = er_scheduler_spec_json(s);
    if (!o)
        return NULL;
    char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return text;
}

void er_scheduler_tick_id(const char *key, int64_t tick, char out[ER_ID_MAX + 1])
{
    char t[32];
    er_time_format(tick, t);
    snprintf(out, ER_ID_MAX + 1, "sched:%s:%s", key, t);
}

int er_scheduler_job(const er_scheduler *s, const char *key, int64_t tick, int64_t now,
                     er_rand *r, er_job *job, er_error *err)
{
    er_job_init(job);
    char id[ER_ID_MAX + 1], t[32];
    er_scheduler_tick_id(key, tick, id);
    er_time_format(tick, t);
    json_t *obj = s->job ? json_deep_copy(s->job) : json_object();
    json_t *payload = json_deep_copy(s->payload);
    int rc = 0;
    if (!obj || !payload || json_object_set_new(payload, "run_key", json_string(t)) != 0 ||
        json_object_set_new(obj, "payload", payload) != 0) {
        json_decref(obj);
        return oom(err);
    }
    payload = NULL; /* owned by obj now */
    if (json_object_set_new(obj, "id", json_string(id)) != 0 ||
        json_object_set_new(obj, "name", json_string(s->name)) != 0)
        rc = oom(err);
    er_job_spec sp = {0};
    er_job_limits lim = {.payload_max = (size_t)-1};
    if (rc == 0 && (rc = er_job_spec_from_json(obj, s->queue, &sp, err)) == 0)
        rc = er_job_validate(&sp, &lim, now, r, job, err);
    er_job_spec_fini(&sp);
    json_decref(obj);
    return rc;
}

void er_sched_plan_fini(er_sched_plan *p)
{
    if (!p)
        return;
    free(p->ticks);
    memset(p, 0, sizeof *p);
}

int64_t er_scheduler_next(const er_scheduler *s, int64_t after)
{
    int64_t next;
    if (er_cron_next(&s->cron, s->tz, after, &next, NULL) < 0)
        return INT64_MAX;
    return next;
}

/* The latest k ticks in [lo, hi] into out[] (oldest first), *n of them.
 * Searches back from hi in doubling windows so the work depends on k, not
 * on hi - lo. Returns 0 or ER_ENOMEM. */
static int latest_ticks(const er_scheduler *s, int64_t lo, int64_t hi, size_t k,
                        int64_t *out, size_t *n)
{
    *n = 0;
    if (k == 0 || lo > hi)
        return 0;
    int64_t *ring = out; /* reuse out as the ring buffer, unrolled below */
    for (int64_t w = 1000;; w *= 2) {
        int64_t start = hi - w < lo - 1 ? lo - 1 : hi - w; /* ticks strictly after start */
        size_t count = 0, head = 0;
        for (int64_t t = er_scheduler_next(s, start); t <= hi;
             t = er_scheduler_next(s, t)) {
            ring[head] = t;
            head = (head + 1) % k;
            count++;
        }
        if (count >= k || start == lo - 1 || w > INT64_MAX / 4) {
            size_t m = count < k ? count : k;
            /* rotate so the oldest comes first */
            int64_t *tmp = malloc((m ? m : 1) * sizeof *tmp);
            if (!tmp)
                return ER_ENOMEM;
            size_t first = count < k ? 0 : head;
            for (size_t i = 0; i < m; i++)
                tmp[i] = ring[(first + i) % k];
            memcpy(out, tmp, m * sizeof *tmp);
            free(tmp);
            *n = m;
            return 0;
        }
    }
}

int er_scheduler_plan(const er_scheduler *s, int64_t next_run_at, int64_t now,
                      int64_t on_time_after, er_sched_plan *out, er_error *err)
{
    memset(out, 0, sizeof *out);
    out->next_run_at = next_run_at;
    if (next_run_at > now)
        return 0;
    size_t k = s->missed == ER_MISSED_SKIP ? 0
             : s->missed == ER_MISSED_ONCE ? 1
                                           : (size_t)s->max_catchup;
    out->ticks = malloc((k + ER_SCHED_ONTIME_MAX) * sizeof *out->ticks);
    if (!out->ticks)
        return oom(err);

    /* missed: due ticks at or before on_time_after */
    if (next_run_at <= on_time_after) {
        out->had_missed = true;
        int64_t hi = on_time_after < now ? on_time_after : now;
        if (latest_ticks(s, next_run_at, hi, k, out->ticks, &out->n) < 0) {
            er_sched_plan_fini(out);
            return oom(err);
        }
        out->missed_fired = out->n;
    }

    /* on time: due ticks after on_time_after */
    int64_t from = next_run_at - 1 > on_time_after ? next_run_at - 1 : on_time_after;
    int64_t last = now;
    size_t ontime = 0;
    for (int64_t t = er_scheduler_next(s, from); t <= now; t = er_scheduler_next(s, t)) {
        if (ontime == ER_SCHED_ONTIME_MAX) {
            last = out->ticks[out->n - 1]; /* the rest fire on the next pass */
            break;
        }
        out->ticks[out->n++] = t;
        ontime++;
    }
    out->next_run_at = er_scheduler_next(s, last);
    return 0;
}

void er_time_format_local(int64_t ms, const er_tz *tz, char out[32])
{
    int32_t off = er_tz_offset(tz, ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    char buf[32];
    er_time_format(ms + (int64_t)off * 1000, buf);
    int32_t a = off < 0 ? -off : off;
    snprintf(out, 32, "%.19s%c%02d:%02d", buf, off < 0 ? '-' : '+', (int)(a / 3600),
             (int)(a % 3600 / 60));
}
