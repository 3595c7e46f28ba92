/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's strict JSON tokenizer: one document (a fetch or ack
 * reply) into a reusable flat token array, without a jansson tree, with
 * lookups of object members, string unescaping and integer reading on the
 * tokens. It refuses every document jansson would refuse. Pure: no I/O, no
 * locks, no clock.
 */
#ifndef ER_CLIENT_JSCAN_H
#define ER_CLIENT_JSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- tokenizer ------------------------------------------------------------ */

enum { ER_JS_OBJECT = 1, ER_JS_ARRAY, ER_JS_STRING, ER_JS_NUMBER, ER_JS_LITERAL };

#define ER_JS_MAX_DEPTH 2048 /* jansson's limit, so the same replies are refused */

typedef struct er_jstok {
    uint32_t start, end; /* [start, end) in the text; a string's span excludes its quotes */
    uint32_t next;       /* index of the token after this value and everything inside it */
    uint8_t type;        /* ER_JS_* */
    bool esc;            /* a string with backslash escapes */
} er_jstok;

/* Tokens of one document in document order; an object's members are key,
 * value, key, value… A scanner is reused: parse again to overwrite. */
typedef struct er_jscan {
    er_jstok *tok;
    size_t n, cap;
    uint32_t *stack;
} er_jscan;

void er_jscan_init(er_jscan *s);
void er_jscan_fini(er_jscan *s);

/* Tokenizes text[0, len) as one JSON object or array, strictly (RFC 8259
 * grammar, UTF-8 checked, no \u0000, no lone surrogate, depth ≤
 * ER_JS_MAX_DEPTH, at most 2^32-1 bytes): 0, ERRAND_EINVAL (not such a
 * document; s holds nothing usable) or ERRAND_ENOMEM. text is borrowed. */
int er_jscan_parse(er_jscan *s, const char *text, size_t len);

/* The index of the value of member key of the object at index obj (the
 * last one when repeated), or -1 (absent, or obj is not an object). */
long er_jscan_get(const er_jscan *s, const char *text, long obj, const char *key);

/* Writes string token t of text, unescaped, into out (room for its span
 * length + 1 bytes: unescaping never grows it) with a NUL; returns its
 * length. */
size_t er_jscan_unescape(const char *text, const er_jstok *t, char *out);

/* True with *v when t is an integer number (no fraction or exponent)
 * within int64; false otherwise. */
bool er_jscan_int(const char *text, const er_jstok *t, int64_t *v);

/* Whether string token t of text equals key[0, klen) (escapes undone
 * first; an escaped key of 256 bytes or more never matches). */
bool er_jscan_key_is(const char *text, const er_jstok *t, const char *key, size_t klen);

#endif
