/* SPDX-License-Identifier: MIT
 *
 * Unit tests for schedulers (core/scheduler.h): spec validation with a
 * clear error per field (specs read from the API's JSON by the HTTP
 * frontend's reader, and typed specs built by hand), copies, the job of a
 * tick, and the missed-run planner driven by an injected clock: each policy
 * after a gap, bounded work after a long downtime, and a whole simulated
 * year of an hourly schedule in a DST zone giving exactly one run per
 * distinct tick. The stored text of a spec is tested with its codec
 * (tests/store/test_sched_codec.c).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/scheduler.h"
#include "server/http/sched_json.h"

#define HOUR 3600000LL
#define MIN 60000LL

static er_error err;
static er_scheduler S;
static er_rand R;

static void setup(void)
{
    er_error_clear(&err);
    er_scheduler_init(&S);
    er_rand_init_seeded(&R, 3);
}

static void teardown(void)
{
    er_scheduler_fini(&S);
}

TestSuite(scheduler, .init = setup, .fini = teardown);

/* Reads a spec as PUT does (limit: the payload's), validates it into S and,
 * with zone, looks its zone up and attaches it, as the engine does. */
static int parse_max(const char *text, bool zone, size_t limit)
{
    json_error_t je;
    json_t *o = json_loads(text, JSON_DECODE_ANY, &je);
    cr_assert_not_null(o, "bad test JSON %s: %s", text, je.text);
    er_scheduler_fini(&S);
    er_sched_spec sp;
    int rc = er_http_sched_spec_from_json(o, &sp, &err);
    if (rc == 0)
        rc = er_sched_validate(&sp, limit, &S, &err);
    er_sched_spec_fini(&sp);
    json_decref(o);
    const er_tz *tz;
    if (rc == 0 && zone && (rc = er_tz_get(S.tz_name, &tz, &err)) == 0)
        rc = er_scheduler_set_zone(&S, tz, &err);
    return rc;
}

static int parse_text(const char *text, bool zone)
{
    return parse_max(text, zone, 1024);
}

static void parse_ok(const char *text)
{
    cr_assert_eq(parse_text(text, true), 0, "%s: %s (%s)", text, err.message, err.field);
}

static void refused(const char *text, const char *field)
{
    cr_assert_lt(parse_text(text, true), 0, "%s should be refused", text);
    cr_assert_str_eq(err.field, field, "%s: field %s, message %s", text, err.field, err.message);
    cr_assert_neq(err.message[0], '\0');
}

static int64_t at(const char *rfc3339)
{
    int64_t ms;
    cr_assert_eq(er_time_parse(rfc3339, &ms), 0, "%s", rfc3339);
    return ms;
}

Test(scheduler, minimal_spec_gets_the_documented_defaults)
{
    parse_ok("{\"cron\":\" 0 3 * * * \",\"queue\":\"billing\",\"name\":\"invoice\"}");
    cr_assert_str_eq(S.cron_text, "0 3 * * *");
    cr_assert_str_eq(S.tz_name, "UTC");
    cr_assert_not_null(S.tz);
    cr_assert_eq(S.missed, ER_MISSED_SKIP);
    cr_assert_eq(S.max_catchup, ER_SCHED_CATCHUP_DEFAULT);
    cr_assert_str_eq(S.payload, "{}");
    cr_assert(!S.has_job);
}

