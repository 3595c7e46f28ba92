/* SPDX-License-Identifier: MIT
 *
 * Unit tests for queue settings: defaults, every field of the PUT body (read
 * as the HTTP API reads it, judged by core) and its rule, the field-by-field
 * merge (including job defaults), "validate everything before changing
 * anything", and the stored form (store/settings_codec.h): the exact round
 * trip, and byte for byte the text earlier releases stored.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/job_spec.h"
#include "core/queue.h"
#include "server/http/queue_json.h"
#include "store/settings_codec.h"

static er_error err;
static er_queue_settings s;

static void setup(void)
{
    er_error_clear(&err);
    er_queue_settings_default(&s);
}

TestSuite(queue, .init = setup);

static int merge(const char *text)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_DECODE_ANY, &je);
    cr_assert_not_null(o, "bad test JSON %s: %s", text, je.text);
    er_queue_patch p;
    er_http_queue_patch(o, &p);
    er_queue_change c;
    int rc = er_queue_patch_check(&p, &c, &err);
    if (rc == 0)
        rc = er_queue_settings_change(&s, &c, &err);
    json_decref(o);
    return rc;
}

/* Asserts the body is refused naming `field` and *s did not change. */
static void refused(const char *text, const char *field)
{
    er_queue_settings before = s;
    cr_assert_eq(merge(text), ER_EINVAL, "%s should be refused", text);
    cr_assert_eq(err.code, ER_EINVAL);
    cr_assert_str_eq(err.field, field, "%s: field", text);
    cr_assert_eq(memcmp(&before, &s, sizeof s), 0, "%s changed the settings", text);
}

static char *dump(const er_queue_settings *x)
{
    json_t *o = er_http_settings_json(x);
    cr_assert_not_null(o);
    char *t = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(o);
    return t;
}

Test(queue, default_settings)
{
    cr_assert(!s.paused);
    cr_assert_eq(s.concurrency, 0);
    cr_assert_eq(s.rate_max, 0);
    cr_assert_eq(s.rate_per_ms, 0);
    cr_assert_eq(s.lease_ms, ER_DEFAULT_LEASE_MS);
    cr_assert_eq(s.max_stalled, ER_DEFAULT_MAX_STALLED);
    cr_assert_eq(s.max_started, ER_DEFAULT_MAX_STARTED);
    cr_assert(!s.defaults.has_max_attempts && !s.defaults.has_backoff &&
              !s.defaults.has_timeout && !s.defaults.has_priority);
    cr_assert_eq(s.retention.completed_age_s, 604800);
    cr_assert_eq(s.retention.completed_count, 0);
    cr_assert_eq(s.retention.dead_age_s, 0);
}

Test(queue, default_settings_as_json)
{
    char *t = dump(&s);
    cr_assert_str_eq(t, "{\"aging\":null,\"concurrency\":0,\"defaults\":{},\"dispatch\":null,"
                        "\"fairness\":null,\"group_limits\":null,\"lease_ms\":60000,"
                        "\"max_stalled\":3,\"max_started\":100,\"paused\":false,"
                        "\"rate_limit\":null,\"retention\":{\"completed\":{\"age_s\":604800,"
                        "\"count\":0},\"dead\":\"keep\"},\"throttle_max_ms\":3600000}");
    free(t);
}

Test(queue, empty_body_changes_nothing)
{
    er_queue_settings before = s;
    cr_assert_eq(merge("{}"), 0);
    cr_assert_eq(memcmp(&before, &s, sizeof s), 0);
}

Test(queue, non_object_body_is_refused)
{
    refused("[]", "settings");
    refused("null", "settings");
}

Test(queue, unknown_field_is_refused)
{
    refused("{\"pasued\":true}", "pasued");
    refused("{\"rate_limit\":{\"max\":1,\"per_ms\":1,\"bursts\":3}}", "rate_limit.bursts");
    refused("{\"defaults\":{\"retries\":3}}", "defaults.retries");
    refused("{\"defaults\":{\"backoff\":{\"factor\":2}}}", "defaults.backoff.factor");
    refused("{\"retention\":{\"failed\":{}}}", "retention.failed");
    refused("{\"retention\":{\"completed\":{\"days\":1}}}", "retention.completed.days");
    refused("{\"retention\":{\"dead\":{\"count\":1}}}", "retention.dead.count");
}

Test(queue, paused_must_be_a_boolean)
{
    cr_assert_eq(merge("{\"paused\":true}"), 0);
    cr_assert(s.paused);
    cr_assert_eq(merge("{\"paused\":false}"), 0);
    cr_assert(!s.paused);
    refused("{\"paused\":1}", "paused");
    refused("{\"paused\":\"true\"}", "paused");
}

