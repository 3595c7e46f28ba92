/* SPDX-License-Identifier: MIT
 *
 * The stored scheduler spec (sched_codec.h), version 1, through jansson:
 * encoding sorts keys at every depth with JSON_SORT_KEYS, and decoding reads
 * the members into an er_sched_spec for core's er_sched_validate, so a
 * stored spec is held to the rules a new one is.
 */
#include "store/sched_codec.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int oom(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* ---- encoding ---- */

/* A given option as a JSON value: null when it was given as null. */
static json_t *opt_int(const er_spec_int *v)
{
    return v->kind == ER_SPEC_NULL ? json_null() : json_integer(v->v);
}

static json_t *opt_str(const er_spec_str *v)
{
    return v->kind == ER_SPEC_NULL ? json_null() : json_stringn(v->s, v->n);
}

/* Adds key: value to o when the option was given (value is a new
 * reference, dropped when it was not). Returns 0 or -1. */
static int add(json_t *o, const char *key, er_spec_kind given, json_t *value)
{
    if (given == ER_SPEC_ABSENT) {
        json_decref(value);
        return 0;
    }
    return json_object_set_new(o, key, value);
}

static json_t *backoff_value(const er_scheduler *s)
{
    const er_backoff_spec *b = &s->opts.backoff;
    if (b->kind == ER_SPEC_NULL)
        return json_null();
    json_t *o = json_object();
    const er_spec_num *j = &b->jitter;
    json_t *jit = j->kind == ER_SPEC_NULL ? json_null()
                  : s->jitter_integer     ? json_integer((json_int_t)j->v)
                                          : json_real(j->v);
    if (!o || add(o, "type", b->type.kind, opt_str(&b->type)) ||
        add(o, "delay_ms", b->delay_ms.kind, opt_int(&b->delay_ms)) ||
        add(o, "max_delay_ms", b->max_delay_ms.kind, opt_int(&b->max_delay_ms)) ||
        add(o, "jitter", j->kind, jit)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *job_value(const er_scheduler *s)
{
    const er_job_spec *p = &s->opts;
    json_t *o = json_object();
    if (!o || add(o, "priority", p->priority.kind, opt_int(&p->priority)) ||
        add(o, "max_attempts", p->max_attempts.kind, opt_int(&p->max_attempts)) ||
        add(o, "timeout_ms", p->timeout_ms.kind, opt_int(&p->timeout_ms)) ||
        add(o, "group", p->group.kind, opt_str(&p->group)) ||
        add(o, "trace_id", p->trace_id.kind, opt_str(&p->trace_id)) ||
        (p->backoff.kind != ER_SPEC_ABSENT &&
         json_object_set_new(o, "backoff", backoff_value(s)) != 0)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int er_sched_codec_encode(const er_scheduler *s, char **out, er_error *err)
{
    *out = NULL;
    json_t *payload = json_loads(s->payload, 0, NULL);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:O,s:s,s:i}", "cron", s->cron_text, "tz", s->tz_name,
                          "queue", s->queue, "name", s->name, "payload", payload, "missed",
                          er_missed_name(s->missed), "max_catchup", s->max_catchup);
    json_decref(payload);
    if (o && (!s->has_job || json_object_set_new(o, "job", job_value(s)) == 0))
        *out = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return *out ? 0 : oom(err);
}

/* ---- decoding ---- */

static bool known_member(const char *s, size_t n)
{
    return er_sched_spec_field_known(s, n) || (n == 1 && *s == 'v');
}

/* The first member of obj that known() refuses, into *out. */
static void unknown_of(const json_t *obj, bool (*known)(const char *, size_t), er_spec_str *out)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        if (!known(key, strlen(key))) {
            *out = (er_spec_str){ER_SPEC_SET, key, strlen(key)};
            return;
        }
    }
}

/* Member key of obj as a value of the spec; a null one gets kind on_null. */
static void get_str(const json_t *obj, const char *key, er_spec_kind on_null, er_spec_str *out)
{
    const json_t *v = json_object_get(obj, key);
    if (json_is_string(v))
        *out = (er_spec_str){ER_SPEC_SET, json_string_value(v), json_string_length(v)};
    else if (v)
        out->kind = json_is_null(v) ? on_null : ER_SPEC_BAD_TYPE;
}

