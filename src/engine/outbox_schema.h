/* SPDX-License-Identifier: MIT
 *
 * The outbox tables in the application's PostgreSQL database
 * (docs/outbox.md): outbox_events, processed_messages and the version
 * table errand_outbox_schema, installed and migrated by numbered
 * migrations like errand's own store.
 */
#ifndef ER_ENGINE_OUTBOX_SCHEMA_H
#define ER_ENGINE_OUTBOX_SCHEMA_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "util/err.h"

/* The schema version this errand reads and writes. */
#define ER_OUTBOX_SCHEMA_VERSION 1

/* Creates or migrates the tables on conn, in one transaction under an
 * advisory lock (several installers at once are safe). With notify, also
 * (re)creates the trigger that NOTIFYs "errand_outbox" on every insert.
 * *from: the version found (0: none). Refuses a newer version than this
 * errand knows. Blocking. */
int er_outbox_install(PGconn *conn, bool notify, int *from, er_error *err);

/* The installed version (0: none), or a negative code. Blocking. */
int er_outbox_schema_version(PGconn *conn, er_error *err);

/* Connects with a connect timeout (the URL's own wins) and an
 * application_name; NULL and *err on failure (the password never appears
 * in the message). Blocking. */
PGconn *er_outbox_connect(const char *url, const char *app_name, er_error *err);

#endif
