/* SPDX-License-Identifier: MIT
 *
 * The shop's handlers. Each runs at least once per job, so each makes its
 * effect once: payments by the gateway's Idempotency-Key, an earlier-capture
 * lookup and a compare-and-set; shipping by a lookup by reference; loyalty by
 * processed_messages in the points transaction. Transient trouble (a fake
 * down, the database gone) is a transient failure; a state no retry can
 * change (voided, expired, cancelled) is permanent.
 */
#include "handlers.h"

#include "shop.h"

#include <errand/errand_pg.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ctx {
    errand_job *job;
    char order[40];
    char trace[64];
    char extra[160]; /* log members: job, order */
} ctx;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads the envelope's payload.order_id; 0, or -1 after failing the job. */
static int ctx_init(ctx *c, errand_job *job)
{
    memset(c, 0, sizeof *c);
    c->job = job;
    snprintf(c->trace, sizeof c->trace, "%s", errand_job_trace_id(job));
    json_t *env = json_loads(errand_job_payload(job), 0, NULL);
    json_t *p = json_object_get(env, "payload");
    const char *order = json_string_value(json_object_get(p, "order_id"));
    json_int_t v = json_integer_value(json_object_get(p, "v"));
    if (!order || strlen(order) != 36 || v != 1) {
        json_decref(env);
        errand_job_fail_permanent(job, "payload must be {\"v\":1,\"order_id\":uuid}");
        return -1;
    }
    snprintf(c->order, sizeof c->order, "%s", order);
    json_decref(env);
    snprintf(c->extra, sizeof c->extra, "\"job_id\":\"%.60s\",\"order_id\":\"%s\",\"attempt\":%d",
             errand_job_id(job), c->order, errand_job_attempt(job));
    return 0;
}

static void say(const ctx *c, const char *level, const char *msg)
{
    shop_log(level, msg, c->trace, c->extra);
}

static int transient(ctx *c, const char *msg)
{
    say(c, "warn", msg);
    errand_job_fail_transient(c->job, msg);
    return 0;
}

static int permanent(ctx *c, const char *msg)
{
    say(c, "error", msg);
    errand_job_fail_permanent(c->job, msg);
    return 0;
}

/* Reports a failed HTTP call the way errand's dispatch would. */
static int http_failure(ctx *c, const char *what, const shop_http *h)
{
    int cls = ERRAND_CLASS_TRANSIENT;
    long long delay = 0;
    errand_error_from_http(h->status, h->retry_after[0] ? h->retry_after : NULL, now_ms(), &cls,
                           &delay);
    char msg[300];
    snprintf(msg, sizeof msg, "%s: HTTP %ld %.200s", what, h->status, h->body ? h->body : "");
    say(c, "warn", msg);
    switch (cls) {
    case ERRAND_CLASS_PERMANENT: return errand_job_fail_permanent(c->job, msg), 0;
    case ERRAND_CLASS_RETRY_LATER: return errand_job_retry_later(c->job, (long)delay), 0;
    case ERRAND_CLASS_THROTTLED: return errand_job_throttled(c->job, (long)delay), 0;
    default: return errand_job_fail_transient(c->job, msg), 0;
    }
}

static PGresult *q(PGconn *db, const char *sql, int n, const char *const *params)
{
    return PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
}

