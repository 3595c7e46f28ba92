/* SPDX-License-Identifier: MIT
 *
 * The differential enqueue corpus (enqueue_corpus.jsonl, written by
 * gen_enqueue_corpus.py): every document goes through the three enqueue
 * paths, which must give the same verdict, the one the corpus expects:
 *   - the HTTP frontend's jansson reader and er_job_validate;
 *   - its fast text reader (for the documents it reads), same verdict and
 *     same error message;
 *   - PostgreSQL's errand.enqueue_job, whose error names the field in its
 *     COLUMN, with the same message (after the "<schema>.enqueue: " prefix).
 * An accepted document gives the same job options on both sides. The lines
 * where jsonb normalisation makes PostgreSQL differ say so ("pg" with an
 * "exception"); the test prints them. Needs $ERRAND_TEST_PG_URL.
 */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/http/job_json.h"
#include "store/postgres/postgres.h"
#include "store/store.h"

#include "pg_test_url.h"

#define PAYLOAD_MAX 1024
#define QUEUE "corpus"

static char g_schema[64];

/* One corpus line. */
typedef struct doc {
    char *text;
    size_t len;
    const char *expect, *pg, *exception, *pg_message, *why;
} doc;

static size_t unhex(const char *hex, char *out)
{
    size_t n = 0;
    for (; hex[0] && hex[1]; hex += 2) {
        unsigned v;
        sscanf(hex, "%2x", &v);
        out[n++] = (char)v;
    }
    return n;
}

/* ---- the C paths ---- */

/* The HTTP frontend's verdict: "body" when the text is not a JSON object,
 * else er_job_validate's ("ok" or the field); *job gets the job with the
 * server's defaults applied when accepted. */
static void http_verdict(const doc *d, char *out, er_error *err, er_job *job)
{
    er_job_init(job);
    er_error_clear(err);
    json_t *o = json_loadb(d->text, d->len, JSON_REJECT_DUPLICATES, NULL);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        snprintf(out, ER_FIELD_MAX, "body");
        return;
    }
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_job_limits lim = {.payload_max = PAYLOAD_MAX};
    int rc = er_http_job_from_json(o, QUEUE, &lim, er_now_ms(), &r, job, err);
    json_decref(o);
    if (rc < 0) {
        snprintf(out, ER_FIELD_MAX, "%s", err->field);
        return;
    }
    er_job_defaults srv;
    er_job_defaults_server(&srv);
    er_job_apply_defaults(job, NULL, &srv);
    snprintf(out, ER_FIELD_MAX, "ok");
}

/* The fast reader, for the documents it reads: the jansson path's verdict
 * and message. Returns whether it read the document. */
static bool fast_agrees(const doc *d, const char *verdict, const er_error *err)
{
    er_job_spec sp;
    if (!er_http_job_spec_from_text(d->text, d->len, QUEUE, &sp))
        return false;
    er_rand r;
    er_rand_init_seeded(&r, 1);
    er_job_limits lim = {.payload_max = PAYLOAD_MAX};
    er_job job;
    er_error e = {0};
    int rc = er_job_validate(&sp, &lim, er_now_ms(), &r, &job, &e);
    er_job_spec_fini(&sp);
    if (rc == 0) {
        cr_expect_str_eq(verdict, "ok", "fast path accepts %s (%s)", d->text, d->why);
        er_job_fini(&job);
    } else {
        cr_expect_str_eq(e.field, verdict, "fast path names %s for %s (%s)", e.field, d->text,
                         d->why);
        cr_expect_str_eq(e.message, err->message, "fast path message for %s", d->text);
    }
    return true;
}

/* ---- PostgreSQL ---- */

typedef struct pg_result {
    char verdict[ER_FIELD_MAX + 16];
    char message[512];
    /* the stored job, when accepted */
    char id[256], idem[256], grp[256], trace[256], payload[4096];
    bool has_grp, has_trace;
    long long priority, max_attempts, btype, bdelay, bmax, timeout, state, flags;
    double bjitter;
} pg_result;

