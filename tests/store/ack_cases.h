/* SPDX-License-Identifier: MIT
 *
 * Conformance cases for ops->complete_many and ops->fail_many, included at
 * the end of conformance_cases.h (its helpers, S, OPS and R); a store that
 * has no fail_many skips those.
 */
#ifndef ER_TESTS_ACK_CASES_H
#define ER_TESTS_ACK_CASES_H

/* ---- complete_many ---- */

/* Leases `n` jobs "c0".."c{n-1}" of queue "q" into *l (fetch order = ids). */
static void lease_n(int n, er_job_list *l)
{
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "c%d", i);
        put(id, "q", 0, T0, T0);
    }
    cr_assert_eq(fetch1("q", n, T0, l), n);
}

static char *result_of(const char *id)
{
    er_job j;
    er_error err = {0};
    cr_assert_eq(OPS->get_job(S, id, &j, &err), 0);
    char *r = j.result ? strdup(j.result) : NULL;
    er_job_fini(&j);
    return r;
}

Test(conformance, complete_many_completes_a_batch_with_each_result)
{
    er_job_list l = {0};
    lease_n(3, &l);
    er_error e[3], err = {0};
    er_ack_info info[3] = {0};
    er_complete_item it[3] = {
        {.id = "c0", .token = l.items[0].lease_token, .result = "{\"n\":0}", .err = &e[0],
         .info = &info[0]},
        {.id = "c1", .token = l.items[1].lease_token, .result = NULL, .err = &e[1],
         .info = &info[1]},
        {.id = "c2", .token = l.items[2].lease_token, .result = "[2]", .err = &e[2],
         .info = &info[2]},
    };
    cr_assert_not_null(OPS->complete_many);
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->complete_many(S, it, 3, T0 + 5, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(it[i].rc, 0);
        cr_assert_eq(state_of(it[i].id), ER_STATE_COMPLETED);
        /* each item is told its own job's queue and attempt start */
        cr_assert_str_eq(info[i].queue, l.items[i].queue);
        cr_assert_eq(info[i].started_at, l.items[i].started_at);
    }
    char *r = result_of("c0");
    cr_assert_str_eq(r, "{\"n\":0}");
    free(r);
    cr_assert_null(result_of("c1"));
    r = result_of("c2");
    cr_assert_str_eq(r, "[2]");
    free(r);
    er_job j;
    cr_assert_eq(OPS->get_job(S, "c1", &j, &err), 0);
    cr_assert_eq(j.finished_at, T0 + 5);
    cr_assert_null(j.lease_token);
    er_job_fini(&j);
    er_job_list_fini(&l);
}

Test(conformance, complete_many_refuses_items_as_complete_does_and_applies_the_rest)
{
    er_job_list l = {0};
    lease_n(4, &l);
    er_error err = {0};
    /* c3 is already completed before the batch */
    cr_assert_eq(OPS->complete(S, "c3", l.items[3].lease_token, NULL, T0, NULL, &err), 0);
    er_error e[5];
    memset(e, 0, sizeof e);
    er_complete_item it[5] = {
        {.id = "c0", .token = l.items[0].lease_token, .result = "1", .err = &e[0]},
        {.id = "c1", .token = "not-the-token", .result = "2", .err = &e[1]},
        {.id = "nope", .token = l.items[2].lease_token, .result = "3", .err = &e[2]},
        {.id = "c3", .token = l.items[3].lease_token, .result = "4", .err = &e[3]},
        {.id = "c2", .token = NULL, .result = "5", .err = &e[4]},
    };
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->complete_many(S, it, 5, T0, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0);
    cr_assert_eq(it[0].rc, 0);
    cr_assert_eq(it[1].rc, ER_ESTALE);
    cr_assert_str_eq(e[1].field, "lease_token");
    cr_assert_not_null(strstr(e[1].message, "does not match the current lease of job 'c1'"),
                       "%s", e[1].message);
    cr_assert_eq(it[2].rc, ER_ENOTFOUND);
    cr_assert_str_eq(e[2].field, "id");
    cr_assert_eq(it[3].rc, ER_ESTALE);
    cr_assert_not_null(strstr(e[3].message, "is completed"), "%s", e[3].message);
    cr_assert_eq(it[4].rc, ER_ESTALE);
    cr_assert_eq(state_of("c0"), ER_STATE_COMPLETED);
    cr_assert_eq(state_of("c1"), ER_STATE_ACTIVE);
    cr_assert_eq(state_of("c2"), ER_STATE_ACTIVE);
    char *r = result_of("c0");
    cr_assert_str_eq(r, "1");
    free(r);
    cr_assert_null(result_of("c3")); /* the batch did not overwrite it */
    er_job_list_fini(&l);
}

