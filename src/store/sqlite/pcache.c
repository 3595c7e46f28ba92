/* SPDX-License-Identifier: MIT
 *
 * The SQLite store's page cache: SQLite's own (pcache1), with one call
 * skipped when it can do nothing. At the end of every transaction SQLite
 * truncates the cache to the database's size. pcache1 walks the pages
 * between that size and the largest page number it has seen; past its hash
 * table's size it walks the whole table. A B-tree balance that reorders
 * sibling pages moves a page through the lock-byte page's number (page
 * 262,145 at 4 KiB pages) for a moment, so after such a transaction each
 * truncate walked all the cache's slots (4,096 at errand's 16 MiB cache):
 * 5-9 % of the writer's time in Faktory pushes and processing
 * (bench/README.md).
 *
 * Each cache here tracks the page numbers at or above the last truncate's
 * limit that may be in it: added when fetched or renamed to, removed when
 * renamed from. The set only ever holds too many, never too few (pcache1
 * may drop a clean page without telling). A truncate that no tracked page
 * reaches is skipped; any other, or one below the tracked range, or one
 * after the set overflowed, goes to pcache1 as before.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "store/sqlite/sqlite_int.h"

/* Pages at or past the last limit a cache can track: after a transaction
 * that appends more, the truncate goes to pcache1 as before. */
#define TRACK_MAX 32

typedef struct er_pcache {
    sqlite3_pcache *inner;
    unsigned floor; /* tracked: page numbers >= floor */
    unsigned n;
    bool overflow; /* more than TRACK_MAX: treat as "any" */
    unsigned keys[TRACK_MAX];
} er_pcache;

static sqlite3_pcache_methods2 inner_m;
static atomic_ullong n_truncates, n_skipped;

static void track_add(er_pcache *c, unsigned key)
{
    if (key < c->floor || c->overflow)
        return;
    for (unsigned i = 0; i < c->n; i++)
        if (c->keys[i] == key)
            return;
    if (c->n == TRACK_MAX)
        c->overflow = true;
    else
        c->keys[c->n++] = key;
}

static void track_remove(er_pcache *c, unsigned key)
{
    for (unsigned i = 0; i < c->n; i++)
        if (c->keys[i] == key) {
            c->keys[i] = c->keys[--c->n];
            return;
        }
}

static int pc_init(void *arg)
{
    (void)arg;
    return inner_m.xInit ? inner_m.xInit(inner_m.pArg) : SQLITE_OK;
}

static void pc_shutdown(void *arg)
{
    (void)arg;
    if (inner_m.xShutdown)
        inner_m.xShutdown(inner_m.pArg);
}

static sqlite3_pcache *pc_create(int sz_page, int sz_extra, int purgeable)
{
    er_pcache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->inner = inner_m.xCreate(sz_page, sz_extra, purgeable);
    if (!c->inner) {
        free(c);
        return NULL;
    }
    c->overflow = true; /* nothing known until the first truncate */
    return (sqlite3_pcache *)c;
}

static void pc_cachesize(sqlite3_pcache *p, int n)
{
    inner_m.xCachesize(((er_pcache *)p)->inner, n);
}

static int pc_pagecount(sqlite3_pcache *p)
{
    return inner_m.xPagecount(((er_pcache *)p)->inner);
}

static sqlite3_pcache_page *pc_fetch(sqlite3_pcache *p, unsigned key, int create)
{
    er_pcache *c = (er_pcache *)p;
    sqlite3_pcache_page *pg = inner_m.xFetch(c->inner, key, create);
    if (pg)
        track_add(c, key);
    return pg;
}

static void pc_unpin(sqlite3_pcache *p, sqlite3_pcache_page *pg, int discard)
{
    inner_m.xUnpin(((er_pcache *)p)->inner, pg, discard);
}

static void pc_rekey(sqlite3_pcache *p, sqlite3_pcache_page *pg, unsigned old, unsigned new)
{
    er_pcache *c = (er_pcache *)p;
    inner_m.xRekey(c->inner, pg, old, new);
    track_remove(c, old);
    track_add(c, new);
}

static void pc_truncate(sqlite3_pcache *p, unsigned limit)
{
    er_pcache *c = (er_pcache *)p;
    atomic_fetch_add_explicit(&n_truncates, 1, memory_order_relaxed);
    if (!c->overflow && limit >= c->floor) {
        bool reached = false;
        for (unsigned i = 0; i < c->n;) {
            if (c->keys[i] >= limit) {
                reached = true;
                i++;
            } else {
                c->keys[i] = c->keys[--c->n];
            }
        }
        if (!reached) {
            c->floor = limit;
            atomic_fetch_add_explicit(&n_skipped, 1, memory_order_relaxed);
            return;
        }
    }
    inner_m.xTruncate(c->inner, limit);
    c->floor = limit;
    c->n = 0;
    c->overflow = false;
}

static void pc_destroy(sqlite3_pcache *p)
{
    er_pcache *c = (er_pcache *)p;
    inner_m.xDestroy(c->inner);
    free(c);
}

static void pc_shrink(sqlite3_pcache *p)
{
    inner_m.xShrink(((er_pcache *)p)->inner);
}

bool er_sqlite_pcache_install(void)
{
    sqlite3_pcache_methods2 m;
    if (sqlite3_config(SQLITE_CONFIG_GETPCACHE2, &m) != SQLITE_OK || m.iVersion < 1 || !m.xCreate ||
        !m.xFetch || !m.xTruncate || !m.xRekey)
        return false;
    inner_m = m;
    sqlite3_pcache_methods2 w = {
        .iVersion = 1,
        .xInit = pc_init,
        .xShutdown = pc_shutdown,
        .xCreate = pc_create,
        .xCachesize = pc_cachesize,
        .xPagecount = pc_pagecount,
        .xFetch = pc_fetch,
        .xUnpin = pc_unpin,
        .xRekey = pc_rekey,
        .xTruncate = pc_truncate,
        .xDestroy = pc_destroy,
        .xShrink = pc_shrink,
    };
    return sqlite3_config(SQLITE_CONFIG_PCACHE2, &w) == SQLITE_OK;
}

void er_sqlite_pcache_counts(unsigned long long *truncates, unsigned long long *skipped)
{
    *truncates = atomic_load_explicit(&n_truncates, memory_order_relaxed);
    *skipped = atomic_load_explicit(&n_skipped, memory_order_relaxed);
}
