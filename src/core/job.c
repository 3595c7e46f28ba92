/* SPDX-License-Identifier: MIT
 *
 * The job model: the state machine, name and id rules, the enqueue request
 * parser (API.md POST /v1/queues/{queue}/jobs), job option defaults and the
 * job's JSON view. Pure logic: the time and the random source come in as
 * arguments; nothing here reads a clock, the network or the store.
 */
#include "core/job.h"
#include "util/jsonw.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- states ---------------------------------------------------------- */

static const char *const state_names[] = {
    [ER_STATE_SCHEDULED] = "scheduled", [ER_STATE_WAITING] = "waiting",
    [ER_STATE_ACTIVE] = "active",       [ER_STATE_COMPLETED] = "completed",
    [ER_STATE_DEAD] = "dead",           [ER_STATE_CANCELLED] = "cancelled",
};
#define NSTATES ((int)(sizeof state_names / sizeof state_names[0]))

const char *er_state_name(er_state s)
{
    if ((int)s < 0 || (int)s >= NSTATES)
        return NULL;
    return state_names[s];
}

int er_state_parse(const char *name, er_state *out)
{
    if (!name)
        return ER_EINVAL;
    for (int i = 0; i < NSTATES; i++) {
        if (strcmp(name, state_names[i]) == 0) {
            *out = (er_state)i;
            return 0;
        }
    }
    return ER_EINVAL;
}

/* The one state machine (ARCHITECTURE.md §2). Redrive is not here: it makes a
 * new job and leaves the dead one dead. */
int er_state_next(er_state from, er_event ev)
{
    switch (ev) {
    case ER_EV_PROMOTE:
        return from == ER_STATE_SCHEDULED ? ER_STATE_WAITING : -1;
    case ER_EV_FETCH:
        return from == ER_STATE_WAITING ? ER_STATE_ACTIVE : -1;
    case ER_EV_COMPLETE:
        return from == ER_STATE_ACTIVE ? ER_STATE_COMPLETED : -1;
    case ER_EV_RETRY:
        return from == ER_STATE_ACTIVE ? ER_STATE_SCHEDULED : -1;
    case ER_EV_KILL:
        return from == ER_STATE_ACTIVE ? ER_STATE_DEAD : -1;
    case ER_EV_RELEASE:
    case ER_EV_STALL:
        return from == ER_STATE_ACTIVE ? ER_STATE_WAITING : -1;
    case ER_EV_CANCEL:
        return from == ER_STATE_SCHEDULED || from == ER_STATE_WAITING ? ER_STATE_CANCELLED : -1;
    }
    return -1;
}

/* ---- init / fini / copy --------------------------------------------- */

void er_job_init(er_job *job)
{
    memset(job, 0, sizeof *job);
}

void er_job_fini(er_job *job)
{
    if (!job)
        return;
    free(job->id);
    free(job->queue);
    free(job->name);
    free(job->payload);
    free(job->group);
    free(job->trace_id);
    free(job->idempotency_key);
    free(job->lease_owner);
    free(job->lease_token);
    free(job->last_error);
    free(job->result);
    free(job->progress);
    memset(job, 0, sizeof *job);
}

static int dup_str(char **dst, const char *src)
{
    if (!src) {
        *dst = NULL;
        return 0;
    }
    *dst = strdup(src);
    return *dst ? 0 : ER_ENOMEM;
}

int er_job_copy(er_job *dst, const er_job *src)
{
    er_job t = *src;
    /* Null every pointer first so a partial copy can be fini'd safely. */
    t.id = t.queue = t.name = t.payload = t.group = t.trace_id = NULL;
    t.idempotency_key = t.lease_owner = t.lease_token = NULL;
    t.last_error = t.result = t.progress = NULL;
    int rc = 0;
    if (src->payload) {
        t.payload = malloc(src->payload_len + 1);
        if (!t.payload) {
            rc = ER_ENOMEM;
        } else {
            memcpy(t.payload, src->payload, src->payload_len);
            t.payload[src->payload_len] = '\0';
        }
    }
    if (rc == 0)
        rc = dup_str(&t.id, src->id);
    if (rc == 0)
        rc = dup_str(&t.queue, src->queue);
    if (rc == 0)
        rc = dup_str(&t.name, src->name);
    if (rc == 0)
        rc = dup_str(&t.group, src->group);
    if (rc == 0)
        rc = dup_str(&t.trace_id, src->trace_id);
    if (rc == 0)
        rc = dup_str(&t.idempotency_key, src->idempotency_key);
    if (rc == 0)
        rc = dup_str(&t.lease_owner, src->lease_owner);
    if (rc == 0)
        rc = dup_str(&t.lease_token, src->lease_token);
    if (rc == 0)
        rc = dup_str(&t.last_error, src->last_error);
    if (rc == 0)
        rc = dup_str(&t.result, src->result);
    if (rc == 0)
        rc = dup_str(&t.progress, src->progress);
    if (rc < 0) {
        er_job_fini(&t);
        er_job_init(dst);
        return rc;
    }
    *dst = t;
    return 0;
}

