/* SPDX-License-Identifier: MIT
 *
 * Unit tests for the job model: the enqueue rules (er_job_validate over a
 * spec the HTTP frontend's reader filled from JSON: every field and rule),
 * name and id rules, option defaults, copy/fini, id generation and the
 * redrive copy. The clock is a fixed T0 and randomness a seeded er_rand.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job_spec.h"
#include "server/http/job_json.h"

#define T0 1796004000000LL /* 2026-11-30T02:00:00.000Z */
#define PMAX ER_PAYLOAD_MAX_DEFAULT

static er_rand rnd;
static er_error err;
static er_job job;

static void setup(void)
{
    er_rand_init_seeded(&rnd, 99);
    er_error_clear(&err);
    er_job_init(&job);
}

static void teardown(void)
{
    er_job_fini(&job);
}

TestSuite(job, .init = setup, .fini = teardown);

/* Parses `text` as JSON, reads it into a spec and validates it at T0. */
static int enq_max(const char *text, size_t payload_max)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    cr_assert_not_null(o, "bad test JSON %s: %s", text, je.text);
    er_job_fini(&job);
    er_job_spec sp;
    er_job_limits lim = {.payload_max = payload_max};
    int rc = er_http_job_spec_from_json(o, "default", &sp, &err);
    if (rc == 0)
        rc = er_job_validate(&sp, &lim, T0, &rnd, &job, &err);
    else
        er_job_init(&job);
    er_job_spec_fini(&sp);
    json_decref(o);
    return rc;
}

static int enq(const char *text)
{
    return enq_max(text, PMAX);
}

/* Asserts the request is refused with ER_EINVAL naming `field`, and that the
 * job holds nothing. */
static void refused(const char *text, const char *field)
{
    cr_assert_eq(enq(text), ER_EINVAL, "%s should be refused", text);
    cr_assert_eq(err.code, ER_EINVAL);
    cr_assert_str_eq(err.field, field, "%s: field", text);
    cr_assert_neq(err.message[0], '\0');
    cr_assert_null(job.id);
    cr_assert_null(job.name);
    cr_assert_null(job.payload);
    cr_assert_null(job.queue);
}

/* ---- minimal and full requests ---- */

Test(job, minimal_request_is_waiting_now_with_generated_id)
{
    cr_assert_eq(enq("{\"name\":\"send-email\"}"), 0);
    cr_assert_str_eq(job.queue, "default");
    cr_assert_str_eq(job.name, "send-email");
    cr_assert_str_eq(job.payload, "{}");
    cr_assert_eq(job.payload_len, 2);
    cr_assert_eq(job.state, ER_STATE_WAITING);
    cr_assert_eq(job.run_at, T0);
    cr_assert_eq(job.created_at, T0);
    cr_assert_eq(job.updated_at, T0);
    cr_assert_eq(strlen(job.id), 26);
    cr_assert_str_eq(job.idempotency_key, job.id);
    cr_assert_null(job.group);
    cr_assert_null(job.trace_id);
    cr_assert_eq(job.attempts, 0);
    cr_assert_eq(job.started, 0);
    cr_assert(!job.set_max_attempts && !job.set_backoff && !job.set_timeout && !job.set_priority);
}

Test(job, unset_options_hold_server_values)
{
    cr_assert_eq(enq("{\"name\":\"a\"}"), 0);
    cr_assert_eq(job.max_attempts, ER_DEFAULT_MAX_ATTEMPTS);
    cr_assert_eq(job.timeout_ms, ER_DEFAULT_TIMEOUT_MS);
    cr_assert_eq(job.priority, 0);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_EXPONENTIAL);
    cr_assert_eq(job.backoff.delay_ms, ER_DEFAULT_BACKOFF_DELAY_MS);
    cr_assert_eq(job.backoff.max_delay_ms, ER_DEFAULT_BACKOFF_MAX_MS);
    cr_assert_float_eq(job.backoff.jitter, ER_DEFAULT_JITTER, 1e-12);
}

