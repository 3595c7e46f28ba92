/* SPDX-License-Identifier: MIT
 *
 * Bounded buffers (src/util/buf.c): growth, the size limit, formatted
 * appends, handing the contents over, and that a failure (past the limit or
 * out of memory) leaves the contents as they were. Out of memory is real: a
 * request too large for any allocator.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/err.h"

/* Under ASan a huge malloc returns NULL instead of stopping the test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

static void is(const er_buf *b, const char *want)
{
    cr_assert_eq(b->len, strlen(want), "len %zu, want %zu", b->len, strlen(want));
    cr_assert_str_eq(er_buf_str(b), want);
    if (b->cap) {
        cr_assert_gt(b->cap, b->len);
        cr_assert_eq(b->data[b->len], '\0');
    }
}

Test(buf, starts_empty_and_allocates_nothing)
{
    er_buf b;
    er_buf_init(&b, 100);
    cr_assert_null(b.data);
    cr_assert_eq(b.cap, 0);
    is(&b, "");
    cr_assert_eq(b.err, 0);
    er_buf_fini(&b);
    er_buf_fini(NULL);
}

Test(buf, appends_bytes_strings_and_formats)
{
    er_buf b;
    er_buf_init(&b, 1000);
    cr_assert_eq(er_buf_add(&b, "ab", 2), 0);
    cr_assert_eq(er_buf_adds(&b, "cd"), 0);
    cr_assert_eq(er_buf_add(&b, "", 0), 0);
    cr_assert_eq(er_buf_addf(&b, "-%d-%s-", 42, "x"), 0);
    is(&b, "abcd-42-x-");
    cr_assert_eq(er_buf_add(&b, "\0z", 2), 0); /* bytes, not text */
    cr_assert_eq(b.len, 12);
    cr_assert_eq(memcmp(b.data + 10, "\0z", 2), 0);
    er_buf_fini(&b);
}

Test(buf, grows_by_doubling_and_keeps_contents)
{
    er_buf b;
    er_buf_init(&b, (size_t)1 << 20);
    char want[5000];
    for (size_t i = 0; i < sizeof want - 1; i++) {
        want[i] = (char)('a' + i % 26);
        size_t cap = b.cap;
        cr_assert_eq(er_buf_add(&b, &want[i], 1), 0);
        cr_assert(b.cap == cap || cap == 0 || b.cap == cap * 2, "cap %zu -> %zu", cap, b.cap);
    }
    want[sizeof want - 1] = '\0';
    is(&b, want);
    cr_assert_leq(b.cap, 8192);
    er_buf_fini(&b);
}

Test(buf, formatted_text_longer_than_the_room_is_written_whole)
{
    er_buf b;
    er_buf_init(&b, 100000);
    er_buf_adds(&b, "x");
    char big[3000];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_assert_eq(er_buf_addf(&b, "[%s]", big), 0);
    cr_assert_eq(b.len, 1 + 2 + sizeof big - 1);
    cr_assert_eq(b.data[1], '[');
    cr_assert_eq(b.data[b.len - 1], ']');
    cr_assert_eq(b.data[b.len], '\0');
    er_buf_fini(&b);
}

Test(buf, exactly_max_fits_one_more_byte_does_not)
{
    er_buf b;
    er_buf_init(&b, 10);
    cr_assert_eq(er_buf_adds(&b, "0123456789"), 0);
    cr_assert_leq(b.cap, 11, "never allocates past max + 1");
    cr_assert_eq(er_buf_add(&b, "x", 1), ER_ETOOBIG);
    cr_assert_eq(b.err, ER_ETOOBIG);
    is(&b, "0123456789");
    er_buf_fini(&b);
}

Test(buf, a_failure_leaves_the_contents_and_is_remembered)
{
    er_buf b;
    er_buf_init(&b, 8);
    cr_assert_eq(er_buf_adds(&b, "abc"), 0);
    cr_assert_eq(er_buf_adds(&b, "defghi"), ER_ETOOBIG); /* 9 > 8: nothing of it */
    is(&b, "abc");
    /* Later appends refuse too, even ones that would fit: a run of appends
     * is checked once at the end, and never has a hole in the middle. */
    cr_assert_eq(er_buf_adds(&b, "d"), ER_ETOOBIG);
    cr_assert_eq(er_buf_addf(&b, "%d", 1), ER_ETOOBIG);
    cr_assert_null(er_buf_reserve(&b, 0));
    is(&b, "abc");
    er_buf_reset(&b);
    cr_assert_eq(b.err, 0);
    is(&b, "");
    cr_assert_eq(er_buf_adds(&b, "12345678"), 0);
    is(&b, "12345678");
    er_buf_fini(&b);
}

