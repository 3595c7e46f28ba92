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
    "CREATE FUNCTION queue_states2(p_queues text[])\n"
    " RETURNS TABLE (paused boolean, throttled_until bigint, concurrency integer, active bigint,\n"
    "  lease_ms bigint, rate_max bigint, rate_per_ms bigint, rate_burst bigint, rate_tat bigint,\n"
    "  grouped boolean, planned boolean, settings text)\n"
    " LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$\n"
    "DECLARE v_q text; v_r queues;\n"
    "BEGIN\n"
    " FOREACH v_q IN ARRAY p_queues LOOP\n"
    "  SELECT * INTO v_r FROM queues q WHERE q.name = v_q;\n"
    "  IF FOUND AND (v_r.concurrency > 0 OR v_r.rate_max > 0 OR v_r.group_limited) THEN\n"
    "   SELECT * INTO v_r FROM queues q WHERE q.name = v_q FOR UPDATE; /* its latest version */\n"
    "  END IF;\n"
    "  paused := coalesce(v_r.paused, false);\n"
    "  throttled_until := coalesce(v_r.throttled_until, 0);\n"
    "  concurrency := coalesce(v_r.concurrency, 0);\n"
    "  lease_ms := coalesce(v_r.lease_ms, 0);\n"
    "  rate_max := coalesce(v_r.rate_max, 0);\n"
    "  rate_per_ms := coalesce(v_r.rate_per_ms, 0);\n"
    "  rate_burst := coalesce(v_r.rate_burst, 1);\n"
    "  rate_tat := coalesce(v_r.rate_tat, 0);\n"
    "  active := 0;\n"
    "  IF concurrency > 0 THEN\n"
    "   SELECT count(*) INTO active FROM jobs j WHERE j.queue = v_q AND j.state = 2;\n"
    "  END IF;\n"
    "  grouped := EXISTS (SELECT 1 FROM jobs j WHERE j.queue = v_q AND j.state = 1\n"
    "   AND j.grp IS NOT NULL);\n"
    "  planned := grouped OR coalesce(v_r.group_limited OR v_r.aged, false);\n"
    "  settings := CASE WHEN planned THEN v_r.settings END;\n"
    "  RETURN NEXT;\n"
    " END LOOP;\n"
    "END $f$;\n";