/* ---- names and ids ---------------------------------------------------- */

static bool name_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == ':' || c == '-';
}

int er_name_validate(const char *s, const char *field, er_error *err)
{
    size_t n = s ? strlen(s) : 0;
    bool ok = n >= 1 && n <= ER_NAME_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = name_char((unsigned char)s[i]);
    if (!ok)
        return er_error_set(err, ER_EINVAL, field,
                            "%s must be 1..%d characters of [A-Za-z0-9_.:-]", field, ER_NAME_MAX);
    return 0;
}

int er_id_validate(const char *s, const char *field, er_error *err)
{
    size_t n = s ? strlen(s) : 0;
    bool ok = n >= 1 && n <= ER_ID_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        ok = c > 0x20 && c < 0x7f && c != '/';
    }
    if (!ok)
        return er_error_set(err, ER_EINVAL, field,
                            "%s must be 1..%d printable ASCII characters without spaces or '/'",
                            field, ER_ID_MAX);
    return 0;
}

void er_job_new_id(int64_t now, er_rand *r, char out[32])
{
    static const char hex[] = "0123456789abcdef";
    /* 12 hex digits of time (48 bits: good until year 10889) then 14 random
     * hex digits, so ids sort by creation time and never collide in practice. */
    uint64_t t = now > 0 ? (uint64_t)now : 0;
    if (t > 0xffffffffffffULL)
        t = 0xffffffffffffULL;
    uint64_t rnd = r->next(r);
    for (int i = 0; i < 12; i++)
        out[i] = hex[(t >> (44 - 4 * i)) & 15];
    for (int i = 0; i < 14; i++)
        out[12 + i] = hex[(rnd >> (60 - 4 * i)) & 15];
    out[26] = '\0';
}

/* ---- JSON field helpers ---------------------------------------------- */

/* "prefix.name", or "name" when prefix is empty. */
static void field_name(char out[64], const char *prefix, const char *name)
{
    snprintf(out, 64, "%s%s%s", prefix, *prefix ? "." : "", name);
}

