/* SPDX-License-Identifier: MIT
 *
 * The stored form of a job's last error (error_codec.h), written with
 * jansson as every earlier release wrote it.
 */
#include "store/error_codec.h"

#include <jansson.h>

char *er_last_error_encode(const er_failure *f, int attempt, const char *reason, int64_t now)
{
    char at[32];
    er_time_format(now, at);
    /* A message that is not valid UTF-8 (only possible when built by hand,
     * not parsed) is shown as null rather than failing the whole record. */
    json_t *msg = f->message ? json_string(f->message) : NULL;
    json_t *o = json_pack("{s:s, s:o, s:i, s:s}", "class", er_error_class_name(f->cls), "message",
                          msg ? msg : json_null(), "attempt", attempt, "at", at);
    if (!o)
        return NULL;
    int bad = 0;
    if (f->cls == ER_ERR_RETRY_LATER)
        bad |= json_object_set_new(o, "delay_ms", json_integer(f->delay_ms));
    if (f->cls == ER_ERR_THROTTLED)
        bad |= json_object_set_new(o, "retry_after_ms", json_integer(f->retry_after_ms));
    if (f->errtype) {
        json_t *t = json_string(f->errtype);
        bad |= json_object_set_new(o, "errtype", t ? t : json_null());
    }
    if (f->backtrace) {
        json_t *bt = json_loads(f->backtrace, JSON_DECODE_ANY, NULL);
        bad |= json_object_set_new(o, "backtrace", bt ? bt : json_string(f->backtrace));
    }
    if (reason)
        bad |= json_object_set_new(o, "reason", json_string(reason));
    char *text = bad ? NULL : json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

char *er_last_error_encode_stalled(const er_job *job, int64_t now)
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
