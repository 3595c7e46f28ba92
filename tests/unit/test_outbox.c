/* SPDX-License-Identifier: MIT
 *
 * Outbox routes, job ids and envelopes (src/core/outbox.c).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "core/outbox.h"

#define T0 1700000000000LL
#define EVENT "0e259347-2665-453e-8cd3-eda792f3c6d0"

static er_rand rnd;
static er_error err;
static er_outbox_routes routes;
static er_job job;

static void setup(void)
{
    er_rand_init_seeded(&rnd, 9);
    er_error_clear(&err);
    memset(&routes, 0, sizeof routes);
    er_job_init(&job);
}

static void teardown(void)
{
    er_outbox_routes_fini(&routes);
    er_job_fini(&job);
}

TestSuite(outbox, .init = setup, .fini = teardown);

static int parse(const char *text)
{
    return er_outbox_routes_parse(text, strlen(text), &routes, &err);
}

Test(outbox, routes_are_read_and_found_by_topic)
{
    cr_assert_eq(parse("{\"order.placed\": [{\"queue\": \"payments\", \"name\": \"capture\"},\n"
                       "                  {\"queue\": \"emails\", \"name\": \"receipt\"}],\n"
                       " \"a.b\": [{\"name\": \"n\", \"queue\": \"q\"}]}"),
                 0, "%s", err.message);
    cr_assert_eq(routes.ntopics, 2);
    const er_outbox_topic *t = er_outbox_routes_find(&routes, "order.placed");
    cr_assert_not_null(t);
    cr_assert_eq(t->nroutes, 2);
    cr_assert_str_eq(t->routes[1].queue, "emails");
    cr_assert_str_eq(t->routes[1].name, "receipt");
    cr_assert_not_null(er_outbox_routes_find(&routes, "a.b"));
    cr_assert_null(er_outbox_routes_find(&routes, "order"));
}

/* Each refusal names the line of its cause, and *out holds nothing. */
Test(outbox, bad_routes_files_are_refused_naming_the_line)
{
    static const struct {
        const char *text, *starts, *contains;
    } cases[] = {
        {"{\"t\": [{\"queue\": \"q\", \"name\": \"n\"}]", "line 1: ", "end of file"},
        {"{\n\"t\": [{\"queue\": \"q\",\n \"name\": \"n\"}],\n\"t\": []}", "line 4: ",
         "duplicate"},
        {"[1, 2]", "line 1: ", "must be an object"},
        {"{}", "line 1: ", "1..4096 topics"},
        {"{\n\"t\": []\n}", "line 2: ", "1..64 routes"},
        {"{\n\"t\": {\"queue\": \"q\"}\n}", "line 2: ", "1..64 routes"},
        {"{\"ok\": [{\"queue\": \"q\", \"name\": \"n\"}],\n"
         " \"t\": [{\"queue\": \"q\", \"name\": \"n\"},\n"
         "        {\"queue\": \"bad name\", \"name\": \"n\"}]}",
         "line 3: ", "route 2 of topic \"t\": queue must be"},
        {"{\"t\": [\n{\"queue\": \"q\", \"name\": \"n\"},\n\"x\"]}", "line 3: ",
         "route 2 of topic \"t\" must be an object"},
        {"{\"t\": [{\"queue\": \"q\"}]}", "line 1: ", "name must be"},
        {"{\"t\": [{\"queue\": \"q\", \"name\": \"n\", \"priority\": 3}]}", "line 1: ",
         "unknown member \"priority\""},
        {"{\"t\": [{\"queue\": \"q\", \"name\": \"n\"},\n {\"queue\": \"q\", \"name\": \"n\"}]}",
         "line 2: ", "twice"},
        {"{\"\": [{\"queue\": \"q\", \"name\": \"n\"}]}", "line 1: ", "1..200 printable"},
        {"{\"caf\\u00e9\": [{\"queue\": \"q\", \"name\": \"n\"}]}", "", "1..200 printable"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        er_error_clear(&err);
        cr_assert_eq(parse(cases[i].text), ER_EINVAL, "case %zu accepted", i);
        cr_assert_eq(strncmp(err.message, cases[i].starts, strlen(cases[i].starts)), 0,
                     "case %zu: %s", i, err.message);
        cr_assert_not_null(strstr(err.message, cases[i].contains), "case %zu: %s", i,
                           err.message);
        cr_assert_eq(routes.ntopics, 0);
        cr_assert_null(routes.topics);
    }
}

Test(outbox, job_ids_are_deterministic_and_differ_by_route)
{
    char a[ER_OUTBOX_JOB_ID_LEN + 1], b[ER_OUTBOX_JOB_ID_LEN + 1], c[ER_OUTBOX_JOB_ID_LEN + 1];
    cr_assert_eq(er_outbox_job_id(EVENT, "payments", "capture", a, &err), 0);
    /* printf 'payments\ncapture' | sha256sum: 33fa2203e37f5766... */
    cr_assert_str_eq(a, "outbox:" EVENT ":33fa2203e37f5766");
    cr_assert_eq(strlen(a), ER_OUTBOX_JOB_ID_LEN);
    cr_assert_eq(er_outbox_job_id("0E259347-2665-453E-8CD3-EDA792F3C6D0", "payments", "capture",
                                  b, &err), 0);
    cr_assert_str_eq(a, b, "an upper-case uuid names the same event");
    cr_assert_eq(er_outbox_job_id(EVENT, "payments", "refund", c, &err), 0);
    cr_assert_str_neq(a, c);
    /* the separator keeps ("ab", "c") apart from ("a", "bc") */
    cr_assert_eq(er_outbox_job_id(EVENT, "ab", "c", b, &err), 0);
    cr_assert_eq(er_outbox_job_id(EVENT, "a", "bc", c, &err), 0);
    cr_assert_str_neq(b, c);
    cr_assert_eq(er_outbox_job_id("not-a-uuid", "q", "n", a, &err), ER_EINVAL);
    cr_assert_eq(er_outbox_job_id(EVENT "0", "q", "n", a, &err), ER_EINVAL);
}

static er_outbox_route route = {.queue = "payments", .name = "capture"};
static const er_job_limits lim = {.payload_max = 4096};

Test(outbox, a_row_becomes_a_job_with_the_envelope_and_the_rows_key)
{
    er_outbox_event ev = {.id = EVENT, .topic = "order.placed", .payload = "{\"order\": 7}",
                          .payload_is_object = true, .idempotency_key = "order-7",
                          .trace_id = "trace-1"};
    er_outbox_failure why;
    cr_assert_eq(er_outbox_job(&ev, &route, &lim, T0, &rnd, &job, &why, &err), 0, "%s",
                 err.message);
    char id[ER_OUTBOX_JOB_ID_LEN + 1];
    er_outbox_job_id(EVENT, "payments", "capture", id, &err);
    cr_assert_str_eq(job.id, id);
    cr_assert_str_eq(job.queue, "payments");
    cr_assert_str_eq(job.name, "capture");
    cr_assert_str_eq(job.idempotency_key, "order-7");
    cr_assert_str_eq(job.trace_id, "trace-1");
    cr_assert_eq(job.state, ER_STATE_WAITING);
    json_t *p = json_loads(job.payload, 0, NULL);
    cr_assert_not_null(p, "%s", job.payload);
    cr_assert_str_eq(json_string_value(json_object_get(p, "event_id")), EVENT);
    cr_assert_str_eq(json_string_value(json_object_get(p, "topic")), "order.placed");
    cr_assert_str_eq(json_string_value(json_object_get(p, "trace_id")), "trace-1");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(p, "payload"), "order")), 7);
    json_decref(p);
}