Test(job, full_request_sets_every_field)
{
    cr_assert_eq(enq("{\"name\":\"n\",\"payload\":{\"to\":\"a@b\",\"n\":[1,2]},\"id\":\"job-1\","
                     "\"priority\":7,\"delay_ms\":5000,\"max_attempts\":3,"
                     "\"backoff\":{\"type\":\"fixed\",\"delay_ms\":100,\"max_delay_ms\":200,"
                     "\"jitter\":0.25},\"timeout_ms\":1000,\"group\":\"tenant:42\","
                     "\"trace_id\":\"tr-1\",\"idempotency_key\":\"key-1\"}"),
                 0, "%s", err.message);
    cr_assert_str_eq(job.payload, "{\"to\":\"a@b\",\"n\":[1,2]}");
    cr_assert_eq(job.payload_len, strlen(job.payload));
    cr_assert_str_eq(job.id, "job-1");
    cr_assert_eq(job.priority, 7);
    cr_assert_eq(job.state, ER_STATE_SCHEDULED);
    cr_assert_eq(job.run_at, T0 + 5000);
    cr_assert_eq(job.max_attempts, 3);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_FIXED);
    cr_assert_eq(job.backoff.delay_ms, 100);
    cr_assert_eq(job.backoff.max_delay_ms, 200);
    cr_assert_float_eq(job.backoff.jitter, 0.25, 1e-12);
    cr_assert_eq(job.timeout_ms, 1000);
    cr_assert_str_eq(job.group, "tenant:42");
    cr_assert_str_eq(job.trace_id, "tr-1");
    cr_assert_str_eq(job.idempotency_key, "key-1");
    cr_assert(job.set_max_attempts && job.set_backoff && job.set_timeout && job.set_priority);
}

Test(job, null_options_count_as_absent)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"id\":null,\"priority\":null,\"delay_ms\":null,"
                     "\"run_at\":null,\"max_attempts\":null,\"backoff\":null,"
                     "\"timeout_ms\":null,\"group\":null,\"trace_id\":null,"
                     "\"idempotency_key\":null}"),
                 0, "%s", err.message);
    cr_assert_eq(strlen(job.id), 26);
    cr_assert_null(job.group);
    cr_assert(!job.set_priority && !job.set_backoff);
}

/* ---- object and unknown fields ---- */

Test(job, non_object_request_is_refused)
{
    refused("[1,2]", "job");
    refused("\"x\"", "job");
}

Test(job, unknown_field_is_named)
{
    refused("{\"name\":\"a\",\"prority\":1}", "prority");
}

/* ---- name ---- */

Test(job, name_is_required)
{
    refused("{}", "name");
    refused("{\"name\":null}", "name");
    refused("{\"payload\":{}}", "name");
}

Test(job, name_rules_are_enforced)
{
    refused("{\"name\":\"\"}", "name");
    refused("{\"name\":\"has space\"}", "name");
    refused("{\"name\":\"a/b\"}", "name");
    refused("{\"name\":42}", "name");
    refused("{\"name\":\"a\\u0000b\"}", "name");
    cr_assert_str_eq(err.message, "name must be a string");
}

Test(job, name_length_limit_is_128)
{
    char buf[300], name[200];
    memset(name, 'n', 128);
    name[128] = '\0';
    snprintf(buf, sizeof buf, "{\"name\":\"%s\"}", name);
    cr_assert_eq(enq(buf), 0);
    name[128] = 'n';
    name[129] = '\0';
    snprintf(buf, sizeof buf, "{\"name\":\"%s\"}", name);
    refused(buf, "name");
}

/* ---- payload ---- */