static void pg_verdict(PGconn *c, const doc *d, pg_result *out)
{
    memset(out, 0, sizeof *out);
    PQclear(PQexec(c, "BEGIN"));
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT %s.enqueue_job('" QUEUE "', $1::text::jsonb)", g_schema);
    const char *vals[1] = {d->text};
    PGresult *r = PQexecParams(c, sql, 1, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
        snprintf(out->verdict, sizeof out->verdict, "ok");
        char q[512];
        char *id = PQescapeLiteral(c, PQgetvalue(r, 0, 0), strlen(PQgetvalue(r, 0, 0)));
        snprintf(q, sizeof q,
                 "SELECT id, idempotency_key, grp, trace_id, payload, priority, max_attempts,"
                 " backoff_type, backoff_delay_ms, backoff_max_ms, backoff_jitter, timeout_ms,"
                 " state, set_flags FROM %s.jobs WHERE id = %s",
                 g_schema, id);
        PQfreemem(id);
        PGresult *j = PQexec(c, q);
        cr_assert_eq(PQntuples(j), 1, "%s", PQresultErrorMessage(j));
        snprintf(out->id, sizeof out->id, "%s", PQgetvalue(j, 0, 0));
        snprintf(out->idem, sizeof out->idem, "%s", PQgetvalue(j, 0, 1));
        out->has_grp = !PQgetisnull(j, 0, 2);
        snprintf(out->grp, sizeof out->grp, "%s", PQgetvalue(j, 0, 2));
        out->has_trace = !PQgetisnull(j, 0, 3);
        snprintf(out->trace, sizeof out->trace, "%s", PQgetvalue(j, 0, 3));
        snprintf(out->payload, sizeof out->payload, "%s", PQgetvalue(j, 0, 4));
        long long *nums[] = {&out->priority, &out->max_attempts, &out->btype, &out->bdelay,
                             &out->bmax};
        for (int i = 0; i < 5; i++)
            *nums[i] = atoll(PQgetvalue(j, 0, 5 + i));
        out->bjitter = atof(PQgetvalue(j, 0, 10));
        out->timeout = atoll(PQgetvalue(j, 0, 11));
        out->state = atoll(PQgetvalue(j, 0, 12));
        out->flags = atoll(PQgetvalue(j, 0, 13));
        PQclear(j);
    } else {
        const char *col = PQresultErrorField(r, PG_DIAG_COLUMN_NAME);
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
        if (col) {
            snprintf(out->verdict, sizeof out->verdict, "%s", col);
        } else if (state && strncmp(state, "22", 2) == 0) {
            /* the text is not jsonb at all: the cast refused it */
            snprintf(out->verdict, sizeof out->verdict, "body");
        } else {
            cr_assert_fail("errand.enqueue_job failed without a field for %.*s: %s %s",
                           (int)d->len, d->text, state ? state : "", msg ? msg : "");
        }
        char prefix[80];
        snprintf(prefix, sizeof prefix, "%s.enqueue: ", g_schema);
        if (msg && strncmp(msg, prefix, strlen(prefix)) == 0)
            msg += strlen(prefix);
        snprintf(out->message, sizeof out->message, "%s", msg ? msg : "");
    }
    PQclear(r);
    PQclear(PQexec(c, "ROLLBACK"));
}

