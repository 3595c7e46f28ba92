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

#include <stdbool.h>

typedef struct er_upkeep er_upkeep;

/* Starts the thread, without a connection yet. *out is NULL, and 0
 * returned, when the store has no upkeep (ops->checkpoint is NULL). Start
 * it before the writer thread, which kicks it. */
int er_upkeep_start(const er_store_ops *ops, er_upkeep **out, er_error *err);
/* Opens the thread's connection on the calling thread (after the writer
 * opened and migrated the store, before the event loop runs, so no other
 * thread opens files while the loop does). Runs before it do nothing. */
int er_upkeep_open(er_upkeep *u, const char *url, const er_store_options *opt, er_error *err);
/* Any thread: run the work once more, soon. */
void er_upkeep_kick(er_upkeep *u);
/* Whether a run finished since the last call said so. The writer then
 * runs the store's work once more on its own connection, between its
 * transactions: only the frames it committed while the run went on are
 * left, and with none left its next commit restarts the SQLite log from
 * its start (overwriting a log in place is what keeps its fsyncs cheap). */
bool er_upkeep_ran(er_upkeep *u);
/* Waits for a run in progress, then stops the thread and closes its
 * connection. NULL is a no-op. */
void er_upkeep_stop(er_upkeep *u);

#endif
