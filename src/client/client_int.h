/* SPDX-License-Identifier: MIT
 *
 * What liberrand's own files share beyond the public header: the request
 * helpers of client.c (error recording, JSON exchange, path building), used
 * by calls.c and the worker runtime. Not installed; nothing here is part of
 * the public API, and nothing here prints.
 */
#ifndef ER_CLIENT_CLIENT_INT_H
#define ER_CLIENT_CLIENT_INT_H

#include "errand/errand.h"

#include <jansson.h>

/* Resets the client's last error before a call. */
void er_client_clear(errand_client *c);

/* Records an error of the last call (its code's API name) and returns code. */
int er_client_error(errand_client *c, int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sends a request and parses a 2xx reply into *root (a new reference).
 * Returns 0 or the error code (already recorded). */
int er_client_call_json(errand_client *c, const char *method, const char *path,
                        const char *body, json_t **root);

/* Like er_client_call_json but hands back the 2xx reply as text: *text
 * returns owned (free()), NUL-terminated, *len bytes; the caller parses it. */
int er_client_call_text(errand_client *c, const char *method, const char *path,
                        const char *body, char **text, size_t *len);

/* Dumps root (key NULL) or its member `key` as owned text into *out; takes
 * root. Returns 0 or the recorded error code. */
int er_client_take_json(errand_client *c, json_t *root, const char *key, char **out);

/* ERRAND_EINVAL (recorded, naming field) when s is NULL or empty, else 0. */
int er_client_need(errand_client *c, const char *s, const char *field);

/* prefix + percent-encoded seg + suffix, owned (free()); NULL on out of memory. */
char *er_client_path(errand_client *c, const char *prefix, const char *seg, const char *suffix);

/* GET (no body) or another method with "{}" to prefix+seg+suffix; hands back
 * member `key` (NULL: the whole reply) in *out. */
int er_client_simple(errand_client *c, const char *method, const char *prefix, const char *seg,
                     const char *suffix, const char *key, char **out);

#endif
