/* SPDX-License-Identifier: MIT
 *
 * Unit tests for the job model: the enqueue request parser (every field and
 * rule), name and id rules, option defaults, copy/fini, id generation and the
 * JSON view. The clock is a fixed T0 and randomness a seeded er_rand.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"

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

/* Parses `text` as JSON and runs er_job_from_json on it at T0. */
static int enq_max(const char *text, size_t payload_max)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    cr_assert_not_null(o, "bad test JSON %s: %s", text, je.text);
    er_job_fini(&job);
    int rc = er_job_from_json(o, "default", T0, payload_max, &rnd, &job, &err);
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

/* ---- JSON view ---- */

Test(job, to_json_shows_the_api_fields)
{
    cr_assert_eq(enq("{\"name\":\"n\",\"id\":\"j1\",\"payload\":{\"x\":[1,2]},"
                     "\"delay_ms\":1000}"),
                 0);
    job.lease_token = strdup("secret");
    job.last_error = strdup("{\"class\":\"transient\",\"message\":\"boom\"}");
    job.attempts = 2;
    json_t *o = er_job_to_json(&job);
    cr_assert_not_null(o);
    cr_assert_str_eq(json_string_value(json_object_get(o, "id")), "j1");
    cr_assert_str_eq(json_string_value(json_object_get(o, "queue")), "default");
    cr_assert_str_eq(json_string_value(json_object_get(o, "state")), "scheduled");
    cr_assert_str_eq(json_string_value(json_object_get(o, "run_at")),
                     "2026-11-30T02:00:01.000Z");
    cr_assert_str_eq(json_string_value(json_object_get(o, "created_at")),
                     "2026-11-30T02:00:00.000Z");
    json_t *p = json_object_get(o, "payload");
    cr_assert(json_is_object(p), "payload is a parsed value, not a string");
    cr_assert_eq(json_integer_value(json_array_get(json_object_get(p, "x"), 1)), 2);
    cr_assert(json_is_null(json_object_get(o, "group")));
    cr_assert(json_is_null(json_object_get(o, "started_at")));
    cr_assert(json_is_null(json_object_get(o, "lease_owner")));
    cr_assert(json_is_null(json_object_get(o, "result")));
    cr_assert_null(json_object_get(o, "lease_token"), "lease_token is never shown");
    json_t *le = json_object_get(o, "last_error");
    cr_assert_str_eq(json_string_value(json_object_get(le, "message")), "boom");
    cr_assert_eq(json_integer_value(json_object_get(o, "attempts")), 2);
    json_t *b = json_object_get(o, "backoff");
    cr_assert_str_eq(json_string_value(json_object_get(b, "type")), "exponential");
    cr_assert_eq(json_integer_value(json_object_get(b, "delay_ms")), ER_DEFAULT_BACKOFF_DELAY_MS);
    cr_assert_float_eq(json_real_value(json_object_get(b, "jitter")), 0.5, 1e-12);
    const char *keys[] = {"id", "queue", "name", "payload", "state", "priority", "group",
                          "run_at", "max_attempts", "backoff", "timeout_ms", "trace_id",
                          "idempotency_key", "attempts", "started", "stalled", "lease_owner",
                          "lease_expires_at", "last_error", "result", "progress", "created_at",
                          "updated_at", "started_at", "finished_at", "redriven_at",
                          "redrive_count"};
    size_t nkeys = sizeof keys / sizeof keys[0];
    for (size_t i = 0; i < nkeys; i++)
        cr_assert_not_null(json_object_get(o, keys[i]), "missing %s", keys[i]);
    cr_assert_eq(json_object_size(o), nkeys);
    json_decref(o);
}

