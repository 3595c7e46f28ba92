/* SPDX-License-Identifier: MIT
 *
 * A fault-injecting SQLite VFS for tests ("errfault"): the store's own VFS
 * layer (src/store/sqlite/walbuf.c) over a layer that wraps the default VFS
 * and, once armed, fails the Nth xWrite or xSync (an I/O error, or
 * SQLITE_FULL for writes), once or from then on; so the calls counted and
 * failed are the ones the store's VFS makes. It counts every write and
 * sync per file kind so a test can size its fault loop. Open a store through
 * it with the URI "file:PATH?vfs=errfault". Test code only: never linked
 * into errand itself.
 */
#ifndef ER_TESTS_SUPPORT_FAULTVFS_H
#define ER_TESTS_SUPPORT_FAULTVFS_H

#include <stdbool.h>

#define ER_FAULTVFS_NAME "errfault"

typedef enum er_faultvfs_kind {
    ER_FAULTVFS_WRITE, /* xWrite fails with SQLITE_IOERR_WRITE */
    ER_FAULTVFS_SYNC,  /* xSync fails with SQLITE_IOERR_FSYNC */
    ER_FAULTVFS_FULL,  /* xWrite fails with SQLITE_FULL (disk full) */
} er_faultvfs_kind;

/* Which files' calls are counted towards the Nth. */
typedef enum er_faultvfs_file {
    ER_FAULTVFS_ANY,
    ER_FAULTVFS_DB,  /* the main database file (checkpoints write and sync it) */
    ER_FAULTVFS_WAL, /* the write-ahead log */
} er_faultvfs_file;

/* Calls seen since the last er_faultvfs_arm (all files, armed or not). */
typedef struct er_faultvfs_counts {
    long db_writes, db_syncs;
    long wal_writes, wal_syncs;
    long other_writes, other_syncs; /* journals, temporary files */
    long armed_calls; /* calls of the armed kind on the armed file kind */
    long faults;      /* calls that were failed */
} er_faultvfs_counts;

/* Registers "errfault" (not as the default VFS). Idempotent and thread-safe
 * (call er_sqlite_global_init first, as a server does).
 * Returns 0, or an SQLite error code when there is no default VFS. */
int er_faultvfs_register(void);

/* Arms the fault: the nth (1-based) matching call from now on fails; with
 * `sticky` every later matching call fails too, until er_faultvfs_disarm.
 * Resets the counters. Thread-safe. */
void er_faultvfs_arm(er_faultvfs_kind kind, long n, bool sticky);
/* Like er_faultvfs_arm, counting only calls on one kind of file. */
void er_faultvfs_arm_on(er_faultvfs_kind kind, er_faultvfs_file file, long n, bool sticky);

/* No call fails from now on. Counters are kept. Thread-safe. */
void er_faultvfs_disarm(void);

/* Whether a call failed since the last arming. */
bool er_faultvfs_fired(void);

/* Copies the counters into *out. Thread-safe. */
void er_faultvfs_counts_get(er_faultvfs_counts *out);

/* On connections opened through "errfault" from now on, a
 * "PRAGMA wal_autocheckpoint = X" (the store sets one) sets `pages` instead
 * of X (0: no override), so short workloads reach checkpoint writes and
 * database-file syncs. Call before opening. Returns 0 or an SQLite code. */
int er_faultvfs_autocheckpoint(int pages);

/* Whether PRAGMA integrity_check answers "ok" for the database file at
 * `path` (borrowed), read on a connection of the default VFS. */
bool er_faultvfs_integrity_ok(const char *path);

/* Removes the database file at `path` (borrowed) and its -wal, -shm and
 * -journal files, those that exist. */
void er_faultvfs_remove_db(const char *path);

#endif
