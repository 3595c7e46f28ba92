/* SPDX-License-Identifier: MIT
 *
 * Worker requests read from jansson objects into core's specs
 * (work_json.h). A null member counts as absent (API.md).
 */
#include "server/http/work_json.h"
#include "server/http/http_internal.h"
#include "server/http/spec_json.h"

#include <stdlib.h>
#include <string.h>

int er_http_json_text(const json_t *v, er_spec_str *spec, char **out, er_error *err)
{
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!(*out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)))
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    *spec = (er_spec_str){ER_SPEC_SET, *out, strlen(*out)};
    return 0;
}

int er_http_fetch_spec(const json_t *obj, er_fetch_spec *sp, er_spec_str **queues,
                       er_error *err)
{
    memset(sp, 0, sizeof *sp);
    *queues = NULL;
    const json_t *qs = json_object_get(obj, "queues");
    if (qs && !json_is_null(qs)) {
        sp->queues_kind = json_is_array(qs) ? ER_SPEC_SET : ER_SPEC_BAD_TYPE;
        size_t n = json_is_array(qs) ? json_array_size(qs) : 0;
        /* one past the limit is enough to be refused */
        if (n > ER_FETCH_QUEUES_MAX + 1)
            n = ER_FETCH_QUEUES_MAX + 1;
        if (n && !(*queues = calloc(n, sizeof **queues)))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        for (size_t i = 0; i < n; i++) {
            er_http_spec_str(json_array_get(qs, i), ER_SPEC_ABSENT, &(*queues)[i]);
            if ((*queues)[i].kind == ER_SPEC_ABSENT)
                (*queues)[i].kind = ER_SPEC_BAD_TYPE; /* null is not a queue name */
        }
        sp->queues = *queues;
        sp->nqueues = json_is_array(qs) ? json_array_size(qs) : 0;
        if (sp->nqueues > n)
            sp->nqueues = n;
    }
    er_http_spec_str(json_object_get(obj, "worker_id"), ER_SPEC_ABSENT, &sp->worker_id);
    er_http_spec_int(json_object_get(obj, "max"), ER_SPEC_ABSENT, &sp->max);
    er_http_spec_int(json_object_get(obj, "wait_ms"), ER_SPEC_ABSENT, &sp->wait_ms);
    er_http_spec_int(json_object_get(obj, "lease_ms"), ER_SPEC_ABSENT, &sp->lease_ms);
    const json_t *w = json_object_get(obj, "queue_weights");
    sp->weights_kind = !w ? ER_SPEC_ABSENT
                       : json_is_null(w) ? ER_SPEC_NULL
                       : json_is_object(w) ? ER_SPEC_SET
                                           : ER_SPEC_BAD_TYPE;
    if (sp->weights_kind == ER_SPEC_SET) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)w, key, val) {
            if (sp->nweights > ER_FETCH_QUEUES_MAX) {
                sp->nweights++; /* too many: refused */
                break;
            }
            sp->weights[sp->nweights].queue = (er_spec_str){ER_SPEC_SET, key, strlen(key)};
            er_http_spec_int(val, ER_SPEC_BAD_TYPE, &sp->weights[sp->nweights].weight);
            sp->nweights++;
        }
    }
    return 0;
}

static bool failure_known(const char *k, size_t n)
{
    static const char *const keys[] = {"class", "message", "delay_ms", "retry_after_ms",
                                       "backtrace"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strlen(keys[i]) == n && memcmp(keys[i], k, n) == 0)
            return true;
    return false;
}

int er_http_failure_spec(const json_t *v, er_failure_spec *sp, char **backtrace, er_error *err)
{
    memset(sp, 0, sizeof *sp);
    *backtrace = NULL;
    if (!v)
        return 0;
    if (!json_is_object(v)) {
        sp->kind = ER_SPEC_BAD_TYPE;
        return 0;
    }
    sp->kind = ER_SPEC_SET;
    er_http_first_unknown(v, failure_known, &sp->unknown);
    er_http_spec_str(json_object_get(v, "class"), ER_SPEC_ABSENT, &sp->cls);
    er_http_spec_str(json_object_get(v, "message"), ER_SPEC_ABSENT, &sp->message);
    er_http_spec_int(json_object_get(v, "delay_ms"), ER_SPEC_ABSENT, &sp->delay_ms);
    er_http_spec_int(json_object_get(v, "retry_after_ms"), ER_SPEC_ABSENT, &sp->retry_after_ms);
    return er_http_json_text(json_object_get(v, "backtrace"), &sp->backtrace, backtrace, err);
}

/* The first member of a kind's object besides `allowed` (NULL: none). */
static void kind_unknown(const json_t *k, const char *allowed, er_spec_str *out)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)k, key, val) {
        if (!allowed || strcmp(key, allowed) != 0) {
            *out = (er_spec_str){ER_SPEC_SET, key, strlen(key)};
            return;
        }
    }
}

int er_http_ack_item_spec(const json_t *item, er_ack_spec *sp, char **text, er_error *err)
{
    static const char *const keys[] = {"id", "lease_token", "complete", "fail", "release", NULL};
    memset(sp, 0, sizeof *sp);
    *text = NULL;
    if (!json_is_object(item))
        return er_error_set(err, ER_EINVAL, "", "must be an object");
    int rc = er_json_check_keys(item, keys, "", err);
    if (rc < 0)
        return rc;
    er_http_spec_str(json_object_get(item, "id"), ER_SPEC_ABSENT, &sp->id);
    er_http_spec_str(json_object_get(item, "lease_token"), ER_SPEC_ABSENT, &sp->lease_token);
    static const er_ack_kind kinds[] = {ER_ACK_COMPLETE, ER_ACK_FAIL, ER_ACK_RELEASE};
    static const char *const allowed[] = {"result", "error", NULL};
    const json_t *k = NULL;
    for (int i = 0; i < 3; i++) {
        const json_t *v = json_object_get(item, er_ack_kind_name(kinds[i]));
        if (v) {
            sp->kind_given++;
            sp->kind = kinds[i];
            k = v;
        }
    }
    if (sp->kind_given != 1)
        return 0;
    if (!json_is_object(k)) {
        sp->kind_bad_type = true;
        return 0;
    }
    kind_unknown(k, allowed[sp->kind], &sp->unknown);
    if (sp->kind == ER_ACK_COMPLETE)
        return er_http_json_text(json_object_get(k, "result"), &sp->result, text, err);
    if (sp->kind == ER_ACK_FAIL) {
        const json_t *e = json_object_get(k, "error");
        return er_http_failure_spec(e, &sp->failure, text, err);
    }
    return 0;
}