Test(conformance, complete_many_with_a_repeated_id_lets_the_first_win)
{
    er_job_list l = {0};
    lease_n(2, &l);
    er_error e[3], err = {0};
    er_complete_item it[3] = {
        {.id = "c1", .token = l.items[1].lease_token, .result = "\"first\"", .err = &e[0]},
        {.id = "c0", .token = l.items[0].lease_token, .result = NULL, .err = &e[1]},
        {.id = "c1", .token = l.items[1].lease_token, .result = "\"second\"", .err = &e[2]},
    };
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->complete_many(S, it, 3, T0, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0);
    cr_assert_eq(it[0].rc, 0);
    cr_assert_eq(it[1].rc, 0);
    cr_assert_eq(it[2].rc, ER_ESTALE);
    char *r = result_of("c1");
    cr_assert_str_eq(r, "\"first\"");
    free(r);
    er_job_list_fini(&l);
}

/* ---- release_many ---- */

static void release_items(er_release_item *it, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(it[i].queue);
}

Test(conformance, release_many_releases_a_batch_as_release_does)
{
    if (!OPS->release_many)
        return;
    er_job_list l = {0};
    lease_n(5, &l);
    er_error err = {0};
    /* c4 is completed before the batch */
    cr_assert_eq(OPS->complete(S, "c4", l.items[4].lease_token, NULL, T0, NULL, &err), 0);
    er_error e[6];
    memset(e, 0, sizeof e);
    er_release_item it[6] = {
        {.id = "c0", .token = l.items[0].lease_token, .err = &e[0]},
        {.id = "c1", .token = "not-the-token", .err = &e[1]},
        {.id = "nope", .token = l.items[2].lease_token, .err = &e[2]},
        {.id = "c2", .token = l.items[2].lease_token, .err = &e[3]},
        {.id = "c4", .token = l.items[4].lease_token, .err = &e[4]},
        {.id = "c3", .token = NULL, .err = &e[5]},
    };
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->release_many(S, it, 6, T0 + 7, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0);
    cr_assert_eq(it[0].rc, 0);
    cr_assert_str_eq(it[0].queue, "q");
    cr_assert_eq(it[1].rc, ER_ESTALE);
    cr_assert_str_eq(e[1].field, "lease_token");
    cr_assert_null(it[1].queue);
    cr_assert_eq(it[2].rc, ER_ENOTFOUND);
    cr_assert_str_eq(e[2].field, "id");
    cr_assert_eq(it[3].rc, 0);
    cr_assert_eq(it[4].rc, ER_ESTALE);
    cr_assert_not_null(strstr(e[4].message, "is completed"), "%s", e[4].message);
    cr_assert_eq(it[5].rc, ER_ESTALE);
    cr_assert_eq(state_of("c0"), ER_STATE_WAITING);
    cr_assert_eq(state_of("c1"), ER_STATE_ACTIVE);
    cr_assert_eq(state_of("c2"), ER_STATE_WAITING);
    cr_assert_eq(state_of("c3"), ER_STATE_ACTIVE);
    cr_assert_eq(state_of("c4"), ER_STATE_COMPLETED);
    /* as release: the attempt is not counted, the lease is gone */
    er_job j;
    cr_assert_eq(OPS->get_job(S, "c0", &j, &err), 0);
    cr_assert_eq(j.attempts, 0);
    cr_assert_null(j.lease_token);
    cr_assert_eq(j.updated_at, T0 + 7);
    er_job_fini(&j);
    release_items(it, 6);
    /* a repeated id: the first wins, the second is refused */
    er_job_list l2 = {0};
    cr_assert_eq(fetch1("q", 1, T0, &l2), 1);
    er_release_item it2[2] = {
        {.id = l2.items[0].id, .token = l2.items[0].lease_token, .err = &e[0]},
        {.id = l2.items[0].id, .token = l2.items[0].lease_token, .err = &e[1]},
    };
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->release_many(S, it2, 2, T0 + 8, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0);
    cr_assert_eq(it2[0].rc, 0);
    cr_assert_eq(it2[1].rc, ER_ESTALE);
    cr_assert_eq(state_of(l2.items[0].id), ER_STATE_WAITING);
    release_items(it2, 2);
    er_job_list_fini(&l2);
    er_job_list_fini(&l);
}

