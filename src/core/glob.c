/* SPDX-License-Identifier: MIT
 *
 * Glob matching, Redis MATCH semantics (core/glob.h). Every token but `*`
 * takes exactly one byte of the text, so going back to the latest `*`
 * and letting it take one byte more is enough: no recursion.
 */
#include "core/glob.h"

int er_glob_validate(size_t n, const char *field, er_error *err)
{
    if (n == 0 || n > ER_GLOB_MAX)
        return er_error_set(err, ER_EINVAL, field, "%s must be 1..%d bytes", field, ER_GLOB_MAX);
    return 0;
}

/* The set at p[0..pn) (after its `[`) against byte c: *len receives the
 * bytes the set takes in the pattern, its `]` included when there is one. */
static bool set_match(const unsigned char *p, size_t pn, unsigned char c, size_t *len)
{
    size_t i = 0;
    bool negate = i < pn && p[i] == '^';
    if (negate)
        i++;
    bool hit = false;
    while (i < pn && p[i] != ']') {
        if (p[i] == '\\' && i + 1 < pn) {
            hit |= p[i + 1] == c;
            i += 2;
        } else if (i + 2 < pn && p[i + 1] == '-') {
            unsigned char lo = p[i], hi = p[i + 2];
            if (lo > hi) {
                unsigned char t = lo;
                lo = hi;
                hi = t;
            }
            hit |= c >= lo && c <= hi;
            i += 3;
        } else {
            hit |= p[i] == c;
            i++;
        }
    }
    *len = i < pn ? i + 1 : i; /* past the `]`, or the pattern's end */
    return hit != negate;
}

/* One token (not `*`) at p[0..pn) against byte c; *len as set_match. */
static bool token_match(const unsigned char *p, size_t pn, unsigned char c, size_t *len)
{
    if (p[0] == '?') {
        *len = 1;
        return true;
    }
    if (p[0] == '[') {
        bool ok = set_match(p + 1, pn - 1, c, len);
        *len += 1;
        return ok;
    }
    if (p[0] == '\\' && pn >= 2) {
        *len = 2;
        return p[1] == c;
    }
    *len = 1;
    return p[0] == c;
}

bool er_glob_match(const char *pattern, size_t pn, const char *text, size_t tn)
{
    const unsigned char *p = (const unsigned char *)pattern;
    const unsigned char *t = (const unsigned char *)text;
    size_t pi = 0, ti = 0;
    size_t star_p = 0, star_t = 0;
    bool star = false;
    for (;;) {
        if (pi < pn && p[pi] == '*') {
            while (pi < pn && p[pi] == '*')
                pi++;
            if (pi == pn)
                return true; /* a trailing `*` takes the rest */
            star = true;
            star_p = pi;
            star_t = ti;
            continue;
        }
        if (ti == tn)
            return pi == pn;
        size_t len;
        if (pi < pn && token_match(p + pi, pn - pi, t[ti], &len)) {
            pi += len;
            ti++;
            continue;
        }
        if (!star)
            return false;
        /* the latest `*` takes one byte more */
        pi = star_p;
        ti = ++star_t;
    }
}
