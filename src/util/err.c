/* SPDX-License-Identifier: MIT
 *
 * Error helpers: filling er_error (always valid UTF-8, cut at character
 * boundaries) and mapping codes to API names and HTTP statuses. One table,
 * used by every frontend.
 */
#include "util/err.h"
#include "util/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A formatted text longer than this is cut before er_utf8_copy sees it;
 * the message keeps less anyway. */
#define FORMAT_MAX 1024

void er_error_set_field(er_error *err, const char *field)
{
    if (err)
        er_utf8_copy(err->field, sizeof err->field, field ? field : "",
                     field ? strlen(field) : 0);
}

void er_error_prefix(er_error *err, const char *prefix)
{
    if (!err)
        return;
    char tmp[ER_FIELD_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s%s", prefix, err->field);
    er_error_set_field(err, tmp);
}

int er_error_vset(er_error *err, int code, const char *field, const char *fmt, va_list ap)
{
    if (err) {
        err->code = code;
        er_error_set_field(err, field);
        char tmp[FORMAT_MAX];
        int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
        size_t len = n < 0 ? 0 : (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
        er_utf8_copy(err->message, sizeof err->message, tmp, len);
    }
    return code;
}

int er_error_set(er_error *err, int code, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    er_error_vset(err, code, field, fmt, ap);
    va_end(ap);
    return code;
}

void er_error_clear(er_error *err)
{
    if (err)
        memset(err, 0, sizeof *err);
}

static const struct {
    int code;
    const char *name;
    int status;
} table[] = {
    {ER_OK, "ok", 200},
    {ER_EINVAL, "invalid_argument", 400},
    {ER_EAUTH, "unauthenticated", 401},
    {ER_EPERM, "permission_denied", 403},
    {ER_ENOTFOUND, "not_found", 404},
    {ER_ESTALE, "lease_lost", 409},
    {ER_ECONFLICT, "conflict", 409},
    {ER_ETOOBIG, "payload_too_large", 413},
    {ER_ERATE, "rate_limited", 429},
    {ER_EUNAVAIL, "unavailable", 503},
    {ER_EFULL, "unavailable", 503},
    {ER_ENOMEM, "unavailable", 503},
    {ER_EINTERNAL, "internal", 500},
};

const char *er_error_code_name(int code)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].code == code)
            return table[i].name;
    return "internal";
}

int er_error_http_status(int code)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].code == code)
            return table[i].status;
    return 500;
}