Test(scheduler, bad_input_is_refused_naming_the_field)
{
    refused("{\"cron\":\"0 25 * * *\",\"queue\":\"q\",\"name\":\"n\"}", "cron");
    refused("{\"cron\":\"\",\"queue\":\"q\",\"name\":\"n\"}", "cron");
    refused("{\"cron\":7,\"queue\":\"q\",\"name\":\"n\"}", "cron");
    refused("{\"queue\":\"q\",\"name\":\"n\"}", "cron");
    refused("{\"cron\":\"0 0 30 2 *\",\"queue\":\"q\",\"name\":\"n\"}", "cron");
    refused("{\"cron\":\"@daily\",\"tz\":\"Mars/Olympus\",\"queue\":\"q\",\"name\":\"n\"}", "tz");
    refused("{\"cron\":\"@daily\",\"tz\":\"../etc/passwd\",\"queue\":\"q\",\"name\":\"n\"}", "tz");
    refused("{\"cron\":\"@daily\",\"queue\":\"bad queue\",\"name\":\"n\"}", "queue");
    refused("{\"cron\":\"@daily\",\"name\":\"n\"}", "queue");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"\"}", "name");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"payload\":[1]}", "payload");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"missed\":\"sometimes\"}",
            "missed");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"max_catchup\":0}",
            "max_catchup");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"max_catchup\":1001}",
            "max_catchup");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"max_catchup\":1e9}",
            "max_catchup");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"every\":1}", "every");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"job\":{\"id\":\"x\"}}",
            "job.id");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"job\":{\"priority\":5000}}",
            "job.priority");
    refused("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\",\"job\":3}", "job");
    cr_assert_eq(parse_text("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\","
                            "\"payload\":{\"big\":\"" "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                            "\"}}", true), 0);
}

/* Refusals with the API's messages (captured from the release before specs
 * were typed; the HTTP reader and core's validator must keep them). */
#define B "{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\","
static const struct {
    const char *body, *field, *message;
} refusals[] = {
    {"[1]", "body", "a scheduler spec must be a JSON object"},
    {"{}", "cron", "cron is required"},
    {"{\"cron\":null}", "cron", "cron is required"},
    {"{\"cron\":7}", "cron", "cron must be a string"},
    {"{\"cron\":\"   \"}", "cron", "cron must not be empty"},
    {"{\"cron\":\"0 25 * * *\"}", "cron", "hour: 25 is out of range 0..23"},
    {"{\"cron\":\"@daily\",\"tz\":5}", "tz", "tz must be a string"},
    {"{\"cron\":\"@daily\",\"tz\":\"../etc/passwd\"}", "tz",
     "tz '../etc/passwd' is not a valid zone name"},
    {"{\"cron\":\"@daily\",\"queue\":3}", "queue", "queue must be a string"},
    {"{\"cron\":\"@daily\",\"name\":\"n\"}", "queue", "queue is required"},
    {"{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"\"}", "name",
     "name must be 1..128 characters of [A-Za-z0-9_.:-]"},
    {B "\"payload\":3}", "payload", "payload must be a JSON object (the tick adds run_key to it)"},
    {B "\"missed\":1}", "missed", "missed must be a string"},
    {B "\"missed\":\"sometimes\"}", "missed", "missed must be skip, once or all"},
    {B "\"max_catchup\":2.0}", "max_catchup", "max_catchup must be an integer 1..1000"},
    {B "\"max_catchup\":\"24\"}", "max_catchup", "max_catchup must be an integer 1..1000"},
    {"{\"cron\":7,\"every\":1}", "every", "unknown field every"},
    {B "\"job\":[]}", "job", "job must be an object of job options"},
    {B "\"job\":{\"run_at\":\"x\",\"priority\":99}}", "job.run_at", "unknown field job.run_at"},
    {B "\"job\":{\"priority\":\"1\"}}", "job.priority", "priority must be an integer 0..1000"},
    {B "\"job\":{\"max_attempts\":0}}", "job.max_attempts",
     "max_attempts must be an integer 1..1000"},
    {B "\"job\":{\"timeout_ms\":0}}", "job.timeout_ms",
     "timeout_ms must be an integer 1..86400000"},
    {B "\"job\":{\"group\":5}}", "job.group", "group must be a string"},
    {B "\"job\":{\"trace_id\":\"\"}}", "job.trace_id",
     "trace_id must be 1..200 printable ASCII characters without spaces or '/'"},
    {B "\"job\":{\"backoff\":3}}", "job.backoff",
     "backoff must be an object {type, delay_ms, max_delay_ms, jitter}"},
    {B "\"job\":{\"backoff\":{\"kind\":\"x\"}}}", "job.backoff.kind",
     "backoff.kind is not a known field"},
    {B "\"job\":{\"backoff\":{\"type\":5}}}", "job.backoff.type",
     "backoff.type must be \"exponential\", \"fixed\" or \"capped\""},
    {B "\"job\":{\"backoff\":{\"delay_ms\":-1}}}", "job.backoff.delay_ms",
     "backoff.delay_ms must be an integer 0..31622400000"},
    {B "\"job\":{\"backoff\":{\"jitter\":\"x\"}}}", "job.backoff.jitter",
     "backoff.jitter must be a number 0..1"},
    {B "\"job\":{\"backoff\":{\"delay_ms\":100,\"max_delay_ms\":10}}}",
     "job.backoff.max_delay_ms", "backoff.max_delay_ms must be >= delay_ms"},
    {B "\"job\":{\"" "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\":1}}",
     "job.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
     "unknown field job.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},
};
#undef B

Test(scheduler, every_refusal_has_the_api_field_and_message)
{
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        cr_assert_eq(parse_text(refusals[i].body, false), ER_EINVAL, "%s", refusals[i].body);
        cr_assert_str_eq(err.field, refusals[i].field, "%s", refusals[i].body);
        cr_assert_str_eq(err.message, refusals[i].message, "%s", refusals[i].body);
        cr_assert_null(S.cron_text);
        cr_assert_null(S.opts_text);
    }
}

