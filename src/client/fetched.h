/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's wire text, without a jansson tree per job: a strict
 * JSON tokenizer into a reusable flat token array (for fetch and ack
 * replies), the reader of one leased job into a single block, and the queue
 * of pending ack items as text. Request bodies and ack items are written
 * into util's er_buf with util's escaper (er_json_str). Pure: no I/O, no
 * locks, no clock.
 */
#ifndef ER_CLIENT_FETCHED_H
#define ER_CLIENT_FETCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

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

/* ---- one leased job --------------------------------------------------------- */

/* A leased job's fields; the strings live in the block returned by
 * er_fetched_read. Absent or non-string fields read as "" (payload: "null"),
 * absent or non-integer numbers as 0. */
typedef struct er_fetched {
    const char *id, *token, *queue, *name, *idem, *trace, *created_at;
    const char *payload; /* the payload's JSON text as sent */
    const char *json;    /* the whole job object's JSON text as sent */
    int64_t attempt, started, timeout_ms;
} er_fetched;

/* Reads the job object at index obj of a parsed reply. Returns owned (free())
 * one block of head zeroed bytes followed by the strings of *out, or NULL
 * when obj is not an object, lacks a string id or lease_token, or memory
 * ran out. */
void *er_fetched_read(const char *text, const er_jscan *s, long obj, size_t head,
                      er_fetched *out);

/* ---- pending ack items -------------------------------------------------------- */

/* Ack items as JSON text, each followed by ',' in buf; ends[i] is the
 * offset just after item i's comma. All zero is an empty queue. At most
 * ER_ACKQ_MAX_BYTES of text and ER_ACKQ_MAX_ITEMS items. */
#define ER_ACKQ_MAX_BYTES ((size_t)1 << 31)
#define ER_ACKQ_MAX_ITEMS ((size_t)1 << 20)
typedef struct er_ackq {
    char *buf;
    size_t len, cap;
    size_t *ends;
    size_t n, ncap;
} er_ackq;

void er_ackq_fini(er_ackq *q);
/* Appends one item (copied); ERRAND_ENOMEM (out of memory, or past the
 * limits) leaves q as it was. */
int er_ackq_push(er_ackq *q, const char *item, size_t len);
/* Moves the first min(max, n) items of q into *out (max > 0; *out is
 * overwritten, so pass an empty one); ERRAND_ENOMEM changes nothing. */
int er_ackq_take(er_ackq *q, size_t max, er_ackq *out);
/* Puts the items of *front before those of q and empties *front;
 * ERRAND_ENOMEM changes neither. */
int er_ackq_prepend(er_ackq *q, er_ackq *front);
/* Item i's text and length (without its comma). */
const char *er_ackq_item(const er_ackq *q, size_t i, size_t *len);
/* Appends the items as a JSON array ("[a,b]") to b; 0 or b's error. */
int er_ackq_write(const er_ackq *q, er_buf *b);

#endif