Test(job, to_json_shows_scalar_payloads_and_results)
{
    cr_assert_eq(enq("{\"name\":\"n\",\"payload\":\"hi\"}"), 0);
    job.result = strdup("[true]");
    job.progress = strdup("50");
    job.lease_owner = strdup("w");
    job.lease_expires_at = T0 + 60000;
    job.group = strdup("g");
    json_t *o = er_job_to_json(&job);
    cr_assert_str_eq(json_string_value(json_object_get(o, "payload")), "hi");
    cr_assert(json_is_true(json_array_get(json_object_get(o, "result"), 0)));
    cr_assert_eq(json_integer_value(json_object_get(o, "progress")), 50);
    cr_assert_str_eq(json_string_value(json_object_get(o, "lease_owner")), "w");
    cr_assert_str_eq(json_string_value(json_object_get(o, "lease_expires_at")),
                     "2026-11-30T02:01:00.000Z");
    cr_assert_str_eq(json_string_value(json_object_get(o, "group")), "g");
    json_decref(o);
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

/* ---- the plain-text fast path (er_job_from_text) ---- */

/* What the server does without the fast path: json_loadb with
 * JSON_REJECT_DUPLICATES, an object check, er_job_from_json. */
static int slow_parse(const char *text, size_t len, er_job *out, er_error *e)
{
    er_rand r;
    er_rand_init_seeded(&r, 7);
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        er_job_init(out);
        return ER_EINVAL;
    }
    int rc = er_job_from_json(o, "q", T0, 64, &r, out, e);
    json_decref(o);
    return rc;
}

static bool fast_parse(const char *text, size_t len, er_job *out)
{
    er_rand r;
    er_rand_init_seeded(&r, 7);
    return er_job_from_text(text, len, "q", T0, 64, &r, out);
}

static bool str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Every field the enqueue parser sets. */
static bool job_same(const er_job *a, const er_job *b)
{
    return str_same(a->id, b->id) && str_same(a->queue, b->queue) &&
           str_same(a->name, b->name) && a->payload_len == b->payload_len &&
           a->payload && b->payload && memcmp(a->payload, b->payload, a->payload_len) == 0 &&
           a->payload[a->payload_len] == '\0' && b->payload[b->payload_len] == '\0' &&
           a->state == b->state && a->priority == b->priority && str_same(a->group, b->group) &&
           a->run_at == b->run_at && a->max_attempts == b->max_attempts &&
           memcmp(&a->backoff, &b->backoff, sizeof a->backoff) == 0 &&
           a->timeout_ms == b->timeout_ms && str_same(a->trace_id, b->trace_id) &&
           str_same(a->idempotency_key, b->idempotency_key) && a->created_at == b->created_at &&
           a->updated_at == b->updated_at && a->set_max_attempts == b->set_max_attempts &&
           a->set_backoff == b->set_backoff && a->set_timeout == b->set_timeout &&
           a->set_priority == b->set_priority && !a->lease_owner && !b->lease_owner &&
           !a->lease_token && !a->last_error && !a->result && !a->progress;
}

static bool job_empty(const er_job *j)
{
    er_job zero;
    memset(&zero, 0, sizeof zero);
    return memcmp(j, &zero, sizeof zero) == 0;
}

/* Checks the fast path's contract on one body: when it accepts, the jansson
 * path accepts too and builds the same job; when it declines, *job is empty.
 * Returns whether it accepted. */
static bool same_as_slow(const char *text, size_t len)
{
    er_job f, s;
    er_error e = {0};
    bool ok = fast_parse(text, len, &f);
    if (!ok) {
        cr_assert(job_empty(&f), "declined %.*s but left the job filled", (int)len, text);
        return false;
    }
    int rc = slow_parse(text, len, &s, &e);
    cr_assert_eq(rc, 0, "fast path accepted %.*s, the JSON path refuses it: %s", (int)len, text,
                 e.message);
    cr_assert(job_same(&f, &s), "fast path and JSON path differ on %.*s (payload %s vs %s)",
              (int)len, text, f.payload, s.payload);
    er_job_fini(&f);
    er_job_fini(&s);
    return true;
}

static bool same(const char *text)
{
    return same_as_slow(text, strlen(text));
}

