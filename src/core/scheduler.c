/* SPDX-License-Identifier: MIT
 *
 * Scheduler specs, tick jobs and the missed-run planner (scheduler.h). The
 * planner never walks the whole downtime: on-time ticks are bounded by the
 * grace window, and missed ticks are found by searching backwards from the
 * end of the downtime in doubling windows, so a year offline costs about
 * as much as a minute. jansson is used for one thing: setting run_key in a
 * tick's payload, which is job data (a JSON object the user gave) rather
 * than an API or storage shape, and editing it takes a JSON parser.
 */
#include "core/scheduler.h"

#include <ctype.h>
#include <jansson.h>
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
    free(s->payload);
    free(s->opts_text);
    er_scheduler_init(s);
}

void er_sched_spec_fini(er_sched_spec *spec)
{
    if (!spec)
        return;
    free(spec->payload_buf);
    spec->payload_buf = NULL;
}

int er_scheduler_key_validate(const char *key, er_error *err)
{
    return er_name_validate(key, "key", err);
}

static int oom(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

static const char *const spec_fields[] = {"cron", "tz", "queue", "name", "payload",
                                          "missed", "max_catchup", "job", NULL};
/* Job options a schedule may set; id, run_at and the rest belong to the tick. */
static const char *const job_fields[] = {"priority", "max_attempts", "backoff",
                                         "timeout_ms", "group", "trace_id", NULL};

static bool in_list(const char *const *list, const char *s, size_t n)
{
    for (const char *const *f = list; *f; f++)
        if (strlen(*f) == n && memcmp(*f, s, n) == 0)
            return true;
    return false;
}

bool er_sched_spec_field_known(const char *s, size_t n)
{
    return in_list(spec_fields, s, n);
}

bool er_sched_job_field_known(const char *s, size_t n)
{
    return in_list(job_fields, s, n);
}

/* "unknown field {prefix}{name}", the field cut to 63 bytes. */
static int unknown_field(const er_spec_str *u, const char *prefix, er_error *err)
{
    char f[64];
    snprintf(f, sizeof f, "%s%.*s", prefix, (int)(u->n < sizeof f ? u->n : sizeof f), u->s);
    return er_error_set(err, ER_EINVAL, f, "unknown field %s", f);
}

/* A string member into *out (owned); required ones must be present. */
static int take_string(const er_spec_str *v, const char *field, bool required, char **out,
                       er_error *err)
{
    *out = NULL;
    if (v->kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, field, "%s must be a string", field);
    if (v->kind != ER_SPEC_SET)
        return required ? er_error_set(err, ER_EINVAL, field, "%s is required", field) : 0;
    return (*out = strndup(v->s, v->n)) ? 0 : oom(err);
}

static int check_cron(const er_spec_str *v, er_scheduler *s, er_error *err)
{
    if (v->kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "cron", "cron must be a string");
    if (v->kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, "cron", "cron is required");
    const char *str = v->s;
    size_t n = v->n;
    while (n > 0 && isspace((unsigned char)*str)) {
        str++;
        n--;
    }
    while (n > 0 && isspace((unsigned char)str[n - 1]))
        n--;
    if (n == 0)
        return er_error_set(err, ER_EINVAL, "cron", "cron must not be empty");
    if (n > ER_SCHED_CRON_MAX)
        return er_error_set(err, ER_EINVAL, "cron", "cron is longer than %d bytes",
                            ER_SCHED_CRON_MAX);
    if (!(s->cron_text = strndup(str, n)))
        return oom(err);
    return er_cron_parse(s->cron_text, &s->cron, err);
}

/* util's zone name rule, and a spec's own length limit; no file is read. */
static int check_tz(const er_spec_str *v, er_scheduler *s, er_error *err)
{
    int rc = take_string(v, "tz", false, &s->tz_name, err);
    if (rc < 0)
        return rc;
    if (!s->tz_name || !*s->tz_name) {
        free(s->tz_name);
        if (!(s->tz_name = strdup("UTC")))
            return oom(err);
    }
    if (strlen(s->tz_name) > TZ_NAME_MAX || !er_tz_name_valid(s->tz_name))
        return er_error_set(err, ER_EINVAL, "tz", "tz '%.64s' is not a valid zone name",
                            s->tz_name);
    return 0;
}

static int check_payload(const er_spec_str *v, size_t payload_max, er_scheduler *s,
                         er_error *err)
{
    if (v->kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "payload",
                            "payload must be a JSON object (the tick adds run_key to it)");
    er_spec_str empty = {ER_SPEC_SET, "{}", 2};
    const er_spec_str *p = v->kind == ER_SPEC_SET ? v : &empty;
    if (p->n > payload_max)
        return er_error_set(err, ER_ETOOBIG, "payload", "payload is %zu bytes; the limit is %zu",
                            p->n, payload_max);
    return (s->payload = strndup(p->s, p->n)) ? 0 : oom(err);
}

static int check_policy(const er_sched_spec *sp, er_scheduler *s, er_error *err)
{
    const er_spec_str *m = &sp->missed;
    if (m->kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "missed", "missed must be a string");
    if (m->kind != ER_SPEC_SET || (m->n == 4 && memcmp(m->s, "skip", 4) == 0))
        s->missed = ER_MISSED_SKIP;
    else if (m->n == 4 && memcmp(m->s, "once", 4) == 0)
        s->missed = ER_MISSED_ONCE;
    else if (m->n == 3 && memcmp(m->s, "all", 3) == 0)
        s->missed = ER_MISSED_ALL;
    else
        return er_error_set(err, ER_EINVAL, "missed", "missed must be skip, once or all");

    const er_spec_int *c = &sp->max_catchup;
    if (c->kind == ER_SPEC_BAD_TYPE ||
        (c->kind == ER_SPEC_SET && (c->v < 1 || c->v > ER_SCHED_CATCHUP_MAX)))
        return er_error_set(err, ER_EINVAL, "max_catchup",
                            "max_catchup must be an integer 1..%d", ER_SCHED_CATCHUP_MAX);
    if (c->kind == ER_SPEC_SET)
        s->max_catchup = (int)c->v;
    return 0;
}

/* ---- job options ---- */

static void int_opt(const er_spec_int *in, er_spec_int *out)
{
    *out = in->kind == ER_SPEC_NULL ? (er_spec_int){0} : *in;
}

static void str_opt(const er_spec_str *in, er_spec_str *out)
{
    *out = in->kind == ER_SPEC_NULL ? (er_spec_str){0} : *in;
}

/* The options of o as a request gives them: a null member is absent. */
static void options_of(const er_job_spec *o, er_job_spec *sp)
{
    int_opt(&o->priority, &sp->priority);
    int_opt(&o->max_attempts, &sp->max_attempts);
    int_opt(&o->timeout_ms, &sp->timeout_ms);
    str_opt(&o->group, &sp->group);
    str_opt(&o->trace_id, &sp->trace_id);
    const er_backoff_spec *b = &o->backoff;
    if (b->kind == ER_SPEC_NULL)
        return;
    sp->backoff.kind = b->kind;
    sp->backoff.unknown = b->unknown;
    str_opt(&b->type, &sp->backoff.type);
    int_opt(&b->delay_ms, &sp->backoff.delay_ms);
    int_opt(&b->max_delay_ms, &sp->backoff.max_delay_ms);
    sp->backoff.jitter = b->jitter.kind == ER_SPEC_NULL ? (er_spec_num){0} : b->jitter;
}

static er_spec_str slice_of(const char *s)
{
    return (er_spec_str){ER_SPEC_SET, s, strlen(s)};
}

/* The options' text (group, trace_id, backoff.type) into one owned buffer,
 * with out's slices pointing there; the other options are plain values. */
static int own_options(const er_job_spec *in, er_job_spec *out, char **buf, er_error *err)
{
    memset(out, 0, sizeof *out);
    out->priority = in->priority;
    out->max_attempts = in->max_attempts;
    out->timeout_ms = in->timeout_ms;
    out->backoff = in->backoff;
    out->backoff.unknown = (er_spec_str){0};
    const er_spec_str *src[3] = {&in->group, &in->trace_id, &in->backoff.type};
    er_spec_str *dst[3] = {&out->group, &out->trace_id, &out->backoff.type};
    size_t total = 1;
    for (int i = 0; i < 3; i++)
        total += src[i]->kind == ER_SPEC_SET ? src[i]->n + 1 : 0;
    char *p = *buf = malloc(total);
    if (!p)
        return oom(err);
    for (int i = 0; i < 3; i++) {
        *dst[i] = *src[i];
        if (src[i]->kind != ER_SPEC_SET)
            continue;
        memcpy(p, src[i]->s, src[i]->n);
        p[src[i]->n] = '\0';
        dst[i]->s = p;
        p += src[i]->n + 1;
    }
    return 0;
}

/* Validates the options as an enqueue of a tick would, naming the field
 * "job.*". */
static int check_options(const er_sched_spec *sp, er_scheduler *s, er_error *err)
{
    if (sp->job == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "job", "job must be an object of job options");
    if (sp->job != ER_SPEC_SET)
        return 0;
    if (sp->opts.unknown.kind != ER_SPEC_ABSENT)
        return unknown_field(&sp->opts.unknown, "job.", err);
    er_job_spec probe = {0};
    options_of(&sp->opts, &probe);
    probe.queue = slice_of(s->queue);
    probe.name = slice_of(s->name);
    probe.id = slice_of("sched:probe:1970-01-01T00:00:00.000Z");
    er_job_limits lim = {.payload_max = (size_t)-1};
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_job job;
    int rc = er_job_validate(&probe, &lim, 0, &r, &job, err);
    if (rc < 0) {
        if (err && rc == ER_EINVAL) {
            char f[sizeof err->field];
            memcpy(f, err->field, sizeof f);
            snprintf(err->field, sizeof err->field, "job.%.59s", f);
        }
        return rc;
    }
    er_job_fini(&job);
    s->has_job = true;
    s->jitter_integer = sp->jitter_integer && sp->opts.backoff.jitter.kind == ER_SPEC_SET;
    return own_options(&sp->opts, &s->opts, &s->opts_text, err);
}

static int validate(const er_sched_spec *sp, size_t payload_max, er_scheduler *s,
                    er_error *err)
{
    int rc;
    if (sp->unknown.kind != ER_SPEC_ABSENT)
        return unknown_field(&sp->unknown, "", err);
    if ((rc = check_cron(&sp->cron, s, err)) < 0 || (rc = check_tz(&sp->tz, s, err)) < 0)
        return rc;
    if ((rc = take_string(&sp->queue, "queue", true, &s->queue, err)) < 0 ||
        (rc = er_name_validate(s->queue, "queue", err)) < 0)
        return rc;
    if ((rc = take_string(&sp->name, "name", true, &s->name, err)) < 0 ||
        (rc = er_name_validate(s->name, "name", err)) < 0)
        return rc;
    if ((rc = check_payload(&sp->payload, payload_max, s, err)) < 0 ||
        (rc = check_policy(sp, s, err)) < 0)
        return rc;
    return check_options(sp, s, err);
}

int er_sched_validate(const er_sched_spec *spec, size_t payload_max, er_scheduler *out,
                      er_error *err)
{
    er_scheduler_init(out);
    int rc = validate(spec, payload_max, out, err);
    if (rc < 0)
        er_scheduler_fini(out);
    return rc;
}

static int dup_field(char **dst, const char *src)
{
    return !src || (*dst = strdup(src)) ? 0 : -1;
}

int er_scheduler_copy(er_scheduler *dst, const er_scheduler *src, er_error *err)
{
    er_scheduler_init(dst);
    int bad = dup_field(&dst->cron_text, src->cron_text) | dup_field(&dst->tz_name, src->tz_name) |
              dup_field(&dst->queue, src->queue) | dup_field(&dst->name, src->name) |
              dup_field(&dst->payload, src->payload);
    if (!bad && src->has_job && own_options(&src->opts, &dst->opts, &dst->opts_text, err) < 0)
        bad = 1;
    if (bad) {
        er_scheduler_fini(dst);
        return oom(err);
    }
    dst->cron = src->cron;
    dst->tz = src->tz;
    dst->missed = src->missed;
    dst->max_catchup = src->max_catchup;
    dst->has_job = src->has_job;
    dst->jitter_integer = src->jitter_integer;
    return 0;
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

void er_scheduler_tick_id(const char *key, int64_t tick, char out[ER_ID_MAX + 1])
{
    char t[32];
    er_time_format(tick, t);
    snprintf(out, ER_ID_MAX + 1, "sched:%s:%s", key, t);
}

/* The payload of a tick: s->payload with run_key set (see er_scheduler_job)
 * into *out (owned text). Returns 0, ER_ENOMEM, or ER_EINVAL for a payload
 * that is not a JSON object (a validated spec's never is). */
static int tick_payload(const char *payload, const char *tick, char **out, er_error *err)
{
    *out = NULL;
    json_error_t je;
    json_t *o = json_loads(payload, 0, &je);
    int rc = 0;
    if (!json_is_object(o))
        rc = er_error_set(err, ER_EINVAL, "payload", "payload must be a JSON object");
    else if (json_object_set_new(o, "run_key", json_string(tick)) != 0 ||
             !(*out = json_dumps(o, JSON_COMPACT)))
        rc = oom(err);
    json_decref(o);
    return rc;
}

int er_scheduler_job(const er_scheduler *s, const char *key, int64_t tick, int64_t now,
                     er_rand *r, er_job *job, er_error *err)
{
    er_job_init(job);
    char id[ER_ID_MAX + 1], t[32];
    er_scheduler_tick_id(key, tick, id);
    er_time_format(tick, t);
    er_job_spec sp = {0};
    if (s->has_job)
        options_of(&s->opts, &sp);
    sp.queue = slice_of(s->queue);
    sp.name = slice_of(s->name);
    sp.id = slice_of(id);
    int rc = tick_payload(s->payload, t, &sp.payload_buf, err);
    if (rc < 0)
        return rc;
    sp.payload = slice_of(sp.payload_buf);
    er_job_limits lim = {.payload_max = (size_t)-1};
    rc = er_job_validate(&sp, &lim, now, r, job, err);
    er_job_spec_fini(&sp);
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
