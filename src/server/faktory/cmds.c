/* SPDX-License-Identifier: MIT
 *
 * The Faktory commands (docs/faktory.md): HELLO, PUSH, PUSHB, FETCH, ACK,
 * FAIL, BEAT, INFO, END, and the refusals of the ones not built yet. Each
 * reads its argument into core specs, lets core judge them, submits an
 * engine request and formats its answer as RESP (proto.h). ACK and FAIL
 * carry only a jid: the lease is the one this connection's wid holds, as
 * the store says (the cache of workers.c is a fast path it can refute).
 */
#include <event2/bufferevent.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fetch.h"
#include "server/faktory/fk_internal.h"
#include "server/faktory/job_map.h"
#include "server/http/spec_json.h"
#include "util/jsonw.h"

/* Which roles may run a command: bit (1 << role). HELLO and END are
 * always allowed. ER_ROLE_NONE (no tokens configured) may run everything. */
#define R(x) (1u << (x))
#define PRODUCER (R(ER_ROLE_PRODUCER) | R(ER_ROLE_WORKER) | R(ER_ROLE_ADMIN))
#define WORKER (R(ER_ROLE_WORKER) | R(ER_ROLE_ADMIN))
#define ADMIN R(ER_ROLE_ADMIN)
#define ANYONE (PRODUCER | R(ER_ROLE_VIEWER))

static unsigned allowed(er_fk_verb v)
{
    switch (v) {
    case ER_FK_PUSH:
    case ER_FK_PUSHB:
        return PRODUCER;
    case ER_FK_INFO:
        return ANYONE;
    case ER_FK_FETCH:
    case ER_FK_ACK:
    case ER_FK_FAIL:
    case ER_FK_BEAT:
    case ER_FK_TRACK:
        return WORKER;
    default:
        return ADMIN;
    }
}

static void reply_err(fk_conn *c, const er_error *err, int rc)
{
    const char *msg = err->message[0] ? err->message : er_error_code_name(rc ? rc : err->code);
    er_fk_send_error(c, "ERR", msg, false);
}

void er_fk_reply_req_error(fk_conn *c, er_req *r)
{
    er_error err = r->err;
    if (!err.code)
        err.code = r->rc ? r->rc : ER_EINTERNAL;
    er_fk_error_rename(&err);
    reply_err(c, &err, err.code);
}

bool er_fk_failed(fk_conn *c, er_req *r)
{
    if (!r->rc)
        return false;
    er_fk_reply_req_error(c, r);
    er_req_free(r);
    return true;
}

void er_fk_oom(fk_conn *c, er_req *r)
{
    er_req_free(r);
    er_fk_send_error(c, "ERR", "out of memory", false);
}

void er_fk_reply_ok(fk_conn *c)
{
    er_fk_reply_simple(&c->out, "OK");
    er_fk_send(c, false);
}

/* The argument as a JSON value; NULL after replying -ERR. */
json_t *er_fk_arg_json(fk_conn *c, const char *arg, size_t n, bool object)
{
    json_error_t je;
    json_t *v = n ? json_loadb(arg, n, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je) : NULL;
    if (!v || (object && !json_is_object(v))) {
        char msg[200];
        if (v)
            snprintf(msg, sizeof msg, "expected a JSON object");
        else if (n)
            snprintf(msg, sizeof msg, "invalid JSON: %s", je.text);
        else
            snprintf(msg, sizeof msg, "missing argument");
        json_decref(v);
        er_fk_send_error(c, "ERR", msg, false);
        return NULL;
    }
    return v;
}

static er_req *new_req(fk_conn *c, er_req_type type)
{
    er_req *r = er_req_new(type);
    if (!r)
        er_fk_oom(c, NULL);
    return r;
}

/* ---- HELLO ---- */

/* hex(SHA-256^i(password + salt)), as Faktory clients compute it. */
static int pwdhash(const char *pwd, const char *salt, int iterations, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx)
        return ER_ENOMEM;
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
             EVP_DigestUpdate(ctx, pwd, strlen(pwd)) &&
             EVP_DigestUpdate(ctx, salt, strlen(salt)) && EVP_DigestFinal_ex(ctx, md, &mdlen);
    for (int i = 1; ok && i < iterations; i++)
        ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, md, mdlen) &&
             EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (!ok || mdlen != 32)
        return ER_EINTERNAL;
    static const char hex[] = "0123456789abcdef";
    for (unsigned i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
    OPENSSL_cleanse(md, sizeof md);
    return 0;
}

/* HELLO's labels: absent or null (0, *out NULL), or an array of strings
 * kept as compact JSON of at most ER_WORKER_LABELS_MAX bytes. */
static int hello_labels(const json_t *l, char **out, er_error *err)
{
    *out = NULL;
    if (!l || json_is_null(l))
        return 0;
    size_t i;
    const json_t *x;
    bool ok = json_is_array(l);
    json_array_foreach(l, i, x)
        ok = ok && json_is_string(x) && strlen(json_string_value(x)) == json_string_length(x);
    if (!ok)
        return er_error_set(err, ER_EINVAL, "labels", "labels must be an array of strings");
    char *t = json_dumps(l, JSON_COMPACT);
    if (!t)
        return er_error_set(err, ER_ENOMEM, NULL, "out of memory");
    if (strlen(t) > ER_WORKER_LABELS_MAX) {
        free(t);
        return er_error_set(err, ER_EINVAL, "labels", "labels must be at most %d bytes as JSON",
                            ER_WORKER_LABELS_MAX);
    }
    *out = t;
    return 0;
}

