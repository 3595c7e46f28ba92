/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL store's SQL: schema migrations (tables, partial indexes,
 * the fetch function and the application's errand.enqueue functions) and
 * the text of every prepared statement. Statements that would need several
 * round trips are single statements with data-modifying CTEs, or call a
 * PL/pgSQL function, so each store operation is one round trip.
 */
#include "store/job_row.h"
#include "store/postgres/pg_int.h"

/* Migrations. Each step runs, in order, in the one transaction that holds
 * the schema's advisory lock, with search_path set to the schema, and is
 * recorded in <schema>.migrations. To change the schema, append a step
 * (never edit one that has shipped) and name it in er_pg_migration_names;
 * docs/postgres.md says whether the previous release survives it. Functions pin their search_path to the
 * schema (SET search_path FROM CURRENT). */
const char *const er_pg_migrations[] = {
    /* 1: jobs, queues, the notify helper and the fetch function */
    "CREATE TABLE jobs ("
    " seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " id text NOT NULL UNIQUE,"
    " queue text NOT NULL,"
    " name text NOT NULL,"
    " payload text NOT NULL,"
    " state smallint NOT NULL,"
    " priority integer NOT NULL DEFAULT 0,"
    " grp text,"
    " run_at bigint NOT NULL,"
    " max_attempts integer NOT NULL,"
    " backoff_type smallint NOT NULL,"
    " backoff_delay_ms bigint NOT NULL,"
    " backoff_max_ms bigint NOT NULL,"
    " backoff_jitter double precision NOT NULL,"
    " timeout_ms bigint NOT NULL,"
    " trace_id text,"
    " idempotency_key text,"
    " attempts integer NOT NULL DEFAULT 0,"
    " started integer NOT NULL DEFAULT 0,"
    " stalled integer NOT NULL DEFAULT 0,"
    " lease_owner text,"
    " lease_token text,"
    " lease_expires_at bigint NOT NULL DEFAULT 0,"
    " last_error text,"
    " result text,"
    " progress text,"
    " created_at bigint NOT NULL,"
    " updated_at bigint NOT NULL,"
    " started_at bigint NOT NULL DEFAULT 0,"
    " finished_at bigint NOT NULL DEFAULT 0,"
    " redriven_at bigint NOT NULL DEFAULT 0,"
    " redrive_count integer NOT NULL DEFAULT 0,"
    " set_flags integer NOT NULL DEFAULT 0);"
    "CREATE INDEX jobs_queue_state ON jobs (queue, state, seq);"
    "CREATE INDEX jobs_waiting ON jobs (queue, priority DESC, run_at, seq) WHERE state = 1;"
    "CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 0;"
    "CREATE INDEX jobs_active ON jobs (lease_expires_at) WHERE state = 2;"
    "CREATE INDEX jobs_completed ON jobs (queue, finished_at) WHERE state = 3;"
    "CREATE INDEX jobs_dead ON jobs (finished_at, seq) WHERE state = 4;"
    "CREATE INDEX jobs_dead_queue ON jobs (queue, finished_at, seq) WHERE state = 4;"
    /* settings is store/settings_codec.h's text; paused, concurrency and
     * lease_ms (0 = the default) are copies the fetch function reads */
    "CREATE TABLE queues ("
    " name text PRIMARY KEY,"
    " settings text,"
    " paused boolean NOT NULL DEFAULT false,"
    " throttled_until bigint NOT NULL DEFAULT 0,"
    " concurrency integer NOT NULL DEFAULT 0,"
    " lease_ms bigint NOT NULL DEFAULT 0);"
    /* NOTIFY <schema>_ready with the queue; delivered at commit */
    "CREATE FUNCTION notify_ready(q text) RETURNS integer LANGUAGE plpgsql"
    " SET search_path FROM CURRENT AS $f$"
    " BEGIN PERFORM pg_notify(current_schema() || '_ready', q); RETURN 1; END $f$;"
    /* Leases up to p_max waiting jobs from the queues in order, skipping
     * paused and throttled ones; a queue with a concurrency limit is locked
     * (its queues row) so fetchers on every node count its active jobs one
     * after the other. Lease tokens come from the caller, in order. */
    "CREATE FUNCTION fetch_jobs(p_queues text[], p_worker text, p_max integer,"
    " p_lease bigint, p_now bigint, p_tokens text[], p_default_lease bigint)"
    " RETURNS SETOF jobs LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$"
    " DECLARE v_q text; v_r record; v_have boolean; v_take integer; v_got integer;"
    " v_used integer := 0; v_lease bigint; v_active bigint;"
    " BEGIN"
    "  FOREACH v_q IN ARRAY p_queues LOOP"
    "   EXIT WHEN v_used >= p_max;"
    "   SELECT q.paused, q.throttled_until, q.concurrency, q.lease_ms INTO v_r"
    "    FROM queues q WHERE q.name = v_q;"
    "   v_have := FOUND;"
    "   CONTINUE WHEN v_have AND (v_r.paused OR v_r.throttled_until > p_now);"
    "   v_take := p_max - v_used;"
    "   v_lease := CASE WHEN p_lease > 0 THEN p_lease"
    "    WHEN v_have AND v_r.lease_ms > 0 THEN v_r.lease_ms ELSE p_default_lease END;"
    "   IF v_have AND v_r.concurrency > 0 THEN"
    "    PERFORM 1 FROM queues q WHERE q.name = v_q FOR UPDATE;"
    "    SELECT count(*) INTO v_active FROM jobs j WHERE j.queue = v_q AND j.state = 2;"
    "    CONTINUE WHEN v_active >= v_r.concurrency;"
    "    v_take := least(v_take, v_r.concurrency - v_active);"
    "   END IF;"
    "   RETURN QUERY UPDATE jobs j SET state = 2, attempts = j.attempts + 1,"
    "    started = j.started + 1, lease_owner = p_worker, lease_token = p_tokens[v_used + x.rn],"
    "    lease_expires_at = p_now + v_lease, started_at = p_now, updated_at = p_now"
    "    FROM (SELECT s.seq, row_number() OVER () AS rn FROM (SELECT w.seq FROM jobs w"
    "     WHERE w.queue = v_q AND w.state = 1 ORDER BY w.priority DESC, w.run_at, w.seq"
    "     LIMIT v_take FOR UPDATE SKIP LOCKED) s) x"
    "    WHERE j.seq = x.seq RETURNING j.*;"
    "   GET DIAGNOSTICS v_got = ROW_COUNT;"
    "   v_used := v_used + v_got;"
    "  END LOOP;"
    " END $f$;",

    /* 2: errand.enqueue and errand.enqueue_bulk for applications, which call
     * them inside their own transactions. They validate like the server's
     * enqueue (API.md) and apply the queue's defaults, then the server's. */
    "CREATE FUNCTION _fail(msg text) RETURNS void LANGUAGE plpgsql AS $f$"
    " BEGIN RAISE EXCEPTION 'errand.enqueue: %', msg USING ERRCODE = '22023'; END $f$;"
    "CREATE FUNCTION _name(v text, field text) RETURNS text LANGUAGE plpgsql"
    " SET search_path FROM CURRENT AS $f$"
    " BEGIN"
    "  IF v IS NULL OR v !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN"
    "   PERFORM _fail(field || ' must be 1..128 characters of [A-Za-z0-9_.:-]');"
    "  END IF;"
    "  RETURN v;"
    " END $f$;"
    "CREATE FUNCTION _id(v text, field text) RETURNS text LANGUAGE plpgsql"
    " SET search_path FROM CURRENT AS $f$"
    " BEGIN"
    "  IF v IS NULL OR v !~ '^[!-.0-~]{1,200}$' THEN"
    "   PERFORM _fail(field || ' must be 1..200 printable ASCII characters without spaces or ''/''');"
    "  END IF;"
    "  RETURN v;"
    " END $f$;"
    /* an optional integer option lo..hi; NULL when absent or null */
    "CREATE FUNCTION _int(o jsonb, k text, field text, lo bigint, hi bigint) RETURNS bigint"
    " LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$"
    " DECLARE v jsonb := o -> k;"
    " BEGIN"
    "  IF v IS NULL OR jsonb_typeof(v) = 'null' THEN RETURN NULL; END IF;"
    "  IF jsonb_typeof(v) = 'number' AND v::text ~ '^-?[0-9]{1,18}$' THEN"
    "   IF v::text::bigint BETWEEN lo AND hi THEN RETURN v::text::bigint; END IF;"
    "  END IF;"
    "  PERFORM _fail(field || ' must be an integer ' || lo || '..' || hi);"
    "  RETURN NULL;"
    " END $f$;"
    /* an optional string option; NULL when absent or null */
    "CREATE FUNCTION _str(o jsonb, k text) RETURNS text LANGUAGE plpgsql"
    " SET search_path FROM CURRENT AS $f$"
    " DECLARE v jsonb := o -> k;"
    " BEGIN"
    "  IF v IS NULL OR jsonb_typeof(v) = 'null' THEN RETURN NULL; END IF;"
    "  IF jsonb_typeof(v) <> 'string' THEN PERFORM _fail(k || ' must be a string'); END IF;"
    "  RETURN v #>> '{}';"
    " END $f$;"
    "CREATE FUNCTION enqueue(queue text, name text, payload jsonb, options jsonb DEFAULT '{}')"
    " RETURNS text LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$"
    " #variable_conflict use_variable\n"
    " DECLARE"
    "  o jsonb := coalesce(options, '{}');"
    "  v_now bigint := (extract(epoch FROM now()) * 1000)::bigint;"
    "  v_payload text := coalesce(payload::text, '{}');"
    "  v_key text; v_qd jsonb; v_b jsonb; v_flags integer := 0; v_n integer;"
    "  v_id text; v_prio bigint; v_run bigint; v_delay bigint; v_at timestamptz;"
    "  v_ma bigint; v_bt integer := 0; v_bd bigint := 2000; v_bm bigint := 900000;"
    "  v_bj double precision := 0.5; v_has_bm boolean := false; v_to bigint;"
    "  v_grp text; v_trace text; v_idem text; v_state integer;"
    " BEGIN"
    "  PERFORM _name(queue, 'queue');"
    "  PERFORM _name(name, 'name');"
    "  IF jsonb_typeof(o) <> 'object' THEN PERFORM _fail('options must be a JSON object'); END IF;"
    "  FOR v_key IN SELECT jsonb_object_keys(o) LOOP"
    "   IF v_key <> ALL (ARRAY['id','priority','delay_ms','run_at','max_attempts','backoff',"
    "       'timeout_ms','group','trace_id','idempotency_key']) THEN"
    "    PERFORM _fail(v_key || ' is not a known option');"
    "   END IF;"
    "  END LOOP;"
    "  IF octet_length(v_payload) > 524288 THEN"
    "   PERFORM _fail('payload is ' || octet_length(v_payload) || ' bytes; the limit is 524288 bytes');"
    "  END IF;"
    "  v_id := _str(o, 'id');"
    "  IF v_id IS NULL THEN"
    "   v_id := lpad(to_hex(v_now), 12, '0') || substr(md5(gen_random_uuid()::text), 1, 14);"
    "  ELSE PERFORM _id(v_id, 'id'); END IF;"
    "  SELECT q.settings::jsonb -> 'defaults' INTO v_qd FROM queues q WHERE q.name = queue;"
    "  v_qd := coalesce(v_qd, '{}');"
    "  v_prio := _int(o, 'priority', 'priority', 0, 1000);"
    "  IF v_prio IS NULL THEN v_prio := coalesce((v_qd ->> 'priority')::bigint, 0);"
    "  ELSE v_flags := v_flags | 8; END IF;"
    "  v_delay := _int(o, 'delay_ms', 'delay_ms', 0, 31622400000);"
    "  v_run := v_now;"
    "  IF v_delay IS NOT NULL AND _str(o, 'run_at') IS NOT NULL THEN"
    "   PERFORM _fail('give delay_ms or run_at, not both');"
    "  END IF;"
    "  IF v_delay IS NOT NULL THEN v_run := v_now + v_delay;"
    "  ELSIF _str(o, 'run_at') IS NOT NULL THEN"
    "   BEGIN v_at := _str(o, 'run_at')::timestamptz;"
    "   EXCEPTION WHEN others THEN"
    "    PERFORM _fail('run_at must be an RFC 3339 time such as \"2026-11-30T02:00:00.000Z\"');"
    "   END;"
    "   v_run := (extract(epoch FROM v_at) * 1000)::bigint;"
    "   IF v_run > v_now + 31622400000 THEN PERFORM _fail('run_at must be at most 366 days ahead'); END IF;"
    "   v_run := greatest(v_run, v_now);"
    "  END IF;"
    "  v_state := CASE WHEN v_run > v_now THEN 0 ELSE 1 END;"
    "  v_ma := _int(o, 'max_attempts', 'max_attempts', 1, 1000);"
    "  IF v_ma IS NULL THEN v_ma := coalesce((v_qd ->> 'max_attempts')::bigint, 8);"
    "  ELSE v_flags := v_flags | 1; END IF;"
    "  v_b := o -> 'backoff';"
    "  IF v_b IS NOT NULL AND jsonb_typeof(v_b) <> 'null' THEN"
    "   v_flags := v_flags | 2;"
    "   IF jsonb_typeof(v_b) <> 'object' THEN"
    "    PERFORM _fail('backoff must be an object {type, delay_ms, max_delay_ms, jitter}');"
    "   END IF;"
    "   FOR v_key IN SELECT jsonb_object_keys(v_b) LOOP"
    "    IF v_key <> ALL (ARRAY['type','delay_ms','max_delay_ms','jitter']) THEN"
    "     PERFORM _fail('backoff.' || v_key || ' is not a known field');"
    "    END IF;"
    "   END LOOP;"
    "   IF _str(v_b, 'type') IS NOT NULL THEN"
    "    v_bt := array_position(ARRAY['exponential','fixed','capped'], _str(v_b, 'type')) - 1;"
    "    IF v_bt IS NULL THEN"
    "     PERFORM _fail('backoff.type must be \"exponential\", \"fixed\" or \"capped\"');"
    "    END IF;"
    "   END IF;"
    "   v_bd := coalesce(_int(v_b, 'delay_ms', 'backoff.delay_ms', 0, 31622400000), v_bd);"
    "   v_has_bm := _int(v_b, 'max_delay_ms', 'backoff.max_delay_ms', 0, 31622400000) IS NOT NULL;"
    "   v_bm := coalesce(_int(v_b, 'max_delay_ms', 'backoff.max_delay_ms', 0, 31622400000), v_bm);"
    "   IF v_b -> 'jitter' IS NOT NULL AND jsonb_typeof(v_b -> 'jitter') <> 'null' THEN"
    "    IF jsonb_typeof(v_b -> 'jitter') <> 'number' THEN"
    "     PERFORM _fail('backoff.jitter must be a number 0..1');"
    "    END IF;"
    "    v_bj := (v_b ->> 'jitter')::double precision;"
    "    IF NOT (v_bj BETWEEN 0 AND 1) THEN PERFORM _fail('backoff.jitter must be a number 0..1'); END IF;"
    "   END IF;"
    "   IF v_bm < v_bd THEN"
    "    IF v_has_bm THEN PERFORM _fail('backoff.max_delay_ms must be >= delay_ms'); END IF;"
    "    v_bm := v_bd;"
    "   END IF;"
    "  ELSIF v_qd ? 'backoff' THEN"
    "   v_bt := coalesce(array_position(ARRAY['exponential','fixed','capped'],"
    "    v_qd -> 'backoff' ->> 'type') - 1, 0);"
    "   v_bd := (v_qd -> 'backoff' ->> 'delay_ms')::bigint;"
    "   v_bm := (v_qd -> 'backoff' ->> 'max_delay_ms')::bigint;"
    "   v_bj := (v_qd -> 'backoff' ->> 'jitter')::double precision;"
    "  END IF;"
    "  v_to := _int(o, 'timeout_ms', 'timeout_ms', 1, 86400000);"
    "  IF v_to IS NULL THEN v_to := coalesce((v_qd ->> 'timeout_ms')::bigint, 30000);"
    "  ELSE v_flags := v_flags | 4; END IF;"
    "  v_grp := _str(o, 'group');"
    "  IF v_grp IS NOT NULL THEN PERFORM _name(v_grp, 'group'); END IF;"
    "  v_trace := _str(o, 'trace_id');"
    "  IF v_trace IS NOT NULL THEN PERFORM _id(v_trace, 'trace_id'); END IF;"
    "  v_idem := _str(o, 'idempotency_key');"
    "  IF v_idem IS NULL THEN v_idem := v_id; ELSE PERFORM _id(v_idem, 'idempotency_key'); END IF;"
    "  INSERT INTO jobs (id, queue, name, payload, state, priority, grp, run_at, max_attempts,"
    "   backoff_type, backoff_delay_ms, backoff_max_ms, backoff_jitter, timeout_ms, trace_id,"
    "   idempotency_key, created_at, updated_at, set_flags)"
    "  VALUES (v_id, queue, name, v_payload, v_state, v_prio, v_grp, v_run, v_ma, v_bt, v_bd, v_bm,"
    "   v_bj, v_to, v_trace, v_idem, v_now, v_now, v_flags)"
    "  ON CONFLICT ON CONSTRAINT jobs_id_key DO NOTHING;"
    "  GET DIAGNOSTICS v_n = ROW_COUNT;"
    "  IF v_n > 0 THEN"
    "   INSERT INTO queues (name) VALUES (queue) ON CONFLICT ON CONSTRAINT queues_pkey DO NOTHING;"
    "   IF v_state = 1 THEN PERFORM notify_ready(queue); END IF;"
    "  END IF;"
    "  RETURN v_id;"
    " END $f$;"
    /* jobs: a JSON array of {name, payload, ...options}; all or nothing */
    "CREATE FUNCTION enqueue_bulk(queue text, jobs jsonb) RETURNS SETOF text LANGUAGE plpgsql"
    " SET search_path FROM CURRENT AS $f$"
    " #variable_conflict use_variable\n"
    " DECLARE v_j jsonb;"
    " BEGIN"
    "  IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN"
    "   PERFORM _fail('jobs must be a JSON array');"
    "  END IF;"
    "  IF jsonb_array_length(jobs) > 10000 THEN PERFORM _fail('at most 10000 jobs at once'); END IF;"
    "  FOR v_j IN SELECT e FROM jsonb_array_elements(jobs) AS e LOOP"
    "   IF jsonb_typeof(v_j) <> 'object' THEN PERFORM _fail('a job must be a JSON object'); END IF;"
    "   RETURN NEXT enqueue(queue, _str(v_j, 'name'), v_j -> 'payload', v_j - 'name' - 'payload');"
    "  END LOOP;"
    " END $f$;",

    /* 3: schedulers, run-once leases and cursors (pg_sched.c). Scheduler
     * keys sort bytewise (COLLATE "C"), as in SQLite, so list pages agree. */
    "CREATE TABLE schedulers ("
    " key text COLLATE \"C\" PRIMARY KEY,"
    " spec text NOT NULL,"
    " created_at bigint NOT NULL,"
    " updated_at bigint NOT NULL,"
    " last_tick bigint NOT NULL DEFAULT 0,"
    " next_run_at bigint NOT NULL);"
    "CREATE INDEX schedulers_due ON schedulers (next_run_at);"
    "CREATE TABLE leases ("
    " key text PRIMARY KEY,"
    " type text NOT NULL,"
    " code text NOT NULL,"
    " run_key text NOT NULL,"
    " state smallint NOT NULL,"
    " owner_token text,"
    " fence bigint NOT NULL,"
    " expires_at bigint NOT NULL,"
    " completed_at bigint NOT NULL DEFAULT 0,"
    " created_at bigint NOT NULL,"
    " updated_at bigint NOT NULL);"
    "CREATE INDEX leases_owner ON leases (owner_token) WHERE owner_token IS NOT NULL;"
    "CREATE TABLE cursors ("
    " name text PRIMARY KEY,"
    " value text NOT NULL,"
    " updated_at bigint NOT NULL);",

    /* 4: the limits row, errand.enqueue_job, the fetch row work (pg_migration_4.c) */
    er_pg_migration_4,
    /* 5: tombstones, and _enqueue honouring them (pg_migration_5.c) */
    er_pg_migration_5,
    /* 6: groups, rate limits, queue_states2 (pg_migration_6.c) */
    er_pg_migration_6,
    /* 7: dashboard sessions and the audit log (pg_migration_7.c) */
    er_pg_migration_7,
    /* 8: the job id rule of core in errand.enqueue (pg_migration_8.c) */
    er_pg_migration_8,
    /* 9: a Faktory job's custom object (docs/faktory.md) */
    "ALTER TABLE jobs ADD COLUMN custom text;",
    /* 10: lease_jobs2, the fetch under the reply budget (pg_migration_10.c) */
    er_pg_migration_10,
    /* 11: the Faktory worker registry (pg_migration_11.c) */
    er_pg_migration_11,
    /* 12: a Faktory unique job's lock token (docs/faktory.md, "Unique jobs") */
    "ALTER TABLE jobs ADD COLUMN unique_token text;",
    /* 13: jobs_waiting dropped, the fetch functions without it (pg_migration_13.c) */
    er_pg_migration_13,
    /* 14: jobs_queue_state by queue in byte order, out of the fetch's reach (pg_migration_14.c) */
    er_pg_migration_14,
};

