/* SPDX-License-Identifier: MIT
 *
 * Unit tests for worker failures: the "error" object (read as the HTTP API
 * reads it, judged by er_failure_validate), the stored
 * last_error text, er_fail_decide for every error class and er_stall_decide.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "core/queue.h"
#include "store/error_codec.h"
#include "server/http/work_json.h"

#define T0 1796004000000LL /* 2026-11-30T02:00:00.000Z */

static er_error err;
static er_failure f;

static void setup(void)
{
    er_error_clear(&err);
    memset(&f, 0, sizeof f);
}

static void teardown(void)
{
    er_failure_fini(&f);
}

TestSuite(failure, .init = setup, .fini = teardown);

/* The HTTP frontend's reading of an "error" object, then core's check. */
static int from_json(const json_t *o, er_failure *out, er_error *e)
{
    er_failure_spec sp;
    char *bt = NULL;
    int rc = er_http_failure_spec(o, &sp, &bt, e);
    if (rc == 0)
        rc = er_failure_validate(&sp, out, e);
    else
        memset(out, 0, sizeof *out);
    free(bt);
    return rc;
}

static int parse(const char *text)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_DECODE_ANY, &je);
    cr_assert_not_null(o, "bad test JSON %s: %s", text, je.text);
    er_failure_fini(&f);
    int rc = from_json(o, &f, &err);
    json_decref(o);
    return rc;
}

static void refused(const char *text, int code, const char *field)
{
    cr_assert_eq(parse(text), code, "%s", text);
    cr_assert_eq(err.code, code);
    cr_assert_str_eq(err.field, field, "%s", text);
    cr_assert_null(f.message);
    cr_assert_null(f.backtrace);
}

/* ---- parsing ---- */

Test(failure, transient_with_message_parses)
{
    cr_assert_eq(parse("{\"class\":\"transient\",\"message\":\"timeout talking to smtp\"}"), 0);
    cr_assert_eq(f.cls, ER_ERR_TRANSIENT);
    cr_assert_str_eq(f.message, "timeout talking to smtp");
    cr_assert_null(f.backtrace);
}

Test(failure, permanent_without_message_parses)
{
    cr_assert_eq(parse("{\"class\":\"permanent\"}"), 0);
    cr_assert_eq(f.cls, ER_ERR_PERMANENT);
    cr_assert_null(f.message);
}

Test(failure, retry_later_needs_delay_ms)
{
    cr_assert_eq(parse("{\"class\":\"retry_later\",\"delay_ms\":1500}"), 0);
    cr_assert_eq(f.cls, ER_ERR_RETRY_LATER);
    cr_assert_eq(f.delay_ms, 1500);
    refused("{\"class\":\"retry_later\"}", ER_EINVAL, "error.delay_ms");
    refused("{\"class\":\"retry_later\",\"delay_ms\":-1}", ER_EINVAL, "error.delay_ms");
    refused("{\"class\":\"retry_later\",\"delay_ms\":\"5\"}", ER_EINVAL, "error.delay_ms");
    refused("{\"class\":\"retry_later\",\"delay_ms\":1.0}", ER_EINVAL, "error.delay_ms");
    refused("{\"class\":\"retry_later\",\"delay_ms\":31622400001}", ER_EINVAL,
            "error.delay_ms");
}

Test(failure, throttled_needs_retry_after_ms)
{
    cr_assert_eq(parse("{\"class\":\"throttled\",\"retry_after_ms\":30000}"), 0);
    cr_assert_eq(f.cls, ER_ERR_THROTTLED);
    cr_assert_eq(f.retry_after_ms, 30000);
    refused("{\"class\":\"throttled\"}", ER_EINVAL, "error.retry_after_ms");
    refused("{\"class\":\"throttled\",\"delay_ms\":5}", ER_EINVAL, "error.retry_after_ms");
    refused("{\"class\":\"throttled\",\"retry_after_ms\":true}", ER_EINVAL,
            "error.retry_after_ms");
}

