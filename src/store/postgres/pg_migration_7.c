/* SPDX-License-Identifier: MIT
 *
 * PostgreSQL migration 7: dashboard sessions (keyed by the SHA-256 of
 * their id, never the id) and the audit log, as SQLite's migration 6.
 * Both are shared by every node, so any node serves a session.
 */
#include "store/postgres/pg_int.h"

const char er_pg_migration_7[] =
    "CREATE TABLE sessions (\n"
    " hash text PRIMARY KEY,\n"
    " role integer NOT NULL,\n"
    " name text NOT NULL,\n"
    " csrf text NOT NULL,\n"
    " created_at bigint NOT NULL,\n"
    " expires_at bigint NOT NULL);\n"
    "CREATE INDEX sessions_expires ON sessions (expires_at);\n"
    "CREATE TABLE audit (\n"
    " seq bigserial PRIMARY KEY,\n"
    " at bigint NOT NULL,\n"
    " who text NOT NULL,\n"
    " action text NOT NULL,\n"
    " target text,\n"
    " count bigint NOT NULL);\n"
    "CREATE INDEX audit_at ON audit (at);\n";
