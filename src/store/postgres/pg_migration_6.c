/* SPDX-License-Identifier: MIT
 *
 * PostgreSQL migration 6: groups and rate limits (core/fetch.h), as
 * SQLite's migration 5. Waiting jobs with a group by group (byte order:
 * COLLATE "C", as SQLite compares) then fetch order, and those without
 * one; active ones by group for group limits; each queue's rate state and copies of the settings the
 * fetch's first round trip needs (its rate limit, whether it has group
 * limits or aging), filled here from the stored texts; the groups' rate
 * states. queue_states2 is queue_states plus those, and takes the queue
 * row's lock for a queue with any limit, so every node's fetches from it
 * count and spend its budget one at a time. queue_states and lease_jobs
 * stay for servers of the previous version during a rolling upgrade.
 */
#include "store/postgres/pg_int.h"
#include "store/postgres/pg_queue_states2.h"

const char er_pg_migration_6[] =
    "CREATE INDEX jobs_grouped ON jobs (queue, grp COLLATE \"C\", priority DESC, run_at, seq)\n"
    " WHERE state = 1 AND grp IS NOT NULL;\n"
    "CREATE INDEX jobs_group_active ON jobs (queue, grp) WHERE state = 2 AND grp IS NOT NULL;\n"
    /* the jobs without a group, so the planner's looks at them are seeks
     * in a queue of grouped jobs (jobs_waiting stayed for lease_jobs until
     * migration 13) */
    "CREATE INDEX jobs_ungrouped ON jobs (queue, priority DESC, run_at, seq)\n"
    " WHERE state = 1 AND grp IS NULL;\n"
    "ALTER TABLE queues ADD COLUMN rate_tat bigint NOT NULL DEFAULT 0,\n"
    " ADD COLUMN rate_max bigint NOT NULL DEFAULT 0,\n"
    " ADD COLUMN rate_per_ms bigint NOT NULL DEFAULT 0,\n"
    " ADD COLUMN rate_burst bigint NOT NULL DEFAULT 1,\n"
    " ADD COLUMN group_limited boolean NOT NULL DEFAULT false,\n"
    " ADD COLUMN aged boolean NOT NULL DEFAULT false;\n"
    /* every version's text has "rate_limit": null or {max, per_ms[, burst]};
     * version 3's "group_limits" and "aging" are null when off */
    "UPDATE queues SET rate_max = (settings::jsonb #>> '{rate_limit,max}')::bigint,\n"
    " rate_per_ms = (settings::jsonb #>> '{rate_limit,per_ms}')::bigint,\n"
    " rate_burst = coalesce((settings::jsonb #>> '{rate_limit,burst}')::bigint, 1)\n"
    " WHERE jsonb_typeof(settings::jsonb -> 'rate_limit') = 'object';\n"
    "UPDATE queues SET\n"
    " group_limited = coalesce(jsonb_typeof(settings::jsonb -> 'group_limits') = 'object', false),\n"
    " aged = coalesce(jsonb_typeof(settings::jsonb -> 'aging') = 'object', false)\n"
    " WHERE settings IS NOT NULL;\n"
    "CREATE TABLE group_rates (\n"
    " queue text NOT NULL,\n"
    " grp text NOT NULL,\n"
    " tat bigint NOT NULL,\n"
    " PRIMARY KEY (queue, grp));\n"
    "CREATE INDEX group_rates_tat ON group_rates (tat);\n"
    /* settings: the stored text when the queue may need the group planner
     * (planned: grouped waiting jobs, group limits or aging), else NULL */
    ER_PG_QUEUE_STATES2("CREATE", "j.queue");
