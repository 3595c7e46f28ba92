/* SPDX-License-Identifier: MIT
 *
 * A property test of the queue settings' integers: each one, swept over its
 * bounds and the int64 edges, is accepted exactly inside its range, refused
 * naming it (settings unchanged) outside, and every accepted value survives
 * the stored form and the arithmetic it feeds (retention cutoffs, rate
 * limits, backoff, lease and throttle deadlines) without overflow. Built
 * with UndefinedBehaviorSanitizer, an overflow fails the run.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fetch.h"
#include "core/job.h"
#include "core/queue.h"
#include "server/http/queue_json.h"
#include "store/settings_codec.h"

/* The body, with %s where the swept integer goes, the field an error names,
 * and the range it must keep. */
static const struct {
    const char *body, *field;
    int64_t lo, hi;
} ints[] = {
    {"{\"concurrency\":%s}", "concurrency", 0, INT_MAX},
    {"{\"rate_limit\":{\"max\":%s,\"per_ms\":1000}}", "rate_limit.max", 1, ER_RATE_MAX_MAX},
    {"{\"rate_limit\":{\"max\":1,\"per_ms\":%s}}", "rate_limit.per_ms", 1, ER_DELAY_MAX_MS},
    {"{\"rate_limit\":{\"max\":1000000000,\"per_ms\":1,\"burst\":%s}}", "rate_limit.burst", 1,
     ER_RATE_MAX_MAX},
    {"{\"lease_ms\":%s}", "lease_ms", ER_LEASE_MIN_MS, ER_LEASE_MAX_MS},
    {"{\"max_stalled\":%s}", "max_stalled", 0, ER_MAX_STALLED_MAX},
    {"{\"max_started\":%s}", "max_started", 1, ER_MAX_STARTED_MAX},
    {"{\"throttle_max_ms\":%s}", "throttle_max_ms", ER_THROTTLE_MAX_MIN_MS,
     ER_THROTTLE_MAX_MAX_MS},
    {"{\"defaults\":{\"max_attempts\":%s}}", "defaults.max_attempts", 1, ER_MAX_ATTEMPTS_MAX},
    {"{\"defaults\":{\"timeout_ms\":%s}}", "defaults.timeout_ms", 1, ER_TIMEOUT_MAX_MS},
    {"{\"defaults\":{\"priority\":%s}}", "defaults.priority", 0, ER_PRIORITY_MAX},
    {"{\"defaults\":{\"backoff\":{\"delay_ms\":%s,\"max_delay_ms\":31622400000}}}",
     "defaults.backoff.delay_ms", 0, ER_DELAY_MAX_MS},
    {"{\"defaults\":{\"backoff\":{\"delay_ms\":0,\"max_delay_ms\":%s}}}",
     "defaults.backoff.max_delay_ms", 0, ER_DELAY_MAX_MS},
    {"{\"retention\":{\"completed\":{\"age_s\":%s}}}", "retention.completed.age_s", 0,
     ER_RETENTION_AGE_MAX_S},
    {"{\"retention\":{\"completed\":{\"count\":%s}}}", "retention.completed.count", 0,
     ER_RETENTION_COUNT_MAX},
    {"{\"retention\":{\"dead\":{\"age_s\":%s}}}", "retention.dead.age_s", 1,
     ER_RETENTION_AGE_MAX_S},
    {"{\"dispatch\":{\"url\":\"http://127.0.0.1:9/x\",\"timeout_ms\":%s}}",
     "dispatch.timeout_ms", ER_DISPATCH_TIMEOUT_MIN_MS, ER_DISPATCH_TIMEOUT_MAX_MS},
    {"{\"fairness\":{\"default_weight\":%s}}", "fairness.default_weight", 1, ER_FAIR_WEIGHT_MAX},
    {"{\"fairness\":{\"weights\":{\"g\":%s}}}", "fairness.weights.g", 1, ER_FAIR_WEIGHT_MAX},
    {"{\"group_limits\":{\"concurrency\":%s}}", "group_limits.concurrency", 1,
     ER_GROUP_CONCURRENCY_MAX},
    {"{\"group_limits\":{\"rate_limit\":{\"max\":%s,\"per_ms\":1000}}}",
     "group_limits.rate_limit.max", 1, ER_RATE_MAX_MAX},
    {"{\"group_limits\":{\"rate_limit\":{\"max\":1,\"per_ms\":%s}}}",
     "group_limits.rate_limit.per_ms", 1, ER_DELAY_MAX_MS},
    {"{\"aging\":{\"per_s\":1,\"max_boost\":%s}}", "aging.max_boost", 1, ER_PRIORITY_MAX},
};

static er_error err;

/* Applies the body to the defaults; 0 or the error code. */
static int apply(const char *text, er_queue_settings *s)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_DECODE_ANY, &je);
    cr_assert_not_null(o, "bad test JSON %s: %s", text, je.text);
    er_queue_patch p;
    er_http_queue_patch(o, &p);
    er_queue_change c;
    er_error_clear(&err);
    int rc = er_queue_patch_check(&p, &c, &err);
    if (rc == 0)
        rc = er_queue_settings_change(s, &c, &err);
    json_decref(o);
    return rc;
}

/* Now, in ms, at two ends: today and 2200-01-01 (the clock in ns holds to 2262). */
static const int64_t nows[] = {1796083200000LL, 7258118400000LL};

/* The arithmetic each setting feeds, at both ends of time and at the
 * edges of the state it combines with. */
