/* SPDX-License-Identifier: MIT
 *
 * Failures reported by workers: validating the error of a fail request,
 * the last_error text stored on the job, and the decision that moves a failed
 * or stalled active job to scheduled, waiting or dead. Pure logic: the time
 * and randomness are arguments; the stores call these and do not re-decide.
 */
#include "core/ack.h"
#include "util/utf8.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char *const class_names[] = {
    [ER_ERR_TRANSIENT] = "transient",
    [ER_ERR_PERMANENT] = "permanent",
    [ER_ERR_RETRY_LATER] = "retry_later",
    [ER_ERR_THROTTLED] = "throttled",
};

const char *er_error_class_name(er_error_class c)
{
    return class_names[(int)c >= 0 && (int)c < 4 ? (int)c : ER_ERR_TRANSIENT];
}

void er_failure_fini(er_failure *f)
{
    if (!f)
        return;
    free(f->message);
    free(f->backtrace);
    free(f->errtype);
    memset(f, 0, sizeof *f);
}

/* A delay 0..ER_DELAY_MAX_MS, required when `required`; 1 when set. */
static int check_delay(const er_spec_int *v, const char *field, bool required, const char *cls,
                       int64_t *out, er_error *err)
{
    if (v->kind == ER_SPEC_ABSENT) {
        if (required)
            return er_error_set(err, ER_EINVAL, field, "%s is required for %s", field, cls);
        return 0;
    }
    if (v->kind == ER_SPEC_BAD_TYPE || v->v < 0 || v->v > ER_DELAY_MAX_MS)
        return er_error_set(err, ER_EINVAL, field, "%s must be an integer 0..%lld", field,
                            ER_DELAY_MAX_MS);
    *out = v->v;
    return 1;
}

static int validate(const er_failure_spec *sp, er_failure *f, er_error *err)
{
    if (sp->kind == ER_SPEC_ABSENT)
        return er_error_set(err, ER_EINVAL, "error", "error is required");
    if (sp->kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "error",
                            "error must be an object {class, message, ...}");
    if (sp->unknown.kind != ER_SPEC_ABSENT) {
        char field[ER_FIELD_MAX];
        snprintf(field, sizeof field, "error.%.*s", (int)sp->unknown.n, sp->unknown.s);
        return er_error_set(err, ER_EINVAL, field, "%s is not a known field", field);
    }
    int cls = -1;
    for (int i = 0; sp->cls.kind == ER_SPEC_SET && i < 4; i++)
        if (strlen(class_names[i]) == sp->cls.n &&
            memcmp(class_names[i], sp->cls.s, sp->cls.n) == 0)
            cls = i;
    if (cls < 0)
        return er_error_set(err, ER_EINVAL, "error.class",
                            "error.class must be \"transient\", \"permanent\", \"retry_later\" "
                            "or \"throttled\"");
    f->cls = (er_error_class)cls;
    if (sp->message.kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "error.message", "error.message must be a string");
    if (sp->errtype.kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, "error.errtype", "error.errtype must be a string");
    /* Each delay is required by its class; given with another class it is
     * checked but has no effect (and stays 0). */
    int64_t n = 0;
    int rc = check_delay(&sp->delay_ms, "error.delay_ms", f->cls == ER_ERR_RETRY_LATER,
                         "retry_later", &n, err);
    if (rc < 0)
        return rc;
    if (rc && f->cls == ER_ERR_RETRY_LATER)
        f->delay_ms = n;
    rc = check_delay(&sp->retry_after_ms, "error.retry_after_ms", f->cls == ER_ERR_THROTTLED,
                     "throttled", &n, err);
    if (rc < 0)
        return rc;
    if (rc && f->cls == ER_ERR_THROTTLED)
        f->retry_after_ms = n;
    if (sp->backtrace.kind == ER_SPEC_SET && sp->backtrace.n > ER_FAILURE_BACKTRACE_MAX)
        return er_error_set(err, ER_ETOOBIG, "error.backtrace",
                            "error.backtrace must be at most %d bytes as JSON",
                            ER_FAILURE_BACKTRACE_MAX);
    if (sp->message.kind == ER_SPEC_SET) {
        /* cut at a character boundary, never refused */
        size_t cap = (sp->message.n < ER_FAILURE_MESSAGE_MAX ? sp->message.n
                                                              : ER_FAILURE_MESSAGE_MAX) + 1;
        if (!(f->message = malloc(cap)))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        er_utf8_copy(f->message, cap, sp->message.s, sp->message.n);
    }
    if (sp->errtype.kind == ER_SPEC_SET) {
        size_t cap = (sp->errtype.n < ER_FAILURE_ERRTYPE_MAX ? sp->errtype.n
                                                              : ER_FAILURE_ERRTYPE_MAX) + 1;
        if (!(f->errtype = malloc(cap)))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        er_utf8_copy(f->errtype, cap, sp->errtype.s, sp->errtype.n);
    }
    if (sp->backtrace.kind == ER_SPEC_SET) {
        if (!(f->backtrace = malloc(sp->backtrace.n + 1)))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        memcpy(f->backtrace, sp->backtrace.s, sp->backtrace.n);
        f->backtrace[sp->backtrace.n] = '\0';
    }
    return 0;
}

