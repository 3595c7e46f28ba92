/* SPDX-License-Identifier: MIT
 *
 * Conformance cases of the Faktory worker registry's store operations:
 * beats upserted by wid (a late write never moves a beat back; started_at
 * and the state kept), signals raised only and only for live rows, the
 * list (live, signalled, paged by wid), the count of live rows and
 * reaping. Included after
 * conformance_cases.h by each store's conformance file.
 */
#ifndef ER_TESTS_WORKER_CASES_H
#define ER_TESTS_WORKER_CASES_H

static er_worker_row worker_row(const char *wid, const char *node, int64_t beat)
{
    er_worker_row w;
    memset(&w, 0, sizeof w);
    snprintf(w.wid, sizeof w.wid, "%s", wid);
    snprintf(w.hostname, sizeof w.hostname, "host-%s", wid);
    snprintf(w.node, sizeof w.node, "%s", node);
    w.pid = 42;
    w.v = 2;
    w.rss_kb = -1;
    w.started_at = beat;
    w.last_beat = beat;
    return w;
}

static void worker_beat(const er_worker_row *rows, size_t n)
{
    er_error err = {0};
    cr_assert_eq(OPS->begin(S, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->worker_beat(S, rows, n, &err), 0, "%s", err.message);
    cr_assert_eq(OPS->commit(S, &err), 0, "%s", err.message);
}

Test(conformance, a_worker_beat_is_upserted_by_wid_and_never_moved_back)
{
    er_worker_row a = worker_row("w-a", "node-1", T0);
    a.labels = sdup("[\"node\",\"x\"]");
    er_worker_row b = worker_row("w-b", "node-1", T0);
    er_worker_row rows[2] = {a, b};
    worker_beat(rows, 2);
    /* a beats again on node-2, later: it moves there, started_at kept */
    er_worker_row a2 = worker_row("w-a", "node-2", T0 + 15000);
    snprintf(a2.current_state, sizeof a2.current_state, "quiet");
    a2.rss_kb = 1234;
    a2.pid = 43;
    worker_beat(&a2, 1);
    er_worker_row got;
    er_error err = {0};
    cr_assert_eq(OPS->worker_get(S, "w-a", &got, &err), 0, "%s", err.message);
    cr_assert_str_eq(got.node, "node-2");
    cr_assert_str_eq(got.hostname, "host-w-a");
    cr_assert_str_eq(got.current_state, "quiet");
    cr_assert_null(got.labels, "the later beat had none");
    cr_assert_eq(got.pid, 43);
    cr_assert_eq(got.v, 2);
    cr_assert_eq(got.rss_kb, 1234);
    cr_assert_eq(got.started_at, T0);
    cr_assert_eq(got.last_beat, T0 + 15000);
    cr_assert_eq(got.state, ER_WORKER_RUN);
    er_worker_row_fini(&got);
    /* node-1's write of an older beat comes late: nothing moves back */
    er_worker_row old = worker_row("w-a", "node-1", T0 + 14000);
    worker_beat(&old, 1);
    cr_assert_eq(OPS->worker_get(S, "w-a", &got, &err), 0, "%s", err.message);
    cr_assert_str_eq(got.node, "node-2");
    cr_assert_eq(got.last_beat, T0 + 15000);
    er_worker_row_fini(&got);
    cr_assert_eq(OPS->worker_get(S, "w-b", &got, &err), 0, "%s", err.message);
    cr_assert_null(got.labels);
    er_worker_row_fini(&got);
    cr_assert_eq(OPS->worker_get(S, "w-none", &got, &err), ER_ENOTFOUND);
    free(a.labels);
    /* a wid twice in one batch: its latest beat is kept, whatever the order */
    er_worker_row twice[2] = {worker_row("w-d", "node-new", T0 + 5),
                              worker_row("w-d", "node-old", T0 + 3)};
    worker_beat(twice, 2);
    cr_assert_eq(OPS->worker_get(S, "w-d", &got, &err), 0, "%s", err.message);
    cr_assert_eq(got.last_beat, T0 + 5);
    cr_assert_str_eq(got.node, "node-new");
    er_worker_row_fini(&got);
}

Test(conformance, a_worker_signal_is_raised_only_and_only_for_a_live_worker)
{
    er_worker_row a = worker_row("w-a", "node-1", T0);
    worker_beat(&a, 1);
    er_error err = {0};
    er_worker_row got;
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->worker_signal(S, "w-a", ER_WORKER_TERMINATE, T0 - 1, &got, &err), 0, "%s",
                 err.message);
    cr_assert_eq(got.state, ER_WORKER_TERMINATE);
    cr_assert_str_eq(got.wid, "w-a");
    er_worker_row_fini(&got);
    /* a quiet after it does not take the terminate back */
    cr_assert_eq(OPS->worker_signal(S, "w-a", ER_WORKER_QUIET, T0 - 1, &got, &err), 0);
    cr_assert_eq(got.state, ER_WORKER_TERMINATE);
    er_worker_row_fini(&got);
    /* a row not live (its beat not after live_after) or none at all */
    cr_assert_eq(OPS->worker_signal(S, "w-a", ER_WORKER_QUIET, T0, NULL, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->worker_signal(S, "w-none", ER_WORKER_QUIET, 0, NULL, &err), ER_ENOTFOUND);
    cr_assert_str_eq(err.field, "wid");
    cr_assert_eq(OPS->commit(S, &err), 0);
    /* a later beat keeps the state */
    er_worker_row a2 = worker_row("w-a", "node-2", T0 + 1000);
    worker_beat(&a2, 1);
    cr_assert_eq(OPS->worker_get(S, "w-a", &got, &err), 0);
    cr_assert_eq(got.state, ER_WORKER_TERMINATE);
    er_worker_row_fini(&got);
}

Test(conformance, workers_are_listed_live_signalled_and_paged_by_wid)
{
    er_worker_row rows[4] = {worker_row("w-c", "n", T0 + 10), worker_row("w-a", "n", T0 + 10),
                             worker_row("w-b", "n", T0 + 10), worker_row("w-old", "n", T0)};
    worker_beat(rows, 4);
    er_error err = {0};
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->worker_signal(S, "w-b", ER_WORKER_QUIET, 0, NULL, &err), 0);
    cr_assert_eq(OPS->worker_signal(S, "w-old", ER_WORKER_QUIET, 0, NULL, &err), 0);
    cr_assert_eq(OPS->commit(S, &err), 0);
    er_worker_list l = {0};
    cr_assert_eq(OPS->worker_list(S, T0, false, NULL, 10, &l, &err), 0, "%s", err.message);
    cr_assert_eq(l.len, 3, "w-old is not live");
    cr_assert_str_eq(l.items[0].wid, "w-a");
    cr_assert_str_eq(l.items[1].wid, "w-b");
    cr_assert_str_eq(l.items[2].wid, "w-c");
    er_worker_list_fini(&l);
    cr_assert_eq(OPS->worker_list(S, T0, false, "w-a", 1, &l, &err), 0);
    cr_assert_eq(l.len, 1);
    cr_assert_str_eq(l.items[0].wid, "w-b");
    er_worker_list_fini(&l);
    cr_assert_eq(OPS->worker_list(S, T0, true, NULL, 10, &l, &err), 0);
    cr_assert_eq(l.len, 1, "only live signalled rows");
    cr_assert_str_eq(l.items[0].wid, "w-b");
    cr_assert_eq(l.items[0].state, ER_WORKER_QUIET);
    er_worker_list_fini(&l);
    cr_assert_eq(OPS->worker_list(S, T0 - 1, true, NULL, 10, &l, &err), 0);
    cr_assert_eq(l.len, 2);
    er_worker_list_fini(&l);
}

