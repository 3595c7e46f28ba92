/* SPDX-License-Identifier: MIT
 *
 * Conformance cases of the dashboard's store operations: sessions (idle
 * expiry, delete), the audit log (newest first, paged; retention) and the
 * selection of a bulk action's jobs. Included after conformance_cases.h
 * (its suite, helpers and fixtures) by each store's conformance file.
 */
#ifndef ER_TESTS_UI_CASES_H
#define ER_TESTS_UI_CASES_H

static const char HASH_A[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
static const char HASH_B[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

static void session_put(const char *hash, int64_t expires_at)
{
    er_session in = {.role = 3, .created_at = T0, .expires_at = expires_at};
    snprintf(in.name, sizeof in.name, "ops");
    snprintf(in.csrf, sizeof in.csrf, "c-%s", hash + 60);
    er_error err = {0};
    cr_assert_eq(OPS->session_put(S, hash, &in, &err), 0, "%s", err.message);
}

Test(conformance, a_session_touch_moves_its_expiry_until_it_lapses)
{
    session_put(HASH_A, T0 + 1000);
    er_session out;
    er_error err = {0};
    cr_assert_eq(OPS->session_touch(S, HASH_A, T0 + 500, 1000, &out, &err), 0, "%s", err.message);
    cr_assert_eq(out.role, 3);
    cr_assert_str_eq(out.name, "ops");
    cr_assert_str_eq(out.csrf, "c-aaaa");
    cr_assert_eq(out.created_at, T0);
    cr_assert_eq(out.expires_at, T0 + 1500);
    /* idle until the new expiry: ended (the sweep deletes the row later) */
    cr_assert_eq(OPS->session_touch(S, HASH_A, T0 + 1500, 1000, &out, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->session_touch(S, HASH_A, T0 + 2000, 1000, &out, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->session_touch(S, HASH_B, T0, 1000, &out, &err), ER_ENOTFOUND);
}

Test(conformance, a_deleted_session_is_gone_and_deleting_again_is_fine)
{
    session_put(HASH_A, T0 + 1000);
    session_put(HASH_B, T0 + 1000);
    er_error err = {0};
    er_session out;
    cr_assert_eq(OPS->session_delete(S, HASH_A, &err), 0);
    cr_assert_eq(OPS->session_delete(S, HASH_A, &err), 0);
    cr_assert_eq(OPS->session_touch(S, HASH_A, T0, 1000, &out, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->session_touch(S, HASH_B, T0, 1000, &out, &err), 0);
}

static int64_t audit_add(int64_t at, const char *action)
{
    er_audit a = {.at = at, .who = sdup("admin@ops"), .action = sdup(action),
                  .target = sdup("q1"), .count = 7};
    er_error err = {0};
    cr_assert_eq(OPS->audit_add(S, &a, &err), 0, "%s", err.message);
    int64_t seq = a.seq;
    er_audit_fini(&a);
    return seq;
}

Test(conformance, the_audit_log_lists_newest_first_in_pages)
{
    int64_t s1 = audit_add(T0, "queue.pause"), s2 = audit_add(T0 + 1, "queue.resume"),
            s3 = audit_add(T0 + 2, "dead.redrive");
    cr_assert(s1 < s2 && s2 < s3);
    er_audit_list l = {0};
    er_error err = {0};
    cr_assert_eq(OPS->audit_list(S, INT64_MAX, 2, &l, &err), 0, "%s", err.message);
    cr_assert_eq(l.len, 2);
    cr_assert_eq(l.items[0].seq, s3);
    cr_assert_str_eq(l.items[0].action, "dead.redrive");
    cr_assert_str_eq(l.items[0].who, "admin@ops");
    cr_assert_str_eq(l.items[0].target, "q1");
    cr_assert_eq(l.items[0].count, 7);
    cr_assert_eq(l.items[0].at, T0 + 2);
    cr_assert_eq(l.items[1].seq, s2);
    er_audit_list_fini(&l);
    cr_assert_eq(OPS->audit_list(S, s2, 2, &l, &err), 0);
    cr_assert_eq(l.len, 1);
    cr_assert_eq(l.items[0].seq, s1);
    er_audit_list_fini(&l);
}

Test(conformance, the_sweep_deletes_expired_sessions_and_old_audit_rows)
{
    session_put(HASH_A, T0);
    session_put(HASH_B, T0 + 10);
    audit_add(T0 - 100, "queue.pause");
    int64_t keep = audit_add(T0 - 50, "queue.resume");
    int n = 0;
    er_error err = {0};
    cr_assert_eq(OPS->ui_sweep(S, T0, T0 - 60, 100, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 2);
    er_session out;
    cr_assert_eq(OPS->session_touch(S, HASH_A, T0 - 5, 1000, &out, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->session_touch(S, HASH_B, T0, 1000, &out, &err), 0);
    er_audit_list l = {0};
    cr_assert_eq(OPS->audit_list(S, INT64_MAX, 10, &l, &err), 0);
    cr_assert_eq(l.len, 1);
    cr_assert_eq(l.items[0].seq, keep);
    er_audit_list_fini(&l);
}

Test(conformance, bulk_ids_page_in_job_order_and_follow_the_filter)
{
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof id, "b%d", i);
        put(id, i < 4 ? "qa" : "qb", 0, T0, T0);
    }
    put("later", "qa", 0, T0 + 60000, T0);
    er_bulk_filter f = {.queue = "qa", .state = ER_STATE_WAITING};
    char **ids = NULL;
    size_t n = 0;
    int64_t last = 0, count = 0;
    er_error err = {0};
    cr_assert_eq(OPS->bulk_count(S, &f, &count, &err), 0, "%s", err.message);
    cr_assert_eq(count, 4);
    cr_assert_eq(OPS->bulk_ids(S, &f, 0, 3, &ids, &n, &last, &err), 0, "%s", err.message);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(ids[0], "b0");
    cr_assert_str_eq(ids[2], "b2");
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
    cr_assert_eq(OPS->bulk_ids(S, &f, last, 3, &ids, &n, &last, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(ids[0], "b3");
    free(ids[0]);
    free(ids);
    er_bulk_filter all = {.state = ER_STATE_WAITING};
    cr_assert_eq(OPS->bulk_count(S, &all, &count, &err), 0);
    cr_assert_eq(count, 5);
    er_bulk_filter named = {.state = ER_STATE_WAITING, .name = "other"};
    cr_assert_eq(OPS->bulk_count(S, &named, &count, &err), 0);
    cr_assert_eq(count, 0);
    er_bulk_filter sched = {.queue = "qa", .state = ER_STATE_SCHEDULED};
    cr_assert_eq(OPS->bulk_ids(S, &sched, 0, 10, &ids, &n, &last, &err), 0);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(ids[0], "later");
    free(ids[0]);
    free(ids);
}

Test(conformance, bulk_filter_tells_retries_and_move_scheduled_runs_or_buries)
{
    put("fresh", "qa", 0, T0 + 60000, T0);
    er_job j;
    mkjob(&j, "again", "qa", 0, T0 + 60000, T0);
    j.attempts = 1; /* a failure waiting for its retry */
    bool dupl = true;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0, "%s", err.message);
    er_job_fini(&j);
    int64_t count = 0;
    er_bulk_filter some = {.state = ER_STATE_SCHEDULED, .tries = ER_BULK_TRIES_SOME};
    er_bulk_filter none = {.state = ER_STATE_SCHEDULED, .tries = ER_BULK_TRIES_NONE};
    er_bulk_filter any = {.state = ER_STATE_SCHEDULED, .queue = "qa"};
    cr_assert_eq(OPS->bulk_count(S, &some, &count, &err), 0, "%s", err.message);
    cr_assert_eq(count, 1);
    cr_assert_eq(OPS->bulk_count(S, &none, &count, &err), 0);
    cr_assert_eq(count, 1);
    cr_assert_eq(OPS->bulk_count(S, &any, &count, &err), 0);
    cr_assert_eq(count, 2);
    char **ids = NULL;
    size_t n = 0;
    int64_t last = 0;
    cr_assert_eq(OPS->bulk_ids(S, &some, 0, 10, &ids, &n, &last, &err), 0, "%s", err.message);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(ids[0], "again");
    free(ids[0]);
    free(ids);

    char *q = NULL;
    cr_assert_eq(OPS->move_scheduled(S, "again", NULL, T0 + 5, &q, &err), 0, "%s", err.message);
    cr_assert_str_eq(q, "qa");
    free(q);
    cr_assert_eq(OPS->get_job(S, "again", &j, &err), 0);
    cr_assert_eq(j.state, ER_STATE_WAITING);
    cr_assert_eq(j.run_at, T0 + 5);
    er_job_fini(&j);
    cr_assert_eq(OPS->move_scheduled(S, "again", NULL, T0 + 6, &q, &err), ER_ENOTFOUND);
    cr_assert_null(q);

    const char *le = "{\"class\":\"permanent\",\"message\":\"killed\"}";
    cr_assert_eq(OPS->move_scheduled(S, "fresh", le, T0 + 7, &q, &err), 0, "%s", err.message);
    free(q);
    cr_assert_eq(OPS->get_job(S, "fresh", &j, &err), 0);
    cr_assert_eq(j.state, ER_STATE_DEAD);
    cr_assert_eq(j.finished_at, T0 + 7);
    cr_assert(j.last_error && strstr(j.last_error, "killed"));
    er_job_fini(&j);
    cr_assert_eq(OPS->move_scheduled(S, "nobody", le, T0 + 8, &q, &err), ER_ENOTFOUND);
}

#endif
