/* SPDX-License-Identifier: MIT
 *
 * Store conformance: list pages capped in bytes (er_store_options
 * reply_max, er_job_reply_bytes), at least one job a page. Included after
 * conformance_cases.h.
 */

/* Enqueues job `id` of `queue` with a payload of about `bytes` bytes. */
static void put_big(const char *id, const char *queue, size_t bytes)
{
    er_job j;
    mkjob(&j, id, queue, 0, T0, T0);
    free(j.payload);
    j.payload = malloc(bytes + 1);
    cr_assert_not_null(j.payload);
    memset(j.payload, 'x', bytes);
    j.payload[0] = j.payload[bytes - 1] = '"';
    j.payload[bytes] = '\0';
    j.payload_len = bytes;
    bool dupl = true;
    er_error err = {0};
    cr_assert_eq(OPS->enqueue(S, &j, &dupl, NULL, NULL, &err), 0, "%s", err.message);
    er_job_fini(&j);
}

/* The number after the last '-' of an id ("b-7": 7), or -1. */
static int id_num(const char *id)
{
    const char *dash = strrchr(id, '-');
    char *end;
    long v = dash ? strtol(dash + 1, &end, 10) : -1;
    return dash && *end == '\0' ? (int)v : -1;
}

/* Lists every page (dead letters when dead), checking each stays within
 * the cap but for a lone job; returns the pages and sets seen[i] for job i. */
static int pages_of(const char *queue, bool dead, size_t cap, int n, int *seen)
{
    char *cur = NULL;
    int pages = 0;
    do {
        er_job_list l = {0};
        char *next = NULL;
        er_error err = {0};
        int rc = dead ? OPS->list_dead(S, queue, 1000, cur, &l, &next, &err)
                      : OPS->list_jobs(S, queue, ER_STATE_WAITING, 1000, cur, &l, &next, &err);
        cr_assert_eq(rc, 0, "%s", err.message);
        cr_assert_geq(l.len, 1);
        size_t used = 0;
        for (size_t i = 0; i < l.len; i++) {
            used += er_job_reply_bytes(&l.items[i]);
            int k = id_num(l.items[i].id);
            cr_assert(k >= 0 && k < n, "%s", l.items[i].id);
            seen[k]++;
        }
        cr_assert(l.len == 1 || used <= cap, "a page of %zu jobs is %zu bytes", l.len, used);
        er_job_list_fini(&l);
        free(cur);
        cur = next;
        pages++;
    } while (cur && pages < 100);
    cr_assert_null(cur);
    return pages;
}

static void reopen_capped(size_t cap)
{
    OPS->close(S);
    g_reply_max = cap;
    open_store();
}

Test(conformance, lists_stop_at_the_reply_cap_and_page_on)
{
    reopen_capped(ER_REPLY_MAX_MIN);
    char id[32];
    int seen[12] = {0};
    for (int i = 0; i < 12; i++) {
        snprintf(id, sizeof id, "b-%d", i);
        put_big(id, "big", 20000);
    }
    int pages = pages_of("big", false, ER_REPLY_MAX_MIN, 12, seen);
    cr_assert_eq(pages, 4, "3 jobs of 20 kB a 64 KiB page: %d pages", pages);
    for (int i = 0; i < 12; i++)
        cr_assert_eq(seen[i], 1, "job %d seen %d times", i, seen[i]);
}