Test(job, payload_may_be_any_json_value)
{
    const char *cases[][2] = {
        {"[1,\"x\",null]", "[1,\"x\",null]"}, {"\"text\"", "\"text\""}, {"12", "12"},
        {"null", "null"}, {"true", "true"}, {"{ \"a\" : 1 }", "{\"a\":1}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[128];
        snprintf(buf, sizeof buf, "{\"name\":\"a\",\"payload\":%s}", cases[i][0]);
        cr_assert_eq(enq(buf), 0, "%s", buf);
        cr_assert_str_eq(job.payload, cases[i][1]);
        cr_assert_eq(job.payload_len, strlen(cases[i][1]));
    }
}

Test(job, payload_over_the_limit_is_too_big)
{
    /* {"k":"xxxxx"} is 13 bytes compact */
    cr_assert_eq(enq_max("{\"name\":\"a\",\"payload\":{\"k\":\"xxxxx\"}}", 13), 0);
    cr_assert_eq(enq_max("{\"name\":\"a\",\"payload\":{\"k\":\"xxxxx\"}}", 12), ER_ETOOBIG);
    cr_assert_eq(err.code, ER_ETOOBIG);
    cr_assert_str_eq(err.field, "payload");
    cr_assert_null(job.payload);
}

Test(job, absent_payload_counts_as_two_bytes)
{
    cr_assert_eq(enq_max("{\"name\":\"a\"}", 1), ER_ETOOBIG);
}

/* ---- id ---- */

Test(job, client_id_is_validated)
{
    refused("{\"name\":\"a\",\"id\":\"\"}", "id");
    refused("{\"name\":\"a\",\"id\":\"a b\"}", "id");
    refused("{\"name\":\"a\",\"id\":\"a/b\"}", "id");
    refused("{\"name\":\"a\",\"id\":\"caf\\u00e9\"}", "id");
    refused("{\"name\":\"a\",\"id\":7}", "id");
    cr_assert_eq(enq("{\"name\":\"a\",\"id\":\"order:42#x!~\"}"), 0);
    cr_assert_str_eq(job.id, "order:42#x!~");
    cr_assert_str_eq(job.idempotency_key, "order:42#x!~");
}

Test(job, id_length_limit_is_200)
{
    char buf[400], id[210];
    memset(id, 'i', 200);
    id[200] = '\0';
    snprintf(buf, sizeof buf, "{\"name\":\"a\",\"id\":\"%s\"}", id);
    cr_assert_eq(enq(buf), 0);
    id[200] = 'i';
    id[201] = '\0';
    snprintf(buf, sizeof buf, "{\"name\":\"a\",\"id\":\"%s\"}", id);
    refused(buf, "id");
}

/* ---- priority ---- */

Test(job, priority_must_be_an_integer_in_range)
{
    const char *bad[] = {"-1", "1001", "true", "false", "1.5", "5.0", "\"5\"", "[]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "{\"name\":\"a\",\"priority\":%s}", bad[i]);
        refused(buf, "priority");
        cr_assert_str_eq(err.message, "priority must be an integer 0..1000");
    }
    cr_assert_eq(enq("{\"name\":\"a\",\"priority\":0}"), 0);
    cr_assert_eq(enq("{\"name\":\"a\",\"priority\":1000}"), 0);
    cr_assert_eq(job.priority, 1000);
}

/* ---- delay_ms / run_at ---- */

Test(job, delay_schedules_in_the_future)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"delay_ms\":1}"), 0);
    cr_assert_eq(job.state, ER_STATE_SCHEDULED);
    cr_assert_eq(job.run_at, T0 + 1);
}

Test(job, zero_delay_is_waiting)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"delay_ms\":0}"), 0);
    cr_assert_eq(job.state, ER_STATE_WAITING);
    cr_assert_eq(job.run_at, T0);
}

Test(job, delay_limits_are_enforced)
{
    char buf[128];
    snprintf(buf, sizeof buf, "{\"name\":\"a\",\"delay_ms\":%lld}", ER_DELAY_MAX_MS);
    cr_assert_eq(enq(buf), 0);
    cr_assert_eq(job.run_at, T0 + ER_DELAY_MAX_MS);
    snprintf(buf, sizeof buf, "{\"name\":\"a\",\"delay_ms\":%lld}", ER_DELAY_MAX_MS + 1);
    refused(buf, "delay_ms");
    refused("{\"name\":\"a\",\"delay_ms\":-1}", "delay_ms");
    refused("{\"name\":\"a\",\"delay_ms\":\"10\"}", "delay_ms");
    refused("{\"name\":\"a\",\"delay_ms\":10.0}", "delay_ms");
}

Test(job, future_run_at_is_scheduled)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"run_at\":\"2026-11-30T09:00:01+07:00\"}"), 0);
    cr_assert_eq(job.state, ER_STATE_SCHEDULED);
    cr_assert_eq(job.run_at, T0 + 1000);
}

Test(job, past_run_at_means_now)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"run_at\":\"2020-01-01T00:00:00Z\"}"), 0);
    cr_assert_eq(job.state, ER_STATE_WAITING);
    cr_assert_eq(job.run_at, T0);
}

