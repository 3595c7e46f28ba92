/* SPDX-License-Identifier: MIT
 *
 * JSON writer: escaping, numbers and nesting into one buffer.
 */
#include "util/jsonw.h"
#include "util/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void er_jsonw_init(er_jsonw *w, size_t max)
{
    memset(w, 0, sizeof *w);
    w->max = max;
    w->first[0] = true;
}

void er_jsonw_fini(er_jsonw *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

static void put(er_jsonw *w, const char *s, size_t n)
{
    if (w->failed)
        return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 1024;
        while (cap < w->len + n + 1)
            cap *= 2;
        if (cap > w->max + 1) {
            if (w->len + n + 1 > w->max + 1) {
                w->failed = true;
                return;
            }
            cap = w->max + 1;
        }
        char *b = realloc(w->buf, cap);
        if (!b) {
            w->failed = true;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
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

static void escaped(er_jsonw *w, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    put(w, "\"", 1);
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(w, run, (size_t)(p - run));
        char e[6] = {'\\', 0, 0, 0, 0, 0};
        size_t n = 2;
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            e[1] = 'u';
            put(w, e, 2);
            e[0] = '0';
            e[1] = '0';
            e[2] = hex[c >> 4];
            e[3] = hex[c & 15];
            n = 4;
            break;
        }
        put(w, e, n);
        run = p + 1;
    }
    put(w, run, strlen(run));
    put(w, "\"", 1);
}

void er_jsonw_key(er_jsonw *w, const char *key)
{
    sep(w);
    escaped(w, key);
    put(w, ":", 1);
    /* the value that follows is not a new member */
    w->first[w->depth] = true;
}

/* Values after a key must not add a comma; values in arrays must. */
static void value_sep(er_jsonw *w)
{
    sep(w);
}

static void after_key_fix(er_jsonw *w)
{
    w->first[w->depth] = false;
}

void er_jsonw_str(er_jsonw *w, const char *s)
{
    value_sep(w);
    if (s)
        escaped(w, s);
    else
        put(w, "null", 4);
    after_key_fix(w);
}

void er_jsonw_int(er_jsonw *w, int64_t v)
{
    char b[24];
    size_t n = sizeof b;
    /* magnitude as unsigned, so INT64_MIN works too */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        b[--n] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        b[--n] = '-';
    value_sep(w);
    put(w, b + n, sizeof b - n);
    after_key_fix(w);
}

void er_jsonw_double(er_jsonw *w, double v)
{
    char b[32];
    value_sep(w);
    int n = snprintf(b, sizeof b, "%.17g", v);
    /* keep it a JSON real: jansson reads "1" back as an integer */
    if (!strpbrk(b, ".eE") && n < (int)sizeof b - 2) {
        b[n++] = '.';
        b[n++] = '0';
    }
    put(w, b, (size_t)n);
    after_key_fix(w);
}

void er_jsonw_bool(er_jsonw *w, bool v)
{
    value_sep(w);
    put(w, v ? "true" : "false", v ? 4 : 5);
    after_key_fix(w);
}

void er_jsonw_null(er_jsonw *w)
{
    value_sep(w);
    put(w, "null", 4);
    after_key_fix(w);
}

void er_jsonw_time(er_jsonw *w, int64_t ms)
{
    if (ms == 0) {
        er_jsonw_null(w);
        return;
    }
    char b[32];
    er_time_format(ms, b);
    er_jsonw_str(w, b);
}

void er_jsonw_raw(er_jsonw *w, const char *json, size_t len)
{
    value_sep(w);
    if (json)
        put(w, json, len);
    else
        put(w, "null", 4);
    after_key_fix(w);
}

void er_jsonw_members(er_jsonw *w, const char *members)
{
    if (!members || !*members)
        return;
    sep(w);
    put(w, members, strlen(members));
}
