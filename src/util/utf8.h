/* SPDX-License-Identifier: MIT
 *
 * UTF-8 well-formedness (Unicode 15, table 3-7): no overlong forms, no
 * surrogates, nothing above U+10FFFF. The one definition used by the JSON
 * escaper (jsonw.c), error details (err.c), error replies and liberrand's
 * JSON scanner: where a text may be cut without splitting a character, and
 * a copy that replaces what is not valid. Pure.
 */
#ifndef ER_UTIL_UTF8_H
#define ER_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The sequence at s (n >= 1 bytes available): when it is well-formed, sets
 * *ok and returns its length (1..4); otherwise clears *ok and returns the
 * length of its maximal ill-formed subpart (1..3): the bytes one U+FFFD
 * replaces under Unicode's "substitution of maximal subparts". */
size_t er_utf8_seq(const char *s, size_t n, bool *ok);

/* Whether s[0, n) is well-formed UTF-8. */
bool er_utf8_valid(const char *s, size_t n);

/* Copies s[0..n) into out (cap bytes, cap >= 1, always NUL-terminated),
 * replacing each maximal ill-formed subpart with U+FFFD and stopping before
 * a character that would not fit whole. Returns the bytes written (without
 * the NUL). */
size_t er_utf8_copy(char *out, size_t cap, const char *s, size_t n);

#endif