Test(job, run_at_equal_to_now_is_waiting)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"run_at\":\"2026-11-30T02:00:00.000Z\"}"), 0);
    cr_assert_eq(job.state, ER_STATE_WAITING);
}

Test(job, run_at_more_than_a_year_ahead_is_refused)
{
    char buf[128], t[32];
    er_time_format(T0 + ER_DELAY_MAX_MS, t);
    snprintf(buf, sizeof buf, "{\"name\":\"a\",\"run_at\":\"%s\"}", t);
    cr_assert_eq(enq(buf), 0);
    er_time_format(T0 + ER_DELAY_MAX_MS + 1, t);
    snprintf(buf, sizeof buf, "{\"name\":\"a\",\"run_at\":\"%s\"}", t);
    refused(buf, "run_at");
}

Test(job, malformed_run_at_is_refused)
{
    refused("{\"name\":\"a\",\"run_at\":\"tomorrow\"}", "run_at");
    refused("{\"name\":\"a\",\"run_at\":\"2026-11-30T02:00:00\"}", "run_at");
    refused("{\"name\":\"a\",\"run_at\":1796004000000}", "run_at");
}

Test(job, delay_and_run_at_together_are_refused)
{
    refused("{\"name\":\"a\",\"delay_ms\":5,\"run_at\":\"2026-11-30T02:00:00Z\"}", "run_at");
}

/* ---- max_attempts, timeout ---- */

Test(job, max_attempts_range_is_enforced)
{
    refused("{\"name\":\"a\",\"max_attempts\":0}", "max_attempts");
    refused("{\"name\":\"a\",\"max_attempts\":1001}", "max_attempts");
    refused("{\"name\":\"a\",\"max_attempts\":true}", "max_attempts");
    cr_assert_eq(enq("{\"name\":\"a\",\"max_attempts\":1}"), 0);
    cr_assert_eq(job.max_attempts, 1);
    cr_assert_eq(enq("{\"name\":\"a\",\"max_attempts\":1000}"), 0);
}

Test(job, timeout_range_is_enforced)
{
    char buf[128];
    refused("{\"name\":\"a\",\"timeout_ms\":0}", "timeout_ms");
    snprintf(buf, sizeof buf, "{\"name\":\"a\",\"timeout_ms\":%lld}", ER_TIMEOUT_MAX_MS + 1);
    refused(buf, "timeout_ms");
    snprintf(buf, sizeof buf, "{\"name\":\"a\",\"timeout_ms\":%lld}", ER_TIMEOUT_MAX_MS);
    cr_assert_eq(enq(buf), 0);
    cr_assert_eq(job.timeout_ms, ER_TIMEOUT_MAX_MS);
    cr_assert(job.set_timeout);
}

/* ---- backoff ---- */

Test(job, partial_backoff_takes_server_values)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"type\":\"capped\"}}"), 0);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_CAPPED);
    cr_assert_eq(job.backoff.delay_ms, ER_DEFAULT_BACKOFF_DELAY_MS);
    cr_assert_eq(job.backoff.max_delay_ms, ER_DEFAULT_BACKOFF_MAX_MS);
    cr_assert_float_eq(job.backoff.jitter, ER_DEFAULT_JITTER, 1e-12);
    cr_assert(job.set_backoff);
}

Test(job, backoff_fields_are_validated)
{
    refused("{\"name\":\"a\",\"backoff\":{\"type\":\"linear\"}}", "backoff.type");
    refused("{\"name\":\"a\",\"backoff\":{\"type\":1}}", "backoff.type");
    refused("{\"name\":\"a\",\"backoff\":{\"delay_ms\":-1}}", "backoff.delay_ms");
    refused("{\"name\":\"a\",\"backoff\":{\"max_delay_ms\":1.5}}", "backoff.max_delay_ms");
    refused("{\"name\":\"a\",\"backoff\":{\"jitter\":1.5}}", "backoff.jitter");
    refused("{\"name\":\"a\",\"backoff\":{\"jitter\":-0.1}}", "backoff.jitter");
    refused("{\"name\":\"a\",\"backoff\":{\"jitter\":\"0.5\"}}", "backoff.jitter");
    refused("{\"name\":\"a\",\"backoff\":{\"jitter\":true}}", "backoff.jitter");
    refused("{\"name\":\"a\",\"backoff\":{\"base\":10}}", "backoff.base");
    refused("{\"name\":\"a\",\"backoff\":\"exponential\"}", "backoff");
}

