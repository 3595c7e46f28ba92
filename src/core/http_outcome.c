/* SPDX-License-Identifier: MIT
 *
 * The response classifier and the Retry-After parser (http_outcome.h).
 * HTTP-date names are case-sensitive (RFC 9110 section 5.6.7); a date is
 * checked field by field (day within its month, 00..23:00..59:00..60) but
 * its day name is not checked against the date.
 */
#include "core/http_outcome.h"
#include "util/calendar.h"

#include <string.h>

static const char *const months[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const days[7] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
static const char *const long_days[7] = {"Monday", "Tuesday", "Wednesday", "Thursday",
                                         "Friday", "Saturday", "Sunday"};

/* A cursor over the value: p..end. */
typedef struct cur {
    const char *p, *end;
} cur;

static bool lit(cur *c, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* One of names[0..count) (the longest first, so "Sunday" is not "Sun"). */
static int name(cur *c, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (lit(c, names[i]))
            return i;
    return -1;
}

/* Exactly n digits. */
static bool digits(cur *c, int n, int *out)
{
    if (c->end - c->p < n)
        return false;
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (c->p[i] < '0' || c->p[i] > '9')
            return false;
        v = v * 10 + (c->p[i] - '0');
    }
    c->p += n;
    *out = v;
    return true;
}

/* time-of-day = hour ":" minute ":" second */
static bool time_of_day(cur *c, int *h, int *m, int *s)
{
    return digits(c, 2, h) && lit(c, ":") && digits(c, 2, m) && lit(c, ":") && digits(c, 2, s) &&
           *h <= 23 && *m <= 59 && *s <= 60;
}

/* The instant of a checked date, ms since the epoch. */
static bool instant(int64_t y, int mon, int d, int h, int mi, int s, int64_t *out)
{
    if (mon < 0 || d < 1 || d > er_month_days(y, mon + 1))
        return false;
    *out = ((er_days_from_civil(y, mon + 1, d) * 24 + h) * 60 + mi) * 60000LL + s * 1000LL;
    return true;
}

/* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
static bool imf_fixdate(cur c, int64_t *out)
{
    int d, y, h, mi, s;
    if (name(&c, days, 7) < 0 || !lit(&c, ", ") || !digits(&c, 2, &d) || !lit(&c, " "))
        return false;
    int mon = name(&c, months, 12);
    return mon >= 0 && lit(&c, " ") && digits(&c, 4, &y) && lit(&c, " ") &&
           time_of_day(&c, &h, &mi, &s) && lit(&c, " GMT") && c.p == c.end &&
           instant(y, mon, d, h, mi, s, out);
}

/* rfc850-date: Sunday, 06-Nov-94 08:49:37 GMT */
static bool rfc850_date(cur c, int64_t now_ms, int64_t *out)
{
    int d, yy, h, mi, s;
    if (name(&c, long_days, 7) < 0 || !lit(&c, ", ") || !digits(&c, 2, &d) || !lit(&c, "-"))
        return false;
    int mon = name(&c, months, 12);
    if (mon < 0 || !lit(&c, "-") || !digits(&c, 2, &yy) || !lit(&c, " ") ||
        !time_of_day(&c, &h, &mi, &s) || !lit(&c, " GMT") || c.p != c.end)
        return false;
    int64_t now_y;
    int now_m, now_d;
    er_civil_from_days(er_floor_div(now_ms, 86400000LL), &now_y, &now_m, &now_d);
    if (now_y < 0 || now_y > 9999)
        now_y = now_y < 0 ? 0 : 9999; /* a clock beyond any HTTP-date: keep the sums small */
    /* the latest year with these digits not more than 50 years ahead */
    int64_t y = er_floor_div(now_y, 100) * 100 + 100 + yy;
    while (y > now_y + 50)
        y -= 100;
    return instant(y, mon, d, h, mi, s, out);
}

/* asctime-date: Sun Nov  6 08:49:37 1994 */
static bool asctime_date(cur c, int64_t *out)
{
    int d, y, h, mi, s;
    if (name(&c, days, 7) < 0 || !lit(&c, " "))
        return false;
    int mon = name(&c, months, 12);
    if (mon < 0 || !lit(&c, " "))
        return false;
    if (lit(&c, " ")) {
        if (!digits(&c, 1, &d))
            return false;
    } else if (!digits(&c, 2, &d)) {
        return false;
    }
    return lit(&c, " ") && time_of_day(&c, &h, &mi, &s) && lit(&c, " ") && digits(&c, 4, &y) &&
           c.p == c.end && instant(y, mon, d, h, mi, s, out);
}

bool er_retry_after_parse(const char *value, int64_t now_ms, int64_t max_ms, int64_t *delay_ms)
{
    if (!value)
        return false;
    if (max_ms < 0)
        max_ms = 0;
    cur c = {value, value + strlen(value)};
    while (c.p < c.end && (*c.p == ' ' || *c.p == '\t'))
        c.p++;
    while (c.end > c.p && (c.end[-1] == ' ' || c.end[-1] == '\t'))
        c.end--;
    if (c.p == c.end)
        return false;
    if (*c.p >= '0' && *c.p <= '9') {
        /* delay-seconds, saturating at the cap */
        int64_t ms = 0;
        for (const char *q = c.p; q < c.end; q++) {
            if (*q < '0' || *q > '9')
                return false;
            int64_t dg = (*q - '0') * 1000LL;
            ms = ms > (max_ms - dg) / 10 ? max_ms : ms * 10 + dg;
        }
        *delay_ms = ms;
        return true;
    }
    int64_t at;
    if (!imf_fixdate(c, &at) && !rfc850_date(c, now_ms, &at) && !asctime_date(c, &at))
        return false;
    int64_t diff;
    if (at <= now_ms)
        *delay_ms = 0;
    else if (__builtin_sub_overflow(at, now_ms, &diff) || diff > max_ms)
        *delay_ms = max_ms;
    else
        *delay_ms = diff;
    return true;
}

er_http_class er_http_classify(long status, const char *retry_after, int64_t now_ms,
                               int64_t max_ms, int64_t *delay_ms)
{
    int64_t d = 0;
    er_http_class cls;
    if (status >= 200 && status <= 299) {
        cls = ER_HTTP_SUCCESS;
    } else if (status == 429) {
        cls = ER_HTTP_THROTTLED;
        if (!er_retry_after_parse(retry_after, now_ms, max_ms, &d))
            d = ER_HTTP_THROTTLE_DEFAULT_MS < max_ms ? ER_HTTP_THROTTLE_DEFAULT_MS
                                                     : (max_ms > 0 ? max_ms : 0);
    } else if (status == 408 || (status >= 500 && status <= 599)) {
        cls = er_retry_after_parse(retry_after, now_ms, max_ms, &d) ? ER_HTTP_RETRY_LATER
                                                                     : ER_HTTP_TRANSIENT;
    } else if (status >= 100 && status <= 499) {
        cls = ER_HTTP_PERMANENT;
    } else {
        cls = ER_HTTP_TRANSIENT;
    }
    *delay_ms = d;
    return cls;
}

const char *er_http_class_name(er_http_class c)
{
    static const char *const names[] = {"success", "transient", "permanent", "retry_later",
                                        "throttled"};
    return (int)c >= 0 && (int)c < 5 ? names[c] : "transient";
}
