/* SPDX-License-Identifier: MIT
 *
 * Failures reported by workers: parsing the "error" object of a fail request,
 * the last_error text stored on the job, and the decision that moves a failed
 * or stalled active job to scheduled, waiting or dead. Pure logic: the time
 * and randomness are arguments; the stores call these and do not re-decide.
 */
#include "core/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MESSAGE_MAX 4096          /* longer messages are cut, not refused */
#define BACKTRACE_MAX (16 * 1024) /* serialized size; larger is refused */

static const char *const class_names[] = {
    [ER_ERR_TRANSIENT] = "transient",
    [ER_ERR_PERMANENT] = "permanent",
    [ER_ERR_RETRY_LATER] = "retry_later",
    [ER_ERR_THROTTLED] = "throttled",
};

void er_failure_fini(er_failure *f)
{
    if (!f)
        return;
    free(f->message);
    free(f->backtrace);
    memset(f, 0, sizeof *f);
}

static int get_delay(const json_t *v, const char *field, int64_t *out, er_error *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > ER_DELAY_MAX_MS)
        return er_error_set(err, ER_EINVAL, field, "%s must be an integer 0..%lld", field,
                            ER_DELAY_MAX_MS);
    *out = json_integer_value(v);
    return 0;
}

/* Cuts at most MESSAGE_MAX bytes without splitting a UTF-8 sequence. */
static char *cut_message(const char *s)
{
    size_t n = strlen(s);
    if (n > MESSAGE_MAX) {
        n = MESSAGE_MAX;
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
    }
    char *m = malloc(n + 1);
    if (m) {
        memcpy(m, s, n);
        m[n] = '\0';
    }
    return m;
}

static int parse(const json_t *obj, er_failure *f, er_error *err)
{
    if (!json_is_object(obj))
        return er_error_set(err, ER_EINVAL, "error",
                            "error must be an object {class, message, ...}");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        if (strcmp(key, "class") && strcmp(key, "message") && strcmp(key, "delay_ms") &&
            strcmp(key, "retry_after_ms") && strcmp(key, "backtrace")) {
            char field[64];
            snprintf(field, sizeof field, "error.%s", key);
            return er_error_set(err, ER_EINVAL, field, "%s is not a known field", field);
        }
    }

    const json_t *v = json_object_get(obj, "class");
    int cls = -1;
    for (int i = 0; v && json_is_string(v) && i < 4; i++)
        if (strcmp(json_string_value(v), class_names[i]) == 0)
            cls = i;
    if (cls < 0)
        return er_error_set(err, ER_EINVAL, "error.class",
                            "error.class must be \"transient\", \"permanent\", \"retry_later\" "
                            "or \"throttled\"");
    f->cls = (er_error_class)cls;

    v = json_object_get(obj, "message");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return er_error_set(err, ER_EINVAL, "error.message", "error.message must be a string");
        if (!(f->message = cut_message(json_string_value(v))))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }

    /* Each delay is required by its class; given with another class it is
     * checked but has no effect (and stays 0). */
    int64_t n = 0;
    v = json_object_get(obj, "delay_ms");
    if (v && !json_is_null(v)) {
        if (get_delay(v, "error.delay_ms", &n, err) < 0)
            return ER_EINVAL;
        if (f->cls == ER_ERR_RETRY_LATER)
            f->delay_ms = n;
    } else if (f->cls == ER_ERR_RETRY_LATER) {
        return er_error_set(err, ER_EINVAL, "error.delay_ms",
                            "error.delay_ms is required for retry_later");
    }
    v = json_object_get(obj, "retry_after_ms");
    if (v && !json_is_null(v)) {
        if (get_delay(v, "error.retry_after_ms", &n, err) < 0)
            return ER_EINVAL;
        if (f->cls == ER_ERR_THROTTLED)
            f->retry_after_ms = n;
    } else if (f->cls == ER_ERR_THROTTLED) {
        return er_error_set(err, ER_EINVAL, "error.retry_after_ms",
                            "error.retry_after_ms is required for throttled");
    }

    v = json_object_get(obj, "backtrace");
    if (v && !json_is_null(v)) {
        if (!(f->backtrace = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        if (strlen(f->backtrace) > BACKTRACE_MAX)
            return er_error_set(err, ER_ETOOBIG, "error.backtrace",
                                "error.backtrace must be at most %d bytes as JSON",
                                BACKTRACE_MAX);
    }
    return 0;
}

int er_failure_from_json(const json_t *obj, er_failure *f, er_error *err)
{
    memset(f, 0, sizeof *f);
    int rc = parse(obj, f, err);
    if (rc < 0)
        er_failure_fini(f);
    return rc;
}

char *er_failure_to_json_text(const er_failure *f, int attempt, int64_t now)
{
    char at[32];
    er_time_format(now, at);
    int cls = (int)f->cls >= 0 && (int)f->cls < 4 ? (int)f->cls : ER_ERR_TRANSIENT;
    /* A message that is not valid UTF-8 (only possible when built by hand,
     * not parsed) is shown as null rather than failing the whole record. */
    json_t *msg = f->message ? json_string(f->message) : NULL;
    json_t *o = json_pack("{s:s, s:o, s:i, s:s}", "class", class_names[cls], "message",
                          msg ? msg : json_null(), "attempt", attempt, "at", at);
    if (!o)
        return NULL;
    int bad = 0;
    if (f->cls == ER_ERR_RETRY_LATER)
        bad |= json_object_set_new(o, "delay_ms", json_integer(f->delay_ms));
    if (f->cls == ER_ERR_THROTTLED)
        bad |= json_object_set_new(o, "retry_after_ms", json_integer(f->retry_after_ms));
    if (f->backtrace) {
        json_t *bt = json_loads(f->backtrace, JSON_DECODE_ANY, NULL);
        bad |= json_object_set_new(o, "backtrace", bt ? bt : json_string(f->backtrace));
    }
    char *text = bad ? NULL : json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

void er_fail_decide(const er_job *job, const er_failure *f, int max_started, int64_t now,
                    er_rand *r, er_fail_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->attempts = job->attempts;
    switch (f->cls) {
    case ER_ERR_TRANSIENT:
        if (job->attempts >= job->max_attempts) {
            out->state = ER_STATE_DEAD;
        } else {
            out->state = ER_STATE_SCHEDULED;
            out->run_at = now + er_backoff_delay(&job->backoff, job->attempts, r);
        }
        return;
    case ER_ERR_RETRY_LATER:
    case ER_ERR_THROTTLED: {
        /* Not a failure: the attempt is given back. The loop is bounded by
         * max_started, which counts every lease. */
        int64_t delay = f->cls == ER_ERR_THROTTLED ? f->retry_after_ms : f->delay_ms;
        if (delay < 0)
            delay = 0;
        out->attempts = job->attempts > 0 ? job->attempts - 1 : 0;
        if (job->started >= max_started) {
            out->state = ER_STATE_DEAD;
        } else {
            out->state = ER_STATE_SCHEDULED;
            out->run_at = now + delay;
        }
        /* The downstream said "slow down" whatever becomes of this job. */
        if (f->cls == ER_ERR_THROTTLED)
            out->queue_pause_until = now + delay;
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

char *er_stall_error_text(const er_job *job, int64_t now)
{
    char at[32];
    er_time_format(now, at);
    json_t *o = json_pack("{s:s, s:s, s:i, s:i, s:s}", "class", "stalled", "message",
                          "the lease expired too many times (worker lost or too slow)",
                          "attempt", job->attempts, "stalled", job->stalled + 1, "at", at);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}
