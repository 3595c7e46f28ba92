/* SPDX-License-Identifier: MIT
 *
 * Unit tests for the HTTP API's job JSON (src/server/http/job_json.h): the
 * fast reader of the body text against the jansson reader (both fill a spec
 * that er_job_validate judges, so they must give the same verdict and the
 * same job), and the job writers against the generic JSON writer.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int enq(const char *text)
{
    json_t *o = json_loads(text, 0, NULL);
    cr_assert_not_null(o, "bad test JSON %s", text);
    er_job_fini(&job);
    er_job_limits lim = {.payload_max = PMAX};
    int rc = er_http_job_from_json(o, "default", &lim, T0, &rnd, &job, &err);
    json_decref(o);
    return rc;
}

/* ---- the job view ---- */

Test(job, to_json_shows_the_api_fields)
{
    cr_assert_eq(enq("{\"name\":\"n\",\"id\":\"j1\",\"payload\":{\"x\":[1,2]},"
                     "\"delay_ms\":1000}"),
                 0);
    job.lease_token = strdup("secret");
    job.last_error = strdup("{\"class\":\"transient\",\"message\":\"boom\"}");
    job.attempts = 2;
    json_t *o = er_http_job_to_json(&job, ER_ROLE_ADMIN);
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

Test(job, a_viewer_sees_no_payload_or_result_and_is_told_so)
{
    cr_assert_eq(enq("{\"name\":\"n\",\"id\":\"j1\",\"payload\":{\"secret\":1}}"), 0);
    job.result = strdup("{\"answer\":42}");
    job.last_error = strdup("{\"class\":\"transient\",\"message\":\"boom\"}");
    job.progress = strdup("50");
    json_t *o = er_http_job_to_json(&job, ER_ROLE_VIEWER);
    cr_assert_not_null(o);
    cr_assert(json_is_null(json_object_get(o, "payload")));
    cr_assert(json_is_null(json_object_get(o, "result")));
    json_t *red = json_object_get(o, "redacted");
    cr_assert_eq(json_array_size(red), 2);
    cr_assert_str_eq(json_string_value(json_array_get(red, 0)), "payload");
    cr_assert_str_eq(json_string_value(json_array_get(red, 1)), "result");
    /* the rest is shown: state, errors, progress, metadata */
    cr_assert_str_eq(json_string_value(json_object_get(o, "id")), "j1");
    cr_assert_str_eq(json_string_value(json_object_get(o, "state")), "waiting");
    json_t *le = json_object_get(o, "last_error");
    cr_assert_str_eq(json_string_value(json_object_get(le, "message")), "boom");
    cr_assert_eq(json_integer_value(json_object_get(o, "progress")), 50);
    char *text = json_dumps(o, JSON_COMPACT);
    cr_assert_null(strstr(text, "secret"));
    cr_assert_null(strstr(text, "answer"));
    free(text);
    json_decref(o);
    er_role full[] = {ER_ROLE_NONE, ER_ROLE_PRODUCER, ER_ROLE_WORKER, ER_ROLE_ADMIN};
    for (size_t i = 0; i < sizeof full / sizeof full[0]; i++) {
        o = er_http_job_to_json(&job, full[i]);
        cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "payload"), "secret")),
                     1, "role %d", (int)full[i]);
        cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "result"), "answer")),
                     42, "role %d", (int)full[i]);
        cr_assert_null(json_object_get(o, "redacted"), "role %d", (int)full[i]);
        json_decref(o);
    }
}

Test(job, to_json_shows_scalar_payloads_and_results)
{
    cr_assert_eq(enq("{\"name\":\"n\",\"payload\":\"hi\"}"), 0);
    job.result = strdup("[true]");
    job.progress = strdup("50");
    job.lease_owner = strdup("w");
    job.lease_expires_at = T0 + 60000;
    job.group = strdup("g");
    json_t *o = er_http_job_to_json(&job, ER_ROLE_ADMIN);
    cr_assert_str_eq(json_string_value(json_object_get(o, "payload")), "hi");
    cr_assert(json_is_true(json_array_get(json_object_get(o, "result"), 0)));
    cr_assert_eq(json_integer_value(json_object_get(o, "progress")), 50);
    cr_assert_str_eq(json_string_value(json_object_get(o, "lease_owner")), "w");
    cr_assert_str_eq(json_string_value(json_object_get(o, "lease_expires_at")),
                     "2026-11-30T02:01:00.000Z");
    cr_assert_str_eq(json_string_value(json_object_get(o, "group")), "g");
    json_decref(o);
}

