/* SPDX-License-Identifier: MIT
 *
 * Bounded buffers and arrays (buf.h): one growth rule, doubling up to the
 * limit, used by every growable buffer. A failed call never touches the
 * bytes already held.
 */
#include "util/buf.h"
#include "util/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The new capacity for at least need units (need <= limit): doubling from
 * cap, or from first when nothing is allocated, and never above limit. */
static size_t next_cap(size_t cap, size_t need, size_t first, size_t limit)
{
    size_t n = cap ? cap : first;
    while (n < need)
        n = n > limit / 2 ? limit : n * 2;
    return n < limit ? n : limit;
}

/* max + 1 (room for the NUL) never wraps. */
#define BUF_MAX_LIMIT (SIZE_MAX / 2)

void er_buf_init(er_buf *b, size_t max)
{
    memset(b, 0, sizeof *b);
    b->max = max < BUF_MAX_LIMIT ? max : BUF_MAX_LIMIT;
}

void er_buf_init_mem(er_buf *b, size_t max, char *mem, size_t cap)
{
    er_buf_init(b, max);
    if (!mem)
        return;
    b->data = mem;
    /* the bound lives in er_buf_grow: never start above it */
    b->cap = cap < b->max + 1 ? cap : b->max + 1;
    if (b->cap)
        b->data[0] = '\0';
}

void er_buf_fini(er_buf *b)
{
    if (!b)
        return;
    free(b->data);
    memset(b, 0, sizeof *b);
}

void er_buf_reset(er_buf *b)
{
    b->len = 0;
    b->err = 0;
    if (b->cap)
        b->data[0] = '\0';
}

void er_buf_truncate(er_buf *b, size_t len)
{
    if (len >= b->len)
        return;
    b->len = len;
    b->data[len] = '\0';
}

void er_buf_fail(er_buf *b, int code)
{
    if (!b->err)
        b->err = code;
}

char *er_buf_grow(er_buf *b, size_t n)
{
    if (b->err)
        return NULL;
    if (n > b->max - b->len) {
        b->err = ER_ETOOBIG;
        return NULL;
    }
    size_t need = b->len + n + 1; /* <= max + 1 */
    if (need <= b->cap)
        return b->data + b->len;
    size_t cap = next_cap(b->cap, need, 256, b->max + 1);
    char *p = realloc(b->data, cap);
    if (!p) {
        b->err = ER_ENOMEM;
        return NULL;
    }
    if (!b->cap)
        p[0] = '\0';
    b->data = p;
    b->cap = cap;
    return p + b->len;
}

int er_buf_add(er_buf *b, const void *p, size_t n)
{
    char *o = er_buf_reserve(b, n);
    if (!o)
        return b->err;
    if (n)
        memcpy(o, p, n);
    er_buf_commit(b, n);
    return 0;
}

int er_buf_adds(er_buf *b, const char *s)
{
    return er_buf_add(b, s, strlen(s));
}

int er_buf_vaddf(er_buf *b, const char *fmt, va_list ap)
{
    if (b->err)
        return b->err;
    /* First into the room there is; when that is too small, again into
     * exactly enough. */
    va_list again;
    va_copy(again, ap);
    size_t room = b->cap > b->len ? b->cap - b->len : 0;
    char *o = room ? b->data + b->len : NULL;
    int n = vsnprintf(o, room, fmt, ap);
    if (n < 0) {
        if (room)
            o[0] = '\0';
        va_end(again);
        return ER_EINVAL; /* a bad format: not remembered, b unchanged */
    }
    if ((size_t)n >= room) {
        if (room)
            o[0] = '\0'; /* the contents end where they ended */
        o = er_buf_reserve(b, (size_t)n);
        if (!o) {
            va_end(again);
            return b->err;
        }
        vsnprintf(o, (size_t)n + 1, fmt, again);
    }
    va_end(again);
    er_buf_commit(b, (size_t)n);
    return 0;
}

int er_buf_addf(er_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = er_buf_vaddf(b, fmt, ap);
    va_end(ap);
    return rc;
}

const char *er_buf_str(const er_buf *b)
{
    return b->cap ? b->data : "";
}

char *er_buf_take(er_buf *b, size_t *len)
{
    if (b->err)
        return NULL;
    if (!b->cap && !er_buf_grow(b, 0)) {
        b->err = 0; /* unchanged: nothing was held */
        return NULL;
    }
    char *p = b->data;
    if (len)
        *len = b->len;
    size_t max = b->max;
    memset(b, 0, sizeof *b);
    b->max = max;
    return p;
}

int er_grow_array(void *arrp, size_t *cap, size_t need, size_t size, size_t max)
{
    if (need <= *cap)
        return 0;
    size_t limit = size ? SIZE_MAX / size : 0;
    if (max < limit)
        limit = max;
    if (need > limit)
        return ER_ETOOBIG;
    size_t n = next_cap(*cap, need, 16, limit);
    void *old;
    memcpy(&old, arrp, sizeof old); /* *arrp is a T *, read without aliasing it */
    void *p = realloc(old, n * size);
    if (!p)
        return ER_ENOMEM;
    memcpy(arrp, &p, sizeof p);
    *cap = n;
    return 0;
}