static int ok(PGresult *r)
{
    int s = PQresultStatus(r);
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

static int db_failure(ctx *c, PGconn *db, PGresult *r)
{
    char msg[300];
    snprintf(msg, sizeof msg, "database: %s", db ? PQerrorMessage(db) : "unreachable");
    PQclear(r);
    if (db && PQtransactionStatus(db) != PQTRANS_IDLE)
        shop_exec(db, "ROLLBACK");
    return transient(c, msg);
}

static const char *json_str(const char *text, const char *key, char *out, size_t size)
{
    json_t *j = json_loads(text ? text : "", 0, NULL);
    const char *s = json_string_value(json_object_get(j, key));
    snprintf(out, size, "%s", s ? s : "");
    json_decref(j);
    return out[0] ? out : NULL;
}

/* ---- payments ---- */

/* Fault injection for the tests: SHOP_CRASH_AFTER_CAPTURE=P kills the
 * process with probability P (0..1) right after the gateway captured and
 * before the database knows. */
static void maybe_crash_after_capture(void)
{
    const char *p = getenv("SHOP_CRASH_AFTER_CAPTURE");
    if (p && (double)rand() / RAND_MAX < strtod(p, NULL))
        raise(SIGKILL);
}

/* Records the capture: compare-and-set authorized → captured, and
 * payment.captured in the outbox, in one transaction. Only the run that
 * wins the compare-and-set writes the event. */
static int record_capture(ctx *c, PGconn *db, const char *capture_id)
{
    if (shop_exec(db, "BEGIN") < 0)
        return db_failure(c, db, NULL);
    const char *p[] = {c->order, capture_id};
    PGresult *r = q(db, "SELECT status FROM orders WHERE id = $1::uuid FOR UPDATE", 1, p);
    if (!ok(r) || PQntuples(r) != 1)
        return db_failure(c, db, r);
    int cancelled = strcmp(PQgetvalue(r, 0, 0), "cancelled") == 0;
    PQclear(r);
    r = q(db,
          "UPDATE payments SET status = 'captured', capture_id = $2, captured_at = now()"
          " WHERE order_id = $1::uuid AND status = 'authorized'",
          2, p);
    if (!ok(r))
        return db_failure(c, db, r);
    int won = strcmp(PQcmdTuples(r), "1") == 0;
    PQclear(r);
    if (won && !cancelled) {
        r = q(db, "UPDATE orders SET status = 'paid' WHERE id = $1::uuid", 1, p);
        if (!ok(r))
            return db_failure(c, db, r);
        PQclear(r);
        char payload[128], key[80];
        snprintf(payload, sizeof payload, "{\"v\":1,\"order_id\":\"%s\"}", c->order);
        snprintf(key, sizeof key, "payment.captured:%s", c->order);
        errand_outbox_event ev = {.topic = "payment.captured",
                                  .payload_json = payload,
                                  .idempotency_key = key,
                                  .aggregate_id = c->order,
                                  .trace_id = c->trace[0] ? c->trace : NULL};
        if (errand_outbox_write(db, &ev, NULL) == ERRAND_PG_ERROR)
            return db_failure(c, db, NULL);
    }
    if (shop_exec(db, "COMMIT") < 0)
        return db_failure(c, db, NULL);
    if (cancelled)
        return permanent(c, "captured after the order was cancelled: refund by hand");
    say(c, "info", won ? "payment captured" : "payment was captured by an earlier run");
    char result[120];
    snprintf(result, sizeof result, "{\"capture_id\":\"%s\"}", capture_id);
    errand_job_complete(c->job, result);
    return 0;
}

static int capture(ctx *c)
{
    PGconn *db = shop_db();
    if (!db)
        return db_failure(c, NULL, NULL);
    const char *p[] = {c->order};
    PGresult *r = q(db,
                    "SELECT p.status, coalesce(p.capture_id, ''), p.authorization_id, p.amount,"
                    " o.status FROM payments p JOIN orders o ON o.id = p.order_id"
                    " WHERE p.order_id = $1::uuid",
                    1, p);
    if (!ok(r))
        return db_failure(c, db, r);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return permanent(c, "no payment for this order");
    }
    char status[16], capture_id[80], auth[80], amount[24], order_status[16];
    snprintf(status, sizeof status, "%s", PQgetvalue(r, 0, 0));
    snprintf(capture_id, sizeof capture_id, "%s", PQgetvalue(r, 0, 1));
    snprintf(auth, sizeof auth, "%s", PQgetvalue(r, 0, 2));
    snprintf(amount, sizeof amount, "%s", PQgetvalue(r, 0, 3));
    snprintf(order_status, sizeof order_status, "%s", PQgetvalue(r, 0, 4));
    PQclear(r);

    /* 1. Done before and recorded: the stored result. */
    if (strcmp(status, "captured") == 0) {
        char result[120];
        snprintf(result, sizeof result, "{\"capture_id\":\"%s\"}", capture_id);
        say(c, "info", "payment already captured");
        return errand_job_complete(c->job, result), 0;
    }
    if (strcmp(status, "voided") == 0 || strcmp(order_status, "cancelled") == 0) {
        say(c, "info", "the order was cancelled: nothing to capture");
        return errand_job_complete(c->job, "{\"skipped\":\"cancelled\"}"), 0;
    }
    if (strcmp(status, "authorized") != 0)
        return permanent(c, "the payment is in an unknown state");

    /* 2. An earlier attempt may have captured and died before step 4. */
    const char *gw = shop_env("GATEWAY_URL", "http://127.0.0.1:7501");
    char url[512];
    snprintf(url, sizeof url, "%s/authorizations/%s", gw, auth);
    shop_http h;
    if (shop_http_call("GET", url, NULL, NULL, NULL, 5000, &h) < 0)
        return transient(c, "out of memory");
    if (h.status != 200) {
        int rc = http_failure(c, "gateway lookup", &h);
        shop_http_free(&h);
        return rc;
    }
    char remote[32];
    json_str(h.body, "status", remote, sizeof remote);
    json_str(h.body, "capture_id", capture_id, sizeof capture_id);
    shop_http_free(&h);
    if (strcmp(remote, "voided") == 0 || strcmp(remote, "expired") == 0) {
        char msg[80];
        snprintf(msg, sizeof msg, "the authorization is %s", remote);
        return permanent(c, msg);
    }
    if (strcmp(remote, "captured") != 0) {
        /* 3. Capture, keyed by the business intent, not the job or the attempt. */
        char key[96], body[64];
        snprintf(key, sizeof key, "Idempotency-Key: capture-%s", c->order);
        snprintf(body, sizeof body, "{\"amount\":%s}", amount);
        snprintf(url, sizeof url, "%s/authorizations/%s/capture", gw, auth);
        if (shop_http_call("POST", url, body, key, NULL, 5000, &h) < 0)
            return transient(c, "out of memory");
        if (h.status == 409) {
            json_str(h.body, "status", remote, sizeof remote);
            shop_http_free(&h);
            char msg[80];
            snprintf(msg, sizeof msg, "the gateway refused the capture: authorization %s", remote);
            return permanent(c, msg);
        }
        if (h.status != 200 || !json_str(h.body, "capture_id", capture_id, sizeof capture_id)) {
            int rc = http_failure(c, "gateway capture", &h);
            shop_http_free(&h);
            return rc;
        }
        shop_http_free(&h);
        maybe_crash_after_capture();
    }
    /* 4. Record it and the next event in one transaction. */
    return record_capture(c, db, capture_id);
}