Test(job_text, common_requests_take_the_fast_path_and_match_the_json_path)
{
    static const char *const bodies[] = {
        "{\"name\":\"noop\",\"payload\":{\"n\":1}}",
        "{\"name\":\"noop\"}",
        " {\r\n\t\"name\" : \"a.b:c-d_e\" , \"payload\" : [ 1 , -2 , 0 , true , false , null ,"
        " \"x y\" , { } , [ ] , {\"k\" : { \"k\" : [ ] } } ] } \n",
        "{\"payload\":null,\"name\":\"a\"}",
        "{\"payload\":\"text\",\"name\":\"a\"}",
        "{\"payload\":-123456789012345678,\"name\":\"a\"}",
        "{\"payload\":{\"\":0,\"a\":{\"a\":1},\"b\":{\"a\":2}},\"name\":\"a\"}",
        "{\"name\":\"n\",\"payload\":{\"to\":\"a@b\"},\"id\":\"job-1\",\"priority\":1000,"
        "\"delay_ms\":5000,\"max_attempts\":3,\"timeout_ms\":1,\"group\":\"tenant:42\","
        "\"trace_id\":\"tr~1\",\"idempotency_key\":\"key-1\"}",
        "{\"name\":\"a\",\"id\":null,\"priority\":null,\"delay_ms\":null,\"run_at\":null,"
        "\"max_attempts\":null,\"backoff\":null,\"timeout_ms\":null,\"group\":null,"
        "\"trace_id\":null,\"idempotency_key\":null}",
        "{\"name\":\"a\",\"delay_ms\":0,\"priority\":0,\"max_attempts\":1}",
        "{\"name\":\"a\",\"delay_ms\":31622400000,\"timeout_ms\":86400000}",
        "{\"name\":\"a\",\"id\":\"!#$%&'()*+,-.:;<=>?@[]^_`{|}~\"}",
        "{\"name\":\"a\",\"payload\":\"~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\"}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        cr_assert(same(bodies[i]), "declined %s", bodies[i]);
}

Test(job_text, what_it_is_not_sure_of_is_declined)
{
    static const char *const bodies[] = {
        /* the JSON path's errors */
        "", "{", "{}", "[]", "\"x\"", "{\"name\":\"a\"", "{\"name\":\"a\"}x", "{\"name\":\"a\"},",
        "{\"name\":\"a\",}", "{,\"name\":\"a\"}", "{\"name\" \"a\"}", "{\"name\":\"a\" \"id\":\"b\"}",
        "{\"name\":\"a\",\"name\":\"b\"}", "{\"name\":\"a\",\"payload\":{\"k\":1,\"k\":2}}",
        "{\"name\":\"a\",\"payload\":{\"k\":{\"x\":1,\"y\":2,\"x\":3}}}",
        "{\"name\":\"a\",\"payload\":[1,]}", "{\"name\":\"a\",\"payload\":01}",
        "{\"name\":\"a\",\"payload\":+1}", "{\"name\":\"a\",\"payload\":-}",
        "{\"name\":\"a\",\"payload\":tru}", "{\"name\":\"a\",\"payload\":nullx}",
        "{\"name\":\"a\",\"payload\":\f1}",
        "{\"name\":\"a\",\"payload\":\"\x01\"}", "{\"name\":\"\"}", "{\"name\":\"a b\"}",
        "{\"name\":null}", "{\"name\":1}", "{\"payload\":{}}", "{\"name\":\"a\",\"x\":1}",
        "{\"name\":\"a\",\"priority\":1001}", "{\"name\":\"a\",\"priority\":-1}",
        "{\"name\":\"a\",\"priority\":\"1\"}", "{\"name\":\"a\",\"priority\":1.0}",
        "{\"name\":\"a\",\"priority\":1e2}", "{\"name\":\"a\",\"max_attempts\":0}",
        "{\"name\":\"a\",\"timeout_ms\":0}", "{\"name\":\"a\",\"timeout_ms\":86400001}",
        "{\"name\":\"a\",\"delay_ms\":31622400001}", "{\"name\":\"a\",\"delay_ms\":-1}",
        "{\"name\":\"a\",\"id\":\"a/b\"}", "{\"name\":\"a\",\"id\":\"a b\"}",
        "{\"name\":\"a\",\"id\":\"\"}", "{\"name\":\"a\",\"group\":\"a/b\"}",
        "{\"name\":\"a\",\"trace_id\":7}", "{\"name\":\"a\",\"idempotency_key\":\" \"}",
        "{\"name\":\"a\",\"payload\":{\"p\":\"" "0123456789012345678901234567890123456789"
        "0123456789012345678901234567890123456789\"}}", /* over the 64-byte limit */
        /* valid, but left to the JSON path */
        "{\"name\":\"a\",\"payload\":\"\\n\"}", "{\"name\":\"a\\u0062\"}",
        "{\"name\":\"a\",\"payload\":\"\xc3\xa9\"}", "{\"name\":\"a\",\"payload\":1.5}",
        "{\"name\":\"a\",\"payload\":-0}", "{\"name\":\"a\",\"payload\":1234567890123456789}",
        "{\"name\":\"a\",\"payload\":\"\x7f\"}",
        "{\"name\":\"a\",\"backoff\":{\"type\":\"fixed\"}}",
        "{\"name\":\"a\",\"run_at\":\"2026-11-30T02:00:00.000Z\"}", "{\"jobs\":[{\"name\":\"a\"}]}",
        "\xef\xbb\xbf{\"name\":\"a\"}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        cr_assert(!same(bodies[i]), "accepted %s", bodies[i]);
    /* an embedded NUL byte and a body cut short */
    cr_assert(!same_as_slow("{\"name\":\"a\"}\0", 13));
    cr_assert(!same_as_slow("{\"name\":\"a\"}", 11));
}

Test(job_text, nesting_and_width_beyond_its_bounds_are_declined)
{
    char deep[256];
    int n = snprintf(deep, sizeof deep, "{\"name\":\"a\",\"payload\":");
    for (int i = 0; i < 16; i++)
        deep[n++] = '[';
    for (int i = 0; i < 16; i++)
        deep[n++] = ']';
    memcpy(deep + n, "}", 2);
    cr_assert(same(deep), "16 levels are followed");
    memmove(deep + 23, deep + 22, strlen(deep + 22) + 1);
    deep[22] = '[';
    char *close = strrchr(deep, '}');
    memmove(close + 1, close, 2);
    *close = ']';
    cr_assert(!same(deep), "17 levels are declined: %s", deep);

    char wide[1024];
    n = snprintf(wide, sizeof wide, "{\"name\":\"a\",\"payload\":{");
    for (int i = 0; i < 33; i++)
        n += snprintf(wide + n, sizeof wide - (size_t)n, "%s\"%d\":0", i ? "," : "", i);
    memcpy(wide + n, "}}", 3);
    er_job f;
    er_rand r;
    er_rand_init_seeded(&r, 1);
    cr_assert(!er_job_from_text(wide, strlen(wide), "q", T0, PMAX, &r, &f), "33 members");
    cr_assert(job_empty(&f));
    char *last = strstr(wide, ",\"32\":0");
    memmove(last, last + 7, strlen(last + 7) + 1);
    cr_assert(er_job_from_text(wide, strlen(wide), "q", T0, PMAX, &r, &f), "32 members: %s", wide);
    er_job_fini(&f);
}

Test(job_text, a_padded_body_keeps_only_the_compact_payload)
{
    char body[4096];
    int n = snprintf(body, sizeof body, "{\"name\":\"a\",\"payload\":{\"k\":");
    memset(body + n, ' ', 3000);
    n += 3000;
    snprintf(body + n, sizeof body - (size_t)n, "[1, 2]}}");
    er_job f;
    er_rand r;
    er_rand_init_seeded(&r, 1);
    cr_assert(er_job_from_text(body, strlen(body), "q", T0, PMAX, &r, &f));
    cr_assert_str_eq(f.payload, "{\"k\":[1,2]}");
    cr_assert_eq(f.payload_len, 11);
    er_job_fini(&f);
}

Test(job_text, a_declined_request_draws_no_random_id)
{
    er_rand r;
    er_rand_init_seeded(&r, 5);
    er_job f;
    cr_assert(!er_job_from_text("{\"name\":\"a\",\"x\":1}", 18, "q", T0, PMAX, &r, &f));
    char a[32], b[32];
    er_job_new_id(T0, &r, a);
    er_rand_init_seeded(&r, 5);
    er_job_new_id(T0, &r, b);
    cr_assert_str_eq(a, b);
}

/* Random edits of valid bodies: whatever the fast path accepts, the JSON
 * path accepts with the same job. */
Test(job_text, random_edits_never_make_the_two_paths_disagree, .timeout = 60)
{
    static const char *const seeds[] = {
        "{\"name\":\"noop\",\"payload\":{\"n\":12,\"m\":[1,2,{\"a\":null}]}}",
        "{ \"name\" : \"a\", \"id\" : \"x-1\", \"priority\" : 5, \"delay_ms\" : 10, "
        "\"max_attempts\" : 2, \"timeout_ms\" : 9, \"group\" : \"g\", \"trace_id\" : \"t\", "
        "\"idempotency_key\" : \"k\", \"payload\" : [true,false,null,\"s\",-7] }",
        "{\"payload\":{\"a\":{\"b\":{\"c\":[[],[{}]]}},\"d\":\"e\"},\"name\":\"z\"}",
    };
    static const char alphabet[] = "{}[]:,\" \n\t-0123456789.eEtruefalsn\\abxyz/\x01\xc3\x7f";
    er_rand r;
    er_rand_init_seeded(&r, 2026);
    size_t accepted = 0;
    for (int iter = 0; iter < 200000; iter++) {
        char buf[512];
        const char *seed = seeds[iter % 3];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        int edits = 1 + (int)(r.next(&r) % 3);
        for (int e = 0; e < edits; e++) {
            size_t pos = (size_t)(r.next(&r) % (len + 1));
            char ch = alphabet[r.next(&r) % (sizeof alphabet - 1)];
            switch (r.next(&r) % 3) {
            case 0: /* replace */
                if (pos < len)
                    buf[pos] = ch;
                break;
            case 1: /* insert */
                if (len + 1 < sizeof buf) {
                    memmove(buf + pos + 1, buf + pos, len - pos);
                    buf[pos] = ch;
                    len++;
                }
                break;
            default: /* delete */
                if (pos < len) {
                    memmove(buf + pos, buf + pos + 1, len - pos - 1);
                    len--;
                }
            }
        }
        accepted += same_as_slow(buf, len);
    }
    cr_assert_gt(accepted, 1000, "the edits should leave many bodies valid");
}

/* ---- er_job_write_json against the generic writer ---- */

/* The writer as it was before the pre-made keys: er_jsonw_key plus a value
 * call per member. The fast path must produce the same bytes. */
static void ref_text(er_jsonw *w, const char *key, const char *text, size_t len)
{
    er_jsonw_key(w, key);
    er_jsonw_raw(w, text, text ? len : 0);
}

static size_t ref_len(const char *s)
{
    return s ? strlen(s) : 0;
}

static void ref_write_json(const er_job *j, er_jsonw *w)
{
    static const char *const bnames[] = {"exponential", "fixed", "capped"};
    int t = (int)j->backoff.type >= 0 && (int)j->backoff.type < 3 ? (int)j->backoff.type : 0;
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "id");
    er_jsonw_str(w, j->id);
    er_jsonw_key(w, "queue");
    er_jsonw_str(w, j->queue);
    er_jsonw_key(w, "name");
    er_jsonw_str(w, j->name);
    ref_text(w, "payload", j->payload, j->payload_len);
    er_jsonw_key(w, "state");
    er_jsonw_str(w, er_state_name(j->state));
    er_jsonw_key(w, "priority");
    er_jsonw_int(w, j->priority);
    er_jsonw_key(w, "group");
    er_jsonw_str(w, j->group);
    er_jsonw_key(w, "run_at");
    er_jsonw_time(w, j->run_at);
    er_jsonw_key(w, "max_attempts");
    er_jsonw_int(w, j->max_attempts);
    er_jsonw_key(w, "backoff");
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "type");
    er_jsonw_str(w, bnames[t]);
    er_jsonw_key(w, "delay_ms");
    er_jsonw_int(w, j->backoff.delay_ms);
    er_jsonw_key(w, "max_delay_ms");
    er_jsonw_int(w, j->backoff.max_delay_ms);
    er_jsonw_key(w, "jitter");
    er_jsonw_double(w, j->backoff.jitter);
    er_jsonw_end_object(w);
    er_jsonw_key(w, "timeout_ms");
    er_jsonw_int(w, j->timeout_ms);
    er_jsonw_key(w, "trace_id");
    er_jsonw_str(w, j->trace_id);
    er_jsonw_key(w, "idempotency_key");
    er_jsonw_str(w, j->idempotency_key);
    er_jsonw_key(w, "attempts");
    er_jsonw_int(w, j->attempts);
    er_jsonw_key(w, "started");
    er_jsonw_int(w, j->started);
    er_jsonw_key(w, "stalled");
    er_jsonw_int(w, j->stalled);
    er_jsonw_key(w, "lease_owner");
    er_jsonw_str(w, j->lease_owner);
    er_jsonw_key(w, "lease_expires_at");
    er_jsonw_time(w, j->lease_expires_at);
    ref_text(w, "last_error", j->last_error, ref_len(j->last_error));
    ref_text(w, "result", j->result, ref_len(j->result));
    ref_text(w, "progress", j->progress, ref_len(j->progress));
    er_jsonw_key(w, "created_at");
    er_jsonw_time(w, j->created_at);
    er_jsonw_key(w, "updated_at");
    er_jsonw_time(w, j->updated_at);
    er_jsonw_key(w, "started_at");
    er_jsonw_time(w, j->started_at);
    er_jsonw_key(w, "finished_at");
    er_jsonw_time(w, j->finished_at);
    er_jsonw_key(w, "redriven_at");
    er_jsonw_time(w, j->redriven_at);
    er_jsonw_key(w, "redrive_count");
    er_jsonw_int(w, j->redrive_count);
    er_jsonw_end_object(w);
}

