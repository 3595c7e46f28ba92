/* SPDX-License-Identifier: MIT
 *
 * Unit tests of the Faktory frontend's pure parts: the line and reply
 * readers at their limits (proto.c), the job hash mapping (job_map.c), and
 * the worker registry's reaping and the lease cache (workers.c), with the
 * time as an argument.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/faktory/fk_internal.h"
#include "server/faktory/job_map.h"
#include "server/faktory/proto.h"

Test(faktory_proto, a_line_ends_at_crlf_or_a_bare_lf_and_may_be_exactly_max)
{
    size_t n, used;
    cr_assert_eq(er_fk_line_next("INFO\r\nX", 7, 16, &n, &used), 1);
    cr_assert_eq(n, 4);
    cr_assert_eq(used, 6);
    cr_assert_eq(er_fk_line_next("INFO\nX", 6, 16, &n, &used), 1);
    cr_assert_eq(n, 4);
    cr_assert_eq(used, 5);
    cr_assert_eq(er_fk_line_next("INFO", 4, 16, &n, &used), 0);
    cr_assert_eq(er_fk_line_next("ABCD\r\n", 6, 4, &n, &used), 1); /* exactly max */
    cr_assert_eq(er_fk_line_next("ABCD\r", 5, 4, &n, &used), 0);   /* its end may follow */
    cr_assert_eq(er_fk_line_next("ABCDE", 5, 4, &n, &used), ER_ETOOBIG);
    cr_assert_eq(er_fk_line_next("ABCDE\r\n", 7, 4, &n, &used), ER_ETOOBIG);
}

Test(faktory_proto, commands_split_into_verb_and_argument)
{
    er_fk_command c;
    const char *why = NULL;
    cr_assert_eq(er_fk_command_parse("PUSH {\"a\":1}", 12, &c, &why), 0);
    cr_assert_eq(c.verb, ER_FK_PUSH);
    cr_assert_eq(c.arg_len, 7);
    cr_assert_eq(er_fk_command_parse("INFO", 4, &c, &why), 0);
    cr_assert_eq(c.verb, ER_FK_INFO);
    cr_assert_eq(c.arg_len, 0);
    cr_assert_eq(er_fk_command_parse("NOPE x", 6, &c, &why), 0);
    cr_assert_eq(c.verb, ER_FK_UNKNOWN);
    cr_assert_eq(er_fk_command_parse("push x", 6, &c, &why), ER_EINVAL);
    cr_assert_eq(er_fk_command_parse("", 0, &c, &why), ER_EINVAL);
    cr_assert_eq(er_fk_command_parse("PUSH \x01", 6, &c, &why), ER_EINVAL);
    cr_assert_eq(er_fk_command_parse("ABCDEFGHIJKLMNOPQ", 17, &c, &why), ER_EINVAL);
    cr_assert(er_fk_looks_like_http("GET / HTTP/1.1", 14));
    cr_assert(er_fk_looks_like_http("FOO /x HTTP/1.0", 15));
    cr_assert(!er_fk_looks_like_http("HELLO {\"v\":2}", 13));
}

Test(faktory_proto, replies_read_back_and_bulk_lengths_are_bounded)
{
    er_buf b;
    er_buf_init(&b, 1024);
    er_fk_reply_simple(&b, "OK");
    er_fk_reply_error(&b, "ERR", "two\r\nlines");
    er_fk_reply_bulk(&b, "abc", 3);
    er_fk_reply_null(&b);
    er_fk_reply r;
    size_t used, at = 0;
    cr_assert_eq(er_fk_reply_next(b.data, b.len, 64, 64, &r, &used), 1);
    cr_assert(r.kind == ER_FK_R_SIMPLE && r.len == 2);
    at += used;
    cr_assert_eq(er_fk_reply_next(b.data + at, b.len - at, 64, 64, &r, &used), 1);
    cr_assert(r.kind == ER_FK_R_ERROR && memcmp(r.data, "ERR two  lines", r.len) == 0);
    at += used;
    cr_assert_eq(er_fk_reply_next(b.data + at, b.len - at, 64, 64, &r, &used), 1);
    cr_assert(r.kind == ER_FK_R_BULK && r.len == 3 && memcmp(r.data, "abc", 3) == 0);
    at += used;
    cr_assert_eq(er_fk_reply_next(b.data + at, b.len - at, 64, 64, &r, &used), 1);
    cr_assert_eq(r.kind, ER_FK_R_NULL);
    er_buf_fini(&b);
    cr_assert_eq(er_fk_reply_next("$100\r\n", 6, 64, 64, &r, &used), ER_ETOOBIG);
    cr_assert_eq(er_fk_reply_next("$3\r\nab", 6, 64, 64, &r, &used), 0);
    cr_assert_eq(er_fk_reply_next("$3\r\nabcd\r\n", 10, 64, 64, &r, &used), ER_EINVAL);
    cr_assert_eq(er_fk_reply_next("$-2\r\n", 5, 64, 64, &r, &used), ER_EINVAL);
    cr_assert_eq(er_fk_reply_next("$01\r\n", 5, 64, 64, &r, &used), ER_EINVAL);
    cr_assert_eq(er_fk_reply_next(":1\r\n", 4, 64, 64, &r, &used), ER_EINVAL);
}

