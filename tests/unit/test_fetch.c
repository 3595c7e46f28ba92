/* SPDX-License-Identifier: MIT
 *
 * Unit tests for fetch requests (er_fetch_validate) and the fetch policy
 * (er_fetch_cap, er_fetch_lease_ms), and for outcome requests
 * (er_ack_validate). The stores' side of the policy is pinned by
 * tests/store/fetch_policy_cases.h.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "core/ack.h"
#include "core/fetch.h"
#include "core/queue.h"

#define T0 1796004000000LL

static er_spec_str str(const char *s)
{
    return (er_spec_str){ER_SPEC_SET, s, strlen(s)};
}

static er_spec_int num(int64_t v)
{
    return (er_spec_int){ER_SPEC_SET, v};
}

static int refused(const er_fetch_spec *sp, const char *field)
{
    er_fetch_args a;
    er_error err = {0};
    int rc = er_fetch_validate(sp, &a, &err);
    cr_assert_eq(rc, ER_EINVAL, "accepted; want %s refused", field);
    cr_assert_str_eq(err.field, field);
    cr_assert_null(a.queues);
    cr_assert_null(a.worker_id);
    return rc;
}

Test(fetch, a_valid_request_is_copied_with_its_defaults)
{
    er_spec_str qs[2] = {str("a"), str("b.c")};
    er_fetch_spec sp = {.queues_kind = ER_SPEC_SET, .queues = qs, .nqueues = 2,
                        .worker_id = str("w-1")};
    er_fetch_args a;
    er_error err = {0};
    cr_assert_eq(er_fetch_validate(&sp, &a, &err), 0, "%s", err.message);
    cr_assert_eq(a.nqueues, 2);
    cr_assert_str_eq(a.queues[1], "b.c");
    cr_assert_str_eq(a.worker_id, "w-1");
    cr_assert_eq(a.max, 1);
    cr_assert_eq(a.wait_ms, 0);
    cr_assert_eq(a.lease_ms, 0);
    er_fetch_args_fini(&a);
}

Test(fetch, each_rule_names_its_field)
{
    er_spec_str ok[1] = {str("q")}, bad[1] = {str("a b")}, many[17];
    for (int i = 0; i < 17; i++)
        many[i] = str("q");
    er_fetch_spec base = {.queues_kind = ER_SPEC_SET, .queues = ok, .nqueues = 1,
                          .worker_id = str("w")};
    er_fetch_spec sp = base;
    sp.queues_kind = ER_SPEC_ABSENT;
    refused(&sp, "queues");
    sp = base;
    sp.queues_kind = ER_SPEC_BAD_TYPE;
    refused(&sp, "queues");
    sp = base;
    sp.nqueues = 0;
    refused(&sp, "queues");
    sp = base;
    sp.queues = many;
    sp.nqueues = 17;
    refused(&sp, "queues");
    sp = base;
    sp.queues = bad;
    refused(&sp, "queues[0]");
    sp = base;
    sp.worker_id = (er_spec_str){.kind = ER_SPEC_ABSENT};
    refused(&sp, "worker_id");
    sp = base;
    sp.max = num(0);
    refused(&sp, "max");
    sp = base;
    sp.max = num(ER_FETCH_MAX + 1);
    refused(&sp, "max");
    sp = base;
    sp.wait_ms = num(ER_WAIT_MAX_MS + 1);
    refused(&sp, "wait_ms");
    sp = base;
    sp.lease_ms = num(ER_LEASE_MIN_MS - 1);
    refused(&sp, "lease_ms");
    sp = base;
    sp.lease_ms = (er_spec_int){.kind = ER_SPEC_BAD_TYPE};
    refused(&sp, "lease_ms");
}

Test(fetch, the_cap_skips_paused_throttled_and_full_queues)
{
    er_queue_state q = {0};
    cr_assert_eq(er_fetch_cap(&q, T0), INT64_MAX);
    q.paused = true;
    cr_assert_eq(er_fetch_cap(&q, T0), 0);
    q.paused = false;
    q.throttled_until = T0 + 1;
    cr_assert_eq(er_fetch_cap(&q, T0), 0);
    cr_assert_eq(er_fetch_cap(&q, T0 + 1), INT64_MAX, "the throttle ran out");
    q.throttled_until = 0;
    q.concurrency = 5;
    q.active = 3;
    cr_assert_eq(er_fetch_cap(&q, T0), 2);
    q.active = 5;
    cr_assert_eq(er_fetch_cap(&q, T0), 0);
    q.active = 9; /* lowered below what is running */
    cr_assert_eq(er_fetch_cap(&q, T0), 0);
}

/* Leases granted by a GCRA limit when asked every ms for `ms` ms. */
static int64_t grants(int64_t max, int64_t per, int64_t burst, int64_t ms, int64_t *times)
{
    int64_t tat = 0, n = 0;
    for (int64_t t = T0; t < T0 + ms; t++) {
        int64_t k = er_rate_allowed(max, per, burst, tat, t, 1000);
        for (int64_t i = 0; i < k; i++)
            times[n++] = t;
        tat = er_rate_taken(max, per, tat, t, k);
    }
    return n;
}

