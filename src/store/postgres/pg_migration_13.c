/* SPDX-License-Identifier: MIT
 *
 * PostgreSQL migration 13: drops the index jobs_waiting, which every
 * enqueued job entered beside jobs_ungrouped or jobs_grouped (one B-tree
 * insert a job fewer), and replaces in place (same signatures, owners
 * and grants) the three fetch functions that read it: lease_jobs2 (this
 * version's and the previous one's), lease_jobs and fetch_jobs (older
 * servers'). Each now takes a queue's waiting jobs in fetch order from
 * jobs_ungrouped and jobs_grouped, the first v_take of each merged, so it
 * leases the same jobs as before: a queue the server's planner does not
 * handle has no grouped waiting jobs, and its second probe finds nothing.
 */
#include "store/postgres/pg_int.h"

#define OCTETS(c) "coalesce(octet_length(" c "), 0)"
#define ROW_BYTES(w)                                                                       \
    "(" OCTETS(w ".payload") " + " OCTETS(w ".result") " + " OCTETS(w ".last_error")      \
    " + " OCTETS(w ".progress") " + " OCTETS(w ".custom") " + 2 * (" OCTETS(w ".id")      \
    " + " OCTETS(w ".queue") " + " OCTETS(w ".name") " + " OCTETS(w ".grp") " + "          \
    OCTETS(w ".trace_id") " + " OCTETS(w ".idempotency_key") "))"

/* The first n waiting jobs of queue q in fetch order, locked (SKIP
 * LOCKED), with columns cols (of w; priority, run_at and seq among them):
 * n from each index, the first n of both. A candidate of one index past
 * the merged n stays locked, not leased, until the fetch commits. */
#define WAITING(cols, q, n)                                                                \
    "(SELECT u.* FROM (SELECT * FROM (SELECT " cols " FROM jobs w WHERE w.queue = " q      \
    " AND w.state = 1 AND w.grp IS NULL ORDER BY w.priority DESC, w.run_at, w.seq LIMIT " n \
    " FOR UPDATE SKIP LOCKED) a UNION ALL SELECT * FROM (SELECT " cols " FROM jobs w"      \
    " WHERE w.queue = " q " AND w.state = 1 AND w.grp IS NOT NULL"                          \
    " ORDER BY w.priority DESC, w.run_at, w.seq LIMIT " n " FOR UPDATE SKIP LOCKED) b) u"   \
    " ORDER BY u.priority DESC, u.run_at, u.seq LIMIT " n ")"

