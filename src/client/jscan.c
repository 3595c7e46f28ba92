/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's strict JSON tokenizer (jscan.h). It replaces a
 * jansson tree per reply on the worker's hot path, and refuses every
 * document jansson would refuse for the replies it reads. It stays here,
 * not in util: only liberrand reads JSON this way (the server has jansson).
 */
#include "client/jscan.h"

#include "errand/errand.h"
#include "util/buf.h"
#include "util/utf8.h"

#include <stdlib.h>
#include <string.h>

/* ---- tokenizer ------------------------------------------------------------ */

void er_jscan_init(er_jscan *s)
{
    memset(s, 0, sizeof *s);
}

void er_jscan_fini(er_jscan *s)
{
    if (!s)
        return;
    free(s->tok);
    free(s->stack);
    memset(s, 0, sizeof *s);
}

static long new_tok(er_jscan *s, int type, size_t start)
{
    /* at most one token per byte, and texts are under 2^32 bytes */
    if (ER_GROW(&s->tok, &s->cap, s->n + 1, UINT32_MAX) < 0)
        return -1;
    er_jstok *t = &s->tok[s->n];
    t->type = (uint8_t)type;
    t->start = (uint32_t)start;
    t->end = (uint32_t)start;
    t->esc = false;
    return (long)s->n++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static long hex4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* A string starting at text[*pos] == '"'; *pos ends after its closing quote. */
static int scan_string(er_jscan *s, const char *text, size_t len, size_t *pos)
{
    size_t i = *pos + 1;
    long t = new_tok(s, ER_JS_STRING, i);
    if (t < 0)
        return ERRAND_ENOMEM;
    bool esc = false;
    for (;;) {
        /* The common case: plain ASCII. */
        while (i < len) {
            unsigned char c = (unsigned char)text[i];
            if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
                break;
            i++;
        }
        if (i >= len)
            return ERRAND_EINVAL;
        unsigned char c = (unsigned char)text[i];
        if (c == '"')
            break;
        if (c < 0x20)
            return ERRAND_EINVAL;
        if (c >= 0x80) {
            bool ok;
            i += er_utf8_seq(text + i, len - i, &ok);
            if (!ok)
                return ERRAND_EINVAL;
            continue;
        }
        /* A backslash. */
        esc = true;
        if (i + 1 >= len)
            return ERRAND_EINVAL;
        char e = text[i + 1];
        if (strchr("\"\\/bfnrt", e) && e) {
            i += 2;
            continue;
        }
        if (e != 'u' || i + 6 > len)
            return ERRAND_EINVAL;
        long u = hex4(text + i + 2);
        if (u <= 0 || (u >= 0xdc00 && u <= 0xdfff)) /* \u0000 or a lone low surrogate */
            return ERRAND_EINVAL;
        i += 6;
        if (u >= 0xd800 && u <= 0xdbff) {
            if (i + 6 > len || text[i] != '\\' || text[i + 1] != 'u')
                return ERRAND_EINVAL;
            long lo = hex4(text + i + 2);
            if (lo < 0xdc00 || lo > 0xdfff)
                return ERRAND_EINVAL;
            i += 6;
        }
    }
    s->tok[t].end = (uint32_t)i;
    s->tok[t].esc = esc;
    s->tok[t].next = (uint32_t)s->n;
    *pos = i + 1;
    return 0;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int scan_number(er_jscan *s, const char *text, size_t len, size_t *pos)
{
    size_t i = *pos;
    if (i < len && text[i] == '-')
        i++;
    if (i >= len || !is_digit(text[i]))
        return ERRAND_EINVAL;
    if (text[i] == '0')
        i++;
    else
        while (i < len && is_digit(text[i]))
            i++;
    if (i < len && text[i] == '.') {
        i++;
        if (i >= len || !is_digit(text[i]))
            return ERRAND_EINVAL;
        while (i < len && is_digit(text[i]))
            i++;
    }
    if (i < len && (text[i] == 'e' || text[i] == 'E')) {
        i++;
        if (i < len && (text[i] == '+' || text[i] == '-'))
            i++;
        if (i >= len || !is_digit(text[i]))
            return ERRAND_EINVAL;
        while (i < len && is_digit(text[i]))
            i++;
    }
    long t = new_tok(s, ER_JS_NUMBER, *pos);
    if (t < 0)
        return ERRAND_ENOMEM;
    s->tok[t].end = (uint32_t)i;
    s->tok[t].next = (uint32_t)s->n;
    *pos = i;
    return 0;
}

static int scan_literal(er_jscan *s, const char *text, size_t len, size_t *pos)
{
    static const char *words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(words[k]);
        if (len - *pos >= n && memcmp(text + *pos, words[k], n) == 0) {
            long t = new_tok(s, ER_JS_LITERAL, *pos);
            if (t < 0)
                return ERRAND_ENOMEM;
            s->tok[t].end = (uint32_t)(*pos + n);
            s->tok[t].next = (uint32_t)s->n;
            *pos += n;
            return 0;
        }
    }
    return ERRAND_EINVAL;
}

static size_t skip_ws(const char *text, size_t len, size_t i)
{
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
        i++;
    return i;
}

/* After '{' or ',' in an object: a key string and ':'; *pos ends at the value. */
static int scan_key(er_jscan *s, const char *text, size_t len, size_t *pos)
{
    size_t i = skip_ws(text, len, *pos);
    if (i >= len || text[i] != '"')
        return ERRAND_EINVAL;
    int rc = scan_string(s, text, len, &i);
    if (rc < 0)
        return rc;
    i = skip_ws(text, len, i);
    if (i >= len || text[i] != ':')
        return ERRAND_EINVAL;
    *pos = i + 1;
    return 0;
}

static int parse(er_jscan *s, const char *text, size_t len)
{
    if (len >= UINT32_MAX)
        return ERRAND_EINVAL;
    if (!s->stack && !(s->stack = malloc(ER_JS_MAX_DEPTH * sizeof *s->stack)))
        return ERRAND_ENOMEM;
    s->n = 0;
    size_t depth = 0, i = skip_ws(text, len, 0);
    if (i >= len || (text[i] != '{' && text[i] != '['))
        return ERRAND_EINVAL;
    int rc;
    for (;;) {
        /* A value at i (after whitespace). */
        i = skip_ws(text, len, i);
        if (i >= len)
            return ERRAND_EINVAL;
        char c = text[i];
        if (c == '{' || c == '[') {
            if (depth == ER_JS_MAX_DEPTH)
                return ERRAND_EINVAL;
            long t = new_tok(s, c == '{' ? ER_JS_OBJECT : ER_JS_ARRAY, i);
            if (t < 0)
                return ERRAND_ENOMEM;
            s->stack[depth++] = (uint32_t)t;
            i = skip_ws(text, len, i + 1);
            if (i < len && text[i] == (c == '{' ? '}' : ']')) {
                i++; /* empty: closed below */
            } else {
                if (c == '{' && (rc = scan_key(s, text, len, &i)) < 0)
                    return rc;
                continue;
            }
            s->tok[t].end = (uint32_t)i;
            s->tok[t].next = (uint32_t)s->n;
            depth--;
        } else if (c == '"') {
            if ((rc = scan_string(s, text, len, &i)) < 0)
                return rc;
        } else if (c == '-' || is_digit(c)) {
            if ((rc = scan_number(s, text, len, &i)) < 0)
                return rc;
        } else if ((rc = scan_literal(s, text, len, &i)) < 0) {
            return rc;
        }
        /* After a value: ',' or the close of the enclosing containers. */
        for (;;) {
            if (depth == 0) {
                i = skip_ws(text, len, i);
                return i == len ? 0 : ERRAND_EINVAL;
            }
            er_jstok *top = &s->tok[s->stack[depth - 1]];
            i = skip_ws(text, len, i);
            if (i >= len)
                return ERRAND_EINVAL;
            if (text[i] == ',') {
                i++;
                if (top->type == ER_JS_OBJECT && (rc = scan_key(s, text, len, &i)) < 0)
                    return rc;
                break;
            }
            if (text[i] != (top->type == ER_JS_OBJECT ? '}' : ']'))
                return ERRAND_EINVAL;
            i++;
            top->end = (uint32_t)i;
            top->next = (uint32_t)s->n;
            depth--;
        }
    }
}

int er_jscan_parse(er_jscan *s, const char *text, size_t len)
{
    int rc = parse(s, text, len);
    if (rc < 0)
        s->n = 0;
    return rc;
}

/* Whether string token t equals key. */
bool er_jscan_key_is(const char *text, const er_jstok *t, const char *key, size_t klen)
{
    if (!t->esc)
        return t->end - t->start == klen && memcmp(text + t->start, key, klen) == 0;
    char buf[256];
    if (t->end - t->start >= sizeof buf)
        return false; /* our keys are short; a long escaped key is never one of them */
    size_t n = er_jscan_unescape(text, t, buf);
    return n == klen && memcmp(buf, key, klen) == 0;
}

long er_jscan_get(const er_jscan *s, const char *text, long obj, const char *key)
{
    if (obj < 0 || (size_t)obj >= s->n || s->tok[obj].type != ER_JS_OBJECT)
        return -1;
    size_t klen = strlen(key), end = s->tok[obj].next;
    long found = -1;
    for (size_t k = (size_t)obj + 1; k < end; k = s->tok[k + 1].next)
        if (er_jscan_key_is(text, &s->tok[k], key, klen))
            found = (long)k + 1;
    return found;
}

static size_t put_utf8(char *out, unsigned long cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

size_t er_jscan_unescape(const char *text, const er_jstok *t, char *out)
{
    const char *p = text + t->start, *end = text + t->end;
    if (!t->esc) {
        size_t n = (size_t)(end - p);
        memcpy(out, p, n);
        out[n] = '\0';
        return n;
    }
    /* The tokenizer checked every escape, so this trusts them. */
    size_t o = 0;
    while (p < end) {
        if (*p != '\\') {
            out[o++] = *p++;
            continue;
        }
        char e = p[1];
        p += 2;
        switch (e) {
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            unsigned long cp = (unsigned long)hex4(p);
            p += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                unsigned long lo = (unsigned long)hex4(p + 2);
                p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            o += put_utf8(out + o, cp);
            break;
        }
        default: out[o++] = e; break; /* " \ / */
        }
    }
    out[o] = '\0';
    return o;
}

bool er_jscan_int(const char *text, const er_jstok *t, int64_t *v)
{
    if (t->type != ER_JS_NUMBER)
        return false;
    const char *p = text + t->start, *end = text + t->end;
    bool neg = *p == '-';
    if (neg)
        p++;
    uint64_t acc = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; p < end; p++) {
        if (!is_digit(*p))
            return false; /* a fraction or an exponent */
        unsigned d = (unsigned)(*p - '0');
        if (acc > (lim - d) / 10)
            return false;
        acc = acc * 10 + d;
    }
    *v = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    return true;
}
