/* SPDX-License-Identifier: MIT
 *
 * The stored scheduler spec (store/sched_codec.h): byte for byte what the
 * release before the codec wrote (tests/store/sched_codec_v1.txt, captured
 * from it), for specs read from the API's JSON and for typed specs built by
 * hand; its texts decode, encode to themselves and make the same tick job;
 * equal specs have equal text; text that is not a spec of a known format is
 * refused.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http/sched_json.h"
#include "store/sched_codec.h"

#ifndef ER_SCHED_CODEC_CASES
#error "ER_SCHED_CODEC_CASES: the path of sched_codec_v1.txt (tests/CMakeLists.txt)"
#endif

#define TICK 1796007600000LL /* 2026-11-30T03:00:00.000Z */

typedef struct codec_case {
    char *spec, *stored, *tick;
    int line;
} codec_case;

static codec_case cases[64];
static size_t ncases;

static void load_cases(void)
{
    FILE *f = fopen(ER_SCHED_CODEC_CASES, "r");
    cr_assert_not_null(f, "%s", ER_SCHED_CODEC_CASES);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int no = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        no++;
        if (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        char **dst = NULL;
        const char *text = NULL;
        bool record = strncmp(line, "stored ", 7) == 0 || strncmp(line, "tick ", 5) == 0;
        cr_assert(ncases > 0 || !record, "line %d comes before a spec", no);
        if (strncmp(line, "spec ", 5) == 0) {
            cr_assert_lt(ncases, sizeof cases / sizeof cases[0]);
            cases[ncases++].line = no;
            dst = &cases[ncases - 1].spec;
            text = line + 5;
        } else if (strncmp(line, "stored ", 7) == 0) {
            dst = &cases[ncases - 1].stored;
            text = line + 7;
        } else if (strncmp(line, "tick ", 5) == 0) {
            dst = &cases[ncases - 1].tick;
            text = line + 5;
        } else {
            cr_assert(line[0] == '#' || line[0] == '\0', "line %d: %s", no, line);
            continue;
        }
        cr_assert_not_null(*dst = strdup(text));
    }
    free(line);
    fclose(f);
    cr_assert_gt(ncases, 10);
    for (size_t i = 0; i < ncases; i++)
        cr_assert(cases[i].stored && cases[i].tick, "record at line %d", cases[i].line);
}

static void free_cases(void)
{
    for (size_t i = 0; i < ncases; i++) {
        free(cases[i].spec);
        free(cases[i].stored);
        free(cases[i].tick);
    }
    ncases = 0;
}

TestSuite(sched_codec, .init = load_cases, .fini = free_cases);

/* A PUT body, read and validated as the HTTP frontend does. */
static void from_api(const char *body, er_scheduler *s)
{
    json_error_t je;
    json_t *o = json_loads(body, JSON_REJECT_DUPLICATES, &je);
    cr_assert_not_null(o, "%s: %s", body, je.text);
    er_sched_spec sp;
    er_error err = {0};
    int rc = er_http_sched_spec_from_json(o, &sp, &err);
    if (rc == 0)
        rc = er_sched_validate(&sp, 1 << 20, s, &err);
    cr_assert_eq(rc, 0, "%s: %s", body, err.message);
    er_sched_spec_fini(&sp);
    json_decref(o);
}

static char *encode(const er_scheduler *s)
{
    char *text = NULL;
    er_error err = {0};
    cr_assert_eq(er_sched_codec_encode(s, &text, &err), 0);
    cr_assert_not_null(text);
    return text;
}

Test(sched_codec, specs_encode_to_the_text_the_previous_release_stored)
{
    for (size_t i = 0; i < ncases; i++) {
        er_scheduler s;
        from_api(cases[i].spec, &s);
        char *text = encode(&s);
        cr_assert_str_eq(text, cases[i].stored, "line %d", cases[i].line);
        free(text);
        er_scheduler_fini(&s);
    }
}

Test(sched_codec, text_the_previous_release_stored_decodes_and_encodes_to_itself)
{
    for (size_t i = 0; i < ncases; i++) {
        er_scheduler s;
        er_error err = {0};
        cr_assert_eq(er_sched_codec_decode(cases[i].stored, &s, &err), 0, "line %d: %s",
                     cases[i].line, err.message);
        cr_assert_null(s.tz);
        char *text = encode(&s);
        cr_assert_str_eq(text, cases[i].stored, "line %d", cases[i].line);
        free(text);
        /* the tick job the engine makes of a stored row */
        er_rand r;
        er_rand_init_seeded(&r, 1);
        er_job j;
        cr_assert_eq(er_scheduler_job(&s, "nightly", TICK, TICK + 5, &r, &j, &err), 0,
                     "line %d: %s", cases[i].line, err.message);
        cr_assert_str_eq(j.id, "sched:nightly:2026-11-30T03:00:00.000Z");
        cr_assert_str_eq(j.payload, cases[i].tick, "line %d", cases[i].line);
        cr_assert_eq(j.payload_len, strlen(cases[i].tick));
        er_job_fini(&j);
        er_scheduler_fini(&s);
    }
}

