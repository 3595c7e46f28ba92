/* SPDX-License-Identifier: MIT
 *
 * Error helpers: filling er_error and mapping codes to API names and HTTP
 * statuses. One table, used by every frontend.
 */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int er_error_set(er_error *err, int code, const char *field, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        snprintf(err->field, sizeof err->field, "%s", field ? field : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
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
