/* SPDX-License-Identifier: MIT
 *
 * The worker's wire text (src/client/jscan.c, fetched.c, ackq.c): the
 * strict tokenizer must accept what jansson accepts and refuse what it
 * refuses for a reply, the job reader must unescape correctly and keep the
 * payload as sent, and the writer and the ack queue must produce valid
 * JSON.
 */
#include "client/ackq.h"
#include "client/fetched.h"
#include "errand/errand.h"
#include "util/jsonw.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int scan(const char *text)
{
    er_jscan s;
    er_jscan_init(&s);
    int rc = er_jscan_parse(&s, text, strlen(text));
    er_jscan_fini(&s);
    return rc;
}

/* Our verdict agrees with jansson's on a reply (an object or an array). */
static void agrees(const char *text)
{
    json_t *v = json_loadb(text, strlen(text), 0, NULL);
    int rc = scan(text);
    cr_expect_eq(rc == 0, v != NULL, "%s: ours %d, jansson %s", text, rc, v ? "ok" : "refuses");
    json_decref(v);
}

Test(fetched, accepts_valid_documents)
{
    const char *ok[] = {
        "{}", "[]", " { } ", "{\"a\":1}", "[1,-2,3.5,-0.25e+10,1E3,0]",
        "{\"a\":[true,false,null,{\"b\":\"c\"}],\"d\":{}}",
        "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"}",
        "{\"u\":\"h\xc3\xa9\xf0\x9f\x98\x80\"}", "[[[[[]]]]]", "\n[\r\n1\t,2 ]\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        cr_expect_eq(scan(ok[i]), 0, "%s", ok[i]);
        agrees(ok[i]);
    }
}

Test(fetched, refuses_what_jansson_refuses)
{
    const char *bad[] = {
        "", " ", "1", "\"s\"", "null", "{", "[", "}", "{]", "[}", "{\"a\"}", "{\"a\":}",
        "{\"a\" 1}", "{\"a\":1,}", "[1,]", "[,1]", "[1 2]", "{\"a\":1 \"b\":2}", "{1:2}",
        "[01]", "[1.]", "[.5]", "[-]", "[1e]", "[+1]", "[tru]", "[truex]", "[nul]",
        "[\"a\nb\"]", "[\"\\x\"]", "[\"\\u12\"]", "[\"\\u0000\"]", "[\"\\ud800\"]",
        "[\"\\udc00\"]", "[\"\\ud800\\u0041\"]", "[\"\xff\"]", "[\"\xc0\x80\"]",
        "[\"\xed\xa0\x80\"]", "[\"\xe2\x82\"]", "{} {}", "[]x", "[\"abc",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(scan(bad[i]), ERRAND_EINVAL, "%s", bad[i]);
        agrees(bad[i]);
    }
}

Test(fetched, depth_limit_is_janssons)
{
    size_t n = ER_JS_MAX_DEPTH + 1;
    char *deep = malloc(2 * n + 1);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = '\0';
    cr_expect_eq(scan(deep), ERRAND_EINVAL);
    deep[n - 1] = ' ';
    deep[n] = ' ';
    cr_expect_eq(scan(deep), 0);
    free(deep);
}

Test(fetched, get_finds_members_and_skips_nested_values)
{
    const char *t = "{\"a\":{\"x\":[1,{\"y\":2}]},\"b\":\"v\",\"c\":3,\"b\":\"w\"}";
    er_jscan s;
    er_jscan_init(&s);
    cr_assert_eq(er_jscan_parse(&s, t, strlen(t)), 0);
    long b = er_jscan_get(&s, t, 0, "b");
    cr_assert_geq(b, 0);
    char out[8];
    er_jscan_unescape(t, &s.tok[b], out);
    cr_expect_str_eq(out, "w"); /* the last one, as jansson */
    long c = er_jscan_get(&s, t, 0, "c");
    int64_t v = 0;
    cr_expect(er_jscan_int(t, &s.tok[c], &v));
    cr_expect_eq(v, 3);
    cr_expect_eq(er_jscan_get(&s, t, 0, "x"), -1); /* nested, not a member */
    cr_expect_eq(er_jscan_get(&s, t, 0, "zz"), -1);
    cr_expect_eq(er_jscan_get(&s, t, c, "a"), -1); /* not an object */
    er_jscan_fini(&s);
}