/* ---- the fast reader of the body text ---- */

/* One verdict: er_job_validate's code, error and job. */
typedef struct verdict {
    int rc;
    er_error err;
    er_job job;
} verdict;

/* What the server does without the fast path: json_loadb with
 * JSON_REJECT_DUPLICATES, an object check, the jansson reader. Returns
 * false when the body is not a JSON object at all. */
static bool slow_parse(const char *text, size_t len, size_t pmax, verdict *v)
{
    er_rand r;
    er_rand_init_seeded(&r, 7);
    memset(v, 0, sizeof *v);
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return false;
    }
    er_job_limits lim = {.payload_max = pmax};
    v->rc = er_http_job_from_json(o, "q", &lim, T0, &r, &v->job, &v->err);
    json_decref(o);
    return true;
}

static bool spec_empty(const er_job_spec *sp)
{
    er_job_spec zero;
    memset(&zero, 0, sizeof zero);
    return memcmp(sp, &zero, sizeof zero) == 0;
}

static bool fast_parse(const char *text, size_t len, size_t pmax, verdict *v)
{
    er_rand r;
    er_rand_init_seeded(&r, 7);
    memset(v, 0, sizeof *v);
    er_job_spec sp;
    if (!er_http_job_spec_from_text(text, len, "q", &sp)) {
        cr_assert(spec_empty(&sp), "declined %.*s but left the spec filled", (int)len, text);
        return false;
    }
    er_job_limits lim = {.payload_max = pmax};
    v->rc = er_job_validate(&sp, &lim, T0, &r, &v->job, &v->err);
    er_job_spec_fini(&sp);
    return true;
}

static bool str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Every field er_job_validate sets. */
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
           a->set_backoff == b->set_backoff && a->backoff_given == b->backoff_given &&
           a->set_timeout == b->set_timeout && a->set_priority == b->set_priority &&
           !a->lease_owner && !b->lease_owner && !a->lease_token && !a->last_error &&
           !a->result && !a->progress;
}

/* The fast reader's contract on one body: when it reads it, the jansson
 * path gives the same verdict (the same error, or the same job). Returns
 * whether it read the body; *rc (when not NULL) gets the verdict. */
static bool same_at(const char *text, size_t len, size_t pmax, int *rc)
{
    verdict f, s;
    if (!fast_parse(text, len, pmax, &f))
        return false;
    cr_assert(slow_parse(text, len, pmax, &s), "fast path read %.*s, which is not a JSON object",
              (int)len, text);
    cr_assert_eq(f.rc, s.rc, "verdicts differ on %.*s: fast %d (%s), JSON %d (%s)", (int)len,
                 text, f.rc, f.err.message, s.rc, s.err.message);
    if (f.rc < 0) {
        cr_assert_str_eq(f.err.field, s.err.field, "%.*s", (int)len, text);
        cr_assert_str_eq(f.err.message, s.err.message, "%.*s", (int)len, text);
    } else {
        cr_assert(job_same(&f.job, &s.job), "fast path and JSON path differ on %.*s", (int)len,
                  text);
    }
    er_job_fini(&f.job);
    er_job_fini(&s.job);
    if (rc)
        *rc = f.rc;
    return true;
}

static bool same_as_slow(const char *text, size_t len)
{
    return same_at(text, len, 64, NULL);
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
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        int rc = -1;
        cr_assert(same_at(bodies[i], strlen(bodies[i]), 64, &rc), "declined %s", bodies[i]);
        cr_assert_eq(rc, 0, "refused %s", bodies[i]);
    }
}

