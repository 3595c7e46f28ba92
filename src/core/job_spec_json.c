/* SPDX-License-Identifier: MIT
 *
 * An enqueue request read from a jansson object into an er_job_spec. The
 * HTTP frontend reads request bodies with it, and scheduler specs (which
 * still keep their job options as JSON) build tick jobs with it; it moves
 * into the HTTP frontend when scheduler specs are typed.
 */
#include "core/job_spec.h"

#include <jansson.h>
#include <string.h>


/* A null member counts as absent for every option (API.md); the payload
 * is read apart, since null is a payload like any other. */
static void str_of(const json_t *v, er_spec_str *out)
{
    if (!v || json_is_null(v))
        return;
    /* a string holding NUL would silently shorten: a type error */
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
        out->kind = ER_SPEC_BAD_TYPE;
        return;
    }
    *out = (er_spec_str){ER_SPEC_SET, json_string_value(v), json_string_length(v)};
}

static void int_of(const json_t *v, er_spec_int *out)
{
    if (!v || json_is_null(v))
        return;
    if (!json_is_integer(v)) {
        out->kind = ER_SPEC_BAD_TYPE;
        return;
    }
    *out = (er_spec_int){ER_SPEC_SET, json_integer_value(v)};
}

static void num_of(const json_t *v, er_spec_num *out)
{
    if (!v || json_is_null(v))
        return;
    if (!json_is_number(v)) {
        out->kind = ER_SPEC_BAD_TYPE;
        return;
    }
    *out = (er_spec_num){ER_SPEC_SET, json_number_value(v)};
}

static void first_unknown(const json_t *obj, bool (*known)(const char *, size_t),
                          er_spec_str *out)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        size_t n = strlen(key);
        if (!known(key, n)) {
            *out = (er_spec_str){ER_SPEC_SET, key, n};
            return;
        }
    }
}

static void backoff_of(const json_t *v, er_backoff_spec *b)
{
    if (!v || json_is_null(v))
        return;
    if (!json_is_object(v)) {
        b->kind = ER_SPEC_BAD_TYPE;
        return;
    }
    b->kind = ER_SPEC_SET;
    first_unknown(v, er_backoff_spec_field_known, &b->unknown);
    str_of(json_object_get(v, "type"), &b->type);
    int_of(json_object_get(v, "delay_ms"), &b->delay_ms);
    int_of(json_object_get(v, "max_delay_ms"), &b->max_delay_ms);
    num_of(json_object_get(v, "jitter"), &b->jitter);
}

int er_job_spec_from_json(const json_t *obj, const char *queue, er_job_spec *sp, er_error *err)
{
    memset(sp, 0, sizeof *sp);
    if (!json_is_object(obj))
        return er_error_set(err, ER_EINVAL, "job", "a job must be a JSON object");
    first_unknown(obj, er_job_spec_field_known, &sp->unknown);
    sp->queue = (er_spec_str){ER_SPEC_SET, queue, strlen(queue)};
    str_of(json_object_get(obj, "name"), &sp->name);
    const json_t *payload = json_object_get(obj, "payload");
    if (payload) {
        sp->payload_buf = json_dumps(payload, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!sp->payload_buf)
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        sp->payload = (er_spec_str){ER_SPEC_SET, sp->payload_buf, strlen(sp->payload_buf)};
    }
    str_of(json_object_get(obj, "id"), &sp->id);
    int_of(json_object_get(obj, "priority"), &sp->priority);
    int_of(json_object_get(obj, "delay_ms"), &sp->delay_ms);
    str_of(json_object_get(obj, "run_at"), &sp->run_at);
    int_of(json_object_get(obj, "max_attempts"), &sp->max_attempts);
    backoff_of(json_object_get(obj, "backoff"), &sp->backoff);
    int_of(json_object_get(obj, "timeout_ms"), &sp->timeout_ms);
    str_of(json_object_get(obj, "group"), &sp->group);
    str_of(json_object_get(obj, "trace_id"), &sp->trace_id);
    str_of(json_object_get(obj, "idempotency_key"), &sp->idempotency_key);
    return 0;
}

