/* SPDX-License-Identifier: MIT
 *
 * The store's upkeep thread: work a store keeps out of commits (SQLite:
 * checkpoints of the write-ahead log), run on a connection of its own so
 * that the writer never waits for it. The writer asks whether the work is
 * due on its connection (ops->checkpoint_due) and kicks this thread; kicks
 * while it runs fold into one. Internal to src/engine.
 */
#ifndef ER_ENGINE_UPKEEP_H
#define ER_ENGINE_UPKEEP_H

#include "store/store.h"

typedef struct er_upkeep er_upkeep;

/* Starts the thread; it opens its connection to url at its first run (a
 * failed open is logged and tried again at the next). url and opt must
 * outlive it. *out is NULL, and 0 returned, when the store has no upkeep
 * (ops->checkpoint is NULL). Start it before the writer thread. */
int er_upkeep_start(const er_store_ops *ops, const char *url, const er_store_options *opt,
                    er_upkeep **out, er_error *err);
/* Any thread: run the work once more, soon. */
void er_upkeep_kick(er_upkeep *u);
/* Waits for a run in progress, then stops the thread and closes its
 * connection. NULL is a no-op. */
void er_upkeep_stop(er_upkeep *u);

#endif