static void get_int(const json_t *obj, const char *key, er_spec_kind on_null, er_spec_int *out)
{
    const json_t *v = json_object_get(obj, key);
    if (json_is_integer(v))
        *out = (er_spec_int){ER_SPEC_SET, json_integer_value(v)};
    else if (v)
        out->kind = json_is_null(v) ? on_null : ER_SPEC_BAD_TYPE;
}

static void read_job(const json_t *job, er_sched_spec *sp)
{
    er_job_spec *p = &sp->opts;
    sp->job = ER_SPEC_SET;
    unknown_of(job, er_sched_job_field_known, &p->unknown);
    get_int(job, "priority", ER_SPEC_NULL, &p->priority);
    get_int(job, "max_attempts", ER_SPEC_NULL, &p->max_attempts);
    get_int(job, "timeout_ms", ER_SPEC_NULL, &p->timeout_ms);
    get_str(job, "group", ER_SPEC_NULL, &p->group);
    get_str(job, "trace_id", ER_SPEC_NULL, &p->trace_id);
    const json_t *b = json_object_get(job, "backoff");
    if (!b)
        return;
    if (!json_is_object(b)) {
        p->backoff.kind = json_is_null(b) ? ER_SPEC_NULL : ER_SPEC_BAD_TYPE;
        return;
    }
    p->backoff.kind = ER_SPEC_SET;
    unknown_of(b, er_backoff_spec_field_known, &p->backoff.unknown);
    get_str(b, "type", ER_SPEC_NULL, &p->backoff.type);
    get_int(b, "delay_ms", ER_SPEC_NULL, &p->backoff.delay_ms);
    get_int(b, "max_delay_ms", ER_SPEC_NULL, &p->backoff.max_delay_ms);
    const json_t *j = json_object_get(b, "jitter");
    if (json_is_number(j))
        p->backoff.jitter = (er_spec_num){ER_SPEC_SET, json_number_value(j)};
    else if (j)
        p->backoff.jitter.kind = json_is_null(j) ? ER_SPEC_NULL : ER_SPEC_BAD_TYPE;
    sp->jitter_integer = json_is_integer(j);
}

/* Reads a version 1 object into *sp (slices into o; the payload's text in
 * sp->payload_buf). */
static int read_v1(const json_t *o, er_sched_spec *sp, er_error *err)
{
    unknown_of(o, known_member, &sp->unknown);
    get_str(o, "cron", ER_SPEC_ABSENT, &sp->cron);
    get_str(o, "tz", ER_SPEC_ABSENT, &sp->tz);
    get_str(o, "queue", ER_SPEC_ABSENT, &sp->queue);
    get_str(o, "name", ER_SPEC_ABSENT, &sp->name);
    get_str(o, "missed", ER_SPEC_ABSENT, &sp->missed);
    get_int(o, "max_catchup", ER_SPEC_ABSENT, &sp->max_catchup);
    const json_t *p = json_object_get(o, "payload");
    if (json_is_object(p)) {
        /* the stored text's member order, which is sorted */
        if (!(sp->payload_buf = json_dumps(p, JSON_COMPACT)))
            return oom(err);
        sp->payload = (er_spec_str){ER_SPEC_SET, sp->payload_buf, strlen(sp->payload_buf)};
    } else if (p && !json_is_null(p)) {
        sp->payload.kind = ER_SPEC_BAD_TYPE;
    }
    const json_t *job = json_object_get(o, "job");
    if (json_is_object(job))
        read_job(job, sp);
    else if (job && !json_is_null(job))
        sp->job = ER_SPEC_BAD_TYPE;
    return 0;
}

int er_sched_codec_decode(const char *text, er_scheduler *out, er_error *err)
{
    er_scheduler_init(out);
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return er_error_set(err, ER_EINTERNAL, "spec", "stored spec is not a JSON object: %s",
                            o ? "another JSON value" : je.text);
    }
    const json_t *v = json_object_get(o, "v");
    json_int_t version = v ? (json_is_integer(v) ? json_integer_value(v) : -1) : 1;
    int rc;
    if (version < 1 || version > ER_SCHED_CODEC_VERSION) {
        rc = er_error_set(err, ER_EINTERNAL, "spec",
                          "stored spec has format %lld; this server reads 1..%d",
                          (long long)version, ER_SCHED_CODEC_VERSION);
    } else {
        er_sched_spec sp = {0};
        rc = read_v1(o, &sp, err);
        if (rc == 0)
            rc = er_sched_validate(&sp, (size_t)-1, out, err);
        er_sched_spec_fini(&sp);
    }
    json_decref(o);
    return rc;
}