Test(sched_codec, decoding_keeps_job_options_as_given)
{
    er_scheduler s;
    er_error err = {0};
    const char *text = "{\"cron\":\"@hourly\",\"job\":{\"backoff\":{\"delay_ms\":null,\"jitter\":1,"
                       "\"max_delay_ms\":null,\"type\":null},\"priority\":null},\"max_catchup\":24,"
                       "\"missed\":\"skip\",\"name\":\"n\",\"payload\":{},\"queue\":\"q\","
                       "\"tz\":\"UTC\"}";
    cr_assert_eq(er_sched_codec_decode(text, &s, &err), 0, "%s", err.message);
    cr_assert(s.has_job);
    cr_assert_eq(s.opts.priority.kind, ER_SPEC_NULL);
    cr_assert_eq(s.opts.max_attempts.kind, ER_SPEC_ABSENT);
    cr_assert_eq(s.opts.backoff.kind, ER_SPEC_SET);
    cr_assert_eq(s.opts.backoff.type.kind, ER_SPEC_NULL);
    cr_assert_eq(s.opts.backoff.jitter.kind, ER_SPEC_SET);
    cr_assert(s.jitter_integer);
    cr_assert_eq(s.opts.backoff.jitter.v, 1.0);
    er_scheduler_fini(&s);
}

Test(sched_codec, typed_specs_encode_without_any_json_reader)
{
    er_sched_spec sp = {
        .cron = {ER_SPEC_SET, " 0 3 * * * ", 11},
        .tz = {ER_SPEC_SET, "Europe/London", 13},
        .queue = {ER_SPEC_SET, "billing", 7},
        .name = {ER_SPEC_SET, "invoice", 7},
        .payload = {ER_SPEC_SET, "{\"plan\":\"pro\",\"a\":[1]}", 22},
        .missed = {ER_SPEC_SET, "once", 4},
        .job = ER_SPEC_SET,
        .opts = {.priority = {ER_SPEC_SET, 3},
                 .group = {ER_SPEC_NULL, NULL, 0},
                 .backoff = {.kind = ER_SPEC_SET,
                             .type = {ER_SPEC_SET, "fixed", 5},
                             .jitter = {ER_SPEC_SET, 0.0}}},
        .jitter_integer = true,
    };
    er_scheduler s;
    er_error err = {0};
    cr_assert_eq(er_sched_validate(&sp, 1024, &s, &err), 0, "%s", err.message);
    char *text = encode(&s);
    cr_assert_str_eq(text, "{\"cron\":\"0 3 * * *\",\"job\":{\"backoff\":{\"jitter\":0,\"type\":"
                           "\"fixed\"},\"group\":null,\"priority\":3},\"max_catchup\":24,"
                           "\"missed\":\"once\",\"name\":\"invoice\",\"payload\":{\"a\":[1],"
                           "\"plan\":\"pro\"},\"queue\":\"billing\",\"tz\":\"Europe/London\"}");
    free(text);
    er_scheduler_fini(&s);
    sp.jitter_integer = false;
    cr_assert_eq(er_sched_validate(&sp, 1024, &s, &err), 0, "%s", err.message);
    text = encode(&s);
    cr_assert_not_null(strstr(text, "\"jitter\":0.0,"), "%s", text);
    free(text);
    er_scheduler_fini(&s);
}

Test(sched_codec, equal_specs_have_equal_text)
{
    er_scheduler a, b, c;
    from_api("{\"cron\":\"0 3 * * *\",\"tz\":\"Asia/Ho_Chi_Minh\",\"queue\":\"q\",\"name\":\"n\","
             "\"payload\":{\"b\":1,\"a\":2},\"missed\":\"skip\"}",
             &a);
    from_api("{\"name\":\"n\",\"queue\":\"q\",\"payload\":{\"a\":2,\"b\":1},"
             "\"tz\":\"Asia/Ho_Chi_Minh\",\"cron\":\"0 3 * * *\",\"max_catchup\":24}",
             &b);
    from_api("{\"name\":\"n\",\"queue\":\"q\",\"cron\":\"0 4 * * *\",\"tz\":\"Asia/Ho_Chi_Minh\"}",
             &c);
    char *ta = encode(&a), *tb = encode(&b), *tc = encode(&c);
    cr_assert_str_eq(ta, tb);
    cr_assert_not_null(strstr(ta, "\"missed\":\"skip\""));
    cr_assert_str_neq(ta, tc);
    free(ta);
    free(tb);
    free(tc);
    er_scheduler_fini(&a);
    er_scheduler_fini(&b);
    er_scheduler_fini(&c);
}

static void refused(const char *text, int code, const char *field)
{
    er_scheduler s;
    er_error err = {0};
    cr_assert_eq(er_sched_codec_decode(text, &s, &err), code, "%s: %s", text, err.message);
    cr_assert_str_eq(err.field, field, "%s: %s", text, err.message);
    cr_assert_null(s.cron_text);
    cr_assert_null(s.payload);
}

Test(sched_codec, text_that_is_not_a_stored_spec_is_refused)
{
    refused("{not json", ER_EINTERNAL, "spec");
    refused("[1]", ER_EINTERNAL, "spec");
    refused("{\"v\":2,\"cron\":\"@daily\",\"name\":\"n\",\"queue\":\"q\"}", ER_EINTERNAL, "spec");
    refused("{\"v\":\"1\",\"cron\":\"@daily\",\"name\":\"n\",\"queue\":\"q\"}", ER_EINTERNAL,
            "spec");
    /* held to the rules of a new spec */
    refused("{\"cron\":\"@daily\",\"name\":\"n\"}", ER_EINVAL, "queue");
    refused("{\"cron\":\"@daily\",\"name\":\"n\",\"queue\":\"q\",\"job\":{\"priority\":-1}}",
            ER_EINVAL, "job.priority");
    /* a version 1 text may name its version */
    er_scheduler s;
    er_error err = {0};
    cr_assert_eq(er_sched_codec_decode("{\"v\":1,\"cron\":\"@daily\",\"name\":\"n\","
                                       "\"queue\":\"q\"}",
                                       &s, &err),
                 0, "%s", err.message);
    er_scheduler_fini(&s);
}