Test(job_text, refused_values_get_the_json_paths_error)
{
    static const char *const bodies[] = {
        "{\"name\":\"\"}", "{\"name\":\"a b\"}", "{\"name\":null}", "{\"payload\":{}}",
        "{\"name\":\"a\",\"priority\":1001}", "{\"name\":\"a\",\"priority\":-1}",
        "{\"name\":\"a\",\"max_attempts\":0}", "{\"name\":\"a\",\"timeout_ms\":0}",
        "{\"name\":\"a\",\"timeout_ms\":86400001}", "{\"name\":\"a\",\"delay_ms\":31622400001}",
        "{\"name\":\"a\",\"delay_ms\":-1}", "{\"name\":\"a\",\"id\":\"a/b\"}",
        "{\"name\":\"a\",\"id\":\"a b\"}", "{\"name\":\"a\",\"id\":\"\"}",
        "{\"name\":\"a\",\"group\":\"a/b\"}", "{\"name\":\"a\",\"idempotency_key\":\" \"}",
        "{\"name\":\"a\",\"priority\":5000,\"id\":\"a b\"}",
        "{\"name\":\"a\",\"payload\":{\"p\":\"" "0123456789012345678901234567890123456789"
        "0123456789012345678901234567890123456789\"}}", /* over the 64-byte limit */
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        int rc = 0;
        cr_assert(same_at(bodies[i], strlen(bodies[i]), 64, &rc), "declined %s", bodies[i]);
        cr_assert_lt(rc, 0, "accepted %s", bodies[i]);
    }
}

