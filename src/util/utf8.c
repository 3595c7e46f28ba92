/* SPDX-License-Identifier: MIT
 *
 * UTF-8 checks (utf8.h), byte ranges straight from Unicode's table of
 * well-formed sequences: the second byte's range depends on the first
 * (E0: A0..BF, ED: 80..9F, F0: 90..BF, F4: 80..8F) so overlong forms,
 * surrogates and code points past U+10FFFF fail at the byte that makes
 * them so.
 */
#include "util/utf8.h"

#include <string.h>

size_t er_utf8_seq(const char *s, size_t n, bool *ok)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0], lo = 0x80, hi = 0xbf;
    size_t k;
    *ok = true;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        k = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
        *ok = false; /* 80..C1, F5..FF never start a sequence */
        return 1;
    }
    for (size_t i = 1; i < k; i++) {
        if (i >= n || p[i] < lo || p[i] > hi) {
            *ok = false;
            return i;
        }
        lo = 0x80;
        hi = 0xbf;
    }
    return k;
}

bool er_utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        bool ok;
        i += er_utf8_seq(s + i, n - i, &ok);
        if (!ok)
            return false;
    }
    return true;
}

size_t er_utf8_copy(char *out, size_t cap, const char *s, size_t n)
{
    static const char repl[] = "\xef\xbf\xbd";
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        bool ok;
        size_t k = er_utf8_seq(s + i, n - i, &ok);
        const char *src = ok ? s + i : repl;
        size_t len = ok ? k : 3;
        if (o + len + 1 > cap)
            break;
        memcpy(out + o, src, len);
        o += len;
        i += k;
    }
    out[o] = '\0';
    return o;
}