Test(fetched, ints_are_integers_only)
{
    const char *t = "[0,-7,9223372036854775807,-9223372036854775808,9223372036854775808,1.0,"
                    "1e2,\"5\"]";
    er_jscan s;
    er_jscan_init(&s);
    cr_assert_eq(er_jscan_parse(&s, t, strlen(t)), 0);
    int64_t v;
    cr_expect(er_jscan_int(t, &s.tok[1], &v) && v == 0);
    cr_expect(er_jscan_int(t, &s.tok[2], &v) && v == -7);
    cr_expect(er_jscan_int(t, &s.tok[3], &v) && v == INT64_MAX);
    cr_expect(er_jscan_int(t, &s.tok[4], &v) && v == INT64_MIN);
    cr_expect_not(er_jscan_int(t, &s.tok[5], &v));
    cr_expect_not(er_jscan_int(t, &s.tok[6], &v));
    cr_expect_not(er_jscan_int(t, &s.tok[7], &v));
    cr_expect_not(er_jscan_int(t, &s.tok[8], &v));
    er_jscan_fini(&s);
}

static const char *REPLY =
    "{\"jobs\":[{\"id\":\"j\\u00e91\",\"queue\":\"q\","
    "\"name\":\"n\\\"x\\ud83d\\ude00\\u00e9\\n\",\"payload\":"
    "{\"a\":\"h\xc3\xa9\\ud83d\\ude00 \\\"q\\\"\",\"n\":[1,2500.0,null,true]},\"attempt\":2,"
    "\"started\":3,\"lease_token\":\"tok\\/1\",\"idempotency_key\":\"k\",\"trace_id\":null,"
    "\"timeout_ms\":5000,\"created_at\":\"2026-11-30T04:19:04.463Z\"},"
    "{\"id\":\"no-token\"},"
    "{\"id\":\"s\",\"lease_token\":\"t\",\"payload\":\"just \\\"text\\\"\",\"attempt\":1.5},"
    "7]}";

Test(fetched, reads_a_leased_job)
{
    er_jscan s;
    er_jscan_init(&s);
    cr_assert_eq(er_jscan_parse(&s, REPLY, strlen(REPLY)), 0);
    long arr = er_jscan_get(&s, REPLY, 0, "jobs");
    cr_assert_eq(s.tok[arr].type, ER_JS_ARRAY);
    long k = arr + 1;
    er_fetched f;
    char *blk = er_fetched_read(REPLY, &s, k, 16, &f);
    cr_assert_not_null(blk);
    for (int i = 0; i < 16; i++)
        cr_expect_eq(blk[i], 0);
    cr_expect_str_eq(f.id, "j\xc3\xa9" "1");
    cr_expect_str_eq(f.name, "n\"x\xf0\x9f\x98\x80\xc3\xa9\n");
    cr_expect_str_eq(f.token, "tok/1");
    cr_expect_str_eq(f.queue, "q");
    cr_expect_str_eq(f.idem, "k");
    cr_expect_str_eq(f.trace, "");
    cr_expect_str_eq(f.created_at, "2026-11-30T04:19:04.463Z");
    cr_expect_eq(f.attempt, 2);
    cr_expect_eq(f.started, 3);
    cr_expect_eq(f.timeout_ms, 5000);
    /* The payload is the text as sent, and means what jansson reads. */
    cr_expect_str_eq(f.payload,
                     "{\"a\":\"h\xc3\xa9\\ud83d\\ude00 \\\"q\\\"\",\"n\":[1,2500.0,null,true]}");
    json_t *p = json_loads(f.payload, 0, NULL);
    cr_assert_not_null(p);
    cr_expect_str_eq(json_string_value(json_object_get(p, "a")),
                     "h\xc3\xa9\xf0\x9f\x98\x80 \"q\"");
    json_decref(p);
    json_t *whole = json_loads(f.json, 0, NULL);
    cr_assert_not_null(whole);
    cr_expect_str_eq(json_string_value(json_object_get(whole, "lease_token")), "tok/1");
    json_decref(whole);
    free(blk);

    k = s.tok[k].next; /* no lease_token: unreadable */
    cr_expect_null(er_fetched_read(REPLY, &s, k, 16, &f));
    k = s.tok[k].next; /* a string payload keeps its quotes; 1.5 is not an attempt */
    blk = er_fetched_read(REPLY, &s, k, 0, &f);
    cr_assert_not_null(blk);
    cr_expect_str_eq(f.payload, "\"just \\\"text\\\"\"");
    cr_expect_eq(f.attempt, 0);
    cr_expect_str_eq(f.queue, "");
    free(blk);
    k = s.tok[k].next; /* not an object */
    cr_expect_null(er_fetched_read(REPLY, &s, k, 0, &f));
    cr_expect_eq((size_t)s.tok[k].next, s.n);
    er_jscan_fini(&s);
}