static void cmd_hello(fk_conn *c, const char *arg, size_t n)
{
    er_faktory *f = c->f;
    if (c->hello) {
        er_fk_send_error(c, "ERR", "HELLO was already said", false);
        return;
    }
    json_t *o = er_fk_arg_json(c, arg, n, true);
    if (!o) {
        er_fk_send(c, true);
        return;
    }
    er_error err = {0};
    json_t *v = json_object_get(o, "v");
    if (v && (!json_is_integer(v) || json_integer_value(v) != 2)) {
        json_decref(o);
        er_fk_send_error(c, "ERR", "protocol version 2 only", true);
        return;
    }
    er_role role = ER_ROLE_NONE;
    if (f->ntokens) {
        json_t *ph = json_object_get(o, "pwdhash");
        const char *given = json_is_string(ph) ? json_string_value(ph) : NULL;
        bool match = false;
        for (size_t i = 0; given && strlen(given) == 64 && i < f->ntokens; i++) {
            char h[65];
            if (pwdhash(f->tokens[i].token, c->salt, ER_FK_HASH_ITERATIONS, h) == 0 &&
                CRYPTO_memcmp(h, given, 64) == 0 && !match) {
                match = true;
                role = f->tokens[i].role;
            }
            OPENSSL_cleanse(h, sizeof h);
        }
        if (!match) {
            json_decref(o);
            er_fk_send_error(c, "ERR", "Invalid password", true);
            return;
        }
    }
    json_t *wid = json_object_get(o, "wid");
    if (wid && !json_is_null(wid)) {
        const char *w = json_is_string(wid) ? json_string_value(wid) : NULL;
        if (!w || strlen(w) != json_string_length(wid) || er_name_validate(w, "wid", &err) < 0) {
            if (!w)
                er_error_set(&err, ER_EINVAL, "wid", "wid must be a string");
            json_decref(o);
            er_fk_send_error(c, "ERR", err.message, true);
            return;
        }
        char *labels = NULL;
        if (hello_labels(json_object_get(o, "labels"), &labels, &err) < 0) {
            json_decref(o);
            er_fk_send_error(c, "ERR", err.message, true);
            return;
        }
        fk_worker *wk = er_fk_worker_touch(f, w, er_now_ms());
        if (!wk) {
            free(labels);
            json_decref(o);
            er_fk_send_error(c, "ERR", "too many workers", true);
            return;
        }
        memcpy(c->wid, w, strlen(w) + 1);
        json_t *h = json_object_get(o, "hostname"), *pid = json_object_get(o, "pid");
        if (json_is_string(h))
            snprintf(wk->v.hostname, sizeof wk->v.hostname, "%s", json_string_value(h));
        if (json_is_integer(pid))
            wk->v.pid = json_integer_value(pid);
        if (v)
            wk->proto_v = json_integer_value(v);
        if (labels) {
            free(wk->labels);
            wk->labels = labels;
        }
    }
    json_decref(o);
    c->hello = true;
    c->role = role;
    bufferevent_set_timeouts(c->bev, NULL, NULL);
    er_fk_reply_ok(c);
}

/* ---- PUSH, PUSHB ---- */

static int job_from(fk_conn *c, const json_t *obj, er_job *job, er_error *err)
{
    er_job_spec sp;
    char *custom = NULL;
    int64_t now = er_now_ms();
    int rc = er_fk_job_spec(obj, now, &sp, &custom, err);
    if (rc == 0) {
        er_job_limits lim = {.payload_max = c->f->payload_max};
        rc = er_job_validate(&sp, &lim, now, &c->f->rand, job, err);
    }
    er_job_spec_fini(&sp);
    free(custom);
    if (rc < 0)
        er_fk_error_rename(err);
    return rc;
}

static void finish_push(fk_conn *c, er_req *r)
{
    if (r->rc) {
        er_fk_reply_req_error(c, r);
    } else if (r->locks && r->locks[0].rc == ER_ECONFLICT) {
        er_fk_send_error(c, "NOTUNIQUE", "Job not unique", false);
    } else {
        er_fk_reply_ok(c);
    }
    er_req_free(r);
}

/* ---- unique jobs (custom.unique_for): a run-once lease per jobtype and
 * args in the queue, taken by the engine in the enqueue's transaction
 * (er_enqueue_lock) and its token stored with the job; given back in the
 * ACK's transaction (or when the job is handed out, unique_until "start")
 * on any node, else when unique_for runs out ---- */

#define UNIQUE_LEASE_TYPE "faktory.unique"

/* A lock release whose outcome changes nothing (the ttl frees it anyway). */
static er_req *release_req(const char *token)
{
    er_req *r = er_req_new(ER_REQ_LEASE_RELEASE);
    if (r && !(r->token = strdup(token))) {
        er_req_free(r);
        return NULL;
    }
    return r;
}

/* Asks for job i's unique lock when the job is unique (r->locks made on
 * the first). 0 when asked or not unique; < 0 (ER_ENOMEM, ER_EINTERNAL)
 * when it cannot be. */
static int want_lock(er_req *r, size_t i, size_t total)
{
    int64_t ttl = 0;
    bool at_start = false;
    char key[65];
    int u = er_fk_job_unique(&r->jobs[i], &ttl, &at_start, key);
    if (u <= 0)
        return u;
    if (!r->locks && !(r->locks = calloc(total, sizeof *r->locks)))
        return ER_ENOMEM;
    if (!r->lease_type && !(r->lease_type = strdup(UNIQUE_LEASE_TYPE)))
        return ER_ENOMEM;
    er_enqueue_lock *l = &r->locks[i];
    l->on = true;
    memcpy(l->run_key, key, sizeof l->run_key);
    l->ttl_ms = ttl; /* until start or success: the stored job's custom says which */
    return 0;
}