Test(failure, delay_of_another_class_is_checked_but_ignored)
{
    cr_assert_eq(parse("{\"class\":\"transient\",\"delay_ms\":5,\"retry_after_ms\":6}"), 0);
    cr_assert_eq(f.delay_ms, 0);
    cr_assert_eq(f.retry_after_ms, 0);
    refused("{\"class\":\"transient\",\"delay_ms\":-5}", ER_EINVAL, "error.delay_ms");
}

Test(failure, unknown_class_is_refused)
{
    refused("{\"class\":\"fatal\"}", ER_EINVAL, "error.class");
    refused("{\"class\":1}", ER_EINVAL, "error.class");
    refused("{\"message\":\"no class\"}", ER_EINVAL, "error.class");
    refused("{\"class\":\"Transient\"}", ER_EINVAL, "error.class");
}

Test(failure, unknown_field_is_named)
{
    refused("{\"class\":\"transient\",\"stack\":\"x\"}", ER_EINVAL, "error.stack");
}

Test(failure, non_object_is_refused)
{
    refused("\"transient\"", ER_EINVAL, "error");
    refused("null", ER_EINVAL, "error");
}

Test(failure, message_must_be_a_string)
{
    refused("{\"class\":\"transient\",\"message\":42}", ER_EINVAL, "error.message");
}

Test(failure, long_message_is_cut_to_4096_bytes)
{
    size_t n = 10000;
    char *msg = malloc(n + 1);
    memset(msg, 'm', n);
    msg[n] = '\0';
    json_t *o = json_pack("{s:s, s:s}", "class", "transient", "message", msg);
    cr_assert_eq(from_json(o, &f, &err), 0);
    cr_assert_eq(strlen(f.message), 4096);
    cr_assert_eq(strncmp(f.message, msg, 4096), 0);
    json_decref(o);
    free(msg);
}

Test(failure, cut_never_splits_a_utf8_character)
{
    /* 4095 ASCII bytes then "é" (2 bytes): the cut at 4096 would split it. */
    char *msg = malloc(4095 + 3);
    memset(msg, 'a', 4095);
    memcpy(msg + 4095, "\xc3\xa9", 3);
    json_t *o = json_pack("{s:s, s:s}", "class", "transient", "message", msg);
    cr_assert_eq(from_json(o, &f, &err), 0);
    cr_assert_eq(strlen(f.message), 4095);
    json_decref(o);
    free(msg);
}

Test(failure, backtrace_is_any_json)
{
    cr_assert_eq(parse("{\"class\":\"transient\",\"backtrace\":[\"a.c:1\",\"b.c:2\"]}"), 0);
    cr_assert_str_eq(f.backtrace, "[\"a.c:1\",\"b.c:2\"]");
    cr_assert_eq(parse("{\"class\":\"transient\",\"backtrace\":\"line1\\nline2\"}"), 0);
    cr_assert_str_eq(f.backtrace, "\"line1\\nline2\"");
}

Test(failure, backtrace_over_16k_is_too_big)
{
    char *big = malloc(16 * 1024 + 1);
    memset(big, 'b', 16 * 1024 - 2); /* with its quotes: exactly 16 KiB */
    big[16 * 1024 - 2] = '\0';
    json_t *o = json_pack("{s:s, s:s}", "class", "transient", "backtrace", big);
    cr_assert_eq(from_json(o, &f, &err), 0);
    er_failure_fini(&f);
    json_decref(o);
    big[16 * 1024 - 2] = 'b';
    big[16 * 1024 - 1] = '\0';
    o = json_pack("{s:s, s:s}", "class", "transient", "backtrace", big);
    cr_assert_eq(from_json(o, &f, &err), ER_ETOOBIG);
    cr_assert_str_eq(err.field, "error.backtrace");
    cr_assert_null(f.backtrace);
    json_decref(o);
    free(big);
}

Test(failure, fini_is_null_safe)
{
    er_failure_fini(NULL);
    cr_assert_eq(parse("{\"class\":\"transient\",\"message\":\"x\"}"), 0);
    er_failure_fini(&f);
    cr_assert_null(f.message);
}

/* ---- last_error text ---- */

static json_t *last_error(int attempt)
{
    char *t = er_last_error_encode(&f, attempt, NULL, T0);
    cr_assert_not_null(t);
    json_t *o = json_loads(t, 0, NULL);
    cr_assert_not_null(o, "not JSON: %s", t);
    free(t);
    return o;
}

