/* SPDX-License-Identifier: MIT
 *
 * The stored form of queue settings (settings_codec.h): written and read
 * with jansson, the values judged by core's rules.
 */
#include "store/settings_codec.h"

#include <jansson.h>
#include <string.h>

/* jansson, whose real formatting (the shortest text that reads back) is
 * what version 1 holds. */
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

json_t *er_settings_dispatch_json(const er_dispatch *d, bool hide_values)
{
    if (!d->on)
        return json_null();
    json_t *h = json_object();
    for (int i = 0; h && i < d->nheaders; i++) {
        const char *v = hide_values ? ER_DISPATCH_HIDDEN : d->headers[i].value;
        if (json_object_set_new(h, d->headers[i].name, json_string(v)) < 0) {
            json_decref(h);
            h = NULL;
        }
    }
    return json_pack("{s:s, s:s, s:o, s:I, s:b, s:b}", "url", d->url, "method",
                     er_dispatch_method_name(d->method), "headers", h, "timeout_ms",
                     (json_int_t)d->timeout_ms, "trusted", (int)d->trusted, "follow_redirects",
                     (int)d->follow_redirects);
}

void er_settings_dispatch_headers(const json_t *h, er_dispatch_spec *d)
{
    d->headers_obj.kind = !h ? ER_SPEC_ABSENT : json_is_object(h) ? ER_SPEC_SET : ER_SPEC_BAD_TYPE;
    if (d->headers_obj.kind != ER_SPEC_SET)
        return;
    d->nheaders = json_object_size(h);
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)h, key, val) {
        if (i > ER_DISPATCH_HEADERS_MAX)
            break;
        d->headers[i].name = (er_spec_str){ER_SPEC_SET, key, strlen(key)};
        bool text =
            json_is_string(val) && strlen(json_string_value(val)) == json_string_length(val);
        d->headers[i].value = text ? (er_spec_str){ER_SPEC_SET, json_string_value(val),
                                                   json_string_length(val)}
                                   : (er_spec_str){.kind = ER_SPEC_BAD_TYPE};
        i++;
    }
}

/* ---- the fetch policy's members, both ways ---- */

static er_spec_kind kind_of(const json_t *v);

static void int_of(const json_t *v, er_spec_int *out);

void er_settings_first_unknown(const json_t *o, const char *const *known, er_spec_obj *out)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)o, key, val) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++)
            ok = strcmp(*k, key) == 0;
        if (!ok) {
            out->unknown = (er_spec_str){ER_SPEC_SET, key, strlen(key)};
            return;
        }
    }
}

/* An object member: its kind, its first unknown member; the object or NULL. */
static const json_t *obj_member(const json_t *o, const char *name, const char *const *known,
                                er_spec_obj *out)
{
    const json_t *v = json_object_get(o, name);
    out->kind = kind_of(v);
    if (out->kind != ER_SPEC_SET)
        return NULL;
    er_settings_first_unknown(v, known, out);
    return v;
}

static void read_rate(const json_t *o, er_rate_spec *r)
{
    static const char *const known[] = {"max", "per_ms", "burst", NULL};
    const json_t *v = obj_member(o, "rate_limit", known, &r->obj);
    int_of(json_object_get(v, "max"), &r->max);
    int_of(json_object_get(v, "per_ms"), &r->per_ms);
    int_of(json_object_get(v, "burst"), &r->burst);
}

