/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's VFS: the default one, except that the frames a
 * transaction appends to its write-ahead log are gathered in memory and
 * written with one call when the commit frame is complete (or before a
 * sync, a read of them, a size change, or past WALBUF_MAX). SQLite writes
 * each frame as two calls (its 24-byte header, then the page), so a commit
 * of k pages costs 2k pwrite calls without this; on this project's machine
 * a 19-frame commit with its fdatasync took 130-142 us of CPU as 38 calls
 * and 50-61 us as one (bench/wal_write_calls.c, bench/README.md). Only
 * appends at the log's end are held, and the commit frame is written
 * before SQLite goes on to publish it, so other connections never read a
 * frame that is not in the file; every other write goes through at once,
 * in order.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite/sqlite_int.h"

/* Appends held at most, in bytes: a larger transaction is written in
 * pieces of this size (its frames are not visible before its commit). */
#define WALBUF_MAX ((int64_t)4 << 20)
#define WALBUF_START ((int64_t)64 << 10)
/* One write call at most: the unix VFS writes at most 128 KiB - 1 bytes a
 * call (it masks larger sizes), so what is held goes out in pieces. */
#define WRITE_MAX ((int64_t)124 << 10)
/* SQLite's WAL format (fileformat2.html, "WAL File Format"): a 32-byte
 * header at offset 0, then frames of a 24-byte header and a page; bytes
 * 4..7 of a frame header are the database size in pages after a commit
 * frame, 0 in every other frame. */
#define WAL_HDR 32
#define FRAME_HDR 24

typedef struct wb_file {
    sqlite3_file base;
    sqlite3_file *real; /* lives right after this struct */
    bool wal;
    char *buf; /* appends held, for buf_off .. buf_off + len */
    int64_t cap, len, buf_off;
    int64_t end;         /* where the next append starts: the log's write frontier */
    bool commit_pending; /* the held tail is a commit frame's header: flush after its page */
} wb_file;

typedef struct wb_vfs {
    sqlite3_vfs base;
    sqlite3_vfs *real;
} wb_vfs;

#define WB(f) ((wb_file *)(f))
#define REAL(f) (WB(f)->real)
#define UNDER(v) (((wb_vfs *)(v))->real)

/* Writes what is held; on failure drops it and returns the error (the
 * transaction those frames belong to then fails). */
static int flush(wb_file *p)
{
    int rc = SQLITE_OK;
    for (int64_t at = 0; at < p->len && rc == SQLITE_OK; at += WRITE_MAX) {
        int n = p->len - at < WRITE_MAX ? (int)(p->len - at) : (int)WRITE_MAX;
        rc = p->real->pMethods->xWrite(p->real, p->buf + at, n, p->buf_off + at);
    }
    p->len = 0;
    p->commit_pending = false;
    return rc;
}

static bool hold(wb_file *p, const void *data, int amt)
{
    if (p->len + amt > p->cap) {
        int64_t cap = p->cap ? p->cap : WALBUF_START;
        while (cap < p->len + amt)
            cap *= 2;
        if (cap > WALBUF_MAX)
            return false;
        char *b = realloc(p->buf, (size_t)cap);
        if (!b)
            return false;
        p->buf = b;
        p->cap = cap;
    }
    memcpy(p->buf + p->len, data, (size_t)amt);
    p->len += amt;
    return true;
}

/* Writes straight through, after what is held; keeps the frontier. */
static int write_through(wb_file *p, const void *data, int amt, sqlite3_int64 off)
{
    int rc = flush(p);
    if (rc == SQLITE_OK)
        rc = p->real->pMethods->xWrite(p->real, data, amt, off);
    if (rc == SQLITE_OK && (off < WAL_HDR || off + amt > p->end))
        p->end = off + amt; /* the log's header restarts the frontier */
    return rc;
}