Test(buf, formatted_append_past_max_leaves_the_contents)
{
    er_buf b;
    er_buf_init(&b, 20);
    cr_assert_eq(er_buf_adds(&b, "head"), 0);
    cr_assert_eq(er_buf_addf(&b, "%s", "a long line, longer than twenty"), ER_ETOOBIG);
    is(&b, "head");
    er_buf_fini(&b);
}

Test(buf, out_of_memory_leaves_the_contents)
{
    er_buf b;
    er_buf_init(&b, SIZE_MAX);
    cr_assert_eq(er_buf_adds(&b, "kept"), 0);
    char *before = b.data;
    cr_assert_null(er_buf_reserve(&b, SIZE_MAX / 4)); /* no allocator gives that */
    cr_assert_eq(b.err, ER_ENOMEM);
    cr_assert_eq(b.data, before);
    is(&b, "kept");
    cr_assert_eq(er_buf_adds(&b, "x"), ER_ENOMEM);
    is(&b, "kept");
    er_buf_fini(&b);
}

Test(buf, reserve_then_commit_writes_in_place)
{
    er_buf b;
    er_buf_init(&b, 64);
    char *p = er_buf_reserve(&b, 5);
    cr_assert_not_null(p);
    memcpy(p, "hello", 5);
    er_buf_commit(&b, 3); /* fewer than reserved */
    is(&b, "hel");
    er_buf_truncate(&b, 1);
    is(&b, "h");
    er_buf_truncate(&b, 5); /* never lengthens */
    is(&b, "h");
    er_buf_fini(&b);
}

Test(buf, take_hands_over_the_text_and_leaves_an_empty_buffer)
{
    er_buf b;
    er_buf_init(&b, 64);
    size_t n = 99;
    char *t = er_buf_take(&b, &n); /* empty: still a string */
    cr_assert_not_null(t);
    cr_assert_str_eq(t, "");
    cr_assert_eq(n, 0);
    free(t);
    er_buf_adds(&b, "abc");
    t = er_buf_take(&b, &n);
    cr_assert_str_eq(t, "abc");
    cr_assert_eq(n, 3);
    free(t);
    cr_assert_null(b.data);
    cr_assert_eq(b.max, 64, "the limit stays");
    cr_assert_eq(er_buf_adds(&b, "again"), 0);
    is(&b, "again");
    er_buf_fini(&b);

    er_buf_init(&b, 2);
    er_buf_adds(&b, "abc");
    cr_assert_null(er_buf_take(&b, NULL), "a failed buffer hands nothing over");
    er_buf_fini(&b);
}

Test(buf, init_mem_starts_with_the_given_storage)
{
    char *mem = malloc(4096);
    memcpy(mem, "junk", 5);
    er_buf b;
    er_buf_init_mem(&b, 100, mem, 4096);
    cr_assert_eq(b.data, mem);
    cr_assert_eq(b.cap, 101, "capped at max + 1");
    is(&b, "");
    cr_assert_eq(er_buf_adds(&b, "x"), 0);
    is(&b, "x");
    er_buf_fini(&b);
}

/* ---- typed arrays ---- */

typedef struct pair {
    int a;
    double b;
} pair;

Test(buf, arrays_grow_by_doubling_to_their_limit)
{
    pair *v = NULL;
    size_t cap = 0, n = 0;
    for (int i = 0; i < 100; i++) {
        size_t before = cap;
        cr_assert_eq(ER_GROW(&v, &cap, n + 1, 100), 0);
        cr_assert(before == cap || before == 0 || cap == before * 2 || cap == 100);
        v[n++] = (pair){i, i / 2.0};
    }
    cr_assert_eq(cap, 100, "16, 32, 64, then the limit");
    pair *keep = v;
    cr_assert_eq(ER_GROW(&v, &cap, 101, 100), ER_ETOOBIG);
    cr_assert_eq(v, keep);
    cr_assert_eq(cap, 100);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(v[i].a, i);
    free(v);
}

Test(buf, array_out_of_memory_and_overflow_leave_it_unchanged)
{
    pair *v = NULL;
    size_t cap = 0;
    cr_assert_eq(ER_GROW(&v, &cap, 3, SIZE_MAX), 0);
    v[2].a = 7;
    pair *keep = v;
    cr_assert_eq(ER_GROW(&v, &cap, SIZE_MAX / sizeof *v / 2, SIZE_MAX), ER_ENOMEM);
    cr_assert_eq(ER_GROW(&v, &cap, SIZE_MAX, SIZE_MAX), ER_ETOOBIG); /* need * size wraps */
    cr_assert_eq(v, keep);
    cr_assert_eq(cap, 16);
    cr_assert_eq(v[2].a, 7);
    free(v);
}