Test(job, integer_jitter_is_a_number)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"jitter\":1}}"), 0);
    cr_assert_float_eq(job.backoff.jitter, 1.0, 1e-12);
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"jitter\":0}}"), 0);
    cr_assert_float_eq(job.backoff.jitter, 0.0, 1e-12);
}

Test(job, explicit_max_delay_below_delay_is_refused)
{
    refused("{\"name\":\"a\",\"backoff\":{\"delay_ms\":500,\"max_delay_ms\":499}}",
            "backoff.max_delay_ms");
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"delay_ms\":500,\"max_delay_ms\":500}}"), 0);
}

Test(job, delay_above_the_default_cap_raises_the_cap)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"delay_ms\":1000000}}"), 0);
    cr_assert_eq(job.backoff.delay_ms, 1000000);
    cr_assert_eq(job.backoff.max_delay_ms, 1000000);
}

/* ---- group, trace_id, idempotency_key ---- */

Test(job, group_follows_name_rules)
{
    refused("{\"name\":\"a\",\"group\":\"tenant 42\"}", "group");
    refused("{\"name\":\"a\",\"group\":\"\"}", "group");
    refused("{\"name\":\"a\",\"group\":42}", "group");
}

Test(job, trace_id_and_idempotency_key_follow_id_rules)
{
    refused("{\"name\":\"a\",\"trace_id\":\"a b\"}", "trace_id");
    refused("{\"name\":\"a\",\"trace_id\":1}", "trace_id");
    refused("{\"name\":\"a\",\"idempotency_key\":\"\"}", "idempotency_key");
    refused("{\"name\":\"a\",\"idempotency_key\":\"x/y\"}", "idempotency_key");
    cr_assert_eq(enq("{\"name\":\"a\",\"id\":\"j\",\"idempotency_key\":\"k\"}"), 0);
    cr_assert_str_eq(job.idempotency_key, "k");
}

/* ---- validators ---- */

Test(job, name_validate_accepts_the_allowed_alphabet)
{
    cr_assert_eq(er_name_validate("Aa09_.:-", "queue", &err), 0);
    cr_assert_eq(er_name_validate("a!", "queue", &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "queue");
    cr_assert_eq(er_name_validate(NULL, "queue", &err), ER_EINVAL);
    cr_assert_eq(er_name_validate("é", "queue", NULL), ER_EINVAL);
}

Test(job, id_validate_refuses_control_and_space)
{
    cr_assert_eq(er_id_validate("!~", "id", &err), 0);
    cr_assert_eq(er_id_validate("a\tb", "id", &err), ER_EINVAL);
    cr_assert_eq(er_id_validate("a\x7f", "id", &err), ER_EINVAL);
    cr_assert_eq(er_id_validate(NULL, "id", NULL), ER_EINVAL);
}

/* ---- defaults ---- */

Test(job, queue_defaults_fill_unset_options)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"priority\":5}"), 0);
    er_job_defaults q = {0}, srv;
    er_job_defaults_server(&srv);
    q.has_max_attempts = true;
    q.max_attempts = 2;
    q.has_priority = true;
    q.priority = 900;
    q.has_timeout = true;
    q.timeout_ms = 123;
    er_job_apply_defaults(&job, &q, &srv);
    cr_assert_eq(job.max_attempts, 2);
    cr_assert_eq(job.priority, 5, "the request wins over the queue");
    cr_assert_eq(job.timeout_ms, 123);
    cr_assert_eq(job.backoff.delay_ms, ER_DEFAULT_BACKOFF_DELAY_MS, "server backoff kept");
}

Test(job, request_options_win_over_every_default)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"max_attempts\":4,\"timeout_ms\":9,\"priority\":1,"
                     "\"backoff\":{\"type\":\"fixed\"}}"),
                 0);
    er_job_defaults q, srv;
    er_job_defaults_server(&q);
    q.max_attempts = 99;
    q.timeout_ms = 99;
    q.priority = 99;
    q.backoff.type = ER_BACKOFF_CAPPED;
    er_job_defaults_server(&srv);
    er_job_apply_defaults(&job, &q, &srv);
    cr_assert_eq(job.max_attempts, 4);
    cr_assert_eq(job.timeout_ms, 9);
    cr_assert_eq(job.priority, 1);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_FIXED);
}

