/* SPDX-License-Identifier: MIT
 *
 * Faktory framing (proto.h): command lines in, RESP replies out, and a
 * reply reader. Pure: bytes in, slices and verdicts out.
 */
#include "server/faktory/proto.h"

#include <stdint.h>
#include <string.h>

#include "util/err.h"

static const char *const verbs[] = {
    [ER_FK_UNKNOWN] = "", [ER_FK_HELLO] = "HELLO", [ER_FK_PUSH] = "PUSH",
    [ER_FK_PUSHB] = "PUSHB", [ER_FK_FETCH] = "FETCH", [ER_FK_ACK] = "ACK",
    [ER_FK_FAIL] = "FAIL", [ER_FK_BEAT] = "BEAT", [ER_FK_INFO] = "INFO",
    [ER_FK_END] = "END", [ER_FK_FLUSH] = "FLUSH", [ER_FK_MUTATE] = "MUTATE",
    [ER_FK_QUEUE] = "QUEUE", [ER_FK_TRACK] = "TRACK",
};
#define NVERBS (sizeof verbs / sizeof verbs[0])

const char *er_fk_verb_name(er_fk_verb v)
{
    return (size_t)v < NVERBS ? verbs[v] : "";
}

int er_fk_line_next(const char *buf, size_t len, size_t max, size_t *line_len, size_t *used)
{
    /* the line end may be the byte after max ('\r') and the one after it */
    size_t look = len < max + 2 ? len : max + 2;
    const char *nl = memchr(buf, '\n', look);
    if (!nl) {
        if (len > max + 1 || (len == max + 1 && buf[max] != '\r'))
            return ER_ETOOBIG;
        return 0;
    }
    size_t n = (size_t)(nl - buf);
    *used = n + 1;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if (n > max)
        return ER_ETOOBIG;
    *line_len = n;
    return 1;
}

int er_fk_command_parse(const char *line, size_t n, er_fk_command *out, const char **why)
{
    memset(out, 0, sizeof *out);
    if (n == 0) {
        *why = "empty command";
        return ER_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)line[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            *why = "control character in command";
            return ER_EINVAL;
        }
    }
    size_t v = 0;
    while (v < n && line[v] != ' ')
        v++;
    if (v == 0 || v > 16) {
        *why = "malformed command";
        return ER_EINVAL;
    }
    for (size_t i = 0; i < v; i++)
        if (line[i] < 'A' || line[i] > 'Z') {
            *why = "malformed command";
            return ER_EINVAL;
        }
    out->name = line;
    out->name_len = v;
    if (v < n) {
        out->arg = line + v + 1;
        out->arg_len = n - v - 1;
    }
    for (size_t k = 1; k < NVERBS; k++)
        if (strlen(verbs[k]) == v && memcmp(verbs[k], line, v) == 0)
            out->verb = (er_fk_verb)k;
    return 0;
}

bool er_fk_looks_like_http(const char *line, size_t n)
{
    static const char *const methods[] = {"GET ",     "POST ",    "PUT ",   "HEAD ",
                                          "DELETE ",  "OPTIONS ", "PATCH ", "CONNECT ",
                                          "TRACE ",   "PRI "};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        size_t m = strlen(methods[i]);
        if (n >= m && memcmp(line, methods[i], m) == 0)
            return true;
    }
    static const char tag[] = " HTTP/1.";
    for (size_t i = 0; n >= sizeof tag - 1 && i + sizeof tag - 1 <= n; i++)
        if (memcmp(line + i, tag, sizeof tag - 1) == 0)
            return true;
    return false;
}

/* text with CR and LF as spaces: a reply line stays one line */
static void add_line_text(er_buf *b, const char *s, size_t n)
{
    char *p = er_buf_reserve(b, n);
    if (!p)
        return;
    for (size_t i = 0; i < n; i++)
        p[i] = s[i] == '\r' || s[i] == '\n' ? ' ' : s[i];
    er_buf_commit(b, n);
}

void er_fk_reply_simple(er_buf *b, const char *text)
{
    er_buf_add(b, "+", 1);
    add_line_text(b, text, strlen(text));
    er_buf_add(b, "\r\n", 2);
}

void er_fk_reply_error(er_buf *b, const char *code, const char *msg)
{
    er_buf_add(b, "-", 1);
    add_line_text(b, code, strlen(code));
    if (msg && *msg) {
        er_buf_add(b, " ", 1);
        add_line_text(b, msg, strlen(msg));
    }
    er_buf_add(b, "\r\n", 2);
}

void er_fk_reply_bulk(er_buf *b, const char *data, size_t n)
{
    er_buf_addf(b, "$%zu\r\n", n);
    er_buf_add(b, data, n);
    er_buf_add(b, "\r\n", 2);
}

void er_fk_reply_null(er_buf *b)
{
    er_buf_add(b, "$-1\r\n", 5);
}

int er_fk_reply_next(const char *buf, size_t len, size_t line_max, size_t bulk_max,
                     er_fk_reply *r, size_t *used)
{
    size_t n, u;
    int rc = er_fk_line_next(buf, len, line_max, &n, &u);
    if (rc <= 0)
        return rc;
    if (n == 0)
        return ER_EINVAL;
    char t = buf[0];
    if (t == '+' || t == '-') {
        r->kind = t == '+' ? ER_FK_R_SIMPLE : ER_FK_R_ERROR;
        r->data = buf + 1;
        r->len = n - 1;
        *used = u;
        return 1;
    }
    if (t != '$')
        return ER_EINVAL;
    if (n == 3 && memcmp(buf, "$-1", 3) == 0) {
        r->kind = ER_FK_R_NULL;
        r->data = NULL;
        r->len = 0;
        *used = u;
        return 1;
    }
    /* the length: 1..19 decimal digits, no sign, no leading zero unless 0 */
    if (n < 2 || n > 20 || (buf[1] == '0' && n > 2))
        return ER_EINVAL;
    uint64_t v = 0;
    for (size_t i = 1; i < n; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return ER_EINVAL;
        v = v * 10 + (uint64_t)(buf[i] - '0');
    }
    if (v > bulk_max)
        return ER_ETOOBIG;
    size_t need = u + (size_t)v + 2;
    if (len < need)
        return 0;
    if (buf[u + v] != '\r' || buf[u + v + 1] != '\n')
        return ER_EINVAL;
    r->kind = ER_FK_R_BULK;
    r->data = buf + u;
    r->len = (size_t)v;
    *used = need;
    return 1;
}
