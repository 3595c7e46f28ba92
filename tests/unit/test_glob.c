/* SPDX-License-Identifier: MIT
 *
 * Unit tests for core/glob.h: Redis MATCH semantics, token by token, and
 * the pattern length bound.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/glob.h"

/* er_glob_match, checked against the automaton it falls back to */
static bool mn(const char *pat, size_t pn, const char *text, size_t tn)
{
    bool got = er_glob_match(pat, pn, text, tn);
    if (pn <= ER_GLOB_MAX)
        cr_assert_eq(er_glob_match_automaton(pat, pn, text, tn), got, "the automaton differs");
    return got;
}

static bool m(const char *pat, const char *text)
{
    return mn(pat, strlen(pat), text, strlen(text));
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
    cr_assert(mn("a?c", 3, "a\0c", 3));
    cr_assert(mn("[\x80-\xff]", 5, "\xe9", 1));
    cr_assert_not(mn("[\x80-\xff]", 5, "e", 1));
}

Test(glob, many_stars_stay_fast)
{
    char pat[ER_GLOB_MAX + 1], text[100001];
    for (int i = 0; i < ER_GLOB_MAX; i++)
        pat[i] = i % 2 ? '*' : 'a';
    memset(text, 'a', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    cr_assert_not(mn(pat, ER_GLOB_MAX - 1, text, 100)); /* 512 a's needed */
    cr_assert(mn(pat, ER_GLOB_MAX - 1, text, sizeof text - 1));
    pat[ER_GLOB_MAX - 1] = 'b';
    cr_assert_not(mn(pat, ER_GLOB_MAX, text, sizeof text - 1));
}

/* The automaton's states cross 64-bit words: a `*` at state 63 and 64 */
Test(glob, stars_across_the_automatons_words)
{
    char pat[200], ok[400], bad[400];
    memset(pat, 'a', 63);
    strcpy(pat + 63, "*c");
    memset(pat + 65, 'a', 70);
    strcpy(pat + 135, "*d");
    memset(ok, 'a', 63);
    strcpy(ok + 63, "xyzc");
    memset(ok + 67, 'a', 70);
    strcpy(ok + 137, "qqd");
    strcpy(bad, ok);
    bad[66] = 'x'; /* no c after the first run of a's */
    cr_assert(m(pat, ok));
    cr_assert_not(m(pat, bad));
    pat[134] = '?';
    cr_assert(m(pat, ok));
}

/* Work is bounded (core/glob.h): 1 000 `*a` against 100 KB of a's ending
 * in b, and the worst case of going back to a `*`, a segment after it
 * that almost matches everywhere, each return the right answer. */
Test(glob, pathological_patterns_are_answered)
{
    enum { NPAT = 2000, NTEXT = 100 * 1024 };
    char *pat = malloc(NPAT), *text = malloc(NTEXT);
    cr_assert(pat && text);
    for (int i = 0; i < NPAT; i++)
        pat[i] = i % 2 ? 'a' : '*';
    memset(text, 'a', NTEXT);
    text[NTEXT - 1] = 'b';
    cr_assert_not(mn(pat, NPAT, text, NTEXT), "the pattern ends in a, the text in b");
    cr_assert(mn(pat, NPAT, text, NTEXT - 1));
    pat[NPAT - 1] = 'b';
    cr_assert(mn(pat, NPAT, text, NTEXT));
    /* the same at the longest pattern a request may give (512 `*a`) */
    pat[NPAT - 1] = 'a';
    cr_assert_not(mn(pat, ER_GLOB_MAX, text, NTEXT));
    cr_assert(mn(pat, ER_GLOB_MAX, text, NTEXT - 1));
    /* `*aaa...ab` (1 024 bytes): going back to the `*` would take 1 022
     * steps at every text byte; the automaton takes 17 words a byte */
    pat[0] = '*';
    memset(pat + 1, 'a', ER_GLOB_MAX - 2);
    pat[ER_GLOB_MAX - 1] = 'b';
    cr_assert(mn(pat, ER_GLOB_MAX, text, NTEXT));
    cr_assert_not(mn(pat, ER_GLOB_MAX, text, NTEXT - 1));
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
