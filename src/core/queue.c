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
#include <strings.h>

const char *er_dispatch_method_name(er_dispatch_method m)
{
    return m == ER_DISPATCH_PUT ? "PUT" : m == ER_DISPATCH_PATCH ? "PATCH" : "POST";
}

void er_queue_settings_default(er_queue_settings *s)
{
    memset(s, 0, sizeof *s);
    s->lease_ms = ER_DEFAULT_LEASE_MS;
    s->max_stalled = ER_DEFAULT_MAX_STALLED;
    s->max_started = ER_DEFAULT_MAX_STARTED;
    s->throttle_max_ms = ER_THROTTLE_MAX_DEFAULT_MS;
    s->retention.completed_age_s = ER_RETENTION_DEFAULT_AGE_S;
    s->retention.completed_count = 0;
    s->retention.dead_age_s = 0; /* keep */
    s->fairness.default_weight = 1;
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

int64_t er_retention_cutoff(int64_t now, int64_t age_s)
{
    if (age_s < 0)
        age_s = 0;
    if (age_s > ER_RETENTION_AGE_MAX_S)
        age_s = ER_RETENTION_AGE_MAX_S;
    int64_t ms = age_s * 1000;
    return now < INT64_MIN + ms ? INT64_MIN : now - ms;
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
        int rc = er_spec_int_in(&p->completed_age_s, "retention.completed.age_s", 0,
                                ER_RETENTION_AGE_MAX_S,
                                &c->completed_age_v, err);
        if (rc < 0)
            return rc;
        if (rc)
            c->completed_age = ER_CHANGE_SET;
        rc = er_spec_int_in(&p->completed_count, "retention.completed.count", 0,
                            ER_RETENTION_COUNT_MAX,
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
        int rc = er_spec_int_in(&p->dead_age_s, "retention.dead.age_s", 1,
                                ER_RETENTION_AGE_MAX_S,
                                &c->dead_age_v, err);
        if (rc < 0)
            return rc;
        if (rc)
            c->dead_age = ER_CHANGE_SET;
    }
    return 0;
}

/* ---- dispatch ---- */

static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool lower_eq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(s, lit, n) == 0;
}

/* Headers errand sets itself, or that belong to the connection. */
static bool reserved_header(const char *s, size_t n)
{
    static const char *const names[] = {"content-type",  "content-length", "transfer-encoding",
                                        "host",          "connection",     "expect",
                                        "te",            "upgrade",        "keep-alive",
                                        "idempotency-key", "traceparent",  "tracestate",
                                        NULL};
    for (const char *const *k = names; *k; k++)
        if (lower_eq(s, n, *k))
            return true;
    return n >= 9 && strncasecmp(s, "x-errand-", 9) == 0;
}

