/* SPDX-License-Identifier: MIT
 *
 * The worker runtime's outcomes on their way to the server: ack items as
 * text, the pending queue (batched by ACK_DELAY_MS and ACK_BATCH), POST
 * /v1/acks with its item-by-item fallback when the server refuses a batch,
 * and the acker thread that sends outcomes as they come and flushes them
 * at shutdown. Fetchers carry outcomes on their fetches (worker_fetch.c)
 * through the same queue. No network call is made with the mutex held.
 */
#include "client/worker_int.h"
#include "util/clock.h"
#include "util/jsonw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ACK_DELAY_MS 2    /* longest wait of an outcome for others to batch with */
#define ACK_BATCH 256     /* or send as soon as this many are pending */
#define FLUSH_GIVE_UP_MS 10000 /* at shutdown, stop retrying acks after this long */

/* ---- pending outcomes ----------------------------------------------------- */

void er_ack_item(const errand_job *j, const char *kind, const char *body, er_buf *b)
{
    er_buf_reset(b);
    er_buf_adds(b, "{\"id\":");
    er_json_str(b, j->id);
    er_buf_adds(b, ",\"lease_token\":");
    er_json_str(b, j->token);
    er_buf_adds(b, ",\"");
    er_buf_adds(b, kind);
    er_buf_adds(b, "\":");
    er_buf_adds(b, body);
    er_buf_adds(b, "}");
}

/* Whether the acker should send now (locked). */
static bool acks_due_locked(errand_worker *w, int64_t now)
{
    return w->acks.n > 0 && (w->acker_force || w->fetch_parked || w->acks.n >= ACK_BATCH ||
                             now - w->acks_since >= ACK_DELAY_MS);
}

void er_push_ack_locked(errand_worker *w, const er_buf *b)
{
    if (b->err || !b->len || er_ackq_push(&w->acks, b->data, b->len) < 0) {
        w->acks_lost++; /* its lease expires and the job runs again; the acker logs it */
        if (w->ack_waiting)
            pthread_cond_signal(&w->cv_ack);
        return;
    }
    if (w->acks.n == 1)
        w->acks_since = er_mono_ms();
    /* The first item arms the acker's delay; later ones matter only when
     * they make a batch or nothing waits for a fetch to carry them. */
    if (w->ack_waiting && (w->acks.n == 1 || w->acks.n == ACK_BATCH || w->fetch_parked ||
                           w->acker_force))
        pthread_cond_signal(&w->cv_ack);
}

/* ---- sending outcomes ----------------------------------------------------- */

/* Logs the refused items of the results array `key` of a parsed reply. */
void er_check_ack_results(errand_worker *w, const er_jscan *js, const char *text, const char *key)
{
    long arr = er_jscan_get(js, text, 0, key);
    if (arr < 0 || js->tok[arr].type != ER_JS_ARRAY)
        return;
    for (size_t k = (size_t)arr + 1; k < js->tok[arr].next; k = js->tok[k].next) {
        if (er_jscan_get(js, text, (long)k, "error") < 0)
            continue;
        /* Rare: read the refused item with jansson to log it. */
        const er_jstok *t = &js->tok[k];
        json_t *r = json_loadb(text + t->start, t->end - t->start, 0, NULL);
        json_t *e = json_object_get(r, "error");
        er_worker_log(w, ERRAND_LOG_WARN,
                      json_pack("{s:s,s:s?,s:s?,s:s?}", "msg", "outcome refused by the server",
                                "job_id", json_string_value(json_object_get(r, "id")), "error",
                                json_string_value(json_object_get(e, "code")), "message",
                                json_string_value(json_object_get(e, "message"))));
        json_decref(r);
    }
}

/* Puts acks that could not be sent back in front (locked); takes acks. */
void er_restore_acks_locked(errand_worker *w, er_ackq *acks)
{
    if (acks->n == 0) {
        er_ackq_fini(acks);
        return;
    }
    bool was_empty = w->acks.n == 0;
    if (er_ackq_prepend(&w->acks, acks) < 0) {
        w->acks_lost += (long)acks->n;
        er_ackq_fini(acks);
        return;
    }
    if (was_empty)
        w->acks_since = er_mono_ms();
    if (w->ack_waiting)
        pthread_cond_signal(&w->cv_ack);
}

/* POST /v1/acks; returns 0, a transport error (retry), or 1 when the server
 * refused the whole request (do not retry). Takes acks on 0 and 1; on an
 * error leaves in acks those still to send. js and body are scratch. */
