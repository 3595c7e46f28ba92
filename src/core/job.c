/* SPDX-License-Identifier: MIT
 *
 * The job model: the state machine, name and id rules, job ids, option
 * defaults and the redrive copy. Pure logic: the time and the random source
 * come in as arguments; nothing here reads a clock, the network or the
 * store.
 */
#include "core/job.h"
#include "core/lease.h"

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

bool er_state_finished(er_state s)
{
    return s == ER_STATE_COMPLETED || s == ER_STATE_DEAD || s == ER_STATE_CANCELLED;
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
    case ER_EV_RUN_NOW:
        return from == ER_STATE_SCHEDULED ? ER_STATE_WAITING : -1;
    case ER_EV_BURY:
        return from == ER_STATE_SCHEDULED ? ER_STATE_DEAD : -1;
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
    free(job->custom);
    free(job->unique_token);
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
    t.last_error = t.result = t.progress = t.custom = t.unique_token = NULL;
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
    if (rc == 0)
        rc = dup_str(&t.custom, src->custom);
    if (rc == 0)
        rc = dup_str(&t.unique_token, src->unique_token);
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

bool er_name_ok(const char *s, size_t n)
{
    bool ok = n >= 1 && n <= ER_NAME_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = name_char((unsigned char)s[i]);
    return ok;
}

bool er_id_ok(const char *s, size_t n)
{
    bool ok = n >= 1 && n <= ER_ID_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        ok = c > 0x20 && c < 0x7f && c != '/';
    }
    return ok;
}

int er_name_validate(const char *s, const char *field, er_error *err)
{
    if (!s || !er_name_ok(s, strlen(s)))
        return er_error_set(err, ER_EINVAL, field,
                            "%s must be 1..%d characters of [A-Za-z0-9_.:-]", field, ER_NAME_MAX);
    return 0;
}

int er_id_validate(const char *s, const char *field, er_error *err)
{
    if (!s || !er_id_ok(s, strlen(s)))
        return er_error_set(err, ER_EINVAL, field,
                            "%s must be 1..%d printable ASCII characters without spaces or '/'",
                            field, ER_ID_MAX);
    return 0;
}

_Static_assert(ER_JOB_ID_MAX == ER_ID_MAX - ER_REDRIVE_SUFFIX_MAX, "ER_JOB_ID_MAX");

