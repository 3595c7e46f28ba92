/* SPDX-License-Identifier: MIT
 *
 * libFuzzer target for Retry-After values (er_retry_after_parse and
 * er_http_classify, src/core/http_outcome.h). A refused value leaves the
 * delay untouched and makes a 503 transient; an accepted one gives a delay
 * within 0..cap, makes a 503 retry_later for the same delay and a 429
 * throttled for it; delay-seconds give min(seconds * 1000, cap) exactly
 * (computed here in 128 bits); an accepted
 * IMF-fixdate a little ahead of now names the instant now + delay.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/http_outcome.h"

#define T0 784111777000LL /* Sun, 06 Nov 1994 08:49:37 GMT */

/* min(decimal digits s[0..n) seconds in ms, cap) */
static int64_t seconds_ms(const char *s, size_t n, int64_t cap)
{
    while (n > 1 && *s == '0')
        s++, n--;
    if (n > 18) /* 10^18 s and more is beyond any int64 cap */
        return cap;
    __int128 v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v * 1000 < cap ? (int64_t)(v * 1000) : cap;
}

static void one(const char *v, size_t n, int64_t now, int64_t cap)
{
    int64_t d = -7;
    bool ok = er_retry_after_parse(v, now, cap, &d);
    int64_t d503 = -1, d429 = -1;
    er_http_class c503 = er_http_classify(503, v, now, cap, &d503);
    er_http_class c429 = er_http_classify(429, v, now, cap, &d429);
    if (!ok) {
        if (d != -7 || c503 != ER_HTTP_TRANSIENT || d503 != 0 || c429 != ER_HTTP_THROTTLED ||
            d429 != (cap < ER_HTTP_THROTTLE_DEFAULT_MS ? cap : ER_HTTP_THROTTLE_DEFAULT_MS))
            abort();
        return;
    }
    if (d < 0 || d > cap || c503 != ER_HTTP_RETRY_LATER || d503 != d ||
        c429 != ER_HTTP_THROTTLED || d429 != d)
        abort();
    size_t a = 0, b = n;
    while (a < b && (v[a] == ' ' || v[a] == '\t'))
        a++;
    while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
        b--;
    bool all_digits = a < b;
    for (size_t i = a; i < b; i++)
        all_digits &= v[i] >= '0' && v[i] <= '9';
    if (all_digits) {
        if (d != seconds_ms(v + a, b - a, cap))
            abort();
        return;
    }
    /* IMF-fixdate within the cap, not a leap second: it names now + delay */
    if (b - a == 29 && memcmp(v + b - 4, " GMT", 4) == 0 && v[a + 3] == ',' && d > 0 &&
        d < cap && now % 1000 == 0 && memcmp(v + a + 23, "60", 2) != 0) {
        time_t t = (time_t)((now + d) / 1000);
        struct tm tm;
        char want[32];
        if (!gmtime_r(&t, &tm) || !strftime(want, sizeof want, "%d %b %Y %H:%M:%S GMT", &tm))
            abort();
        if (memcmp(want, v + a + 5, 24) != 0)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *v = malloc(size + 1);
    if (!v)
        return 0;
    memcpy(v, data, size);
    v[size] = '\0';
    size_t n = strlen(v); /* a header value ends at its first NUL */
    one(v, n, T0, ER_HTTP_DELAY_MAX_MS);
    one(v, n, T0, INT64_MAX);
    one(v, n, T0, 0);
    one(v, n, 1796083200000LL, 1500); /* 2026-12-01 */
    one(v, n, INT64_MIN, ER_HTTP_DELAY_MAX_MS);
    one(v, n, INT64_MAX, INT64_MAX);
    free(v);
    return 0;
}