static void cmd_push(fk_conn *c, const char *arg, size_t n)
{
    json_t *o = er_fk_arg_json(c, arg, n, true);
    if (!o)
        return;
    er_req *r = new_req(c, ER_REQ_ENQUEUE);
    er_error err = {0};
    if (r && !(r->jobs = calloc(1, sizeof *r->jobs)))
        er_error_set(&err, ER_ENOMEM, "", "out of memory");
    if (r && !err.code && job_from(c, o, &r->jobs[0], &err) == 0)
        r->njobs = 1;
    json_decref(o);
    if (!r)
        return;
    if (err.code) {
        er_req_free(r);
        reply_err(c, &err, err.code);
        return;
    }
    int u = want_lock(r, 0, 1);
    if (u < 0) {
        er_fk_oom(c, r);
        return;
    }
    er_fk_submit(c, r, finish_push);
}

/* PUSHB's reply: {jid: reason} for the jobs not taken (a bulk string):
 * those refused as read (r->text) and, as Faktory names them, those whose
 * unique lock is held, "NOTUNIQUE Job not unique". */
static void finish_pushb(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    bool held = false;
    for (size_t i = 0; r->locks && i < r->njobs; i++)
        held |= r->locks[i].rc == ER_ECONFLICT;
    char *text = NULL;
    if (held) {
        json_t *fails = json_loads(r->text ? r->text : "{}", 0, NULL);
        bool bad = !fails;
        for (size_t i = 0; !bad && i < r->njobs; i++)
            if (r->locks[i].rc == ER_ECONFLICT)
                bad = json_object_set_new(fails, r->jobs[i].id,
                                          json_string("NOTUNIQUE Job not unique")) != 0;
        text = bad ? NULL : json_dumps(fails, JSON_COMPACT);
        json_decref(fails);
        if (!text) {
            er_fk_oom(c, r);
            return;
        }
    }
    const char *reply = text ? text : r->text ? r->text : "{}";
    er_fk_reply_bulk(&c->out, reply, strlen(reply));
    er_fk_send(c, false);
    free(text);
    er_req_free(r);
}

static void cmd_pushb(fk_conn *c, const char *arg, size_t n)
{
    json_t *a = er_fk_arg_json(c, arg, n, false);
    if (!a)
        return;
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > ER_BULK_MAX) {
        json_decref(a);
        char msg[96];
        snprintf(msg, sizeof msg, "PUSHB takes an array of 1..%d jobs", ER_BULK_MAX);
        er_fk_send_error(c, "ERR", msg, false);
        return;
    }
    size_t total = json_array_size(a);
    er_req *r = new_req(c, ER_REQ_ENQUEUE);
    json_t *fails = json_object();
    if (!r || !fails || !(r->jobs = calloc(total, sizeof *r->jobs))) {
        json_decref(a);
        json_decref(fails);
        if (r) /* else new_req replied */
            er_fk_oom(c, r);
        return;
    }
    for (size_t i = 0; i < total; i++) {
        json_t *item = json_array_get(a, i);
        er_error err = {0};
        if (job_from(c, item, &r->jobs[r->njobs], &err) == 0) {
            int u = want_lock(r, r->njobs, total);
            if (u == 0) {
                r->njobs++;
                continue;
            }
            er_job_fini(&r->jobs[r->njobs]);
            er_error_set(&err, u, "custom", u == ER_ENOMEM ? "out of memory"
                                                           : "custom.unique_for cannot be read");
        }
        json_t *jid = json_is_object(item) ? json_object_get(item, "jid") : NULL;
        char key[ER_ID_MAX + 32];
        if (json_is_string(jid))
            snprintf(key, sizeof key, "%s", json_string_value(jid));
        else
            snprintf(key, sizeof key, "#%zu", i);
        json_object_set_new(fails, key, json_string(err.message));
    }
    json_decref(a);
    r->text = json_dumps(fails, JSON_COMPACT);
    json_decref(fails);
    if (!r->text) {
        er_fk_oom(c, r);
        return;
    }
    if (r->njobs == 0) {
        finish_pushb(c, r);
        return;
    }
    er_fk_submit(c, r, finish_pushb);
}

/* ---- FETCH ---- */

static void reply_job(fk_conn *c, const er_job *j, int64_t lease_ms)
{
    er_jsonw w;
    er_jsonw_init(&w, ER_FK_OUT_MAX);
    er_fk_job_write(j, lease_ms / 1000, &w);
    if (w.failed || w.out.err) {
        er_jsonw_fini(&w);
        er_fk_oom(c, NULL);
        return;
    }
    er_fk_pre_handed(er_fk_worker_find(c->f, c->wid));
    er_fk_reply_bulk(&c->out, w.out.data, w.out.len);
    er_jsonw_fini(&w);
    er_fk_send(c, false);
}

static void finish_release_start(fk_conn *c, er_req *r)
{
    reply_job(c, &r->job, c->lease_ms); /* a lock not released now ends with its ttl */
    er_req_free(r);
}

/* Whether *j holds a unique lock until it starts (unique_until "start"). */
static bool unique_until_start(const er_job *j)
{
    int64_t ttl;
    bool at_start = false;
    char key[65];
    return j->unique_token && er_fk_job_unique(j, &ttl, &at_start, key) > 0 && at_start;
}

/* Replies the fetched job *j (r's; r is freed), giving back its unique
 * lock first when it is held until the job starts. */
static void deliver(fk_conn *c, er_req *r, er_job *j)
{
    if (unique_until_start(j)) {
        er_req *rel = release_req(j->unique_token);
        if (rel) {
            rel->job = *j; /* moved */
            memset(j, 0, sizeof *j);
            er_req_free(r);
            er_fk_submit(c, rel, finish_release_start);
            return;
        }
    }
    reply_job(c, j, c->lease_ms);
    er_req_free(r);
}

/* The lease is now the job's own reserve_for. */
static void finish_fetch_lease(fk_conn *c, er_req *r)
{
    /* r is the heartbeat; the fetched job rides in r->job */
    if (er_fk_failed(c, r))
        return;
    er_fk_cache_put(&c->f->leases, r->job.id, r->job.lease_token, c->wid, r->expires_at);
    deliver(c, r, &r->job);
}

static void finish_fetch(fk_conn *c, er_req *r);

