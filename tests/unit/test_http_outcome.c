/* SPDX-License-Identifier: MIT
 *
 * The HTTP response classifier and the Retry-After parser
 * (src/core/http_outcome.h), and liberrand's errand_error_from_http over it.
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "core/http_outcome.h"
#include "errand/errand.h"

#define T0 784111777000LL /* Sun, 06 Nov 1994 08:49:37 GMT */
#define CAP ER_HTTP_DELAY_MAX_MS

static int64_t delay_of(const char *v, int64_t now)
{
    int64_t d = -7;
    cr_assert(er_retry_after_parse(v, now, CAP, &d), "refused: \"%s\"", v);
    return d;
}

static void refused(const char *v)
{
    int64_t d = -7;
    cr_assert_not(er_retry_after_parse(v, T0, CAP, &d), "accepted: \"%s\"", v);
    cr_assert_eq(d, -7, "*delay_ms touched for \"%s\"", v);
}

static er_http_class classify(long status, const char *ra, int64_t *d)
{
    return er_http_classify(status, ra, T0, CAP, d);
}

/* ---- the table, row by row ---- */

Test(http_outcome, every_2xx_is_success_whatever_retry_after)
{
    int64_t d = -1;
    for (long s = 200; s <= 299; s++) {
        cr_assert_eq(classify(s, "30", &d), ER_HTTP_SUCCESS, "%ld", s);
        cr_assert_eq(d, 0);
    }
}

Test(http_outcome, status_429_is_throttled_for_retry_after)
{
    int64_t d = 0;
    cr_assert_eq(classify(429, "2", &d), ER_HTTP_THROTTLED);
    cr_assert_eq(d, 2000);
    cr_assert_eq(classify(429, "Sun, 06 Nov 1994 08:50:07 GMT", &d), ER_HTTP_THROTTLED);
    cr_assert_eq(d, 30000);
}

Test(http_outcome, status_429_without_or_with_garbage_retry_after_waits_10_s)
{
    int64_t d = 0;
    cr_assert_eq(classify(429, NULL, &d), ER_HTTP_THROTTLED);
    cr_assert_eq(d, ER_HTTP_THROTTLE_DEFAULT_MS);
    cr_assert_eq(d, 10000);
    cr_assert_eq(classify(429, "soon", &d), ER_HTTP_THROTTLED);
    cr_assert_eq(d, 10000);
}

Test(http_outcome, status_429_is_capped)
{
    int64_t d = 0;
    cr_assert_eq(classify(429, "86400", &d), ER_HTTP_THROTTLED);
    cr_assert_eq(d, CAP);
    cr_assert_eq(er_http_classify(429, NULL, T0, 3000, &d), ER_HTTP_THROTTLED);
    cr_assert_eq(d, 3000, "the 10 s default is capped too");
    cr_assert_eq(er_http_classify(429, "5", T0, 3000, &d), ER_HTTP_THROTTLED);
    cr_assert_eq(d, 3000);
}

Test(http_outcome, status_408_and_5xx_with_retry_after_are_retry_later)
{
    int64_t d = 0;
    long st[] = {408, 500, 502, 503, 504, 599};
    for (size_t i = 0; i < sizeof st / sizeof *st; i++) {
        cr_assert_eq(classify(st[i], "120", &d), ER_HTTP_RETRY_LATER, "%ld", st[i]);
        cr_assert_eq(d, 120000);
    }
    cr_assert_eq(classify(503, "Sunday, 06-Nov-94 08:49:47 GMT", &d), ER_HTTP_RETRY_LATER);
    cr_assert_eq(d, 10000);
    cr_assert_eq(classify(503, "0", &d), ER_HTTP_RETRY_LATER);
    cr_assert_eq(d, 0);
}

Test(http_outcome, status_408_and_5xx_without_retry_after_are_transient)
{
    int64_t d = -1;
    long st[] = {408, 500, 503, 599};
    for (size_t i = 0; i < sizeof st / sizeof *st; i++) {
        cr_assert_eq(classify(st[i], NULL, &d), ER_HTTP_TRANSIENT, "%ld", st[i]);
        cr_assert_eq(d, 0);
        cr_assert_eq(classify(st[i], "in a while", &d), ER_HTTP_TRANSIENT,
                     "garbage counts as absent");
        cr_assert_eq(d, 0);
    }
}

