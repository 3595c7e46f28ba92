/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for the request-head reader that judges a request
 * before libevent reads its body (er_http_head_parse, http_conn.c). The
 * input is a head (a blank line is appended when it has none). An
 * accepted head has a known method, HTTP/1.x, a target libevent parses,
 * and headers whose names are tokens and whose values carry no line break
 * and no surrounding blanks, at most one a line; a refusal names why.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "server/http/http_internal.h"

static bool is_token(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch <= 0x20 || ch >= 0x7f || strchr("()<>@,;:\\\"/[]?={}", ch))
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *h = malloc(size + 3);
    if (!h)
        return 0;
    memcpy(h, data, size);
    size_t len = size;
    if (len < 2 || memcmp(h + len - 2, "\n\n", 2) != 0) {
        memcpy(h + len, "\r\n", 2);
        len += 2;
    }
    h[len] = '\0';
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += h[i] == '\n';
    er_http_head hd;
    const char *bad = er_http_head_parse(h, len, &hd);
    if (bad) {
        if (!*bad)
            abort();
    } else {
        static const int methods[] = {EVHTTP_REQ_GET,    EVHTTP_REQ_POST, EVHTTP_REQ_PUT,
                                      EVHTTP_REQ_DELETE, EVHTTP_REQ_HEAD, EVHTTP_REQ_OPTIONS,
                                      EVHTTP_REQ_PATCH};
        bool known = false;
        for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
            known |= methods[i] == hd.method;
        if (!known || hd.major != 1 || hd.minor < 0 || hd.minor > 9 || !hd.uri || !hd.target ||
            !*hd.target)
            abort();
        size_t n = 0;
        for (struct evkeyval *kv = hd.headers.tqh_first; kv; kv = kv->next.tqe_next, n++) {
            size_t vl = strlen(kv->value);
            if (!is_token(kv->key) || strpbrk(kv->value, "\r\n") ||
                (vl && (kv->value[0] == ' ' || kv->value[0] == '\t' ||
                        kv->value[vl - 1] == ' ' || kv->value[vl - 1] == '\t')))
                abort();
        }
        if (n + 1 > lines) /* the request line, then one header a line */
            abort();
    }
    er_http_head_fini(&hd);
    free(h);
    return 0;
}
