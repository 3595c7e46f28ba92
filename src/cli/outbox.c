/* SPDX-License-Identifier: MIT
 *
 * `errand outbox install --db URL [--notify]`: creates or migrates the
 * outbox tables (outbox_events, processed_messages, errand_outbox_schema)
 * in the application's PostgreSQL database (docs/outbox.md).
 */
#include "cli/cli.h"
#include "engine/outbox_schema.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: errand outbox install --db URL [--notify]\n"
    "\n"
    "Creates the outbox tables in the application's PostgreSQL database, or\n"
    "migrates them to this errand's version (safe to run again, and from\n"
    "several machines at once).\n"
    "\n"
    "options:\n"
    "  --db URL    postgres://USER:PASS@HOST:PORT/DB (default $ERRAND_OUTBOX_DB)\n"
    "  --notify    also install the trigger that wakes the relay on every insert\n"
    "\n"
    "exit status: 0 installed or already current, 1 database error, 2 usage\n";

int er_cli_outbox(int argc, char **argv)
{
    if (argc < 1 || strcmp(argv[0], "install") != 0) {
        bool help = argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0);
        fputs(usage, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    const char *db = getenv("ERRAND_OUTBOX_DB");
    bool notify = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--db") == 0 && i + 1 < argc) {
            db = argv[++i];
        } else if (strncmp(argv[i], "--db=", 5) == 0) {
            db = argv[i] + 5;
        } else if (strcmp(argv[i], "--notify") == 0) {
            notify = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        } else {
            fprintf(stderr, "errand outbox install: unknown argument '%s'\n%s", argv[i], usage);
            return 2;
        }
    }
    if (!db || !*db) {
        fprintf(stderr, "errand outbox install: --db URL is required\n");
        return 2;
    }
    if (strncmp(db, "postgres://", 11) != 0 && strncmp(db, "postgresql://", 13) != 0) {
        fprintf(stderr, "errand outbox install: --db must be a postgres:// URL\n");
        return 2;
    }
    er_error err = {0};
    PGconn *c = er_outbox_connect(db, "errand-outbox-install", &err);
    int from = 0;
    int rc = c ? er_outbox_install(c, notify, &from, &err) : -1;
    PQfinish(c);
    if (rc < 0) {
        fprintf(stderr, "errand outbox install: %s\n", err.message);
        return 1;
    }
    if (from == ER_OUTBOX_SCHEMA_VERSION)
        printf("outbox schema already at version %d%s\n", from,
               notify ? "; NOTIFY trigger installed" : "");
    else
        printf("outbox schema installed: version %d -> %d%s\n", from, ER_OUTBOX_SCHEMA_VERSION,
               notify ? ", with the NOTIFY trigger" : "");
    return 0;
}
