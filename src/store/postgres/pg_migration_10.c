/* SPDX-License-Identifier: MIT
 *
 * PostgreSQL migration 10: lease_jobs2, lease_jobs under the reply budget
 * (--max-reply, er_fetch_params.max_bytes). It leases from each queue in
 * turn, as lease_jobs does, the candidates in fetch order while the bytes
 * used (p_used) plus their running total stays within p_cap; the first one
 * also when p_used is 0. A candidate's size is er_job_reply_bytes' rule
 * (core/job.h): the row's texts and twice its short strings, in bytes
 * (NULL as 0), plus p_fixed, which the server computes with
 * er_job_lease_fixed_bytes (the fixed part, the owner and the token it is
 * about to set): never below what core counts for the leased job. So a
 * fetch of many small jobs is one call, and no job is leased that the
 * reply would drop. The candidates past the budget (at most the queue's
 * take) are locked (FOR UPDATE SKIP LOCKED) until the fetch commits, not
 * leased: a concurrent fetch skips them for that long, as it does the
 * rows any fetch is choosing among. lease_jobs stays, unchanged, for servers of the
 * previous version during a rolling upgrade (docs/operations.md).
 */
#include "store/postgres/pg_int.h"

#define OCTETS(c) "coalesce(octet_length(" c "), 0)"
#define ROW_BYTES(w)                                                                       \
    "(" OCTETS(w ".payload") " + " OCTETS(w ".result") " + " OCTETS(w ".last_error")      \
    " + " OCTETS(w ".progress") " + " OCTETS(w ".custom") " + 2 * (" OCTETS(w ".id")      \
    " + " OCTETS(w ".queue") " + " OCTETS(w ".name") " + " OCTETS(w ".grp") " + "          \
    OCTETS(w ".trace_id") " + " OCTETS(w ".idempotency_key") "))"

const char er_pg_migration_10[] =
    "CREATE FUNCTION lease_jobs2(p_queues text[], p_caps bigint[], p_leases bigint[], p_worker text,\n"
    " p_max integer, p_now bigint, p_tokens text[], p_fixed bigint, p_used bigint, p_cap bigint)\n"
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
    "    sum(c.sz) OVER w AS run, row_number() OVER w AS k FROM (SELECT w.seq, w.priority,\n"
    "    w.run_at, " ROW_BYTES("w") " + p_fixed AS sz FROM jobs w\n"
    "    WHERE w.queue = p_queues[v_i] AND w.state = 1 ORDER BY w.priority DESC, w.run_at, w.seq\n"
    "    LIMIT v_take FOR UPDATE SKIP LOCKED) c\n"
    "    WINDOW w AS (ORDER BY c.priority DESC, c.run_at, c.seq ROWS UNBOUNDED PRECEDING)) b\n"
    "    WHERE v_bytes + b.run <= p_cap OR (b.k = 1 AND v_bytes = 0)) x\n"
    "   WHERE j.seq = x.seq RETURNING j.* LOOP\n"
    "   v_used := v_used + 1;\n"
    "   v_bytes := v_bytes + " ROW_BYTES("v_row") " + p_fixed;\n"
    "   RETURN NEXT v_row;\n"
    "  END LOOP;\n"
    " END LOOP;\n"
    "END $f$;\n";