Test(queue, concurrency_is_a_non_negative_integer)
{
    cr_assert_eq(merge("{\"concurrency\":16}"), 0);
    cr_assert_eq(s.concurrency, 16);
    cr_assert_eq(merge("{\"concurrency\":0}"), 0);
    cr_assert_eq(s.concurrency, 0);
    refused("{\"concurrency\":-1}", "concurrency");
    refused("{\"concurrency\":2.5}", "concurrency");
    refused("{\"concurrency\":true}", "concurrency");
    refused("{\"concurrency\":3000000000}", "concurrency");
    cr_assert_str_eq(err.message, "concurrency must be an integer >= 0");
}

Test(queue, rate_limit_sets_and_null_clears)
{
    cr_assert_eq(merge("{\"rate_limit\":{\"max\":10,\"per_ms\":1000}}"), 0);
    cr_assert_eq(s.rate_max, 10);
    cr_assert_eq(s.rate_per_ms, 1000);
    cr_assert_eq(merge("{\"rate_limit\":{\"max\":20}}"), 0, "merges onto the current limit");
    cr_assert_eq(s.rate_max, 20);
    cr_assert_eq(s.rate_per_ms, 1000);
    cr_assert_eq(merge("{\"rate_limit\":null}"), 0);
    cr_assert_eq(s.rate_max, 0);
    cr_assert_eq(s.rate_per_ms, 0);
}

Test(queue, rate_limit_rules_are_enforced)
{
    refused("{\"rate_limit\":{\"max\":10}}", "rate_limit.per_ms");
    refused("{\"rate_limit\":{\"per_ms\":10}}", "rate_limit.max");
    refused("{\"rate_limit\":{\"max\":0,\"per_ms\":10}}", "rate_limit.max");
    refused("{\"rate_limit\":{\"max\":1,\"per_ms\":0}}", "rate_limit.per_ms");
    refused("{\"rate_limit\":{\"max\":\"1\",\"per_ms\":1}}", "rate_limit.max");
    refused("{\"rate_limit\":5}", "rate_limit");
}

Test(queue, lease_ms_range_is_enforced)
{
    cr_assert_eq(merge("{\"lease_ms\":1000}"), 0);
    cr_assert_eq(s.lease_ms, ER_LEASE_MIN_MS);
    cr_assert_eq(merge("{\"lease_ms\":86400000}"), 0);
    cr_assert_eq(s.lease_ms, ER_LEASE_MAX_MS);
    refused("{\"lease_ms\":999}", "lease_ms");
    refused("{\"lease_ms\":86400001}", "lease_ms");
}

Test(queue, max_stalled_and_max_started_ranges)
{
    cr_assert_eq(merge("{\"max_stalled\":0,\"max_started\":1}"), 0);
    cr_assert_eq(s.max_stalled, 0);
    cr_assert_eq(s.max_started, 1);
    cr_assert_eq(merge("{\"max_stalled\":1000,\"max_started\":100000}"), 0);
    refused("{\"max_stalled\":-1}", "max_stalled");
    refused("{\"max_stalled\":1001}", "max_stalled");
    refused("{\"max_started\":0}", "max_started");
    refused("{\"max_started\":100001}", "max_started");
}

Test(queue, throttle_max_ms_range)
{
    cr_assert_eq(s.throttle_max_ms, 3600000, "default: one hour");
    cr_assert_eq(merge("{\"throttle_max_ms\":1000}"), 0, "%s", err.message);
    cr_assert_eq(s.throttle_max_ms, 1000);
    cr_assert_eq(merge("{\"throttle_max_ms\":604800000}"), 0, "%s", err.message);
    cr_assert_eq(s.throttle_max_ms, 604800000);
    cr_assert_eq(merge("{\"concurrency\":2}"), 0);
    cr_assert_eq(s.throttle_max_ms, 604800000, "absent keeps it");
    refused("{\"throttle_max_ms\":999}", "throttle_max_ms");
    refused("{\"throttle_max_ms\":604800001}", "throttle_max_ms");
    refused("{\"throttle_max_ms\":-1}", "throttle_max_ms");
    refused("{\"throttle_max_ms\":\"1h\"}", "throttle_max_ms");
    refused("{\"throttle_max_ms\":1.5}", "throttle_max_ms");
}

Test(queue, version_2_text_without_throttle_max_ms_has_the_default)
{
    er_queue_settings y;
    cr_assert_eq(er_settings_decode("{\"v\":2,\"paused\":false,\"max_started\":7,"
                                    "\"dispatch\":null}",
                                    &y, &err),
                 0, "%s", err.message);
    cr_assert_eq(y.max_started, 7);
    cr_assert_eq(y.throttle_max_ms, ER_THROTTLE_MAX_DEFAULT_MS);
    y.throttle_max_ms = 5000;
    char *t = er_settings_encode(&y);
    er_queue_settings z;
    cr_assert_eq(er_settings_decode(t, &z, &err), 0, "%s", err.message);
    cr_assert_eq(z.throttle_max_ms, 5000);
    free(t);
    cr_assert_neq(er_settings_decode("{\"v\":2,\"throttle_max_ms\":5}", &y, &err), 0);
    cr_assert_str_eq(err.field, "throttle_max_ms");
}

