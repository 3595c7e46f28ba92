/* SPDX-License-Identifier: MIT
 *
 * Unit tests for src/util: RFC 3339 formatting and parsing (round trips,
 * offsets, fractions, leap days, invalid input), the seeded random source,
 * and the error-code mapping of err.c.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/err.h"

static void fmt_is(int64_t ms, const char *want)
{
    char out[32];
    er_time_format(ms, out);
    cr_assert_str_eq(out, want, "format %lld", (long long)ms);
}

static void parse_is(const char *s, int64_t want)
{
    int64_t ms = -12345;
    cr_assert_eq(er_time_parse(s, &ms), 0, "parse %s", s);
    cr_assert_eq(ms, want, "parse %s: got %lld", s, (long long)ms);
}

static void parse_fails(const char *s)
{
    int64_t ms = 777;
    cr_assert_eq(er_time_parse(s, &ms), ER_EINVAL, "%s should not parse", s);
    cr_assert_eq(ms, 777, "a failed parse leaves *ms alone");
}

Test(clock, format_epoch_and_known_instants)
{
    fmt_is(0, "1970-01-01T00:00:00.000Z");
    fmt_is(1796004000000LL, "2026-11-30T02:00:00.000Z");
    fmt_is(1709210096789LL, "2024-02-29T12:34:56.789Z");
    fmt_is(253402300799999LL, "9999-12-31T23:59:59.999Z");
}

Test(clock, format_before_the_epoch_borrows_a_second)
{
    fmt_is(-1, "1969-12-31T23:59:59.999Z");
    fmt_is(-1000, "1969-12-31T23:59:59.000Z");
}

Test(clock, parse_utc_with_and_without_fraction)
{
    parse_is("2026-11-30T02:00:00Z", 1796004000000LL);
    parse_is("2026-11-30T02:00:00.000Z", 1796004000000LL);
    parse_is("2026-11-30T02:00:00.5Z", 1796004000500LL);
    parse_is("2026-11-30T02:00:00.05Z", 1796004000050LL);
    parse_is("2026-11-30T02:00:00.123456789Z", 1796004000123LL);
}

Test(clock, parse_accepts_lowercase_and_space_separator)
{
    parse_is("2026-11-30t02:00:00z", 1796004000000LL);
    parse_is("2026-11-30 02:00:00Z", 1796004000000LL);
}

Test(clock, parse_applies_offsets)
{
    parse_is("2026-11-30T09:00:00+07:00", 1796004000000LL);
    parse_is("2026-11-29T20:30:00-05:30", 1796004000000LL);
    parse_is("2026-11-30T02:00:00+00:00", 1796004000000LL);
    parse_is("2026-11-30T02:00:00-00:00", 1796004000000LL);
    parse_is("1970-01-01T00:00:00+01:00", -3600000LL);
}

Test(clock, leap_days)
{
    parse_is("2024-02-29T12:34:56.789Z", 1709210096789LL);
    parse_is("2000-02-29T00:00:00Z", 951782400000LL);
    parse_fails("2023-02-29T00:00:00Z");
    parse_fails("2100-02-29T00:00:00Z");
    parse_is("2100-03-01T00:00:00Z", 4107542400000LL);
    fmt_is(951782400000LL, "2000-02-29T00:00:00.000Z");
}

Test(clock, leap_second_reads_as_the_last_second)
{
    parse_is("2016-12-31T23:59:60Z", 1483228799000LL);
}

Test(clock, invalid_inputs_are_refused)
{
    const char *bad[] = {
        "",
        "2026-11-30",
        "2026-11-30T02:00:00",          /* no zone */
        "2026-11-30T02:00Z",            /* no seconds */
        "2026-11-30T02:00:00.Z",        /* empty fraction */
        "2026-11-30T02:00:00ZZ",        /* trailing junk */
        "2026-11-30T02:00:00Z ",
        "2026-11-30T02:00:00+0700",     /* offset without colon */
        "2026-11-30T02:00:00+24:00",
        "2026-11-30T02:00:00+07:60",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-11-00T00:00:00Z",
        "2026-11-31T00:00:00Z",         /* November has 30 days */
        "2026-04-31T00:00:00Z",
        "2026-01-32T00:00:00Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T23:60:00Z",
        "2026-11-30T23:59:61Z",
        "1969-12-31T23:59:59Z",         /* before 1970 */
        "26-11-30T02:00:00Z",
        "2026/11/30T02:00:00Z",
        "2026-11-30X02:00:00Z",
        "+2026-11-30T02:00:00Z",
        "tomorrow",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        parse_fails(bad[i]);
}

Test(clock, format_then_parse_round_trips)
{
    er_rand r;
    er_rand_init_seeded(&r, 2026);
    for (int i = 0; i < 20000; i++) {
        int64_t ms = (int64_t)(r.next(&r) % 253402300800000ULL); /* 1970..9999 */
        char out[32];
        er_time_format(ms, out);
        int64_t back = -1;
        cr_assert_eq(er_time_parse(out, &back), 0, "%s", out);
        cr_assert_eq(back, ms, "%s", out);
    }
}

Test(clock, parse_then_format_is_canonical)
{
    int64_t ms;
    char out[32];
    cr_assert_eq(er_time_parse("2026-11-30T09:00:00.1+07:00", &ms), 0);
    er_time_format(ms, out);
    cr_assert_str_eq(out, "2026-11-30T02:00:00.100Z");
}