/* An integer in lo..hi. Booleans and reals are not integers. */
static int get_int(const json_t *v, const char *field, int64_t lo, int64_t hi, int64_t *out,
                   er_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return er_error_set(err, ER_EINVAL, field, "%s must be an integer %lld..%lld", field,
                            (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return 0;
}

/* A string without embedded NUL bytes (which would silently shorten it). */
static int get_str(const json_t *v, const char *field, const char **out, er_error *err)
{
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return er_error_set(err, ER_EINVAL, field, "%s must be a string", field);
    *out = json_string_value(v);
    return 0;
}

static int oom(er_error *err)
{
    return er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* ---- backoff and defaults -------------------------------------------- */

static const char *const backoff_names[] = {
    [ER_BACKOFF_EXPONENTIAL] = "exponential",
    [ER_BACKOFF_FIXED] = "fixed",
    [ER_BACKOFF_CAPPED] = "capped",
};

static void backoff_server(er_backoff *b)
{
    b->type = ER_BACKOFF_EXPONENTIAL;
    b->delay_ms = ER_DEFAULT_BACKOFF_DELAY_MS;
    b->max_delay_ms = ER_DEFAULT_BACKOFF_MAX_MS;
    b->jitter = ER_DEFAULT_JITTER;
}

void er_job_defaults_server(er_job_defaults *d)
{
    memset(d, 0, sizeof *d);
    d->has_max_attempts = d->has_backoff = d->has_timeout = d->has_priority = true;
    d->max_attempts = ER_DEFAULT_MAX_ATTEMPTS;
    backoff_server(&d->backoff);
    d->timeout_ms = ER_DEFAULT_TIMEOUT_MS;
    d->priority = 0;
}

/* Parses a backoff object onto `base`: absent or null sub-fields keep the
 * base's value. When max_delay_ms is not given and the delay exceeds the
 * base's cap, the cap rises to the delay (an explicit smaller cap is an
 * error). */
static int backoff_from_json(const json_t *v, const er_backoff *base, const char *field,
                             bool strict, er_backoff *out, er_error *err)
{
    char f[64];
    if (!json_is_object(v))
        return er_error_set(err, ER_EINVAL, field,
                            "%s must be an object {type, delay_ms, max_delay_ms, jitter}", field);
    er_backoff b = *base;
    bool has_max = false;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) {
        field_name(f, field, key);
        int64_t n = 0;
        if (strcmp(key, "type") == 0) {
            if (json_is_null(val))
                continue;
            const char *s = json_is_string(val) ? json_string_value(val) : "";
            int t = -1;
            for (int i = 0; i < 3; i++)
                if (strcmp(s, backoff_names[i]) == 0)
                    t = i;
            if (t < 0)
                return er_error_set(err, ER_EINVAL, f,
                                    "%s must be \"exponential\", \"fixed\" or \"capped\"", f);
            b.type = (er_backoff_type)t;
        } else if (strcmp(key, "delay_ms") == 0) {
            if (json_is_null(val))
                continue;
            if (get_int(val, f, 0, ER_DELAY_MAX_MS, &n, err) < 0)
                return ER_EINVAL;
            b.delay_ms = n;
        } else if (strcmp(key, "max_delay_ms") == 0) {
            if (json_is_null(val))
                continue;
            if (get_int(val, f, 0, ER_DELAY_MAX_MS, &n, err) < 0)
                return ER_EINVAL;
            b.max_delay_ms = n;
            has_max = true;
        } else if (strcmp(key, "jitter") == 0) {
            if (json_is_null(val))
                continue;
            double j = json_is_number(val) ? json_number_value(val) : -1.0;
            if (!(j >= 0.0 && j <= 1.0))
                return er_error_set(err, ER_EINVAL, f, "%s must be a number 0..1", f);
            b.jitter = j;
        } else if (strict) {
            return er_error_set(err, ER_EINVAL, f, "%s is not a known field", f);
        }
    }
    if (b.max_delay_ms < b.delay_ms) {
        if (has_max) {
            field_name(f, field, "max_delay_ms");
            return er_error_set(err, ER_EINVAL, f, "%s must be >= delay_ms", f);
        }
        b.max_delay_ms = b.delay_ms;
    }
    *out = b;
    return 0;
}

static json_t *backoff_to_json(const er_backoff *b)
{
    int t = (int)b->type >= 0 && (int)b->type < 3 ? (int)b->type : 0;
    return json_pack("{s:s, s:I, s:I, s:f}", "type", backoff_names[t], "delay_ms",
                     (json_int_t)b->delay_ms, "max_delay_ms", (json_int_t)b->max_delay_ms,
                     "jitter", b->jitter);
}

int er_job_defaults_merge(er_job_defaults *d, const json_t *obj, const char *prefix,
                          bool strict, er_error *err)
{
    char f[64];
    if (!json_is_object(obj))
        return er_error_set(err, ER_EINVAL, prefix,
                            "%s must be an object {max_attempts, backoff, timeout_ms, priority}",
                            prefix);
    er_job_defaults t = *d;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        field_name(f, prefix, key);
        int64_t n = 0;
        bool clear = json_is_null(val);
        if (strcmp(key, "max_attempts") == 0) {
            if (!clear && get_int(val, f, 1, ER_MAX_ATTEMPTS_MAX, &n, err) < 0)
                return ER_EINVAL;
            t.has_max_attempts = !clear;
            t.max_attempts = clear ? 0 : (int)n;
        } else if (strcmp(key, "backoff") == 0) {
            er_backoff base;
            if (t.has_backoff)
                base = t.backoff;
            else
                backoff_server(&base);
            if (clear) {
                t.has_backoff = false;
                memset(&t.backoff, 0, sizeof t.backoff);
            } else {
                if (backoff_from_json(val, &base, f, strict, &t.backoff, err) < 0)
                    return ER_EINVAL;
                t.has_backoff = true;
            }
        } else if (strcmp(key, "timeout_ms") == 0) {
            if (!clear && get_int(val, f, 1, ER_TIMEOUT_MAX_MS, &n, err) < 0)
                return ER_EINVAL;
            t.has_timeout = !clear;
            t.timeout_ms = clear ? 0 : n;
        } else if (strcmp(key, "priority") == 0) {
            if (!clear && get_int(val, f, 0, ER_PRIORITY_MAX, &n, err) < 0)
                return ER_EINVAL;
            t.has_priority = !clear;
            t.priority = clear ? 0 : (int)n;
        } else if (strict) {
            return er_error_set(err, ER_EINVAL, f, "%s is not a known field", f);
        }
    }
    *d = t;
    return 0;
}

json_t *er_job_defaults_to_json(const er_job_defaults *d)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    if (d->has_max_attempts)
        bad |= json_object_set_new(o, "max_attempts", json_integer(d->max_attempts));
    if (d->has_backoff)
        bad |= json_object_set_new(o, "backoff", backoff_to_json(&d->backoff));
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

void er_job_apply_defaults(er_job *job, const er_job_defaults *queue,
                           const er_job_defaults *server)
{
    /* The set_* flags keep recording what the request gave, so applying
     * again with other queue defaults gives the same answer as applying once. */
    const er_job_defaults *src[2] = {queue, server};
    bool done_ma = job->set_max_attempts, done_bo = job->set_backoff;
    bool done_to = job->set_timeout, done_pr = job->set_priority;
    for (int i = 0; i < 2; i++) {
        const er_job_defaults *d = src[i];
        if (!d)
            continue;
        if (!done_ma && d->has_max_attempts) {
            job->max_attempts = d->max_attempts;
            done_ma = true;
        }
        if (!done_bo && d->has_backoff) {
            job->backoff = d->backoff;
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

/* ---- enqueue request --------------------------------------------------- */

static const char *const enqueue_fields[] = {
    "name",       "payload", "id",    "priority", "delay_ms", "run_at",          "max_attempts",
    "backoff",    "timeout_ms", "group", "trace_id", "idempotency_key",
};

/* An optional field: NULL when absent. JSON null counts as absent, so
 * clients that send every option with null for "unset" are accepted. The
 * payload is the exception: null is a payload like any other. */
static const json_t *opt(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int parse_job(const json_t *obj, const char *queue, int64_t now, size_t payload_max,
                     er_rand *r, er_job *job, er_error *err)
{
    const json_t *v;
    const char *s = NULL;
    int64_t n = 0;
    if (!json_is_object(obj))
        return er_error_set(err, ER_EINVAL, "job", "a job must be a JSON object");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        bool known = false;
        for (size_t i = 0; i < sizeof enqueue_fields / sizeof enqueue_fields[0]; i++)
            known = known || strcmp(key, enqueue_fields[i]) == 0;
        if (!known)
            return er_error_set(err, ER_EINVAL, key, "%s is not a known field", key);
    }

    if (dup_str(&job->queue, queue) < 0)
        return oom(err);

    if (!(v = opt(obj, "name")))
        return er_error_set(err, ER_EINVAL, "name", "name is required");
    if (get_str(v, "name", &s, err) < 0 || er_name_validate(s, "name", err) < 0)
        return ER_EINVAL;
    if (dup_str(&job->name, s) < 0)
        return oom(err);

    /* The payload is stored as compact JSON text; {} when absent. */
    v = json_object_get(obj, "payload");
    if (v) {
        job->payload = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!job->payload)
            return oom(err);
    } else if (dup_str(&job->payload, "{}") < 0) {
        return oom(err);
    }
    job->payload_len = strlen(job->payload);
    if (job->payload_len > payload_max)
        return er_error_set(err, ER_ETOOBIG, "payload",
                            "payload is %zu bytes; the limit is %zu bytes", job->payload_len,
                            payload_max);

    if ((v = opt(obj, "id"))) {
        if (get_str(v, "id", &s, err) < 0 || er_id_validate(s, "id", err) < 0)
            return ER_EINVAL;
        if (dup_str(&job->id, s) < 0)
            return oom(err);
    } else {
        char id[32];
        er_job_new_id(now, r, id);
        if (dup_str(&job->id, id) < 0)
            return oom(err);
    }

    if ((v = opt(obj, "priority"))) {
        if (get_int(v, "priority", 0, ER_PRIORITY_MAX, &n, err) < 0)
            return ER_EINVAL;
        job->priority = (int)n;
        job->set_priority = true;
    }

    /* run_at: now + delay_ms, or an absolute time; a past time means now. */
    job->run_at = now;
    const json_t *delay = opt(obj, "delay_ms"), *at = opt(obj, "run_at");
    if (delay && at)
        return er_error_set(err, ER_EINVAL, "run_at", "give delay_ms or run_at, not both");
    if (delay) {
        if (get_int(delay, "delay_ms", 0, ER_DELAY_MAX_MS, &n, err) < 0)
            return ER_EINVAL;
        job->run_at = now + n;
    } else if (at) {
        int64_t t;
        if (!json_is_string(at) || er_time_parse(json_string_value(at), &t) < 0)
            return er_error_set(err, ER_EINVAL, "run_at",
                                "run_at must be an RFC 3339 time such as "
                                "\"2026-11-30T02:00:00.000Z\"");
        if (t > now + ER_DELAY_MAX_MS)
            return er_error_set(err, ER_EINVAL, "run_at",
                                "run_at must be at most %lld days ahead",
                                ER_DELAY_MAX_MS / (24LL * 3600 * 1000));
        job->run_at = t > now ? t : now;
    }
    job->state = job->run_at > now ? ER_STATE_SCHEDULED : ER_STATE_WAITING;

    if ((v = opt(obj, "max_attempts"))) {
        if (get_int(v, "max_attempts", 1, ER_MAX_ATTEMPTS_MAX, &n, err) < 0)
            return ER_EINVAL;
        job->max_attempts = (int)n;
        job->set_max_attempts = true;
    }

    if ((v = opt(obj, "backoff"))) {
        er_backoff base;
        backoff_server(&base); /* absent sub-fields take the server's values */
        if (backoff_from_json(v, &base, "backoff", true, &job->backoff, err) < 0)
            return ER_EINVAL;
        job->set_backoff = true;
    }

    if ((v = opt(obj, "timeout_ms"))) {
        if (get_int(v, "timeout_ms", 1, ER_TIMEOUT_MAX_MS, &n, err) < 0)
            return ER_EINVAL;
        job->timeout_ms = n;
        job->set_timeout = true;
    }

    if ((v = opt(obj, "group"))) {
        if (get_str(v, "group", &s, err) < 0 || er_name_validate(s, "group", err) < 0)
            return ER_EINVAL;
        if (dup_str(&job->group, s) < 0)
            return oom(err);
    }

    if ((v = opt(obj, "trace_id"))) {
        if (get_str(v, "trace_id", &s, err) < 0 || er_id_validate(s, "trace_id", err) < 0)
            return ER_EINVAL;
        if (dup_str(&job->trace_id, s) < 0)
            return oom(err);
    }

    if ((v = opt(obj, "idempotency_key"))) {
        if (get_str(v, "idempotency_key", &s, err) < 0 ||
            er_id_validate(s, "idempotency_key", err) < 0)
            return ER_EINVAL;
    } else {
        s = job->id;
    }
    if (dup_str(&job->idempotency_key, s) < 0)
        return oom(err);

    job->created_at = job->updated_at = now;
    return 0;
}

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

int er_job_from_json(const json_t *obj, const char *queue, int64_t now, size_t payload_max,
                     er_rand *r, er_job *job, er_error *err)
{
    er_job_init(job);
    set_server_options(job);
    int rc = parse_job(obj, queue, now, payload_max, r, job, err);
    if (rc < 0)
        er_job_fini(job);
    return rc;
}

/* ---- enqueue request, plain-text fast path ---------------------------- */

/* The common request ({"name":"x","payload":{...}} with a few options) is
 * read straight from the body text: no jansson tree, and the payload's
 * compact text is the input minus its whitespace. Anything this reader is
 * not sure about (escapes, non-ASCII, reals, -0, long integers, deep or wide
 * objects, backoff, run_at, unknown fields, any invalid value or syntax) is
 * declined, and the caller takes the jansson path, which gives every error.
 * So an accepted request gives the job er_job_from_json would give. */

#define FAST_DEPTH 16 /* nesting the fast path follows */
#define FAST_KEYS 32  /* members per payload object it checks for duplicates */

typedef struct fast_in {
    const char *p, *end;
    char *out; /* compact payload text being written (room for the input) */
    size_t olen;
} fast_in;

typedef struct fast_slice {
    const char *s;
    size_t n;
} fast_slice;

static void fast_ws(fast_in *in)
{
    while (in->p < in->end &&
           (*in->p == ' ' || *in->p == '\t' || *in->p == '\n' || *in->p == '\r'))
        in->p++;
}

/* A string of printable ASCII without escapes; in->p at the opening quote.
 * Jansson dumps such a string exactly as it reads. */
static bool fast_string(fast_in *in, fast_slice *out)
{
    const char *q = ++in->p;
    while (q < in->end && *q != '"') {
        unsigned char ch = (unsigned char)*q;
        if (ch < 0x20 || ch >= 0x7f || ch == '\\')
            return false;
        q++;
    }
    if (q >= in->end)
        return false;
    out->s = in->p;
    out->n = (size_t)(q - in->p);
    in->p = q + 1;
    return true;
}

/* An integer token of at most 18 digits (so no overflow), not "-0" (which
 * jansson would dump as "0"). */
static bool fast_int(fast_in *in, int64_t *out, fast_slice *tok)
{
    const char *q = in->p;
    bool neg = q < in->end && *q == '-';
    if (neg)
        q++;
    const char *d = q;
    int64_t v = 0;
    while (q < in->end && *q >= '0' && *q <= '9' && q - d < 18)
        v = v * 10 + (*q++ - '0');
    size_t nd = (size_t)(q - d);
    if (nd == 0 || (nd > 1 && *d == '0') || (neg && v == 0))
        return false;
    if (q < in->end && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' || *q == 'E'))
        return false; /* longer than 18 digits, or a real */
    *out = neg ? -v : v;
    tok->s = in->p;
    tok->n = (size_t)(q - in->p);
    in->p = q;
    return true;
}

static bool fast_literal(fast_in *in, const char *lit, size_t n)
{
    if ((size_t)(in->end - in->p) < n || memcmp(in->p, lit, n) != 0)
        return false;
    in->p += n;
    return true;
}

static void fast_put(fast_in *in, const char *s, size_t n)
{
    memcpy(in->out + in->olen, s, n);
    in->olen += n;
}

/* Copies one value compactly to in->out; at in->p (whitespace skipped). */
static bool fast_value(fast_in *in, int depth)
{
    if (in->p >= in->end)
        return false;
    char ch = *in->p;
    fast_slice t;
    int64_t n;
    if (ch == '"') {
        if (!fast_string(in, &t))
            return false;
        fast_put(in, t.s - 1, t.n + 2);
        return true;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        if (!fast_int(in, &n, &t))
            return false;
        fast_put(in, t.s, t.n);
        return true;
    }
    if (ch == 't' || ch == 'f' || ch == 'n') {
        const char *lit = ch == 't' ? "true" : ch == 'f' ? "false" : "null";
        size_t len = strlen(lit);
        if (!fast_literal(in, lit, len))
            return false;
        fast_put(in, lit, len);
        return true;
    }
    if (ch != '{' && ch != '[')
        return false;
    if (depth >= FAST_DEPTH)
        return false;
    bool obj = ch == '{';
    char close = obj ? '}' : ']';
    fast_slice keys[FAST_KEYS];
    size_t nkeys = 0;
    fast_put(in, &ch, 1);
    in->p++;
    fast_ws(in);
    if (in->p < in->end && *in->p == close) {
        in->p++;
        fast_put(in, &close, 1);
        return true;
    }
    for (;;) {
        if (obj) {
            if (in->p >= in->end || *in->p != '"' || nkeys == FAST_KEYS ||
                !fast_string(in, &keys[nkeys]))
                return false;
            for (size_t i = 0; i < nkeys; i++)
                if (keys[i].n == keys[nkeys].n && memcmp(keys[i].s, keys[nkeys].s, keys[i].n) == 0)
                    return false; /* a duplicate key: jansson's error */
            fast_put(in, keys[nkeys].s - 1, keys[nkeys].n + 2);
            nkeys++;
            fast_ws(in);
            if (in->p >= in->end || *in->p != ':')
                return false;
            in->p++;
            fast_put(in, ":", 1);
            fast_ws(in);
        }
        if (!fast_value(in, depth + 1))
            return false;
        fast_ws(in);
        if (in->p >= in->end)
            return false;
        if (*in->p == close) {
            in->p++;
            fast_put(in, &close, 1);
            return true;
        }
        if (*in->p != ',')
            return false;
        in->p++;
        fast_put(in, ",", 1);
        fast_ws(in);
    }
}

/* The rules of er_name_validate and er_id_validate, on a slice. */
static bool fast_name_ok(fast_slice v)
{
    bool ok = v.n >= 1 && v.n <= ER_NAME_MAX;
    for (size_t i = 0; ok && i < v.n; i++)
        ok = name_char((unsigned char)v.s[i]);
    return ok;
}

static bool fast_id_ok(fast_slice v)
{
    bool ok = v.n >= 1 && v.n <= ER_ID_MAX;
    for (size_t i = 0; ok && i < v.n; i++)
        ok = v.s[i] != ' ' && v.s[i] != '/'; /* fast strings are 0x20..0x7e */
    return ok;
}

static char *fast_dup(fast_slice v)
{
    char *s = malloc(v.n + 1);
    if (s) {
        memcpy(s, v.s, v.n);
        s[v.n] = '\0';
    }
    return s;
}

enum { F_NAME, F_PAYLOAD, F_ID, F_PRIORITY, F_DELAY, F_RUN_AT, F_MAX_ATTEMPTS, F_BACKOFF,
       F_TIMEOUT, F_GROUP, F_TRACE, F_IDEM, F_COUNT };
_Static_assert(F_COUNT == sizeof enqueue_fields / sizeof enqueue_fields[0],
               "the F_ names follow enqueue_fields");

/* Index in enqueue_fields (same order as the enum), or -1. */
static int fast_field(fast_slice k)
{
    for (int i = 0; i < F_COUNT; i++)
        if (strlen(enqueue_fields[i]) == k.n && memcmp(enqueue_fields[i], k.s, k.n) == 0)
            return i;
    return -1;
}

bool er_job_from_text(const char *text, size_t len, const char *queue, int64_t now,
                      size_t payload_max, er_rand *r, er_job *job)
{
    er_job_init(job);
    fast_in in = {.p = text, .end = text + len};
    fast_slice str[F_COUNT] = {{0}};
    int64_t num[F_COUNT] = {0};
    unsigned seen = 0, given = 0; /* members present / present and not null */
    char *payload = NULL;
    size_t payload_len = 0;
    fast_ws(&in);
    if (in.p >= in.end || *in.p != '{')
        return false;
    in.p++;
    fast_ws(&in);
    bool first = true;
    while (in.p < in.end && *in.p != '}') {
        if (!first) {
            if (*in.p != ',')
                goto decline;
            in.p++;
            fast_ws(&in);
        }
        first = false;
        fast_slice k;
        if (in.p >= in.end || *in.p != '"' || !fast_string(&in, &k))
            goto decline;
        int f = fast_field(k);
        if (f < 0 || (seen & (1u << f)))
            goto decline; /* unknown ("jobs" too) or duplicate: the JSON path */
        seen |= 1u << f;
        fast_ws(&in);
        if (in.p >= in.end || *in.p != ':')
            goto decline;
        in.p++;
        fast_ws(&in);
        if (f == F_PAYLOAD) {
            in.out = payload = malloc(len + 1);
            if (!payload || !fast_value(&in, 0))
                goto decline;
            payload_len = in.olen;
            payload[payload_len] = '\0';
            if (len - payload_len > 1024) { /* a padded body: keep no slack while queued */
                char *fit = realloc(payload, payload_len + 1);
                if (fit)
                    payload = fit;
            }
            given |= 1u << f;
        } else if (fast_literal(&in, "null", 4)) {
            /* null is "absent" for every option */
        } else if (f == F_PRIORITY || f == F_DELAY || f == F_MAX_ATTEMPTS || f == F_TIMEOUT) {
            fast_slice t;
            if (!fast_int(&in, &num[f], &t))
                goto decline;
            given |= 1u << f;
        } else if (f == F_NAME || f == F_ID || f == F_GROUP || f == F_TRACE || f == F_IDEM) {
            if (in.p >= in.end || *in.p != '"' || !fast_string(&in, &str[f]))
                goto decline;
            given |= 1u << f;
        } else {
            goto decline; /* backoff and run_at objects and times: the JSON path */
        }
        fast_ws(&in);
    }
    if (in.p >= in.end)
        goto decline;
    in.p++;
    fast_ws(&in);
    if (in.p != in.end)
        goto decline;

    /* The checks of parse_job; a failing one is left to it for the error. */
    if (!(given & (1u << F_NAME)) || !fast_name_ok(str[F_NAME]))
        goto decline;
    if ((given & (1u << F_GROUP)) && !fast_name_ok(str[F_GROUP]))
        goto decline;
    if ((given & (1u << F_ID)) && !fast_id_ok(str[F_ID]))
        goto decline;
    if ((given & (1u << F_TRACE)) && !fast_id_ok(str[F_TRACE]))
        goto decline;
    if ((given & (1u << F_IDEM)) && !fast_id_ok(str[F_IDEM]))
        goto decline;
    if ((given & (1u << F_PRIORITY)) && (num[F_PRIORITY] < 0 || num[F_PRIORITY] > ER_PRIORITY_MAX))
        goto decline;
    if ((given & (1u << F_DELAY)) && (num[F_DELAY] < 0 || num[F_DELAY] > ER_DELAY_MAX_MS))
        goto decline;
    if ((given & (1u << F_MAX_ATTEMPTS)) &&
        (num[F_MAX_ATTEMPTS] < 1 || num[F_MAX_ATTEMPTS] > ER_MAX_ATTEMPTS_MAX))
        goto decline;
    if ((given & (1u << F_TIMEOUT)) && (num[F_TIMEOUT] < 1 || num[F_TIMEOUT] > ER_TIMEOUT_MAX_MS))
        goto decline;
    if (!(seen & (1u << F_PAYLOAD))) {
        payload = malloc(3);
        if (!payload)
            goto decline;
        memcpy(payload, "{}", 3);
        payload_len = 2;
    }
    if (payload_len > payload_max)
        goto decline;

    /* Accepted: build the job as er_job_from_json does. */
    set_server_options(job);
    job->payload = payload;
    job->payload_len = payload_len;
    payload = NULL;
    char gen[32];
    fast_slice id = str[F_ID];
    if (!(given & (1u << F_ID))) {
        er_job_new_id(now, r, gen);
        id = (fast_slice){gen, strlen(gen)};
    }
    fast_slice idem = (given & (1u << F_IDEM)) ? str[F_IDEM] : id;
    job->queue = strdup(queue);
    job->name = fast_dup(str[F_NAME]);
    job->id = fast_dup(id);
    job->idempotency_key = fast_dup(idem);
    if ((given & (1u << F_GROUP)))
        job->group = fast_dup(str[F_GROUP]);
    if ((given & (1u << F_TRACE)))
        job->trace_id = fast_dup(str[F_TRACE]);
    if (!job->queue || !job->name || !job->id || !job->idempotency_key ||
        ((given & (1u << F_GROUP)) && !job->group) || ((given & (1u << F_TRACE)) && !job->trace_id))
        goto decline; /* out of memory: the JSON path reports it */
    if (given & (1u << F_PRIORITY)) {
        job->priority = (int)num[F_PRIORITY];
        job->set_priority = true;
    }
    job->run_at = now + ((given & (1u << F_DELAY)) ? num[F_DELAY] : 0);
    job->state = job->run_at > now ? ER_STATE_SCHEDULED : ER_STATE_WAITING;
    if (given & (1u << F_MAX_ATTEMPTS)) {
        job->max_attempts = (int)num[F_MAX_ATTEMPTS];
        job->set_max_attempts = true;
    }
    if (given & (1u << F_TIMEOUT)) {
        job->timeout_ms = num[F_TIMEOUT];
        job->set_timeout = true;
    }
    job->created_at = job->updated_at = now;
    return true;
decline:
    free(payload);
    er_job_fini(job);
    return false;
}

/* ---- JSON view ---------------------------------------------------------- */

static void write_text(er_jsonw *w, const char *key, const char *text, size_t len)
{
    er_jsonw_key(w, key);
    er_jsonw_raw(w, text, text ? len : 0);
}

static size_t text_len(const char *s)
{
    return s ? strlen(s) : 0;
}

/* Stored texts (payload, last_error, result, progress) are JSON that the
 * server serialized itself, so they are embedded as they are. Keys are
 * pre-made literals (ER_JSONW_K): this is the enqueue reply. */
void er_job_write_json(const er_job *job, er_jsonw *w)
{
    int t = (int)job->backoff.type >= 0 && (int)job->backoff.type < 3 ? (int)job->backoff.type : 0;
    er_jsonw_begin_object(w);
    er_jsonw_kstr(w, ER_JSONW_K("id"), job->id);
    er_jsonw_kstr(w, ER_JSONW_K("queue"), job->queue);
    er_jsonw_kstr(w, ER_JSONW_K("name"), job->name);
    er_jsonw_kraw(w, ER_JSONW_K("payload"), job->payload, job->payload ? job->payload_len : 0);
    er_jsonw_kstr(w, ER_JSONW_K("state"), er_state_name(job->state));
    er_jsonw_kint(w, ER_JSONW_K("priority"), job->priority);
    er_jsonw_kstr(w, ER_JSONW_K("group"), job->group);
    er_jsonw_ktime(w, ER_JSONW_K("run_at"), job->run_at);
    er_jsonw_kint(w, ER_JSONW_K("max_attempts"), job->max_attempts);
    er_jsonw_kbegin_object(w, ER_JSONW_K("backoff"));
    er_jsonw_kstr(w, ER_JSONW_K("type"), backoff_names[t]);
    er_jsonw_kint(w, ER_JSONW_K("delay_ms"), job->backoff.delay_ms);
    er_jsonw_kint(w, ER_JSONW_K("max_delay_ms"), job->backoff.max_delay_ms);
    er_jsonw_kdouble(w, ER_JSONW_K("jitter"), job->backoff.jitter);
    er_jsonw_end_object(w);
    er_jsonw_kint(w, ER_JSONW_K("timeout_ms"), job->timeout_ms);
    er_jsonw_kstr(w, ER_JSONW_K("trace_id"), job->trace_id);
    er_jsonw_kstr(w, ER_JSONW_K("idempotency_key"), job->idempotency_key);
    er_jsonw_kint(w, ER_JSONW_K("attempts"), job->attempts);
    er_jsonw_kint(w, ER_JSONW_K("started"), job->started);
    er_jsonw_kint(w, ER_JSONW_K("stalled"), job->stalled);
    er_jsonw_kstr(w, ER_JSONW_K("lease_owner"), job->lease_owner);
    er_jsonw_ktime(w, ER_JSONW_K("lease_expires_at"), job->lease_expires_at);
    er_jsonw_kraw(w, ER_JSONW_K("last_error"), job->last_error, text_len(job->last_error));
    er_jsonw_kraw(w, ER_JSONW_K("result"), job->result, text_len(job->result));
    er_jsonw_kraw(w, ER_JSONW_K("progress"), job->progress, text_len(job->progress));
    er_jsonw_ktime(w, ER_JSONW_K("created_at"), job->created_at);
    er_jsonw_ktime(w, ER_JSONW_K("updated_at"), job->updated_at);
    er_jsonw_ktime(w, ER_JSONW_K("started_at"), job->started_at);
    er_jsonw_ktime(w, ER_JSONW_K("finished_at"), job->finished_at);
    er_jsonw_ktime(w, ER_JSONW_K("redriven_at"), job->redriven_at);
    er_jsonw_kint(w, ER_JSONW_K("redrive_count"), job->redrive_count);
    er_jsonw_end_object(w);
}

void er_job_write_lease_json(const er_job *job, er_jsonw *w)
{
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "id");
    er_jsonw_str(w, job->id);
    er_jsonw_key(w, "queue");
    er_jsonw_str(w, job->queue);
    er_jsonw_key(w, "name");
    er_jsonw_str(w, job->name);
    write_text(w, "payload", job->payload, job->payload_len);
    er_jsonw_key(w, "attempt");
    er_jsonw_int(w, job->attempts);
    er_jsonw_key(w, "max_attempts");
    er_jsonw_int(w, job->max_attempts);
    er_jsonw_key(w, "started");
    er_jsonw_int(w, job->started);
    er_jsonw_key(w, "lease_token");
    er_jsonw_str(w, job->lease_token);
    er_jsonw_key(w, "lease_expires_at");
    er_jsonw_time(w, job->lease_expires_at);
    er_jsonw_key(w, "idempotency_key");
    er_jsonw_str(w, job->idempotency_key);
    er_jsonw_key(w, "trace_id");
    er_jsonw_str(w, job->trace_id);
    er_jsonw_key(w, "group");
    er_jsonw_str(w, job->group);
    er_jsonw_key(w, "priority");
    er_jsonw_int(w, job->priority);
    er_jsonw_key(w, "timeout_ms");
    er_jsonw_int(w, job->timeout_ms);
    er_jsonw_key(w, "created_at");
    er_jsonw_time(w, job->created_at);
    er_jsonw_end_object(w);
}

static json_t *parse_written(const er_job *job, void (*write)(const er_job *, er_jsonw *))
{
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 30);
    write(job, &w);
    json_t *o = w.failed ? NULL : json_loadb(w.buf, w.len, 0, NULL);
    er_jsonw_fini(&w);
    return o;
}

json_t *er_job_to_json(const er_job *job)
{
    return parse_written(job, er_job_write_json);
}

json_t *er_job_to_lease_json(const er_job *job)
{
    return parse_written(job, er_job_write_lease_json);
}

int er_job_reset_for_redrive(er_job *job, const char *new_id, int64_t now)
{
    char *id = strdup(new_id);
    if (!id)
        return ER_ENOMEM;
    free(job->id);
    job->id = id;
    free(job->lease_owner);
    free(job->lease_token);
    free(job->last_error);
    free(job->result);
    free(job->progress);
    job->lease_owner = job->lease_token = job->last_error = job->result = job->progress = NULL;
    job->state = ER_STATE_WAITING;
    job->attempts = job->started = job->stalled = 0;
    job->lease_expires_at = 0;
    job->run_at = job->created_at = job->updated_at = now;
    job->started_at = job->finished_at = job->redriven_at = 0;
    job->redrive_count = 0;
    return 0;
}