/* The job *j (r's) expired (custom.expires_at): it goes to the dead letters
 * (Faktory drops it; errand keeps a record) in the transaction of the
 * fetch r->fetch asked again. */
static void refetch_expired(fk_conn *c, er_req *r, const er_job *j, const char *at)
{
    er_req *n = er_req_new(ER_REQ_FETCH);
    char msg[80];
    snprintf(msg, sizeof msg, "expired at %s (custom.expires_at)", at);
    if (!n || !(n->acks = calloc(1, sizeof *n->acks)) || !(n->acks[0].id = strdup(j->id)) ||
        !(n->acks[0].token = strdup(j->lease_token)) ||
        !(n->acks[0].failure.message = strdup(msg))) {
        er_req_free(n);
        er_fk_oom(c, r);
        return;
    }
    n->nacks = 1;
    n->acks[0].kind = ER_ACK_FAIL;
    n->acks[0].failure.cls = ER_ERR_PERMANENT;
    n->fetch = r->fetch; /* moved */
    memset(&r->fetch, 0, sizeof r->fetch);
    er_req_free(r);
    er_fk_submit(c, n, finish_fetch);
}

/* Hands out *j, a job leased to c's wid (r's: r->list's first or r->job;
 * r->fetch is the FETCH, for a refetch). Its lease becomes its own
 * reserve_for first unless it already runs that long, and not much longer. */
static void hand_out(fk_conn *c, er_req *r, er_job *j)
{
    char at[32];
    int64_t now = er_now_ms();
    if (er_fk_job_expired(j, now, at)) {
        refetch_expired(c, r, j, at); /* each round sends one job to the dead letters */
        return;
    }
    c->lease_ms = er_fk_lease_ms(j, c->f->reserve_min_ms);
    int64_t left = j->lease_expires_at - now;
    if (c->lease_ms == ER_FK_RESERVE_DEFAULT_MS &&
        (c->f->prefetch <= 1 || (left >= c->lease_ms &&
                                 left <= c->lease_ms + 2 * ER_FK_PREFETCH_HOLD_MS))) {
        er_fk_cache_put(&c->f->leases, j->id, j->lease_token, c->wid, j->lease_expires_at);
        deliver(c, r, j);
        return;
    }
    /* another reserve_for, or less of it left: set the lease to it first */
    er_req *h = er_req_new(ER_REQ_HEARTBEAT);
    if (!h || !(h->id = strdup(j->id)) || !(h->token = strdup(j->lease_token))) {
        er_req_free(h);
        er_fk_oom(c, r);
        return;
    }
    h->extend_ms = c->lease_ms;
    h->job = *j; /* moved */
    memset(j, 0, sizeof *j);
    er_req_free(r);
    er_fk_submit(c, h, finish_fetch_lease);
}

static void finish_fetch(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    if (r->list.len == 0) {
        er_fk_reply_null(&c->out);
        er_fk_send(c, false);
        er_req_free(r);
        return;
    }
    /* the rest wait in the wid's buffer; what does not fit is released */
    fk_worker *w = er_fk_worker_find(c->f, c->wid);
    if (w && c->fetch_ns) {
        er_fk_pre_fetched(w, er_mono_ns() - c->fetch_ns);
        w->refill_dry = false;
    }
    c->fetch_ns = 0;
    bool keep = !c->f->stopping && w && w->v.signal == ER_FK_RUN && !w->v.current_state[0];
    int64_t now = er_now_ms();
    for (size_t i = 1; i < r->list.len; i++)
        if (!keep || !er_fk_pre_put(c->f, w, &r->list.items[i], now))
            er_fk_pre_release_jobs(c->f, &r->list.items[i], 1);
    hand_out(c, r, &r->list.items[0]);
}

/* FETCH r for w: a buffered job (refilling the buffer when it runs low),
 * else a store fetch. */
static void fetch_buffered_or_stored(fk_conn *c, er_req *r, fk_worker *w)
{
    if (er_fk_pre_take(w, r->fetch.queues, r->fetch.nqueues, &r->job)) {
        er_fk_pre_refill(c->f, w, &r->fetch);
        hand_out(c, r, &r->job); /* no store round trip */
        return;
    }
    r->fetch.max = er_fk_pre_size(c->f, w, er_now_ms()); /* <= ER_FK_PREFETCH_MAX */
    c->fetch_ns = er_mono_ns();
    er_fk_submit(c, r, finish_fetch);
}

/* The refill c's FETCH r waited for is back: its job is in the buffer, or
 * the FETCH goes to the store. */
static void finish_parked(fk_conn *c, er_req *r)
{
    fk_worker *w = er_fk_worker_find(c->f, c->wid);
    if (w && w->v.signal != ER_FK_RUN) {
        er_req_free(r);
        er_fk_reply_null(&c->out);
        er_fk_send(c, false);
        return;
    }
    fetch_buffered_or_stored(c, r, w);
}