/* The case: a job's own backoff merges onto the queue's default
 * field by field; before, {"jitter": 0} replaced a capped 1 s default with
 * the server's exponential 2 s. */
Test(job, a_partial_backoff_merges_onto_the_queue_default_field_by_field)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"jitter\":0}}"), 0);
    er_job_defaults q = {0}, srv;
    er_job_defaults_server(&srv);
    q.has_backoff = true;
    q.backoff = (er_backoff){ER_BACKOFF_CAPPED, 1000, 1000, 0.5};
    er_job_apply_defaults(&job, &q, &srv);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_CAPPED);
    cr_assert_eq(job.backoff.delay_ms, 1000);
    cr_assert_eq(job.backoff.max_delay_ms, 1000);
    cr_assert_float_eq(job.backoff.jitter, 0.0, 1e-12);
    cr_assert_eq(er_backoff_delay(&job.backoff, 1, &rnd), 1000);
}

Test(job, a_longer_delay_than_the_queue_cap_raises_the_cap_unless_given)
{
    er_job_defaults q = {0}, srv;
    er_job_defaults_server(&srv);
    q.has_backoff = true;
    q.backoff = (er_backoff){ER_BACKOFF_CAPPED, 500, 1000, 0.5};
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"delay_ms\":5000}}"), 0);
    er_job_apply_defaults(&job, &q, &srv);
    cr_assert_eq(job.backoff.delay_ms, 5000);
    cr_assert_eq(job.backoff.max_delay_ms, 5000);
    /* an explicit cap below the queue's delay holds: every delay is capped */
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"max_delay_ms\":300}}"), 0);
    er_job_apply_defaults(&job, &q, &srv);
    cr_assert_eq(job.backoff.delay_ms, 500);
    cr_assert_eq(job.backoff.max_delay_ms, 300);
    cr_assert_eq(er_backoff_delay(&job.backoff, 3, NULL), 300);
}

Test(job, applying_defaults_twice_gives_the_same_backoff)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"backoff\":{\"type\":\"fixed\"}}"), 0);
    er_job_defaults q1 = {0}, q2 = {0}, srv;
    er_job_defaults_server(&srv);
    q1.has_backoff = q2.has_backoff = true;
    q1.backoff = (er_backoff){ER_BACKOFF_CAPPED, 100, 200, 0.1};
    q2.backoff = (er_backoff){ER_BACKOFF_EXPONENTIAL, 7000, 9000, 0.9};
    er_job_apply_defaults(&job, &q1, &srv);
    er_job_apply_defaults(&job, &q2, &srv);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_FIXED);
    cr_assert_eq(job.backoff.delay_ms, 7000);
    cr_assert_eq(job.backoff.max_delay_ms, 9000);
}

Test(job, set_flags_round_trip_and_old_rows_read_as_whole_backoff)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"priority\":1,\"backoff\":{\"delay_ms\":9}}"), 0);
    int f = er_job_set_flags(&job);
    cr_assert_eq(f, 8 | 2 | (ER_BACKOFF_GIVEN_DELAY << 4) | ER_FLAG_ID_GENERATED);
    er_job j2;
    er_job_init(&j2);
    er_job_set_flags_apply(&j2, f);
    cr_assert(j2.set_priority && j2.set_backoff && !j2.set_timeout && !j2.set_max_attempts);
    cr_assert(j2.id_generated);
    cr_assert_eq(j2.backoff_given, ER_BACKOFF_GIVEN_DELAY);
    er_job_set_flags_apply(&j2, 2); /* written before the backoff member bits */
    cr_assert_eq(j2.backoff_given, ER_BACKOFF_GIVEN_ALL);
    er_job_set_flags_apply(&j2, 0);
    cr_assert(!j2.set_backoff && j2.backoff_given == 0);
    cr_assert(!j2.id_generated); /* an older row: its id counts as a client's */
}

