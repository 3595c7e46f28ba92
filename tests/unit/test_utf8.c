/* SPDX-License-Identifier: MIT
 *
 * UTF-8 cuts and copies (util/utf8.h) and the error details built on them: an
 * er_error's field and message are always valid UTF-8, cut only at a
 * character boundary.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "util/err.h"
#include "util/utf8.h"

#define E_ACUTE "\xc3\xa9"

/* The length of the well-formed character at s, or 0. */
static size_t char_len(const char *s, size_t n)
{
    bool ok;
    if (n == 0)
        return 0;
    size_t k = er_utf8_seq(s, n, &ok);
    return ok ? k : 0;
}

Test(utf8, seq_accepts_each_length)
{
    cr_assert_eq(char_len("a", 1), 1);
    cr_assert_eq(char_len(E_ACUTE, 2), 2);
    cr_assert_eq(char_len("\xe2\x82\xac", 3), 3);     /* U+20AC */
    cr_assert_eq(char_len("\xf0\x9f\x98\x80", 4), 4); /* U+1F600 */
    cr_assert_eq(char_len("\xf4\x8f\xbf\xbf", 4), 4); /* U+10FFFF */
}

Test(utf8, seq_refuses_what_rfc3629_forbids)
{
    cr_assert_eq(char_len("", 0), 0);
    cr_assert_eq(char_len("\x80", 1), 0);             /* lone continuation */
    cr_assert_eq(char_len("\xc0\xaf", 2), 0);         /* overlong '/' */
    cr_assert_eq(char_len("\xc1\xbf", 2), 0);         /* overlong */
    cr_assert_eq(char_len("\xe0\x9f\xbf", 3), 0);     /* overlong below U+0800 */
    cr_assert_eq(char_len("\xed\xa0\x80", 3), 0);     /* surrogate U+D800 */
    cr_assert_eq(char_len("\xf0\x8f\xbf\xbf", 4), 0); /* overlong below U+10000 */
    cr_assert_eq(char_len("\xf4\x90\x80\x80", 4), 0); /* above U+10FFFF */
    cr_assert_eq(char_len("\xf5\x80\x80\x80", 4), 0);
    cr_assert_eq(char_len(E_ACUTE, 1), 0);            /* truncated */
    cr_assert_eq(char_len("\xe2\x82", 2), 0);
    cr_assert_eq(char_len("\xc3\x28", 2), 0);         /* bad continuation */
}

Test(utf8, valid_checks_every_character)
{
    cr_assert(er_utf8_valid("abc" E_ACUTE, 5));
    cr_assert(er_utf8_valid("", 0));
    cr_assert_not(er_utf8_valid("abc\xff", 4));
    cr_assert_not(er_utf8_valid("ab" E_ACUTE, 3)); /* ends inside a character */
}

Test(utf8, copy_cuts_at_a_character_boundary)
{
    char out[8];
    /* 4 e-acutes are 8 bytes; 7 fit with the NUL, so 3 characters (6 bytes) */
    cr_assert_eq(er_utf8_copy(out, sizeof out, E_ACUTE E_ACUTE E_ACUTE E_ACUTE, 8), 6);
    cr_assert_str_eq(out, E_ACUTE E_ACUTE E_ACUTE);
    cr_assert(er_utf8_valid(out, strlen(out)));
}

Test(utf8, copy_replaces_invalid_bytes)
{
    char out[32];
    cr_assert_eq(er_utf8_copy(out, sizeof out, "a\xff" "b\xc3", 4), 8);
    cr_assert_str_eq(out, "a\xef\xbf\xbd" "b\xef\xbf\xbd");
}

Test(error, long_field_is_cut_at_a_character_boundary)
{
    char name[201];
    for (int i = 0; i < 100; i++)
        memcpy(name + 2 * i, E_ACUTE, 2);
    name[200] = '\0';
    er_error err;
    cr_assert_eq(er_error_set(&err, ER_EINVAL, name, "%s is not a known field", name), ER_EINVAL);
    size_t fl = strlen(err.field), ml = strlen(err.message);
    cr_assert_eq(fl, 126, "field keeps 63 whole characters, got %zu bytes", fl);
    cr_assert(er_utf8_valid(err.field, fl));
    cr_assert(er_utf8_valid(err.message, ml));
    cr_assert_eq(strncmp(err.field, name, fl), 0);
}

Test(error, forty_e_acutes_fit_whole)
{
    char name[81];
    for (int i = 0; i < 40; i++)
        memcpy(name + 2 * i, E_ACUTE, 2);
    name[80] = '\0';
    er_error err;
    er_error_set(&err, ER_EINVAL, name, "%s is not a known field", name);
    cr_assert_str_eq(err.field, name);
}

Test(error, invalid_bytes_in_a_field_are_replaced)
{
    er_error err;
    er_error_set(&err, ER_EINVAL, "\xff\xfe", "bad %s", "\xc3");
    cr_assert_str_eq(err.field, "\xef\xbf\xbd\xef\xbf\xbd");
    cr_assert_str_eq(err.message, "bad \xef\xbf\xbd");
}

Test(error, prefix_keeps_the_field_valid)
{
    er_error err;
    char name[ER_FIELD_MAX];
    memset(name, 'a', sizeof name - 2);
    name[sizeof name - 2] = '\0';
    er_error_set(&err, ER_EINVAL, name, "x");
    er_error_prefix(&err, "jobs[1]." E_ACUTE);
    cr_assert(er_utf8_valid(err.field, strlen(err.field)));
    cr_assert_eq(strncmp(err.field, "jobs[1]." E_ACUTE "aaa", 13), 0);
}
