/* SPDX-License-Identifier: MIT
 *
 * PostgreSQL migration 11: the Faktory worker registry, one row per wid
 * shared by every server of the schema (docs/faktory.md, "Workers"). Self-
 * contained and safe to run again (IF NOT EXISTS), so it can be renumbered.
 */
#include "store/postgres/pg_int.h"

const char er_pg_migration_11[] =
    "CREATE TABLE IF NOT EXISTS workers ("
    " wid text COLLATE \"C\" PRIMARY KEY,"
    " hostname text NOT NULL,"
    " node text NOT NULL,"
    " current_state text NOT NULL,"
    " labels text,"
    " pid bigint NOT NULL,"
    " v bigint NOT NULL,"
    " rss_kb bigint NOT NULL,"
    " started_at bigint NOT NULL,"
    " last_beat bigint NOT NULL,"
    " state smallint NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS workers_beat ON workers (last_beat);"
    "CREATE INDEX IF NOT EXISTS workers_signalled ON workers (wid) WHERE state <> 0;";