static void cmd_fetch(fk_conn *c, const char *arg, size_t n)
{
    if (!c->wid[0]) {
        er_fk_send_error(c, "ERR", "FETCH needs a wid: give one in HELLO", false);
        return;
    }
    fk_worker *w = er_fk_worker_find(c->f, c->wid);
    if (w && w->v.signal != ER_FK_RUN) {
        er_fk_pre_release(c->f, w, INT64_MAX);
        er_fk_reply_null(&c->out); /* a quiet or stopping process gets no more jobs */
        er_fk_send(c, false);
        return;
    }
    er_fk_pre_asked(w);
    er_spec_str qs[ER_FETCH_QUEUES_MAX + 1];
    size_t nq = 0;
    for (size_t i = 0; i < n && nq < ER_FETCH_QUEUES_MAX + 1;) {
        while (i < n && arg[i] == ' ')
            i++;
        size_t s = i;
        while (i < n && arg[i] != ' ')
            i++;
        if (i > s)
            qs[nq++] = (er_spec_str){ER_SPEC_SET, arg + s, i - s};
    }
    er_fetch_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.queues_kind = ER_SPEC_SET;
    sp.queues = qs;
    sp.nqueues = nq;
    sp.worker_id = (er_spec_str){ER_SPEC_SET, c->wid, strlen(c->wid)};
    sp.max = (er_spec_int){ER_SPEC_SET, 1};
    sp.wait_ms = (er_spec_int){ER_SPEC_SET, ER_FK_FETCH_WAIT_MS};
    /* a prefetched job's lease covers its reserve_for from its hand-out */
    int64_t extra = c->f->prefetch > 1 ? 2 * ER_FK_PREFETCH_HOLD_MS : 0;
    sp.lease_ms = (er_spec_int){ER_SPEC_SET, ER_FK_RESERVE_DEFAULT_MS + extra};
    er_req *r = new_req(c, ER_REQ_FETCH);
    if (!r)
        return;
    er_error err = {0};
    if (er_fetch_validate(&sp, &r->fetch, &err) < 0) {
        er_req_free(r);
        reply_err(c, &err, err.code);
        return;
    }
    if (w && w->refilling && !w->npre) {
        er_fk_park(c, r, finish_parked); /* the refill brings its job */
        return;
    }
    fetch_buffered_or_stored(c, r, w);
}

/* ---- ACK, FAIL ---- */

static void finish_ack(fk_conn *c, er_req *r);

/* TRACK SET: a heartbeat of c->jid with token, to reserve_until (or the
 * lease's end as it is) and with the progress given. */
static void submit_track(fk_conn *c, const char *token)
{
    int64_t now = er_now_ms();
    int64_t until = c->track_until ? c->track_until : c->lease_end;
    er_heartbeat_spec hs = {
        .lease_token = {ER_SPEC_SET, token, strlen(token)},
        .extend_ms = {ER_SPEC_SET, until - now},
    };
    if (!c->track_until && hs.extend_ms.v < ER_LEASE_MIN_MS)
        hs.extend_ms.v = ER_LEASE_MIN_MS; /* about to end anyway: keep it the shortest */
    if (c->track_progress)
        hs.progress = (er_spec_str){ER_SPEC_SET, c->track_progress, strlen(c->track_progress)};
    er_req *r = new_req(c, ER_REQ_HEARTBEAT);
    if (!r)
        return;
    er_error err = {0};
    if (er_heartbeat_validate(&hs, ER_CUSTOM_MAX, &r->token, &r->extend_ms, &r->progress, &err) <
        0) {
        er_req_free(r);
        if (strcmp(err.field, "extend_ms") == 0)
            er_error_set(&err, ER_EINVAL, "reserve_until",
                         "reserve_until must be %lld ms to 24 h ahead", (long long)ER_LEASE_MIN_MS);
        reply_err(c, &err, err.code);
        return;
    }
    if (!(r->id = strdup(c->jid))) {
        er_fk_oom(c, r);
        return;
    }
    er_fk_submit(c, r, finish_ack);
}

/* Acknowledges c->jid with token (the lease this wid holds). */
static void submit_ack(fk_conn *c, const char *token)
{
    if (c->track) {
        submit_track(c, token);
        return;
    }
    er_req *r = new_req(c, ER_REQ_ACKS);
    if (!r)
        return;
    r->acks = calloc(1, sizeof *r->acks);
    if (!r->acks || !(r->acks[0].id = strdup(c->jid)) || !(r->acks[0].token = strdup(token))) {
        er_fk_oom(c, r);
        return;
    }
    r->nacks = 1;
    r->acks[0].kind = c->fail ? ER_ACK_FAIL : ER_ACK_COMPLETE;
    /* a success gives the job's unique lock back, in the same commit (the
     * store reads its token from the job) */
    if (c->fail) {
        r->acks[0].failure = c->failure; /* moved */
        memset(&c->failure, 0, sizeof c->failure);
    }
    er_fk_submit(c, r, finish_ack);
}

static void finish_lookup(fk_conn *c, er_req *r)
{
    const er_job *j = &r->job;
    char msg[ER_ID_MAX + 160];
    if (r->rc == ER_ENOTFOUND || (!r->rc && !j->id)) {
        snprintf(msg, sizeof msg, "no job %s", c->jid);
        er_fk_send_error(c, "ERR", msg, false);
    } else if (r->rc) {
        er_fk_reply_req_error(c, r);
    } else if (j->state != ER_STATE_ACTIVE) {
        snprintf(msg, sizeof msg, "job %s is %s, not reserved", c->jid, er_state_name(j->state));
        er_fk_send_error(c, "ERR", msg, false);
    } else if (!j->lease_owner || strcmp(j->lease_owner, c->wid) != 0 || !j->lease_token) {
        snprintf(msg, sizeof msg, "job %s is reserved by another worker", c->jid);
        er_fk_send_error(c, "ERR", msg, false);
    } else {
        c->from_cache = false;
        c->lease_end = j->lease_expires_at;
        char *token = strdup(j->lease_token);
        er_req_free(r);
        if (!token) {
            er_fk_oom(c, NULL);
            return;
        }
        submit_ack(c, token);
        free(token);
        return;
    }
    er_failure_fini(&c->failure);
    er_req_free(r);
}

static void lookup(fk_conn *c)
{
    er_req *r = new_req(c, ER_REQ_GET_JOB);
    if (!r)
        return;
    if (!(r->id = strdup(c->jid))) {
        er_fk_oom(c, r);
        return;
    }
    er_fk_submit(c, r, finish_lookup);
}