static void exercise(const er_queue_settings *s)
{
    for (size_t i = 0; i < sizeof nows / sizeof *nows; i++) {
        int64_t now = nows[i];
        const er_retention *r = &s->retention;
        cr_assert_leq(er_retention_cutoff(now, r->completed_age_s), now);
        cr_assert_leq(er_retention_cutoff(now, r->dead_age_s), now);
        int64_t tats[] = {0, now * ER_NS_PER_MS, now * ER_NS_PER_MS + ER_DELAY_MAX_MS * ER_NS_PER_MS};
        for (size_t k = 0; k < sizeof tats / sizeof *tats; k++) {
            int64_t lims[][3] = {{s->rate_max, s->rate_per_ms, s->rate_burst},
                                 {s->group_limits.rate.max, s->group_limits.rate.per_ms,
                                  s->group_limits.rate.burst}};
            for (size_t l = 0; l < 2; l++) {
                int64_t max = lims[l][0], per = lims[l][1], burst = lims[l][2];
                if (max <= 0)
                    continue;
                int64_t n = er_rate_allowed(max, per, burst, tats[k], now, ER_FETCH_MAX);
                cr_assert(n >= 0 && n <= ER_FETCH_MAX);
                int64_t tat = er_rate_taken(max, per, tats[k], now, n);
                cr_assert_geq(tat, tats[k]);
                cr_assert_geq(er_rate_next_ms(max, per, burst, tat, now), now);
            }
        }
        cr_assert_gt(now + s->lease_ms + s->throttle_max_ms, now);
        if (s->defaults.has_backoff)
            for (int a = 1; a <= ER_MAX_ATTEMPTS_MAX; a += 333) {
                int64_t d = er_backoff_delay(&s->defaults.backoff, a, NULL);
                cr_assert(d >= 0 && d <= ER_DELAY_MAX_MS);
            }
    }
}

Test(queue_bounds, every_integer_setting_keeps_its_range_at_every_edge)
{
    int checked = 0;
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        int64_t lo = ints[i].lo, hi = ints[i].hi;
        int64_t vs[] = {INT64_MIN, INT64_MIN + 1, -1, 0, 1, lo, hi, INT64_MAX - 1, INT64_MAX,
                        lo > INT64_MIN ? lo - 1 : lo, lo < INT64_MAX ? lo + 1 : lo,
                        hi > INT64_MIN ? hi - 1 : hi, hi < INT64_MAX ? hi + 1 : hi,
                        hi < INT64_MAX / 1000 ? hi * 1000 : INT64_MAX};
        for (size_t k = 0; k < sizeof vs / sizeof *vs; k++) {
            char num[32], body[256];
            snprintf(num, sizeof num, "%" PRId64, vs[k]);
            const char *at = strstr(ints[i].body, "%s");
            snprintf(body, sizeof body, "%.*s%s%s", (int)(at - ints[i].body), ints[i].body, num,
                     at + 2);
            er_queue_settings s, before;
            er_queue_settings_default(&s);
            before = s;
            int rc = apply(body, &s);
            bool inside = vs[k] >= lo && vs[k] <= hi;
            if (!inside) {
                cr_assert_eq(rc, ER_EINVAL, "%s should be refused", body);
                cr_assert_str_eq(err.field, ints[i].field, "%s: field", body);
                cr_assert_eq(memcmp(&before, &s, sizeof s), 0, "%s changed the settings", body);
                checked++;
                continue;
            }
            cr_assert_eq(rc, 0, "%s should be accepted: %s", body, err.message);
            char *text = er_settings_encode(&s);
            cr_assert_not_null(text);
            er_queue_settings back;
            cr_assert_eq(er_settings_decode(text, &back, &err), 0, "%s: %s", text, err.message);
            cr_assert_eq(memcmp(&back, &s, sizeof s), 0, "%s does not round-trip", text);
            free(text);
            exercise(&s);
            checked++;
        }
    }
    cr_assert_eq(checked, (int)(sizeof ints / sizeof *ints) * 14);
}

/* The value an outside review sent: it deleted every finished job within
 * 1.5 s, through a signed overflow in the retention cutoff. */
Test(queue_bounds, the_overflowing_retention_age_is_refused)
{
    er_queue_settings s;
    er_queue_settings_default(&s);
    cr_assert_eq(apply("{\"retention\":{\"completed\":{\"age_s\":18446744073709551}}}", &s),
                 ER_EINVAL);
    cr_assert_str_eq(err.field, "retention.completed.age_s");
    cr_assert_str_eq(err.message, "retention.completed.age_s must be an integer 0..3155760000");
}

/* Earlier releases stored any age; such a row still loads, at the bound,
 * and its cutoff lies 100 years back, not in the future. */
Test(queue_bounds, a_stored_age_past_the_bound_reads_as_the_bound)
{
    er_queue_settings s;
    cr_assert_eq(er_settings_decode("{\"retention\":{\"completed\":{\"age_s\":18446744073709551,"
                                    "\"count\":9223372036854775807},"
                                    "\"dead\":{\"age_s\":9223372036854775807}}}",
                                    &s, &err),
                 0, "%s", err.message);
    cr_assert_eq(s.retention.completed_age_s, ER_RETENTION_AGE_MAX_S);
    cr_assert_eq(s.retention.completed_count, ER_RETENTION_COUNT_MAX);
    cr_assert_eq(s.retention.dead_age_s, ER_RETENTION_AGE_MAX_S);
    cr_assert_eq(er_retention_cutoff(nows[0], s.retention.completed_age_s),
                 nows[0] - ER_RETENTION_AGE_MAX_S * 1000);
    cr_assert_eq(er_retention_cutoff(INT64_MIN + 5, INT64_MAX), INT64_MIN);
    cr_assert_eq(er_retention_cutoff(nows[0], -7), nows[0]);
}