Test(job, only_a_generated_id_is_flagged_generated)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"id\":\"mine-1\"}"), 0);
    cr_assert(!job.id_generated);
    cr_assert_eq(er_job_set_flags(&job) & ER_FLAG_ID_GENERATED, 0);
    er_job_fini(&job);
    cr_assert_eq(enq("{\"name\":\"a\"}"), 0);
    cr_assert(job.id_generated);
    er_job dead = job, copy;
    dead.state = ER_STATE_DEAD;
    int n = 0;
    cr_assert_eq(er_job_redrive_plan(&dead, 5, &copy, &n, NULL), 0);
    cr_assert(!copy.id_generated, "a redrive id is derived, so it can collide");
    er_job_fini(&copy);
}

Test(job, server_defaults_apply_without_queue_defaults)
{
    cr_assert_eq(enq("{\"name\":\"a\"}"), 0);
    job.max_attempts = 0;
    job.timeout_ms = 0;
    er_job_defaults srv;
    er_job_defaults_server(&srv);
    srv.max_attempts = 11;
    er_job_apply_defaults(&job, NULL, &srv);
    cr_assert_eq(job.max_attempts, 11);
    cr_assert_eq(job.timeout_ms, ER_DEFAULT_TIMEOUT_MS);
}

Test(job, server_defaults_are_the_constants)
{
    er_job_defaults d;
    er_job_defaults_server(&d);
    cr_assert(d.has_max_attempts && d.has_backoff && d.has_timeout && d.has_priority);
    cr_assert_eq(d.max_attempts, ER_DEFAULT_MAX_ATTEMPTS);
    cr_assert_eq(d.timeout_ms, ER_DEFAULT_TIMEOUT_MS);
    cr_assert_eq(d.backoff.max_delay_ms, ER_DEFAULT_BACKOFF_MAX_MS);
}

/* ---- init, fini, copy ---- */

Test(job, fini_is_null_safe_and_idempotent)
{
    er_job_fini(NULL);
    cr_assert_eq(enq("{\"name\":\"a\"}"), 0);
    er_job_fini(&job);
    cr_assert_null(job.id);
    er_job_fini(&job);
}

Test(job, copy_is_deep)
{
    cr_assert_eq(enq("{\"name\":\"a\",\"group\":\"g\",\"trace_id\":\"t\",\"payload\":[1]}"), 0);
    job.lease_owner = strdup("w1");
    job.lease_token = strdup("tok");
    job.last_error = strdup("{\"class\":\"transient\"}");
    job.result = strdup("42");
    job.progress = strdup("{\"p\":1}");
    job.attempts = 3;
    er_job c;
    cr_assert_eq(er_job_copy(&c, &job), 0);
    const char *a[] = {job.id, job.queue, job.name, job.payload, job.group, job.trace_id,
                       job.idempotency_key, job.lease_owner, job.lease_token, job.last_error,
                       job.result, job.progress};
    const char *b[] = {c.id, c.queue, c.name, c.payload, c.group, c.trace_id,
                       c.idempotency_key, c.lease_owner, c.lease_token, c.last_error,
                       c.result, c.progress};
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        cr_assert_str_eq(a[i], b[i]);
        cr_assert_neq((void *)a[i], (void *)b[i], "string %zu is shared", i);
    }
    cr_assert_eq(c.payload_len, job.payload_len);
    cr_assert_eq(c.attempts, 3);
    cr_assert_eq(c.run_at, job.run_at);
    er_job_fini(&c);
}

Test(job, copy_of_empty_job_has_null_strings)
{
    er_job c;
    cr_assert_eq(er_job_copy(&c, &job), 0);
    cr_assert_null(c.id);
    cr_assert_null(c.payload);
    er_job_fini(&c);
}

/* ---- ids ---- */

Test(job, new_id_is_26_hex_chars_led_by_the_time)
{
    char id[32];
    er_job_new_id(T0, &rnd, id);
    cr_assert_eq(strlen(id), 26);
    for (int i = 0; i < 26; i++)
        cr_assert(strchr("0123456789abcdef", id[i]) != NULL);
    char want[16];
    snprintf(want, sizeof want, "%012llx", (unsigned long long)T0);
    cr_assert_eq(strncmp(id, want, 12), 0, "%s starts with %s", id, want);
}

Test(job, new_ids_sort_by_creation_time)
{
    char prev[32], cur[32];
    er_job_new_id(1, &rnd, prev);
    int64_t times[] = {2, 999, 1000, T0, T0 + 1, 0xffffffffffffLL};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        er_job_new_id(times[i], &rnd, cur);
        cr_assert_lt(strcmp(prev, cur), 0, "%s < %s", prev, cur);
        memcpy(prev, cur, sizeof cur);
    }
}