static int spec_of(const char *text, er_job_spec *sp, char **custom, er_error *err)
{
    json_t *o = json_loads(text, 0, NULL);
    cr_assert_not_null(o, "%s", text);
    int rc = er_fk_job_spec(o, 1764547200000, sp, custom, err);
    json_decref(o); /* the slices are not read after this in these tests */
    return rc;
}

Test(faktory_job_map, retry_maps_to_attempts_and_reserve_for_is_clamped)
{
    er_job_spec sp;
    char *custom;
    er_error err = {0};
    cr_assert_eq(spec_of("{\"jobtype\":\"t\"}", &sp, &custom, &err), 0);
    cr_assert_eq(sp.max_attempts.v, 26);
    cr_assert_eq(sp.timeout_ms.v, ER_FK_RESERVE_DEFAULT_MS);
    cr_assert(sp.faktory);
    er_job_spec_fini(&sp);
    free(custom);
    const struct {
        const char *text;
        int64_t attempts, timeout_ms;
    } rows[] = {
        {"{\"jobtype\":\"t\",\"retry\":0}", 1, ER_FK_RESERVE_DEFAULT_MS},
        {"{\"jobtype\":\"t\",\"retry\":-1}", 1, ER_FK_RESERVE_DEFAULT_MS},
        {"{\"jobtype\":\"t\",\"retry\":3,\"reserve_for\":0}", 4, 1000},
        {"{\"jobtype\":\"t\",\"reserve_for\":999999}", 26, ER_FK_RESERVE_MAX_MS},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cr_assert_eq(spec_of(rows[i].text, &sp, &custom, &err), 0, "%s", rows[i].text);
        cr_assert_eq(sp.max_attempts.v, rows[i].attempts, "%s", rows[i].text);
        cr_assert_eq(sp.timeout_ms.v, rows[i].timeout_ms, "%s", rows[i].text);
        er_job_spec_fini(&sp);
        free(custom);
    }
    cr_assert_eq(spec_of("{\"jobtype\":\"t\",\"retry\":\"3\"}", &sp, &custom, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "retry");
    er_job_spec_fini(&sp);
    free(custom);
    cr_assert_eq(spec_of("{\"jobtype\":\"t\",\"args\":{}}", &sp, &custom, &err), ER_EINVAL);
    cr_assert_str_eq(err.field, "args");
    er_job_spec_fini(&sp);
    free(custom);
}

Test(faktory_job_map, a_non_array_payload_is_written_as_the_only_arg)
{
    er_job j;
    er_job_init(&j);
    j.id = strdup("h1");
    j.queue = strdup("q");
    j.name = strdup("n");
    j.payload = strdup("{\"a\":1}");
    j.payload_len = strlen(j.payload);
    j.max_attempts = 3;
    er_jsonw w;
    er_jsonw_init(&w, 4096);
    er_fk_job_write(&j, 60, &w);
    json_t *o = json_loads(w.out.data, 0, NULL);
    json_t *want = json_pack("[{si}]", "a", 1);
    cr_assert(json_equal(json_object_get(o, "args"), want), "%s", w.out.data);
    cr_assert_eq(json_integer_value(json_object_get(o, "retry")), 2);
    json_decref(want);
    json_decref(o);
    er_jsonw_fini(&w);
    er_job_fini(&j);
}

Test(faktory_workers, a_worker_without_a_beat_for_60_s_is_reaped)
{
    er_faktory f;
    memset(&f, 0, sizeof f);
    cr_assert_not_null(er_fk_worker_touch(&f, "a", 1000));
    cr_assert_not_null(er_fk_worker_touch(&f, "b", 1000));
    cr_assert_not_null(er_fk_worker_touch(&f, "a", 30000)); /* a beats again */
    cr_assert_eq(f.nworkers, 2);
    er_fk_workers_reap(&f, 1000 + ER_FK_WORKER_TTL_MS);
    cr_assert_eq(f.nworkers, 2); /* exactly 60 s: kept */
    er_fk_workers_reap(&f, 1001 + ER_FK_WORKER_TTL_MS);
    cr_assert_eq(f.nworkers, 1);
    cr_assert_not_null(er_fk_worker_find(&f, "a"));
    cr_assert_null(er_fk_worker_find(&f, "b"));
    er_faktory_worker_signalled(NULL, "a", ER_FK_QUIET); /* no frontend: nothing */
    er_fk_workers_free(&f);
    cr_assert_eq(f.nworkers, 0);
}

Test(faktory_workers, a_worker_that_beats_on_another_node_is_not_reaped)
{
    er_faktory f;
    memset(&f, 0, sizeof f);
    fk_worker *a = er_fk_worker_touch(&f, "a", 1000);
    cr_assert_not_null(er_fk_worker_touch(&f, "b", 1000));
    cr_assert(a->dirty, "a beat is written to the store later");
    a->stored_beat = 50000; /* the store said: it beat elsewhere at 50 s */
    er_fk_workers_reap(&f, 1001 + ER_FK_WORKER_TTL_MS);
    cr_assert_not_null(er_fk_worker_find(&f, "a"));
    cr_assert_null(er_fk_worker_find(&f, "b"));
    er_fk_workers_reap(&f, 50001 + ER_FK_WORKER_TTL_MS);
    cr_assert_null(er_fk_worker_find(&f, "a"));
    er_fk_workers_free(&f);
}

Test(faktory_workers, a_signal_from_the_store_is_raised_only)
{
    er_faktory f;
    memset(&f, 0, sizeof f);
    fk_worker *a = er_fk_worker_touch(&f, "a", 1000);
    f.prefetch = 4;
    er_job j;
    er_job_init(&j);
    j.id = strdup("buffered");
    j.queue = strdup("q");
    cr_assert(er_fk_pre_put(&f, a, &j, 1000));
    cr_assert_eq(a->npre, 1);
    er_faktory_worker_signalled(&f, "a", ER_FK_TERMINATE);
    cr_assert_eq(a->npre, 0, "a signal from the store releases the wid's buffered jobs");
    er_faktory_worker_signalled(&f, "a", ER_FK_QUIET);
    er_faktory_worker_signalled(&f, "nobody", ER_FK_QUIET);
    cr_assert_eq(a->v.signal, ER_FK_TERMINATE);
    er_fk_workers_free(&f);
}

Test(faktory_workers, the_lease_cache_remembers_replaces_forgets_and_sweeps)
{
    er_faktory f;
    memset(&f, 0, sizeof f);
    er_fk_cache_put(&f.leases, "j1", "tok1", "w", 5000);
    er_fk_cache_put(&f.leases, "j2", "tok2", "w", 9000);
    er_fk_cache_put(&f.leases, "j1", "tok1b", "w2", 7000); /* a newer lease */
    cr_assert_eq(f.leases.n, 2);
    const fk_lease *l = er_fk_cache_get(&f.leases, "j1");
    cr_assert(l && strcmp(l->token, "tok1b") == 0 && strcmp(l->wid, "w2") == 0);
    er_fk_cache_sweep(&f.leases, 8000);
    cr_assert_null(er_fk_cache_get(&f.leases, "j1"));
    cr_assert_not_null(er_fk_cache_get(&f.leases, "j2"));
    er_fk_cache_del(&f.leases, "j2");
    cr_assert_eq(f.leases.n, 0);
    er_fk_cache_free(&f.leases);
}
