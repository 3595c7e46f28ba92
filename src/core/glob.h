/* SPDX-License-Identifier: MIT
 *
 * Glob patterns with the semantics of Redis's MATCH (what Faktory's
 * MUTATE filter.regexp is): `*` any run of bytes, `?` one byte, `[...]`
 * one byte of a set (`^` first negates it, `a-z` a range, either way
 * round, `\x` the byte x; a set left open takes the rest of the
 * pattern), `\x` the byte x, and any other byte itself. Bytes, case
 * sensitive. Pure; constant space (about 35 KiB of stack), no recursion.
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

/* The steps of going back to the latest `*` before a pattern of pn <=
 * ER_GLOB_MAX bytes is run as the automaton. */
#define ER_GLOB_STEPS(pn, tn) (4 * ((pn) + (tn)) + 64)

/* True when text[0..tn) matches pattern[0..pn). Work: for pn <=
 * ER_GLOB_MAX, at most ER_GLOB_STEPS token steps and then, if they were
 * not enough, tn x (pn / 64 + 1) word steps (and a table of 256 x that
 * many words); a longer pattern (no request gives one), at most pn x tn
 * token steps. */
bool er_glob_match(const char *pattern, size_t pn, const char *text, size_t tn);

/* The automaton alone, as er_glob_match runs it (false when pn >
 * ER_GLOB_MAX); for tests. */
bool er_glob_match_automaton(const char *pattern, size_t pn, const char *text, size_t tn);

#endif