Test(fetched, absent_payload_reads_as_null)
{
    const char *t = "{\"jobs\":[{\"id\":\"a\",\"lease_token\":\"b\"}]}";
    er_jscan s;
    er_jscan_init(&s);
    cr_assert_eq(er_jscan_parse(&s, t, strlen(t)), 0);
    er_fetched f;
    char *blk = er_fetched_read(t, &s, 3, 0, &f); /* root, "jobs", the array, the job */
    cr_assert_not_null(blk);
    cr_expect_str_eq(f.payload, "null");
    cr_expect_str_eq(f.json, "{\"id\":\"a\",\"lease_token\":\"b\"}");
    free(blk);
    er_jscan_fini(&s);
}

Test(fetched, request_text_is_written_with_utils_escaper)
{
    er_buf b;
    er_buf_init(&b, 4096);
    er_buf_adds(&b, "[");
    er_json_str(&b, "q\"\\/\n\r\t\b\f\x01\x1f h\xc3\xa9 \xf0\x9f\x98\x80");
    er_buf_adds(&b, ",");
    er_json_str(&b, "bad \xff\xc0\x80 end");
    er_buf_addf(&b, ",%ld]", -42L);
    cr_assert_eq(b.err, 0);
    json_t *v = json_loads(b.data, 0, NULL);
    cr_assert_not_null(v, "%s", b.data);
    cr_expect_str_eq(json_string_value(json_array_get(v, 0)),
                     "q\"\\/\n\r\t\b\f\x01\x1f h\xc3\xa9 \xf0\x9f\x98\x80");
    cr_expect_str_eq(json_string_value(json_array_get(v, 1)),
                     "bad \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd end");
    cr_expect_eq(json_integer_value(json_array_get(v, 2)), -42);
    json_decref(v);
    er_buf_fini(&b);
}

static void push(er_ackq *q, const char *s)
{
    cr_assert_eq(er_ackq_push(q, s, strlen(s)), 0);
}

static char *text_of(const er_ackq *q)
{
    er_buf b;
    er_buf_init(&b, 4096);
    cr_assert_eq(er_ackq_write(q, &b), 0);
    return er_buf_take(&b, NULL);
}

Test(fetched, ack_queue_takes_and_restores_in_order)
{
    er_ackq q = {0}, part = {0};
    char *t = text_of(&q);
    cr_expect_str_eq(t, "[]");
    free(t);
    push(&q, "{\"id\":1}");
    push(&q, "{\"id\":2}");
    push(&q, "{\"id\":3}");
    cr_assert_eq(er_ackq_take(&q, 2, &part), 0);
    t = text_of(&part);
    cr_expect_str_eq(t, "[{\"id\":1},{\"id\":2}]");
    free(t);
    t = text_of(&q);
    cr_expect_str_eq(t, "[{\"id\":3}]");
    free(t);
    push(&q, "{\"id\":4}");
    cr_assert_eq(er_ackq_prepend(&q, &part), 0); /* a failed send goes back in front */
    cr_expect_eq(part.n, 0);
    cr_expect_eq(q.n, 4);
    t = text_of(&q);
    cr_expect_str_eq(t, "[{\"id\":1},{\"id\":2},{\"id\":3},{\"id\":4}]");
    free(t);
    size_t len;
    const char *it = er_ackq_item(&q, 2, &len);
    cr_expect_eq(len, 8);
    cr_expect_eq(memcmp(it, "{\"id\":3}", len), 0);
    cr_assert_eq(er_ackq_take(&q, 10, &part), 0); /* all of it */
    cr_expect_eq(q.n, 0);
    cr_expect_eq(part.n, 4);
    er_ackq_fini(&q);
    er_ackq_fini(&part);
}
