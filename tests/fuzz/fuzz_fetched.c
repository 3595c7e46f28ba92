/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for the worker runtime's reply reader (src/client/
 * jscan.c, fetched.c): the tokenizer must give jansson's verdict on every document
 * (except numbers too large for jansson, which it passes on as text, and raw
 * NUL bytes, which jansson takes as the end and it refuses), and on
 * an accepted one every string unescapes within its span and every object
 * reads as a leased job or is refused, without touching memory it must not.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client/fetched.h"
#include "errand/errand.h"

static void check_tokens(const char *text, const er_jscan *s)
{
    for (size_t i = 0; i < s->n; i++) {
        const er_jstok *t = &s->tok[i];
        if (t->end < t->start || t->next <= i || t->next > s->n)
            abort();
        if (t->type == ER_JS_STRING) {
            size_t span = t->end - t->start;
            char *out = malloc(span + 1);
            if (!out)
                return;
            size_t n = er_jscan_unescape(text, t, out);
            if (n > span || out[n] != '\0' || memchr(out, '\0', n))
                abort();
            free(out);
        } else if (t->type == ER_JS_NUMBER) {
            int64_t v;
            (void)er_jscan_int(text, t, &v);
        } else if (t->type == ER_JS_OBJECT) {
            er_fetched f;
            void *block = er_fetched_read(text, s, (long)i, 16, &f);
            if (block && (!f.id || !f.token || !f.payload || !f.json))
                abort();
            free(block);
            (void)er_jscan_get(s, text, (long)i, "id");
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    er_jscan s;
    er_jscan_init(&s);
    int rc = er_jscan_parse(&s, text, size);
    json_error_t jerr;
    json_t *v = json_loadb(text, size, 0, &jerr);
    if (rc == 0 && !v) {
        /* the one known difference: jansson refuses numbers it cannot hold */
        if (!strstr(jerr.text, "too big") && !strstr(jerr.text, "overflow"))
            abort();
    } else if (rc != 0 && v && rc != ERRAND_ENOMEM && !memchr(text, '\0', size)) {
        /* jansson stops reading at a raw NUL byte; the reader refuses it */
        abort();
    }
    if (rc == 0)
        check_tokens(text, &s);
    json_decref(v);
    er_jscan_fini(&s);
    free(text);
    return 0;
}
