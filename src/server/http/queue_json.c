/* SPDX-License-Identifier: MIT
 *
 * Queue settings in the HTTP API's JSON (queue_json.h). In a settings body
 * null clears what it is given for (rate_limit, defaults and each default);
 * unknown members are recorded for core to refuse.
 */
#include "server/http/queue_json.h"

#include <string.h>

static void first_unknown(const json_t *o, const char *const *known, er_spec_str *out)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)o, key, val) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++)
            ok = strcmp(*k, key) == 0;
        if (!ok) {
            *out = (er_spec_str){ER_SPEC_SET, key, strlen(key)};
            return;
        }
    }
}

/* An object member: absent, null, an object (its unknown member noted) or
 * another type. */
static const json_t *obj_of(const json_t *v, const char *const *known, er_spec_obj *out)
{
    if (!v)
        return NULL;
    if (json_is_null(v)) {
        out->kind = ER_SPEC_NULL;
        return NULL;
    }
    if (!json_is_object(v)) {
        out->kind = ER_SPEC_BAD_TYPE;
        return NULL;
    }
    out->kind = ER_SPEC_SET;
    first_unknown(v, known, &out->unknown);
    return v;
}

static void int_of(const json_t *v, er_spec_int *out)
{
    if (!v)
        return;
    if (json_is_null(v))
        out->kind = ER_SPEC_NULL;
    else if (!json_is_integer(v))
        out->kind = ER_SPEC_BAD_TYPE;
    else
        *out = (er_spec_int){ER_SPEC_SET, json_integer_value(v)};
}

static void backoff_of(const json_t *v, er_backoff_spec *b)
{
    static const char *const known[] = {"type", "delay_ms", "max_delay_ms", "jitter", NULL};
    er_spec_obj o = {0};
    const json_t *bo = obj_of(v, known, &o);
    b->kind = o.kind;
    b->unknown = o.unknown;
    if (!bo)
        return;
    const json_t *t = json_object_get(bo, "type"), *j = json_object_get(bo, "jitter");
    if (t && !json_is_null(t))
        b->type = json_is_string(t)
                      ? (er_spec_str){ER_SPEC_SET, json_string_value(t), json_string_length(t)}
                      : (er_spec_str){.kind = ER_SPEC_BAD_TYPE};
    int_of(json_object_get(bo, "delay_ms"), &b->delay_ms);
    int_of(json_object_get(bo, "max_delay_ms"), &b->max_delay_ms);
    if (j && !json_is_null(j))
        b->jitter = json_is_number(j) ? (er_spec_num){ER_SPEC_SET, json_number_value(j)}
                                      : (er_spec_num){.kind = ER_SPEC_BAD_TYPE};
}

void er_http_queue_patch(const json_t *body, er_queue_patch *p)
{
    static const char *const top[] = {"paused",      "concurrency", "rate_limit", "lease_ms",
                                      "max_stalled", "max_started", "defaults",   "retention",
                                      NULL};
    static const char *const rate[] = {"max", "per_ms", NULL};
    static const char *const defaults[] = {"max_attempts", "backoff", "timeout_ms", "priority",
                                           NULL};
    static const char *const retention[] = {"completed", "dead", NULL};
    static const char *const completed[] = {"age_s", "count", NULL};
    static const char *const dead[] = {"age_s", NULL};
    memset(p, 0, sizeof *p);
    const json_t *b = obj_of(body, top, &p->obj);
    if (!b)
        return;
    const json_t *v = json_object_get(b, "paused");
    if (v)
        p->paused = json_is_boolean(v) ? (er_spec_bool){ER_SPEC_SET, json_is_true(v)}
                                       : (er_spec_bool){.kind = ER_SPEC_BAD_TYPE};
    int_of(json_object_get(b, "concurrency"), &p->concurrency);
    const json_t *r = obj_of(json_object_get(b, "rate_limit"), rate, &p->rate_limit);
    if (r) {
        int_of(json_object_get(r, "max"), &p->rate_max);
        int_of(json_object_get(r, "per_ms"), &p->rate_per_ms);
    }
    int_of(json_object_get(b, "lease_ms"), &p->lease_ms);
    int_of(json_object_get(b, "max_stalled"), &p->max_stalled);
    int_of(json_object_get(b, "max_started"), &p->max_started);
    const json_t *d = obj_of(json_object_get(b, "defaults"), defaults, &p->defaults.obj);
    if (d) {
        int_of(json_object_get(d, "max_attempts"), &p->defaults.max_attempts);
        backoff_of(json_object_get(d, "backoff"), &p->defaults.backoff);
        int_of(json_object_get(d, "timeout_ms"), &p->defaults.timeout_ms);
        int_of(json_object_get(d, "priority"), &p->defaults.priority);
    }
    const json_t *ret = obj_of(json_object_get(b, "retention"), retention, &p->retention);
    if (!ret)
        return;
    const json_t *c = obj_of(json_object_get(ret, "completed"), completed, &p->completed);
    if (c) {
        int_of(json_object_get(c, "age_s"), &p->completed_age_s);
        int_of(json_object_get(c, "count"), &p->completed_count);
    }
    const json_t *dv = json_object_get(ret, "dead");
    if (json_is_string(dv) && strcmp(json_string_value(dv), "keep") == 0) {
        p->dead.kind = ER_SPEC_SET;
        p->dead_keep = true;
    } else {
        const json_t *dd = obj_of(dv, dead, &p->dead);
        if (dd)
            int_of(json_object_get(dd, "age_s"), &p->dead_age_s);
        else if (p->dead.kind == ER_SPEC_NULL)
            p->dead.kind = ER_SPEC_BAD_TYPE; /* null is neither "keep" nor an object */
    }
}

static json_t *backoff_json(const er_backoff *b)
{
    return json_pack("{s:s, s:I, s:I, s:f}", "type", er_backoff_type_name(b->type), "delay_ms",
                     (json_int_t)b->delay_ms, "max_delay_ms", (json_int_t)b->max_delay_ms,
                     "jitter", b->jitter);
}

static json_t *defaults_json(const er_job_defaults *d)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    if (d->has_max_attempts)
        bad |= json_object_set_new(o, "max_attempts", json_integer(d->max_attempts));
    if (d->has_backoff)
        bad |= json_object_set_new(o, "backoff", backoff_json(&d->backoff));
    if (d->has_timeout)
        bad |= json_object_set_new(o, "timeout_ms", json_integer(d->timeout_ms));
    if (d->has_priority)
        bad |= json_object_set_new(o, "priority", json_integer(d->priority));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *er_http_settings_json(const er_queue_settings *s)
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
                     "max_started", s->max_started, "defaults", defaults_json(&s->defaults),
                     "retention", "completed", "age_s", (json_int_t)s->retention.completed_age_s,
                     "count", (json_int_t)s->retention.completed_count, "dead", dead);
}
