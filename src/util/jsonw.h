/* SPDX-License-Identifier: MIT
 *
 * A small JSON writer into one bounded buffer (er_buf), for the hot
 * responses (enqueue, fetch) where building a jansson tree and dumping it
 * costs more than the request itself. The caller places commas through the
 * writer's object/array nesting; a failed allocation or the size cap sets
 * `failed` and later calls do nothing.
 */
#ifndef ER_UTIL_JSONW_H
#define ER_UTIL_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define ER_JSONW_DEPTH 16

typedef struct er_jsonw {
    er_buf out; /* the text: owned, NUL-terminated while not failed */
    bool failed;
    int depth;
    bool first[ER_JSONW_DEPTH]; /* no member written yet at this depth */
} er_jsonw;

/* Appends s (NUL-terminated; copied) to b as a quoted JSON string: the one
 * JSON string escaper of errand, used by the writer below and by liberrand.
 * '"', '\\', \n, \r and \t get their short escapes, the other control
 * characters \u00XX; everything else is copied.
 *
 * Invalid UTF-8 (stray continuation bytes, overlong forms, encoded
 * surrogates, code points past U+10FFFF, truncated sequences) becomes
 * U+FFFD, one for each maximal ill-formed subpart (Unicode's recommended
 * practice), so the output is always valid JSON. Why not the others:
 *  - copying the bytes makes invalid JSON, and jansson (the server's request
 *    parser, liberrand's reply parser, most log pipelines) refuses the whole
 *    document: one bad byte in a handler's error message would lose the
 *    batch of outcomes it rides in, one in a log message the whole line;
 *  - refusing the string loses the whole document just the same;
 *  - escaping the bytes as \u00XX is valid JSON but silently turns them
 *    into other, real-looking characters.
 * U+FFFD loses only the bytes that were not text, and visibly. What must
 * survive byte for byte (payloads, results) is JSON already, checked by
 * jansson on the way in, and is written raw, not through here.
 *
 * Returns 0, or b's error (ER_ETOOBIG, ER_ENOMEM) with b as it was. */
int er_json_str(er_buf *b, const char *s);

/* max bounds the output size (bytes). */
void er_jsonw_init(er_jsonw *w, size_t max);
/* Like er_jsonw_init, writing into buf first (takes it: w reallocs and
 * frees it; cap is its size in bytes; NULL and 0 are fine). */
void er_jsonw_init_buf(er_jsonw *w, size_t max, char *buf, size_t cap);
void er_jsonw_fini(er_jsonw *w);

void er_jsonw_begin_object(er_jsonw *w);
void er_jsonw_end_object(er_jsonw *w);
void er_jsonw_begin_array(er_jsonw *w);
void er_jsonw_end_array(er_jsonw *w);

/* Writes `"key":` (escaped) preceded by a comma when needed. */
void er_jsonw_key(er_jsonw *w, const char *key);

/* Values; each is preceded by a comma when it is an array element. */
void er_jsonw_str(er_jsonw *w, const char *s);       /* NULL writes null */
void er_jsonw_int(er_jsonw *w, int64_t v);
void er_jsonw_double(er_jsonw *w, double v);
void er_jsonw_bool(er_jsonw *w, bool v);
void er_jsonw_null(er_jsonw *w);
void er_jsonw_time(er_jsonw *w, int64_t ms);          /* RFC 3339, or null when 0 */
/* Already-serialized JSON (trusted: it came from our own serializer);
 * NULL writes null. */
void er_jsonw_raw(er_jsonw *w, const char *json, size_t len);

/* Already-serialized object members ("\"a\":1,\"b\":2"), appended to the
 * object being written; NULL or "" adds nothing. */
void er_jsonw_members(er_jsonw *w, const char *members);

/* Members with a constant key, for fixed-layout objects: `lit` is
 * ER_JSONW_K("key"), the key pre-made as `,"key":` (the key must need no
 * escapes). Each writes the same bytes as er_jsonw_key followed by the
 * value call, in one reservation. */
#define ER_JSONW_K(key) (",\"" key "\":"), (sizeof(",\"" key "\":") - 1)

void er_jsonw_kstr(er_jsonw *w, const char *lit, size_t n, const char *s);
void er_jsonw_kint(er_jsonw *w, const char *lit, size_t n, int64_t v);
void er_jsonw_kdouble(er_jsonw *w, const char *lit, size_t n, double v);
void er_jsonw_ktime(er_jsonw *w, const char *lit, size_t n, int64_t ms);
void er_jsonw_kraw(er_jsonw *w, const char *lit, size_t n, const char *json, size_t len);
/* The key, then begin_object. */
void er_jsonw_kbegin_object(er_jsonw *w, const char *lit, size_t n);

#endif