Test(conformance, a_job_larger_than_the_cap_is_listed_alone)
{
    reopen_capped(ER_REPLY_MAX_MIN);
    int seen[3] = {0};
    put_big("h-0", "huge", 100000);
    put_big("h-1", "huge", 100);
    put_big("h-2", "huge", 100000);
    cr_assert_eq(pages_of("huge", false, ER_REPLY_MAX_MIN, 3, seen), 3);
    cr_assert(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
}

Test(conformance, dead_letters_stop_at_the_reply_cap_and_page_on)
{
    reopen_capped(ER_REPLY_MAX_MIN);
    char id[32];
    int seen[8] = {0};
    for (int i = 0; i < 8; i++) {
        snprintf(id, sizeof id, "d-%d", i);
        put_big(id, "dl", 30000);
        er_job_list l = {0};
        cr_assert_eq(fetch1("dl", 1, T0 + i, &l), 1);
        er_fail_outcome o;
        cr_assert_eq(fail_with(id, l.items[0].lease_token, ER_ERR_PERMANENT, 0, T0 + i, &o), 0);
        er_job_list_fini(&l);
    }
    /* two of 30 kB and their errors a page */
    cr_assert_eq(pages_of("dl", true, ER_REPLY_MAX_MIN, 8, seen), 4);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(seen[i], 1, "job %d seen %d times", i, seen[i]);
}

Test(conformance, the_default_cap_leaves_small_pages_whole)
{
    char id[32];
    for (int i = 0; i < 300; i++) {
        snprintf(id, sizeof id, "s-%d", i);
        put(id, "small", 0, T0, T0);
    }
    er_job_list l = {0};
    char *next = NULL;
    er_error err = {0};
    cr_assert_eq(OPS->list_jobs(S, "small", ER_STATE_WAITING, 1000, NULL, &l, &next, &err), 0);
    cr_assert_eq(l.len, 300);
    cr_assert_null(next);
    er_job_list_fini(&l);
}

/* ---- the fetch's byte budget (er_fetch_params.max_bytes) ---- */

/* Fetches from queue under a budget of cap bytes with used spent. */
static int fetch_budget(const char *queue, int max, size_t used, size_t cap, er_job_list *out)
{
    const char *qs[] = {queue};
    er_fetch_params p = {.queues = qs, .nqueues = 1, .worker_id = "w1", .max = max,
                         .now = T0 + 1, .max_bytes = cap, .used_bytes = used,
                         .job_bytes_max = er_job_lease_bytes_max(1 << 20)};
    er_error err = {0};
    cr_assert_eq(OPS->fetch(S, &p, out, &err), 0, "fetch: %s", err.message);
    return (int)out->len;
}

Test(conformance, a_fetch_leases_in_order_while_the_budget_holds_and_no_further)
{
    char id[32];
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "fb-%d", i);
        put_big(id, "fb", 10000);
    }
    /* what core counts for one of them once leased (er_job_reply_bytes):
     * the store's sum before leasing is the same for a fresh job */
    er_job_list one = {0};
    cr_assert_eq(fetch_budget("fb", 1, 0, 1, &one), 1, "the first job whatever the budget");
    size_t each = er_job_reply_bytes(&one.items[0]);
    cr_assert_str_eq(one.items[0].id, "fb-0");
    er_job_list_fini(&one);
    /* exactly three fit; one byte less and two do */
    er_job_list l = {0};
    cr_assert_eq(fetch_budget("fb", 10, 0, 3 * each, &l), 3);
    size_t sum = 0;
    for (size_t i = 0; i < l.len; i++)
        sum += er_job_reply_bytes(&l.items[i]);
    cr_assert_eq(sum, 3 * each, "the store's count and core's agree");
    cr_assert_str_eq(l.items[0].id, "fb-1");
    cr_assert_str_eq(l.items[2].id, "fb-3");
    er_job_list_fini(&l);
    cr_assert_eq(fetch_budget("fb", 10, 0, 2 * each - 1, &l), 1, "the first, the second over");
    er_job_list_fini(&l);
    /* with bytes already used, the first is not free */
    cr_assert_eq(fetch_budget("fb", 10, 100, each, &l), 0);
    cr_assert_eq(fetch_budget("fb", 10, 100, 100 + each, &l), 1);
    cr_assert_str_eq(l.items[0].id, "fb-5");
    er_job_list_fini(&l);
    /* nothing was leased that a fetch did not return */
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof id, "fb-%d", i);
        cr_assert_eq(state_of(id), ER_STATE_ACTIVE, "%s", id);
    }
}

/* Fetches from queues under a budget of cap bytes with used spent. */
static int fetch_budget_qs(const char *const *qs, size_t n, size_t used, size_t cap,
                           er_job_list *out)
{
    er_fetch_params p = {.queues = qs, .nqueues = n, .worker_id = "w1", .max = 10,
                         .now = T0 + 1, .max_bytes = cap, .used_bytes = used,
                         .job_bytes_max = er_job_lease_bytes_max(1 << 20)};
    er_error err = {0};
    cr_assert_eq(OPS->fetch(S, &p, out, &err), 0, "fetch: %s", err.message);
    return (int)out->len;
}

Test(conformance, the_budget_carries_across_the_queues_of_a_fetch)
{
    /* f: the size of a job like fe-0 (id and queue as long), learnt from a
     * probe; a job of queue fe2 is 2 bytes more (twice one more character) */
    put_big("fx-0", "fx", 10000);
    er_job_list l = {0};
    cr_assert_eq(fetch_budget("fx", 1, 0, 1, &l), 1);
    size_t f = er_job_reply_bytes(&l.items[0]);
    er_job_list_fini(&l);
    put_big("fe-0", "fe", 10000);
    put_big("fe-1", "fe2", 10000);
    put_big("fe-2", "fe2", 10000);
    const char *qs[] = {"fe", "fe2"};
    cr_assert_eq(fetch_budget_qs(qs, 2, 0, 2 * f + 1, &l), 1, "f, then f + 2 is over");
    cr_assert_str_eq(l.items[0].id, "fe-0");
    er_job_list_fini(&l);
    cr_assert_eq(state_of("fe-1"), ER_STATE_WAITING);
    put_big("fe-3", "fe", 10000);
    cr_assert_eq(fetch_budget_qs(qs, 2, 0, 2 * f + 2, &l), 2, "f and f + 2: exactly");
    cr_assert_str_eq(l.items[0].id, "fe-3");
    cr_assert_str_eq(l.items[1].id, "fe-1");
    er_job_list_fini(&l);
    cr_assert_eq(state_of("fe-2"), ER_STATE_WAITING);
    /* bytes already used: the first job is not free */
    cr_assert_eq(fetch_budget_qs(qs + 1, 1, 2, f + 3, &l), 0);
    cr_assert_eq(state_of("fe-2"), ER_STATE_WAITING);
    cr_assert_eq(fetch_budget_qs(qs + 1, 1, 1, f + 3, &l), 1);
    cr_assert_str_eq(l.items[0].id, "fe-2");
    er_job_list_fini(&l);
}
