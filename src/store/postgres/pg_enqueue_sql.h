/* SPDX-License-Identifier: MIT
 *
 * The text of the PostgreSQL function _enqueue (behind errand.enqueue,
 * enqueue_job and enqueue_bulk) around the block that picks the job's id:
 * migration 4 created it with ER_PG_ENQUEUE_ID_V4, migration 5 replaced it
 * with its own id block (tombstones). Both migrations have shipped, so this
 * text never changes: a later change is a new migration with its own text.
 * Only pg_migration_4.c and pg_migration_5.c include this header.
 */
#ifndef ER_STORE_POSTGRES_PG_ENQUEUE_SQL_H
#define ER_STORE_POSTGRES_PG_ENQUEUE_SQL_H

/* From the signature's end to the last check (valid options in v_*). */
#define ER_PG_ENQUEUE_HEAD \
    " LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$\n" \
    "#variable_conflict use_variable\n" \
    "DECLARE\n" \
    " l limits;\n" \
    " v_now bigint := (extract(epoch FROM now()) * 1000)::bigint;\n" \
    " v jsonb; v_b jsonb; v_qd jsonb; v_qb jsonb; k text;\n" \
    " v_name text; v_payload text; v_id text; v_prio bigint; v_delay bigint; v_run bigint;\n" \
    " v_state integer; v_ma bigint; v_to bigint; v_grp text; v_trace text; v_idem text;\n" \
    " v_bt integer; v_bd bigint; v_bm bigint; v_bj double precision; v_given integer := 0;\n" \
    " g_bt integer; g_bd bigint; g_bm bigint; g_bj double precision;\n" \
    " v_flags integer := 0; v_n integer;\n" \
    "BEGIN\n" \
    " SELECT * INTO l FROM limits;\n" \
    " IF NOT FOUND THEN\n" \
    "  RAISE EXCEPTION '%.enqueue: no errand server has opened this schema yet', current_schema()\n" \
    "   USING ERRCODE = '55000';\n" \
    " END IF;\n" \
    " IF jsonb_typeof(job) IS DISTINCT FROM 'object' THEN\n" \
    "  PERFORM _raise(l, CASE WHEN at = '' THEN 'job' ELSE left(at, -1) END, 'a job must be a JSON object');\n" \
    " END IF;\n" \
    " k := _first_unknown(job, ARRAY['name','payload','id','priority','delay_ms','run_at','max_attempts',\n" \
    "  'backoff','timeout_ms','group','trace_id','idempotency_key']);\n" \
    " IF k IS NOT NULL THEN\n" \
    "  k := _cut(at || k, l.field_max);\n" \
    "  PERFORM _raise(l, k, k || ' is not a known field');\n" \
    " END IF;\n" \
    " IF queue IS NULL THEN PERFORM _raise(l, 'queue', 'queue is required'); END IF;\n" \
    " PERFORM _check_name(l, to_jsonb(queue), '', 'queue');\n" \
    " v := job -> 'name';\n" \
    " IF _absent(v) THEN PERFORM _raise(l, at || 'name', 'name is required'); END IF;\n" \
    " v_name := _check_name(l, v, at, 'name');\n" \
    " v_payload := coalesce((job -> 'payload')::text, '{}');\n" \
    " IF octet_length(v_payload) > l.payload_max THEN\n" \
    "  PERFORM _raise(l, at || 'payload', 'payload is ' || octet_length(v_payload) || ' bytes; the limit is '\n" \
    "   || l.payload_max || ' bytes', '54000');\n" \
    " END IF;\n" \
    " v := job -> 'id';\n" \
    " IF NOT _absent(v) THEN v_id := _check_id(l, v, at, 'id'); END IF;\n" \
    " v_prio := _check_int(l, job -> 'priority', at, 'priority', 0, l.priority_max);\n" \
    " IF v_prio IS NOT NULL THEN v_flags := v_flags | 8; END IF;\n" \
    " v_run := v_now;\n" \
    " IF NOT _absent(job -> 'delay_ms') AND NOT _absent(job -> 'run_at') THEN\n" \
    "  PERFORM _raise(l, at || 'run_at', 'give delay_ms or run_at, not both');\n" \
    " END IF;\n" \
    " v_delay := _check_int(l, job -> 'delay_ms', at, 'delay_ms', 0, l.delay_max_ms);\n" \
    " IF v_delay IS NOT NULL THEN\n" \
    "  v_run := v_now + v_delay;\n" \
    " ELSIF NOT _absent(job -> 'run_at') THEN\n" \
    "  v := job -> 'run_at';\n" \
    "  v_run := CASE WHEN jsonb_typeof(v) = 'string' THEN _time_ms(v #>> '{}') END;\n" \
    "  IF v_run IS NULL THEN\n" \
    "   PERFORM _raise(l, at || 'run_at', 'run_at must be an RFC 3339 time such as \"2026-11-30T02:00:00.000Z\"');\n" \
    "  END IF;\n" \
    "  IF v_run > v_now + l.delay_max_ms THEN\n" \
    "   PERFORM _raise(l, at || 'run_at', 'run_at must be at most ' || l.delay_max_ms / 86400000 || ' days ahead');\n" \
    "  END IF;\n" \
    "  v_run := greatest(v_run, v_now);\n" \
    " END IF;\n" \
    " v_state := CASE WHEN v_run > v_now THEN 0 ELSE 1 END;\n" \
    " v_ma := _check_int(l, job -> 'max_attempts', at, 'max_attempts', 1, l.max_attempts_max);\n" \
    " IF v_ma IS NOT NULL THEN v_flags := v_flags | 1; END IF;\n" \
    " v_b := job -> 'backoff';\n" \
    " IF NOT _absent(v_b) THEN\n" \
    "  v_flags := v_flags | 2;\n" \
    "  IF jsonb_typeof(v_b) <> 'object' THEN\n" \
    "   PERFORM _raise(l, at || 'backoff', 'backoff must be an object {type, delay_ms, max_delay_ms, jitter}');\n" \
    "  END IF;\n" \
    "  k := _first_unknown(v_b, ARRAY['type','delay_ms','max_delay_ms','jitter']);\n" \
    "  IF k IS NOT NULL THEN\n" \
    "   k := _cut('backoff.' || k, l.field_max);\n" \
    "   PERFORM _raise(l, at || k, k || ' is not a known field');\n" \
    "  END IF;\n" \
    "  v := v_b -> 'type';\n" \
    "  IF NOT _absent(v) THEN\n" \
    "   g_bt := CASE WHEN jsonb_typeof(v) = 'string'\n" \
    "    THEN array_position(ARRAY['exponential','fixed','capped'], v #>> '{}') - 1 END;\n" \
    "   IF g_bt IS NULL THEN\n" \
    "    PERFORM _raise(l, at || 'backoff.type', 'backoff.type must be \"exponential\", \"fixed\" or \"capped\"');\n" \
    "   END IF;\n" \
    "   v_given := v_given | 1;\n" \
    "  END IF;\n" \
    "  g_bd := _check_int(l, v_b -> 'delay_ms', at, 'backoff.delay_ms', 0, l.delay_max_ms);\n" \
    "  IF g_bd IS NOT NULL THEN v_given := v_given | 2; END IF;\n" \
    "  g_bm := _check_int(l, v_b -> 'max_delay_ms', at, 'backoff.max_delay_ms', 0, l.delay_max_ms);\n" \
    "  IF g_bm IS NOT NULL THEN v_given := v_given | 4; END IF;\n" \
    "  v := v_b -> 'jitter';\n" \
    "  IF NOT _absent(v) THEN\n" \
    "   IF jsonb_typeof(v) = 'number' THEN g_bj := (v #>> '{}')::double precision; END IF;\n" \
    "   IF g_bj IS NULL OR NOT (g_bj BETWEEN 0 AND 1) THEN\n" \
    "    PERFORM _raise(l, at || 'backoff.jitter', 'backoff.jitter must be a number 0..1');\n" \
    "   END IF;\n" \
    "   v_given := v_given | 8;\n" \
    "  END IF;\n" \
    "  IF g_bd IS NOT NULL AND g_bm IS NOT NULL AND g_bm < g_bd THEN\n" \
    "   PERFORM _raise(l, at || 'backoff.max_delay_ms', 'backoff.max_delay_ms must be >= delay_ms');\n" \
    "  END IF;\n" \
    " END IF;\n" \
    " v_to := _check_int(l, job -> 'timeout_ms', at, 'timeout_ms', 1, l.timeout_max_ms);\n" \
    " IF v_to IS NOT NULL THEN v_flags := v_flags | 4; END IF;\n" \
    " v := job -> 'group';\n" \
    " IF NOT _absent(v) THEN v_grp := _check_name(l, v, at, 'group'); END IF;\n" \
    " v := job -> 'trace_id';\n" \
    " IF NOT _absent(v) THEN v_trace := _check_id(l, v, at, 'trace_id'); END IF;\n" \
    " v := job -> 'idempotency_key';\n" \
    " IF NOT _absent(v) THEN v_idem := _check_id(l, v, at, 'idempotency_key'); END IF;\n" \
    " /* valid: the queue's defaults, then the server's, fill what is unset */\n"