Test(conformance, workers_without_a_beat_are_reaped_oldest_first)
{
    er_worker_row rows[3] = {worker_row("w-a", "n", T0), worker_row("w-b", "n", T0 + 5),
                             worker_row("w-c", "n", T0 + 10)};
    worker_beat(rows, 3);
    er_error err = {0};
    int n = -1;
    cr_assert_eq(OPS->begin(S, &err), 0);
    cr_assert_eq(OPS->worker_reap(S, T0 + 10, 1, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 1);
    cr_assert_eq(OPS->worker_reap(S, T0 + 10, 100, &n, &err), 0);
    cr_assert_eq(n, 1, "w-c beat at the bound: kept");
    cr_assert_eq(OPS->commit(S, &err), 0);
    er_worker_row got;
    cr_assert_eq(OPS->worker_get(S, "w-a", &got, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->worker_get(S, "w-b", &got, &err), ER_ENOTFOUND);
    cr_assert_eq(OPS->worker_get(S, "w-c", &got, &err), 0);
    er_worker_row_fini(&got);
}

Test(conformance, live_workers_of_every_node_are_counted)
{
    er_error err = {0};
    int64_t n = -1;
    cr_assert_eq(OPS->worker_count(S, T0, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 0, "none yet");
    er_worker_row rows[3] = {worker_row("w-a", "node-1", T0 + 10),
                             worker_row("w-b", "node-2", T0 + 10), worker_row("w-old", "node-1", T0)};
    worker_beat(rows, 3);
    cr_assert_eq(OPS->worker_count(S, T0, &n, &err), 0, "%s", err.message);
    cr_assert_eq(n, 2, "both nodes' live rows; w-old beat at the bound");
    cr_assert_eq(OPS->worker_count(S, T0 - 1, &n, &err), 0);
    cr_assert_eq(n, 3);
    cr_assert_eq(OPS->worker_count(S, T0 + 10, &n, &err), 0);
    cr_assert_eq(n, 0);
}

#endif