Test(http_outcome, other_4xx_are_permanent_whatever_retry_after)
{
    int64_t d = -1;
    for (long s = 400; s <= 499; s++) {
        if (s == 408 || s == 429)
            continue;
        cr_assert_eq(classify(s, "5", &d), ER_HTTP_PERMANENT, "%ld", s);
        cr_assert_eq(d, 0);
    }
}

Test(http_outcome, no_response_is_transient)
{
    int64_t d = -1;
    cr_assert_eq(classify(0, NULL, &d), ER_HTTP_TRANSIENT);
    cr_assert_eq(d, 0);
    cr_assert_eq(classify(0, "5", &d), ER_HTTP_TRANSIENT);
    cr_assert_eq(d, 0);
    cr_assert_eq(classify(600, NULL, &d), ER_HTTP_TRANSIENT, "not an HTTP status");
    cr_assert_eq(classify(999, NULL, &d), ER_HTTP_TRANSIENT);
    cr_assert_eq(classify(-1, NULL, &d), ER_HTTP_TRANSIENT);
    cr_assert_eq(classify(99, NULL, &d), ER_HTTP_TRANSIENT);
}

Test(http_outcome, informational_and_redirects_are_permanent)
{
    int64_t d = -1;
    long st[] = {100, 101, 199, 300, 301, 302, 307, 308, 399};
    for (size_t i = 0; i < sizeof st / sizeof *st; i++)
        cr_assert_eq(classify(st[i], "5", &d), ER_HTTP_PERMANENT, "%ld", st[i]);
}

Test(http_outcome, class_names)
{
    cr_assert_str_eq(er_http_class_name(ER_HTTP_SUCCESS), "success");
    cr_assert_str_eq(er_http_class_name(ER_HTTP_TRANSIENT), "transient");
    cr_assert_str_eq(er_http_class_name(ER_HTTP_PERMANENT), "permanent");
    cr_assert_str_eq(er_http_class_name(ER_HTTP_RETRY_LATER), "retry_later");
    cr_assert_str_eq(er_http_class_name(ER_HTTP_THROTTLED), "throttled");
}

/* ---- Retry-After: delay-seconds ---- */

Test(retry_after, delay_seconds)
{
    cr_assert_eq(delay_of("0", T0), 0);
    cr_assert_eq(delay_of("1", T0), 1000);
    cr_assert_eq(delay_of("007", T0), 7000);
    cr_assert_eq(delay_of(" \t120\t ", T0), 120000, "surrounding whitespace is allowed");
    cr_assert_eq(delay_of("3600", T0), CAP);
    cr_assert_eq(delay_of("3601", T0), CAP);
}

Test(retry_after, huge_delay_seconds_saturate_without_overflow)
{
    cr_assert_eq(delay_of("99999999999999999999999999999999999999999", T0), CAP);
    int64_t d = 0;
    cr_assert(er_retry_after_parse("99999999999999999999999", T0, INT64_MAX, &d));
    cr_assert_eq(d, INT64_MAX);
    cr_assert(er_retry_after_parse("9223372036854775", T0, INT64_MAX, &d));
    cr_assert_eq(d, 9223372036854775000LL);
    cr_assert(er_retry_after_parse("9223372036854776", T0, INT64_MAX, &d));
    cr_assert_eq(d, INT64_MAX);
    cr_assert(er_retry_after_parse("5", T0, 0, &d));
    cr_assert_eq(d, 0, "a cap of 0");
    cr_assert(er_retry_after_parse("5", T0, -10, &d));
    cr_assert_eq(d, 0, "a negative cap is 0");
    cr_assert(er_retry_after_parse("5", T0, 1500, &d));
    cr_assert_eq(d, 1500);
}