Test(failure, last_error_records_class_message_attempt_and_time)
{
    cr_assert_eq(parse("{\"class\":\"transient\",\"message\":\"boom\"}"), 0);
    json_t *o = last_error(3);
    cr_assert_str_eq(json_string_value(json_object_get(o, "class")), "transient");
    cr_assert_str_eq(json_string_value(json_object_get(o, "message")), "boom");
    cr_assert_eq(json_integer_value(json_object_get(o, "attempt")), 3);
    cr_assert_str_eq(json_string_value(json_object_get(o, "at")), "2026-11-30T02:00:00.000Z");
    cr_assert_null(json_object_get(o, "delay_ms"));
    cr_assert_null(json_object_get(o, "retry_after_ms"));
    json_decref(o);
}

Test(failure, last_error_without_message_has_null)
{
    cr_assert_eq(parse("{\"class\":\"permanent\"}"), 0);
    json_t *o = last_error(1);
    cr_assert(json_is_null(json_object_get(o, "message")));
    json_decref(o);
}

Test(failure, last_error_carries_the_class_delay)
{
    cr_assert_eq(parse("{\"class\":\"retry_later\",\"delay_ms\":700}"), 0);
    json_t *o = last_error(1);
    cr_assert_eq(json_integer_value(json_object_get(o, "delay_ms")), 700);
    json_decref(o);
    cr_assert_eq(parse("{\"class\":\"throttled\",\"retry_after_ms\":800}"), 0);
    o = last_error(1);
    cr_assert_eq(json_integer_value(json_object_get(o, "retry_after_ms")), 800);
    cr_assert_str_eq(json_string_value(json_object_get(o, "class")), "throttled");
    json_decref(o);
}

Test(failure, last_error_keeps_the_backtrace_as_json)
{
    cr_assert_eq(parse("{\"class\":\"transient\",\"backtrace\":{\"frames\":[1]}}"), 0);
    json_t *o = last_error(1);
    json_t *bt = json_object_get(o, "backtrace");
    cr_assert(json_is_object(bt));
    json_decref(o);
}

/* ---- er_fail_decide ---- */

#define HOUR ER_THROTTLE_MAX_DEFAULT_MS

static er_job active_job(int attempts, int max_attempts, int started)
{
    er_job j;
    er_job_init(&j);
    j.state = ER_STATE_ACTIVE;
    j.attempts = attempts;
    j.max_attempts = max_attempts;
    j.started = started;
    j.backoff.type = ER_BACKOFF_EXPONENTIAL;
    j.backoff.delay_ms = 1000;
    j.backoff.max_delay_ms = 60000;
    j.backoff.jitter = 0;
    return j;
}

static er_failure fail_of(er_error_class c, int64_t delay, int64_t after)
{
    er_failure x = {.cls = c, .delay_ms = delay, .retry_after_ms = after};
    return x;
}

Test(failure, transient_retries_after_backoff)
{
    er_job j = active_job(3, 8, 3);
    er_failure x = fail_of(ER_ERR_TRANSIENT, 0, 0);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_SCHEDULED);
    cr_assert_eq(o.run_at, T0 + 4000, "attempt 3: 1000 * 2^2");
    cr_assert_eq(o.attempts, 3, "the failed attempt stays counted");
    cr_assert_eq(o.queue_pause_until, 0);
}

Test(failure, transient_backoff_uses_the_random_source)
{
    er_job j = active_job(2, 8, 2);
    j.backoff.jitter = 0.5;
    er_failure x = fail_of(ER_ERR_TRANSIENT, 0, 0);
    er_rand r1, r2;
    er_rand_init_seeded(&r1, 77);
    er_rand_init_seeded(&r2, 77);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r1, &o);
    cr_assert_eq(o.run_at, T0 + er_backoff_delay(&j.backoff, 2, &r2));
    cr_assert(o.run_at >= T0 + 1000 && o.run_at <= T0 + 2000);
}