const int er_pg_schema_version = (int)(sizeof er_pg_migrations / sizeof er_pg_migrations[0]);

/* What each step does, as `errand migrate` lists it: one entry per step,
 * appended with it. */
const char *const er_pg_migration_names[] = {
    "jobs, queues, the notify helper and the fetch function",
    "errand.enqueue and errand.enqueue_bulk for applications",
    "schedulers, run-once leases and cursors",
    "the limits row, errand.enqueue_job and the fetch row work",
    "tombstones of deleted jobs' ids",
    "groups, rate limits and queue_states2",
    "dashboard sessions and the audit log",
    "the job id rule of core in errand.enqueue",
    "a Faktory job's custom object",
    "the fetch function under the reply budget (lease_jobs2)",
    "the Faktory worker registry",
    "a Faktory unique job's lock token",
    "one index fewer for waiting jobs (jobs_waiting dropped)",
    "jobs_queue_state by queue in byte order, which fetches cannot take",
};
_Static_assert(sizeof er_pg_migration_names / sizeof er_pg_migration_names[0] ==
                   sizeof er_pg_migrations / sizeof er_pg_migrations[0],
               "every PostgreSQL migration has a name");

/* Every job SELECT/RETURNING lists the job row (store/job_row.h) and then
 * seq (ER_PG_COL_SEQ), with the jobs table aliased j: er_pg_row_job reads
 * them in that order. */
