/* SPDX-License-Identifier: MIT
 *
 * JSON writer: escaping, numbers and nesting into one buffer. Hot paths
 * (keys, plain ASCII strings, integers, times) reserve room once and write
 * in place; only strings that need escapes take the byte-by-byte path.
 */
#include "util/jsonw.h"
#include "util/clock.h"
#include "util/utf8.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The old field names alias out's. */

void er_jsonw_init(er_jsonw *w, size_t max)
{
    memset(w, 0, sizeof *w);
    er_buf_init(&w->out, max);
    w->first[0] = true;
}

void er_jsonw_init_buf(er_jsonw *w, size_t max, char *buf, size_t cap)
{
    memset(w, 0, sizeof *w);
    er_buf_init_mem(&w->out, max, buf, cap);
    w->first[0] = true;
}

void er_jsonw_fini(er_jsonw *w)
{
    er_buf_fini(&w->out);
    memset(w, 0, sizeof *w);
}

/* Where the next n bytes go, or NULL once failed (past the cap or out of
 * memory). The caller writes them and ends with done(). */
static inline char *reserve(er_jsonw *w, size_t n)
{
    if (w->failed)
        return NULL;
    char *p = er_buf_reserve(&w->out, n);
    if (!p)
        w->failed = true;
    return p;
}

static inline void done(er_jsonw *w, char *end)
{
    er_buf_commit(&w->out, (size_t)(end - (w->out.data + w->out.len)));
}

static void put(er_jsonw *w, const char *s, size_t n)
{
    char *p = reserve(w, n);
    if (!p)
        return;
    memcpy(p, s, n);
    done(w, p + n);
}

/* A comma before every member or element but the first of its container. */
static void sep(er_jsonw *w)
{
    if (!w->first[w->depth])
        put(w, ",", 1);
    w->first[w->depth] = false;
}

static void open_(er_jsonw *w, char c)
{
    sep(w);
    put(w, &c, 1);
    if (w->depth + 1 >= ER_JSONW_DEPTH) {
        w->failed = true;
        return;
    }
    w->first[++w->depth] = true;
}

static void close_(er_jsonw *w, char c)
{
    put(w, &c, 1);
    if (w->depth > 0)
        w->depth--;
}

void er_jsonw_begin_object(er_jsonw *w) { open_(w, '{'); }
void er_jsonw_end_object(er_jsonw *w) { close_(w, '}'); }
void er_jsonw_begin_array(er_jsonw *w) { open_(w, '['); }
void er_jsonw_end_array(er_jsonw *w) { close_(w, ']'); }

/* Byte classes: 1 needs an escape (control characters, '"', '\\'), 2 starts
 * or continues a multi-byte sequence (checked before it is copied). */
#define X16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
static const unsigned char byte_class[256] = {
    X16(1), X16(1), ['"'] = 1, ['\\'] = 1,
    [0x80] = X16(2), X16(2), X16(2), X16(2), X16(2), X16(2), X16(2), X16(2),
};
#undef X16

/* Length of s, and whether it can be copied between quotes as it is. */
static size_t scan(const char *s, bool *plain)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned char any = 0;
    size_t n = 0;
    for (; p[n]; n++)
        any |= byte_class[p[n]];
    *plain = any == 0 || (any == 2 && er_utf8_valid(s, n));
    return n;
}

int er_json_str(er_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    if (b->err)
        return b->err;
    size_t start = b->len, n = strlen(s), run = 0;
    er_buf_add(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (!byte_class[c]) {
            i++;
            continue;
        }
        if (c >= 0x80) {
            bool ok;
            size_t k = er_utf8_seq(s + i, n - i, &ok);
            if (ok) {
                i += k;
                continue;
            }
            er_buf_add(b, s + run, i - run);
            er_buf_add(b, "\xef\xbf\xbd", 3); /* U+FFFD for the ill-formed bytes */
            i += k;
            run = i;
            continue;
        }
        er_buf_add(b, s + run, i - run);
        char e[6] = {'\\', 0, 0, 0, 0, 0};
        size_t en = 2;
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            e[1] = 'u';
            e[2] = '0';
            e[3] = '0';
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            en = 6;
            break;
        }
        er_buf_add(b, e, en);
        i++;
        run = i;
    }
    er_buf_add(b, s + run, n - run);
    er_buf_add(b, "\"", 1);
    if (b->err) {
        er_buf_truncate(b, start); /* no half string */
        return b->err;
    }
    return 0;
}