Test(fetch, a_rate_limit_allows_max_per_window_plus_its_burst)
{
    static int64_t times[20000];
    struct {
        int64_t max, per, burst;
    } cases[] = {{4, 1000, 1}, {3, 1000, 1}, {7, 300, 1}, {4, 1000, 4}, {1000, 1000, 10}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t max = cases[c].max, per = cases[c].per, b = cases[c].burst;
        int64_t n = grants(max, per, b, 10 * per, times);
        /* the long-run rate: max per per_ms, plus the first burst */
        cr_assert_geq(n, 10 * max, "case %zu: %lld", c, (long long)n);
        cr_assert_leq(n, 10 * max + b, "case %zu: %lld", c, (long long)n);
        /* any sliding window of per_ms holds at most max + burst - 1, plus the
         * one at its closing edge */
        for (int64_t i = 0, j = 0; i < n; i++) {
            while (j < n && times[j] < times[i] + per)
                j++;
            cr_assert_leq(j - i, max + b - 1 + 1, "case %zu: %lld in a window", c,
                          (long long)(j - i));
        }
    }
}

Test(fetch, a_rate_limit_says_when_it_allows_again)
{
    int64_t tat = er_rate_taken(4, 1000, 0, T0, 1);
    cr_assert_eq(er_rate_allowed(4, 1000, 1, tat, T0, 10), 0);
    cr_assert_eq(er_rate_next_ms(4, 1000, 1, tat, T0), T0 + 250);
    cr_assert_eq(er_rate_allowed(4, 1000, 1, tat, T0 + 249, 10), 0);
    cr_assert_eq(er_rate_allowed(4, 1000, 1, tat, T0 + 250, 10), 1);
    /* a budget unused for long is not saved up beyond the burst */
    cr_assert_eq(er_rate_allowed(4, 1000, 3, tat, T0 + 3600000, 10), 3);
    /* rounding never makes it faster: 3 per 1000 ms is 333.34 ms apart */
    tat = er_rate_taken(3, 1000, 0, T0, 1);
    cr_assert_eq(er_rate_next_ms(3, 1000, 1, tat, T0), T0 + 334);
    er_queue_state q = {.rate_max = 4, .rate_per_ms = 1000, .rate_burst = 1, .rate_tat = tat};
    cr_assert_eq(er_fetch_cap(&q, T0), 0);
    cr_assert_eq(er_fetch_ready_at(&q, T0), T0 + 334);
    q.concurrency = 1;
    q.active = 0;
    cr_assert_eq(er_fetch_cap(&q, T0 + 400), 1);
}

Test(fetch, the_lease_is_the_requests_then_the_queues_then_the_default)
{
    er_queue_state q = {0};
    cr_assert_eq(er_fetch_lease_ms(&q, 0), ER_DEFAULT_LEASE_MS);
    q.lease_ms = 7000;
    cr_assert_eq(er_fetch_lease_ms(&q, 0), 7000);
    cr_assert_eq(er_fetch_lease_ms(&q, 2000), 2000);
}

Test(ack, an_outcome_needs_an_id_a_token_and_exactly_one_kind)
{
    er_ack a;
    er_error err = {0};
    er_ack_spec sp = {.kind_given = 1, .kind = ER_ACK_COMPLETE, .id = str("j"),
                      .lease_token = str("t"), .result = str("{\"ok\":1}")};
    cr_assert_eq(er_ack_validate(&sp, 64, &a, &err), 0, "%s", err.message);
    cr_assert_str_eq(a.result, "{\"ok\":1}");
    er_ack_fini(&a);
    er_ack_spec bad = sp;
    bad.id = (er_spec_str){0};
    cr_assert_eq(er_ack_validate(&bad, 64, &a, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "id");
    bad = sp;
    bad.lease_token = str("a b");
    cr_assert_eq(er_ack_validate(&bad, 64, &a, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "lease_token");
    bad = sp;
    bad.kind_given = 2;
    cr_assert_eq(er_ack_validate(&bad, 64, &a, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "");
    bad = sp;
    bad.unknown = str("x");
    cr_assert_eq(er_ack_validate(&bad, 64, &a, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "complete.x");
    cr_assert_eq(er_ack_validate(&sp, 3, &a, &err), ER_ETOOBIG);
    cr_assert_str_eq(err.field, "result");
    cr_assert_null(a.id);
}

Test(ack, a_failure_needs_its_class_and_its_delay)
{
    er_ack a;
    er_error err = {0};
    er_ack_spec sp = {.kind_given = 1, .kind = ER_ACK_FAIL, .id = str("j"),
                      .lease_token = str("t")};
    sp.failure = (er_failure_spec){.kind = ER_SPEC_SET, .cls = str("retry_later")};
    cr_assert_eq(er_ack_validate(&sp, 64, &a, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "error.delay_ms");
    sp.failure.delay_ms = num(1500);
    cr_assert_eq(er_ack_validate(&sp, 64, &a, &err), 0, "%s", err.message);
    cr_assert_eq(a.failure.cls, ER_ERR_RETRY_LATER);
    cr_assert_eq(a.failure.delay_ms, 1500);
    er_ack_fini(&a);
    sp.failure.cls = str("nope");
    cr_assert_eq(er_ack_validate(&sp, 64, &a, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "error.class");
    sp.failure = (er_failure_spec){0};
    cr_assert_eq(er_ack_validate(&sp, 64, &a, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "error");
}