Test(queue, invalid_field_changes_nothing_even_after_valid_ones)
{
    refused("{\"paused\":true,\"concurrency\":4,\"lease_ms\":5}", "lease_ms");
    cr_assert(!s.paused);
    cr_assert_eq(s.concurrency, 0);
}

/* ---- job defaults ---- */

Test(queue, defaults_merge_field_by_field)
{
    cr_assert_eq(merge("{\"defaults\":{\"max_attempts\":3}}"), 0);
    cr_assert(s.defaults.has_max_attempts);
    cr_assert_eq(s.defaults.max_attempts, 3);
    cr_assert(!s.defaults.has_backoff, "the server's backoff stays in force");
    cr_assert_eq(merge("{\"defaults\":{\"timeout_ms\":5000}}"), 0);
    cr_assert_eq(s.defaults.max_attempts, 3, "an earlier default is kept");
    cr_assert_eq(s.defaults.timeout_ms, 5000);
    cr_assert_eq(merge("{\"defaults\":{\"priority\":9}}"), 0);
    cr_assert(s.defaults.has_priority && s.defaults.has_timeout && s.defaults.has_max_attempts);
}

Test(queue, queue_setting_only_max_attempts_keeps_server_backoff)
{
    cr_assert_eq(merge("{\"defaults\":{\"max_attempts\":2}}"), 0);
    er_job job;
    er_job_init(&job);
    er_job_defaults srv;
    er_job_defaults_server(&srv);
    er_job_apply_defaults(&job, &s.defaults, &srv);
    cr_assert_eq(job.max_attempts, 2);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_EXPONENTIAL);
    cr_assert_eq(job.backoff.delay_ms, ER_DEFAULT_BACKOFF_DELAY_MS);
    cr_assert_eq(job.backoff.max_delay_ms, ER_DEFAULT_BACKOFF_MAX_MS);
    cr_assert_eq(job.timeout_ms, ER_DEFAULT_TIMEOUT_MS);
    er_job_fini(&job);
}

Test(queue, defaults_backoff_merges_onto_server_then_own_values)
{
    cr_assert_eq(merge("{\"defaults\":{\"backoff\":{\"type\":\"fixed\"}}}"), 0);
    cr_assert(s.defaults.has_backoff);
    cr_assert_eq(s.defaults.backoff.type, ER_BACKOFF_FIXED);
    cr_assert_eq(s.defaults.backoff.delay_ms, ER_DEFAULT_BACKOFF_DELAY_MS);
    cr_assert_float_eq(s.defaults.backoff.jitter, ER_DEFAULT_JITTER, 1e-12);
    cr_assert_eq(merge("{\"defaults\":{\"backoff\":{\"delay_ms\":100}}}"), 0);
    cr_assert_eq(s.defaults.backoff.type, ER_BACKOFF_FIXED, "the queue's type is kept");
    cr_assert_eq(s.defaults.backoff.delay_ms, 100);
}

Test(queue, a_null_backoff_member_is_not_given)
{
    cr_assert_eq(merge("{\"defaults\":{\"backoff\":{\"delay_ms\":250}}}"), 0);
    cr_assert_eq(merge("{\"defaults\":{\"backoff\":{\"delay_ms\":null,\"type\":null,"
                       "\"jitter\":null,\"max_delay_ms\":9000}}}"),
                 0, "%s", err.message);
    cr_assert_eq(s.defaults.backoff.delay_ms, 250, "null kept the queue's delay");
    cr_assert_eq(s.defaults.backoff.max_delay_ms, 9000);
    cr_assert_float_eq(s.defaults.backoff.jitter, ER_DEFAULT_JITTER, 1e-12);
}

Test(queue, bounded_ranges_say_their_bounds)
{
    refused("{\"rate_limit\":{\"max\":1,\"per_ms\":31622400001}}", "rate_limit.per_ms");
    cr_assert_str_eq(err.message, "rate_limit.per_ms must be an integer 1..31622400000");
    refused("{\"concurrency\":-1}", "concurrency");
    cr_assert_str_eq(err.message, "concurrency must be an integer >= 0");
}

Test(queue, defaults_are_validated_as_in_enqueue)
{
    refused("{\"defaults\":{\"max_attempts\":0}}", "defaults.max_attempts");
    refused("{\"defaults\":{\"max_attempts\":1001}}", "defaults.max_attempts");
    refused("{\"defaults\":{\"timeout_ms\":0}}", "defaults.timeout_ms");
    refused("{\"defaults\":{\"priority\":1001}}", "defaults.priority");
    refused("{\"defaults\":{\"priority\":true}}", "defaults.priority");
    refused("{\"defaults\":{\"backoff\":{\"type\":\"linear\"}}}", "defaults.backoff.type");
    refused("{\"defaults\":{\"backoff\":{\"jitter\":2}}}", "defaults.backoff.jitter");
    refused("{\"defaults\":{\"backoff\":{\"delay_ms\":10,\"max_delay_ms\":5}}}",
            "defaults.backoff.max_delay_ms");
    refused("{\"defaults\":[]}", "defaults");
    refused("{\"defaults\":{\"max_attempts\":2,\"timeout_ms\":-1}}", "defaults.timeout_ms");
    cr_assert(!s.defaults.has_max_attempts, "nothing of a refused defaults object sticks");
}