Test(job_text, what_it_is_not_sure_of_is_declined)
{
    static const char *const bodies[] = {
        /* not a JSON object, or one the JSON path refuses as a body */
        "", "{", "[]", "\"x\"", "{\"name\":\"a\"", "{\"name\":\"a\"}x", "{\"name\":\"a\"},",
        "{\"name\":\"a\",}", "{,\"name\":\"a\"}", "{\"name\" \"a\"}", "{\"name\":\"a\" \"id\":\"b\"}",
        "{\"name\":\"a\",\"name\":\"b\"}", "{\"name\":\"a\",\"payload\":{\"k\":1,\"k\":2}}",
        "{\"name\":\"a\",\"payload\":{\"k\":{\"x\":1,\"y\":2,\"x\":3}}}",
        "{\"name\":\"a\",\"payload\":[1,]}", "{\"name\":\"a\",\"payload\":01}",
        "{\"name\":\"a\",\"payload\":+1}", "{\"name\":\"a\",\"payload\":-}",
        "{\"name\":\"a\",\"payload\":tru}", "{\"name\":\"a\",\"payload\":nullx}",
        "{\"name\":\"a\",\"payload\":\f1}", "{\"name\":\"a\",\"payload\":\"\x01\"}",
        /* a type or a field it leaves to the JSON path */
        "{\"name\":1}", "{\"name\":\"a\",\"x\":1}", "{\"name\":\"a\",\"priority\":\"1\"}",
        "{\"name\":\"a\",\"priority\":1.0}", "{\"name\":\"a\",\"priority\":1e2}",
        "{\"name\":\"a\",\"trace_id\":7}",
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
        cr_assert(!same(bodies[i]), "read %s", bodies[i]);
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
    er_job_spec sp;
    cr_assert(!er_http_job_spec_from_text(wide, strlen(wide), "q", &sp), "33 members");
    cr_assert(spec_empty(&sp));
    char *last = strstr(wide, ",\"32\":0");
    memmove(last, last + 7, strlen(last + 7) + 1);
    cr_assert(er_http_job_spec_from_text(wide, strlen(wide), "q", &sp), "32 members: %s", wide);
    er_job_spec_fini(&sp);
}

Test(job_text, a_padded_body_keeps_only_the_compact_payload)
{
    char body[4096];
    int n = snprintf(body, sizeof body, "{\"name\":\"a\",\"payload\":{\"k\":");
    memset(body + n, ' ', 3000);
    n += 3000;
    snprintf(body + n, sizeof body - (size_t)n, "[1, 2]}}");
    verdict f;
    cr_assert(fast_parse(body, strlen(body), PMAX, &f));
    cr_assert_eq(f.rc, 0);
    cr_assert_str_eq(f.job.payload, "{\"k\":[1,2]}");
    cr_assert_eq(f.job.payload_len, 11);
    er_job_fini(&f.job);
}

Test(job_text, a_declined_request_draws_no_random_id)
{
    er_job_spec sp;
    cr_assert(!er_http_job_spec_from_text("{\"name\":\"a\",\"x\":1}", 18, "q", &sp));
    cr_assert(spec_empty(&sp)); /* nothing to validate, so no id drawn */
}

static const char edit_alphabet[] = "{}[]:,\" \n\t-0123456789.eEtruefalsn\\abxyz/\x01\xc3\x7f";

/* One to three random edits (replace, insert, delete a byte) of buf[0..*len),
 * within cap bytes. */
static void random_edits(er_rand *r, char *buf, size_t *len, size_t cap)
{
    int edits = 1 + (int)(r->next(r) % 3);
    for (int e = 0; e < edits; e++) {
        size_t pos = (size_t)(r->next(r) % (*len + 1));
        char ch = edit_alphabet[r->next(r) % (sizeof edit_alphabet - 1)];
        switch (r->next(r) % 3) {
        case 0: /* replace */
            if (pos < *len)
                buf[pos] = ch;
            break;
        case 1: /* insert */
            if (*len + 1 < cap) {
                memmove(buf + pos + 1, buf + pos, *len - pos);
                buf[pos] = ch;
                (*len)++;
            }
            break;
        default: /* delete */
            if (pos < *len) {
                memmove(buf + pos, buf + pos + 1, *len - pos - 1);
                (*len)--;
            }
        }
    }
}

/* Random edits of valid bodies: whatever the fast path reads, the JSON
 * path judges the same way. */
Test(job_text, random_edits_never_make_the_two_paths_disagree, .timeout = 60)
{
    static const char *const seeds[] = {
        "{\"name\":\"noop\",\"payload\":{\"n\":12,\"m\":[1,2,{\"a\":null}]}}",
        "{ \"name\" : \"a\", \"id\" : \"x-1\", \"priority\" : 5, \"delay_ms\" : 10, "
        "\"max_attempts\" : 2, \"timeout_ms\" : 9, \"group\" : \"g\", \"trace_id\" : \"t\", "
        "\"idempotency_key\" : \"k\", \"payload\" : [true,false,null,\"s\",-7] }",
        "{\"payload\":{\"a\":{\"b\":{\"c\":[[],[{}]]}},\"d\":\"e\"},\"name\":\"z\"}",
    };
    er_rand r;
    er_rand_init_seeded(&r, 2026);
    size_t read = 0, accepted = 0;
    for (int iter = 0; iter < 200000; iter++) {
        char buf[512];
        const char *seed = seeds[iter % 3];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        random_edits(&r, buf, &len, sizeof buf);
        int rc = -1;
        if (same_at(buf, len, 64, &rc)) {
            read++;
            accepted += rc == 0;
        }
    }
    cr_assert_gt(accepted, 1000, "the edits should leave many bodies valid");
    cr_assert_gt(read - accepted, 100, "and many read but refused");
}

/* ---- bulk bodies ---- */

#define BULK_MAX 100

/* The bulk reader's contract on one body: when it reads it, the body is
 * {"jobs": [...]} for jansson too, with as many items, and each item gets
 * the verdict the jansson path gives it (the same error, or the same job,
 * with the same id drawn). Returns whether it read the body; *refused
 * (when not NULL) gets the number of items refused. */
static bool bulk_same(const char *text, size_t len, size_t *refused)
{
    er_job_spec *sp = (er_job_spec *)1;
    size_t n = 1;
    if (!er_http_job_specs_from_text(text, len, "q", BULK_MAX, &sp, &n)) {
        cr_assert(!sp && n == 0, "declined %.*s but returned specs", (int)len, text);
        return false;
    }
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    cr_assert(json_is_object(o) && json_object_size(o) == 1, "read %.*s", (int)len, text);
    json_t *arr = json_object_get(o, "jobs");
    cr_assert(json_is_array(arr) && json_array_size(arr) == n, "read %.*s", (int)len, text);
    er_rand rf, rs;
    er_rand_init_seeded(&rf, 7);
    er_rand_init_seeded(&rs, 7);
    er_job_limits lim = {.payload_max = 64};
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        verdict f, s;
        memset(&f, 0, sizeof f);
        memset(&s, 0, sizeof s);
        f.rc = er_job_validate(&sp[i], &lim, T0, &rf, &f.job, &f.err);
        s.rc = er_http_job_from_json(json_array_get(arr, i), "q", &lim, T0, &rs, &s.job, &s.err);
        cr_assert_eq(f.rc, s.rc, "item %zu of %.*s: fast %d (%s), JSON %d (%s)", i, (int)len, text,
                     f.rc, f.err.message, s.rc, s.err.message);
        if (f.rc < 0) {
            cr_assert_str_eq(f.err.field, s.err.field);
            cr_assert_str_eq(f.err.message, s.err.message);
            bad++;
        } else {
            cr_assert(job_same(&f.job, &s.job), "item %zu of %.*s differs", i, (int)len, text);
        }
        er_job_fini(&f.job);
        er_job_fini(&s.job);
    }
    json_decref(o);
    er_http_job_specs_free(sp, n);
    if (refused)
        *refused = bad;
    return true;
}