static int void_authorization(ctx *c)
{
    PGconn *db = shop_db();
    if (!db)
        return db_failure(c, NULL, NULL);
    const char *p[] = {c->order};
    PGresult *r =
        q(db, "SELECT status, authorization_id FROM payments WHERE order_id = $1::uuid", 1, p);
    if (!ok(r))
        return db_failure(c, db, r);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return permanent(c, "no payment for this order");
    }
    char status[16], auth[80];
    snprintf(status, sizeof status, "%s", PQgetvalue(r, 0, 0));
    snprintf(auth, sizeof auth, "%s", PQgetvalue(r, 0, 1));
    PQclear(r);
    if (strcmp(status, "voided") == 0)
        return errand_job_complete(c->job, "{\"status\":\"voided\"}"), 0;
    if (strcmp(status, "captured") == 0)
        return permanent(c, "captured before the cancel: refund by hand");
    char url[512], key[96];
    snprintf(url, sizeof url, "%s/authorizations/%s/void",
             shop_env("GATEWAY_URL", "http://127.0.0.1:7501"), auth);
    snprintf(key, sizeof key, "Idempotency-Key: void-%s", c->order);
    shop_http h;
    if (shop_http_call("POST", url, "{}", key, NULL, 5000, &h) < 0)
        return transient(c, "out of memory");
    char remote[32] = "voided";
    if (h.status == 409)
        json_str(h.body, "status", remote, sizeof remote);
    else if (h.status != 200) {
        int rc = http_failure(c, "gateway void", &h);
        shop_http_free(&h);
        return rc;
    }
    shop_http_free(&h);
    if (strcmp(remote, "captured") == 0)
        return permanent(c, "captured before the void: refund by hand");
    /* voided now, or expired at the gateway: either way nothing is held */
    r = q(db,
          "UPDATE payments SET status = 'voided' WHERE order_id = $1::uuid"
          " AND status = 'authorized'",
          1, p);
    if (!ok(r))
        return db_failure(c, db, r);
    PQclear(r);
    say(c, "info", "authorization voided");
    return errand_job_complete(c->job, "{\"status\":\"voided\"}"), 0;
}

int shop_handle_payments(errand_job *job, void *user)
{
    (void)user;
    ctx c;
    if (ctx_init(&c, job) < 0)
        return 0;
    if (strcmp(errand_job_name(job), "capture-payment") == 0)
        return capture(&c);
    if (strcmp(errand_job_name(job), "void-authorization") == 0)
        return void_authorization(&c);
    return permanent(&c, "unknown job name");
}