/* ---- fail_many ---- */

static er_fail_item fitem(const char *id, const char *token, const er_failure *f, er_error *e,
                          er_fail_outcome *o, er_ack_info *info)
{
    return (er_fail_item){.id = id, .token = token, .failure = f, .err = e, .outcome = o,
                          .info = info};
}

Test(conformance, fail_many_decides_each_item_as_fail_does)
{
    if (!OPS->fail_many)
        cr_skip_test("this store has no fail_many");
    er_job_list l = {0};
    lease_n(4, &l);
    er_failure tr = {.cls = ER_ERR_TRANSIENT, .message = "t"};
    er_failure pm = {.cls = ER_ERR_PERMANENT, .message = "p"};
    er_failure th = {.cls = ER_ERR_THROTTLED, .message = "h", .retry_after_ms = 4000};
    er_error e[5], err = {0};
    memset(e, 0, sizeof e);
    er_fail_outcome o[5];
    memset(o, 0, sizeof o);
    er_ack_info info[5];
    memset(info, 0, sizeof info);
    er_fail_item it[5] = {
        fitem("c0", l.items[0].lease_token, &tr, &e[0], &o[0], &info[0]),
        fitem("c1", "not-the-token", &pm, &e[1], &o[1], &info[1]),
        fitem("nope", l.items[1].lease_token, &pm, &e[2], &o[2], &info[2]),
        fitem("c2", l.items[2].lease_token, &pm, &e[3], &o[3], &info[3]),
        fitem("c3", l.items[3].lease_token, &th, &e[4], &o[4], &info[4]),
    };
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->fail_many(S, it, 5, T0 + 7, &R, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0);
    cr_assert_eq(it[0].rc, 0);
    cr_assert_eq(o[0].state, ER_STATE_SCHEDULED);
    cr_assert_gt(o[0].run_at, T0 + 7);
    cr_assert_str_eq(info[0].queue, "q");
    cr_assert_eq(info[0].started_at, l.items[0].started_at);
    cr_assert_eq(it[1].rc, ER_ESTALE);
    cr_assert_str_eq(e[1].field, "lease_token");
    cr_assert_eq(it[2].rc, ER_ENOTFOUND);
    cr_assert_str_eq(e[2].field, "id");
    cr_assert_eq(it[3].rc, 0);
    cr_assert_eq(o[3].state, ER_STATE_DEAD);
    cr_assert_eq(it[4].rc, 0);
    cr_assert_eq(o[4].queue_pause_until, T0 + 7 + 4000);
    er_job j;
    cr_assert_eq(OPS->get_job(S, "c0", &j, &err), 0);
    cr_assert_eq(j.state, ER_STATE_SCHEDULED);
    cr_assert_eq(j.run_at, o[0].run_at);
    cr_assert_eq(j.attempts, o[0].attempts);
    cr_assert_null(j.lease_token);
    cr_assert_not_null(j.last_error);
    cr_assert_not_null(strstr(j.last_error, "\"t\""), "%s", j.last_error);
    er_job_fini(&j);
    cr_assert_eq(state_of("c1"), ER_STATE_ACTIVE);
    cr_assert_eq(OPS->get_job(S, "c2", &j, &err), 0);
    cr_assert_eq(j.state, ER_STATE_DEAD);
    cr_assert_eq(j.finished_at, T0 + 7);
    er_job_fini(&j);
    cr_assert_eq(state_of("c3"), ER_STATE_SCHEDULED);
    cr_assert_eq(throttled_until_of("q"), T0 + 7 + 4000);

    /* a batch naming c1 twice: the first failure applies, the second is stale */
    er_fail_item twice[2] = {fitem("c1", l.items[1].lease_token, &pm, &e[0], &o[0], NULL),
                             fitem("c1", l.items[1].lease_token, &tr, &e[1], &o[1], NULL)};
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->fail_many(S, twice, 2, T0 + 8, &R, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0);
    cr_assert_eq(twice[0].rc, 0);
    cr_assert_eq(o[0].state, ER_STATE_DEAD);
    cr_assert_eq(twice[1].rc, ER_ESTALE);
    cr_assert_eq(state_of("c1"), ER_STATE_DEAD);
    er_job_list_fini(&l);
}

#endif
