/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for core/glob.h. The input is a pattern and a text
 * split at the first NUL (no NUL: the input is both). er_glob_match, and
 * the automaton it falls back to on its own, must agree with a
 * table-driven oracle written here from the semantics (core/glob.h), and
 * a pattern must match itself once its specials are escaped.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/glob.h"

/* the oracle's bounds: every pattern a request may give, and texts long
 * enough to cross the automaton's 64-state words */
#define MAXP ER_GLOB_MAX
#define MAXT 512

typedef struct {
    bool star;
    bool any;        /* ? */
    bool set[256];   /* the bytes the token takes */
} tok;

/* The pattern as tokens; the oracle's own reading of the semantics. */
static size_t tokens(const unsigned char *p, size_t n, tok *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        tok *t = &out[k++];
        memset(t, 0, sizeof *t);
        if (p[i] == '*') {
            t->star = true;
            i++;
        } else if (p[i] == '?') {
            t->any = true;
            i++;
        } else if (p[i] == '[') {
            i++;
            bool neg = i < n && p[i] == '^';
            i += neg;
            while (i < n && p[i] != ']') {
                if (p[i] == '\\' && i + 1 < n) {
                    t->set[p[i + 1]] = true;
                    i += 2;
                } else if (i + 2 < n && p[i + 1] == '-') {
                    unsigned a = p[i], b = p[i + 2];
                    for (unsigned c = a < b ? a : b; c <= (a < b ? b : a); c++)
                        t->set[c] = true;
                    i += 3;
                } else {
                    t->set[p[i++]] = true;
                }
            }
            i += i < n; /* the `]` */
            if (neg)
                for (int c = 0; c < 256; c++)
                    t->set[c] = !t->set[c];
        } else if (p[i] == '\\' && i + 1 < n) {
            t->set[p[i + 1]] = true;
            i += 2;
        } else {
            t->set[p[i++]] = true;
        }
    }
    return k;
}

static bool oracle(const unsigned char *p, size_t pn, const unsigned char *s, size_t sn)
{
    static tok tk[MAXP];
    static bool dp[MAXP + 1][MAXT + 1]; /* dp[i][j]: tokens i.. match s[j..] */
    size_t k = tokens(p, pn, tk);
    for (size_t i = k + 1; i-- > 0;)
        for (size_t j = sn + 1; j-- > 0;) {
            if (i == k)
                dp[i][j] = j == sn;
            else if (tk[i].star)
                dp[i][j] = dp[i + 1][j] || (j < sn && dp[i][j + 1]);
            else
                dp[i][j] = j < sn && (tk[i].any || tk[i].set[s[j]]) && dp[i + 1][j + 1];
        }
    return dp[0][0];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t pn = nul ? (size_t)(nul - data) : size;
    const uint8_t *t = nul ? nul + 1 : data;
    size_t tn = nul ? size - pn - 1 : size;
    bool got = er_glob_match((const char *)data, pn, (const char *)t, tn);
    if (pn <= MAXP && tn <= MAXT && got != oracle(data, pn, t, tn))
        abort();
    /* the automaton it falls back to, on its own */
    if (pn <= ER_GLOB_MAX &&
        er_glob_match_automaton((const char *)data, pn, (const char *)t, tn) != got)
        abort();
    /* the pattern, every byte escaped, is a literal that matches itself */
    char *esc = malloc(2 * pn + 1);
    if (!esc)
        return 0;
    for (size_t i = 0; i < pn; i++) {
        esc[2 * i] = '\\';
        esc[2 * i + 1] = (char)data[i];
    }
    if (!er_glob_match(esc, 2 * pn, (const char *)data, pn))
        abort();
    if (pn > 0 && er_glob_match(esc, 2 * pn, (const char *)data, pn - 1))
        abort();
    free(esc);
    return 0;
}