int er_job_id_check(const char *s, size_t n, const char *field, er_error *err)
{
    if (n > ER_JOB_ID_MAX)
        return er_error_set(err, ER_EINVAL, field,
                            "%s must be at most %d bytes (a redriven copy adds up to %d)", field,
                            ER_JOB_ID_MAX, ER_REDRIVE_SUFFIX_MAX);
    static const char tag[] = "-redrive-";
    size_t d = 0;
    while (d < n && s[n - 1 - d] >= '0' && s[n - 1 - d] <= '9')
        d++;
    size_t t = sizeof tag - 1;
    if (d > 0 && n >= d + t && memcmp(s + n - d - t, tag, t) == 0)
        return er_error_set(err, ER_EINVAL, field,
                            "%s may not end in -redrive- and a number: that is the id of a "
                            "redriven copy ({id}-redrive-{n})",
                            field);
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

/* ---- backoff and defaults -------------------------------------------- */

static const char *const backoff_names[] = {
    [ER_BACKOFF_EXPONENTIAL] = "exponential",
    [ER_BACKOFF_FIXED] = "fixed",
    [ER_BACKOFF_CAPPED] = "capped",
    [ER_BACKOFF_FAKTORY] = "faktory",
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

const char *er_backoff_type_name(er_backoff_type t)
{
    return backoff_names[(int)t >= 0 && (int)t < 4 ? (int)t : 0];
}

int er_backoff_type_parse(const char *s, size_t n)
{
    for (int i = 0; i < 3; i++)
        if (strlen(backoff_names[i]) == n && memcmp(backoff_names[i], s, n) == 0)
            return i;
    return -1;
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
    free(job->unique_token); /* the copy took no lock */
    job->lease_owner = job->lease_token = job->last_error = job->result = job->progress = NULL;
    job->unique_token = NULL;
    job->state = ER_STATE_WAITING;
    job->attempts = job->started = job->stalled = 0;
    job->lease_expires_at = 0;
    job->run_at = job->created_at = job->updated_at = now;
    job->started_at = job->finished_at = job->redriven_at = 0;
    job->redrive_count = 0;
    job->id_generated = false; /* derived from the dead job's: it can collide */
    return 0;
}

int er_job_redrive_plan(const er_job *dead, int64_t now, er_job *copy, int *count,
                        er_error *err)
{
    er_job_init(copy);
    if (dead->state != ER_STATE_DEAD) {
        const char *name = er_state_name(dead->state);
        return er_error_set(err, ER_ENOTFOUND, "id", "no dead job '%s' (it is %s)", dead->id,
                            name ? name : "?");
    }
    int n = dead->redrive_count + 1;
    if (n > ER_REDRIVE_MAX)
        return er_error_set(err, ER_ECONFLICT, "id",
                            "job '%s' was redriven %d times, the most there can be", dead->id,
                            ER_REDRIVE_MAX);
    char new_id[ER_ID_MAX + 32];
    snprintf(new_id, sizeof new_id, "%s-redrive-%d", dead->id, n);
    if (strlen(new_id) > ER_ID_MAX)
        return er_error_set(err, ER_ECONFLICT, "id",
                            "job '%s' cannot be redriven: its copy's id (%s-redrive-%d) would "
                            "pass %d bytes; enqueue a new job instead",
                            dead->id, "{id}", n, ER_ID_MAX);
    if (er_job_copy(copy, dead) < 0 || er_job_reset_for_redrive(copy, new_id, now) < 0) {
        er_job_fini(copy);
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    *count = n;
    return 0;
}

int er_job_lease_refused(bool found, er_state state, const char *id, er_error *err)
{
    if (!found)
        return er_error_set(err, ER_ENOTFOUND, "id", "job '%s' not found", id);
    if (state != ER_STATE_ACTIVE) {
        const char *name = er_state_name(state);
        return er_error_set(err, ER_ESTALE, "lease_token",
                            "job '%s' is not active (it is %s): the lease was lost", id,
                            name ? name : "?");
    }
    return er_error_set(err, ER_ESTALE, "lease_token",
                        "the lease token does not match the current lease of job '%s' (it is "
                        "from an earlier lease, or not one of the job's tokens)",
                        id);
}

int er_job_lease_check(const er_job *job, const char *id, const char *token, er_error *err)
{
    if (!job)
        return er_job_lease_refused(false, 0, id, err);
    if (job->state == ER_STATE_ACTIVE && job->lease_token && token &&
        strcmp(job->lease_token, token) == 0)
        return 0;
    return er_job_lease_refused(true, job->state, id, err);
}


static size_t text_bytes(const char *s)
{
    return s ? strlen(s) : 0;
}

size_t er_job_reply_bytes(const er_job *job)
{
    size_t n = ER_JOB_REPLY_FIXED;
    n += job->payload ? job->payload_len : 0;
    n += text_bytes(job->result) + text_bytes(job->last_error) + text_bytes(job->progress) +
         text_bytes(job->custom);
    n += 2 * (text_bytes(job->id) + text_bytes(job->queue) + text_bytes(job->name) +
              text_bytes(job->group) + text_bytes(job->trace_id) +
              text_bytes(job->idempotency_key) + text_bytes(job->lease_owner) +
              text_bytes(job->lease_token));
    return n;
}

size_t er_job_lease_bytes_max(size_t payload_max)
{
    /* id, idempotency key, trace id; queue, name, group; the token */
    return ER_JOB_REPLY_FIXED + payload_max + 2 * (3 * ER_ID_MAX + 3 * ER_NAME_MAX + 64);
}

size_t er_job_lease_fixed_bytes(const char *worker_id)
{
    return ER_JOB_REPLY_FIXED + 2 * (text_bytes(worker_id) + (ER_LEASE_TOKEN_SIZE - 1));
}

int er_reply_fit(size_t used, size_t cap, size_t worst, int want)
{
    size_t fit = used < cap && worst > 0 ? (cap - used) / worst : 0;
    if (fit == 0 && used == 0)
        fit = 1;
    return fit < (size_t)want ? (int)fit : want;
}

bool er_reply_takes(size_t n, size_t used, size_t next, size_t cap)
{
    return n == 0 || (used <= cap && next <= cap - used);
}