Test(failure, transient_on_the_last_attempt_is_dead)
{
    er_job j = active_job(8, 8, 8);
    er_failure x = fail_of(ER_ERR_TRANSIENT, 0, 0);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_DEAD);
    cr_assert_eq(o.attempts, 8);
    j.attempts = 7;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_SCHEDULED);
}

Test(failure, single_attempt_job_dies_on_first_transient_failure)
{
    er_job j = active_job(1, 1, 1);
    er_failure x = fail_of(ER_ERR_TRANSIENT, 0, 0);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_DEAD);
}

Test(failure, permanent_is_dead_at_once)
{
    er_job j = active_job(1, 8, 1);
    er_failure x = fail_of(ER_ERR_PERMANENT, 0, 0);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_DEAD);
    cr_assert_eq(o.attempts, 1);
    cr_assert_eq(o.queue_pause_until, 0);
}

Test(failure, retry_later_is_not_counted)
{
    er_job j = active_job(8, 8, 20);
    er_failure x = fail_of(ER_ERR_RETRY_LATER, 5000, 0);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_SCHEDULED, "even on the last attempt");
    cr_assert_eq(o.run_at, T0 + 5000);
    cr_assert_eq(o.attempts, 7);
    cr_assert_eq(o.queue_pause_until, 0);
}

Test(failure, retry_later_is_bounded_by_max_started)
{
    er_job j = active_job(1, 8, 100);
    er_failure x = fail_of(ER_ERR_RETRY_LATER, 5000, 0);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_DEAD);
    j.started = 99;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_SCHEDULED);
}

Test(failure, throttled_pauses_the_queue)
{
    er_job j = active_job(2, 8, 2);
    er_failure x = fail_of(ER_ERR_THROTTLED, 0, 30000);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_SCHEDULED);
    cr_assert_eq(o.run_at, T0 + 30000);
    cr_assert_eq(o.attempts, 1);
    cr_assert_eq(o.queue_pause_until, T0 + 30000);
}

Test(failure, throttled_past_max_started_is_dead_and_still_pauses)
{
    er_job j = active_job(2, 8, 5);
    er_failure x = fail_of(ER_ERR_THROTTLED, 0, 1000);
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 5, HOUR, T0, &r, &o);
    cr_assert_eq(o.state, ER_STATE_DEAD);
    cr_assert_eq(o.queue_pause_until, T0 + 1000);
}

/* ---- er_stall_decide ---- */

Test(failure, stall_below_max_goes_back_to_waiting)
{
    er_job j = active_job(1, 8, 1);
    j.stalled = 0;
    cr_assert_eq(er_stall_decide(&j, 3), ER_STATE_WAITING);
    j.stalled = 2;
    cr_assert_eq(er_stall_decide(&j, 3), ER_STATE_WAITING, "the third stall is allowed");
}

Test(failure, stall_past_max_is_dead)
{
    er_job j = active_job(1, 8, 1);
    j.stalled = 3;
    cr_assert_eq(er_stall_decide(&j, 3), ER_STATE_DEAD);
    j.stalled = 0;
    cr_assert_eq(er_stall_decide(&j, 0), ER_STATE_DEAD, "max_stalled 0: first stall kills");
}

/* er_fail_decide with max_started 100 and a fixed random source. */
static void decide(const er_job *j, const er_failure *x, int64_t cap, int64_t now,
                   er_fail_outcome *o)
{
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_fail_decide(j, x, 100, cap, now, &r, o);
}

Test(failure, throttled_is_capped_at_the_queue_throttle_max)
{
    er_job j = active_job(2, 8, 2);
    er_failure x = fail_of(ER_ERR_THROTTLED, 0, ER_DELAY_MAX_MS);
    er_fail_outcome o;
    decide(&j, &x, HOUR, T0, &o);
    cr_assert_eq(o.state, ER_STATE_SCHEDULED);
    cr_assert_eq(o.queue_pause_until, T0 + HOUR, "the queue pauses 1 h, not a year");
    cr_assert_eq(o.run_at, T0 + HOUR, "and so does the job");
    decide(&j, &x, 5000, T0, &o);
    cr_assert_eq(o.queue_pause_until, T0 + 5000);
    cr_assert_eq(o.run_at, T0 + 5000);
    x.retry_after_ms = 4999; /* under the cap: as asked */
    decide(&j, &x, 5000, T0, &o);
    cr_assert_eq(o.queue_pause_until, T0 + 4999);
    decide(&j, &x, 0, T0, &o);
    cr_assert_eq(o.queue_pause_until, T0, "a cap of 0 is no pause");
}

