/* SPDX-License-Identifier: MIT
 *
 * Unit tests for core/glob.h: Redis MATCH semantics, token by token, and
 * the pattern length bound.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/glob.h"

static bool m(const char *pat, const char *text)
{
    return er_glob_match(pat, strlen(pat), text, strlen(text));
}

Test(glob, literals_and_question_mark)
{
    cr_assert(m("abc", "abc"));
    cr_assert_not(m("abc", "abd"));
    cr_assert_not(m("abc", "ab"));
    cr_assert_not(m("abc", "abcd"));
    cr_assert(m("a?c", "abc"));
    cr_assert_not(m("a?c", "ac"));
    cr_assert_not(m("ABC", "abc")); /* case sensitive */
}

Test(glob, stars)
{
    cr_assert(m("*", ""));
    cr_assert(m("*", "anything"));
    cr_assert(m("**", "x"));
    cr_assert(m("*unique*", "[\"uniquearg\"]"));
    cr_assert_not(m("*unique*", "[\"other\"]"));
    cr_assert(m("a*b*c", "aXXbYYc"));
    cr_assert(m("a*b*c", "abc"));
    cr_assert_not(m("a*b*c", "aXXbYY"));
    cr_assert(m("*a", "banana"));
    cr_assert_not(m("*b", "banana"));
    cr_assert(m("*?", "x"));
    cr_assert_not(m("*?", ""));
}

Test(glob, sets)
{
    cr_assert(m("[abc]", "b"));
    cr_assert_not(m("[abc]", "d"));
    cr_assert(m("[^abc]", "d"));
    cr_assert_not(m("[^abc]", "a"));
    cr_assert(m("[a-c]x", "bx"));
    cr_assert(m("[c-a]x", "bx")); /* a range either way round */
    cr_assert_not(m("[a-c]x", "dx"));
    cr_assert(m("[\\]]", "]"));
    cr_assert(m("[\\-]", "-"));
    cr_assert_not(m("[]", "]")); /* `]` first ends an empty set */
    cr_assert(m("[a-]", "]")); /* as Redis: the range a..] */
    cr_assert(m("x[ab", "xb")); /* an open set takes the rest */
    cr_assert_not(m("x[ab", "xc"));
}

Test(glob, escapes)
{
    cr_assert(m("\\*", "*"));
    cr_assert_not(m("\\*", "a"));
    cr_assert(m("\\?", "?"));
    cr_assert(m("a\\", "a\\")); /* a trailing backslash is itself */
    cr_assert(m("\\[x]", "[x]"));
}

Test(glob, bytes_with_nul_and_high_bit)
{
    cr_assert(er_glob_match("a?c", 3, "a\0c", 3));
    cr_assert(er_glob_match("[\x80-\xff]", 5, "\xe9", 1));
    cr_assert_not(er_glob_match("[\x80-\xff]", 5, "e", 1));
}

Test(glob, many_stars_stay_fast)
{
    char pat[ER_GLOB_MAX + 1], text[100001];
    for (int i = 0; i < ER_GLOB_MAX; i++)
        pat[i] = i % 2 ? '*' : 'a';
    memset(text, 'a', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    cr_assert_not(er_glob_match(pat, ER_GLOB_MAX - 1, text, 100)); /* 512 a's needed */
    cr_assert(er_glob_match(pat, ER_GLOB_MAX - 1, text, sizeof text - 1));
    pat[ER_GLOB_MAX - 1] = 'b';
    cr_assert_not(er_glob_match(pat, ER_GLOB_MAX, text, sizeof text - 1));
}

/* Work is bounded (core/glob.h): 1 000 `*a` against 100 KB of a's ending
 * in b, and the matcher's worst case, one `*` before a segment that
 * almost matches everywhere, each return the right answer. */
Test(glob, pathological_patterns_are_answered)
{
    enum { NPAT = 2000, NTEXT = 100 * 1024 };
    char *pat = malloc(NPAT), *text = malloc(NTEXT);
    cr_assert(pat && text);
    for (int i = 0; i < NPAT; i++)
        pat[i] = i % 2 ? 'a' : '*';
    memset(text, 'a', NTEXT);
    text[NTEXT - 1] = 'b';
    cr_assert_not(er_glob_match(pat, NPAT, text, NTEXT), "the pattern ends in a, the text in b");
    cr_assert(er_glob_match(pat, NPAT, text, NTEXT - 1));
    pat[NPAT - 1] = 'b';
    cr_assert(er_glob_match(pat, NPAT, text, NTEXT));
    /* `*aaa...ab` (1 024 bytes) against the last 32 KB: at every text
     * position the segment takes 1 022 a's and fails at its b */
    pat[0] = '*';
    memset(pat + 1, 'a', ER_GLOB_MAX - 2);
    pat[ER_GLOB_MAX - 1] = 'b';
    const char *tail = text + NTEXT - 32 * 1024;
    cr_assert(er_glob_match(pat, ER_GLOB_MAX, tail, 32 * 1024));
    cr_assert_not(er_glob_match(pat, ER_GLOB_MAX, tail, 32 * 1024 - 1));
    free(pat);
    free(text);
}

Test(glob, validate_bounds_the_length)
{
    er_error e = {0};
    cr_assert_eq(er_glob_validate(1, "filter.regexp", &e), 0);
    cr_assert_eq(er_glob_validate(ER_GLOB_MAX, "filter.regexp", &e), 0);
    cr_assert_eq(er_glob_validate(0, "filter.regexp", &e), ER_EINVAL);
    cr_assert_eq(er_glob_validate(ER_GLOB_MAX + 1, "filter.regexp", &e), ER_EINVAL);
    cr_assert_str_eq(e.field, "filter.regexp");
}
