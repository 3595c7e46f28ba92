/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for the dashboard's session cookie reader
 * (er_ui_cookie_in, src/server/http/routes_ui.c), checked against a plain
 * reference written here: split the header value at ';', trim the spaces
 * around each pair, and take the first pair named errand_session whose
 * value is exactly 64 lowercase hex digits. The input is the header value
 * (up to its first NUL).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/http/http_internal.h"

static bool reference(const char *v, char out[65])
{
    static const char name[] = "errand_session=";
    size_t len = strlen(v), i = 0;
    while (i <= len) {
        size_t j = i;
        while (j < len && v[j] != ';')
            j++;
        size_t a = i, b = j; /* the pair is v[a..b) */
        while (a < b && v[a] == ' ')
            a++;
        while (b > a && v[b - 1] == ' ')
            b--;
        size_t nl = sizeof name - 1;
        if (b - a == nl + 64 && memcmp(v + a, name, nl) == 0) {
            bool hex = true;
            for (size_t k = a + nl; k < b; k++)
                hex &= (v[k] >= '0' && v[k] <= '9') || (v[k] >= 'a' && v[k] <= 'f');
            if (hex) {
                memcpy(out, v + a + nl, 64);
                out[64] = '\0';
                return true;
            }
        }
        i = j + 1;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *v = malloc(size + 1);
    if (!v)
        return 0;
    memcpy(v, data, size);
    v[size] = '\0';
    char got[65] = "", want[65] = "";
    bool g = er_ui_cookie_in(v, got), w = reference(v, want);
    if (g != w || (g && strcmp(got, want) != 0))
        abort();
    free(v);
    return 0;
}