/* Both writers inside an array after one element (so the object itself
 * follows a comma), under cap `max`; same bytes and same failure. */
static void same_as_reference(const er_job *j, size_t max)
{
    er_jsonw a, b;
    er_jsonw_init(&a, max);
    er_jsonw_init_buf(&b, max, malloc(16), 16);
    er_jsonw_begin_array(&a);
    er_jsonw_begin_array(&b);
    er_jsonw_int(&a, 7);
    er_jsonw_int(&b, 7);
    ref_write_json(j, &a);
    er_job_write_json(j, &b);
    er_jsonw_end_array(&a);
    er_jsonw_end_array(&b);
    cr_assert_eq(a.failed, b.failed, "cap %zu", max);
    if (!a.failed) {
        cr_assert_eq(a.len, b.len);
        cr_assert_str_eq(b.buf, a.buf);
    }
    er_jsonw_fini(&a);
    er_jsonw_fini(&b);
}

static void same_at_every_cap(const er_job *j)
{
    same_as_reference(j, (size_t)1 << 20);
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 20);
    ref_write_json(j, &w);
    size_t full = w.len;
    er_jsonw_fini(&w);
    for (size_t max = 0; max < full + 8; max++)
        same_as_reference(j, max);
}

Test(job, write_json_matches_the_generic_writer_when_unset)
{
    er_job j;
    er_job_init(&j); /* every string NULL, every time 0 */
    same_at_every_cap(&j);
}

