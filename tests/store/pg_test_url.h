/* SPDX-License-Identifier: MIT
 *
 * The PostgreSQL server of the store tests: $ERRAND_TEST_PG_URL. Without
 * it a test fails, unless ERRAND_TEST_PG_SKIP=1 (then it is skipped).
 * Include after <criterion/criterion.h>.
 */
#ifndef ER_TESTS_PG_TEST_URL_H
#define ER_TESTS_PG_TEST_URL_H

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline const char *base_url(void)
{
    const char *u = getenv("ERRAND_TEST_PG_URL");
    if (!u || !*u) {
        const char *skip = getenv("ERRAND_TEST_PG_SKIP");
        if (skip && strcmp(skip, "1") == 0)
            cr_skip_test("ERRAND_TEST_PG_URL is not set and ERRAND_TEST_PG_SKIP=1");
        cr_assert_fail("ERRAND_TEST_PG_URL is not set: start a server with `scripts/pg start` "
                       "and export ERRAND_TEST_PG_URL=$(scripts/pg url), or run scripts/test; "
                       "set ERRAND_TEST_PG_SKIP=1 to skip the PostgreSQL tests");
    }
    return u;
}

/* Drops a test's schema (and everything in it), quietly. */
static inline void pg_test_drop_schema(const char *schema)
{
    const char *u = getenv("ERRAND_TEST_PG_URL");
    if (!u || !*u || !schema[0])
        return;
    PGconn *c = PQconnectdb(u);
    char q[128];
    snprintf(q, sizeof q, "DROP SCHEMA IF EXISTS %s CASCADE", schema);
    if (PQstatus(c) == CONNECTION_OK) {
        PQclear(PQexec(c, "SET client_min_messages = warning"));
        PQclear(PQexec(c, q));
    }
    PQfinish(c);
}

#endif