static void finish_ack(fk_conn *c, er_req *r)
{
    bool hb = r->type == ER_REQ_HEARTBEAT;
    int rc = r->rc ? r->rc : hb ? 0 : r->acks[0].rc;
    if (rc == ER_ESTALE && c->from_cache) {
        /* the cache was behind the store (another node, a newer lease):
         * ask the store, which decides. The failure went into r: rebuild. */
        er_fk_cache_del(&c->f->leases, c->jid);
        if (c->fail && !hb) {
            c->failure = r->acks[0].failure;
            memset(&r->acks[0].failure, 0, sizeof r->acks[0].failure);
        }
        er_req_free(r);
        c->from_cache = false;
        lookup(c);
        return;
    }
    if (hb && !rc) {
        er_fk_cache_put(&c->f->leases, c->jid, r->token, c->wid, r->expires_at);
        er_fk_reply_ok(c);
        er_req_free(r);
        return;
    }
    er_fk_cache_del(&c->f->leases, c->jid);
    if (!rc && !hb)
        er_fk_pre_acked(er_fk_worker_find(c->f, c->wid));
    if (rc) {
        er_error err = r->rc || hb ? r->err : r->acks[0].err;
        if (!err.code)
            err.code = rc;
        er_fk_error_rename(&err);
        reply_err(c, &err, rc);
    } else {
        er_fk_reply_ok(c);
    }
    er_req_free(r);
}

/* Acts on c->jid with the lease this wid holds: the cached token, else
 * the store's (lookup). */
static void with_lease(fk_conn *c)
{
    const fk_lease *l = er_fk_cache_get(&c->f->leases, c->jid);
    if (l && strcmp(l->wid, c->wid) == 0) {
        c->from_cache = true;
        c->lease_end = l->expires_at;
        char *token = strdup(l->token);
        if (token) {
            submit_ack(c, token);
            free(token);
            return;
        }
    }
    c->from_cache = false;
    lookup(c);
}

static void cmd_ack(fk_conn *c, const char *arg, size_t n, bool fail)
{
    if (!c->wid[0]) {
        er_fk_send_error(c, "ERR", fail ? "FAIL needs a wid: give one in HELLO"
                                        : "ACK needs a wid: give one in HELLO",
                         false);
        return;
    }
    json_t *o = er_fk_arg_json(c, arg, n, true);
    if (!o)
        return;
    er_error err = {0};
    json_t *jid = json_object_get(o, "jid");
    const char *id = json_is_string(jid) ? json_string_value(jid) : NULL;
    if (!id || er_id_validate(id, "jid", &err) < 0) {
        if (!id)
            er_error_set(&err, ER_EINVAL, "jid", "jid is required");
        json_decref(o);
        reply_err(c, &err, err.code);
        return;
    }
    snprintf(c->jid, sizeof c->jid, "%s", id);
    c->fail = fail;
    c->track = false;
    er_failure_fini(&c->failure);
    if (fail) {
        er_failure_spec fs;
        char *bt = NULL;
        int rc = er_fk_failure_spec(o, &fs, &bt, &err);
        if (rc == 0)
            rc = er_failure_validate(&fs, &c->failure, &err);
        free(bt);
        if (rc < 0) {
            json_decref(o);
            er_fk_error_rename(&err);
            reply_err(c, &err, rc);
            return;
        }
    }
    json_decref(o);
    with_lease(c);
}

/* ---- TRACK ---- */

static void finish_track_get(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    const er_job *j = &r->job;
    json_t *p = j->progress ? json_loads(j->progress, JSON_DECODE_ANY, NULL) : NULL;
    json_t *pct = json_is_object(p) ? json_object_get(p, "percent") : NULL;
    json_t *desc = json_is_object(p) ? json_object_get(p, "desc") : NULL;
    er_jsonw w;
    er_jsonw_init(&w, 1 << 20);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "jid");
    er_jsonw_str(&w, j->id);
    er_jsonw_key(&w, "percent");
    if (json_is_integer(pct))
        er_jsonw_int(&w, json_integer_value(pct));
    else
        er_jsonw_null(&w);
    er_jsonw_key(&w, "desc");
    er_jsonw_str(&w, json_is_string(desc) ? json_string_value(desc) : NULL);
    er_jsonw_key(&w, "state");
    er_jsonw_str(&w, er_state_name(j->state));
    er_jsonw_key(&w, "updated_at");
    er_jsonw_time(&w, j->updated_at);
    er_jsonw_end_object(&w);
    json_decref(p);
    if (w.failed || w.out.err) {
        er_fk_oom(c, NULL);
    } else {
        er_fk_reply_bulk(&c->out, w.out.data, w.out.len);
        er_fk_send(c, false);
    }
    er_jsonw_fini(&w);
    er_req_free(r);
}

/* TRACK SET {"jid", "percent", "desc", "reserve_until"}: the job's progress
 * and, with reserve_until, its lease's end (the wid's lease, as ACK);
 * TRACK GET jid: the job's progress. */