#define COL_J_(c, k, st, pt, m) "j." #c ", "
#define COLS ER_JOB_ROW(COL_J_, COL_J_) "j.seq"

/* A job is sent as one JSON object whose keys are the job row's columns
 * (er_pg_job_json); json_populate_record turns it into a jobs row. */
#define INSERT_COLS "(" ER_JOB_ROW_NAMES ")"
#define INSERT_FROM_JSON(p) " SELECT " ER_JOB_ROW_NAMES " FROM json_populate_record(NULL::jobs, " p ")"

/* A job's queue column c as jobs_queue_state keys it, in byte order
 * (pg_migration_14.c): for the statements that count or list a queue's
 * jobs by state. The fetches name the queue plainly, so they cannot take
 * that index. */
#define QUEUE_C(c) c " COLLATE \"C\""

#define CLEAR_LEASE "lease_owner = NULL, lease_token = NULL, lease_expires_at = 0"

/* The store's clock in ms, or the caller's when the parameter is not NULL */
#define NOW_MS(p) "coalesce(" p "::bigint, (extract(epoch FROM now()) * 1000)::bigint)"

/* A tombstone that remembers id expression idp within the window wp (ms,
 * 0: none) of the time nowp, while no job holds the id again. */
#define TOMB_WHERE(idp, wp, nowp)                                                           \
    " WHERE " wp "::bigint > 0 AND tb.id = " idp " AND tb.finished_at > " NOW_MS(nowp) " - " \
    wp "::bigint AND NOT EXISTS (SELECT 1 FROM jobs e WHERE e.id = tb.id)"