Test(retry_after, garbage_is_absent)
{
    refused(NULL);
    refused("");
    refused("   ");
    refused("-1");
    refused("+5");
    refused("1.5");
    refused("5s");
    refused("5 6");
    refused("0x10");
    refused("soon");
    refused("\xff\xfe");
    refused("Sun, 06 Nov 1994 08:49:37");      /* no zone */
    refused("Sun, 06 Nov 1994 08:49:37 UTC");  /* only GMT */
    refused("Sun, 06 Nov 1994 08:49:37 gmt");  /* case-sensitive */
    refused("sun, 06 Nov 1994 08:49:37 GMT");
    refused("Sun, 06 nov 1994 08:49:37 GMT");
    refused("Sun, 6 Nov 1994 08:49:37 GMT");   /* two-digit day */
    refused("Sun, 06 Nov 94 08:49:37 GMT");    /* four-digit year */
    refused("Sun, 06 Nov 1994 8:49:37 GMT");
    refused("Sun, 06 Nov 1994 08:49:37 GMT x");
    refused("Sun,  06 Nov 1994 08:49:37 GMT");
    refused("Xyz, 06 Nov 1994 08:49:37 GMT");
    refused("Sun, 06 Foo 1994 08:49:37 GMT");
    refused("Sun, 31 Nov 1994 08:49:37 GMT");  /* November has 30 days */
    refused("Sun, 00 Nov 1994 08:49:37 GMT");
    refused("Tue, 29 Feb 1994 08:49:37 GMT");  /* not a leap year */
    refused("Sun, 06 Nov 1994 24:00:00 GMT");
    refused("Sun, 06 Nov 1994 23:60:00 GMT");
    refused("Sun, 06 Nov 1994 23:59:61 GMT");
    refused("Sun, 06-Nov-94 08:49:37 GMT");    /* RFC 850 needs the long day name */
    refused("Sunday, 06-Nov-1994 08:49:37 GMT");
    refused("Sunday, 06 Nov 1994 08:49:37 GMT");
    refused("Sun Nov 6 08:49:37 1994");        /* asctime pads the day with a space */
    refused("Sun Nov  6 08:49:37 94");
    refused("Sun Nov  6 08:49:37 1994 GMT");
    refused("Sun Nov 06  08:49:37 1994");
}

/* ---- Retry-After: HTTP-date ---- */

Test(retry_after, imf_fixdate)
{
    cr_assert_eq(delay_of("Sun, 06 Nov 1994 08:49:37 GMT", T0), 0);
    cr_assert_eq(delay_of("Sun, 06 Nov 1994 08:49:39 GMT", T0), 2000);
    cr_assert_eq(delay_of("Sun, 06 Nov 1994 08:49:39 GMT", T0 + 500), 1500);
    cr_assert_eq(delay_of("  Sun, 06 Nov 1994 09:00:00 GMT ", T0), 623000);
    cr_assert_eq(delay_of("Mon, 07 Nov 1994 08:49:37 GMT", T0), CAP);
    /* the day name is not checked against the date */
    cr_assert_eq(delay_of("Fri, 06 Nov 1994 08:49:38 GMT", T0), 1000);
    /* a leap day, a leap second, the year boundary */
    cr_assert_eq(delay_of("Thu, 29 Feb 2024 00:00:10 GMT", 1709164800000LL), 10000);
    cr_assert_eq(delay_of("Sat, 31 Dec 2016 23:59:60 GMT", 1483228799000LL), 1000);
    cr_assert_eq(delay_of("Thu, 01 Jan 1970 00:00:01 GMT", 0), 1000);
}

Test(retry_after, past_dates_are_zero)
{
    cr_assert_eq(delay_of("Sun, 06 Nov 1994 08:49:36 GMT", T0), 0);
    cr_assert_eq(delay_of("Thu, 01 Jan 1970 00:00:00 GMT", T0), 0);
    cr_assert_eq(delay_of("Mon, 01 Jan 0001 00:00:00 GMT", T0), 0);
    cr_assert_eq(delay_of("Sunday, 06-Nov-94 08:49:36 GMT", T0), 0);
    cr_assert_eq(delay_of("Sun Nov  6 08:49:30 1994", T0), 0);
}

Test(retry_after, far_dates_and_extreme_clocks_do_not_overflow)
{
    int64_t d = 0;
    cr_assert(er_retry_after_parse("Fri, 31 Dec 9999 23:59:59 GMT", INT64_MIN, INT64_MAX, &d));
    cr_assert_eq(d, INT64_MAX);
    cr_assert(er_retry_after_parse("Fri, 31 Dec 9999 23:59:59 GMT", INT64_MAX, INT64_MAX, &d));
    cr_assert_eq(d, 0);
    cr_assert(er_retry_after_parse("Sunday, 06-Nov-94 08:49:37 GMT", INT64_MAX, CAP, &d));
    cr_assert(er_retry_after_parse("Sunday, 06-Nov-94 08:49:37 GMT", INT64_MIN, CAP, &d));
}