/* A typed spec as a frontend other than HTTP would fill it: no JSON. */
static er_sched_spec typed(void)
{
    return (er_sched_spec){
        .cron = {ER_SPEC_SET, "0 3 * * *", 9},
        .queue = {ER_SPEC_SET, "billing", 7},
        .name = {ER_SPEC_SET, "invoice", 7},
        .payload = {ER_SPEC_SET, "{\"z\":1,\"run_key\":\"x\",\"a\":2}", 27},
    };
}

Test(scheduler, typed_values_are_checked_without_json)
{
    er_sched_spec sp = typed();
    sp.missed = (er_spec_str){ER_SPEC_BAD_TYPE, NULL, 0};
    cr_assert_eq(er_sched_validate(&sp, 1024, &S, &err), ER_EINVAL);
    cr_assert_str_eq(err.message, "missed must be a string");
    sp = typed();
    sp.job = ER_SPEC_SET;
    sp.opts.unknown = (er_spec_str){ER_SPEC_SET, "idempotency_key", 15};
    cr_assert_eq(er_sched_validate(&sp, 1024, &S, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "job.idempotency_key");
    sp = typed();
    sp.job = ER_SPEC_SET;
    sp.opts.backoff = (er_backoff_spec){.kind = ER_SPEC_SET, .jitter = {ER_SPEC_SET, 1.5}};
    cr_assert_eq(er_sched_validate(&sp, 1024, &S, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "job.backoff.jitter");
    sp.opts.backoff.jitter.v = 0.25;
    cr_assert_eq(er_sched_validate(&sp, 1024, &S, &err), 0, "%s", err.message);
    cr_assert(S.has_job);
    cr_assert_eq(S.opts.backoff.jitter.v, 0.25);
}

Test(scheduler, null_options_are_kept_and_tick_jobs_ignore_them)
{
    er_sched_spec sp = typed();
    sp.job = ER_SPEC_SET;
    sp.opts.priority = (er_spec_int){ER_SPEC_NULL, 0};
    sp.opts.group = (er_spec_str){ER_SPEC_NULL, NULL, 0};
    sp.opts.trace_id = (er_spec_str){ER_SPEC_SET, "tr-1", 4};
    sp.opts.backoff = (er_backoff_spec){.kind = ER_SPEC_SET, .type = {ER_SPEC_SET, "fixed", 5},
                                        .delay_ms = {ER_SPEC_NULL, 0}};
    cr_assert_eq(er_sched_validate(&sp, 1024, &S, &err), 0, "%s", err.message);
    cr_assert_eq(S.opts.priority.kind, ER_SPEC_NULL);
    cr_assert_eq(S.opts.group.kind, ER_SPEC_NULL);
    cr_assert_eq(S.opts.backoff.delay_ms.kind, ER_SPEC_NULL);
    er_job j;
    int64_t tick = at("2026-11-30T03:00:00Z");
    cr_assert_eq(er_scheduler_job(&S, "k", tick, tick, &R, &j, &err), 0, "%s", err.message);
    cr_assert(!j.set_priority);
    cr_assert_null(j.group);
    cr_assert_str_eq(j.trace_id, "tr-1");
    cr_assert(j.set_backoff);
    cr_assert_eq(j.backoff_given, ER_BACKOFF_GIVEN_TYPE);
    cr_assert_eq(j.backoff.type, ER_BACKOFF_FIXED);
    /* run_key replaced where it stands, the other members in their order */
    cr_assert_str_eq(j.payload, "{\"z\":1,\"run_key\":\"2026-11-30T03:00:00.000Z\",\"a\":2}");
    er_job_fini(&j);
}

Test(scheduler, a_copy_owns_its_own_strings)
{
    parse_ok("{\"cron\":\"0 3 * * *\",\"tz\":\"Europe/London\",\"queue\":\"q\",\"name\":\"n\","
             "\"payload\":{\"a\":1},\"missed\":\"all\",\"max_catchup\":7,"
             "\"job\":{\"group\":\"g\",\"trace_id\":\"t\",\"backoff\":{\"type\":\"capped\"}}}");
    er_scheduler c;
    cr_assert_eq(er_scheduler_copy(&c, &S, &err), 0);
    er_scheduler_fini(&S);
    parse_ok("{\"cron\":\"@daily\",\"queue\":\"other\",\"name\":\"x\"}");
    cr_assert_str_eq(c.cron_text, "0 3 * * *");
    cr_assert_str_eq(c.tz_name, "Europe/London");
    cr_assert_not_null(c.tz);
    cr_assert_str_eq(c.payload, "{\"a\":1}");
    cr_assert_eq(c.missed, ER_MISSED_ALL);
    cr_assert_eq(c.max_catchup, 7);
    cr_assert(c.has_job);
    cr_assert_eq(c.opts.group.n, 1);
    cr_assert_eq(memcmp(c.opts.group.s, "g", 1), 0);
    cr_assert_str_eq(c.opts.trace_id.s, "t");
    cr_assert_str_eq(c.opts.backoff.type.s, "capped");
    er_scheduler_fini(&c);
}

Test(scheduler, payload_limit_is_enforced)
{
    cr_assert_eq(parse_max("{\"cron\":\"@daily\",\"queue\":\"q\",\"name\":\"n\","
                           "\"payload\":{\"a\":\"0123456789012345678901234567890123456789\"}}",
                           false, 20), ER_ETOOBIG);
    cr_assert_str_eq(err.field, "payload");
    cr_assert_str_eq(err.message, "payload is 48 bytes; the limit is 20");
    cr_assert_null(S.payload);
}

Test(scheduler, parsing_checks_only_the_zone_name)
{
    cr_assert_eq(parse_text("{\"cron\":\"@daily\",\"tz\":\"Mars/Olympus\",\"queue\":\"q\","
                            "\"name\":\"n\"}", false), 0);
    cr_assert_null(S.tz);
    cr_assert_str_eq(S.tz_name, "Mars/Olympus");
    cr_assert_eq(parse_text("{\"cron\":\"@daily\",\"tz\":\"a b\",\"queue\":\"q\",\"name\":\"n\"}",
                            false), ER_EINVAL);
    cr_assert_str_eq(err.field, "tz");
    cr_assert_str_eq(err.message, "tz 'a b' is not a valid zone name");
}

Test(scheduler, a_zone_where_it_never_fires_is_not_attached)
{
    cr_assert_eq(parse_text("{\"cron\":\"0 0 30 2 *\",\"tz\":\"Asia/Ho_Chi_Minh\","
                            "\"queue\":\"q\",\"name\":\"n\"}", false), 0);
    const er_tz *tz;
    cr_assert_eq(er_tz_get(S.tz_name, &tz, &err), 0);
    cr_assert_eq(er_scheduler_set_zone(&S, tz, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "cron");
    cr_assert_str_eq(err.message, "cron '0 0 30 2 *' never fires");
    cr_assert_null(S.tz);
    cr_assert_eq(parse_text("{\"cron\":\"0 0 29 2 *\",\"tz\":\"Asia/Ho_Chi_Minh\","
                            "\"queue\":\"q\",\"name\":\"n\"}", true), 0);
    cr_assert_eq(S.tz, tz);
}

Test(scheduler, tick_job_has_the_tick_id_and_run_key)
{
    parse_ok("{\"cron\":\"0 3 * * *\",\"queue\":\"billing\",\"name\":\"invoice\","
             "\"payload\":{\"plan\":\"pro\",\"run_key\":\"ignored\"},"
             "\"job\":{\"priority\":7,\"max_attempts\":2}}");
    int64_t tick = at("2026-11-30T03:00:00Z");
    er_job j;
    cr_assert_eq(er_scheduler_job(&S, "nightly", tick, tick + 5, &R, &j, &err), 0, "%s",
                 err.message);
    cr_assert_str_eq(j.id, "sched:nightly:2026-11-30T03:00:00.000Z");
    cr_assert_str_eq(j.queue, "billing");
    cr_assert_str_eq(j.name, "invoice");
    cr_assert_eq(j.priority, 7);
    cr_assert_eq(j.max_attempts, 2);
    cr_assert_eq(j.state, ER_STATE_WAITING);
    json_t *p = json_loads(j.payload, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(p, "run_key")), "2026-11-30T03:00:00.000Z");
    cr_assert_str_eq(json_string_value(json_object_get(p, "plan")), "pro");
    json_decref(p);
    er_job_fini(&j);
    char id[ER_ID_MAX + 1];
    er_scheduler_tick_id("nightly", tick, id);
    cr_assert_str_eq(id, "sched:nightly:2026-11-30T03:00:00.000Z");
}

Test(scheduler, local_times_carry_the_zone_offset)
{
    parse_ok("{\"cron\":\"@daily\",\"tz\":\"America/New_York\",\"queue\":\"q\",\"name\":\"n\"}");
    char buf[32];
    er_time_format_local(at("2026-03-08T08:00:00Z"), S.tz, buf);
    cr_assert_str_eq(buf, "2026-03-08T04:00:00-04:00");
    er_time_format_local(at("2026-01-08T08:00:00Z"), S.tz, buf);
    cr_assert_str_eq(buf, "2026-01-08T03:00:00-05:00");
}

/* ---- the planner ---- */

static er_sched_plan plan(int64_t next_run_at, int64_t now, int64_t on_time_after)
{
    er_sched_plan p;
    cr_assert_eq(er_scheduler_plan(&S, next_run_at, now, on_time_after, &p, &err), 0);
    return p;
}

Test(scheduler, nothing_is_due_before_next_run_at)
{
    parse_ok("{\"cron\":\"0 * * * *\",\"queue\":\"q\",\"name\":\"n\"}");
    int64_t t = at("2026-05-01T10:00:00Z");
    er_sched_plan p = plan(t, t - 1, t - 1 - ER_SCHED_GRACE_MS);
    cr_assert_eq(p.n, 0);
    cr_assert_eq(p.next_run_at, t);
    er_sched_plan_fini(&p);
}

Test(scheduler, an_on_time_tick_fires_whatever_the_policy)
{
    const char *pol[] = {"skip", "once", "all"};
    for (int i = 0; i < 3; i++) {
        char spec[160];
        snprintf(spec, sizeof spec,
                 "{\"cron\":\"0 * * * *\",\"queue\":\"q\",\"name\":\"n\",\"missed\":\"%s\"}",
                 pol[i]);
        parse_ok(spec);
        int64_t t = at("2026-05-01T10:00:00Z");
        er_sched_plan p = plan(t, t + 40, t + 40 - ER_SCHED_GRACE_MS);
        cr_assert_eq(p.n, 1, "%s", pol[i]);
        cr_assert_eq(p.ticks[0], t);
        cr_assert_eq(p.missed_fired, 0);
        cr_assert_eq(p.next_run_at, t + HOUR);
        er_sched_plan_fini(&p);
    }
}

/* The server was down across ticks T, T+1h, T+2h, T+3h and starts at T+3h10m. */
static er_sched_plan after_gap(const char *missed, int max_catchup)
{
    char spec[200];
    snprintf(spec, sizeof spec,
             "{\"cron\":\"0 * * * *\",\"queue\":\"q\",\"name\":\"n\",\"missed\":\"%s\","
             "\"max_catchup\":%d}", missed, max_catchup);
    parse_ok(spec);
    int64_t t = at("2026-05-01T10:00:00Z");
    int64_t started = t + 3 * HOUR + 10 * MIN;
    er_sched_plan p = plan(t, started + 50, started);
    cr_assert(p.had_missed);
    cr_assert_eq(p.next_run_at, t + 4 * HOUR);
    return p;
}

Test(scheduler, skip_fires_no_missed_tick)
{
    er_sched_plan p = after_gap("skip", 24);
    cr_assert_eq(p.n, 0);
    er_sched_plan_fini(&p);
}

Test(scheduler, once_fires_only_the_latest_missed_tick)
{
    er_sched_plan p = after_gap("once", 24);
    cr_assert_eq(p.n, 1);
    cr_assert_eq(p.missed_fired, 1);
    cr_assert_eq(p.ticks[0], at("2026-05-01T13:00:00Z"));
    er_sched_plan_fini(&p);
}

Test(scheduler, all_fires_every_missed_tick_oldest_first)
{
    er_sched_plan p = after_gap("all", 24);
    cr_assert_eq(p.n, 4);
    for (size_t i = 0; i < 4; i++)
        cr_assert_eq(p.ticks[i], at("2026-05-01T10:00:00Z") + (int64_t)i * HOUR);
    er_sched_plan_fini(&p);
}

Test(scheduler, all_is_capped_by_max_catchup_keeping_the_latest)
{
    er_sched_plan p = after_gap("all", 2);
    cr_assert_eq(p.n, 2);
    cr_assert_eq(p.ticks[0], at("2026-05-01T12:00:00Z"));
    cr_assert_eq(p.ticks[1], at("2026-05-01T13:00:00Z"));
    er_sched_plan_fini(&p);
}

Test(scheduler, missed_and_on_time_ticks_together_never_repeat)
{
    /* every second; down for 5 s, then the engine looks 2 s after it started */
    parse_ok("{\"cron\":\"* * * * * *\",\"queue\":\"q\",\"name\":\"n\",\"missed\":\"all\","
             "\"max_catchup\":3}");
    int64_t t = at("2026-05-01T10:00:00Z");
    int64_t started = t + 5000 + 500;
    er_sched_plan p = plan(t, started + 2000, started);
    /* missed: the latest 3 of 10:00:00..:05 -> :03 :04 :05; on time: :06 :07 */
    cr_assert_eq(p.n, 5);
    cr_assert_eq(p.missed_fired, 3);
    for (size_t i = 0; i < p.n; i++)
        cr_assert_eq(p.ticks[i], t + 3000 + (int64_t)i * 1000);
    cr_assert_eq(p.next_run_at, t + 8000);
    er_sched_plan_fini(&p);
}

Test(scheduler, a_year_of_downtime_costs_no_more_than_max_catchup)
{
    parse_ok("{\"cron\":\"* * * * * *\",\"queue\":\"q\",\"name\":\"n\",\"missed\":\"all\","
             "\"max_catchup\":1000}");
    int64_t t = at("2025-05-01T10:00:00Z");
    int64_t started = at("2026-05-01T10:00:00.500Z");
    er_sched_plan p = plan(t, started, started);
    cr_assert_eq(p.n, 1000);
    cr_assert_eq(p.ticks[999], at("2026-05-01T10:00:00Z"));
    cr_assert_eq(p.ticks[0], at("2026-05-01T09:43:21Z"));
    cr_assert_eq(p.next_run_at, at("2026-05-01T10:00:01Z"));
    er_sched_plan_fini(&p);
}

/* Drives the planner like the engine does, with a clock stepping by `step`,
 * from `from` until `to`; returns the fired ticks (owned) in *n. */
static int64_t *simulate(int64_t from, int64_t to, int64_t step, size_t *n)
{
    size_t cap = 16384, len = 0;
    int64_t *fired = malloc(cap * sizeof *fired);
    cr_assert_not_null(fired);
    int64_t next = er_scheduler_next(&S, from);
    int64_t started = from;
    for (int64_t now = from; now < to; now += step) {
        int64_t on_time_after = now - ER_SCHED_GRACE_MS - step;
        if (on_time_after < started)
            on_time_after = started;
        er_sched_plan p = plan(next, now, on_time_after);
        for (size_t i = 0; i < p.n; i++) {
            cr_assert_lt(len, cap);
            fired[len++] = p.ticks[i];
        }
        next = p.next_run_at;
        er_sched_plan_fini(&p);
    }
    *n = len;
    return fired;
}

Test(scheduler, a_simulated_year_hourly_in_new_york_fires_each_tick_once)
{
    parse_ok("{\"cron\":\"0 * * * *\",\"tz\":\"America/New_York\",\"queue\":\"q\",\"name\":\"n\"}");
    int64_t from = at("2026-01-01T04:59:30Z"), to = at("2027-01-01T05:00:00Z");
    size_t n;
    int64_t *fired = simulate(from, to, 7 * MIN, &n);
    /* hour-star schedules follow real time: every UTC hour of the year once
     * (both passes of the repeated November hour, none in the March gap) */
    cr_assert_eq(n, 8760, "fired %zu", n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(fired[i] % HOUR, 0);
        if (i > 0)
            cr_assert_eq(fired[i] - fired[i - 1], HOUR, "gap at %zu", i);
    }
    cr_assert_eq(fired[0], at("2026-01-01T05:00:00Z"));
    free(fired);
}

Test(scheduler, a_simulated_year_daily_at_a_skipped_wall_time_fires_once_a_day)
{
    /* 02:30 does not exist on 2026-03-08 (fires at 03:00) and happens twice
     * on 2026-11-01 (fires once) */
    parse_ok("{\"cron\":\"30 2 * * *\",\"tz\":\"America/New_York\",\"queue\":\"q\",\"name\":\"n\"}");
    int64_t from = at("2026-01-01T05:00:00Z"), to = at("2027-01-01T05:00:00Z");
    size_t n;
    int64_t *fired = simulate(from, to, 13 * MIN, &n);
    cr_assert_eq(n, 365, "fired %zu", n);
    bool saw_gap = false;
    for (size_t i = 0; i < n; i++)
        saw_gap = saw_gap || fired[i] == at("2026-03-08T07:00:00Z");
    cr_assert(saw_gap, "the skipped 02:30 should fire at 03:00 EDT");
    free(fired);
}
