/* SPDX-License-Identifier: MIT
 *
 * The "errfault" VFS (see faultvfs.h): the store's own VFS layer (walbuf.c)
 * over "errfault-raw", whose methods forward to the default VFS after
 * xWrite and xSync ask should_fail(), so faults hit the calls the store
 * really makes. The fault state and the counters sit behind one mutex
 * because a server's writer and reader threads both do I/O through it.
 * Memory-mapped reads are turned off so every read goes through the
 * wrapped file.
 */
#include "faultvfs.h"

#include "store/sqlite/sqlite_int.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool armed;
    er_faultvfs_kind kind;
    er_faultvfs_file file;
    bool sticky; /* fail every matching call from the Nth on */
    long n;
    er_faultvfs_counts c;
} F; /* under g_mu */

static sqlite3_vfs *g_real; /* set once under g_mu, then read-only */
/* A file-control op of this file: hands a main database file its
 * connection (ckpt_init). Other VFSes answer SQLITE_NOTFOUND. */
#define FCNTL_SET_DB 0x45524601
#define RAW_NAME ER_FAULTVFS_NAME "-raw"
static sqlite3_vfs g_vfs;
static _Atomic int g_ckpt_pages;

typedef struct fault_file {
    sqlite3_file base;
    er_faultvfs_file kind; /* ER_FAULTVFS_ANY: neither database nor WAL */
    sqlite3 *db;           /* main database file: its connection, set by ckpt_init */
    sqlite3_file *real;    /* lives right after this struct */
} fault_file;

void er_faultvfs_arm_on(er_faultvfs_kind kind, er_faultvfs_file file, long n, bool sticky)
{
    pthread_mutex_lock(&g_mu);
    F.kind = kind;
    F.file = file;
    F.sticky = sticky;
    F.n = n;
    F.c = (er_faultvfs_counts){0};
    F.armed = true;
    pthread_mutex_unlock(&g_mu);
}

void er_faultvfs_arm(er_faultvfs_kind kind, long n, bool sticky)
{
    er_faultvfs_arm_on(kind, ER_FAULTVFS_ANY, n, sticky);
}

void er_faultvfs_disarm(void)
{
    pthread_mutex_lock(&g_mu);
    F.armed = false;
    pthread_mutex_unlock(&g_mu);
}

bool er_faultvfs_fired(void)
{
    pthread_mutex_lock(&g_mu);
    bool fired = F.c.faults > 0;
    pthread_mutex_unlock(&g_mu);
    return fired;
}

void er_faultvfs_counts_get(er_faultvfs_counts *out)
{
    pthread_mutex_lock(&g_mu);
    *out = F.c;
    pthread_mutex_unlock(&g_mu);
}

/* Counts the call; returns the error it must fail with, or SQLITE_OK. */
static int should_fail(const fault_file *ff, bool is_sync)
{
    pthread_mutex_lock(&g_mu);
    long *ctr = ff->kind == ER_FAULTVFS_DB    ? (is_sync ? &F.c.db_syncs : &F.c.db_writes)
                : ff->kind == ER_FAULTVFS_WAL ? (is_sync ? &F.c.wal_syncs : &F.c.wal_writes)
                                              : (is_sync ? &F.c.other_syncs : &F.c.other_writes);
    (*ctr)++;
    int rc = SQLITE_OK;
    if (F.armed && is_sync == (F.kind == ER_FAULTVFS_SYNC) &&
        (F.file == ER_FAULTVFS_ANY || F.file == ff->kind)) {
        F.c.armed_calls++;
        if (F.c.armed_calls == F.n || (F.sticky && F.c.armed_calls > F.n)) {
            F.c.faults++;
            rc = is_sync                      ? SQLITE_IOERR_FSYNC
                 : F.kind == ER_FAULTVFS_FULL ? SQLITE_FULL
                                              : SQLITE_IOERR_WRITE;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

#define FF(f) ((fault_file *)(f))
#define REAL(f) (FF(f)->real)

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
    int rc = should_fail(FF(f), false);
    if (rc != SQLITE_OK)
        return rc;
    return REAL(f)->pMethods->xWrite(REAL(f), buf, amt, off);
}
static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}
static int f_sync(sqlite3_file *f, int flags)
{
    int rc = should_fail(FF(f), true);
    if (rc != SQLITE_OK)
        return rc;
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
    if (op == FCNTL_SET_DB) { /* from ckpt_init, through the layer above */
        FF(f)->db = arg;
        return SQLITE_OK;
    }
    /* with an autocheckpoint override, the store's own pragma sets the
     * override instead (SQLite itself resets the value when it opens) */
    int pages = atomic_load(&g_ckpt_pages);
    if (op == SQLITE_FCNTL_PRAGMA && pages > 0 && FF(f)->db) {
        char **a = arg;
        if (a[1] && a[2] && strcasecmp(a[1], "wal_autocheckpoint") == 0) {
            sqlite3_wal_autocheckpoint(FF(f)->db, pages);
            a[0] = NULL;
            return SQLITE_OK;
        }
    }
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
    ff->db = NULL;
    ff->kind = (flags & SQLITE_OPEN_MAIN_DB) ? ER_FAULTVFS_DB
               : (flags & SQLITE_OPEN_WAL)   ? ER_FAULTVFS_WAL
                                             : ER_FAULTVFS_ANY;
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

int er_faultvfs_register(void)
{
    int rc = SQLITE_OK;
    pthread_mutex_lock(&g_mu);
    if (!g_real) {
        sqlite3_vfs *real = sqlite3_vfs_find(NULL);
        if (!real) {
            rc = SQLITE_ERROR;
        } else {
            g_vfs = (sqlite3_vfs){
                .iVersion = 2,
                .szOsFile = (int)sizeof(fault_file) + real->szOsFile,
                .mxPathname = real->mxPathname,
                .zName = RAW_NAME,
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
            g_real = real;
            rc = sqlite3_vfs_register(&g_vfs, 0);
            if (rc == SQLITE_OK)
                rc = er_sqlite_vfs_register(ER_FAULTVFS_NAME, RAW_NAME);
            if (rc != SQLITE_OK)
                g_real = NULL;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Auto-extension: runs in every sqlite3_open of this process and tells an
 * "errfault" main database file its connection, for f_fcntl. */
static int ckpt_init(sqlite3 *db, const char **errmsg, const sqlite3_api_routines *api)
{
    (void)sqlite3_file_control(db, "main", FCNTL_SET_DB, db);
    return SQLITE_OK;
}

int er_faultvfs_autocheckpoint(int pages)
{
    atomic_store(&g_ckpt_pages, pages > 0 ? pages : 0);
    /* the cast to void (*)(void) is the documented calling convention */
    return pages > 0 ? sqlite3_auto_extension((void (*)(void))ckpt_init) : SQLITE_OK;
}

bool er_faultvfs_integrity_ok(const char *path)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    bool ok = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
              sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK &&
              sqlite3_step(st) == SQLITE_ROW &&
              strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok;
}

void er_faultvfs_remove_db(const char *path)
{
    static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
    char p[4096];
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        snprintf(p, sizeof p, "%s%s", path, sfx[i]);
        unlink(p);
    }
}