Test(failure, retry_later_is_not_capped_by_throttle_max)
{
    er_job j = active_job(2, 8, 2);
    er_failure x = fail_of(ER_ERR_RETRY_LATER, ER_DELAY_MAX_MS, 0);
    er_fail_outcome o;
    decide(&j, &x, 1000, T0, &o);
    cr_assert_eq(o.run_at, T0 + ER_DELAY_MAX_MS);
    cr_assert_eq(o.queue_pause_until, 0);
}

Test(failure, delays_saturate_instead_of_overflowing)
{
    er_job j = active_job(2, 8, 2);
    er_failure x = fail_of(ER_ERR_THROTTLED, 0, INT64_MAX);
    er_fail_outcome o;
    decide(&j, &x, INT64_MAX, INT64_MAX - 10, &o);
    cr_assert_eq(o.queue_pause_until, INT64_MAX);
    cr_assert_eq(o.run_at, INT64_MAX);
    decide(&j, &x, HOUR, INT64_MAX - 10, &o);
    cr_assert_eq(o.queue_pause_until, INT64_MAX);
    x = fail_of(ER_ERR_RETRY_LATER, INT64_MAX, 0);
    decide(&j, &x, HOUR, 1, &o);
    cr_assert_eq(o.run_at, INT64_MAX);
}

/* Faktory's errtype (filled by that frontend only): kept, cut, type-checked. */
Test(failure, errtype_is_kept_cut_and_type_checked)
{
    er_failure_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.kind = ER_SPEC_SET;
    sp.cls = (er_spec_str){ER_SPEC_SET, "transient", 9};
    sp.errtype = (er_spec_str){ER_SPEC_SET, "RuntimeError", 12};
    cr_assert_eq(er_failure_validate(&sp, &f, &err), 0);
    cr_assert_str_eq(f.errtype, "RuntimeError");
    er_failure_fini(&f);
    char longer[ER_FAILURE_ERRTYPE_MAX + 50];
    memset(longer, 'E', sizeof longer);
    sp.errtype = (er_spec_str){ER_SPEC_SET, longer, sizeof longer};
    cr_assert_eq(er_failure_validate(&sp, &f, &err), 0);
    cr_assert_eq(strlen(f.errtype), ER_FAILURE_ERRTYPE_MAX);
    er_failure_fini(&f);
    sp.errtype.kind = ER_SPEC_BAD_TYPE;
    cr_assert_eq(er_failure_validate(&sp, &f, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "error.errtype");
    cr_assert_null(f.errtype);
}

/* A Faktory job pushed with retry 0 goes dead, with the reason Faktory's
 * discard becomes here; without discard a dead job has no reason. */
Test(failure, a_discarded_job_goes_dead_with_its_reason)
{
    er_job j = active_job(1, 1, 1);
    er_failure x = fail_of(ER_ERR_TRANSIENT, 0, 0);
    er_fail_outcome o;
    er_fail_decide(&j, &x, 100, HOUR, T0, NULL, &o);
    cr_assert_eq(o.state, ER_STATE_DEAD);
    cr_assert_null(o.reason);
    j.discard = true;
    er_fail_decide(&j, &x, 100, HOUR, T0, NULL, &o);
    cr_assert_eq(o.state, ER_STATE_DEAD);
    cr_assert_str_eq(o.reason, "discarded (retry 0)");
    char *t = er_last_error_encode(&x, 1, o.reason, T0);
    cr_assert(strstr(t, "\"reason\":\"discarded (retry 0)\""), "%s", t);
    free(t);
    er_job k;
    er_job_init(&k);
    er_job_set_flags_apply(&k, er_job_set_flags(&j)); /* kept in set_flags */
    cr_assert(k.discard);
    er_job_fini(&k);
}