/* Migration 4's id: the given one, else a generated one. */
#define ER_PG_ENQUEUE_ID_V4 \
    " IF v_id IS NULL THEN\n" \
    "  v_id := lpad(to_hex(v_now), 12, '0') || substr(md5(gen_random_uuid()::text), 1, 14);\n" \
    " END IF;\n"

/* The defaults, the insert and the wake-up, to the function's end. */
#define ER_PG_ENQUEUE_TAIL \
    " v_idem := coalesce(v_idem, v_id);\n" \
    " SELECT q.settings::jsonb -> 'defaults' INTO v_qd FROM queues q WHERE q.name = queue;\n" \
    " v_qd := CASE WHEN jsonb_typeof(v_qd) = 'object' THEN v_qd ELSE '{}' END;\n" \
    " v_prio := coalesce(v_prio, (v_qd ->> 'priority')::bigint, l.default_priority);\n" \
    " v_ma := coalesce(v_ma, (v_qd ->> 'max_attempts')::bigint, l.default_max_attempts);\n" \
    " v_to := coalesce(v_to, (v_qd ->> 'timeout_ms')::bigint, l.default_timeout_ms);\n" \
    " v_qb := v_qd -> 'backoff';\n" \
    " IF jsonb_typeof(v_qb) = 'object' THEN\n" \
    "  v_bt := coalesce(array_position(ARRAY['exponential','fixed','capped'], v_qb ->> 'type') - 1, 0);\n" \
    "  v_bd := (v_qb ->> 'delay_ms')::bigint;\n" \
    "  v_bm := (v_qb ->> 'max_delay_ms')::bigint;\n" \
    "  v_bj := (v_qb ->> 'jitter')::double precision;\n" \
    " ELSE\n" \
    "  v_bt := l.default_backoff_type; v_bd := l.default_backoff_delay_ms;\n" \
    "  v_bm := l.default_backoff_max_ms; v_bj := l.default_backoff_jitter;\n" \
    " END IF;\n" \
    " IF v_given & 1 <> 0 THEN v_bt := g_bt; END IF;\n" \
    " IF v_given & 2 <> 0 THEN v_bd := g_bd; END IF;\n" \
    " IF v_given & 4 <> 0 THEN v_bm := g_bm; END IF;\n" \
    " IF v_given & 8 <> 0 THEN v_bj := g_bj; END IF;\n" \
    " IF v_bm < v_bd AND v_given & 4 = 0 THEN v_bm := v_bd; END IF;\n" \
    " v_flags := v_flags | (v_given << 4);\n" \
    " INSERT INTO jobs (id, queue, name, payload, state, priority, grp, run_at, max_attempts,\n" \
    "  backoff_type, backoff_delay_ms, backoff_max_ms, backoff_jitter, timeout_ms, trace_id,\n" \
    "  idempotency_key, created_at, updated_at, set_flags)\n" \
    " VALUES (v_id, queue, v_name, v_payload, v_state, v_prio, v_grp, v_run, v_ma, v_bt, v_bd, v_bm,\n" \
    "  v_bj, v_to, v_trace, v_idem, v_now, v_now, v_flags)\n" \
    " ON CONFLICT ON CONSTRAINT jobs_id_key DO NOTHING;\n" \
    " GET DIAGNOSTICS v_n = ROW_COUNT;\n" \
    " IF v_n > 0 THEN\n" \
    "  INSERT INTO queues (name) VALUES (queue) ON CONFLICT ON CONSTRAINT queues_pkey DO NOTHING;\n" \
    "  IF v_state = 1 THEN PERFORM notify_ready(queue); END IF;\n" \
    " END IF;\n" \
    " RETURN v_id;\n" \
    "END $f$;\n"

#endif
