/* SPDX-License-Identifier: MIT
 *
 * Fault loops for the SQLite store. A VFS shim ("errfault") wraps the
 * default VFS and fails the Nth xWrite or xSync (I/O error or disk full,
 * once or from then on). For N = 1, 2, ... a workload of group-committed
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

#define T0 1700000000000LL

/* ---- the fault-injecting VFS ---- */

enum { FAULT_WRITE_IOERR, FAULT_SYNC_IOERR, FAULT_WRITE_FULL };

static struct {
    bool armed;
    int kind;
    bool persistent; /* fail every call from the Nth on, not just the Nth */
    long n;          /* the call to fail, counted from arming */
    long calls;
    bool fired;
} F;

static sqlite3_vfs *g_real;
static sqlite3_vfs g_vfs;

typedef struct fault_file {
    sqlite3_file base;
    sqlite3_file *real; /* lives right after this struct */
} fault_file;

static void arm(int kind, bool persistent, long n)
{
    F.kind = kind;
    F.persistent = persistent;
    F.n = n;
    F.calls = 0;
    F.fired = false;
    F.armed = true;
}

static void disarm(void)
{
    F.armed = false;
}

/* Whether this call (of the kind being counted) must fail. */
static bool should_fail(bool is_sync)
{
    if (!F.armed || is_sync != (F.kind == FAULT_SYNC_IOERR))
        return false;
    F.calls++;
    if (F.calls == F.n || (F.persistent && F.calls > F.n)) {
        F.fired = true;
        return true;
    }
    return false;
}

#define REAL(f) (((fault_file *)(f))->real)

static int f_close(sqlite3_file *f)
{
    return REAL(f)->pMethods->xClose(REAL(f));
}
static int f_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
    return REAL(f)->pMethods->xRead(REAL(f), buf, amt, off);
}
static int f_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    if (should_fail(false))
        return F.kind == FAULT_WRITE_FULL ? SQLITE_FULL : SQLITE_IOERR_WRITE;
    return REAL(f)->pMethods->xWrite(REAL(f), buf, amt, off);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int f_sync(sqlite3_file *f, int flags)
{
    if (should_fail(true))
        return SQLITE_IOERR_FSYNC;
    return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int f_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), size);
}
static int f_lock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xLock(REAL(f), l);
}
static int f_unlock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), l);
}
static int f_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}
static int f_fcntl(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}
static int f_sector(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int f_devchar(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int f_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, pgsz, extend, pp);
}
static int f_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void f_shm_barrier(sqlite3_file *f)
{
    REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int f_shm_unmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp)
{
    *pp = NULL; /* no memory-mapped reads: every read goes through xRead */
    return SQLITE_OK;
}
static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return SQLITE_OK;
}

static const sqlite3_io_methods g_io = {
    .iVersion = 3,
    .xClose = f_close,
    .xRead = f_read,
    .xWrite = f_write,
    .xTruncate = f_truncate,
    .xSync = f_sync,
    .xFileSize = f_size,
    .xLock = f_lock,
    .xUnlock = f_unlock,
    .xCheckReservedLock = f_reserved,
    .xFileControl = f_fcntl,
    .xSectorSize = f_sector,
    .xDeviceCharacteristics = f_devchar,
    .xShmMap = f_shm_map,
    .xShmLock = f_shm_lock,
    .xShmBarrier = f_shm_barrier,
    .xShmUnmap = f_shm_unmap,
    .xFetch = f_fetch,
    .xUnfetch = f_unfetch,
};

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                  int *out_flags)
{
    fault_file *ff = (fault_file *)file;
    ff->real = (sqlite3_file *)(ff + 1);
    int rc = g_real->xOpen(g_real, name, ff->real, flags, out_flags);
    if (rc != SQLITE_OK) {
        if (ff->real->pMethods)
            ff->real->pMethods->xClose(ff->real);
        ff->base.pMethods = NULL;
        return rc;
    }
    ff->base.pMethods = &g_io;
    return SQLITE_OK;
}
static int v_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    return g_real->xDelete(g_real, name, sync_dir);
}
static int v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    return g_real->xAccess(g_real, name, flags, out);
}
static int v_fullpath(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    return g_real->xFullPathname(g_real, name, n, out);
}
static int v_random(sqlite3_vfs *vfs, int n, char *out)
{
    return g_real->xRandomness(g_real, n, out);
}
static int v_sleep(sqlite3_vfs *vfs, int us)
{
    return g_real->xSleep(g_real, us);
}
static int v_time(sqlite3_vfs *vfs, double *out)
{
    return g_real->xCurrentTime(g_real, out);
}
static int v_lasterr(sqlite3_vfs *vfs, int n, char *out)
{
    return g_real->xGetLastError(g_real, n, out);
}
static int v_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    return g_real->xCurrentTimeInt64(g_real, out);
}

static void register_vfs(void)
{
    if (g_real)
        return;
    g_real = sqlite3_vfs_find(NULL);
    cr_assert_not_null(g_real);
    g_vfs = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(fault_file) + g_real->szOsFile,
        .mxPathname = g_real->mxPathname,
        .zName = "errfault",
        .xOpen = v_open,
        .xDelete = v_delete,
        .xAccess = v_access,
        .xFullPathname = v_fullpath,
        .xRandomness = v_random,
        .xSleep = v_sleep,
        .xCurrentTime = v_time,
        .xGetLastError = v_lasterr,
        .xCurrentTimeInt64 = v_time64,
    };
    cr_assert_eq(sqlite3_vfs_register(&g_vfs, 0), SQLITE_OK);
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
    char p[160];
    const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s%s", g_path, sfx[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

static const er_store_options OPT = {.durability = ER_DURABILITY_FULL, .busy_timeout_ms = 100};

static void check_integrity(void)
{
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(g_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    sqlite3_close(db);
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
        /* enqueue three jobs in one transaction */
        int rc = OPS->begin(s, &err);
        for (int k = 0; rc == 0 && k < 3; k++) {
            char id[32];
            snprintf(id, sizeof id, "r%d-%d", round, k);
            er_job j;
            mkjob(&j, id);
            bool dup;
            rc = OPS->enqueue(s, &j, &dup, NULL, &err);
            er_job_fini(&j);
            if (rc == 0)
                pend(id, ER_STATE_WAITING);
        }
        if (!finish_tx(s, rc, &err))
            return false;

        /* fetch two, complete one, fail the other for good */
        rc = OPS->begin(s, &err);
        er_job_list l = {0};
        const char *qs[] = {"q"};
        er_fetch_params p = {.queues = qs, .nqueues = 1, .worker_id = "w", .max = 2,
                             .now = T0 + round};
        if (rc == 0)
            rc = OPS->fetch(s, &p, &R, &l, &err);
        for (size_t i = 0; rc == 0 && i < l.len; i++) {
            const er_job *j = &l.items[i];
            if (i == 0) {
                rc = OPS->complete(s, j->id, j->lease_token, "{}", T0 + round, &err);
                if (rc == 0)
                    pend(j->id, ER_STATE_COMPLETED);
            } else {
                er_failure f = {.cls = ER_ERR_PERMANENT, .message = "no"};
                er_fail_outcome o;
                rc = OPS->fail(s, j->id, j->lease_token, &f, T0 + round, &R, &o, &err);
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
    cr_assert_eq(OPS->enqueue(s, &j, &dup, NULL, &err), 0, "%s", err.message);
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
    bool fired = F.fired;
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
            bool fired = F.fired;
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