static void escaped_slow(er_jsonw *w, const char *s)
{
    if (!w->failed && er_json_str(&w->out, s) < 0)
        w->failed = true;
}

/* Writes [comma]"s"[colon] in one piece when s needs no escapes. */
static void quoted(er_jsonw *w, bool comma, const char *s, bool colon)
{
    bool plain;
    size_t n = scan(s, &plain);
    if (!plain) {
        if (comma)
            put(w, ",", 1);
        escaped_slow(w, s);
        if (colon)
            put(w, ":", 1);
        return;
    }
    char *p = reserve(w, n + 4);
    if (!p)
        return;
    if (comma)
        *p++ = ',';
    *p++ = '"';
    memcpy(p, s, n);
    p += n;
    *p++ = '"';
    if (colon)
        *p++ = ':';
    done(w, p);
}

/* Whether a value at this point needs a comma first (array elements but the
 * first); marks the container non-empty. */
static bool value_comma(er_jsonw *w)
{
    bool comma = !w->first[w->depth];
    w->first[w->depth] = false;
    return comma;
}

void er_jsonw_key(er_jsonw *w, const char *key)
{
    quoted(w, value_comma(w), key, true);
    /* the value that follows is not a new member */
    w->first[w->depth] = true;
}

void er_jsonw_str(er_jsonw *w, const char *s)
{
    bool comma = value_comma(w);
    if (s) {
        quoted(w, comma, s, false);
        return;
    }
    char *p = reserve(w, 5);
    if (!p)
        return;
    if (comma)
        *p++ = ',';
    memcpy(p, "null", 4);
    done(w, p + 4);
}