Test(queue, null_clears_one_default_or_all)
{
    cr_assert_eq(merge("{\"defaults\":{\"max_attempts\":3,\"priority\":4}}"), 0);
    cr_assert_eq(merge("{\"defaults\":{\"max_attempts\":null}}"), 0);
    cr_assert(!s.defaults.has_max_attempts);
    cr_assert(s.defaults.has_priority);
    cr_assert_eq(merge("{\"defaults\":null}"), 0);
    cr_assert(!s.defaults.has_priority);
}

/* ---- retention ---- */

Test(queue, retention_completed_merges)
{
    cr_assert_eq(merge("{\"retention\":{\"completed\":{\"count\":1000}}}"), 0);
    cr_assert_eq(s.retention.completed_count, 1000);
    cr_assert_eq(s.retention.completed_age_s, 604800, "age kept");
    cr_assert_eq(merge("{\"retention\":{\"completed\":{\"age_s\":0}}}"), 0);
    cr_assert_eq(s.retention.completed_age_s, 0);
    cr_assert_eq(s.retention.completed_count, 1000);
}

Test(queue, retention_dead_age_or_keep)
{
    cr_assert_eq(merge("{\"retention\":{\"dead\":{\"age_s\":86400}}}"), 0);
    cr_assert_eq(s.retention.dead_age_s, 86400);
    cr_assert_eq(merge("{\"retention\":{\"dead\":\"keep\"}}"), 0);
    cr_assert_eq(s.retention.dead_age_s, 0);
}

Test(queue, retention_rules_are_enforced)
{
    refused("{\"retention\":{\"completed\":{\"age_s\":-1}}}", "retention.completed.age_s");
    refused("{\"retention\":{\"completed\":{\"count\":-1}}}", "retention.completed.count");
    refused("{\"retention\":{\"completed\":7}}", "retention.completed");
    refused("{\"retention\":{\"dead\":{\"age_s\":0}}}", "retention.dead.age_s");
    refused("{\"retention\":{\"dead\":\"forever\"}}", "retention.dead");
    refused("{\"retention\":\"keep\"}", "retention");
}

/* ---- JSON round trip ---- */

static void assert_round_trip(const er_queue_settings *x)
{
    char *text = er_settings_encode(x);
    cr_assert_not_null(text);
    er_queue_settings y;
    memset(&y, 0xab, sizeof y); /* decode must set every field */
    cr_assert_eq(er_settings_decode(text, &y, &err), 0, "%s", err.message);
    json_t *o = json_loads(text, 0, NULL);
    free(text);
    cr_assert_eq(json_integer_value(json_object_get(o, "v")), ER_SETTINGS_CODEC_VERSION);
    json_object_del(o, "v");
    /* the store keeps header values; the API shows them hidden */
    json_t *h = json_object_get(json_object_get(o, "dispatch"), "headers");
    const char *hk;
    json_t *hv;
    json_object_foreach(h, hk, hv) {
        json_object_set_new(h, hk, json_string(ER_DISPATCH_HIDDEN));
    }
    cr_assert_eq(memcmp(&x->dispatch, &y.dispatch, sizeof y.dispatch), 0, "dispatch kept exactly");
    char *a = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    char *b = dump(&y);
    cr_assert_str_eq(a, b);
    cr_assert_eq(x->paused, y.paused);
    cr_assert_eq(x->concurrency, y.concurrency);
    cr_assert_eq(x->rate_max, y.rate_max);
    cr_assert_eq(x->rate_per_ms, y.rate_per_ms);
    cr_assert_eq(x->lease_ms, y.lease_ms);
    cr_assert_eq(x->max_stalled, y.max_stalled);
    cr_assert_eq(x->max_started, y.max_started);
    cr_assert_eq(x->throttle_max_ms, y.throttle_max_ms);
    cr_assert_eq(memcmp(&x->retention, &y.retention, sizeof y.retention), 0);
    const er_job_defaults *p = &x->defaults, *q = &y.defaults;
    cr_assert_eq(p->has_max_attempts, q->has_max_attempts);
    cr_assert_eq(p->has_backoff, q->has_backoff);
    cr_assert_eq(p->has_timeout, q->has_timeout);
    cr_assert_eq(p->has_priority, q->has_priority);
    if (p->has_max_attempts)
        cr_assert_eq(p->max_attempts, q->max_attempts);
    if (p->has_timeout)
        cr_assert_eq(p->timeout_ms, q->timeout_ms);
    if (p->has_priority)
        cr_assert_eq(p->priority, q->priority);
    if (p->has_backoff) {
        cr_assert_eq(p->backoff.type, q->backoff.type);
        cr_assert_eq(p->backoff.delay_ms, q->backoff.delay_ms);
        cr_assert_eq(p->backoff.max_delay_ms, q->backoff.max_delay_ms);
        cr_assert(p->backoff.jitter == q->backoff.jitter, "jitter is exact");
    }
    free(a);
    free(b);
    json_decref(o);
}