const char er_pg_migration_13[] =
    "DROP INDEX jobs_waiting;\n"
    /* migration 10's, but for WAITING */
    "CREATE OR REPLACE FUNCTION lease_jobs2(p_queues text[], p_caps bigint[], p_leases bigint[],\n"
    " p_worker text, p_max integer, p_now bigint, p_tokens text[], p_fixed bigint, p_used bigint,\n"
    " p_cap bigint)\n"
    " RETURNS SETOF jobs LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$\n"
    "DECLARE v_i integer; v_take bigint; v_used integer := 0; v_bytes bigint := p_used;\n"
    " v_row jobs;\n"
    "BEGIN\n"
    " FOR v_i IN 1 .. coalesce(array_length(p_queues, 1), 0) LOOP\n"
    "  EXIT WHEN v_used >= p_max OR (v_bytes >= p_cap AND v_bytes > 0);\n"
    "  v_take := least(p_caps[v_i], p_max - v_used);\n"
    "  CONTINUE WHEN v_take <= 0;\n"
    "  FOR v_row IN UPDATE jobs j SET state = 2, attempts = j.attempts + 1,\n"
    "   started = j.started + 1, lease_owner = p_worker, lease_token = p_tokens[v_used + x.rn],\n"
    "   lease_expires_at = p_now + p_leases[v_i], started_at = p_now, updated_at = p_now\n"
    "   FROM (SELECT b.seq, b.k AS rn FROM (SELECT c.seq,\n"
    "    sum(c.sz) OVER w AS run, row_number() OVER w AS k FROM\n"
    "    " WAITING("w.seq, w.priority, w.run_at, " ROW_BYTES("w") " + p_fixed AS sz",
                   "p_queues[v_i]", "v_take") " c\n"
    "    WINDOW w AS (ORDER BY c.priority DESC, c.run_at, c.seq ROWS UNBOUNDED PRECEDING)) b\n"
    "    WHERE v_bytes + b.run <= p_cap OR (b.k = 1 AND v_bytes = 0)) x\n"
    "   WHERE j.seq = x.seq RETURNING j.* LOOP\n"
    "   v_used := v_used + 1;\n"
    "   v_bytes := v_bytes + " ROW_BYTES("v_row") " + p_fixed;\n"
    "   RETURN NEXT v_row;\n"
    "  END LOOP;\n"
    " END LOOP;\n"
    "END $f$;\n"
    /* migration 4's, but for WAITING */
    "CREATE OR REPLACE FUNCTION lease_jobs(p_queues text[], p_caps bigint[], p_leases bigint[],\n"
    " p_worker text, p_max integer, p_now bigint, p_tokens text[])\n"
    " RETURNS SETOF jobs LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$\n"
    "DECLARE v_i integer; v_take bigint; v_got integer; v_used integer := 0;\n"
    "BEGIN\n"
    " FOR v_i IN 1 .. coalesce(array_length(p_queues, 1), 0) LOOP\n"
    "  EXIT WHEN v_used >= p_max;\n"
    "  v_take := least(p_caps[v_i], p_max - v_used);\n"
    "  CONTINUE WHEN v_take <= 0;\n"
    "  RETURN QUERY UPDATE jobs j SET state = 2, attempts = j.attempts + 1,\n"
    "   started = j.started + 1, lease_owner = p_worker, lease_token = p_tokens[v_used + x.rn],\n"
    "   lease_expires_at = p_now + p_leases[v_i], started_at = p_now, updated_at = p_now\n"
    "   FROM (SELECT s.seq, row_number() OVER () AS rn FROM\n"
    "    " WAITING("w.seq, w.priority, w.run_at", "p_queues[v_i]", "v_take") " s) x\n"
    "   WHERE j.seq = x.seq RETURNING j.*;\n"
    "  GET DIAGNOSTICS v_got = ROW_COUNT;\n"
    "  v_used := v_used + v_got;\n"
    " END LOOP;\n"
    "END $f$;\n"
    /* migration 1's, but for WAITING */
    "CREATE OR REPLACE FUNCTION fetch_jobs(p_queues text[], p_worker text, p_max integer,\n"
    " p_lease bigint, p_now bigint, p_tokens text[], p_default_lease bigint)\n"
    " RETURNS SETOF jobs LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$\n"
    "DECLARE v_q text; v_r record; v_have boolean; v_take integer; v_got integer;\n"
    " v_used integer := 0; v_lease bigint; v_active bigint;\n"
    "BEGIN\n"
    " FOREACH v_q IN ARRAY p_queues LOOP\n"
    "  EXIT WHEN v_used >= p_max;\n"
    "  SELECT q.paused, q.throttled_until, q.concurrency, q.lease_ms INTO v_r\n"
    "   FROM queues q WHERE q.name = v_q;\n"
    "  v_have := FOUND;\n"
    "  CONTINUE WHEN v_have AND (v_r.paused OR v_r.throttled_until > p_now);\n"
    "  v_take := p_max - v_used;\n"
    "  v_lease := CASE WHEN p_lease > 0 THEN p_lease\n"
    "   WHEN v_have AND v_r.lease_ms > 0 THEN v_r.lease_ms ELSE p_default_lease END;\n"
    "  IF v_have AND v_r.concurrency > 0 THEN\n"
    "   PERFORM 1 FROM queues q WHERE q.name = v_q FOR UPDATE;\n"
    "   SELECT count(*) INTO v_active FROM jobs j WHERE j.queue = v_q AND j.state = 2;\n"
    "   CONTINUE WHEN v_active >= v_r.concurrency;\n"
    "   v_take := least(v_take, v_r.concurrency - v_active);\n"
    "  END IF;\n"
    "  RETURN QUERY UPDATE jobs j SET state = 2, attempts = j.attempts + 1,\n"
    "   started = j.started + 1, lease_owner = p_worker, lease_token = p_tokens[v_used + x.rn],\n"
    "   lease_expires_at = p_now + v_lease, started_at = p_now, updated_at = p_now\n"
    "   FROM (SELECT s.seq, row_number() OVER () AS rn FROM\n"
    "    " WAITING("w.seq, w.priority, w.run_at", "v_q", "v_take") " s) x\n"
    "   WHERE j.seq = x.seq RETURNING j.*;\n"
    "  GET DIAGNOSTICS v_got = ROW_COUNT;\n"
    "  v_used := v_used + v_got;\n"
    " END LOOP;\n"
    "END $f$;\n";