void er_settings_read_policy(const json_t *o, er_queue_patch *p)
{
    static const char *const fair[] = {"weights", "default_weight", NULL};
    static const char *const limits[] = {"concurrency", "rate_limit", NULL};
    static const char *const aging[] = {"per_s", "max_boost", NULL};
    read_rate(o, &p->rate);
    const json_t *f = obj_member(o, "fairness", fair, &p->fairness.obj);
    int_of(json_object_get(f, "default_weight"), &p->fairness.default_weight);
    const json_t *w = json_object_get(f, "weights");
    p->fairness.weights_obj.kind = kind_of(w) == ER_SPEC_NULL ? ER_SPEC_BAD_TYPE : kind_of(w);
    if (p->fairness.weights_obj.kind == ER_SPEC_SET) {
        p->fairness.nweights = json_object_size(w);
        size_t i = 0;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)w, key, val) {
            if (i > ER_FAIR_WEIGHTS_MAX)
                break;
            p->fairness.weights[i].group = (er_spec_str){ER_SPEC_SET, key, strlen(key)};
            int_of(val, &p->fairness.weights[i].weight);
            i++;
        }
    }
    const json_t *g = obj_member(o, "group_limits", limits, &p->group_limits.obj);
    if (g) {
        /* null: none (what er_settings_policy_json writes with only a rate) */
        const json_t *c = json_object_get(g, "concurrency");
        if (!json_is_null(c))
            int_of(c, &p->group_limits.concurrency);
        read_rate(g, &p->group_limits.rate);
    }
    const json_t *a = obj_member(o, "aging", aging, &p->aging.obj);
    const json_t *ps = json_object_get(a, "per_s");
    if (ps)
        p->aging.per_s = json_is_number(ps) ? (er_spec_num){ER_SPEC_SET, json_number_value(ps)}
                                            : (er_spec_num){.kind = ER_SPEC_BAD_TYPE};
    int_of(json_object_get(a, "max_boost"), &p->aging.max_boost);
}

static json_t *rate_json(int64_t max, int64_t per_ms, int64_t burst)
{
    if (max <= 0)
        return json_null();
    return json_pack("{s:I, s:I, s:I}", "max", (json_int_t)max, "per_ms", (json_int_t)per_ms,
                     "burst", (json_int_t)(burst > 0 ? burst : 1));
}

int er_settings_policy_json(const er_queue_settings *s, json_t *o)
{
    json_t *fair = NULL, *limits = NULL, *aging = NULL;
    const er_fairness *f = &s->fairness;
    if (f->nweights > 0 || f->default_weight > 1) {
        json_t *w = json_object();
        for (int i = 0; w && i < f->nweights; i++)
            if (json_object_set_new(w, f->weights[i].group, json_integer(f->weights[i].weight)) <
                0) {
                json_decref(w);
                w = NULL;
            }
        fair = json_pack("{s:o, s:i}", "weights", w, "default_weight", f->default_weight);
    } else {
        fair = json_null();
    }
    const er_group_limits *g = &s->group_limits;
    if (g->concurrency > 0 || g->rate.max > 0) {
        limits = json_pack("{s:o, s:o}", "concurrency",
                           g->concurrency > 0 ? json_integer(g->concurrency) : json_null(),
                           "rate_limit", rate_json(g->rate.max, g->rate.per_ms, g->rate.burst));
    } else {
        limits = json_null();
    }
    aging = s->aging.per_s > 0 ? json_pack("{s:f, s:i}", "per_s", s->aging.per_s, "max_boost",
                                           s->aging.max_boost)
                               : json_null();
    int bad = json_object_set_new(o, "rate_limit",
                                  rate_json(s->rate_max, s->rate_per_ms, s->rate_burst));
    bad |= json_object_set_new(o, "fairness", fair);
    bad |= json_object_set_new(o, "group_limits", limits);
    bad |= json_object_set_new(o, "aging", aging);
    return bad ? -1 : 0;
}