Test(job, write_json_matches_the_generic_writer_with_every_field)
{
    cr_assert_eq(enq("{\"name\":\"n\",\"id\":\"j1\",\"payload\":{\"x\":[1,2]},"
                     "\"priority\":1000,\"group\":\"g\",\"delay_ms\":1000,\"max_attempts\":9,"
                     "\"timeout_ms\":5000,\"trace_id\":\"t\",\"idempotency_key\":\"k\","
                     "\"backoff\":{\"type\":\"fixed\",\"delay_ms\":3,\"max_delay_ms\":4,"
                     "\"jitter\":0.25}}"),
                 0);
    job.attempts = 2;
    job.started = 3;
    job.stalled = 1;
    job.lease_owner = strdup("worker-1");
    job.lease_token = strdup("secret");
    job.lease_expires_at = T0 + 60000;
    job.last_error = strdup("{\"class\":\"transient\",\"message\":\"boom\"}");
    job.result = strdup("[true]");
    job.progress = strdup("50");
    job.updated_at = T0 + 1;
    job.started_at = T0 + 2;
    job.finished_at = T0 + 3;
    job.redriven_at = T0 + 4;
    job.redrive_count = 5;
    same_at_every_cap(&job);
    for (int s = ER_STATE_SCHEDULED; s <= ER_STATE_CANCELLED; s++) {
        job.state = (er_state)s;
        same_as_reference(&job, (size_t)1 << 20);
    }
}

Test(job, write_json_matches_the_generic_writer_with_escapes_and_extremes)
{
    er_job j;
    er_job_init(&j);
    j.id = strdup("q\"uote\\back");
    j.queue = strdup("nl\n tab\t ctl\x01\x1f");
    j.name = strdup("utf8 \xc3\xa9");
    j.payload = strdup("\"x\"");
    j.payload_len = 3;
    j.group = strdup("");
    j.trace_id = strdup("\"");
    j.idempotency_key = strdup("\\");
    j.lease_owner = strdup("\x7f");
    j.priority = -1;
    j.max_attempts = 2147483647;
    j.timeout_ms = INT64_MIN;
    j.backoff.type = (er_backoff_type)7; /* out of range: written as the first */
    j.backoff.delay_ms = INT64_MAX;
    j.backoff.jitter = 1.0;
    j.run_at = -1;                       /* before the epoch */
    j.created_at = 253402300800000LL;    /* year 10000 */
    j.lease_expires_at = 1;
    j.redrive_count = -2147483647 - 1;
    same_at_every_cap(&j);
    er_job_fini(&j);
}