/* http:// or https://, a host, no user info, visible ASCII only. */
static bool url_ok(const char *s, size_t n)
{
    size_t skip = n >= 7 && strncasecmp(s, "http://", 7) == 0    ? 7
                  : n >= 8 && strncasecmp(s, "https://", 8) == 0 ? 8
                                                                 : 0;
    if (!skip || n > ER_DISPATCH_URL_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
            return false;
    size_t auth = strcspn(s + skip, "/?#");
    if (auth > n - skip)
        auth = n - skip;
    if (auth == 0 || memchr(s + skip, '@', auth) || s[skip] == ':')
        return false;
    return true;
}

static int check_header(const er_dispatch_spec *d, size_t i, er_queue_change *c, er_error *err)
{
    const er_spec_str *nm = &d->headers[i].name, *v = &d->headers[i].value;
    char f[ER_FIELD_MAX];
    snprintf(f, sizeof f, "dispatch.headers.%.*s", (int)nm->n, nm->s);
    if (nm->n == 0 || nm->n > ER_DISPATCH_HEADER_NAME_MAX)
        return er_error_set(err, ER_EINVAL, f, "header names must be 1..%d characters",
                            ER_DISPATCH_HEADER_NAME_MAX);
    for (size_t k = 0; k < nm->n; k++)
        if (!is_tchar((unsigned char)nm->s[k]))
            return er_error_set(err, ER_EINVAL, f,
                                "a header name is letters, digits and !#$%%&'*+-.^_`|~ only");
    if (reserved_header(nm->s, nm->n))
        return er_error_set(err, ER_EINVAL, f, "%s is set by errand and cannot be configured",
                            f + strlen("dispatch.headers."));
    for (size_t k = 0; k < i; k++)
        if (d->headers[k].name.n == nm->n && strncasecmp(d->headers[k].name.s, nm->s, nm->n) == 0)
            return er_error_set(err, ER_EINVAL, f, "header names must differ (case aside)");
    if (v->kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, f, "a header value must be a string");
    if (v->n > ER_DISPATCH_HEADER_VALUE_MAX)
        return er_error_set(err, ER_EINVAL, f, "a header value must be at most %d bytes",
                            ER_DISPATCH_HEADER_VALUE_MAX);
    for (size_t k = 0; k < v->n; k++) {
        unsigned char ch = (unsigned char)v->s[k];
        if ((ch < 0x20 && ch != '\t') || ch >= 0x7f)
            return er_error_set(err, ER_EINVAL, f,
                                "a header value is visible ASCII, spaces and tabs only");
    }
    er_dispatch_header *h = &c->dispatch_v.headers[i];
    memcpy(h->name, nm->s, nm->n);
    h->name[nm->n] = '\0';
    memcpy(h->value, v->s, v->n);
    h->value[v->n] = '\0';
    if (strcmp(h->value, ER_DISPATCH_HIDDEN) == 0)
        c->dispatch_keep |= 1u << i;
    return 0;
}

static int check_dispatch(const er_dispatch_spec *d, er_queue_change *c, er_error *err)
{
    if (d->obj.kind == ER_SPEC_ABSENT)
        return 0;
    if (d->obj.kind == ER_SPEC_NULL) {
        c->dispatch = ER_CHANGE_CLEAR;
        return 0;
    }
    if (d->obj.kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "dispatch",
                            "dispatch must be an object {url, method, headers, timeout_ms, "
                            "trusted, follow_redirects} or null");
    if (unknown(&d->obj, "dispatch", err) < 0)
        return ER_EINVAL;
    er_dispatch *t = &c->dispatch_v;
    memset(t, 0, sizeof *t);
    t->on = true;
    t->timeout_ms = ER_DISPATCH_TIMEOUT_DEFAULT_MS;
    if (d->url.kind == ER_SPEC_ABSENT)
        return er_error_set(err, ER_EINVAL, "dispatch.url", "dispatch.url is required");
    if (d->url.kind != ER_SPEC_SET || !url_ok(d->url.s, d->url.n))
        return er_error_set(err, ER_EINVAL, "dispatch.url",
                            "dispatch.url must be an http:// or https:// URL with a host, no "
                            "user info (send credentials as headers), no spaces, at most %d "
                            "bytes",
                            ER_DISPATCH_URL_MAX);
    memcpy(t->url, d->url.s, d->url.n);
    t->url[d->url.n] = '\0';
    if (d->method.kind != ER_SPEC_ABSENT) {
        if (d->method.kind == ER_SPEC_SET && d->method.n == 4 &&
            memcmp(d->method.s, "POST", 4) == 0)
            t->method = ER_DISPATCH_POST;
        else if (d->method.kind == ER_SPEC_SET && d->method.n == 3 &&
                 memcmp(d->method.s, "PUT", 3) == 0)
            t->method = ER_DISPATCH_PUT;
        else if (d->method.kind == ER_SPEC_SET && d->method.n == 5 &&
                 memcmp(d->method.s, "PATCH", 5) == 0)
            t->method = ER_DISPATCH_PATCH;
        else
            return er_error_set(err, ER_EINVAL, "dispatch.method",
                                "dispatch.method must be \"POST\", \"PUT\" or \"PATCH\" (the "
                                "job's payload is the body)");
    }
    if (d->headers_obj.kind != ER_SPEC_ABSENT) {
        if (d->headers_obj.kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, "dispatch.headers",
                                "dispatch.headers must be an object of strings");
        if (d->nheaders > ER_DISPATCH_HEADERS_MAX)
            return er_error_set(err, ER_EINVAL, "dispatch.headers",
                                "dispatch.headers may have at most %d headers",
                                ER_DISPATCH_HEADERS_MAX);
        for (size_t i = 0; i < d->nheaders; i++)
            if (check_header(d, i, c, err) < 0)
                return ER_EINVAL;
        t->nheaders = (int)d->nheaders;
    }
    int64_t n = 0;
    int rc = er_spec_int_in(&d->timeout_ms, "dispatch.timeout_ms", ER_DISPATCH_TIMEOUT_MIN_MS,
                            ER_DISPATCH_TIMEOUT_MAX_MS, &n, err);
    if (rc < 0)
        return rc;
    if (rc)
        t->timeout_ms = n;
    if (d->trusted.kind != ER_SPEC_ABSENT) {
        if (d->trusted.kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, "dispatch.trusted",
                                "dispatch.trusted must be true or false");
        t->trusted = d->trusted.v;
    }
    if (d->follow_redirects.kind != ER_SPEC_ABSENT) {
        if (d->follow_redirects.kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, "dispatch.follow_redirects",
                                "dispatch.follow_redirects must be true or false");
        t->follow_redirects = d->follow_redirects.v;
    }
    if (t->nheaders > 0 && !t->trusted)
        return er_error_set(err, ER_EINVAL, "dispatch.headers",
                            "configured headers are sent to trusted targets only: set "
                            "dispatch.trusted to true, or send no headers");
    c->dispatch = ER_CHANGE_SET;
    return 0;
}

/* The target a judged change sets, with "***" values replaced by the
 * stored ones. */
static int merge_dispatch(er_dispatch *d, const er_queue_change *c, er_error *err)
{
    if (c->dispatch == ER_CHANGE_CLEAR) {
        memset(d, 0, sizeof *d);
        return 0;
    }
    if (c->dispatch != ER_CHANGE_SET)
        return 0;
    er_dispatch t = c->dispatch_v;
    for (int i = 0; i < t.nheaders; i++) {
        if (!(c->dispatch_keep & (1u << i)))
            continue;
        int found = -1;
        for (int k = 0; d->on && k < d->nheaders && found < 0; k++)
            if (strcasecmp(d->headers[k].name, t.headers[i].name) == 0)
                found = k;
        if (found < 0) {
            char f[ER_FIELD_MAX];
            snprintf(f, sizeof f, "dispatch.headers.%s", t.headers[i].name);
            return er_error_set(err, ER_EINVAL, f,
                                "\"***\" keeps the stored value of a header, and %s has none",
                                t.headers[i].name);
        }
        memcpy(t.headers[i].value, d->headers[found].value, sizeof t.headers[i].value);
    }
    *d = t;
    return 0;
}

/* A rate_limit object's members, each checked: returns bits 1 (max), 2
 * (per_ms), 4 (burst) for the members given, or ER_EINVAL. */
static int check_rate(const er_rate_spec *r, const char *field, int64_t *max, int64_t *per,
                      int64_t *burst, er_error *err)
{
    if (r->obj.kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, field,
                            "%s must be an object {max, per_ms, burst} or null", field);
    if (unknown(&r->obj, field, err) < 0)
        return ER_EINVAL;
    char f[ER_FIELD_MAX];
    int given = 0, rc;
    snprintf(f, sizeof f, "%s.max", field);
    if ((rc = er_spec_int_in(&r->max, f, 1, ER_RATE_MAX_MAX, max, err)) < 0)
        return rc;
    given |= rc ? 1 : 0;
    snprintf(f, sizeof f, "%s.per_ms", field);
    if ((rc = er_spec_int_in(&r->per_ms, f, 1, ER_DELAY_MAX_MS, per, err)) < 0)
        return rc;
    given |= rc ? 2 : 0;
    snprintf(f, sizeof f, "%s.burst", field);
    if ((rc = er_spec_int_in(&r->burst, f, 1, ER_RATE_MAX_MAX, burst, err)) < 0)
        return rc;
    given |= rc ? 4 : 0;
    return given;
}

/* The rules a whole rate limit keeps: max and per_ms given, burst <= max. */
static int rate_complete(int64_t max, int64_t per, int64_t burst, const char *field,
                         er_error *err)
{
    char f[ER_FIELD_MAX];
    if (max <= 0) {
        snprintf(f, sizeof f, "%s.max", field);
        return er_error_set(err, ER_EINVAL, f, "%s is required", f);
    }
    if (per <= 0) {
        snprintf(f, sizeof f, "%s.per_ms", field);
        return er_error_set(err, ER_EINVAL, f, "%s is required", f);
    }
    if (burst > max) {
        snprintf(f, sizeof f, "%s.burst", field);
        return er_error_set(err, ER_EINVAL, f, "%s must be at most %s.max (%lld)", f, field,
                            (long long)max);
    }
    return 0;
}

static int check_fairness(const er_fairness_spec *fs, er_queue_change *c, er_error *err)
{
    if (fs->obj.kind == ER_SPEC_ABSENT)
        return 0;
    if (fs->obj.kind == ER_SPEC_NULL) {
        c->fairness = ER_CHANGE_CLEAR;
        return 0;
    }
    if (fs->obj.kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, "fairness",
                            "fairness must be an object {weights, default_weight} or null");
    if (unknown(&fs->obj, "fairness", err) < 0)
        return ER_EINVAL;
    er_fairness *t = &c->fairness_v;
    memset(t, 0, sizeof *t);
    int64_t n = 1;
    if (er_spec_int_in(&fs->default_weight, "fairness.default_weight", 1, ER_FAIR_WEIGHT_MAX, &n,
                       err) < 0)
        return ER_EINVAL;
    t->default_weight = (int)n;
    if (fs->weights_obj.kind != ER_SPEC_ABSENT) {
        if (fs->weights_obj.kind != ER_SPEC_SET)
            return er_error_set(err, ER_EINVAL, "fairness.weights",
                                "fairness.weights must be an object of group: weight");
        if (fs->nweights > ER_FAIR_WEIGHTS_MAX)
            return er_error_set(err, ER_EINVAL, "fairness.weights",
                                "fairness.weights may name at most %d groups",
                                ER_FAIR_WEIGHTS_MAX);
        for (size_t i = 0; i < fs->nweights; i++) {
            const er_spec_str *g = &fs->weights[i].group;
            if (!er_name_ok(g->s, g->n))
                return er_error_set(err, ER_EINVAL, "fairness.weights",
                                    "fairness.weights: each key must be a group name, 1..%d "
                                    "characters of [A-Za-z0-9_.:-]",
                                    ER_NAME_MAX);
            char f[ER_FIELD_MAX];
            snprintf(f, sizeof f, "fairness.weights.%.*s", (int)g->n, g->s);
            n = 0;
            int rc = er_spec_int_in(&fs->weights[i].weight, f, 1, ER_FAIR_WEIGHT_MAX, &n, err);
            if (rc < 0)
                return rc;
            if (rc == 0)
                return er_error_set(err, ER_EINVAL, f, "%s must be an integer 1..%d", f,
                                    ER_FAIR_WEIGHT_MAX);
            memcpy(t->weights[i].group, g->s, g->n);
            t->weights[i].group[g->n] = '\0';
            t->weights[i].weight = (int)n;
        }
        t->nweights = (int)fs->nweights;
    }
    c->fairness = ER_CHANGE_SET;
    return 0;
}

static int check_group_limits(const er_group_limits_spec *gs, er_queue_change *c, er_error *err)
{
    if (gs->obj.kind == ER_SPEC_ABSENT)
        return 0;
    if (gs->obj.kind == ER_SPEC_NULL) {
        c->group_limits = ER_CHANGE_CLEAR;
        return 0;
    }
    if (gs->obj.kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, "group_limits",
                            "group_limits must be an object {concurrency, rate_limit} or null");
    if (unknown(&gs->obj, "group_limits", err) < 0)
        return ER_EINVAL;
    er_group_limits *t = &c->group_limits_v;
    memset(t, 0, sizeof *t);
    int64_t n = 0;
    if (er_spec_int_in(&gs->concurrency, "group_limits.concurrency", 1, ER_GROUP_CONCURRENCY_MAX,
                       &n, err) < 0)
        return ER_EINVAL;
    t->concurrency = (int)n;
    if (gs->rate.obj.kind != ER_SPEC_ABSENT && gs->rate.obj.kind != ER_SPEC_NULL) {
        er_rate *r = &t->rate;
        r->burst = 1;
        if (check_rate(&gs->rate, "group_limits.rate_limit", &r->max, &r->per_ms, &r->burst,
                       err) < 0 ||
            rate_complete(r->max, r->per_ms, r->burst, "group_limits.rate_limit", err) < 0)
            return ER_EINVAL;
    }
    c->group_limits = ER_CHANGE_SET;
    return 0;
}

static int check_aging(const er_aging_spec *as, er_queue_change *c, er_error *err)
{
    if (as->obj.kind == ER_SPEC_ABSENT)
        return 0;
    if (as->obj.kind == ER_SPEC_NULL) {
        c->aging = ER_CHANGE_CLEAR;
        return 0;
    }
    if (as->obj.kind != ER_SPEC_SET)
        return er_error_set(err, ER_EINVAL, "aging",
                            "aging must be an object {per_s, max_boost} or null");
    if (unknown(&as->obj, "aging", err) < 0)
        return ER_EINVAL;
    er_aging *t = &c->aging_v;
    t->per_s = 0;
    t->max_boost = ER_PRIORITY_MAX;
    if (as->per_s.kind != ER_SPEC_SET || !(as->per_s.v >= 0) ||
        as->per_s.v > ER_AGING_PER_S_MAX)
        return er_error_set(err, ER_EINVAL, "aging.per_s",
                            "aging.per_s is required: a number 0..%g (priority added per second "
                            "waited)",
                            ER_AGING_PER_S_MAX);
    t->per_s = as->per_s.v;
    int64_t n = ER_PRIORITY_MAX;
    if (er_spec_int_in(&as->max_boost, "aging.max_boost", 1, ER_PRIORITY_MAX, &n, err) < 0)
        return ER_EINVAL;
    t->max_boost = (int)n;
    if (t->per_s == 0) { /* strict priority: the same as null */
        c->aging = ER_CHANGE_CLEAR;
        return 0;
    }
    c->aging = ER_CHANGE_SET;
    return 0;
}

int er_fairness_weight(const er_fairness *f, const char *group)
{
    if (group && *group)
        for (int i = 0; i < f->nweights; i++)
            if (strcmp(f->weights[i].group, group) == 0)
                return f->weights[i].weight;
    return f->default_weight > 0 ? f->default_weight : 1;
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
    if (p->rate.obj.kind == ER_SPEC_NULL) {
        c->rate = ER_CHANGE_CLEAR;
    } else if (p->rate.obj.kind != ER_SPEC_ABSENT) {
        if ((rc = check_rate(&p->rate, "rate_limit", &c->rate_max_v, &c->rate_per_v,
                             &c->rate_burst_v, err)) < 0)
            return rc;
        c->rate = ER_CHANGE_SET;
        c->rate_max_given = rc & 1;
        c->rate_per_given = rc & 2;
        c->rate_burst_given = rc & 4;
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
    if ((rc = er_spec_int_in(&p->throttle_max_ms, "throttle_max_ms", ER_THROTTLE_MAX_MIN_MS,
                             ER_THROTTLE_MAX_MAX_MS, &c->throttle_max_ms_v, err)) < 0)
        return rc;
    if (rc)
        c->throttle_max_ms = ER_CHANGE_SET;
    if (check_defaults(&p->defaults, c, err) < 0)
        return ER_EINVAL;
    if (check_retention(p, c, err) < 0)
        return ER_EINVAL;
    if (check_dispatch(&p->dispatch, c, err) < 0)
        return ER_EINVAL;
    if (check_fairness(&p->fairness, c, err) < 0 || check_group_limits(&p->group_limits, c, err) < 0)
        return ER_EINVAL;
    return check_aging(&p->aging, c, err);
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
        t.rate_max = t.rate_per_ms = t.rate_burst = 0;
    } else if (c->rate == ER_CHANGE_SET) {
        if (c->rate_max_given)
            t.rate_max = c->rate_max_v;
        if (c->rate_per_given)
            t.rate_per_ms = c->rate_per_v;
        if (c->rate_burst_given)
            t.rate_burst = c->rate_burst_v;
        else if (t.rate_burst <= 0)
            t.rate_burst = 1;
        if (rate_complete(t.rate_max, t.rate_per_ms, t.rate_burst, "rate_limit", err) < 0)
            return ER_EINVAL;
    }
    if (c->lease_ms == ER_CHANGE_SET)
        t.lease_ms = c->lease_ms_v;
    if (c->max_stalled == ER_CHANGE_SET)
        t.max_stalled = c->max_stalled_v;
    if (c->max_started == ER_CHANGE_SET)
        t.max_started = c->max_started_v;
    if (c->throttle_max_ms == ER_CHANGE_SET)
        t.throttle_max_ms = c->throttle_max_ms_v;
    if (merge_defaults(&t.defaults, c, err) < 0)
        return ER_EINVAL;
    if (c->completed_age == ER_CHANGE_SET)
        t.retention.completed_age_s = c->completed_age_v;
    if (c->completed_count == ER_CHANGE_SET)
        t.retention.completed_count = c->completed_count_v;
    if (c->dead_age == ER_CHANGE_SET)
        t.retention.dead_age_s = c->dead_age_v;
    if (merge_dispatch(&t.dispatch, c, err) < 0)
        return ER_EINVAL;
    if (c->fairness == ER_CHANGE_SET)
        t.fairness = c->fairness_v;
    else if (c->fairness == ER_CHANGE_CLEAR)
        t.fairness = (er_fairness){.default_weight = 1};
    if (c->group_limits == ER_CHANGE_SET)
        t.group_limits = c->group_limits_v;
    else if (c->group_limits == ER_CHANGE_CLEAR)
        memset(&t.group_limits, 0, sizeof t.group_limits);
    if (c->aging == ER_CHANGE_SET)
        t.aging = c->aging_v;
    else if (c->aging == ER_CHANGE_CLEAR)
        memset(&t.aging, 0, sizeof t.aging);
    *s = t;
    return 0;
}
