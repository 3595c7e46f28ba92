/* SPDX-License-Identifier: MIT
 *
 * The enqueue rules: er_job_validate over a spec a frontend filled, the
 * defaults that fill what a request left unset, and the set_flags encoding.
 * The error messages here are the API's (docs/api.md); PL/pgSQL's
 * errand.enqueue_job spells the same ones.
 */
#include "core/job_spec.h"
#include "util/utf8.h"

#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

const char *const er_job_spec_fields[] = {
    "queue",      "name",    "payload", "id",    "priority", "delay_ms", "run_at", "max_attempts",
    "backoff", "timeout_ms", "group", "trace_id", "idempotency_key", NULL,
};

static const char *const backoff_fields[] = {"type", "delay_ms", "max_delay_ms", "jitter", NULL};

static bool in_list(const char *const *list, const char *s, size_t n)
{
    for (const char *const *f = list; *f; f++)
        if (strlen(*f) == n && memcmp(*f, s, n) == 0)
            return true;
    return false;
}

bool er_job_spec_field_known(const char *s, size_t n)
{
    return in_list(er_job_spec_fields + 1, s, n);
}

bool er_backoff_spec_field_known(const char *s, size_t n)
{
    return in_list(backoff_fields, s, n);
}

void er_job_spec_fini(er_job_spec *spec)
{
    if (!spec)
        return;
    free(spec->payload_buf);
    spec->payload_buf = NULL;
}

/* ---- value rules ---- */

