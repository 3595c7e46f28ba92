/* SPDX-License-Identifier: MIT
 *
 * UTF-8 rules shared by every layer: which bytes form a valid character
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF),
 * where a text may be cut without splitting a character, and a copy that
 * replaces what is not valid. Pure functions over byte ranges.
 */
#ifndef ER_UTIL_UTF8_H
#define ER_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* The length (1..4) of the valid UTF-8 character at s[0..n), or 0 when the
 * bytes there are not one (n == 0 included). */
size_t er_utf8_char_len(const char *s, size_t n);

/* Whether s[0..n) is entirely valid UTF-8. */
bool er_utf8_valid(const char *s, size_t n);

/* Copies s[0..n) into out (cap bytes, cap >= 1, always NUL-terminated),
 * replacing each byte that does not start a valid character with U+FFFD,
 * and stopping before a character that would not fit whole. Returns the
 * bytes written (without the NUL). */
size_t er_utf8_copy(char *out, size_t cap, const char *s, size_t n);

#endif