Test(queue, default_settings_round_trip)
{
    assert_round_trip(&s);
}

Test(queue, full_settings_round_trip_exactly)
{
    cr_assert_eq(merge("{\"paused\":true,\"concurrency\":7,\"rate_limit\":{\"max\":5,"
                       "\"per_ms\":250},\"lease_ms\":120000,\"max_stalled\":0,"
                       "\"max_started\":12,\"throttle_max_ms\":2000,"
                       "\"defaults\":{\"max_attempts\":4,\"backoff\":"
                       "{\"type\":\"capped\",\"delay_ms\":300,\"max_delay_ms\":9000,"
                       "\"jitter\":0.123456789},\"timeout_ms\":777,\"priority\":50},"
                       "\"retention\":{\"completed\":{\"age_s\":0,\"count\":10},"
                       "\"dead\":{\"age_s\":3600}}}"),
                 0, "%s", err.message);
    assert_round_trip(&s);
}

Test(queue, partial_defaults_round_trip)
{
    cr_assert_eq(merge("{\"defaults\":{\"max_attempts\":3}}"), 0);
    assert_round_trip(&s);
    char *t = dump(&s);
    cr_assert(strstr(t, "\"defaults\":{\"max_attempts\":3}") != NULL, "%s", t);
    free(t);
}

Test(queue, decode_ignores_unknown_fields)
{
    er_queue_settings y;
    cr_assert_eq(er_settings_decode("{\"paused\":true,\"future_knob\":3,\"defaults\":"
                                    "{\"new_option\":1}}",
                                    &y, &err),
                 0, "%s", err.message);
    cr_assert(y.paused);
    cr_assert_eq(y.lease_ms, ER_DEFAULT_LEASE_MS, "missing fields take defaults");
}

/* group_limits with a rate and no concurrency is stored with
 * "concurrency": null, which reads back as none. */
Test(queue, group_rate_without_concurrency_round_trips)
{
    er_queue_settings x;
    er_queue_settings_default(&x);
    x.group_limits.rate = (er_rate){.max = 5, .per_ms = 1000, .burst = 2};
    char *t = er_settings_encode(&x);
    cr_assert_not_null(t);
    er_queue_settings y;
    cr_assert_eq(er_settings_decode(t, &y, &err), 0, "%s: %s", t, err.message);
    free(t);
    cr_assert_eq(y.group_limits.concurrency, 0);
    cr_assert_eq(y.group_limits.rate.max, 5);
    cr_assert_eq(y.group_limits.rate.burst, 2);
}