Test(clock, now_is_after_2024_and_monotonic_does_not_go_back)
{
    cr_assert_gt(er_now_ms(), 1704067200000LL);
    int64_t a = er_mono_ms(), b = er_mono_ms();
    cr_assert_geq(b, a);
}

/* ---- random source ---- */

Test(clock, seeded_rand_is_deterministic)
{
    er_rand a, b, c;
    er_rand_init_seeded(&a, 1);
    er_rand_init_seeded(&b, 1);
    er_rand_init_seeded(&c, 2);
    int same_c = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = a.next(&a);
        cr_assert_eq(x, b.next(&b));
        same_c += x == c.next(&c);
    }
    cr_assert_lt(same_c, 100);
}

Test(clock, rand_unit_is_in_unit_interval)
{
    er_rand r;
    er_rand_init_seeded(&r, 0);
    double lo = 1, hi = 0;
    for (int i = 0; i < 10000; i++) {
        double u = er_rand_unit(&r);
        cr_assert(u >= 0.0 && u < 1.0);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    cr_assert_lt(lo, 0.01);
    cr_assert_gt(hi, 0.99);
}

static int cmp_token(const void *a, const void *b)
{
    return memcmp(a, b, 33);
}

Test(clock, secure_tokens_are_128_bit_hex_and_distinct)
{
    enum { N = 5000 };
    static char t[N][33];
    for (int i = 0; i < N; i++) {
        er_secure_token(t[i]);
        cr_assert_eq(strlen(t[i]), 32);
        cr_assert_eq(strspn(t[i], "0123456789abcdef"), 32);
    }
    qsort(t, N, sizeof t[0], cmp_token);
    for (int i = 1; i < N; i++)
        cr_assert_str_neq(t[i - 1], t[i]);
}

/* The per-thread buffer must not hand a forked child the bytes its parent
 * hands out next. */
Test(clock, secure_tokens_after_fork_differ_from_the_parents)
{
    char warm[33], mine[33], theirs[33] = {0};
    er_secure_token(warm); /* fills this thread's buffer */
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char tok[33];
        er_secure_token(tok);
        _exit(write(fds[1], tok, sizeof tok) == (ssize_t)sizeof tok ? 0 : 1);
    }
    close(fds[1]);
    er_secure_token(mine);
    cr_assert_eq(read(fds[0], theirs, sizeof theirs), (ssize_t)sizeof theirs);
    close(fds[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert_str_neq(mine, theirs);
}

/* ---- err.c ---- */

Test(err, codes_map_to_api_names_and_statuses)
{
    struct {
        int code;
        const char *name;
        int status;
    } want[] = {
        {ER_OK, "ok", 200},
        {ER_EINVAL, "invalid_argument", 400},
        {ER_EAUTH, "unauthenticated", 401},
        {ER_EPERM, "permission_denied", 403},
        {ER_ENOTFOUND, "not_found", 404},
        {ER_ESTALE, "lease_lost", 409},
        {ER_ECONFLICT, "conflict", 409},
        {ER_ETOOBIG, "payload_too_large", 413},
        {ER_ERATE, "rate_limited", 429},
        {ER_EUNAVAIL, "unavailable", 503},
        {ER_EFULL, "unavailable", 503},
        {ER_ENOMEM, "unavailable", 503},
        {ER_EINTERNAL, "internal", 500},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cr_assert_str_eq(er_error_code_name(want[i].code), want[i].name);
        cr_assert_eq(er_error_http_status(want[i].code), want[i].status);
    }
}

Test(err, unknown_code_is_internal_500)
{
    cr_assert_str_eq(er_error_code_name(-999), "internal");
    cr_assert_eq(er_error_http_status(-999), 500);
    cr_assert_eq(er_error_http_status(5), 500);
}

Test(err, set_fills_and_returns_the_code)
{
    er_error e;
    er_error_clear(&e);
    cr_assert_eq(er_error_set(&e, ER_EINVAL, "priority", "must be %d..%d", 0, 1000), ER_EINVAL);
    cr_assert_eq(e.code, ER_EINVAL);
    cr_assert_str_eq(e.field, "priority");
    cr_assert_str_eq(e.message, "must be 0..1000");
}

Test(err, set_with_null_error_only_returns)
{
    cr_assert_eq(er_error_set(NULL, ER_ESTALE, "lease_token", "stale"), ER_ESTALE);
}

Test(err, set_with_null_field_gives_empty_field)
{
    er_error e;
    er_error_set(&e, ER_EUNAVAIL, NULL, "disk");
    cr_assert_str_eq(e.field, "");
}

Test(err, long_field_and_message_are_truncated)
{
    er_error e;
    char longs[600];
    memset(longs, 'x', sizeof longs - 1);
    longs[sizeof longs - 1] = '\0';
    er_error_set(&e, ER_EINVAL, longs, "%s", longs);
    cr_assert_eq(strlen(e.field), sizeof e.field - 1);
    cr_assert_eq(strlen(e.message), sizeof e.message - 1);
}

Test(err, clear_zeroes_and_accepts_null)
{
    er_error e;
    er_error_set(&e, ER_EINVAL, "f", "m");
    er_error_clear(&e);
    cr_assert_eq(e.code, 0);
    cr_assert_str_eq(e.field, "");
    cr_assert_str_eq(e.message, "");
    er_error_clear(NULL);
}