/* ---- shipping ---- */

int shop_handle_shipping(errand_job *job, void *user)
{
    (void)user;
    ctx c;
    if (ctx_init(&c, job) < 0)
        return 0;
    PGconn *db = shop_db();
    if (!db)
        return db_failure(&c, NULL, NULL);
    const char *p[] = {c.order, NULL};
    PGresult *r = q(db, "SELECT coalesce(shipment_id, '') FROM orders WHERE id = $1::uuid", 1, p);
    if (!ok(r))
        return db_failure(&c, db, r);
    if (PQntuples(r) != 1) {
        PQclear(r);
        return permanent(&c, "no such order");
    }
    char sid[80];
    snprintf(sid, sizeof sid, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (!sid[0]) {
        /* No idempotency key at the carrier: look up our reference first. */
        const char *carrier = shop_env("CARRIER_URL", "http://127.0.0.1:7502");
        char url[512];
        snprintf(url, sizeof url, "%s/shipments?reference=order-%s", carrier, c.order);
        shop_http h;
        if (shop_http_call("GET", url, NULL, NULL, NULL, 5000, &h) < 0)
            return transient(&c, "out of memory");
        if (h.status != 200) {
            int rc = http_failure(&c, "carrier lookup", &h);
            shop_http_free(&h);
            return rc;
        }
        json_t *j = json_loads(h.body, 0, NULL);
        const char *found = json_string_value(
            json_object_get(json_array_get(json_object_get(j, "shipments"), 0), "id"));
        snprintf(sid, sizeof sid, "%s", found ? found : "");
        json_decref(j);
        shop_http_free(&h);
        if (!sid[0]) {
            char body[96];
            snprintf(body, sizeof body, "{\"reference\":\"order-%s\"}", c.order);
            snprintf(url, sizeof url, "%s/shipments", carrier);
            if (shop_http_call("POST", url, body, NULL, NULL, 5000, &h) < 0)
                return transient(&c, "out of memory");
            if (h.status != 201 || !json_str(h.body, "id", sid, sizeof sid)) {
                /* a 429 comes back as throttled: the whole queue waits */
                int rc = http_failure(&c, "carrier create", &h);
                shop_http_free(&h);
                return rc;
            }
            shop_http_free(&h);
        }
    }
    p[1] = sid;
    r = q(db, "UPDATE orders SET shipment_id = $2 WHERE id = $1::uuid AND shipment_id IS NULL", 2,
          p);
    if (!ok(r))
        return db_failure(&c, db, r);
    PQclear(r);
    say(&c, "info", "shipment created");
    char result[120];
    snprintf(result, sizeof result, "{\"shipment_id\":\"%s\"}", sid);
    errand_job_complete(job, result);
    return 0;
}

/* ---- loyalty ---- */

int shop_handle_loyalty(errand_job *job, void *user)
{
    (void)user;
    ctx c;
    if (ctx_init(&c, job) < 0)
        return 0;
    PGconn *db = shop_db();
    if (!db || shop_exec(db, "BEGIN") < 0)
        return db_failure(&c, db, NULL);
    /* The claim and the points commit together, or neither does. */
    int claim = errand_pg_claim_once(db, "loyalty.award-points", errand_job_idempotency_key(job));
    if (claim == ERRAND_PG_ERROR)
        return db_failure(&c, db, NULL);
    if (claim == ERRAND_PG_FIRST) {
        const char *p[] = {c.order};
        PGresult *r = q(db,
                        "INSERT INTO loyalty_accounts (customer_id, points)"
                        " SELECT customer_id, amount / 100 FROM orders WHERE id = $1::uuid"
                        " ON CONFLICT (customer_id) DO UPDATE"
                        " SET points = loyalty_accounts.points + EXCLUDED.points",
                        1, p);
        if (!ok(r))
            return db_failure(&c, db, r);
        PQclear(r);
    }
    if (shop_exec(db, "COMMIT") < 0)
        return db_failure(&c, db, NULL);
    say(&c, "info", claim == ERRAND_PG_FIRST ? "points awarded" : "points were awarded before");
    errand_job_complete(job,
                        claim == ERRAND_PG_FIRST ? "{\"awarded\":true}" : "{\"awarded\":false}");
    return 0;
}
