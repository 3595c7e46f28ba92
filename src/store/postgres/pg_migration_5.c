/* SPDX-License-Identifier: MIT
 *
 * PostgreSQL migration 5: tombstones. Retention keeps one row per deleted
 * finished job whose id a client gave (id, queue, state, finished_at), so
 * the id stays a duplicate for the dedup window (the servers' window, in
 * the limits row for the SQL functions). errand.enqueue, enqueue_job and
 * enqueue_bulk all run _enqueue, replaced here (CREATE OR REPLACE keeps
 * owners and grants) by migration 4's text (pg_enqueue_sql.h) with another
 * id block: a generated id is flagged (set_flags 256, core's
 * ER_FLAG_ID_GENERATED), and a client's id that a tombstone within the
 * window remembers changes nothing and is returned, as an existing job's
 * id is.
 */
#include "store/postgres/pg_enqueue_sql.h"
#include "store/postgres/pg_int.h"

const char er_pg_migration_5[] =
    "CREATE TABLE tombstones (\n"
    " id text PRIMARY KEY,\n"
    " queue text NOT NULL,\n"
    " state smallint NOT NULL,\n"
    " finished_at bigint NOT NULL);\n"
    "CREATE INDEX tombstones_finished ON tombstones (finished_at);\n"
    "ALTER TABLE limits ADD COLUMN dedup_window_ms bigint NOT NULL DEFAULT 2592000000;\n"
    "CREATE OR REPLACE FUNCTION _enqueue(queue text, job jsonb, at text) RETURNS text\n"
    ER_PG_ENQUEUE_HEAD
    /* the id: a generated one is flagged (set_flags 256); a given one that
     * a tombstone within the window remembers stores nothing */
    " IF v_id IS NULL THEN\n"
    "  v_id := lpad(to_hex(v_now), 12, '0') || substr(md5(gen_random_uuid()::text), 1, 14);\n"
    "  v_flags := v_flags | 256;\n"
    " ELSIF l.dedup_window_ms > 0 AND EXISTS (SELECT 1 FROM tombstones t WHERE t.id = v_id\n"
    "   AND t.finished_at > v_now - l.dedup_window_ms)\n"
    "  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = v_id) THEN\n"
    "  RETURN v_id; /* remembered by a tombstone: a duplicate, nothing changes */\n"
    " END IF;\n"
    ER_PG_ENQUEUE_TAIL;
