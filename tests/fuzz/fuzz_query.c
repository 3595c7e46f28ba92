/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for the HTTP frontend's query-string reader
 * (er_query_foreach, src/server/http/http_parse.c), checked against a plain
 * reference decoder written here: the same key=value pairs in the same order,
 * the same verdict on bad escapes, NUL bytes and overlong parts, and a stop
 * at the callback's first nonzero return. The first input byte picks the pair
 * at which the callback stops; the rest is the query.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http/http_internal.h"
#include "util/err.h"

#define KEY_MAX 63 /* the reader's key buffer holds 63 bytes and a NUL */
#define VALUE_MAX 1023

/* The reference's pairs: offsets of NUL-terminated texts in one buffer. */
typedef struct seen {
    const char *buf;
    size_t (*want)[2];
    int nwant, got, stop_at;
} seen;

static int hex(int ch)
{
    const char *digits = "0123456789abcdefABCDEF", *at = ch ? strchr(digits, ch) : NULL;
    return !at ? -1 : at - digits < 16 ? (int)(at - digits) : (int)(at - digits) - 6;
}

/* Decodes s[0..n) ('+' is a space, %XX a byte, no NUL) into out: at most
 * max bytes and a NUL. */
static bool decode(const char *s, size_t n, char *out, size_t max)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (n - i < 3 || hex(s[i + 1]) < 0 || hex(s[i + 2]) < 0)
                return false;
            ch = hex(s[i + 1]) * 16 + hex(s[i + 2]);
            i += 2;
        } else if (ch == '+') {
            ch = ' ';
        }
        if (ch == 0 || o == max)
            return false;
        out[o++] = (char)ch;
    }
    out[o] = '\0';
    return true;
}

static int on_pair(void *arg, const char *k, const char *v)
{
    seen *s = arg;
    if (s->got >= s->nwant || strcmp(k, s->buf + s->want[s->got][0]) != 0 ||
        strcmp(v, s->buf + s->want[s->got][1]) != 0)
        abort();
    s->got++;
    return s->got == s->stop_at ? 7 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int stop_at = data[0] % 8; /* 0: never stop */
    size_t parts = 1;
    for (size_t i = 1; i < size; i++)
        parts += data[i] == '&';
    char *q = malloc(size), *buf = malloc(size + 2 * parts); /* decoding never grows */
    size_t(*want)[2] = calloc(parts, sizeof *want);
    if (!q || !buf || !want) {
        free(q);
        free(buf);
        free(want);
        return 0;
    }
    memcpy(q, data + 1, size - 1);
    q[size - 1] = '\0';
    /* The reference: split at '&', skip empty parts, split at the first '='. */
    int n = 0;
    size_t used = 0;
    bool bad = false;
    for (const char *p = q; *p && !bad;) {
        size_t len = strcspn(p, "&");
        if (len > 0) {
            const char *eq = memchr(p, '=', len);
            size_t kn = eq ? (size_t)(eq - p) : len;
            want[n][0] = used;
            bad = !decode(p, kn, buf + used, KEY_MAX);
            if (!bad) {
                used += strlen(buf + used) + 1;
                want[n][1] = used;
                buf[used] = '\0';
                bad = eq && !decode(eq + 1, len - kn - 1, buf + used, VALUE_MAX);
            }
            if (!bad) {
                used += strlen(buf + used) + 1;
                n++;
            }
        }
        p += len + (p[len] == '&');
    }
    int expect = stop_at > 0 && stop_at <= n ? 7 : bad ? ER_EINVAL : 0;
    if (stop_at > 0 && stop_at <= n)
        n = stop_at;
    seen s = {buf, want, n, 0, stop_at};
    er_error err = {0};
    int rc = er_query_foreach(q, on_pair, &s, &err);
    if (rc != expect || s.got != n || (rc == ER_EINVAL && err.code != ER_EINVAL))
        abort();
    free(q);
    free(buf);
    free(want);
    return 0;
}
