/* SPDX-License-Identifier: MIT
 *
 * Outcome and heartbeat requests (ack.h). The messages here are the API's
 * (docs/api.md).
 */
#include "core/ack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void er_ack_fini(er_ack *a)
{
    if (!a)
        return;
    free(a->id);
    free(a->token);
    free(a->result);
    er_failure_fini(&a->failure);
    memset(a, 0, sizeof *a);
}

const char *er_ack_kind_name(er_ack_kind k)
{
    switch (k) {
    case ER_ACK_COMPLETE: return "complete";
    case ER_ACK_FAIL: return "fail";
    case ER_ACK_RELEASE:
    default: return "release";
    }
}

/* A required id (job id or lease token) into *out (owned). */
static int need_id(const er_spec_str *v, const char *field, char **out, er_error *err)
{
    if (v->kind == ER_SPEC_ABSENT)
        return er_error_set(err, ER_EINVAL, field, "%s is required", field);
    if (v->kind == ER_SPEC_BAD_TYPE)
        return er_error_set(err, ER_EINVAL, field, "%s must be a string", field);
    if (!er_id_ok(v->s, v->n))
        return er_id_validate(NULL, field, err);
    return (*out = er_spec_str_dup(v)) ? 0 : er_error_set(err, ER_ENOMEM, "", "out of memory");
}

/* Optional JSON text of at most max bytes into *out (owned; NULL when absent). */
static int opt_text(const er_spec_str *v, const char *field, size_t max, char **out,
                    er_error *err)
{
    if (v->kind != ER_SPEC_SET)
        return 0;
    if (v->n > max)
        return er_error_set(err, ER_ETOOBIG, field, "%s exceeds %zu bytes", field, max);
    return (*out = er_spec_str_dup(v)) ? 0 : er_error_set(err, ER_ENOMEM, "", "out of memory");
}

static int validate(const er_ack_spec *sp, size_t result_max, er_ack *a, er_error *err)
{
    int rc = need_id(&sp->id, "id", &a->id, err);
    if (rc == 0)
        rc = need_id(&sp->lease_token, "lease_token", &a->token, err);
    if (rc < 0)
        return rc;
    if (sp->kind_given != 1)
        return er_error_set(err, ER_EINVAL, "",
                            "exactly one of complete, fail, release is required");
    const char *kname = er_ack_kind_name(sp->kind);
    if (sp->kind_bad_type)
        return er_error_set(err, ER_EINVAL, kname, "%s must be an object", kname);
    if (sp->unknown.kind != ER_SPEC_ABSENT) {
        char f[ER_FIELD_MAX];
        snprintf(f, sizeof f, "%s.%.*s", kname, (int)sp->unknown.n, sp->unknown.s);
        return er_error_set(err, ER_EINVAL, f, "%s is not a known field", f);
    }
    a->kind = sp->kind;
    if (sp->kind == ER_ACK_COMPLETE)
        return opt_text(&sp->result, "result", result_max, &a->result, err);
    if (sp->kind == ER_ACK_FAIL)
        return er_failure_validate(&sp->failure, &a->failure, err);
    return 0;
}

int er_ack_validate(const er_ack_spec *spec, size_t result_max, er_ack *out, er_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = validate(spec, result_max, out, err);
    if (rc < 0)
        er_ack_fini(out);
    return rc;
}

int er_heartbeat_validate(const er_heartbeat_spec *sp, size_t progress_max, char **token,
                          int64_t *extend_ms, char **progress, er_error *err)
{
    *token = *progress = NULL;
    *extend_ms = 0;
    int rc = need_id(&sp->lease_token, "lease_token", token, err);
    if (rc == 0 && er_spec_int_in(&sp->extend_ms, "extend_ms", ER_LEASE_MIN_MS, ER_LEASE_MAX_MS,
                                  extend_ms, err) < 0)
        rc = ER_EINVAL;
    if (rc == 0)
        rc = opt_text(&sp->progress, "progress", progress_max, progress, err);
    if (rc < 0) {
        free(*token);
        *token = NULL;
        *extend_ms = 0;
    }
    return rc;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strnlen(src, cap - 1) : 0;
    memcpy(dst, src ? src : "", n);
    dst[n] = '\0';
}

void er_ack_info_set(er_ack_info *info, const char *queue, const char *name,
                     const char *trace_id, int attempt, int64_t run_at, int64_t started_at)
{
    if (!info)
        return;
    copy_str(info->queue, sizeof info->queue, queue);
    copy_str(info->name, sizeof info->name, name);
    copy_str(info->trace_id, sizeof info->trace_id, trace_id);
    info->attempt = attempt;
    info->run_at = run_at;
    info->started_at = started_at;
    info->unique_token[0] = '\0';
}

void er_ack_info_set_unique(er_ack_info *info, const char *token)
{
    if (info)
        copy_str(info->unique_token, sizeof info->unique_token, token);
}