int er_failure_validate(const er_failure_spec *spec, er_failure *f, er_error *err)
{
    memset(f, 0, sizeof *f);
    int rc = validate(spec, f, err);
    if (rc < 0)
        er_failure_fini(f);
    return rc;
}

static int64_t add_sat(int64_t a, int64_t b) /* b >= 0 */
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static void decide(const er_job *job, const er_failure *f, int max_started,
                   int64_t throttle_max_ms, int64_t now, er_rand *r, er_fail_outcome *out);

void er_fail_decide(const er_job *job, const er_failure *f, int max_started,
                    int64_t throttle_max_ms, int64_t now, er_rand *r, er_fail_outcome *out)
{
    decide(job, f, max_started, throttle_max_ms, now, r, out);
    if (out->state == ER_STATE_DEAD && job->discard)
        out->reason = "discarded (retry 0)";
}

static void decide(const er_job *job, const er_failure *f, int max_started,
                   int64_t throttle_max_ms, int64_t now, er_rand *r, er_fail_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->attempts = job->attempts;
    switch (f->cls) {
    case ER_ERR_TRANSIENT:
        if (job->attempts >= job->max_attempts) {
            out->state = ER_STATE_DEAD;
        } else {
            out->state = ER_STATE_SCHEDULED;
            out->run_at = add_sat(now, er_backoff_delay(&job->backoff, job->attempts, r));
        }
        return;
    case ER_ERR_RETRY_LATER:
    case ER_ERR_THROTTLED: {
        /* Not a failure: the attempt is given back. The loop is bounded by
         * max_started, which counts every lease. */
        int64_t delay = f->cls == ER_ERR_THROTTLED ? f->retry_after_ms : f->delay_ms;
        if (delay < 0)
            delay = 0;
        if (f->cls == ER_ERR_THROTTLED && delay > throttle_max_ms)
            delay = throttle_max_ms > 0 ? throttle_max_ms : 0;
        out->attempts = job->attempts > 0 ? job->attempts - 1 : 0;
        if (job->started >= max_started) {
            out->state = ER_STATE_DEAD;
        } else {
            out->state = ER_STATE_SCHEDULED;
            out->run_at = add_sat(now, delay);
        }
        /* The downstream said "slow down" whatever becomes of this job. */
        if (f->cls == ER_ERR_THROTTLED)
            out->queue_pause_until = add_sat(now, delay);
        return;
    }
    case ER_ERR_PERMANENT:
    default:
        out->state = ER_STATE_DEAD;
        return;
    }
}

er_state er_stall_decide(const er_job *job, int max_stalled)
{
    return job->stalled + 1 <= max_stalled ? ER_STATE_WAITING : ER_STATE_DEAD;
}
