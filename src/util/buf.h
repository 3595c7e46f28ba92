/* SPDX-License-Identifier: MIT
 *
 * Growable, bounded buffers: an er_buf holds bytes up to a size limit fixed
 * when it is made, so a peer can never grow our memory without bound. An
 * append past the limit or out of memory fails, leaves the contents as they
 * were and is remembered (`err`), so a run of appends can be checked once at
 * the end. er_grow_array applies the same growth rule to typed arrays whose
 * count the caller keeps. Nothing here prints or aborts.
 */
#ifndef ER_UTIL_BUF_H
#define ER_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct er_buf {
    char *data; /* owned; NULL until memory is first needed, then NUL-terminated */
    size_t len; /* bytes held, without the NUL */
    size_t cap; /* bytes allocated: 0, or more than len */
    size_t max; /* len never exceeds it; fixed at init */
    int err;    /* the first failure (ER_ETOOBIG, ER_ENOMEM) since init or reset, or 0 */
} er_buf;

/* An empty buffer that will hold at most max bytes. Allocates nothing. */
void er_buf_init(er_buf *b, size_t max);
/* Like er_buf_init, starting with mem as storage (takes it: b reallocs and
 * frees it; cap is its size in bytes; NULL and 0 are fine). */
void er_buf_init_mem(er_buf *b, size_t max, char *mem, size_t cap);
/* Frees the memory; b is left empty with max 0. NULL does nothing. */
void er_buf_fini(er_buf *b);
/* Empties b and clears err; keeps its memory and max. */
void er_buf_reset(er_buf *b);
/* Cuts b back to len bytes (len <= b->len); err is kept. */
void er_buf_truncate(er_buf *b, size_t len);
/* Marks b failed with code (negative) unless it failed already: for text
 * that is missing a part built elsewhere. */
void er_buf_fail(er_buf *b, int code);

/* Appends n bytes of p (copied). Each returns 0, or ER_ETOOBIG (past max)
 * or ER_ENOMEM; on failure, and once err is set, b is unchanged and the
 * call returns err. */
int er_buf_add(er_buf *b, const void *p, size_t n);
/* The bytes of the NUL-terminated s. */
int er_buf_adds(er_buf *b, const char *s);
/* printf-style text. */
int er_buf_addf(er_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int er_buf_vaddf(er_buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Room for n more bytes and a NUL: where they go (borrowed until the next
 * change to b), or NULL with err set as above. Write them, then commit. */
char *er_buf_grow(er_buf *b, size_t n);
static inline char *er_buf_reserve(er_buf *b, size_t n)
{
    /* cap - len > n: cap holds len + n bytes and the NUL */
    if (!b->err && b->cap - b->len > n)
        return b->data + b->len;
    return er_buf_grow(b, n);
}
/* Counts n bytes written at er_buf_reserve's pointer (n <= what was
 * reserved) and puts the NUL after them. */
static inline void er_buf_commit(er_buf *b, size_t n)
{
    b->len += n;
    b->data[b->len] = '\0';
}

/* The contents as a C string (borrowed): "" while nothing was allocated. */
const char *er_buf_str(const er_buf *b);

/* Hands the contents over: returns owned (free()), NUL-terminated, with
 * *len (when not NULL) its length, and leaves b empty without memory (max
 * kept). NULL, with b unchanged, when err is set or memory ran out. */
char *er_buf_take(er_buf *b, size_t *len);

/* Makes room for need elements of size bytes in the array *arrp (a T **,
 * NULL at first) of capacity *cap elements, growing it by doubling (from
 * 16) to at most max elements. Returns 0, ER_ETOOBIG (need > max) or
 * ER_ENOMEM; on failure *arrp and *cap are unchanged. */
int er_grow_array(void *arrp, size_t *cap, size_t need, size_t size, size_t max);
/* er_grow_array for an array of *arrp's element type. */
#define ER_GROW(arrp, capp, need, max) er_grow_array((arrp), (capp), (need), sizeof **(arrp), (max))

#endif
