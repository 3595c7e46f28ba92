/* SPDX-License-Identifier: MIT
 *
 * Request member values into core spec slots (spec_json.h).
 */
#include "server/http/spec_json.h"

#include <string.h>

/* false when v is absent; else true, with *out's kind set for null */
static bool given(const json_t *v, er_spec_kind on_null, er_spec_kind *kind)
{
    if (!v)
        return false;
    if (json_is_null(v)) {
        *kind = on_null;
        return false;
    }
    return true;
}

void er_http_spec_str(const json_t *v, er_spec_kind on_null, er_spec_str *out)
{
    if (!given(v, on_null, &out->kind))
        return;
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        out->kind = ER_SPEC_BAD_TYPE;
    else
        *out = (er_spec_str){ER_SPEC_SET, json_string_value(v), json_string_length(v)};
}

void er_http_spec_int(const json_t *v, er_spec_kind on_null, er_spec_int *out)
{
    if (!given(v, on_null, &out->kind))
        return;
    if (!json_is_integer(v))
        out->kind = ER_SPEC_BAD_TYPE;
    else
        *out = (er_spec_int){ER_SPEC_SET, json_integer_value(v)};
}

void er_http_spec_num(const json_t *v, er_spec_kind on_null, er_spec_num *out)
{
    if (!given(v, on_null, &out->kind))
        return;
    if (!json_is_number(v))
        out->kind = ER_SPEC_BAD_TYPE;
    else
        *out = (er_spec_num){ER_SPEC_SET, json_number_value(v)};
}

void er_http_spec_bool(const json_t *v, er_spec_kind on_null, er_spec_bool *out)
{
    if (!given(v, on_null, &out->kind))
        return;
    if (!json_is_boolean(v))
        out->kind = ER_SPEC_BAD_TYPE;
    else
        *out = (er_spec_bool){ER_SPEC_SET, json_is_true(v)};
}

void er_http_spec_backoff(const json_t *v, er_spec_kind on_null, er_backoff_spec *b)
{
    if (!given(v, on_null, &b->kind))
        return;
    if (!json_is_object(v)) {
        b->kind = ER_SPEC_BAD_TYPE;
        return;
    }
    b->kind = ER_SPEC_SET;
    er_http_first_unknown(v, er_backoff_spec_field_known, &b->unknown);
    er_http_spec_str(json_object_get(v, "type"), on_null, &b->type);
    er_http_spec_int(json_object_get(v, "delay_ms"), on_null, &b->delay_ms);
    er_http_spec_int(json_object_get(v, "max_delay_ms"), on_null, &b->max_delay_ms);
    er_http_spec_num(json_object_get(v, "jitter"), on_null, &b->jitter);
}

void er_http_first_unknown(const json_t *obj, bool (*known)(const char *, size_t),
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
