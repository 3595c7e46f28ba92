/* SPDX-License-Identifier: MIT
 *
 * PostgreSQL migration 14: jobs_queue_state keys the queue in byte order
 * (COLLATE "C"). A fetch names the queue with the default collation, so
 * it cannot take this index, only jobs_ungrouped and jobs_grouped, which
 * hand out waiting jobs already in fetch order. With the old key the
 * planner, on statistics older than the backlog (a table not analysed
 * since it was empty), took jobs_queue_state and sorted every waiting job
 * of the queue at each fetch. The statements that count and list a
 * queue's jobs by state name the queue in byte order (pg_sql.c), as
 * queue_states2's count of active jobs now does (replaced in place).
 */
#include "store/postgres/pg_int.h"
#include "store/postgres/pg_queue_states2.h"

const char er_pg_migration_14[] =
    "DROP INDEX jobs_queue_state;\n"
    "CREATE INDEX jobs_queue_state ON jobs (queue COLLATE \"C\", state, seq);\n"
    ER_PG_QUEUE_STATES2("CREATE OR REPLACE", "j.queue COLLATE \"C\"");
