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
    cr_assert_str_eq(t, "{\"concurrency\":0,\"defaults\":{},\"lease_ms\":60000,"
                        "\"max_stalled\":3,\"max_started\":100,\"paused\":false,"
                        "\"rate_limit\":null,\"retention\":{\"completed\":{\"age_s\":604800,"
                        "\"count\":0},\"dead\":\"keep\"}}");
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
    refused("{\"rate_limit\":{\"max\":1,\"per_ms\":1,\"burst\":3}}", "rate_limit.burst");
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
                       "\"max_started\":12,\"defaults\":{\"max_attempts\":4,\"backoff\":"
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
 * er_queue_settings_to_json), which version 1 of the codec must write byte
 * for byte and read back to the same settings. */
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

Test(queue, the_stored_text_is_version_1_byte_for_byte)
{
    for (size_t i = 0; i < sizeof v1_texts / sizeof v1_texts[0]; i++) {
        er_queue_settings_default(&s);
        if (v1_texts[i].patch)
            cr_assert_eq(merge(v1_texts[i].patch), 0, "%s", err.message);
        char *t = er_settings_encode(&s);
        cr_assert_str_eq(t, v1_texts[i].stored, "case %zu", i);
        free(t);
        er_queue_settings y;
        cr_assert_eq(er_settings_decode(v1_texts[i].stored, &y, &err), 0, "%s", err.message);
        t = er_settings_encode(&y);
        cr_assert_str_eq(t, v1_texts[i].stored, "case %zu read back", i);
        free(t);
    }
}