static int oom(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* The field is prefix + name cut at a character boundary (the message
 * names it the same way). */
static int unknown_field(const er_spec_str *u, const char *prefix, er_error *err)
{
    char tmp[2 * ER_FIELD_MAX], f[ER_FIELD_MAX];
    size_t pl = strlen(prefix), n = u->n < ER_FIELD_MAX ? u->n : ER_FIELD_MAX;
    memcpy(tmp, prefix, pl);
    memcpy(tmp + pl, u->s, n);
    er_utf8_copy(f, sizeof f, tmp, pl + n);
    return er_error_set(err, ER_EINVAL, f, "%s is not a known field", f);
}

static int need_string(const er_spec_str *v, const char *field, er_error *err)
{
    if (v->kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, field, "%s must be a string", field);
    return 0;
}

static int check_name(const er_spec_str *v, const char *field, er_error *err)
{
    if (need_string(v, field, err) < 0)
        return ER_EINVAL;
    return er_name_ok(v->s, v->n) ? 0 : er_name_validate(NULL, field, err);
}

static int check_id(const er_spec_str *v, const char *field, er_error *err)
{
    if (need_string(v, field, err) < 0)
        return ER_EINVAL;
    return er_id_ok(v->s, v->n) ? 0 : er_id_validate(NULL, field, err);
}

int er_spec_int_in(const er_spec_int *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                   er_error *err)
{
    if (v->kind == ER_SPEC_ABSENT || v->kind == ER_SPEC_NULL)
        return 0;
    if (v->kind == ER_SPEC_BAD_TYPE || v->v < lo || v->v > hi) {
        if (hi == INT_MAX || hi == INT64_MAX)
            return er_error_set(err, ER_EINVAL, field, "%s must be an integer >= %lld", field,
                                (long long)lo);
        return er_error_set(err, ER_EINVAL, field, "%s must be an integer %lld..%lld", field,
                            (long long)lo, (long long)hi);
    }
    *out = v->v;
    return 1;
}

char *er_spec_str_dup(const er_spec_str *v)
{
    char *s = malloc(v->n + 1);
    if (s) {
        if (v->n)
            memcpy(s, v->s, v->n);
        s[v->n] = '\0';
    }
    return s;
}

/* An optional string into *dst (owned); absent leaves it NULL. */
static int take_str(const er_spec_str *v, char **dst, er_error *err)
{
    if (v->kind != ER_SPEC_SET)
        return 0;
    return (*dst = er_spec_str_dup(v)) ? 0 : oom(err);
}

/* ---- backoff ---- */

int er_backoff_spec_check(const er_backoff_spec *b, const char *field, er_backoff *vals,
                          unsigned *given, er_error *err)
{
    char f[ER_FIELD_MAX];
    *given = 0;
    memset(vals, 0, sizeof *vals);
    if (b->kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, field,
                            "%s must be an object {type, delay_ms, max_delay_ms, jitter}", field);
    if (b->unknown.kind != ER_SPEC_ABSENT) {
        snprintf(f, sizeof f, "%s.", field);
        return unknown_field(&b->unknown, f, err);
    }
    if (b->type.kind != ER_SPEC_ABSENT && b->type.kind != ER_SPEC_NULL) {
        int ty = b->type.kind == ER_SPEC_SET ? er_backoff_type_parse(b->type.s, b->type.n) : -1;
        if (ty < 0) {
            snprintf(f, sizeof f, "%s.type", field);
            return er_error_set(err, ER_EINVAL, f,
                                "%s must be \"exponential\", \"fixed\" or \"capped\"", f);
        }
        vals->type = (er_backoff_type)ty;
        *given |= ER_BACKOFF_GIVEN_TYPE;
    }
    int64_t n = 0;
    snprintf(f, sizeof f, "%s.delay_ms", field);
    int rc = er_spec_int_in(&b->delay_ms, f, 0, ER_DELAY_MAX_MS, &n, err);
    if (rc < 0)
        return rc;
    if (rc) {
        vals->delay_ms = n;
        *given |= ER_BACKOFF_GIVEN_DELAY;
    }
    snprintf(f, sizeof f, "%s.max_delay_ms", field);
    rc = er_spec_int_in(&b->max_delay_ms, f, 0, ER_DELAY_MAX_MS, &n, err);
    if (rc < 0)
        return rc;
    if (rc) {
        vals->max_delay_ms = n;
        *given |= ER_BACKOFF_GIVEN_MAX;
    }
    if (b->jitter.kind != ER_SPEC_ABSENT && b->jitter.kind != ER_SPEC_NULL) {
        double j = b->jitter.kind == ER_SPEC_SET ? b->jitter.v : -1.0;
        if (!(j >= 0.0 && j <= 1.0)) {
            snprintf(f, sizeof f, "%s.jitter", field);
            return er_error_set(err, ER_EINVAL, f, "%s must be a number 0..1", f);
        }
        vals->jitter = j;
        *given |= ER_BACKOFF_GIVEN_JITTER;
    }
    if ((*given & ER_BACKOFF_GIVEN_DELAY) && (*given & ER_BACKOFF_GIVEN_MAX) &&
        vals->max_delay_ms < vals->delay_ms) {
        snprintf(f, sizeof f, "%s.max_delay_ms", field);
        return er_error_set(err, ER_EINVAL, f, "%s must be >= delay_ms", f);
    }
    return 0;
}

er_backoff er_backoff_merge(const er_backoff *base, const er_backoff *vals, unsigned given)
{
    er_backoff b = *base;
    if (given & ER_BACKOFF_GIVEN_TYPE)
        b.type = vals->type;
    if (given & ER_BACKOFF_GIVEN_DELAY)
        b.delay_ms = vals->delay_ms;
    if (given & ER_BACKOFF_GIVEN_MAX)
        b.max_delay_ms = vals->max_delay_ms;
    if (given & ER_BACKOFF_GIVEN_JITTER)
        b.jitter = vals->jitter;
    if (b.max_delay_ms < b.delay_ms && !(given & ER_BACKOFF_GIVEN_MAX))
        b.max_delay_ms = b.delay_ms; /* a longer delay than the cap raises the cap */
    return b;
}

/* ---- the request ---- */

/* Options the request leaves unset hold the server's values until
 * er_job_apply_defaults picks the queue's. */
static void set_server_options(er_job *job)
{
    er_job_defaults srv;
    er_job_defaults_server(&srv);
    job->max_attempts = srv.max_attempts;
    job->backoff = srv.backoff;
    job->timeout_ms = srv.timeout_ms;
    job->priority = srv.priority;
}

static int check_run_at(const er_job_spec *sp, int64_t now, int64_t *run_at, er_error *err)
{
    int64_t n = 0;
    *run_at = now;
    if (sp->delay_ms.kind != ER_SPEC_ABSENT && sp->run_at.kind != ER_SPEC_ABSENT)
        return er_error_set(err, ER_EINVAL, "run_at", "give delay_ms or run_at, not both");
    int rc = er_spec_int_in(&sp->delay_ms, "delay_ms", 0, ER_DELAY_MAX_MS, &n, err);
    if (rc < 0)
        return rc;
    if (rc) {
        *run_at = now + n;
        return 0;
    }
    if (sp->run_at.kind == ER_SPEC_ABSENT)
        return 0;
    char text[64];
    int64_t t = 0;
    bool ok = sp->run_at.kind == ER_SPEC_SET && sp->run_at.n < sizeof text;
    if (ok) {
        memcpy(text, sp->run_at.s, sp->run_at.n);
        text[sp->run_at.n] = '\0';
        ok = strlen(text) == sp->run_at.n && er_time_parse(text, &t) == 0;
    }
    if (!ok)
        return er_error_set(err, ER_EINVAL, "run_at",
                            "run_at must be an RFC 3339 time such as "
                            "\"2026-11-30T02:00:00.000Z\"");
    if (t > now + ER_DELAY_MAX_MS)
        return er_error_set(err, ER_EINVAL, "run_at", "run_at must be at most %lld days ahead",
                            ER_DELAY_MAX_MS / (24LL * 3600 * 1000));
    *run_at = t > now ? t : now;
    return 0;
}

static int validate(er_job_spec *sp, const er_job_limits *lim, int64_t now, er_rand *r,
                    er_job *job, er_error *err)
{
    if (sp->unknown.kind != ER_SPEC_ABSENT)
        return unknown_field(&sp->unknown, "", err);
    if (sp->queue.kind == ER_SPEC_ABSENT)
        return er_error_set(err, ER_EINVAL, "queue", "queue is required");
    if (check_name(&sp->queue, "queue", err) < 0)
        return ER_EINVAL;
    if (sp->name.kind == ER_SPEC_ABSENT)
        return er_error_set(err, ER_EINVAL, "name", "name is required");
    if (check_name(&sp->name, "name", err) < 0)
        return ER_EINVAL;

    /* The payload as compact JSON text; {} when absent. */
    size_t plen = sp->payload.kind == ER_SPEC_SET ? sp->payload.n : 2;
    if (plen > lim->payload_max)
        return er_error_set(err, ER_ETOOBIG, "payload",
                            "payload is %zu bytes; the limit is %zu bytes", plen,
                            lim->payload_max);

    if (sp->id.kind != ER_SPEC_ABSENT && check_id(&sp->id, "id", err) < 0)
        return ER_EINVAL;
    int64_t n = 0;
    int rc = er_spec_int_in(&sp->priority, "priority", 0, ER_PRIORITY_MAX, &n, err);
    if (rc < 0)
        return rc;
    if (rc) {
        job->priority = (int)n;
        job->set_priority = true;
    }
    if ((rc = check_run_at(sp, now, &job->run_at, err)) < 0)
        return rc;
    job->state = job->run_at > now ? ER_STATE_SCHEDULED : ER_STATE_WAITING;
    if ((rc = er_spec_int_in(&sp->max_attempts, "max_attempts", 1, ER_MAX_ATTEMPTS_MAX, &n,
                             err)) < 0)
        return rc;
    if (rc) {
        job->max_attempts = (int)n;
        job->set_max_attempts = true;
    }
    if (sp->backoff.kind != ER_SPEC_ABSENT) {
        er_backoff vals;
        if ((rc = er_backoff_spec_check(&sp->backoff, "backoff", &vals, &job->backoff_given,
                                        err)) < 0)
            return rc;
        job->backoff = er_backoff_merge(&job->backoff, &vals, job->backoff_given);
        job->set_backoff = true;
    } else if (sp->faktory) {
        job->backoff = (er_backoff){ER_BACKOFF_FAKTORY, 0, ER_DELAY_MAX_MS, 0.0};
        job->backoff_given = ER_BACKOFF_GIVEN_ALL;
        job->set_backoff = true;
    }
    if ((rc = er_spec_int_in(&sp->timeout_ms, "timeout_ms", 1, ER_TIMEOUT_MAX_MS, &n, err)) < 0)
        return rc;
    if (rc) {
        job->timeout_ms = n;
        job->set_timeout = true;
    }
    if (sp->group.kind != ER_SPEC_ABSENT && check_name(&sp->group, "group", err) < 0)
        return ER_EINVAL;
    if (sp->trace_id.kind != ER_SPEC_ABSENT && check_id(&sp->trace_id, "trace_id", err) < 0)
        return ER_EINVAL;
    if (sp->idempotency_key.kind != ER_SPEC_ABSENT &&
        check_id(&sp->idempotency_key, "idempotency_key", err) < 0)
        return ER_EINVAL;
    if (sp->custom.kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "custom", "custom must be an object");
    if (sp->custom.kind == ER_SPEC_SET && sp->custom.n > ER_CUSTOM_MAX)
        return er_error_set(err, ER_ETOOBIG, "custom", "custom must be at most %d bytes as JSON",
                            ER_CUSTOM_MAX);

    /* Valid: the strings. */
    if (!(job->queue = er_spec_str_dup(&sp->queue)) || !(job->name = er_spec_str_dup(&sp->name)))
        return oom(err);
    if (sp->payload.kind != ER_SPEC_SET) {
        if (!(job->payload = strdup("{}")))
            return oom(err);
    } else if (sp->payload_buf && sp->payload_buf == sp->payload.s) {
        job->payload = sp->payload_buf;
        sp->payload_buf = NULL;
        job->payload[sp->payload.n] = '\0';
    } else if (!(job->payload = er_spec_str_dup(&sp->payload))) {
        return oom(err);
    }
    job->payload_len = plen;
    if (sp->id.kind == ER_SPEC_SET) {
        if (!(job->id = er_spec_str_dup(&sp->id)))
            return oom(err);
    } else {
        char gen[32];
        er_job_new_id(now, r, gen);
        if (!(job->id = strdup(gen)))
            return oom(err);
        job->id_generated = true;
    }
    if (take_str(&sp->group, &job->group, err) < 0 ||
        take_str(&sp->trace_id, &job->trace_id, err) < 0 ||
        take_str(&sp->custom, &job->custom, err) < 0)
        return ER_ENOMEM;
    job->idempotency_key = sp->idempotency_key.kind == ER_SPEC_SET
                               ? er_spec_str_dup(&sp->idempotency_key)
                               : strdup(job->id);
    if (!job->idempotency_key)
        return oom(err);
    job->discard = sp->discard;
    job->created_at = job->updated_at = now;
    return 0;
}

int er_job_validate(er_job_spec *spec, const er_job_limits *lim, int64_t now, er_rand *r,
                    er_job *job, er_error *err)
{
    er_job_init(job);
    set_server_options(job);
    char *buf = spec->payload_buf;
    int rc = validate(spec, lim, now, r, job, err);
    if (rc < 0) {
        if (!spec->payload_buf && buf) {
            /* taken before a later failure: give it back */
            spec->payload_buf = buf;
            job->payload = NULL;
        }
        er_job_fini(job);
    }
    return rc;
}

/* ---- defaults ---- */

void er_job_apply_defaults(er_job *job, const er_job_defaults *queue,
                           const er_job_defaults *server)
{
    /* The set_* flags keep recording what the request gave, so applying
     * again with other queue defaults gives the same answer as applying once. */
    const er_job_defaults *src[2] = {queue, server};
    bool done_ma = job->set_max_attempts, done_to = job->set_timeout;
    bool done_pr = job->set_priority, done_bo = false;
    for (int i = 0; i < 2; i++) {
        const er_job_defaults *d = src[i];
        if (!d)
            continue;
        if (!done_ma && d->has_max_attempts) {
            job->max_attempts = d->max_attempts;
            done_ma = true;
        }
        if (!done_bo && d->has_backoff) {
            job->backoff = job->set_backoff
                               ? er_backoff_merge(&d->backoff, &job->backoff, job->backoff_given)
                               : d->backoff;
            done_bo = true;
        }
        if (!done_to && d->has_timeout) {
            job->timeout_ms = d->timeout_ms;
            done_to = true;
        }
        if (!done_pr && d->has_priority) {
            job->priority = d->priority;
            done_pr = true;
        }
    }
}

/* ---- set_flags ---- */

int er_job_set_flags(const er_job *j)
{
    return (j->set_max_attempts ? 1 : 0) | (j->set_backoff ? 2 : 0) | (j->set_timeout ? 4 : 0) |
           (j->set_priority ? 8 : 0) | (j->set_backoff ? (int)(j->backoff_given & 15) << 4 : 0) |
           (j->id_generated ? ER_FLAG_ID_GENERATED : 0) | (j->discard ? ER_FLAG_DISCARD : 0);
}

void er_job_set_flags_apply(er_job *j, int flags)
{
    j->set_max_attempts = (flags & 1) != 0;
    j->set_backoff = (flags & 2) != 0;
    j->set_timeout = (flags & 4) != 0;
    j->set_priority = (flags & 8) != 0;
    unsigned given = (unsigned)(flags >> 4) & 15;
    j->backoff_given = j->set_backoff ? (given ? given : ER_BACKOFF_GIVEN_ALL) : 0;
    j->id_generated = (flags & ER_FLAG_ID_GENERATED) != 0;
    j->discard = (flags & ER_FLAG_DISCARD) != 0;
}