Test(queue, decode_refuses_invalid_values)
{
    er_queue_settings y = s;
    y.concurrency = 42;
    cr_assert_eq(er_settings_decode("{\"lease_ms\":1}", &y, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "lease_ms");
    cr_assert_eq(y.concurrency, 42, "unchanged on error");
    cr_assert_eq(er_settings_decode("{", &y, &err), ER_EINVAL);
    cr_assert_eq(er_settings_decode_row("{", false, &y, &err), ER_EINTERNAL);
}

/* The text earlier releases stored (printed by release 0.1.0's
 * er_queue_settings_to_json): version 1 of the codec, which must still read
 * back to the same settings; version 2 writes {"v":2, the same members,
 * "dispatch"}. */
static const struct {
    const char *patch, *stored;
} v1_texts[] = {
    {NULL,
     "{\"paused\":false,\"concurrency\":0,\"rate_limit\":null,\"lease_ms\":60000,"
     "\"max_stalled\":3,\"max_started\":100,\"defaults\":{},\"retention\":{\"completed\":"
     "{\"age_s\":604800,\"count\":0},\"dead\":\"keep\"}}"},
    {"{\"paused\":true,\"concurrency\":7,\"rate_limit\":{\"max\":5,\"per_ms\":250},"
     "\"lease_ms\":120000,\"max_stalled\":0,\"max_started\":12,\"defaults\":{"
     "\"max_attempts\":4,\"backoff\":{\"type\":\"capped\",\"delay_ms\":300,"
     "\"max_delay_ms\":9000,\"jitter\":0.123456789},\"timeout_ms\":777,\"priority\":50},"
     "\"retention\":{\"completed\":{\"age_s\":0,\"count\":10},\"dead\":{\"age_s\":3600}}}",
     "{\"paused\":true,\"concurrency\":7,\"rate_limit\":{\"max\":5,\"per_ms\":250},"
     "\"lease_ms\":120000,\"max_stalled\":0,\"max_started\":12,\"defaults\":{"
     "\"max_attempts\":4,\"backoff\":{\"type\":\"capped\",\"delay_ms\":300,"
     "\"max_delay_ms\":9000,\"jitter\":0.123456789},\"timeout_ms\":777,\"priority\":50},"
     "\"retention\":{\"completed\":{\"age_s\":0,\"count\":10},\"dead\":{\"age_s\":3600}}}"},
    {"{\"defaults\":{\"backoff\":{\"jitter\":0}}}",
     "{\"paused\":false,\"concurrency\":0,\"rate_limit\":null,\"lease_ms\":60000,"
     "\"max_stalled\":3,\"max_started\":100,\"defaults\":{\"backoff\":{\"type\":"
     "\"exponential\",\"delay_ms\":2000,\"max_delay_ms\":900000,\"jitter\":0.0}},"
     "\"retention\":{\"completed\":{\"age_s\":604800,\"count\":0},\"dead\":\"keep\"}}"},
    {"{\"defaults\":{\"backoff\":{\"type\":\"fixed\",\"jitter\":1,\"delay_ms\":10}}}",
     "{\"paused\":false,\"concurrency\":0,\"rate_limit\":null,\"lease_ms\":60000,"
     "\"max_stalled\":3,\"max_started\":100,\"defaults\":{\"backoff\":{\"type\":\"fixed\","
     "\"delay_ms\":10,\"max_delay_ms\":900000,\"jitter\":1.0}},\"retention\":{\"completed\":"
     "{\"age_s\":604800,\"count\":0},\"dead\":\"keep\"}}"},
};

/* The version 3 text of the settings a version 1 text holds. */
static char *as_v2(const char *v1)
{
    size_t n = strlen(v1);
    char *t = malloc(n + 128);
    cr_assert_not_null(t);
    snprintf(t, n + 128,
             "{\"v\":3,%.*s,\"dispatch\":null,\"throttle_max_ms\":3600000,\"fairness\":null,"
             "\"group_limits\":null,\"aging\":null}",
             (int)(n - 2), v1 + 1);
    /* version 3 writes a rate limit's burst (1 unless given) */
    char *r = strstr(t, "\"rate_limit\":{");
    if (r) {
        char *end = strchr(r, '}');
        size_t len = strlen(t) + 1;
        memmove(end + 10, end, len - (size_t)(end - t));
        memcpy(end, ",\"burst\":1", 10);
    }
    return t;
}

Test(queue, version_1_text_still_decodes_and_is_rewritten_as_version_3)
{
    for (size_t i = 0; i < sizeof v1_texts / sizeof v1_texts[0]; i++) {
        er_queue_settings_default(&s);
        if (v1_texts[i].patch)
            cr_assert_eq(merge(v1_texts[i].patch), 0, "%s", err.message);
        char *want = as_v2(v1_texts[i].stored);
        char *t = er_settings_encode(&s);
        cr_assert_str_eq(t, want, "case %zu", i);
        free(t);
        er_queue_settings y;
        memset(&y, 0xab, sizeof y);
        cr_assert_eq(er_settings_decode(v1_texts[i].stored, &y, &err), 0, "%s", err.message);
        cr_assert_not(y.dispatch.on, "version 1 has no dispatch");
        t = er_settings_encode(&y);
        cr_assert_str_eq(t, want, "case %zu read back", i);
        free(t);
        cr_assert_eq(er_settings_decode(want, &y, &err), 0, "%s", err.message);
        t = er_settings_encode(&y);
        cr_assert_str_eq(t, want, "case %zu: version 3 reads back to itself", i);
        free(t);
        free(want);
    }
}

/* ---- dispatch ---- */

#define TARGET "{\"dispatch\":{\"url\":\"https://hooks.example.com/in?x=1\""

Test(queue, dispatch_defaults)
{
    cr_assert_eq(merge(TARGET "}}"), 0, "%s", err.message);
    cr_assert(s.dispatch.on);
    cr_assert_str_eq(s.dispatch.url, "https://hooks.example.com/in?x=1");
    cr_assert_eq(s.dispatch.method, ER_DISPATCH_POST);
    cr_assert_eq(s.dispatch.timeout_ms, ER_DISPATCH_TIMEOUT_DEFAULT_MS);
    cr_assert_eq(s.dispatch.nheaders, 0);
    cr_assert_not(s.dispatch.trusted);
    cr_assert_not(s.dispatch.follow_redirects);
    char *t = dump(&s);
    cr_assert(strstr(t, "\"dispatch\":{\"follow_redirects\":false,\"headers\":{},\"method\":"
                        "\"POST\",\"timeout_ms\":30000,\"trusted\":false,\"url\":"
                        "\"https://hooks.example.com/in?x=1\"}") != NULL, "%s", t);
    free(t);
}

Test(queue, dispatch_full_target_round_trips_with_its_header_values)
{
    cr_assert_eq(merge("{\"dispatch\":{\"url\":\"http://127.0.0.1:8080/jobs\",\"method\":\"PUT\","
                       "\"headers\":{\"Authorization\":\"Bearer s3cret\",\"X-Tenant\":\"t 1\"},"
                       "\"timeout_ms\":1500,\"trusted\":true,\"follow_redirects\":true}}"),
                 0, "%s", err.message);
    cr_assert_eq(s.dispatch.method, ER_DISPATCH_PUT);
    cr_assert_eq(s.dispatch.nheaders, 2);
    cr_assert_str_eq(s.dispatch.headers[0].name, "Authorization");
    cr_assert_str_eq(s.dispatch.headers[0].value, "Bearer s3cret");
    cr_assert_eq(s.dispatch.timeout_ms, 1500);
    cr_assert(s.dispatch.trusted && s.dispatch.follow_redirects);
    char *t = dump(&s);
    cr_assert(strstr(t, "s3cret") == NULL, "header values are write-only: %s", t);
    cr_assert(strstr(t, "\"headers\":{\"Authorization\":\"***\",\"X-Tenant\":\"***\"}") != NULL,
              "%s", t);
    free(t);
    char *stored = er_settings_encode(&s);
    cr_assert(strstr(stored, "\"Authorization\":\"Bearer s3cret\"") != NULL, "%s", stored);
    free(stored);
    assert_round_trip(&s);
}

Test(queue, dispatch_null_removes_the_target)
{
    cr_assert_eq(merge(TARGET "}}"), 0, "%s", err.message);
    cr_assert_eq(merge("{\"dispatch\":null}"), 0, "%s", err.message);
    cr_assert_not(s.dispatch.on);
    char *t = dump(&s);
    cr_assert(strstr(t, "\"dispatch\":null") != NULL, "%s", t);
    free(t);
    cr_assert_eq(merge("{\"concurrency\":3}"), 0);
    cr_assert_not(s.dispatch.on, "an absent dispatch keeps what is there");
}

Test(queue, dispatch_object_replaces_the_whole_target)
{
    cr_assert_eq(merge("{\"dispatch\":{\"url\":\"http://a/\",\"timeout_ms\":999,"
                       "\"method\":\"PATCH\"}}"),
                 0, "%s", err.message);
    cr_assert_eq(merge("{\"dispatch\":{\"url\":\"http://b/\"}}"), 0, "%s", err.message);
    cr_assert_str_eq(s.dispatch.url, "http://b/");
    cr_assert_eq(s.dispatch.timeout_ms, ER_DISPATCH_TIMEOUT_DEFAULT_MS);
    cr_assert_eq(s.dispatch.method, ER_DISPATCH_POST);
}

Test(queue, dispatch_hidden_value_keeps_the_stored_one)
{
    cr_assert_eq(merge("{\"dispatch\":{\"url\":\"http://a/\",\"trusted\":true,"
                       "\"headers\":{\"Authorization\":\"Bearer one\",\"X-A\":\"a\"}}}"),
                 0, "%s", err.message);
    /* what GET shows, sent back with one header changed and one dropped */
    cr_assert_eq(merge("{\"dispatch\":{\"url\":\"http://a/v2\",\"trusted\":true,"
                       "\"headers\":{\"authorization\":\"***\",\"X-B\":\"b\"}}}"),
                 0, "%s", err.message);
    cr_assert_eq(s.dispatch.nheaders, 2);
    cr_assert_str_eq(s.dispatch.headers[0].name, "authorization");
    cr_assert_str_eq(s.dispatch.headers[0].value, "Bearer one");
    cr_assert_str_eq(s.dispatch.headers[1].value, "b");
    refused("{\"dispatch\":{\"url\":\"http://a/\",\"trusted\":true,"
            "\"headers\":{\"X-A\":\"***\"}}}",
            "dispatch.headers.X-A");
}

Test(queue, dispatch_rules_are_enforced)
{
    refused("{\"dispatch\":\"http://a/\"}", "dispatch");
    refused("{\"dispatch\":[]}", "dispatch");
    refused("{\"dispatch\":{}}", "dispatch.url");
    refused("{\"dispatch\":{\"url\":\"http://a/\",\"retries\":1}}", "dispatch.retries");
    refused("{\"dispatch\":{\"url\":null}}", "dispatch.url");
    refused("{\"dispatch\":{\"url\":7}}", "dispatch.url");
    const char *bad_urls[] = {"ftp://a/", "file:///etc/passwd", "gopher://a/", "javascript:x",
                              "http:/a", "http://", "https://", "http:///x", "http://?q",
                              "http://u:p@a/", "http://u@a/", "http://a b/", "http://a/\\n",
                              "//a/", "a/b", "", "http://\u00e9.example/", "HTTP//a",
                              "http://:80/", "dict://a:11211/"};
    for (size_t i = 0; i < sizeof bad_urls / sizeof *bad_urls; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"dispatch\":{\"url\":\"%s\"}}", bad_urls[i]);
        refused(body, "dispatch.url");
    }
    char big[ER_DISPATCH_URL_MAX + 64];
    int n = snprintf(big, sizeof big, "{\"dispatch\":{\"url\":\"http://a/");
    memset(big + n, 'x', ER_DISPATCH_URL_MAX);
    snprintf(big + n + ER_DISPATCH_URL_MAX - 8, 64, "\"}}"); /* one byte too long */
    refused(big, "dispatch.url");
    snprintf(big + n + ER_DISPATCH_URL_MAX - 9, 64, "\"}}");
    cr_assert_eq(merge(big), 0, "the longest URL: %s", err.message);
    cr_assert_eq(strlen(s.dispatch.url), ER_DISPATCH_URL_MAX);
    cr_assert_eq(merge("{\"dispatch\":{\"url\":\"HTTPS://A.example:8443/p#f\"}}"), 0,
                 "scheme case does not matter: %s", err.message);
    refused(TARGET ",\"method\":\"GET\"}}", "dispatch.method");
    refused(TARGET ",\"method\":\"post\"}}", "dispatch.method");
    refused(TARGET ",\"method\":\"DELETE\"}}", "dispatch.method");
    refused(TARGET ",\"method\":1}}", "dispatch.method");
    refused(TARGET ",\"timeout_ms\":99}}", "dispatch.timeout_ms");
    refused(TARGET ",\"timeout_ms\":600001}}", "dispatch.timeout_ms");
    refused(TARGET ",\"timeout_ms\":\"5s\"}}", "dispatch.timeout_ms");
    refused(TARGET ",\"timeout_ms\":1.5}}", "dispatch.timeout_ms");
    refused(TARGET ",\"timeout_ms\":null}}", "dispatch.timeout_ms");
    refused(TARGET ",\"trusted\":\"yes\"}}", "dispatch.trusted");
    refused(TARGET ",\"trusted\":null}}", "dispatch.trusted");
    refused(TARGET ",\"follow_redirects\":1}}", "dispatch.follow_redirects");
}

