/* SPDX-License-Identifier: MIT
 *
 * UTF-8 validation, character-boundary cuts and replacing copies.
 */
#include "util/utf8.h"

#include <string.h>

size_t er_utf8_char_len(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0)
        return 0;
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* the allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong below U+0800 */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates U+D800..U+DFFF */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong below U+10000 */
        else if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else {
        return 0; /* continuation byte, 0xc0/0xc1 or 0xf5.. */
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

bool er_utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = er_utf8_char_len(s + i, n - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

size_t er_utf8_copy(char *out, size_t cap, const char *s, size_t n)
{
    static const char repl[] = "\xef\xbf\xbd";
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = er_utf8_char_len(s + i, n - i);
        const char *src = k ? s + i : repl;
        size_t len = k ? k : 3;
        if (o + len + 1 > cap)
            break;
        memcpy(out + o, src, len);
        o += len;
        i += k ? k : 1;
    }
    out[o] = '\0';
    return o;
}