static bool bulk_same_str(const char *text)
{
    return bulk_same(text, strlen(text), NULL);
}

Test(job_text, bulk_bodies_take_the_fast_path_and_match_the_json_path)
{
    static const char *const bodies[] = {
        "{\"jobs\":[{\"name\":\"a\"}]}",
        " { \"jobs\" : [ {\"name\":\"a\",\"payload\":{\"n\":1}} ,\n\t{\"name\":\"b\",\"id\":\"b-1\","
        "\"priority\":7,\"payload\":[1, 2,{\"k\" : null}]}, {\"payload\":\"s\",\"name\":\"c\","
        "\"group\":\"g\",\"delay_ms\":5} ] } ",
        "{\"jobs\":[{\"name\":\"a\",\"id\":\"same\"},{\"name\":\"a\",\"id\":\"same\"}]}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        size_t bad = 1;
        cr_assert(bulk_same(bodies[i], strlen(bodies[i]), &bad), "declined %s", bodies[i]);
        cr_assert_eq(bad, 0, "refused an item of %s", bodies[i]);
    }
    /* a refused item keeps its verdict (the route answers jobs[1].priority) */
    size_t bad = 0;
    cr_assert(bulk_same_str("{\"jobs\":[{\"name\":\"a\"},{\"name\":\"a\",\"priority\":5000}]}"));
    cr_assert(bulk_same("{\"jobs\":[{\"name\":\"\"},{\"payload\":1}]}", 36, &bad));
    cr_assert_eq(bad, 2);
}

