/* SPDX-License-Identifier: MIT
 *
 * Fault loops for the SQLite store. The VFS shim of tests/support/faultvfs.c
 * ("errfault") fails the Nth xWrite or xSync (I/O error or disk full, once
 * or from then on). For N = 1, 2, ... a workload of group-committed
 * transactions runs until the fault fires; every transaction must either
 * commit or fail with ER_EUNAVAIL/ER_EFULL and be rolled back. Then faults
 * are turned off, the store is reopened and checked: every committed job is
 * there in the state its transactions left, no job of a failed transaction
 * exists, and PRAGMA integrity_check is ok.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/sqlite/sqlite_int.h"
#include "store/store.h"
#include "support/faultvfs.h"

#define T0 1700000000000LL

/* ---- the fault-injecting VFS (tests/support/faultvfs.c) ---- */

enum { FAULT_WRITE_IOERR = ER_FAULTVFS_WRITE, FAULT_SYNC_IOERR = ER_FAULTVFS_SYNC,
       FAULT_WRITE_FULL = ER_FAULTVFS_FULL };

static void arm(int kind, bool persistent, long n)
{
    er_faultvfs_arm((er_faultvfs_kind)kind, n, persistent);
}

static void disarm(void)
{
    er_faultvfs_disarm();
}

static void register_vfs(void)
{
    er_sqlite_global_init(); /* before any SQLite call, as a server does */
    cr_assert_eq(er_faultvfs_register(), 0);
}

/* ---- store paths ---- */

static const er_store_ops *OPS = &er_sqlite_ops;
static char g_dir[64], g_path[128], g_uri[192];
static er_rand R;

static void fresh_dir(void)
{
    /* tmpfs when there is one: the loops run hundreds of fsyncs */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/er-fault-XXXXXX", base);
    cr_assert_not_null(mkdtemp(g_dir));
    snprintf(g_path, sizeof g_path, "%s/f.db", g_dir);
    snprintf(g_uri, sizeof g_uri, "file:%s?vfs=errfault", g_path);
}

static void drop_dir(void)
{
    er_faultvfs_remove_db(g_path);
    rmdir(g_dir);
}

static const er_store_options OPT = {.durability = ER_DURABILITY_FULL, .busy_timeout_ms = 100};

static void check_integrity(void)
{
    cr_assert(er_faultvfs_integrity_ok(g_path), "PRAGMA integrity_check of %s", g_path);
}

/* ---- the model of what committed ---- */

#define ABSENT (-1)
#define MAXJ 64

static struct {
    char id[32];
    int state;
} M[MAXJ];
static int nm;

static int model_find(const char *id)
{
    for (int i = 0; i < nm; i++)
        if (strcmp(M[i].id, id) == 0)
            return i;
    return -1;
}

static void model_set(const char *id, int state)
{
    int i = model_find(id);
    if (i < 0) {
        cr_assert_lt(nm, MAXJ);
        i = nm++;
        snprintf(M[i].id, sizeof M[i].id, "%s", id);
    }
    M[i].state = state;
}

static void mkjob(er_job *j, const char *id)
{
    er_job_init(j);
    j->id = strdup(id);
    j->queue = strdup("q");
    j->name = strdup("n");
    j->payload = strdup("{\"k\":1}");
    j->payload_len = strlen(j->payload);
    j->state = ER_STATE_WAITING;
    j->run_at = T0;
    j->max_attempts = 3;
    j->backoff = (er_backoff){.type = ER_BACKOFF_FIXED, .delay_ms = 10, .max_delay_ms = 10};
    j->timeout_ms = 1000;
    j->idempotency_key = strdup(id);
    j->created_at = j->updated_at = T0;
}

/* A failed operation must be a storage error. */
static void expect_storage_error(int rc, const er_error *err, const char *what)
{
    cr_assert(rc == ER_EUNAVAIL || rc == ER_EFULL, "%s: unexpected %d (%s)", what, rc,
              err->message);
}

/* Pending changes of the open transaction, applied to M on commit. */
static struct {
    char id[32];
    int state;
} P[16];
static int np;

static void pend(const char *id, int state)
{
    cr_assert_lt(np, 16);
    snprintf(P[np].id, sizeof P[np].id, "%s", id);
    P[np].state = state;
    np++;
}