static int w_write(sqlite3_file *f, const void *data, int amt, sqlite3_int64 off)
{
    wb_file *p = WB(f);
    if (!p->wal)
        return p->real->pMethods->xWrite(p->real, data, amt, off);
    /* the log's header, a frame rewritten in place, or a write past what
     * can be held: in order, straight through */
    if (off < WAL_HDR || off != p->end || amt > WRITE_MAX)
        return write_through(p, data, amt, off);
    if (p->len + amt > WALBUF_MAX) {
        int rc = flush(p);
        if (rc != SQLITE_OK)
            return rc;
    }
    bool commit_page = p->commit_pending;
    if (p->len == 0)
        p->buf_off = off;
    if (!hold(p, data, amt))
        return write_through(p, data, amt, off);
    p->end = off + amt;
    if (commit_page) /* the commit frame is whole: out before SQLite publishes it */
        return flush(p);
    if (amt == FRAME_HDR) {
        const unsigned char *h = data;
        p->commit_pending = (h[4] | h[5] | h[6] | h[7]) != 0;
    }
    return SQLITE_OK;
}

static int w_close(sqlite3_file *f)
{
    int rc = flush(WB(f));
    int rc2 = REAL(f)->pMethods->xClose(REAL(f));
    free(WB(f)->buf);
    WB(f)->buf = NULL;
    return rc != SQLITE_OK ? rc : rc2;
}

static int w_read(sqlite3_file *f, void *out, int amt, sqlite3_int64 off)
{
    wb_file *p = WB(f);
    if (p->len && off < p->buf_off + p->len && off + amt > p->buf_off) {
        int rc = flush(p);
        if (rc != SQLITE_OK)
            return rc;
    }
    return p->real->pMethods->xRead(p->real, out, amt, off);
}

static int w_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    int rc = flush(WB(f));
    if (rc != SQLITE_OK)
        return rc;
    if (WB(f)->end > size)
        WB(f)->end = size;
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int w_sync(sqlite3_file *f, int flags)
{
    int rc = flush(WB(f));
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int w_size(sqlite3_file *f, sqlite3_int64 *size)
{
    int rc = flush(WB(f));
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int w_lock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xLock(REAL(f), l);
}

static int w_unlock(sqlite3_file *f, int l)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), l);
}

static int w_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int w_fcntl(sqlite3_file *f, int op, void *arg)
{
    int rc = flush(WB(f));
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int w_sector(sqlite3_file *f)
{
    return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int w_devchar(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int w_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp)
{
    if (REAL(f)->pMethods->iVersion < 2)
        return SQLITE_IOERR_SHMMAP;
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, pgsz, extend, pp);
}

static int w_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    if (REAL(f)->pMethods->iVersion < 2)
        return SQLITE_IOERR_SHMLOCK;
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}

static void w_shm_barrier(sqlite3_file *f)
{
    if (REAL(f)->pMethods->iVersion >= 2)
        REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int w_shm_unmap(sqlite3_file *f, int del)
{
    if (REAL(f)->pMethods->iVersion < 2)
        return SQLITE_OK;
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static int w_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp)
{
    if (REAL(f)->pMethods->iVersion < 3) {
        *pp = NULL;
        return SQLITE_OK;
    }
    return REAL(f)->pMethods->xFetch(REAL(f), off, amt, pp);
}

static int w_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    if (REAL(f)->pMethods->iVersion < 3)
        return SQLITE_OK;
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods io = {
    .iVersion = 3,
    .xClose = w_close,
    .xRead = w_read,
    .xWrite = w_write,
    .xTruncate = w_truncate,
    .xSync = w_sync,
    .xFileSize = w_size,
    .xLock = w_lock,
    .xUnlock = w_unlock,
    .xCheckReservedLock = w_reserved,
    .xFileControl = w_fcntl,
    .xSectorSize = w_sector,
    .xDeviceCharacteristics = w_devchar,
    .xShmMap = w_shm_map,
    .xShmLock = w_shm_lock,
    .xShmBarrier = w_shm_barrier,
    .xShmUnmap = w_shm_unmap,
    .xFetch = w_fetch,
    .xUnfetch = w_unfetch,
};

static int v_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags)
{
    wb_file *p = WB(file);
    memset(p, 0, sizeof *p);
    p->real = (sqlite3_file *)(p + 1);
    int rc = UNDER(vfs)->xOpen(UNDER(vfs), name, p->real, flags, out_flags);
    if (rc != SQLITE_OK || !p->real->pMethods) {
        if (p->real->pMethods)
            p->real->pMethods->xClose(p->real);
        file->pMethods = NULL; /* SQLite does not call xClose */
        return rc != SQLITE_OK ? rc : SQLITE_CANTOPEN;
    }
    p->wal = (flags & SQLITE_OPEN_WAL) != 0;
    file->pMethods = &io;
    return SQLITE_OK;
}