char *er_settings_encode(const er_queue_settings *s)
{
    json_t *rate = json_null(); /* er_settings_policy_json sets it */
    json_t *dead = s->retention.dead_age_s > 0
                       ? json_pack("{s:I}", "age_s", (json_int_t)s->retention.dead_age_s)
                       : json_string("keep");
    /* json_pack's "o" steals each value, and fails on a NULL one. */
    json_t *o = json_pack("{s:i, s:b, s:i, s:o, s:I, s:i, s:i, s:o, s:{s:{s:I, s:I}, s:o}, s:o, "
                          "s:I}",
                          "v", ER_SETTINGS_CODEC_VERSION, "paused",
                          (int)s->paused, "concurrency", s->concurrency, "rate_limit", rate,
                          "lease_ms", (json_int_t)s->lease_ms, "max_stalled", s->max_stalled,
                          "max_started", s->max_started, "defaults", defaults_json(&s->defaults),
                          "retention", "completed", "age_s",
                          (json_int_t)s->retention.completed_age_s, "count",
                          (json_int_t)s->retention.completed_count, "dead", dead, "dispatch",
                          er_settings_dispatch_json(&s->dispatch, false), "throttle_max_ms",
                          (json_int_t)s->throttle_max_ms);
    if (o && er_settings_policy_json(s, o) < 0) {
        json_decref(o);
        o = NULL;
    }
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return text;
}

/* ---- reading: the stored members as a patch onto the defaults ---- */

static void int_of(const json_t *v, er_spec_int *out)
{
    if (v)
        *out = json_is_integer(v) ? (er_spec_int){ER_SPEC_SET, json_integer_value(v)}
                                  : (er_spec_int){.kind = ER_SPEC_BAD_TYPE};
}

/* Earlier releases stored any retention age or count; one past today's
 * bound reads as the bound (which keeps jobs 100 years either way). */
static void stored_at_most(er_spec_int *v, int64_t hi)
{
    if (v->kind == ER_SPEC_SET && v->v > hi)
        v->v = hi;
}

static er_spec_kind kind_of(const json_t *v)
{
    return !v ? ER_SPEC_ABSENT
           : json_is_null(v) ? ER_SPEC_NULL
           : json_is_object(v) ? ER_SPEC_SET
                               : ER_SPEC_BAD_TYPE;
}

static void read_dispatch(const json_t *o, er_dispatch_spec *d)
{
    d->obj.kind = kind_of(o);
    if (d->obj.kind != ER_SPEC_SET)
        return;
    const json_t *v;
    if ((v = json_object_get(o, "url")))
        d->url = json_is_string(v)
                     ? (er_spec_str){ER_SPEC_SET, json_string_value(v), json_string_length(v)}
                     : (er_spec_str){.kind = ER_SPEC_BAD_TYPE};
    if ((v = json_object_get(o, "method")))
        d->method = json_is_string(v)
                        ? (er_spec_str){ER_SPEC_SET, json_string_value(v), json_string_length(v)}
                        : (er_spec_str){.kind = ER_SPEC_BAD_TYPE};
    int_of(json_object_get(o, "timeout_ms"), &d->timeout_ms);
    if ((v = json_object_get(o, "trusted")))
        d->trusted = json_is_boolean(v) ? (er_spec_bool){ER_SPEC_SET, json_is_true(v)}
                                        : (er_spec_bool){.kind = ER_SPEC_BAD_TYPE};
    if ((v = json_object_get(o, "follow_redirects")))
        d->follow_redirects = json_is_boolean(v)
                                  ? (er_spec_bool){ER_SPEC_SET, json_is_true(v)}
                                  : (er_spec_bool){.kind = ER_SPEC_BAD_TYPE};
    er_settings_dispatch_headers(json_object_get(o, "headers"), d);
}