/* Ends a transaction: commits when rc == 0. Returns false when it failed. */
static bool finish_tx(er_store *s, int rc, er_error *err)
{
    if (rc == 0)
        rc = OPS->commit(s, err);
    if (rc == 0) {
        for (int i = 0; i < np; i++)
            model_set(P[i].id, P[i].state);
        np = 0;
        return true;
    }
    expect_storage_error(rc, err, "transaction");
    OPS->rollback(s);
    /* jobs of a failed enqueue transaction must not exist */
    for (int i = 0; i < np; i++)
        if (P[i].state == ER_STATE_WAITING && model_find(P[i].id) < 0)
            model_set(P[i].id, ABSENT);
    np = 0;
    return false;
}

/* Runs the workload; returns false at the first failed transaction. */
static bool workload(er_store *s)
{
    er_error err = {0};
    for (int round = 0; round < 4; round++) {
        /* enqueue three jobs in one transaction: one by one, or in odd
         * rounds with one enqueue_many of four (the last repeats an id) */
        int rc = OPS->begin(s, &err);
        if (round % 2 && OPS->enqueue_many) {
            er_job js[4];
            bool dup[4];
            char id[32];
            for (int k = 0; k < 4; k++) {
                snprintf(id, sizeof id, "r%d-%d", round, k % 3);
                mkjob(&js[k], id);
            }
            if (rc == 0)
                rc = OPS->enqueue_many(s, js, 4, dup, NULL, &err);
            for (int k = 0; k < 4; k++) {
                if (rc == 0 && k < 3)
                    cr_assert(!dup[k]);
                if (rc == 0 && k < 3)
                    pend(js[k].id, ER_STATE_WAITING);
                er_job_fini(&js[k]);
            }
            cr_assert(rc < 0 || dup[3]);
        }
        for (int k = 0; rc == 0 && k < 3 && !(round % 2 && OPS->enqueue_many); k++) {
            char id[32];
            snprintf(id, sizeof id, "r%d-%d", round, k);
            er_job j;
            mkjob(&j, id);
            bool dup;
            rc = OPS->enqueue(s, &j, &dup, NULL, NULL, &err);
            er_job_fini(&j);
            if (rc == 0)
                pend(id, ER_STATE_WAITING);
        }
        if (!finish_tx(s, rc, &err))
            return false;

        /* fetch three, complete one, complete the next in a batch with
         * the third when the store batches (else alone), fail the last */
        rc = OPS->begin(s, &err);
        er_job_list l = {0};
        const char *qs[] = {"q"};
        er_fetch_params p = {.queues = qs, .nqueues = 1, .worker_id = "w", .max = 3,
                             .now = T0 + round};
        if (rc == 0)
            rc = OPS->fetch(s, &p, &l, &err);
        if (rc == 0 && l.len == 3 && OPS->complete_many) {
            er_error e[2];
            er_complete_item it[2] = {
                {.id = l.items[0].id, .token = l.items[0].lease_token, .result = "{}",
                 .err = &e[0]},
                {.id = l.items[1].id, .token = l.items[1].lease_token, .result = NULL,
                 .err = &e[1]},
            };
            rc = OPS->complete_many(s, it, 2, T0 + round, &err);
            for (int k = 0; rc == 0 && k < 2; k++) {
                cr_assert_eq(it[k].rc, 0, "%s", e[k].message);
                pend(it[k].id, ER_STATE_COMPLETED);
            }
        }
        for (size_t i = OPS->complete_many && l.len == 3 ? 2 : 0; rc == 0 && i < l.len; i++) {
            const er_job *j = &l.items[i];
            if (i + 1 < l.len) {
                rc = OPS->complete(s, j->id, j->lease_token, "{}", T0 + round, NULL, &err);
                if (rc == 0)
                    pend(j->id, ER_STATE_COMPLETED);
            } else {
                er_failure f = {.cls = ER_ERR_PERMANENT, .message = "no"};
                er_fail_outcome o;
                rc = OPS->fail(s, j->id, j->lease_token, &f, T0 + round, &R, &o, NULL, &err);
                if (rc == 0)
                    pend(j->id, ER_STATE_DEAD);
            }
        }
        er_job_list_fini(&l);
        if (!finish_tx(s, rc, &err))
            return false;
    }
    return true;
}