Test(retry_after, rfc850_date)
{
    cr_assert_eq(delay_of("Sunday, 06-Nov-94 08:49:40 GMT", T0), 3000);
    cr_assert_eq(delay_of("Wednesday, 09-Nov-94 08:49:40 GMT", T0), CAP);
    cr_assert_eq(delay_of("Sunday, 06-Nov-94 08:49:37 GMT", T0), 0);
}

Test(retry_after, rfc850_two_digit_years_follow_the_fifty_year_rule)
{
    /* now 2026-12-01: "76" is 2076 (50 years ahead), "77" is 1977 */
    int64_t now = 1796083200000LL; /* 2026-12-01T00:00:00Z */
    cr_assert_eq(delay_of("Tuesday, 01-Dec-26 00:00:05 GMT", now), 5000);
    cr_assert_eq(delay_of("Tuesday, 01-Dec-76 00:00:05 GMT", now), CAP, "2076: the future");
    cr_assert_eq(delay_of("Wednesday, 01-Dec-77 00:00:05 GMT", now), 0, "1977: the past");
    cr_assert_eq(delay_of("Saturday, 01-Jan-00 00:00:00 GMT", now), 0, "2000");
    /* in 1994, "94" is 1994 and "45" is 1945 (2045 is 51 years ahead) */
    cr_assert_eq(delay_of("Sunday, 06-Nov-44 08:49:37 GMT", T0), CAP, "2044");
    cr_assert_eq(delay_of("Sunday, 06-Nov-45 08:49:37 GMT", T0), 0, "1945");
    /* Feb 29 in a two-digit year resolved to a leap year */
    cr_assert_eq(delay_of("Thursday, 29-Feb-24 00:00:10 GMT", 1709164800000LL), 10000);
}

Test(retry_after, asctime_date)
{
    cr_assert_eq(delay_of("Sun Nov  6 08:49:47 1994", T0), 10000);
    cr_assert_eq(delay_of("Sun Nov 06 08:49:47 1994", T0), 10000, "a two-digit day too");
    cr_assert_eq(delay_of("Thu Nov 10 08:49:37 1994", T0), CAP);
    cr_assert_eq(delay_of("\tSun Nov  6 08:49:38 1994", T0), 1000);
}

/* ---- liberrand ---- */

Test(errand_error_from_http, gives_core_classes_and_the_public_cap)
{
    int cls = -1;
    long long d = -1;
    cr_assert_eq(errand_error_from_http(204, NULL, T0, &cls, &d), 0);
    cr_assert_eq(cls, ERRAND_CLASS_SUCCESS);
    cr_assert_eq(d, 0);
    cr_assert_eq(errand_error_from_http(429, "2", T0, &cls, &d), 0);
    cr_assert_eq(cls, ERRAND_CLASS_THROTTLED);
    cr_assert_eq(d, 2000);
    cr_assert_eq(errand_error_from_http(429, NULL, T0, &cls, &d), 0);
    cr_assert_eq(d, 10000);
    cr_assert_eq(errand_error_from_http(503, "Sun, 06 Nov 1994 08:49:38 GMT", T0, &cls, &d), 0);
    cr_assert_eq(cls, ERRAND_CLASS_RETRY_LATER);
    cr_assert_eq(d, 1000);
    cr_assert_eq(errand_error_from_http(503, "999999", T0, &cls, &d), 0);
    cr_assert_eq(d, ERRAND_HTTP_DELAY_MAX_MS);
    cr_assert_eq(errand_error_from_http(500, NULL, T0, &cls, &d), 0);
    cr_assert_eq(cls, ERRAND_CLASS_TRANSIENT);
    cr_assert_eq(errand_error_from_http(404, NULL, T0, &cls, &d), 0);
    cr_assert_eq(cls, ERRAND_CLASS_PERMANENT);
    cr_assert_eq(errand_error_from_http(0, NULL, T0, &cls, &d), 0);
    cr_assert_eq(cls, ERRAND_CLASS_TRANSIENT);
}

Test(errand_error_from_http, null_outputs_are_refused)
{
    int cls = -1;
    long long d = -1;
    cr_assert_eq(errand_error_from_http(200, NULL, T0, NULL, &d), ERRAND_EINVAL);
    cr_assert_eq(errand_error_from_http(200, NULL, T0, &cls, NULL), ERRAND_EINVAL);
    cr_assert_eq(cls, -1);
    cr_assert_eq(d, -1);
}