int er_send_acks(errand_worker *w, errand_client *c, er_ackq *acks, er_jscan *js, er_buf *body)
{
    er_buf_reset(body);
    er_buf_adds(body, "{\"acks\":");
    er_ackq_write(acks, body);
    er_buf_adds(body, "}");
    if (body->err)
        return ERRAND_ENOMEM;
    char *text = NULL;
    size_t tlen = 0;
    int rc = er_client_call_text(c, "POST", "/v1/acks", body->data, &text, &tlen);
    if (rc == 0) {
        if (er_jscan_parse(js, text, tlen) == 0)
            er_check_ack_results(w, js, text, "results");
        free(text);
        atomic_fetch_add(&w->st_acks_sent, (long long)acks->n);
        er_ackq_fini(acks);
        return 0;
    }
    if (!(errand_last_status(c) >= 400 && errand_last_status(c) < 500))
        return rc;
    size_t n = acks->n;
    if (n > 1) {
        /* One bad item refuses the whole request: send them one by one,
         * so only the refused ones are dropped. */
        for (size_t i = 0; i < n; i++) {
            er_ackq one = {0};
            size_t len;
            const char *it = er_ackq_item(acks, i, &len);
            if (er_ackq_push(&one, it, len) < 0 || er_send_acks(w, c, &one, js, body) < 0) {
                er_ackq_fini(&one);
                /* The server went away meanwhile: keep the rest. */
                er_ackq done = {0};
                if (i > 0 && er_ackq_take(acks, i, &done) == 0)
                    er_ackq_fini(&done);
                return ERRAND_ECONNECT;
            }
        }
        er_ackq_fini(acks);
        return 1;
    }
    /* One item: rare, so read it with jansson. */
    size_t len = 0;
    const char *item = er_ackq_item(acks, 0, &len);
    json_t *it = json_loadb(item, len, 0, NULL);
    const char *id = json_string_value(json_object_get(it, "id"));
    if (errand_last_error(c)->code == ERRAND_ETOOBIG && json_object_get(it, "complete") && id) {
        /* The work is done but its result is over the server's limit:
         * a dead letter says so, where a silent re-run would not. */
        char msg[700];
        snprintf(msg, sizeof msg, "completed, but the result was refused: %s",
                 errand_last_error(c)->message);
        er_worker_log(w, ERRAND_LOG_ERROR,
                      json_pack("{s:s,s:s,s:s}", "msg", "result refused; failing the job "
                                "permanently", "job_id", id, "message", msg));
        json_t *fail = json_pack("{s:O,s:O,s:{s:{s:s,s:s}}}", "id", json_object_get(it, "id"),
                                 "lease_token", json_object_get(it, "lease_token"), "fail",
                                 "error", "class", "permanent", "message", msg);
        char *ft = fail ? json_dumps(fail, JSON_COMPACT) : NULL;
        json_decref(fail);
        er_ackq one = {0};
        int orc = ft ? er_ackq_push(&one, ft, strlen(ft)) : ERRAND_ENOMEM;
        free(ft);
        if (orc == 0 && er_send_acks(w, c, &one, js, body) < 0) {
            er_ackq_fini(&one);
            json_decref(it);
            return ERRAND_ECONNECT;
        }
        er_ackq_fini(&one);
    } else {
        const errand_error *e = errand_last_error(c);
        er_worker_log(w, ERRAND_LOG_ERROR,
                      json_pack("{s:s,s:s?,s:s,s:s}", "msg",
                                "outcome refused; the job's lease will expire and it will "
                                "run again",
                                "job_id", id, "error", e->code_name, "message", e->message));
    }
    json_decref(it);
    er_ackq_fini(acks);
    return 1;
}

/* ---- the acker thread ------------------------------------------------ */

/* Logs n outcomes that will not be sent (their jobs come back when their
 * leases expire), without holding the mutex; called and returns locked. */
static void log_dropped_locked(errand_worker *w, const char *why, size_t n)
{
    pthread_mutex_unlock(&w->mu);
    char msg[160];
    snprintf(msg, sizeof msg, "%s; those jobs will be redelivered when their leases expire", why);
    er_worker_log(w, ERRAND_LOG_ERROR, json_pack("{s:s,s:I}", "msg", msg, "count", (json_int_t)n));
    pthread_mutex_lock(&w->mu);
}

/* Sends outcomes as they come (batched by ACK_DELAY_MS and by the previous
 * send's round trip), and everything at the end. */
void *er_worker_acker_main(void *arg)
{
    errand_worker *w = arg;
    errand_client *c = er_worker_thread_client(w, 30000);
    er_jscan js;
    er_jscan_init(&js);
    er_buf body;
    er_buf_init(&body, ER_WK_BODY_MAX);
    int64_t backoff = 0, failing_since = 0;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        if (w->acks_lost > 0) {
            long lost = w->acks_lost;
            w->acks_lost = 0;
            log_dropped_locked(w, "out of memory: outcomes dropped", (size_t)lost);
            continue;
        }
        if (w->acks.n == 0 && w->acker_exit)
            break;
        int64_t now = er_mono_ms();
        if (!acks_due_locked(w, now)) {
            w->ack_waiting = true;
            if (w->acks.n > 0)
                er_worker_timed_wait(&w->cv_ack, &w->mu, w->acks_since + ACK_DELAY_MS);
            else
                pthread_cond_wait(&w->cv_ack, &w->mu);
            w->ack_waiting = false;
            continue;
        }
        er_ackq acks = {0};
        if (er_ackq_take(&w->acks, ER_WK_MAX_ACKS, &acks) < 0) {
            er_worker_timed_wait(&w->cv_ack, &w->mu, now + ER_WK_BACKOFF_MIN);
            continue;
        }
        if (w->acks.n)
            w->acks_since = now;
        pthread_mutex_unlock(&w->mu);
        int rc = c ? er_send_acks(w, c, &acks, &js, &body) : ERRAND_ENOMEM;
        if (rc < 0 && c)
            er_worker_log_client_error(w, ERRAND_LOG_WARN, "sending outcomes failed; retrying", c);
        pthread_mutex_lock(&w->mu);
        if (rc >= 0) {
            backoff = failing_since = 0;
            continue;
        }
        now = er_mono_ms();
        if (!failing_since)
            failing_since = now;
        if (w->acker_exit && now - failing_since > FLUSH_GIVE_UP_MS) {
            /* Their leases will expire and the jobs run again: at-least-once holds. */
            size_t n = acks.n;
            er_ackq_fini(&acks);
            log_dropped_locked(w, "giving up sending outcomes at shutdown", n);
            continue;
        }
        er_restore_acks_locked(w, &acks);
        backoff = er_worker_backoff_next(backoff);
        er_worker_timed_wait(&w->cv_ack, &w->mu, now + backoff);
    }
    pthread_mutex_unlock(&w->mu);
    errand_client_free(c);
    er_jscan_fini(&js);
    er_buf_fini(&body);
    return NULL;
}