/* Reopens without faults and checks the store against the model. */
static void verify(void)
{
    er_store *s;
    er_error err = {0};
    int rc = OPS->open(g_path, &OPT, &s, &err);
    cr_assert_eq(rc, 0, "reopen: %s", err.message);
    int64_t want[6] = {0};
    for (int i = 0; i < nm; i++) {
        er_job j;
        rc = OPS->get_job(s, M[i].id, &j, &err);
        if (M[i].state == ABSENT) {
            cr_assert_eq(rc, ER_ENOTFOUND, "job %s of a failed transaction exists", M[i].id);
            continue;
        }
        cr_assert_eq(rc, 0, "committed job %s lost: %s", M[i].id, err.message);
        cr_assert_eq((int)j.state, M[i].state, "job %s: state %d, committed %d", M[i].id,
                     j.state, M[i].state);
        want[M[i].state]++;
        er_job_fini(&j);
    }
    er_queue_info *qs = NULL;
    size_t n = 0;
    cr_assert_eq(OPS->list_queues(s, T0, &qs, &n, &err), 0);
    for (int st = 0; st < 6; st++) {
        int64_t got = n ? qs[0].counts[st] : 0;
        cr_assert_eq(got, want[st], "state %d: %lld jobs, model %lld", st, (long long)got,
                     (long long)want[st]);
    }
    er_queue_info_list_free(qs, n);
    /* still writable */
    er_job j;
    mkjob(&j, "after");
    bool dup;
    cr_assert_eq(OPS->enqueue(s, &j, &dup, NULL, NULL, &err), 0, "%s", err.message);
    er_job_fini(&j);
    OPS->close(s);
    check_integrity();
}

/* One iteration: fault the Nth call. Returns whether the fault fired. */
static bool run_once(int kind, bool persistent, long n)
{
    nm = np = 0;
    er_rand_init_seeded(&R, (uint64_t)n);
    fresh_dir();
    er_store *s;
    er_error err = {0};
    cr_assert_eq(OPS->open(g_uri, &OPT, &s, &err), 0, "%s", err.message);
    arm(kind, persistent, n);
    bool ok = workload(s);
    if (!ok)
        disarm(); /* turn faults off after the failure, then close */
    OPS->close(s); /* when nothing failed yet the close's checkpoint may be faulted */
    bool fired = er_faultvfs_fired();
    disarm();
    verify();
    drop_dir();
    return fired;
}

static void loop(int kind, bool persistent)
{
    register_vfs();
    long n;
    for (n = 1; n < 1000; n++)
        if (!run_once(kind, persistent, n))
            break;
    cr_log_info("kind %d persistent %d: %ld faulted runs", kind, persistent, n - 1);
    cr_assert_gt(n, 3, "the workload should reach several faults");
    cr_assert_lt(n, 1000);
}

TestSuite(faults, .timeout = 120);

Test(faults, nth_write_io_error_loses_nothing_committed)
{
    loop(FAULT_WRITE_IOERR, false);
}

Test(faults, nth_sync_io_error_loses_nothing_committed)
{
    loop(FAULT_SYNC_IOERR, false);
}

Test(faults, disk_full_from_nth_write_loses_nothing_committed)
{
    loop(FAULT_WRITE_FULL, true);
}

Test(faults, every_write_from_nth_failing_loses_nothing_committed)
{
    loop(FAULT_WRITE_IOERR, true);
}

/* Faults while the schema is created: open fails cleanly or succeeds, and
 * a later open migrates or finds a complete schema. */
Test(faults, faults_during_first_open_leave_a_usable_store)
{
    register_vfs();
    const int kinds[] = {FAULT_WRITE_IOERR, FAULT_SYNC_IOERR, FAULT_WRITE_FULL};
    for (int k = 0; k < 3; k++) {
        long n;
        for (n = 1; n < 200; n++) {
            nm = np = 0;
            fresh_dir();
            arm(kinds[k], false, n);
            er_store *s = NULL;
            er_error err = {0};
            int rc = OPS->open(g_uri, &OPT, &s, &err);
            if (rc == 0)
                OPS->close(s);
            else
                expect_storage_error(rc, &err, "open");
            bool fired = er_faultvfs_fired();
            disarm();
            verify();
            drop_dir();
            if (!fired)
                break;
        }
        cr_assert_gt(n, 1);
        cr_assert_lt(n, 200);
    }
}