Test(outbox, without_a_key_the_event_id_is_the_key_on_every_route)
{
    er_outbox_event ev = {.id = EVENT, .topic = "t", .payload = "{}", .payload_is_object = true};
    er_outbox_failure why;
    cr_assert_eq(er_outbox_job(&ev, &route, &lim, T0, &rnd, &job, &why, &err), 0);
    cr_assert_str_eq(job.idempotency_key, EVENT);
    cr_assert_null(job.trace_id);
    cr_assert_not_null(strstr(job.payload, "\"trace_id\":null"), "%s", job.payload);
    er_job other;
    er_outbox_route r2 = {.queue = "emails", .name = "receipt"};
    cr_assert_eq(er_outbox_job(&ev, &r2, &lim, T0, &rnd, &other, &why, &err), 0);
    cr_assert_str_eq(other.idempotency_key, job.idempotency_key);
    cr_assert_str_neq(other.id, job.id);
    er_job_fini(&other);
}

Test(outbox, rows_that_cannot_be_jobs_say_whether_to_retry)
{
    er_outbox_failure why;
    er_outbox_event ev = {.id = EVENT, .topic = "t", .payload = "[1]", .payload_is_object = false};
    cr_assert_eq(er_outbox_job(&ev, &route, &lim, T0, &rnd, &job, &why, &err), ER_EINVAL);
    cr_assert_eq(why, ER_OUTBOX_SET_ASIDE);
    cr_assert_str_eq(err.field, "payload");
    cr_assert_null(job.id);

    static char big[5000];
    memset(big, 'x', sizeof big - 1);
    memcpy(big, "{\"s\":\"", 6);
    memcpy(big + sizeof big - 3, "\"}", 2);
    er_outbox_event large = {.id = EVENT, .topic = "t", .payload = big, .payload_is_object = true};
    cr_assert_eq(er_outbox_job(&large, &route, &lim, T0, &rnd, &job, &why, &err), ER_ETOOBIG);
    cr_assert_eq(why, ER_OUTBOX_RETRY);
    cr_assert_str_eq(err.field, "payload");

    er_outbox_event badtrace = {.id = EVENT, .topic = "t", .payload = "{}",
                                .payload_is_object = true, .trace_id = "has space"};
    cr_assert_eq(er_outbox_job(&badtrace, &route, &lim, T0, &rnd, &job, &why, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "trace_id");
}

Test(outbox, retry_delays_double_to_five_minutes)
{
    cr_assert_eq(er_outbox_retry_delay_ms(1), 1000);
    cr_assert_eq(er_outbox_retry_delay_ms(2), 2000);
    cr_assert_eq(er_outbox_retry_delay_ms(4), 8000);
    cr_assert_eq(er_outbox_retry_delay_ms(9), 256000);
    cr_assert_eq(er_outbox_retry_delay_ms(10), 300000);
    cr_assert_eq(er_outbox_retry_delay_ms(1000000), 300000);
}