/* The rest of a bulk insert from the rows x (ordinality: the position from
 * 1), wp the tombstone window's parameter and nowp now's: see
 * ER_PG_INSERT_MANY for what it returns. */
#define INSERT_FROM_X(wp, nowp)                                                               \
    " t AS (SELECT x.ordinality, m.* FROM x CROSS JOIN LATERAL (SELECT tb.queue, tb.state,"    \
    " tb.finished_at FROM tombstones tb" TOMB_WHERE("x.id", wp, nowp)                          \
    " AND x.set_flags & 256 = 0 LIMIT 1) m),"                                                  \
    " ins AS (INSERT INTO jobs " INSERT_COLS " SELECT " ER_JOB_ROW_NAMES " FROM x"             \
    " WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.ordinality = x.ordinality)"                    \
    " ORDER BY ordinality ON CONFLICT (id) DO NOTHING RETURNING id, queue, state),"            \
    " reg AS (INSERT INTO queues (name) SELECT DISTINCT queue FROM ins"                        \
    " ON CONFLICT (name) DO NOTHING),"                                                         \
    " nt AS (SELECT notify_ready(w.queue) FROM (SELECT DISTINCT queue FROM ins"                \
    " WHERE state = 1) w)"                                                                     \
    " SELECT f.i, NULL::text, NULL::smallint, NULL::bigint FROM (SELECT min(x.ordinality) - 1" \
    " AS i FROM x JOIN ins ON ins.id = x.id GROUP BY x.id) f, (SELECT count(*) FROM nt) n"     \
    " UNION ALL (SELECT t.ordinality - 1, t.queue, t.state, t.finished_at FROM t"              \
    " ORDER BY t.ordinality)"

/* A retention DELETE d, keeping tombstones: $4 the window (0: none), $5 now */
#define RET_KEEP(del)                                                                      \
    "WITH d AS (" del " RETURNING id, queue, state, finished_at, set_flags),"              \
    " t AS (INSERT INTO tombstones (id, queue, state, finished_at)"                        \
    " SELECT id, queue, state, finished_at FROM d WHERE $4::bigint > 0"                    \
    " AND set_flags & 256 = 0 AND finished_at > $5::bigint - $4::bigint"                   \
    " ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, state = excluded.state,"     \
    " finished_at = excluded.finished_at)"                                                 \
    " SELECT count(*) FROM d"

/* A lease-checked update u (one row when it applied) reported with the
 * job's state before it (NULL when there is no such job), so one round
 * trip tells applied / stale / not found: columns applied, state. */
/* LEASE_REPORT with what the ack finished (columns 2..7): queue, name,
 * trace_id, attempts, run_at, started_at. */
#define LEASE_REPORT_INFO_AND(more, idp)                                                   \
    " SELECT (SELECT count(*) FROM u), c.state, c.queue, c.name, c.trace_id, c.attempts,"  \
    " c.run_at, c.started_at" more " FROM (SELECT 1) d LEFT JOIN jobs c ON c.id = " idp
#define LEASE_REPORT_INFO(idp) LEASE_REPORT_INFO_AND("", idp)

/* A batch ack's state of each refused item x (u.id NULL), probed by id one
 * item at a time (OFFSET 0 keeps the planner from joining, and on stale
 * statistics hashing, the whole table); applied items read nothing. */
#define REFUSED_STATE                                                                      \
    "LEFT JOIN LATERAL (SELECT c.state FROM jobs c WHERE u.id IS NULL AND c.id = x.id"     \
    " OFFSET 0) c ON true"

#define LEASE_REPORT(idp)                                                                  \
    " SELECT (SELECT count(*) FROM u), c.state FROM (SELECT 1) d LEFT JOIN jobs c ON c.id = " \
    idp

/* The first group of queue $1 with waiting jobs, in one or two rows
 * (grp, ord): "" (the jobs without one) when there are any, ord 1; the
 * first named one in byte order, ord 2. */
#define FIRST_GROUP                                                                        \
    "(SELECT ''::text AS grp, 1 AS ord WHERE EXISTS (SELECT 1 FROM jobs WHERE queue = $1"  \
    " AND state = 1 AND grp IS NULL)) UNION ALL (SELECT grp, 2 FROM jobs WHERE queue = $1" \
    " AND state = 1 AND grp IS NOT NULL ORDER BY grp COLLATE \"C\" LIMIT 1)"

/* Leases up to $5 waiting jobs of queue $4 that `where` picks (w: the
 * waiting job), in fetch order, as lease_jobs does: $1 worker, $2 lease
 * expiry, $3 now, $6 the lease tokens, in order. */
#define LEASE_PICKED(where)                                                                \
    "UPDATE jobs j SET state = 2, attempts = j.attempts + 1, started = j.started + 1,"      \
    " lease_owner = $1, lease_token = ($6::text[])[x.rn], lease_expires_at = $2::bigint,"  \
    " started_at = $3::bigint, updated_at = $3::bigint"                                    \
    " FROM (SELECT s.seq, row_number() OVER () AS rn FROM (SELECT w.seq FROM jobs w"       \
    " WHERE w.queue = $4 AND w.state = 1 AND " where                                       \
    " ORDER BY w.priority DESC, w.run_at, w.seq LIMIT $5 FOR UPDATE SKIP LOCKED) s) x"     \
    " WHERE j.seq = x.seq RETURNING " COLS

/* The job row's columns with their PostgreSQL types, and the position. */
#define COL_DEF_(c, k, st, pt, m) ", " #c " " pt
const char er_pg_bulk_table_sql[] =
    "CREATE TEMP TABLE errand_bulk (ord bigint" ER_JOB_ROW(COL_DEF_, COL_DEF_)
    ") ON COMMIT DELETE ROWS";
#undef COL_DEF_