static bool json_text_equal(const char *a, const char *b)
{
    json_t *x = json_loads(a, JSON_DECODE_ANY, NULL), *y = json_loads(b, JSON_DECODE_ANY, NULL);
    bool eq = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

/* The options the two paths gave an accepted document. */
static void same_job(const doc *d, const er_job *j, const pg_result *p)
{
    const char *t = d->text;
    cr_expect_eq(p->priority, j->priority, "priority of %s", t);
    cr_expect_eq(p->max_attempts, j->max_attempts, "max_attempts of %s", t);
    cr_expect_eq(p->btype, (long long)j->backoff.type, "backoff.type of %s", t);
    cr_expect_eq(p->bdelay, j->backoff.delay_ms, "backoff.delay_ms of %s", t);
    cr_expect_eq(p->bmax, j->backoff.max_delay_ms, "backoff.max_delay_ms of %s", t);
    cr_expect(p->bjitter == j->backoff.jitter, "backoff.jitter of %s: %g vs %g", t, p->bjitter,
              j->backoff.jitter);
    cr_expect_eq(p->timeout, j->timeout_ms, "timeout_ms of %s", t);
    cr_expect_eq(p->state, (long long)j->state, "state of %s", t);
    cr_expect_eq(p->flags, er_job_set_flags(j), "set_flags of %s", t);
    cr_expect_eq(p->has_grp, j->group != NULL, "group of %s", t);
    if (j->group)
        cr_expect_str_eq(p->grp, j->group, "group of %s", t);
    cr_expect_eq(p->has_trace, j->trace_id != NULL, "trace_id of %s", t);
    if (j->trace_id)
        cr_expect_str_eq(p->trace, j->trace_id, "trace_id of %s", t);
    /* a generated id differs; a given one and the key it implies do not */
    if (strcmp(j->idempotency_key, j->id) == 0)
        cr_expect_str_eq(p->idem, p->id, "idempotency_key of %s", t);
    else
        cr_expect_str_eq(p->idem, j->idempotency_key, "idempotency_key of %s", t);
    cr_expect(json_text_equal(p->payload, j->payload), "payload of %s: %s vs %s", t, p->payload,
              j->payload);
}

Test(corpus, every_document_gets_the_same_verdict_on_every_path, .timeout = 240)
{
    /* a fresh schema, migrated and given this test's limits by a store open */
    snprintf(g_schema, sizeof g_schema, "corpus_%ld_%u", (long)getpid(),
             (unsigned)(er_now_ms() % 100000));
    const char *b = base_url();
    char url[1024];
    snprintf(url, sizeof url, "%s%cschema=%s", b, strchr(b, '?') ? '&' : '?', g_schema);
    er_store_options opt = {.limits = {.payload_max = PAYLOAD_MAX}};
    er_store *st = NULL;
    er_error err = {0};
    cr_assert_eq(er_postgres_ops.open(url, &opt, &st, &err), 0, "%s", err.message);
    er_postgres_ops.close(st);
    er_postgres_pool_drain();
    PGconn *c = PQconnectdb(b);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));

    FILE *f = fopen(ER_CORPUS, "r");
    cr_assert_not_null(f, "cannot open %s", ER_CORPUS);
    char *line = NULL;
    size_t cap = 0, ndocs = 0, nfast = 0, nexcept = 0, nmsg = 0, nok = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_t *row = json_loadb(line, (size_t)n, 0, NULL);
        cr_assert_not_null(row, "bad corpus line %zu", ndocs + 1);
        doc d = {0};
        const char *hex = json_string_value(json_object_get(row, "doc_hex"));
        if (hex) {
            d.text = malloc(strlen(hex) / 2 + 1);
            d.len = unhex(hex, d.text);
        } else {
            d.len = json_string_length(json_object_get(row, "doc"));
            d.text = malloc(d.len + 1);
            memcpy(d.text, json_string_value(json_object_get(row, "doc")), d.len);
        }
        d.text[d.len] = '\0';
        d.expect = json_string_value(json_object_get(row, "expect"));
        d.pg = json_string_value(json_object_get(row, "pg"));
        d.exception = json_string_value(json_object_get(row, "exception"));
        d.pg_message = json_string_value(json_object_get(row, "pg_message"));
        d.why = json_string_value(json_object_get(row, "why"));
        cr_assert(d.expect && d.why, "line %zu lacks expect or why", ndocs + 1);
        cr_assert(!d.pg || d.exception, "line %zu: a pg verdict needs its exception", ndocs + 1);
        ndocs++;

        char verdict[ER_FIELD_MAX];
        er_job job;
        http_verdict(&d, verdict, &err, &job);
        cr_expect_str_eq(verdict, d.expect, "HTTP gives %s for %s (%s): %s", verdict, d.text,
                         d.why, err.message);
        nfast += fast_agrees(&d, verdict, &err);

        pg_result p;
        pg_verdict(c, &d, &p);
        const char *want = d.pg ? d.pg : d.expect;
        cr_expect_str_eq(p.verdict, want, "errand.enqueue_job gives %s for %s (%s): %s",
                         p.verdict, d.text, d.why, p.message);
        if (d.pg) {
            nexcept++;
            cr_log_info("exception: %s -> HTTP %s, PostgreSQL %s: %s", d.text, d.expect, d.pg,
                        d.exception);
        } else if (strcmp(verdict, "ok") == 0 && strcmp(p.verdict, "ok") == 0) {
            same_job(&d, &job, &p);
            nok++;
        } else if (strcmp(verdict, "body") != 0 && !d.pg_message) {
            cr_expect_str_eq(p.message, err.message, "messages differ for %s", d.text);
            nmsg++;
        }
        er_job_fini(&job);
        free(d.text);
        json_decref(row);
    }
    free(line);
    fclose(f);
    cr_log_info("%zu documents: %zu read by the fast path, %zu accepted with the same job on "
                "both sides, %zu refused with the same message, %zu listed exceptions",
                ndocs, nfast, nok, nmsg, nexcept);
    cr_assert_geq(ndocs, 150, "the corpus holds at least 150 documents");

    char drop[128];
    snprintf(drop, sizeof drop, "DROP SCHEMA %s CASCADE", g_schema);
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    PQclear(PQexec(c, drop));
    PQfinish(c);
}