static void cmd_track(fk_conn *c, const char *arg, size_t n)
{
    er_error err = {0};
    if (n > 4 && memcmp(arg, "GET ", 4) == 0) {
        char id[ER_ID_MAX + 2];
        size_t len = n - 4 < sizeof id - 1 ? n - 4 : sizeof id - 1;
        memcpy(id, arg + 4, len);
        id[len] = '\0';
        er_req *r = NULL;
        if (er_id_validate(id, "jid", &err) < 0 || !(r = new_req(c, ER_REQ_GET_JOB))) {
            if (err.code)
                reply_err(c, &err, err.code);
            return;
        }
        if (!(r->id = strdup(id))) {
            er_fk_oom(c, r);
            return;
        }
        er_fk_submit(c, r, finish_track_get);
        return;
    }
    if (!(n > 4 && memcmp(arg, "SET ", 4) == 0)) {
        er_fk_send_error(c, "ERR", "TRACK takes SET {json} or GET jid", false);
        return;
    }
    if (!c->wid[0]) {
        er_fk_send_error(c, "ERR", "TRACK SET needs a wid: give one in HELLO", false);
        return;
    }
    json_t *o = er_fk_arg_json(c, arg + 4, n - 4, true);
    if (!o)
        return;
    json_t *jid = json_object_get(o, "jid"), *pct = json_object_get(o, "percent"),
           *desc = json_object_get(o, "desc"), *until = json_object_get(o, "reserve_until");
    const char *id = json_is_string(jid) ? json_string_value(jid) : NULL;
    int64_t until_ms = 0;
    if (!id)
        er_error_set(&err, ER_EINVAL, "jid", "jid is required");
    else if (er_id_validate(id, "jid", &err) < 0)
        ;
    else if (pct && !json_is_null(pct) &&
             (!json_is_integer(pct) || json_integer_value(pct) < 0 || json_integer_value(pct) > 100))
        er_error_set(&err, ER_EINVAL, "percent", "percent must be an integer 0..100");
    else if (desc && !json_is_null(desc) && !json_is_string(desc))
        er_error_set(&err, ER_EINVAL, "desc", "desc must be a string");
    else if (until && !json_is_null(until) &&
             (!json_is_string(until) || er_time_parse(json_string_value(until), &until_ms) < 0))
        er_error_set(&err, ER_EINVAL, "reserve_until", "reserve_until must be an RFC 3339 time");
    if (err.code) {
        json_decref(o);
        reply_err(c, &err, err.code);
        return;
    }
    snprintf(c->jid, sizeof c->jid, "%s", id);
    free(c->track_progress);
    c->track_progress = NULL;
    if ((pct && !json_is_null(pct)) || (desc && !json_is_null(desc))) {
        json_t *p = json_object();
        if (p && pct && !json_is_null(pct))
            json_object_set(p, "percent", pct);
        if (p && desc && !json_is_null(desc))
            json_object_set(p, "desc", desc);
        c->track_progress = p ? json_dumps(p, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(p);
        if (!c->track_progress) {
            json_decref(o);
            er_fk_oom(c, NULL);
            return;
        }
    }
    json_decref(o);
    c->track = true;
    c->fail = false;
    c->track_until = until_ms;
    with_lease(c);
}

/* ---- BEAT ---- */

static void cmd_beat(fk_conn *c, const char *arg, size_t n)
{
    json_t *o = er_fk_arg_json(c, arg, n, true);
    if (!o)
        return;
    json_t *wid = json_object_get(o, "wid");
    json_t *st = json_object_get(o, "current_state");
    json_t *rss = json_object_get(o, "rss_kb");
    const char *msg = NULL;
    if (!json_is_string(wid) || !c->wid[0] || strcmp(json_string_value(wid), c->wid) != 0)
        msg = "BEAT's wid must be the one given in HELLO";
    else if (st && !json_is_null(st) &&
             (!json_is_string(st) || (strcmp(json_string_value(st), "") != 0 &&
                                      strcmp(json_string_value(st), "quiet") != 0 &&
                                      strcmp(json_string_value(st), "terminate") != 0)))
        msg = "current_state must be \"quiet\" or \"terminate\"";
    else if (rss && !json_is_null(rss) && (!json_is_integer(rss) || json_integer_value(rss) < 0))
        msg = "rss_kb must be an integer >= 0";
    if (msg) {
        json_decref(o);
        er_fk_send_error(c, "ERR", msg, false);
        return;
    }
    fk_worker *w = er_fk_worker_touch(c->f, c->wid, er_now_ms());
    if (!w) {
        json_decref(o);
        er_fk_send_error(c, "ERR", "too many workers", false);
        return;
    }
    snprintf(w->v.current_state, sizeof w->v.current_state, "%s",
             json_is_string(st) ? json_string_value(st) : "");
    if (json_is_integer(rss))
        w->v.rss_kb = json_integer_value(rss);
    json_decref(o);
    if (w->v.current_state[0] || w->v.signal != ER_FK_RUN)
        er_fk_pre_release(c->f, w, INT64_MAX); /* it takes no more jobs */
    if (w->v.signal == ER_FK_RUN) {
        er_fk_reply_ok(c);
        return;
    }
    char body[40];
    int len = snprintf(body, sizeof body, "{\"state\":\"%s\"}", er_fk_signal_name(w->v.signal));
    er_fk_reply_bulk(&c->out, body, (size_t)len);
    er_fk_send(c, false);
}

/* ---- INFO ---- */

static void finish_info(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    er_faktory *f = c->f;
    er_jsonw w;
    er_jsonw_init(&w, ER_FK_OUT_MAX);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "now");
    er_jsonw_time(&w, er_now_ms());
    er_jsonw_key(&w, "server_utc_time");
    er_jsonw_time(&w, er_now_ms());
    er_jsonw_key(&w, "faktory");
    er_jsonw_begin_object(&w);
    int64_t enq = 0;
    for (size_t i = 0; i < r->nqueue_infos; i++)
        enq += r->queue_infos[i].counts[ER_STATE_WAITING];
    er_engine_stats st;
    er_engine_get_stats(f->engine, &st); /* this node's, since it started */
    er_jsonw_key(&w, "total_failures");
    er_jsonw_int(&w, (int64_t)st.failed);
    er_jsonw_key(&w, "total_processed");
    er_jsonw_int(&w, (int64_t)(st.completed + st.failed));
    er_jsonw_key(&w, "total_enqueued");
    er_jsonw_int(&w, enq);
    er_jsonw_key(&w, "total_queues");
    er_jsonw_int(&w, (int64_t)r->nqueue_infos);
    er_jsonw_key(&w, "queues");
    er_jsonw_begin_object(&w);
    for (size_t i = 0; i < r->nqueue_infos; i++) {
        er_jsonw_key(&w, r->queue_infos[i].name);
        er_jsonw_int(&w, r->queue_infos[i].counts[ER_STATE_WAITING]);
    }
    er_jsonw_end_object(&w);
    /* the sets as the real server names them: Busy (active), Retries,
     * Scheduled (scheduled with and without attempts made), Dead */
    int64_t tasks[4] = {0, c->retries, -c->retries, 0};
    for (size_t i = 0; i < r->nqueue_infos; i++) {
        tasks[0] += r->queue_infos[i].counts[ER_STATE_ACTIVE];
        tasks[2] += r->queue_infos[i].counts[ER_STATE_SCHEDULED];
        tasks[3] += r->queue_infos[i].counts[ER_STATE_DEAD];
    }
    if (tasks[2] < 0) /* a retry came due between the two reads */
        tasks[2] = 0;
    static const char *const set_names[4] = {"Busy", "Retries", "Scheduled", "Dead"};
    er_jsonw_key(&w, "tasks");
    er_jsonw_begin_object(&w);
    for (int i = 0; i < 4; i++) {
        er_jsonw_key(&w, set_names[i]);
        er_jsonw_begin_object(&w);
        er_jsonw_key(&w, "size");
        er_jsonw_int(&w, tasks[i]);
        er_jsonw_end_object(&w);
    }
    er_jsonw_end_object(&w);
    er_jsonw_end_object(&w);
    er_jsonw_key(&w, "server");
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "description");
    er_jsonw_str(&w, "errand");
    er_jsonw_key(&w, "faktory_version");
    er_jsonw_str(&w, "errand-" ER_VERSION);
    er_jsonw_key(&w, "uptime");
    er_jsonw_int(&w, (er_now_ms() - f->started_ms) / 1000);
    er_jsonw_key(&w, "connections");
    er_jsonw_int(&w, f->nconns);
    er_jsonw_key(&w, "command_count");
    er_jsonw_int(&w, (int64_t)f->commands);
    er_jsonw_key(&w, "workers");
    er_jsonw_int(&w, c->live_workers);
    er_jsonw_end_object(&w);
    er_jsonw_end_object(&w);
    if (w.failed || w.out.err) {
        er_fk_oom(c, NULL);
    } else {
        er_fk_reply_bulk(&c->out, w.out.data, w.out.len);
        er_fk_send(c, false);
    }
    er_jsonw_fini(&w);
    er_req_free(r);
}

