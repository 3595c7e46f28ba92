/* SPDX-License-Identifier: MIT
 *
 * Reading requests: the body (size and Content-Type checks, the JSON object
 * parse), the JSON member readers handlers validate with, and query strings
 * with their percent-decoding (which dispatch also uses for path
 * parameters). The body readers reply with the error themselves; the
 * others fill an er_error and leave the reply to the caller. No state.
 */
#include <event2/buffer.h>
#include <event2/http.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/job.h"
#include "server/http/http_internal.h"

/* ---- request parsing ---- */

static bool content_type_json(const char *ct)
{
    static const char want[] = "application/json";
    if (!ct)
        return false;
    while (*ct == ' ')
        ct++;
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return false;
    char next = ct[sizeof want - 1];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

int er_http_body_text(er_hctx *c, const char **data, size_t *len_out)
{
    *data = NULL;
    *len_out = 0;
    struct evbuffer *in = evhttp_request_get_input_buffer(c->req);
    size_t len = evbuffer_get_length(in);
    if (len > c->s->max_body) {
        er_http_fail(c, ER_ETOOBIG, "body", "request body exceeds %zu bytes", c->s->max_body);
        return ER_ETOOBIG;
    }
    if (len == 0) {
        er_http_fail(c, ER_EINVAL, "body", "a JSON object body is required");
        return ER_EINVAL;
    }
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(c->req), "Content-Type");
    if (!content_type_json(ct)) {
        er_http_fail(c, ER_EINVAL, "content-type", "Content-Type must be application/json");
        return ER_EINVAL;
    }
    *data = (const char *)evbuffer_pullup(in, -1);
    if (!*data) {
        er_http_fail(c, ER_ENOMEM, NULL, "out of memory");
        return ER_ENOMEM;
    }
    *len_out = len;
    return 0;
}

int er_http_body_parse(er_hctx *c, const char *data, size_t len, json_t **out)
{
    *out = NULL;
    json_error_t je;
    json_t *j = json_loadb(data, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        er_http_fail(c, ER_EINVAL, "body", "invalid JSON at line %d, column %d: %s", je.line,
                     je.column, je.text);
        return ER_EINVAL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        er_http_fail(c, ER_EINVAL, "body", "the body must be a JSON object");
        return ER_EINVAL;
    }
    *out = j;
    return 0;
}

int er_http_body_object(er_hctx *c, json_t **out)
{
    const char *data;
    size_t len;
    *out = NULL;
    int rc = er_http_body_text(c, &data, &len);
    return rc < 0 ? rc : er_http_body_parse(c, data, len, out);
}

/* out = prefix + key, cut to 63 bytes (as snprintf would). */
static void join_field(char out[64], const char *prefix, const char *key)
{
    size_t n = 0;
    for (const char *p = prefix ? prefix : ""; *p && n < 63; p++)
        out[n++] = *p;
    for (const char *p = key; *p && n < 63; p++)
        out[n++] = *p;
    out[n] = '\0';
}

int er_json_check_keys(const json_t *obj, const char *const *allowed, const char *prefix,
                       er_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(*a, key) == 0;
        if (!ok) {
            char f[64];
            join_field(f, prefix, key);
            return er_error_set(err, ER_EINVAL, f, "unknown field %s", f);
        }
    }
    return 0;
}

int er_json_get_int(const json_t *obj, const char *key, int64_t min, int64_t max,
                    const char *prefix, int64_t *out, er_error *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    char f[64];
    join_field(f, prefix, key);
    if (!json_is_integer(v))
        return er_error_set(err, ER_EINVAL, f, "%s must be an integer", f);
    json_int_t n = json_integer_value(v);
    if (n < min || n > max)
        return er_error_set(err, ER_EINVAL, f, "%s must be %lld..%lld", f, (long long)min,
                            (long long)max);
    *out = (int64_t)n;
    return 1;
}

int er_json_get_id(const json_t *obj, const char *key, const char *prefix, const char **out,
                   er_error *err)
{
    char f[64];
    join_field(f, prefix, key);
    json_t *v = json_object_get(obj, key);
    if (!v)
        return er_error_set(err, ER_EINVAL, f, "%s is required", f);
    if (!json_is_string(v))
        return er_error_set(err, ER_EINVAL, f, "%s must be a string", f);
    int rc = er_id_validate(json_string_value(v), f, err);
    if (rc < 0)
        return rc;
    *out = json_string_value(v);
    return 0;
}

int er_json_to_text(const json_t *v, size_t max, const char *field, char **out, er_error *err)
{
    *out = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!*out)
        return er_error_set(err, ER_ENOMEM, field, "out of memory");
    if (strlen(*out) > max) {
        free(*out);
        *out = NULL;
        return er_error_set(err, ER_ETOOBIG, field, "%s exceeds %zu bytes", field, max);
    }
    return 0;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Percent-decodes src[0..n) into dst (cap includes the NUL). Returns the
 * length, or -1 on a bad escape, an embedded NUL or overflow. */
long er_http_pct_decode(const char *src, size_t n, bool plus_space, char *dst, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = src[i];
        if (ch == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hexval(src[i + 1]), lo = hexval(src[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            ch = (char)(hi * 16 + lo);
            i += 2;
            if (ch == '\0')
                return -1;
        } else if (ch == '+' && plus_space) {
            ch = ' ';
        }
        if (o + 1 >= cap)
            return -1;
        dst[o++] = ch;
    }
    dst[o] = '\0';
    return (long)o;
}

int er_query_int(const char *key, const char *v, int lo, int hi, int *out, er_error *err)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!*v || *end || errno || n < lo || n > hi)
        return er_error_set(err, ER_EINVAL, key, "%s must be %d..%d", key, lo, hi);
    *out = (int)n;
    return 0;
}

int er_query_unknown(const char *key, er_error *err)
{
    return er_error_set(err, ER_EINVAL, key, "unknown query parameter %s", key);
}

int er_query_foreach(const char *query, int (*fn)(void *arg, const char *k, const char *v),
                     void *arg, er_error *err)
{
    char k[64], v[1024];
    const char *p = query;
    while (p && *p) {
        size_t n = strcspn(p, "&");
        const char *eq = memchr(p, '=', n);
        size_t kn = eq ? (size_t)(eq - p) : n;
        if (n > 0) {
            if (er_http_pct_decode(p, kn, true, k, sizeof k) < 0)
                return er_error_set(err, ER_EINVAL, "query", "malformed query parameter name");
            long vn = eq ? er_http_pct_decode(eq + 1, n - kn - 1, true, v, sizeof v) : 0;
            if (!eq)
                v[0] = '\0';
            if (vn < 0)
                return er_error_set(err, ER_EINVAL, k, "malformed or too long value");
            int rc = fn(arg, k, v);
            if (rc)
                return rc;
        }
        p += n;
        if (*p == '&')
            p++;
    }
    return 0;
}