static void read_patch(const json_t *o, er_queue_patch *p)
{
    memset(p, 0, sizeof *p);
    p->obj.kind = kind_of(o);
    if (p->obj.kind != ER_SPEC_SET)
        return;
    const json_t *v = json_object_get(o, "paused");
    if (v)
        p->paused = json_is_boolean(v) ? (er_spec_bool){ER_SPEC_SET, json_is_true(v)}
                                       : (er_spec_bool){.kind = ER_SPEC_BAD_TYPE};
    int_of(json_object_get(o, "concurrency"), &p->concurrency);
    er_settings_read_policy(o, p); /* rate_limit (all versions), the rest version 3 */
    int_of(json_object_get(o, "lease_ms"), &p->lease_ms);
    int_of(json_object_get(o, "max_stalled"), &p->max_stalled);
    int_of(json_object_get(o, "max_started"), &p->max_started);
    const json_t *d = json_object_get(o, "defaults");
    p->defaults.obj.kind = kind_of(d);
    int_of(json_object_get(d, "max_attempts"), &p->defaults.max_attempts);
    int_of(json_object_get(d, "timeout_ms"), &p->defaults.timeout_ms);
    int_of(json_object_get(d, "priority"), &p->defaults.priority);
    const json_t *b = json_object_get(d, "backoff");
    er_backoff_spec *bs = &p->defaults.backoff;
    bs->kind = kind_of(b);
    const json_t *t = json_object_get(b, "type"), *j = json_object_get(b, "jitter");
    if (t)
        bs->type = json_is_string(t)
                       ? (er_spec_str){ER_SPEC_SET, json_string_value(t), json_string_length(t)}
                       : (er_spec_str){.kind = ER_SPEC_BAD_TYPE};
    int_of(json_object_get(b, "delay_ms"), &bs->delay_ms);
    int_of(json_object_get(b, "max_delay_ms"), &bs->max_delay_ms);
    if (j)
        bs->jitter = json_is_number(j) ? (er_spec_num){ER_SPEC_SET, json_number_value(j)}
                                       : (er_spec_num){.kind = ER_SPEC_BAD_TYPE};
    const json_t *ret = json_object_get(o, "retention");
    p->retention.kind = kind_of(ret);
    const json_t *c = json_object_get(ret, "completed");
    p->completed.kind = kind_of(c);
    int_of(json_object_get(c, "age_s"), &p->completed_age_s);
    int_of(json_object_get(c, "count"), &p->completed_count);
    stored_at_most(&p->completed_age_s, ER_RETENTION_AGE_MAX_S);
    stored_at_most(&p->completed_count, ER_RETENTION_COUNT_MAX);
    const json_t *dead = json_object_get(ret, "dead");
    if (json_is_string(dead) && strcmp(json_string_value(dead), "keep") == 0) {
        p->dead.kind = ER_SPEC_SET;
        p->dead_keep = true;
    } else {
        p->dead.kind = kind_of(dead) == ER_SPEC_NULL ? ER_SPEC_BAD_TYPE : kind_of(dead);
        int_of(json_object_get(dead, "age_s"), &p->dead_age_s);
        stored_at_most(&p->dead_age_s, ER_RETENTION_AGE_MAX_S);
    }
    read_dispatch(json_object_get(o, "dispatch"), &p->dispatch); /* version 2 */
    int_of(json_object_get(o, "throttle_max_ms"), &p->throttle_max_ms); /* version 2 */
}

int er_settings_decode(const char *text, er_queue_settings *out, er_error *err)
{
    er_queue_settings s;
    er_queue_settings_default(&s);
    if (!text) {
        *out = s;
        return 0;
    }
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    if (!o)
        return er_error_set(err, ER_EINVAL, "settings", "stored queue settings: %s", je.text);
    er_queue_patch p;
    read_patch(o, &p);
    er_queue_change c;
    int rc = er_queue_patch_check(&p, &c, err);
    if (rc == 0)
        rc = er_queue_settings_change(&s, &c, err);
    json_decref(o);
    if (rc == 0)
        *out = s;
    return rc;
}

int er_settings_decode_row(const char *text, bool paused, er_queue_settings *out, er_error *err)
{
    er_error e;
    int rc = er_settings_decode(text, out, &e);
    if (rc < 0)
        return er_error_set(err, ER_EINTERNAL, "", "store: stored queue settings: %s", e.message);
    out->paused = paused;
    return 0;
}