/* INFO's second read: the live workers of every node; then the queues. */
static void finish_info_workers(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    c->live_workers = r->worker_count;
    er_req_free(r);
    er_req *q = new_req(c, ER_REQ_LIST_QUEUES);
    if (q)
        er_fk_submit(c, q, finish_info);
}

/* INFO's first read: the retry set's size. Three reads, no commit. */
static void finish_info_retries(fk_conn *c, er_req *r)
{
    if (er_fk_failed(c, r))
        return;
    c->retries = r->bulk.count;
    er_req_free(r);
    er_req *q = new_req(c, ER_REQ_WORKER_COUNT);
    if (q) {
        q->extend_ms = ER_FK_WORKER_TTL_MS;
        er_fk_submit(c, q, finish_info_workers);
    }
}

/* ---- dispatch ---- */

void er_fk_run(fk_conn *c, const char *line, size_t n)
{
    c->f->commands++;
    er_fk_command cmd;
    const char *why = NULL;
    if (er_fk_command_parse(line, n, &cmd, &why) < 0) {
        er_fk_send_error(c, "ERR", why, !c->hello);
        return;
    }
    if (cmd.verb == ER_FK_END) {
        er_fk_send(c, true); /* as the real server: no reply */
        return;
    }
    if (cmd.verb == ER_FK_HELLO) {
        cmd_hello(c, cmd.arg, cmd.arg_len);
        return;
    }
    if (cmd.verb == ER_FK_UNKNOWN) {
        char msg[64];
        snprintf(msg, sizeof msg, "Unknown command %.*s", (int)cmd.name_len, cmd.name);
        er_fk_send_error(c, "ERR", msg, false);
        return;
    }
    if (c->role != ER_ROLE_NONE && !(allowed(cmd.verb) & R(c->role))) {
        char msg[96];
        snprintf(msg, sizeof msg, "the %s role may not %s", er_role_name(c->role),
                 er_fk_verb_name(cmd.verb));
        er_fk_send_error(c, "ERR", msg, false);
        return;
    }
    switch (cmd.verb) {
    case ER_FK_PUSH:
        cmd_push(c, cmd.arg, cmd.arg_len);
        return;
    case ER_FK_PUSHB:
        cmd_pushb(c, cmd.arg, cmd.arg_len);
        return;
    case ER_FK_FETCH:
        cmd_fetch(c, cmd.arg, cmd.arg_len);
        return;
    case ER_FK_ACK:
        cmd_ack(c, cmd.arg, cmd.arg_len, false);
        return;
    case ER_FK_FAIL:
        cmd_ack(c, cmd.arg, cmd.arg_len, true);
        return;
    case ER_FK_BEAT:
        cmd_beat(c, cmd.arg, cmd.arg_len);
        return;
    case ER_FK_INFO: {
        er_req *r = new_req(c, ER_REQ_BULK_COUNT);
        if (r) {
            r->bulk.filter.state = ER_STATE_SCHEDULED;
            r->bulk.filter.tries = ER_BULK_TRIES_SOME;
            er_fk_submit(c, r, finish_info_retries);
        }
        return;
    }
    case ER_FK_MUTATE:
        er_fk_mutate(c, cmd.arg, cmd.arg_len);
        return;
    case ER_FK_QUEUE:
        er_fk_queue(c, cmd.arg, cmd.arg_len);
        return;
    case ER_FK_FLUSH:
        er_fk_flush(c);
        return;
    case ER_FK_TRACK:
        cmd_track(c, cmd.arg, cmd.arg_len);
        return;
    default: {
        char msg[96];
        snprintf(msg, sizeof msg, "%s is not implemented by errand yet", er_fk_verb_name(cmd.verb));
        er_fk_send_error(c, "ERR", msg, false);
        return;
    }
    }
}