Test(job, new_ids_in_the_same_ms_differ)
{
    char a[32], b[32];
    er_job_new_id(T0, &rnd, a);
    er_job_new_id(T0, &rnd, b);
    cr_assert_str_neq(a, b);
}

Test(job, new_id_is_deterministic_with_a_seed)
{
    er_rand r1, r2;
    er_rand_init_seeded(&r1, 5);
    er_rand_init_seeded(&r2, 5);
    char a[32], b[32];
    er_job_new_id(T0, &r1, a);
    er_job_new_id(T0, &r2, b);
    cr_assert_str_eq(a, b);
}

Test(job, redrive_copy_is_a_fresh_waiting_job_with_the_same_work)
{
    cr_assert_eq(enq("{\"name\":\"charge\",\"payload\":{\"amount\":42},\"id\":\"c-1\","
                     "\"priority\":7,\"max_attempts\":3}"),
                 0);
    job.state = ER_STATE_DEAD;
    job.attempts = 3;
    job.started = 4;
    job.stalled = 1;
    job.last_error = strdup("{\"class\":\"permanent\"}");
    job.finished_at = T0 + 5000;
    job.redrive_count = 2;
    cr_assert_eq(er_job_reset_for_redrive(&job, "c-1-redrive-3", T0 + 9000), 0);
    cr_assert_str_eq(job.id, "c-1-redrive-3");
    cr_assert_eq(job.state, ER_STATE_WAITING);
    cr_assert_eq(job.attempts, 0);
    cr_assert_eq(job.started, 0);
    cr_assert_eq(job.stalled, 0);
    cr_assert_null(job.last_error);
    cr_assert_eq(job.finished_at, 0);
    cr_assert_eq(job.run_at, T0 + 9000);
    cr_assert_eq(job.redrive_count, 0);
    cr_assert_str_eq(job.payload, "{\"amount\":42}");
    cr_assert_eq(job.priority, 7);
    cr_assert_eq(job.max_attempts, 3);
}

/* ---- the Faktory frontend's spec ---- */

static int enq_faktory(const char *name, const er_spec_str *backoff_type)
{
    er_job_fini(&job);
    er_job_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.queue = (er_spec_str){ER_SPEC_SET, "default", 7};
    sp.name = (er_spec_str){ER_SPEC_SET, name, strlen(name)};
    sp.faktory = true;
    if (backoff_type) {
        sp.backoff.kind = ER_SPEC_SET;
        sp.backoff.type = *backoff_type;
    }
    er_job_limits lim = {.payload_max = PMAX};
    return er_job_validate(&sp, &lim, T0, &rnd, &job, &err);
}

Test(job, faktory_spec_without_backoff_gets_faktorys_schedule)
{
    cr_assert_eq(enq_faktory("fk", NULL), 0);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_FAKTORY);
    cr_assert_eq(job.backoff.max_delay_ms, ER_DELAY_MAX_MS);
    cr_assert(job.set_backoff);
    er_job_defaults server;
    er_job_defaults_server(&server);
    er_job_apply_defaults(&job, NULL, &server); /* the server's backoff does not replace it */
    cr_assert_eq(job.backoff.type, ER_BACKOFF_FAKTORY);
    er_job j2;
    er_job_init(&j2);
    er_job_set_flags_apply(&j2, er_job_set_flags(&job)); /* survives the stored flags */
    cr_assert(j2.set_backoff);
    cr_assert_eq(j2.backoff_given, ER_BACKOFF_GIVEN_ALL);
    er_job_fini(&j2);
}

Test(job, faktory_spec_with_a_backoff_keeps_it)
{
    er_spec_str fixed = {ER_SPEC_SET, "fixed", 5};
    cr_assert_eq(enq_faktory("fk", &fixed), 0);
    cr_assert_eq(job.backoff.type, ER_BACKOFF_FIXED);
    er_spec_str fk = {ER_SPEC_SET, "faktory", 7};
    cr_assert_eq(enq_faktory("fk", &fk), ER_EINVAL); /* a request cannot name it */
    cr_assert_str_eq(err.field, "backoff.type");
}