static int v_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    return UNDER(vfs)->xDelete(UNDER(vfs), name, sync_dir);
}

static int v_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    return UNDER(vfs)->xAccess(UNDER(vfs), name, flags, out);
}

static int v_fullpath(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    return UNDER(vfs)->xFullPathname(UNDER(vfs), name, n, out);
}

static void *v_dlopen(sqlite3_vfs *vfs, const char *name)
{
    return UNDER(vfs)->xDlOpen(UNDER(vfs), name);
}

static void v_dlerror(sqlite3_vfs *vfs, int n, char *out)
{
    UNDER(vfs)->xDlError(UNDER(vfs), n, out);
}

static void (*v_dlsym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
    return UNDER(vfs)->xDlSym(UNDER(vfs), h, sym);
}

static void v_dlclose(sqlite3_vfs *vfs, void *h)
{
    UNDER(vfs)->xDlClose(UNDER(vfs), h);
}

static int v_random(sqlite3_vfs *vfs, int n, char *out)
{
    return UNDER(vfs)->xRandomness(UNDER(vfs), n, out);
}

static int v_sleep(sqlite3_vfs *vfs, int us)
{
    return UNDER(vfs)->xSleep(UNDER(vfs), us);
}

static int v_time(sqlite3_vfs *vfs, double *out)
{
    return UNDER(vfs)->xCurrentTime(UNDER(vfs), out);
}

static int v_lasterr(sqlite3_vfs *vfs, int n, char *out)
{
    return UNDER(vfs)->xGetLastError ? UNDER(vfs)->xGetLastError(UNDER(vfs), n, out) : 0;
}

static int v_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    sqlite3_vfs *u = UNDER(vfs);
    if (u->iVersion >= 2 && u->xCurrentTimeInt64)
        return u->xCurrentTimeInt64(u, out);
    double d;
    int rc = u->xCurrentTime(u, &d);
    *out = (sqlite3_int64)(d * 86400000.0);
    return rc;
}

int er_sqlite_vfs_register(const char *name, const char *under)
{
    sqlite3_vfs *u = sqlite3_vfs_find(under);
    if (!u)
        return SQLITE_ERROR;
    if (sqlite3_vfs_find(name))
        return SQLITE_OK;
    /* registered for the life of the process (SQLite keeps the pointer) */
    wb_vfs *v = calloc(1, sizeof *v);
    if (!v)
        return SQLITE_NOMEM;
    v->real = u;
    v->base = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(wb_file) + u->szOsFile,
        .mxPathname = u->mxPathname,
        .zName = name,
        .xOpen = v_open,
        .xDelete = v_delete,
        .xAccess = v_access,
        .xFullPathname = v_fullpath,
        .xDlOpen = v_dlopen,
        .xDlError = v_dlerror,
        .xDlSym = v_dlsym,
        .xDlClose = v_dlclose,
        .xRandomness = v_random,
        .xSleep = v_sleep,
        .xCurrentTime = v_time,
        .xGetLastError = v_lasterr,
        .xCurrentTimeInt64 = v_time64,
    };
    int rc = sqlite3_vfs_register(&v->base, 0);
    if (rc != SQLITE_OK)
        free(v);
    return rc;
}