const char *const er_pg_sql[ER_PG_NSTMT] = {
    /* $1: the job (er_pg_job_json), $2: notify (the job is waiting and its
     * queue was not notified yet in this transaction), $3: the tombstone
     * window (0: no lookup), $4: now (NULL: the store's clock). Columns:
     * inserted, the existing job when not, then the tombstone that
     * remembers the id (queue, state, finished_at) when one does. */
    [ER_PG_INSERT_JOB] =
        "WITH t AS (SELECT tb.queue, tb.state, tb.finished_at FROM tombstones tb"
        TOMB_WHERE("($1::json ->> 'id')", "$3", "$4") "),"
        " ins AS (INSERT INTO jobs " INSERT_COLS INSERT_FROM_JSON("$1::json")
        " WHERE NOT EXISTS (SELECT 1 FROM t) ON CONFLICT (id) DO NOTHING RETURNING queue, state),"
        " reg AS (INSERT INTO queues (name) SELECT queue FROM ins ON CONFLICT (name) DO NOTHING)"
        " SELECT n.c, " COLS ", t.queue, t.state, t.finished_at FROM (SELECT count(*) AS c,"
        " count(CASE WHEN state = 1 AND $2::boolean THEN notify_ready(queue) END) AS w"
        " FROM ins) n LEFT JOIN t ON true"
        " LEFT JOIN jobs j ON j.id = ($1::json ->> 'id') AND n.c = 0",
    /* $1: a JSON array of jobs (er_pg_job_json each), $2: the tombstone
     * window (0: no lookups), $3: now (NULL: the store's clock). Returns the
     * positions (from 0) inserted: the first of each id that did not exist,
     * with NULL tombstone columns; and in position order the positions a
     * tombstone remembers, with its queue, state, finished_at. The LIMIT 1
     * keeps each lookup one index probe (no join over the whole table). */
    [ER_PG_INSERT_MANY] =
        "WITH x AS (SELECT * FROM json_populate_recordset(NULL::jobs, $1::json)"
        " WITH ORDINALITY AS x),"
        INSERT_FROM_X("$2", "$3"),
    /* ER_PG_INSERT_MANY over the rows COPY put in the session's batch
     * table (ord: the position from 1), which it empties: $1 the tombstone
     * window, $2 now. Same columns. */
    [ER_PG_INSERT_COPIED] =
        "WITH x AS (SELECT b.*, b.ord AS ordinality FROM pg_temp.errand_bulk b),"
        " clr AS (DELETE FROM pg_temp.errand_bulk),"
        INSERT_FROM_X("$1", "$2"),
    [ER_PG_GET_JOB] = "SELECT " COLS " FROM jobs j WHERE j.id = $1",
    [ER_PG_GET_JOB_LOCK] = "SELECT " COLS ", q.settings, q.paused FROM jobs j"
                           " LEFT JOIN queues q ON q.name = j.queue WHERE j.id = $1"
                           " FOR UPDATE OF j",
    [ER_PG_QUEUE_GET] = "SELECT settings, paused FROM queues WHERE name = $1",
    /* $6..$10: the copies queue_states2 reads (pg_migration_6.c) */
    [ER_PG_QUEUE_PUT] =
        "INSERT INTO queues (name, settings, paused, concurrency, lease_ms, rate_max,"
        " rate_per_ms, rate_burst, group_limited, aged)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (name) DO UPDATE SET"
        " settings = excluded.settings, paused = excluded.paused,"
        " concurrency = excluded.concurrency, lease_ms = excluded.lease_ms,"
        " rate_max = excluded.rate_max, rate_per_ms = excluded.rate_per_ms,"
        " rate_burst = excluded.rate_burst, group_limited = excluded.group_limited,"
        " aged = excluded.aged"
        " RETURNING CASE WHEN NOT paused THEN notify_ready(name) END",
    [ER_PG_QUEUE_UNTHROTTLE] = "UPDATE queues SET throttled_until = 0"
                               " WHERE name = $1 AND throttled_until <> 0",
    [ER_PG_QUEUE_ALL] = "SELECT name, settings, paused, throttled_until FROM queues"
                        " ORDER BY name COLLATE \"C\"",
    [ER_PG_LIST_QUEUES] =
        "SELECT q.name, q.settings, q.paused, q.throttled_until,"
        " (SELECT count(*) FROM jobs j WHERE " QUEUE_C("j.queue") " = q.name AND j.state = 0),"
        " (SELECT count(*) FROM jobs j WHERE " QUEUE_C("j.queue") " = q.name AND j.state = 1),"
        " (SELECT count(*) FROM jobs j WHERE " QUEUE_C("j.queue") " = q.name AND j.state = 2),"
        " (SELECT count(*) FROM jobs j WHERE " QUEUE_C("j.queue") " = q.name AND j.state = 3),"
        " (SELECT count(*) FROM jobs j WHERE " QUEUE_C("j.queue") " = q.name AND j.state = 4),"
        " (SELECT count(*) FROM jobs j WHERE " QUEUE_C("j.queue") " = q.name AND j.state = 5),"
        " (SELECT min(j.run_at) FROM jobs j WHERE " QUEUE_C("j.queue") " = q.name AND j.state = 1)"
        " FROM queues q ORDER BY q.name COLLATE \"C\"",
    /* the fetch policy's inputs (core/fetch.h) and its row work, in order */
    [ER_PG_QUEUE_STATES] = "SELECT * FROM queue_states2($1::text[])",
    /* $8 a leased job's fixed bytes, $9 the bytes used, $10 the budget
     * (er_fetch_params.max_bytes; pg_migration_10.c) */
    [ER_PG_FETCH] = "SELECT " COLS " FROM lease_jobs2($1::text[], $2::bigint[], $3::bigint[], $4,"
                    " $5, $6, $7::text[], $8, $9, $10) j",
    /* $1 queues, $2 their rate states after the fetch */
    [ER_PG_QUEUE_RATE] = "UPDATE queues q SET rate_tat = x.tat"
                         " FROM unnest($1::text[], $2::bigint[]) AS x(name, tat)"
                         " WHERE q.name = x.name",
    /* the group planner's row work (core/fetch.h er_fetch_rows); group
     * names compare in byte order (COLLATE "C", jobs_grouped's) */
    /* columns: the group, and 0 when it is the next one after $2, else 1
     * or 2: the first one (the ring closed), "" (no group) before any */
    [ER_PG_FIRST_GROUP] = "SELECT grp, ord FROM (" FIRST_GROUP ") f ORDER BY ord LIMIT 1",
    [ER_PG_NEXT_GROUP] = "SELECT grp, ord FROM ((SELECT grp, 0 AS ord FROM jobs WHERE queue = $1"
                         " AND state = 1 AND grp IS NOT NULL AND grp COLLATE \"C\" > $2"
                         " ORDER BY grp COLLATE \"C\" LIMIT 1) UNION ALL " FIRST_GROUP ") f"
                         " ORDER BY ord LIMIT 1",
    [ER_PG_GROUP_ACTIVE] = "SELECT count(*) FROM jobs WHERE queue = $1 AND state = 2"
                           " AND grp IS NOT NULL AND grp = $2",
    [ER_PG_UNGROUPED_ACTIVE] = "SELECT count(*) FROM jobs WHERE " QUEUE_C("queue")
                               " = $1 AND state = 2"
                               " AND grp IS NULL",
    [ER_PG_GROUP_TAT] = "SELECT tat FROM group_rates WHERE queue = $1 AND grp = $2",
    /* a rate state in the past is the same as none; $2 limit. The outer
     * tat test is checked again on a row a fetch updated meanwhile. */
    [ER_PG_GROUP_TAT_CLEAN] = "DELETE FROM group_rates g WHERE g.tat < $1 AND (g.queue, g.grp)"
                              " IN (SELECT queue, grp FROM group_rates WHERE tat < $1 LIMIT $2)",
    [ER_PG_LEVEL_GROUPED] = "SELECT priority, run_at FROM jobs WHERE queue = $1 AND state = 1"
                            " AND grp IS NOT NULL AND grp COLLATE \"C\" = $2 AND priority < $3"
                            " ORDER BY priority DESC, run_at, seq LIMIT 1",
    [ER_PG_LEVEL_UNGROUPED] = "SELECT priority, run_at FROM jobs WHERE queue = $1 AND state = 1"
                              " AND grp IS NULL AND priority < $2"
                              " ORDER BY priority DESC, run_at, seq LIMIT 1",
    [ER_PG_FETCH_GROUP] = LEASE_PICKED("w.grp IS NOT NULL AND w.grp COLLATE \"C\" = $7"),
    [ER_PG_FETCH_GROUP_AT] = LEASE_PICKED("w.grp IS NOT NULL AND w.grp COLLATE \"C\" = $7"
                                          " AND w.priority = $8"),
    [ER_PG_FETCH_UNGROUPED] = LEASE_PICKED("w.grp IS NULL"),
    [ER_PG_FETCH_UNGROUPED_AT] = LEASE_PICKED("w.grp IS NULL AND w.priority = $7"),
    /* the planner's batch row work: one statement each */
    /* up to $3 groups of queue $1 with waiting jobs after $2 (NULL: from
     * the start, "" first when there are jobs without a group), in byte
     * order: a loose index scan of jobs_grouped, one probe per group.
     * Columns: the group, its place. Names are never "", so "" > after
     * stands for the start. */
    [ER_PG_NEXT_GROUPS] =
        "WITH RECURSIVE g(name, depth) AS ((SELECT w.grp COLLATE \"C\", 1 FROM jobs w"
        " WHERE w.queue = $1 AND w.state = 1 AND w.grp IS NOT NULL"
        " AND w.grp COLLATE \"C\" > coalesce($2, '') ORDER BY w.grp COLLATE \"C\" LIMIT 1)"
        " UNION ALL SELECT (SELECT w.grp COLLATE \"C\" FROM jobs w WHERE w.queue = $1"
        " AND w.state = 1 AND w.grp IS NOT NULL AND w.grp COLLATE \"C\" > g.name"
        " ORDER BY w.grp COLLATE \"C\" LIMIT 1), g.depth + 1 FROM g"
        " WHERE g.name IS NOT NULL AND g.depth < $3)"
        " (SELECT ''::text, 0 WHERE $2::text IS NULL AND EXISTS (SELECT 1 FROM jobs w"
        " WHERE w.queue = $1 AND w.state = 1 AND w.grp IS NULL))"
        " UNION ALL (SELECT name, depth FROM g WHERE name IS NOT NULL) ORDER BY 2 LIMIT $3",
    /* for each group of $2 (text[]; "": the jobs without one) of queue $1:
     * its place (from 0), leased jobs (when $3) and rate state (when $4) */
    [ER_PG_GROUP_ROOMS] =
        "SELECT x.i - 1, CASE WHEN NOT $3::boolean THEN 0 WHEN x.name = ''"
        " THEN (SELECT count(*) FROM jobs j WHERE " QUEUE_C("j.queue") " = $1 AND j.state = 2"
        " AND j.grp IS NULL) ELSE (SELECT count(*) FROM jobs j WHERE j.queue = $1"
        " AND j.state = 2 AND j.grp IS NOT NULL AND j.grp = x.name) END,"
        " CASE WHEN $4::boolean THEN coalesce((SELECT r.tat FROM group_rates r"
        " WHERE r.queue = $1 AND r.grp = x.name), 0) ELSE 0 END"
        " FROM unnest($2::text[]) WITH ORDINALITY AS x(name, i) ORDER BY x.i",
    /* Leases up to $6[i] waiting jobs of each group $5[i] ("": the jobs
     * without one) of queue $4 in fetch order, as LEASE_PICKED does; each
     * row adds its group's place (from 1) after COLS. */
    [ER_PG_FETCH_GROUPS] =
        "WITH g AS (SELECT * FROM unnest($5::text[], $6::bigint[]) WITH ORDINALITY AS g(name,"
        " take, i)), p AS (SELECT g.i, w.seq FROM g CROSS JOIN LATERAL (SELECT w.seq FROM jobs w"
        " WHERE w.queue = $4 AND w.state = 1 AND w.grp IS NOT NULL AND w.grp COLLATE \"C\" = g.name"
        " ORDER BY w.priority DESC, w.run_at, w.seq LIMIT g.take FOR UPDATE SKIP LOCKED) w"
        " WHERE g.name <> '' UNION ALL SELECT g.i, w.seq FROM g CROSS JOIN LATERAL (SELECT w.seq"
        " FROM jobs w WHERE w.queue = $4 AND w.state = 1 AND w.grp IS NULL"
        " ORDER BY w.priority DESC, w.run_at, w.seq LIMIT g.take FOR UPDATE SKIP LOCKED) w"
        " WHERE g.name = ''), x AS (SELECT p.i, p.seq, row_number() OVER () AS rn FROM p)"
        " UPDATE jobs j SET state = 2, attempts = j.attempts + 1, started = j.started + 1,"
        " lease_owner = $1, lease_token = ($7::text[])[x.rn], lease_expires_at = $2::bigint,"
        " started_at = $3::bigint, updated_at = $3::bigint"
        " FROM x WHERE j.seq = x.seq RETURNING " COLS ", x.i",
    /* $1 queue, $2 groups (distinct), $3 their rate states */
    [ER_PG_GROUP_TATS_PUT] = "INSERT INTO group_rates (queue, grp, tat) SELECT $1, x.name, x.tat"
                             " FROM unnest($2::text[], $3::bigint[]) AS x(name, tat)"
                             " ON CONFLICT (queue, grp) DO UPDATE SET tat = excluded.tat",
    [ER_PG_HEARTBEAT] = "WITH u AS (UPDATE jobs SET lease_expires_at = $1,"
                        " progress = coalesce($2, progress), updated_at = $3"
                        " WHERE id = $4 AND state = 2 AND lease_token = $5 RETURNING 1)"
                        LEASE_REPORT("$4"),
    [ER_PG_COMPLETE] = "WITH u AS (UPDATE jobs SET state = 3, result = $1, finished_at = $2,"
                       " updated_at = $2, " CLEAR_LEASE
                       " WHERE id = $3 AND state = 2 AND lease_token = $4 RETURNING 1)"
                       LEASE_REPORT_INFO_AND(", c.unique_token", "$3"),
    /* $1 ids, $2 tokens, $3 results (distinct ids), $4 now. One row per
     * item in order: applied; for a refused item the job's state (NULL: no
     * such job), looked up by id alone (REFUSED_STATE); for an applied one
     * LEASE_REPORT_INFO's queue..started_at and the unique token, which the
     * update leaves as they were. */
    [ER_PG_COMPLETE_MANY] =
        "WITH x AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[])"
        " WITH ORDINALITY AS x(id, token, result, i)),"
        " u AS (UPDATE jobs j SET state = 3, result = x.result, finished_at = $4::bigint,"
        " updated_at = $4::bigint, " CLEAR_LEASE " FROM x"
        " WHERE j.id = x.id AND j.state = 2 AND j.lease_token = x.token RETURNING j.id,"
        " j.queue, j.name, j.trace_id, j.attempts, j.run_at, j.started_at, j.unique_token)"
        " SELECT u.id IS NOT NULL, c.state, u.queue, u.name, u.trace_id, u.attempts, u.run_at,"
        " u.started_at, u.unique_token FROM x LEFT JOIN u ON u.id = x.id " REFUSED_STATE
        " ORDER BY x.i",
    [ER_PG_RELEASE] = "WITH u AS (UPDATE jobs SET state = 1, attempts = greatest(attempts - 1, 0),"
                      " updated_at = $1, " CLEAR_LEASE
                      " WHERE id = $2 AND state = 2 AND lease_token = $3"
                      " RETURNING notify_ready(queue))" LEASE_REPORT("$2"),
    /* $1 ids (distinct), $2 tokens, $3 now. One row per item in order:
     * applied, a refused item's state (REFUSED_STATE), an applied one's
     * queue. */
    [ER_PG_RELEASE_MANY] =
        "WITH x AS (SELECT * FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS x(id, token, i)),"
        " u AS (UPDATE jobs j SET state = 1, attempts = greatest(j.attempts - 1, 0),"
        " updated_at = $3::bigint, " CLEAR_LEASE " FROM x"
        " WHERE j.id = x.id AND j.state = 2 AND j.lease_token = x.token"
        " RETURNING j.id, j.queue, notify_ready(j.queue))"
        " SELECT u.id IS NOT NULL, c.state, u.queue FROM x LEFT JOIN u ON u.id = x.id "
        REFUSED_STATE " ORDER BY x.i",
    /* $8 > 0: a throttled failure pauses the queue until then */
    [ER_PG_FAIL_APPLY] =
        "WITH t AS (INSERT INTO queues (name, throttled_until) SELECT queue, $8::bigint FROM jobs"
        " WHERE id = $7 AND $8::bigint > 0 ON CONFLICT (name) DO UPDATE SET"
        " throttled_until = greatest(queues.throttled_until, excluded.throttled_until))"
        " UPDATE jobs SET state = $1, run_at = $2, attempts = $3, last_error = $4,"
        " updated_at = $5, finished_at = $6, " CLEAR_LEASE " WHERE id = $7",
    /* $1 ids (distinct): GET_JOB_LOCK's columns for each that exists, locked
     * in id order */
    [ER_PG_FAIL_LOCK_MANY] = "SELECT " COLS ", q.settings, q.paused FROM jobs j"
                             " LEFT JOIN queues q ON q.name = j.queue WHERE j.id = ANY($1::text[])"
                             " ORDER BY j.id FOR UPDATE OF j",
    /* FAIL_APPLY for a batch: $1 ids, $2 states, $3 run_at, $4 attempts, $5
     * last_error, $6 finished_at, $7 queue pause until (0: none), $8 now */
    [ER_PG_FAIL_APPLY_MANY] =
        "WITH x AS (SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::integer[],"
        " $5::text[], $6::bigint[], $7::bigint[]) AS x(id, st, run_at, attempts, err, fin, pause)),"
        " t AS (INSERT INTO queues (name, throttled_until) SELECT j.queue, max(x.pause) FROM x"
        " JOIN jobs j ON j.id = x.id WHERE x.pause > 0 GROUP BY j.queue ON CONFLICT (name)"
        " DO UPDATE SET throttled_until = greatest(queues.throttled_until,"
        " excluded.throttled_until))"
        " UPDATE jobs j SET state = x.st, run_at = x.run_at, attempts = x.attempts,"
        " last_error = x.err, updated_at = $8::bigint, finished_at = x.fin, " CLEAR_LEASE
        " FROM x WHERE j.id = x.id",
    /* the cancelled job, or NULLs and the current state (NULL: no job) */
    [ER_PG_CANCEL] = "WITH u AS (UPDATE jobs j SET state = 5, finished_at = $1, updated_at = $1"
                     " WHERE j.id = $2 AND j.state IN (0, 1) RETURNING " COLS ")"
                     " SELECT u.*, c.state FROM (SELECT 1) d LEFT JOIN u ON true"
                     " LEFT JOIN jobs c ON c.id = $2",
    /* $1 now, $2 id, $3 last_error: NULL to waiting now (with a wake-up),
     * else to dead */
    [ER_PG_MOVE_SCHEDULED] = "UPDATE jobs SET state = CASE WHEN $3::text IS NULL THEN 1 ELSE 4 END,"
                             " run_at = CASE WHEN $3::text IS NULL THEN $1 ELSE run_at END,"
                             " finished_at = CASE WHEN $3::text IS NULL THEN finished_at ELSE $1 END,"
                             " last_error = coalesce($3::text, last_error), updated_at = $1"
                             " WHERE id = $2 AND state = 0"
                             " RETURNING queue, CASE WHEN $3::text IS NULL THEN notify_ready(queue) END",
    [ER_PG_LIST_JOBS] = "SELECT " COLS " FROM jobs j WHERE " QUEUE_C("j.queue")
                        " = $1 AND j.state = $2"
                        " AND j.seq > $3 ORDER BY j.seq LIMIT $4",
    [ER_PG_LIST_DEAD] = "SELECT " COLS " FROM jobs j WHERE j.state = 4"
                        " AND (j.finished_at, j.seq) < ($1, $2)"
                        " ORDER BY j.finished_at DESC, j.seq DESC LIMIT $3",
    [ER_PG_LIST_DEAD_QUEUE] = "SELECT " COLS " FROM jobs j WHERE j.state = 4 AND j.queue = $4"
                              " AND (j.finished_at, j.seq) < ($1, $2)"
                              " ORDER BY j.finished_at DESC, j.seq DESC LIMIT $3",
    /* $1 the copy (er_pg_job_json), $2 now, $3 redrive_count, $4 the dead
     * job's id; returns how many were inserted (0: the id exists) */
    [ER_PG_REDRIVE_APPLY] =
        "WITH ins AS (INSERT INTO jobs " INSERT_COLS INSERT_FROM_JSON("$1::json")
        " ON CONFLICT (id) DO NOTHING RETURNING queue),"
        " m AS (UPDATE jobs SET redriven_at = $2, redrive_count = $3, updated_at = $2"
        " WHERE id = $4 AND EXISTS (SELECT 1 FROM ins)),"
        " reg AS (INSERT INTO queues (name) SELECT queue FROM ins ON CONFLICT (name) DO NOTHING)"
        " SELECT count(notify_ready(queue)) FROM ins",
    [ER_PG_DELETE_DEAD] = "DELETE FROM jobs WHERE id = $1 AND state = 4",
    /* the Faktory worker registry (pg_workers.c) */
#define WORKER_COLS "wid, hostname, node, current_state, labels, pid, v, rss_kb, started_at,"   \
                    " last_beat, state"
    /* one row a wid (its latest beat when given twice), from ten arrays */
    [ER_PG_WORKER_BEAT] = "INSERT INTO workers (" WORKER_COLS ") SELECT DISTINCT ON (wid)"
                          " wid, hostname, node, current_state, labels, pid, v, rss_kb,"
                          " started_at, last_beat, 0 FROM unnest($1::text[], $2::text[],"
                          " $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],"
                          " $8::bigint[], $9::bigint[], $10::bigint[]) AS x(wid, hostname, node,"
                          " current_state, labels, pid, v, rss_kb, started_at, last_beat)"
                          " ORDER BY wid, last_beat DESC"
                          " ON CONFLICT (wid) DO UPDATE SET"
                          " hostname = excluded.hostname, node = excluded.node,"
                          " current_state = excluded.current_state, labels = excluded.labels,"
                          " pid = excluded.pid, v = excluded.v, rss_kb = excluded.rss_kb,"
                          " last_beat = excluded.last_beat"
                          " WHERE excluded.last_beat >= workers.last_beat",
    [ER_PG_WORKER_SIGNAL] = "UPDATE workers SET state = greatest(state, $2::smallint)"
                            " WHERE wid = $1 AND last_beat > $3::bigint RETURNING " WORKER_COLS,
    [ER_PG_WORKER_GET] = "SELECT " WORKER_COLS " FROM workers WHERE wid = $1",
    [ER_PG_WORKER_LIST] = "SELECT " WORKER_COLS " FROM workers WHERE last_beat > $1::bigint"
                          " AND wid > $2 ORDER BY wid COLLATE \"C\" LIMIT $3::bigint",
    [ER_PG_WORKER_LIST_SIGNALLED] = "SELECT " WORKER_COLS " FROM workers WHERE state <> 0"
                                    " AND last_beat > $1::bigint AND wid > $2"
                                    " ORDER BY wid COLLATE \"C\" LIMIT $3::bigint",
    [ER_PG_WORKER_REAP] = "DELETE FROM workers WHERE wid IN (SELECT wid FROM workers"
                          " WHERE last_beat < $1::bigint ORDER BY last_beat LIMIT $2::bigint)",
    [ER_PG_WORKER_COUNT] = "SELECT count(*) FROM workers WHERE last_beat > $1::bigint",
#undef WORKER_COLS
    [ER_PG_SESSION_PUT] = "INSERT INTO sessions (hash, role, name, csrf, created_at, expires_at)"
                          " VALUES ($1, $2, $3, $4, $5, $6)",
    [ER_PG_SESSION_TOUCH] = "UPDATE sessions SET expires_at = $3 WHERE hash = $1 AND expires_at > $2"
                            " RETURNING role, name, csrf, created_at, expires_at",
    [ER_PG_SESSION_DELETE] = "DELETE FROM sessions WHERE hash = $1",
    [ER_PG_SESSION_SWEEP] = "DELETE FROM sessions WHERE hash IN (SELECT hash FROM sessions"
                            " WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2)",
    [ER_PG_AUDIT_ADD] = "INSERT INTO audit (at, who, action, target, count)"
                        " VALUES ($1, $2, $3, $4, $5) RETURNING seq",
    [ER_PG_AUDIT_LIST] = "SELECT seq, at, who, action, target, count FROM audit WHERE seq < $1"
                         " ORDER BY seq DESC LIMIT $2",
    /* $1 state, $2 queue (the _QUEUE forms, which jobs_queue_state serves)
     * or NULL, $3 name or NULL, $4 only never redriven, $5 er_bulk_tries */
#define BULK_WHERE                                                                              \
    " AND ($3::text IS NULL OR name = $3) AND ($4::int = 0 OR redriven_at = 0)"                  \
    " AND ($5::int = 0 OR ($5::int = 1) = (attempts > 0))"
    [ER_PG_BULK_IDS] = "SELECT id, seq FROM jobs WHERE state = $1::int AND $2::text IS NULL"
                       BULK_WHERE " AND seq > $6 ORDER BY seq LIMIT $7",
    [ER_PG_BULK_IDS_QUEUE] = "SELECT id, seq FROM jobs WHERE " QUEUE_C("queue") " = $2::text"
                             " AND state = $1::int"
                             BULK_WHERE " AND seq > $6 ORDER BY seq LIMIT $7",
    [ER_PG_BULK_COUNT] = "SELECT count(*) FROM jobs WHERE state = $1::int AND $2::text IS NULL"
                         BULK_WHERE,
    [ER_PG_BULK_COUNT_QUEUE] = "SELECT count(*) FROM jobs WHERE " QUEUE_C("queue") " = $2::text"
                               " AND state = $1::int" BULK_WHERE,
#undef BULK_WHERE
    [ER_PG_AUDIT_SWEEP] = "DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE at < $1"
                          " ORDER BY at LIMIT $2)",
    [ER_PG_PROMOTE] = "WITH p AS (UPDATE jobs SET state = 1, updated_at = $1"
                      " WHERE seq IN (SELECT seq FROM jobs WHERE state = 0 AND run_at <= $1"
                      " ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING queue)"
                      " SELECT queue, count(*), notify_ready(queue) FROM p GROUP BY queue",
    [ER_PG_REAP_SELECT] = "SELECT " COLS ", q.settings, q.paused FROM jobs j"
                          " LEFT JOIN queues q ON q.name = j.queue"
                          " WHERE j.state = 2 AND j.lease_expires_at <= $1"
                          " ORDER BY j.lease_expires_at LIMIT $2 FOR UPDATE OF j SKIP LOCKED",
    /* $1 seqs, $2 new states, $3 last_error (NULL keeps), $4 now */
    [ER_PG_REAP_APPLY] =
        "WITH u AS (UPDATE jobs j SET state = x.st, stalled = j.stalled + 1,"
        " last_error = coalesce(x.err, j.last_error),"
        " finished_at = CASE WHEN x.st = 4 THEN $4::bigint ELSE 0 END, updated_at = $4::bigint, " CLEAR_LEASE
        " FROM unnest($1::bigint[], $2::integer[], $3::text[]) AS x(seq, st, err)"
        " WHERE j.seq = x.seq RETURNING j.queue, j.state)"
        " SELECT queue, notify_ready(queue) FROM u WHERE state = 1 GROUP BY queue",
    /* $1 queues, $2 cutoff per queue, $3 limit; RET_KEEP's $4, $5 */
    [ER_PG_RET_COMPLETED_AGE] = RET_KEEP(
        "DELETE FROM jobs WHERE seq IN (SELECT d.seq FROM unnest($1::text[], $2::bigint[])"
        " AS r(q, cutoff) CROSS JOIN LATERAL (SELECT seq FROM jobs WHERE state = 3"
        " AND queue = r.q AND finished_at < r.cutoff ORDER BY finished_at LIMIT $3) d LIMIT $3)"),
    /* $2 how many of the newest completed jobs each queue keeps */
    [ER_PG_RET_COMPLETED_COUNT] = RET_KEEP(
        "DELETE FROM jobs WHERE seq IN (SELECT d.seq FROM unnest($1::text[], $2::bigint[])"
        " AS r(q, keep) CROSS JOIN LATERAL (SELECT seq FROM jobs WHERE state = 3"
        " AND queue = r.q ORDER BY finished_at DESC OFFSET r.keep LIMIT $3) d LIMIT $3)"),
    [ER_PG_RET_DEAD_AGE] = RET_KEEP(
        "DELETE FROM jobs WHERE seq IN (SELECT d.seq FROM unnest($1::text[], $2::bigint[])"
        " AS r(q, cutoff) CROSS JOIN LATERAL (SELECT seq FROM jobs WHERE state = 4"
        " AND queue = r.q AND finished_at < r.cutoff ORDER BY finished_at LIMIT $3) d LIMIT $3)"),
    /* $1 id, $2 window, $3 now (NULL: the store's clock) */
    [ER_PG_TOMB_GET] = "SELECT tb.queue, tb.state, tb.finished_at FROM tombstones tb"
                       TOMB_WHERE("$1::text", "$2", "$3"),
    /* $1 the oldest finished_at still kept, minus 1; $2 limit */
    [ER_PG_TOMB_CLEAN] = "DELETE FROM tombstones WHERE id IN (SELECT id FROM tombstones"
                         " WHERE finished_at <= $1 ORDER BY finished_at LIMIT $2)",
    [ER_PG_NEXT_DUE] = "SELECT least((SELECT min(run_at) FROM jobs WHERE state = 0),"
                       " (SELECT min(lease_expires_at) FROM jobs WHERE state = 2))",
    /* schedulers, leases, cursors (pg_sched.c) */
#define SCHED_COLS "key, spec, created_at, updated_at, last_tick, next_run_at"
    /* column 6: whether the key was new (an inserted row has no xmax; an
     * updated one carries the upsert's row lock) */
    [ER_PG_SCHED_PUT] = "INSERT INTO schedulers AS s (" SCHED_COLS ")"
                        " VALUES ($1, $2, $3, $3, 0, $4) ON CONFLICT (key) DO UPDATE SET"
                        " spec = excluded.spec, updated_at = excluded.updated_at,"
                        " next_run_at = excluded.next_run_at"
                        " RETURNING " SCHED_COLS ", s.xmax = 0",
    [ER_PG_SCHED_GET] = "SELECT " SCHED_COLS " FROM schedulers WHERE key = $1",
    [ER_PG_SCHED_LIST] = "SELECT " SCHED_COLS " FROM schedulers WHERE key > $1 ORDER BY key"
                         " LIMIT $2",
    [ER_PG_SCHED_DELETE] = "DELETE FROM schedulers WHERE key = $1",
    [ER_PG_SCHED_DUE] = "SELECT " SCHED_COLS " FROM schedulers WHERE next_run_at <= $1"
                        " ORDER BY next_run_at, key LIMIT $2",
    /* columns: applied (0/1), whether the key exists */
    [ER_PG_SCHED_ADVANCE] =
        "WITH u AS (UPDATE schedulers SET last_tick = CASE WHEN $2::bigint > 0 THEN $2::bigint"
        " ELSE last_tick END, next_run_at = $3::bigint"
        " WHERE key = $1::text AND next_run_at = $4::bigint RETURNING 1)"
        " SELECT (SELECT count(*) FROM u), EXISTS (SELECT 1 FROM schedulers WHERE key = $1::text)",
#undef SCHED_COLS
#define LEASE_COLS "key, state, owner_token, fence, expires_at, completed_at"
    [ER_PG_LEASE_LOCK] = "SELECT " LEASE_COLS " FROM leases WHERE key = $1 FOR UPDATE",
    [ER_PG_LEASE_BY_TOKEN] = "SELECT " LEASE_COLS " FROM leases WHERE owner_token = $1"
                             " FOR UPDATE",
#undef LEASE_COLS
    /* $11: the fence read before the decision (0: no row then); a row whose
     * fence moved meanwhile is left alone (0 rows) */
    [ER_PG_LEASE_PUT] =
        "INSERT INTO leases AS l (key, type, code, run_key, state, owner_token, fence,"
        " expires_at, completed_at, created_at, updated_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) ON CONFLICT (key) DO UPDATE SET"
        " state = excluded.state, owner_token = excluded.owner_token, fence = excluded.fence,"
        " expires_at = excluded.expires_at, completed_at = excluded.completed_at,"
        " updated_at = excluded.updated_at WHERE l.fence = $11::bigint",
    [ER_PG_CURSOR_GET] = "SELECT value, updated_at FROM cursors WHERE name = $1",
    /* $4 check, $5 expected (NULL: must not exist). An unchecked write is an
     * upsert; a checked one updates from $5 or inserts a new name. Columns:
     * applied (0/1), the value in this statement's snapshot. */
    [ER_PG_CURSOR_CAS] =
        "WITH up AS (UPDATE cursors SET value = $2::text, updated_at = $3::bigint"
        " WHERE name = $1::text AND $4::boolean AND value = $5::text RETURNING 1),"
        " ins AS (INSERT INTO cursors AS c (name, value, updated_at)"
        " SELECT $1::text, $2::text, $3::bigint WHERE NOT $4::boolean OR $5::text IS NULL"
        " ON CONFLICT (name) DO UPDATE SET value = excluded.value,"
        " updated_at = excluded.updated_at WHERE NOT $4::boolean RETURNING 1)"
        " SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM ins),"
        " (SELECT value FROM cursors WHERE name = $1::text)",
    /* Inspection lists, never the owner token (a secret). Byte order
     * (COLLATE "C", as SQLite and the schedulers' key) so pages agree
     * across stores; these keys carry the database's collation, so the
     * sort reads the table: fine for a dashboard's page of a small table. */
    [ER_PG_LEASE_LIST] = "SELECT key, state, fence, expires_at, completed_at, type, code, run_key,"
                         " created_at, updated_at FROM leases WHERE key COLLATE \"C\" > $1"
                         " ORDER BY key COLLATE \"C\" LIMIT $2",
    [ER_PG_CURSOR_LIST] = "SELECT name, value, updated_at FROM cursors"
                          " WHERE name COLLATE \"C\" > $1 ORDER BY name COLLATE \"C\" LIMIT $2",
};
