/* SPDX-License-Identifier: MIT
 *
 * The shop's operations handlers: messages (the critical, default and bulk
 * queues: one-time codes, receipts, newsletters) sent to the mail service
 * with the job's idempotency key, and maintenance (the nightly outbox
 * clean-up and the cursor-based daily sales roll-up, both ticked by
 * errand schedulers). Both are safe to run twice.
 */
#include "handlers.h"

#include "shop.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int shop_handle_message(errand_job *job, void *user)
{
    (void)user;
    char url[512], key[300];
    snprintf(url, sizeof url, "%s/send", shop_env("MAIL_URL", "http://127.0.0.1:7503"));
    snprintf(key, sizeof key, "Idempotency-Key: %s", errand_job_idempotency_key(job));
    shop_http h;
    if (shop_http_call("POST", url, errand_job_payload(job), key, NULL, 5000, &h) < 0)
        return errand_job_fail_transient(job, "out of memory"), 0;
    if (h.status >= 200 && h.status < 300) {
        shop_http_free(&h);
        return errand_job_complete(job, NULL), 0;
    }
    int cls = ERRAND_CLASS_TRANSIENT;
    long long delay = 0;
    errand_error_from_http(h.status, h.retry_after[0] ? h.retry_after : NULL, now_ms(), &cls,
                           &delay);
    char msg[200];
    snprintf(msg, sizeof msg, "mail: HTTP %ld", h.status);
    shop_http_free(&h);
    if (cls == ERRAND_CLASS_PERMANENT)
        errand_job_fail_permanent(job, msg);
    else if (cls == ERRAND_CLASS_THROTTLED)
        errand_job_throttled(job, (long)delay);
    else if (cls == ERRAND_CLASS_RETRY_LATER)
        errand_job_retry_later(job, (long)delay);
    else
        errand_job_fail_transient(job, msg);
    return 0;
}

/* Deletes published outbox rows older than the payload's older_than_days
 * (default 7), 1,000 per statement so no statement holds locks for long. */
static int outbox_cleanup(errand_job *job, PGconn *db)
{
    json_t *p = json_loads(errand_job_payload(job), 0, NULL);
    json_int_t days = json_integer_value(json_object_get(p, "older_than_days"));
    json_decref(p);
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)(days > 0 ? days : 7));
    const char *params[] = {d};
    long total = 0;
    for (;;) {
        PGresult *r =
            PQexecParams(db,
                         "DELETE FROM outbox_events WHERE id IN (SELECT id FROM outbox_events"
                         " WHERE published_at < now() - make_interval(days => $1::int) LIMIT 1000)",
                         1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            PQclear(r);
            return errand_job_fail_transient(job, PQerrorMessage(db)), 0;
        }
        long n = strtol(PQcmdTuples(r), NULL, 10);
        PQclear(r);
        total += n;
        if (n < 1000 || errand_job_should_stop(job))
            break;
    }
    char result[64];
    snprintf(result, sizeof result, "{\"deleted\":%ld}", total);
    return errand_job_complete(job, result), 0;
}

/* Rolls up every whole day (in SHOP_TZ) after the cursor shop.daily-sales
 * and before today, oldest first, moving the cursor with compare-and-set
 * after each. A day's row is recomputed whole, so a second run rewrites the
 * same numbers; after downtime the next run catches up by itself. */
static int rollup(errand_job *job, PGconn *db)
{
    errand_client *c = NULL;
    if (errand_client_new(shop_env("ERRAND_URL", "http://127.0.0.1:7400"), getenv("ERRAND_TOKEN"),
                          &c) < 0)
        return errand_job_fail_transient(job, "out of memory"), 0;
    const char *path = "/v1/cursors/shop.daily-sales";
    long st = 0;
    char *body = NULL, last[16] = "";
    if (errand_request(c, "GET", path, NULL, &st, &body) < 0 || (st != 200 && st != 404)) {
        errand_free(body);
        errand_client_free(c);
        return errand_job_fail_transient(job, "cannot read the cursor"), 0;
    }
    json_t *j = json_loads(body, 0, NULL);
    const char *v = st == 200 ? json_string_value(json_object_get(j, "value")) : NULL;
    snprintf(last, sizeof last, "%s", v ? v : "");
    json_decref(j);
    errand_free(body);
    const char *tz = shop_env("SHOP_TZ", "Asia/Ho_Chi_Minh");
    int days = 0;
    for (;;) {
        /* The next day to do: the cursor's day + 1, or the first order's day. */
        const char *p[] = {last[0] ? last : NULL, tz};
        PGresult *r =
            PQexecParams(db,
                         "SELECT d::text FROM (SELECT coalesce($1::date + 1,"
                         " (SELECT min((created_at AT TIME ZONE $2)::date) FROM orders)) AS d) x"
                         " WHERE d < (now() AT TIME ZONE $2)::date",
                         2, NULL, p, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            PQclear(r);
            errand_client_free(c);
            return errand_job_fail_transient(job, PQerrorMessage(db)), 0;
        }
        if (PQntuples(r) == 0 || PQgetisnull(r, 0, 0)) {
            PQclear(r);
            break;
        }
        char day[16];
        snprintf(day, sizeof day, "%s", PQgetvalue(r, 0, 0));
        PQclear(r);
        const char *q[] = {day, tz};
        r = PQexecParams(db,
                         "INSERT INTO daily_sales (day, orders, amount)"
                         " SELECT $1::date, count(*), coalesce(sum(amount), 0) FROM orders"
                         " WHERE status = 'paid' AND (created_at AT TIME ZONE $2)::date = $1::date"
                         " ON CONFLICT (day) DO UPDATE SET orders = EXCLUDED.orders,"
                         " amount = EXCLUDED.amount",
                         2, NULL, q, NULL, NULL, 0);
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (!ok) {
            errand_client_free(c);
            return errand_job_fail_transient(job, PQerrorMessage(db)), 0;
        }
        char put[96];
        if (last[0])
            snprintf(put, sizeof put, "{\"value\":\"%s\",\"expected\":\"%s\"}", day, last);
        else
            snprintf(put, sizeof put, "{\"value\":\"%s\",\"expected\":null}", day);
        body = NULL;
        if (errand_request(c, "PUT", path, put, &st, &body) < 0 || (st != 200 && st != 409)) {
            errand_free(body);
            errand_client_free(c);
            return errand_job_fail_transient(job, "cannot move the cursor"), 0;
        }
        errand_free(body);
        if (st == 409) /* another run moved it: that run goes on */
            break;
        snprintf(last, sizeof last, "%s", day);
        days++;
        if (errand_job_should_stop(job))
            break;
    }
    errand_client_free(c);
    char result[80];
    snprintf(result, sizeof result, "{\"days\":%d,\"cursor\":\"%s\"}", days, last);
    return errand_job_complete(job, result), 0;
}

int shop_handle_maintenance(errand_job *job, void *user)
{
    (void)user;
    PGconn *db = shop_db();
    if (!db)
        return errand_job_fail_transient(job, "database unreachable"), 0;
    if (strcmp(errand_job_name(job), "outbox-cleanup") == 0)
        return outbox_cleanup(job, db);
    if (strcmp(errand_job_name(job), "daily-sales-rollup") == 0)
        return rollup(job, db);
    return errand_job_fail_permanent(job, "unknown job name"), 0;
}
