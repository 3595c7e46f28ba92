/* SPDX-License-Identifier: MIT
 *
 * Error codes and error details shared by every layer. A failing function
 * returns a negative ER_E* code and, when given an er_error, fills it with the
 * field and a message; the HTTP frontend turns that into the JSON error body.
 */
#ifndef ER_UTIL_ERR_H
#define ER_UTIL_ERR_H

#include <stdarg.h>
#include <stddef.h>

enum {
    ER_OK = 0,
    ER_EINVAL = -1,     /* 400 invalid_argument */
    ER_EAUTH = -2,      /* 401 unauthenticated */
    ER_EPERM = -3,      /* 403 permission_denied */
    ER_ENOTFOUND = -4,  /* 404 not_found */
    ER_ESTALE = -5,     /* 409 lease_lost */
    ER_ECONFLICT = -6,  /* 409 conflict */
    ER_ETOOBIG = -7,    /* 413 payload_too_large */
    ER_ERATE = -8,      /* 429 rate_limited */
    ER_EUNAVAIL = -9,   /* 503 unavailable: store down or failed, nothing written */
    ER_EFULL = -10,     /* 503 unavailable: disk full, nothing written */
    ER_ENOMEM = -11,    /* 503 unavailable: out of memory */
    ER_EINTERNAL = -12, /* 500 internal */
};

#define ER_FIELD_MAX 128   /* bytes of er_error.field, NUL included */
#define ER_MESSAGE_MAX 256 /* bytes of er_error.message, NUL included */

/* field and message always hold valid UTF-8: er_error_set and the other
 * setters below cut a longer text at a character boundary and replace
 * invalid bytes with U+FFFD, so an error reply can always be encoded. */
typedef struct er_error {
    int code;                   /* one of ER_E*, 0 when unset */
    char field[ER_FIELD_MAX];   /* the offending request field, "" when none */
    char message[ER_MESSAGE_MAX];
} er_error;

/* Fills *err (when not NULL) and returns code, so callers can write
 * `return er_error_set(err, ER_EINVAL, "priority", "must be 0..1000");` */
int er_error_set(er_error *err, int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int er_error_vset(er_error *err, int code, const char *field, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Replaces err->field with `field` (NULL: ""); NULL err does nothing. */
void er_error_set_field(er_error *err, const char *field);
/* Prefixes err->field with `prefix` (e.g. "jobs[3]."). */
void er_error_prefix(er_error *err, const char *prefix);

void er_error_clear(er_error *err);

/* API error code string ("invalid_argument", ...) for an ER_E* code. */
const char *er_error_code_name(int code);

/* HTTP status for an ER_E* code. */
int er_error_http_status(int code);

#endif