/* Decimal text of v at the end of b; returns where it starts. */
static size_t int_text(char b[24], int64_t v)
{
    size_t n = 24;
    /* magnitude as unsigned, so INT64_MIN works too */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        b[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        b[--n] = '-';
    return n;
}

void er_jsonw_int(er_jsonw *w, int64_t v)
{
    char b[24];
    size_t n = int_text(b, v);
    bool comma = value_comma(w);
    char *p = reserve(w, sizeof b - n + 1);
    if (!p)
        return;
    if (comma)
        *p++ = ',';
    memcpy(p, b + n, sizeof b - n);
    done(w, p + (sizeof b - n));
}

/* The last double written on this thread and its text: a job's backoff
 * jitter is nearly always the same value, and "%.17g" is costly. */
static _Thread_local struct {
    double v;
    bool valid;
    int n;
    char text[32];
} last_double;

/* Fills last_double with v's text. */
static void double_text(double v)
{
    if (!last_double.valid || memcmp(&last_double.v, &v, sizeof v) != 0) {
        char *b = last_double.text;
        int n = snprintf(b, sizeof last_double.text, "%.17g", v);
        /* keep it a JSON real: jansson reads "1" back as an integer */
        if (!strpbrk(b, ".eE") && n < (int)sizeof last_double.text - 2) {
            b[n++] = '.';
            b[n++] = '0';
            b[n] = '\0';
        }
        last_double.v = v;
        last_double.n = n;
        last_double.valid = true;
    }
}

void er_jsonw_double(er_jsonw *w, double v)
{
    bool comma = value_comma(w);
    double_text(v);
    if (comma)
        put(w, ",", 1);
    put(w, last_double.text, (size_t)last_double.n);
}

void er_jsonw_bool(er_jsonw *w, bool v)
{
    if (value_comma(w))
        put(w, ",", 1);
    put(w, v ? "true" : "false", v ? 4 : 5);
}

void er_jsonw_null(er_jsonw *w)
{
    if (value_comma(w))
        put(w, ",", 1);
    put(w, "null", 4);
}

void er_jsonw_time(er_jsonw *w, int64_t ms)
{
    if (ms == 0) {
        er_jsonw_null(w);
        return;
    }
    bool comma = value_comma(w);
    char *p = reserve(w, ER_TIME_LEN + 3);
    if (!p)
        return;
    if (comma)
        *p++ = ',';
    *p++ = '"';
    er_time_put(ms, p);
    p += ER_TIME_LEN;
    *p++ = '"';
    done(w, p);
}

void er_jsonw_raw(er_jsonw *w, const char *json, size_t len)
{
    if (value_comma(w))
        put(w, ",", 1);
    if (json)
        put(w, json, len);
    else
        put(w, "null", 4);
}

void er_jsonw_members(er_jsonw *w, const char *members)
{
    if (!members || !*members)
        return;
    sep(w);
    put(w, members, strlen(members));
}

/* Reserves the constant key `lit` (",\"key\":") plus `more` bytes and writes
 * the key, without its comma when it is the object's first member. Returns
 * where the value goes, or NULL once failed. The caller ends with done(). */
static char *key_lit(er_jsonw *w, const char *lit, size_t n, size_t more)
{
    char *p = reserve(w, n + more);
    if (!p)
        return NULL;
    if (w->first[w->depth]) {
        lit++;
        n--;
        w->first[w->depth] = false;
    }
    memcpy(p, lit, n);
    return p + n;
}

void er_jsonw_kstr(er_jsonw *w, const char *lit, size_t n, const char *s)
{
    char *p;
    if (!s) {
        if ((p = key_lit(w, lit, n, 4))) {
            memcpy(p, "null", 4);
            done(w, p + 4);
        }
        return;
    }
    bool plain;
    size_t len = scan(s, &plain);
    if (!plain) {
        if ((p = key_lit(w, lit, n, 0))) {
            done(w, p);
            escaped_slow(w, s);
        }
        return;
    }
    if (!(p = key_lit(w, lit, n, len + 2)))
        return;
    *p++ = '"';
    memcpy(p, s, len);
    p += len;
    *p++ = '"';
    done(w, p);
}

void er_jsonw_kint(er_jsonw *w, const char *lit, size_t n, int64_t v)
{
    char b[24];
    size_t at = int_text(b, v);
    char *p = key_lit(w, lit, n, sizeof b - at);
    if (!p)
        return;
    memcpy(p, b + at, sizeof b - at);
    done(w, p + (sizeof b - at));
}

void er_jsonw_kdouble(er_jsonw *w, const char *lit, size_t n, double v)
{
    double_text(v);
    size_t len = (size_t)last_double.n;
    char *p = key_lit(w, lit, n, len);
    if (!p)
        return;
    memcpy(p, last_double.text, len);
    done(w, p + len);
}

void er_jsonw_ktime(er_jsonw *w, const char *lit, size_t n, int64_t ms)
{
    if (ms == 0) {
        er_jsonw_kstr(w, lit, n, NULL);
        return;
    }
    char *p = key_lit(w, lit, n, ER_TIME_LEN + 2);
    if (!p)
        return;
    *p++ = '"';
    er_time_put(ms, p);
    p += ER_TIME_LEN;
    *p++ = '"';
    done(w, p);
}

void er_jsonw_kraw(er_jsonw *w, const char *lit, size_t n, const char *json, size_t len)
{
    if (!json) {
        er_jsonw_kstr(w, lit, n, NULL);
        return;
    }
    char *p = key_lit(w, lit, n, len);
    if (!p)
        return;
    memcpy(p, json, len);
    done(w, p + len);
}

void er_jsonw_kbegin_object(er_jsonw *w, const char *lit, size_t n)
{
    char *p = key_lit(w, lit, n, 1);
    if (!p)
        return;
    *p++ = '{';
    done(w, p);
    if (w->depth + 1 >= ER_JSONW_DEPTH) {
        w->failed = true;
        return;
    }
    w->first[++w->depth] = true;
}
