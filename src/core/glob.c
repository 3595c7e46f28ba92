/* SPDX-License-Identifier: MIT
 *
 * Glob matching, Redis MATCH semantics (core/glob.h). A failed token goes
 * back to the latest `*`, which takes one byte more: enough, because every
 * other token takes exactly one byte, and usually about one pass over the
 * text. When that takes more than ER_GLOB_STEPS, a pattern of up to
 * ER_GLOB_MAX bytes runs as a bit-parallel automaton instead: one bit per
 * token, pn / 64 + 1 words per text byte, whatever the pattern. Neither
 * recurses or allocates.
 */
#include "core/glob.h"

#include <stdint.h>
#include <string.h>

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

/* 1 (a match) or 0, within `budget` token steps (at most pn x tn are
 * needed); -1 when they ran out. */
static int backtrack(const unsigned char *p, size_t pn, const unsigned char *t, size_t tn,
                     size_t budget)
{
    size_t pi = 0, ti = 0;
    size_t star_p = 0, star_t = 0;
    bool star = false;
    for (size_t steps = 0;; steps++) {
        if (steps == budget)
            return -1;
        if (pi < pn && p[pi] == '*') {
            while (pi < pn && p[pi] == '*')
                pi++;
            if (pi == pn)
                return 1; /* a trailing `*` takes the rest */
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
            return 0;
        /* the latest `*` takes one byte more */
        pi = star_p;
        ti = ++star_t;
    }
}

/* ---- the automaton ----
 * State j: the first j tokens (runs of `*` are one token) took the text
 * read so far. A byte moves state j to j + 1 when token j takes it, and a
 * `*` state stays (it takes the byte) and also holds the state after it
 * (it may take nothing). The text matches when state k (all k tokens) is
 * held at its end. */

#define WORDS (ER_GLOB_MAX / 64 + 1) /* states 0..ER_GLOB_MAX */

typedef struct automaton {
    size_t k, w;                 /* tokens; words in use */
    uint64_t take[256][WORDS];   /* take[c] bit j: token j is one byte and takes c */
    uint64_t star[WORDS];        /* bit j: token j is `*` */
} automaton;

static void set_bit(uint64_t *v, size_t j)
{
    v[j / 64] |= (uint64_t)1 << (j % 64);
}

/* The tokens of p[0..pn) (pn <= ER_GLOB_MAX) into *a, read as set_match
 * and token_match read them. */
static void build(automaton *a, const unsigned char *p, size_t pn)
{
    size_t k = 0;
    for (size_t i = 0; i < pn; k++) {
        if (p[i] == '*') {
            while (i < pn && p[i] == '*')
                i++;
            set_bit(a->star, k);
            continue;
        }
        size_t len = 1;
        if (p[i] == '?') {
            for (int c = 0; c < 256; c++)
                set_bit(a->take[c], k);
        } else if (p[i] == '[') {
            for (int c = 0; c < 256; c++) {
                size_t n;
                if (set_match(p + i + 1, pn - i - 1, (unsigned char)c, &n))
                    set_bit(a->take[c], k);
                len = n + 1;
            }
        } else if (p[i] == '\\' && pn - i >= 2) {
            set_bit(a->take[p[i + 1]], k);
            len = 2;
        } else {
            set_bit(a->take[p[i]], k);
        }
        i += len;
    }
    a->k = k;
}

/* d |= (d & star) << 1: a `*` state also holds the state after it. */
static void close_stars(const automaton *a, uint64_t *d)
{
    uint64_t carry = 0;
    for (size_t w = 0; w < a->w; w++) {
        uint64_t s = d[w] & a->star[w];
        d[w] |= (s << 1) | carry;
        carry = s >> 63;
    }
}

static bool run(automaton *a, const unsigned char *t, size_t tn)
{
    uint64_t d[WORDS] = {1};
    close_stars(a, d);
    for (size_t i = 0; i < tn; i++) {
        const uint64_t *take = a->take[t[i]];
        uint64_t carry = 0, any = 0;
        for (size_t w = 0; w < a->w; w++) {
            uint64_t moved = d[w] & take[w];
            uint64_t next = (moved << 1) | carry | (d[w] & a->star[w]);
            carry = moved >> 63;
            d[w] = next;
            any |= next;
        }
        if (!any)
            return false;
        close_stars(a, d);
    }
    return (d[a->k / 64] >> (a->k % 64)) & 1;
}

bool er_glob_match_automaton(const char *pattern, size_t pn, const char *text, size_t tn)
{
    const unsigned char *p = (const unsigned char *)pattern;
    const unsigned char *t = (const unsigned char *)text;
    if (pn > ER_GLOB_MAX)
        return false;
    automaton a;
    /* only the words in use are read: clear those */
    size_t w = pn / 64 + 1;
    for (int c = 0; c < 256; c++)
        memset(a.take[c], 0, w * sizeof a.take[c][0]);
    memset(a.star, 0, sizeof a.star);
    a.w = w;
    build(&a, p, pn);
    return run(&a, t, tn);
}

bool er_glob_match(const char *pattern, size_t pn, const char *text, size_t tn)
{
    const unsigned char *p = (const unsigned char *)pattern;
    const unsigned char *t = (const unsigned char *)text;
    if (pn > ER_GLOB_MAX)
        return backtrack(p, pn, t, tn, SIZE_MAX) == 1;
    /* the usual pattern is done in about one pass: the automaton's table
     * costs more than that, so it is built only when going back takes long */
    int r = backtrack(p, pn, t, tn, ER_GLOB_STEPS(pn, tn));
    return r >= 0 ? r == 1 : er_glob_match_automaton(pattern, pn, text, tn);
}