Test(queue, dispatch_header_rules_are_enforced)
{
    refused(TARGET ",\"trusted\":true,\"headers\":[]}}", "dispatch.headers");
    refused(TARGET ",\"trusted\":true,\"headers\":null}}", "dispatch.headers");
    refused(TARGET ",\"headers\":{\"X-A\":\"1\"}}}", "dispatch.headers");
    refused(TARGET ",\"trusted\":false,\"headers\":{\"X-A\":\"1\"}}}", "dispatch.headers");
    refused(TARGET ",\"trusted\":true,\"headers\":{\"a\":\"1\",\"b\":\"1\",\"c\":\"1\","
            "\"d\":\"1\",\"e\":\"1\",\"f\":\"1\",\"g\":\"1\",\"h\":\"1\",\"i\":\"1\"}}}",
            "dispatch.headers");
    refused(TARGET ",\"trusted\":true,\"headers\":{\"X A\":\"1\"}}}", "dispatch.headers.X A");
    refused(TARGET ",\"trusted\":true,\"headers\":{\"\":\"1\"}}}", "dispatch.headers.");
    refused(TARGET ",\"trusted\":true,\"headers\":{\"X:A\":\"1\"}}}", "dispatch.headers.X:A");
    const char *reserved[] = {"Content-Type", "content-length", "Host", "Transfer-Encoding",
                              "Idempotency-Key", "X-Errand-Job-Id", "x-errand-anything",
                              "traceparent", "Connection", "Expect"};
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) {
        char body[256], field[128];
        snprintf(body, sizeof body, TARGET ",\"trusted\":true,\"headers\":{\"%s\":\"1\"}}}",
                 reserved[i]);
        snprintf(field, sizeof field, "dispatch.headers.%s", reserved[i]);
        refused(body, field);
    }
    refused(TARGET ",\"trusted\":true,\"headers\":{\"X-A\":\"1\",\"x-a\":\"2\"}}}",
            "dispatch.headers.x-a");
    refused(TARGET ",\"trusted\":true,\"headers\":{\"X-A\":1}}}", "dispatch.headers.X-A");
    refused(TARGET ",\"trusted\":true,\"headers\":{\"X-A\":null}}}", "dispatch.headers.X-A");
    refused(TARGET ",\"trusted\":true,\"headers\":{\"X-A\":\"a\\r\\nX-B: b\"}}}",
            "dispatch.headers.X-A");
    refused(TARGET ",\"trusted\":true,\"headers\":{\"X-A\":\"caf\u00e9\"}}}",
            "dispatch.headers.X-A");
    char big[ER_DISPATCH_HEADER_VALUE_MAX + 128];
    int n = snprintf(big, sizeof big, TARGET ",\"trusted\":true,\"headers\":{\"X-A\":\"");
    memset(big + n, 'v', ER_DISPATCH_HEADER_VALUE_MAX + 1);
    snprintf(big + n + ER_DISPATCH_HEADER_VALUE_MAX + 1, 16, "\"}}}");
    refused(big, "dispatch.headers.X-A");
    big[n + ER_DISPATCH_HEADER_VALUE_MAX] = '\0';
    strcat(big, "\"}}}");
    cr_assert_eq(merge(big), 0, "a value of the largest size: %s", err.message);
    cr_assert_eq(merge(TARGET ",\"trusted\":true,\"headers\":{\"X-Api-Key\":\"\\tk  \"}}}"), 0,
                 "%s", err.message);
    cr_assert_eq(merge(TARGET ",\"headers\":{}}}"), 0, "no headers needs no trust: %s",
                 err.message);
}