Test(job_text, what_the_bulk_reader_is_not_sure_of_is_declined)
{
    static const char *const bodies[] = {
        "{\"jobs\":[]}",
        "{\"jobs\":{}}",
        "{\"jobs\":[1]}",
        "{\"jobs\":[[]]}",
        "{\"jobs\":null}",
        "{\"jobs\":[{\"name\":\"a\"}],\"x\":1}",
        "{\"x\":1,\"jobs\":[{\"name\":\"a\"}]}",
        "{\"jobs\":[{\"name\":\"a\"}],\"jobs\":[{\"name\":\"b\"}]}",
        "{\"jobs\":[{\"name\":\"a\"},]}",
        "{\"jobs\":[,{\"name\":\"a\"}]}",
        "{\"jobs\":[{\"name\":\"a\"}{\"name\":\"b\"}]}",
        "{\"jobs\":[{\"name\":\"a\"}]}x",
        "{\"jobs\":[{\"name\":\"a\"}]",
        "{\"jobs\":[{\"name\":\"a\"}",
        "{\"jobs\":[{\"name\":\"a\"},",
        "{\"jobs\" [{\"name\":\"a\"}]}",
        "{\"job\":[{\"name\":\"a\"}]}",
        "{\"jobs\\u0000\":[]}",
        "{\"name\":\"a\"}",
        "[{\"name\":\"a\"}]",
        /* one item the single reader leaves to jansson sends the whole body there */
        "{\"jobs\":[{\"name\":\"a\"},{\"name\":\"a\",\"backoff\":{\"type\":\"fixed\"}}]}",
        "{\"jobs\":[{\"name\":\"a\"},{\"name\":\"a\\n\"}]}",
        "{\"jobs\":[{\"name\":\"a\"},{\"name\":\"a\",\"name\":\"b\"}]}",
        "{\"jobs\":[{\"name\":\"a\",\"jobs\":[]}]}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        cr_assert(!bulk_same_str(bodies[i]), "read %s", bodies[i]);
    cr_assert(!bulk_same("{\"jobs\":[{\"name\":\"a\"}]}", 22, NULL), "cut short");
}

Test(job_text, a_bulk_body_of_more_than_the_maximum_is_declined)
{
    char body[8192];
    size_t n = (size_t)snprintf(body, sizeof body, "{\"jobs\":[");
    for (int i = 0; i < BULK_MAX; i++)
        n += (size_t)snprintf(body + n, sizeof body - n, "%s{\"name\":\"a\"}", i ? "," : "");
    memcpy(body + n, "]}", 3);
    cr_assert(bulk_same_str(body), "%d items are read", BULK_MAX);
    memcpy(body + n, ",{\"name\":\"a\"}]}", 16);
    cr_assert(!bulk_same_str(body), "%d items are left to the JSON path", BULK_MAX + 1);
}

Test(job_text, each_bulk_payload_keeps_only_its_own_compact_text)
{
    char body[8192];
    int n = snprintf(body, sizeof body, "{\"jobs\":[{\"name\":\"a\",\"payload\":{\"k\":");
    memset(body + n, ' ', 3000);
    n += 3000;
    n += snprintf(body + n, sizeof body - (size_t)n, "[1, 2]}},{\"name\":\"b\",\"payload\":[ ");
    memset(body + n, ' ', 2000);
    n += 2000;
    snprintf(body + n, sizeof body - (size_t)n, "\"x\"]},{\"name\":\"c\"}]}");
    er_job_spec *sp;
    size_t cnt;
    cr_assert(er_http_job_specs_from_text(body, strlen(body), "q", BULK_MAX, &sp, &cnt));
    cr_assert_eq(cnt, 3);
    cr_assert_eq(sp[0].payload.n, 11);
    cr_assert_eq(memcmp(sp[0].payload.s, "{\"k\":[1,2]}", 12), 0);
    cr_assert_eq(sp[1].payload.n, 5);
    cr_assert_eq(memcmp(sp[1].payload.s, "[\"x\"]", 6), 0);
    cr_assert_eq(sp[2].payload.kind, ER_SPEC_ABSENT);
    er_http_job_specs_free(sp, cnt);
}

Test(job_text, random_edits_of_bulk_bodies_never_make_the_two_paths_disagree, .timeout = 60)
{
    static const char *const seeds[] = {
        "{\"jobs\":[{\"name\":\"noop\",\"payload\":{\"n\":1}},{\"name\":\"b\",\"id\":\"x\"}]}",
        "{ \"jobs\" : [ {\"name\" : \"a\", \"priority\" : 5, \"payload\" : [true,null,-7]} , "
        "{\"payload\":\"s\",\"name\":\"z\",\"delay_ms\":3}, {\"name\":\"q\"} ] }",
    };
    er_rand r;
    er_rand_init_seeded(&r, 2027);
    size_t read = 0, refused = 0;
    for (int iter = 0; iter < 100000; iter++) {
        char buf[512];
        const char *seed = seeds[iter % 2];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        random_edits(&r, buf, &len, sizeof buf);
        size_t bad = 0;
        if (bulk_same(buf, len, &bad)) {
            read++;
            refused += bad > 0;
        }
    }
    cr_assert_gt(read, 1000, "the edits should leave many bodies readable");
    cr_assert_gt(refused, 50, "and some with refused items");
}

/* ---- er_http_job_write_json against the generic writer ---- */

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
    er_http_job_write_json(j, ER_ROLE_NONE, &b);
    er_jsonw_end_array(&a);
    er_jsonw_end_array(&b);
    cr_assert_eq(a.failed, b.failed, "cap %zu", max);
    if (!a.failed) {
        cr_assert_eq(a.out.len, b.out.len);
        cr_assert_str_eq(b.out.data, a.out.data);
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
    size_t full = w.out.len;
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

/* ---- er_job_reply_bytes: never short of what a reply writes ---- */

static size_t written(const er_job *j, int view, er_role who)
{
    er_jsonw w;
    er_jsonw_init(&w, (size_t)1 << 24);
    er_jsonw_begin_array(&w);
    er_jsonw_int(&w, 7);
    if (view)
        er_http_job_write_lease_json(j, &w);
    else
        er_http_job_write_json(j, who, &w);
    cr_assert(!w.failed);
    size_t n = w.out.len - 2; /* "[7" before it; the comma is the job's */
    er_jsonw_fini(&w);
    return n;
}

static void estimate_covers(const er_job *j)
{
    size_t est = er_job_reply_bytes(j);
    for (int view = 0; view < 2; view++)
        for (er_role who = ER_ROLE_NONE; who <= ER_ROLE_VIEWER; who++) {
            size_t n = written(j, view, who);
            cr_assert_geq(est, n, "view %d role %d: %zu written, %zu estimated", view,
                          (int)who, n, est);
        }
    cr_assert_geq(er_job_lease_bytes_max(j->payload_len), written(j, 1, ER_ROLE_ADMIN));
}

Test(job, reply_bytes_covers_the_full_and_lease_views_at_their_extremes)
{
    er_job j;
    er_job_init(&j);
    estimate_covers(&j);
    char id[ER_ID_MAX + 1], name[ER_NAME_MAX + 1];
    memset(id, '"', ER_ID_MAX); /* every byte escaped */
    id[ER_ID_MAX] = '\0';
    memset(name, 'n', ER_NAME_MAX);
    name[ER_NAME_MAX] = '\0';
    j.id = strdup(id);
    j.idempotency_key = strdup(id);
    j.trace_id = strdup(id);
    j.queue = strdup(name);
    j.name = strdup(name);
    j.group = strdup(name);
    j.lease_owner = strdup(name);
    j.lease_token = strdup("0123456789abcdef0123456789abcdef");
    j.payload = strdup("{\"x\":\"\\u0001\"}");
    j.payload_len = strlen(j.payload);
    j.last_error = strdup("{\"class\":\"transient\",\"message\":\"boom\"}");
    j.result = strdup("[1,2,3]");
    j.progress = strdup("{\"pct\":40}");
    j.custom = strdup("{\"a\":1}");
    j.priority = INT32_MIN;
    j.max_attempts = j.attempts = j.started = j.stalled = j.redrive_count = INT32_MIN;
    j.timeout_ms = j.backoff.delay_ms = j.backoff.max_delay_ms = INT64_MIN;
    j.backoff.jitter = -1.0 / 3.0;
    j.run_at = j.created_at = j.updated_at = j.started_at = j.finished_at = j.redriven_at =
        j.lease_expires_at = 253402300799999LL; /* the last ms of year 9999 */
    estimate_covers(&j);
    er_job_fini(&j);
}

Test(job, reply_takes_the_first_job_then_what_fits)
{
    cr_assert(er_reply_takes(0, 0, SIZE_MAX, 10), "the first job, whatever its size");
    cr_assert(er_reply_takes(1, 4, 6, 10));
    cr_assert(!er_reply_takes(1, 4, 7, 10));
    cr_assert(!er_reply_takes(1, 11, 0, 10), "past the cap already");
    cr_assert(!er_reply_takes(1, 4, SIZE_MAX, 10), "no overflow");
}
