/* SPDX-License-Identifier: MIT
 *
 * Glob patterns with the semantics of Redis's MATCH (what Faktory's
 * MUTATE filter.regexp is): `*` any run of bytes, `?` one byte, `[...]`
 * one byte of a set (`^` first negates it, `a-z` a range, either way
 * round, `\x` the byte x; a set left open takes the rest of the
 * pattern), `\x` the byte x, and any other byte itself. Bytes, case
 * sensitive. Pure; linear space, at most pattern x text steps.
 */
#ifndef ER_CORE_GLOB_H
#define ER_CORE_GLOB_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

/* The longest pattern a request may give. */
#define ER_GLOB_MAX 1024

/* 0 when a pattern of n bytes is 1..ER_GLOB_MAX long, else ER_EINVAL
 * naming `field`. Any bytes are a pattern. */
int er_glob_validate(size_t n, const char *field, er_error *err);

/* True when text[0..tn) matches pattern[0..pn). */
bool er_glob_match(const char *pattern, size_t pn, const char *text, size_t tn);

#endif
