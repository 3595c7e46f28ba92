/* SPDX-License-Identifier: MIT
 *
 * Queue settings in the HTTP API's JSON (queue_json.h). In a settings body
 * null clears what it is given for (rate_limit, defaults and each default);
 * unknown members are recorded for core to refuse.
 */
#include "server/http/queue_json.h"
#include "server/http/spec_json.h"
#include "store/settings_codec.h"

#include <string.h>

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
    er_settings_first_unknown(v, known, out);
    return v;
}

static void dispatch_patch(const json_t *v, er_dispatch_spec *d)
{
    static const char *const known[] = {"url",     "method",  "headers", "timeout_ms",
                                        "trusted", "follow_redirects", NULL};
    const json_t *o = obj_of(v, known, &d->obj);
    if (!o)
        return;
    er_http_spec_str(json_object_get(o, "url"), ER_SPEC_BAD_TYPE, &d->url);
    er_http_spec_str(json_object_get(o, "method"), ER_SPEC_BAD_TYPE, &d->method);
    er_http_spec_int(json_object_get(o, "timeout_ms"), ER_SPEC_BAD_TYPE, &d->timeout_ms);
    er_http_spec_bool(json_object_get(o, "trusted"), ER_SPEC_BAD_TYPE, &d->trusted);
    er_http_spec_bool(json_object_get(o, "follow_redirects"), ER_SPEC_BAD_TYPE,
                      &d->follow_redirects);
    /* null is not a header object either */
    er_settings_dispatch_headers(json_object_get(o, "headers"), d);
}

void er_http_queue_patch(const json_t *body, er_queue_patch *p)
{
    static const char *const top[] = {"paused",      "concurrency", "rate_limit", "lease_ms",
                                      "max_stalled", "max_started", "defaults",   "retention",
                                      "dispatch",    "throttle_max_ms", "fairness",
                                      "group_limits", "aging", NULL};
    static const char *const defaults[] = {"max_attempts", "backoff", "timeout_ms", "priority",
                                           NULL};
    static const char *const retention[] = {"completed", "dead", NULL};
    static const char *const completed[] = {"age_s", "count", NULL};
    static const char *const dead[] = {"age_s", NULL};
    memset(p, 0, sizeof *p);
    const json_t *b = obj_of(body, top, &p->obj);
    if (!b)
        return;
    /* null is not a boolean: paused has no "cleared" value */
    er_http_spec_bool(json_object_get(b, "paused"), ER_SPEC_BAD_TYPE, &p->paused);
    er_http_spec_int(json_object_get(b, "concurrency"), ER_SPEC_NULL, &p->concurrency);
    er_settings_read_policy(b, p);
    er_http_spec_int(json_object_get(b, "lease_ms"), ER_SPEC_NULL, &p->lease_ms);
    er_http_spec_int(json_object_get(b, "max_stalled"), ER_SPEC_NULL, &p->max_stalled);
    er_http_spec_int(json_object_get(b, "max_started"), ER_SPEC_NULL, &p->max_started);
    er_http_spec_int(json_object_get(b, "throttle_max_ms"), ER_SPEC_NULL, &p->throttle_max_ms);
    dispatch_patch(json_object_get(b, "dispatch"), &p->dispatch);
    const json_t *d = obj_of(json_object_get(b, "defaults"), defaults, &p->defaults.obj);
    if (d) {
        er_http_spec_int(json_object_get(d, "max_attempts"), ER_SPEC_NULL,
                         &p->defaults.max_attempts);
        er_http_spec_backoff(json_object_get(d, "backoff"), ER_SPEC_NULL, &p->defaults.backoff);
        er_http_spec_int(json_object_get(d, "timeout_ms"), ER_SPEC_NULL, &p->defaults.timeout_ms);
        er_http_spec_int(json_object_get(d, "priority"), ER_SPEC_NULL, &p->defaults.priority);
    }
    const json_t *ret = obj_of(json_object_get(b, "retention"), retention, &p->retention);
    if (!ret)
        return;
    const json_t *c = obj_of(json_object_get(ret, "completed"), completed, &p->completed);
    if (c) {
        er_http_spec_int(json_object_get(c, "age_s"), ER_SPEC_NULL, &p->completed_age_s);
        er_http_spec_int(json_object_get(c, "count"), ER_SPEC_NULL, &p->completed_count);
    }
    const json_t *dv = json_object_get(ret, "dead");
    if (json_is_string(dv) && strcmp(json_string_value(dv), "keep") == 0) {
        p->dead.kind = ER_SPEC_SET;
        p->dead_keep = true;
    } else {
        const json_t *dd = obj_of(dv, dead, &p->dead);
        if (dd)
            er_http_spec_int(json_object_get(dd, "age_s"), ER_SPEC_NULL, &p->dead_age_s);
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
    json_t *rate = json_null(); /* er_settings_policy_json sets it */
    json_t *dead = s->retention.dead_age_s > 0
                       ? json_pack("{s:I}", "age_s", (json_int_t)s->retention.dead_age_s)
                       : json_string("keep");
    /* json_pack's "o" steals each value, and fails on a NULL one. */
    json_t *o = json_pack("{s:b, s:i, s:o, s:I, s:i, s:i, s:I, s:o, s:{s:{s:I, s:I}, s:o}, s:o}",
                     "paused", (int)s->paused, "concurrency", s->concurrency, "rate_limit", rate,
                     "lease_ms", (json_int_t)s->lease_ms, "max_stalled", s->max_stalled,
                     "max_started", s->max_started, "throttle_max_ms",
                     (json_int_t)s->throttle_max_ms, "defaults", defaults_json(&s->defaults),
                     "retention", "completed", "age_s", (json_int_t)s->retention.completed_age_s,
                     "count", (json_int_t)s->retention.completed_count, "dead", dead,
                     "dispatch", er_settings_dispatch_json(&s->dispatch, true));
    if (o && er_settings_policy_json(s, o) < 0) {
        json_decref(o);
        o = NULL;
    }
    return o;
}
