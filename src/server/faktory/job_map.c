/* SPDX-License-Identifier: MIT
 *
 * The Faktory job hash <-> errand's job (job_map.h).
 */
#include "server/faktory/job_map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/lease.h"
#include "server/http/spec_json.h"

/* Members of a job hash that map to errand fields, or that the protocol
 * defines as the server's to set (created_at, enqueued_at: errand keeps
 * its own times). */
static const char *const members[] = {"jid",      "jobtype",     "queue",      "args",
                                      "priority", "at",          "retry",      "reserve_for",
                                      "custom",   "created_at",  "enqueued_at", NULL};
/* Members of custom that name Faktory Enterprise features errand does not
 * do: refused rather than kept and ignored. */
static const char *const custom_refused[] = {"bid", NULL};

static bool known_in(const char *const *list, const char *s, size_t n)
{
    for (size_t i = 0; list[i]; i++)
        if (strlen(list[i]) == n && memcmp(list[i], s, n) == 0)
            return true;
    return false;
}

static bool member_known(const char *s, size_t n)
{
    return known_in(members, s, n);
}

static bool custom_ok(const char *s, size_t n)
{
    return !known_in(custom_refused, s, n);
}

/* unique_for (1..86400 s) and unique_until ("success", "start"; only with
 * unique_for): 0, or ER_EINVAL with *err. */
static int custom_unique(const json_t *custom, er_error *err)
{
    json_t *f = json_object_get(custom, "unique_for"), *u = json_object_get(custom, "unique_until");
    if (f && (!json_is_integer(f) || json_integer_value(f) < 1 ||
              json_integer_value(f) > ER_LEASE_TTL_MAX_MS / 1000))
        return er_error_set(err, ER_EINVAL, "custom",
                            "custom.unique_for must be an integer 1..%lld (seconds)",
                            ER_LEASE_TTL_MAX_MS / 1000);
    if (u && (!f || !json_is_string(u) || (strcmp(json_string_value(u), "success") != 0 &&
                                          strcmp(json_string_value(u), "start") != 0)))
        return er_error_set(err, ER_EINVAL, "custom",
                            "custom.unique_until must be \"success\" or \"start\", with "
                            "unique_for");
    return 0;
}

int er_fk_job_unique(const er_job *job, int64_t *ttl_ms, bool *until_start, char key[65])
{
    if (!job->custom || !strstr(job->custom, "\"unique_for\""))
        return 0;
    json_t *c = json_loads(job->custom, 0, NULL);
    json_t *f = json_object_get(c, "unique_for");
    const char *u = json_string_value(json_object_get(c, "unique_until"));
    int rc = 0;
    if (json_is_integer(f)) {
        *ttl_ms = json_integer_value(f) * 1000;
        *until_start = u && strcmp(u, "start") == 0;
        /* the same jobtype and args, as Faktory's uniqueness; the queue is
         * the lock's code */
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        rc = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
                     EVP_DigestUpdate(ctx, job->name, strlen(job->name) + 1) &&
                     EVP_DigestUpdate(ctx, job->payload, job->payload_len) &&
                     EVP_DigestFinal_ex(ctx, md, &n) && n == 32
                 ? 1
                 : ER_EINTERNAL;
        EVP_MD_CTX_free(ctx);
        static const char hex[] = "0123456789abcdef";
        for (unsigned i = 0; rc == 1 && i < 32; i++) {
            key[2 * i] = hex[md[i] >> 4];
            key[2 * i + 1] = hex[md[i] & 15];
        }
        key[64] = '\0';
    }
    json_decref(c);
    return rc;
}

/* custom with expires_in turned into expires_at (a new reference), or
 * NULL with *err. */
static json_t *custom_expiry(json_t *custom, int64_t now, er_error *err)
{
    json_t *in = json_object_get(custom, "expires_in"), *at = json_object_get(custom, "expires_at");
    if (in && at) {
        er_error_set(err, ER_EINVAL, "custom", "give custom.expires_in or expires_at, not both");
        return NULL;
    }
    if (at) {
        int64_t ms;
        if (!json_is_string(at) || er_time_parse(json_string_value(at), &ms) < 0) {
            er_error_set(err, ER_EINVAL, "custom",
                         "custom.expires_at must be an RFC 3339 time");
            return NULL;
        }
    }
    if (!in)
        return json_incref(custom);
    if (!json_is_integer(in) || json_integer_value(in) < 1 ||
        json_integer_value(in) > ER_DELAY_MAX_MS / 1000) {
        er_error_set(err, ER_EINVAL, "custom", "custom.expires_in must be an integer 1..%lld",
                     ER_DELAY_MAX_MS / 1000);
        return NULL;
    }
    json_t *copy = json_copy(custom);
    char t[32];
    er_time_format(now + json_integer_value(in) * 1000, t);
    if (!copy || json_object_del(copy, "expires_in") < 0 ||
        json_object_set_new(copy, "expires_at", json_string(t)) < 0) {
        json_decref(copy);
        er_error_set(err, ER_ENOMEM, "", "out of memory");
        return NULL;
    }
    return copy;
}

int er_fk_job_expired(const er_job *job, int64_t now, char out[32])
{
    if (!job->custom || !strstr(job->custom, "\"expires_at\""))
        return 0; /* the common job is not parsed */
    json_t *c = json_loads(job->custom, 0, NULL);
    const char *at = json_string_value(json_object_get(c, "expires_at"));
    int64_t ms = 0;
    int expired = at && er_time_parse(at, &ms) == 0 && ms <= now;
    if (expired)
        snprintf(out, 32, "%s", at);
    json_decref(c);
    return expired;
}

int er_fk_job_spec(const json_t *obj, int64_t now, er_job_spec *sp, char **custom_buf,
                   er_error *err)
{
    memset(sp, 0, sizeof *sp);
    *custom_buf = NULL;
    if (!json_is_object(obj))
        return er_error_set(err, ER_EINVAL, "job", "a job must be a JSON object");
    sp->faktory = true;
    er_http_first_unknown(obj, member_known, &sp->unknown);
    json_t *q = json_object_get(obj, "queue");
    if (q && !json_is_null(q))
        er_http_spec_str(q, ER_SPEC_ABSENT, &sp->queue);
    else
        sp->queue = (er_spec_str){ER_SPEC_SET, "default", 7};
    er_http_spec_str(json_object_get(obj, "jobtype"), ER_SPEC_ABSENT, &sp->name);
    er_http_spec_str(json_object_get(obj, "jid"), ER_SPEC_ABSENT, &sp->id);
    er_http_spec_int(json_object_get(obj, "priority"), ER_SPEC_ABSENT, &sp->priority);
    json_t *at = json_object_get(obj, "at");
    if (!(json_is_string(at) && json_string_length(at) == 0)) /* "" means now */
        er_http_spec_str(at, ER_SPEC_ABSENT, &sp->run_at);

    json_t *retry = json_object_get(obj, "retry");
    if (!retry || json_is_null(retry)) {
        sp->max_attempts = (er_spec_int){ER_SPEC_SET, ER_FK_RETRY_DEFAULT + 1};
    } else if (!json_is_integer(retry)) {
        return er_error_set(err, ER_EINVAL, "retry", "retry must be an integer");
    } else {
        json_int_t r = json_integer_value(retry);
        /* -1: dead at once on failure; 0: no retry; N: N retries. */
        int64_t ma = r == -1 ? 1 : r >= 0 && r < INT32_MAX ? (int64_t)r + 1 : (int64_t)r;
        sp->max_attempts = (er_spec_int){ER_SPEC_SET, ma};
        sp->discard = r == 0;
    }

    json_t *rf = json_object_get(obj, "reserve_for");
    int64_t reserve_s = ER_FK_RESERVE_DEFAULT_MS / 1000;
    if (rf && !json_is_null(rf)) {
        if (!json_is_integer(rf))
            return er_error_set(err, ER_EINVAL, "reserve_for",
                                "reserve_for must be an integer (seconds)");
        json_int_t v = json_integer_value(rf);
        /* clamped, not refused, as Faktory does; the floor of the lease is
         * the server's setting (er_fk_lease_ms) */
        if (v < 1)
            v = 1;
        if (v > ER_FK_RESERVE_MAX_MS / 1000)
            v = ER_FK_RESERVE_MAX_MS / 1000;
        reserve_s = (int64_t)v;
    }
    sp->timeout_ms = (er_spec_int){ER_SPEC_SET, reserve_s * 1000};

    json_t *custom = json_object_get(obj, "custom");
    if (custom && !json_is_null(custom)) {
        if (!json_is_object(custom))
            return er_error_set(err, ER_EINVAL, "custom", "custom must be an object");
        er_spec_str unknown = {0};
        er_http_first_unknown(custom, custom_ok, &unknown);
        if (unknown.kind != ER_SPEC_ABSENT)
            return er_error_set(err, ER_EINVAL, "custom",
                                "custom.%.*s is a Faktory Enterprise feature errand does not "
                                "have", (int)unknown.n, unknown.s);
        if (custom_unique(custom, err) < 0)
            return err->code;
        json_t *kept = custom_expiry(custom, now, err);
        if (!kept)
            return err->code;
        *custom_buf = json_dumps(kept, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(kept);
        if (!*custom_buf)
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        sp->custom = (er_spec_str){ER_SPEC_SET, *custom_buf, strlen(*custom_buf)};
        er_http_spec_str(json_object_get(custom, "group"), ER_SPEC_ABSENT, &sp->group);
        er_http_spec_str(json_object_get(custom, "idempotency_key"), ER_SPEC_ABSENT,
                         &sp->idempotency_key);
        er_http_spec_str(json_object_get(custom, "trace_id"), ER_SPEC_ABSENT, &sp->trace_id);
    }

    json_t *args = json_object_get(obj, "args");
    if (args && !json_is_array(args))
        return er_error_set(err, ER_EINVAL, "args", "args must be an array");
    if (args) {
        char *text = json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
        if (!text)
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        sp->payload_buf = text;
        sp->payload = (er_spec_str){ER_SPEC_SET, text, strlen(text)};
    } else {
        sp->payload = (er_spec_str){ER_SPEC_SET, "[]", 2};
    }
    return 0;
}

void er_fk_error_rename(er_error *err)
{
    static const struct {
        const char *errand, *faktory;
    } names[] = {
        {"id", "jid"},           {"name", "jobtype"},         {"payload", "args"},
        {"run_at", "at"},        {"timeout_ms", "reserve_for"}, {"group", "custom.group"},
        {"trace_id", "custom.trace_id"}, {"idempotency_key", "custom.idempotency_key"},
        {"error.message", "message"}, {"error.backtrace", "backtrace"},
        {"error.errtype", "errtype"},
    };
    if (strcmp(err->field, "max_attempts") == 0) {
        snprintf(err->field, sizeof err->field, "retry");
        snprintf(err->message, sizeof err->message, "retry must be an integer -1..%d",
                 ER_MAX_ATTEMPTS_MAX - 1);
        return;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(err->field, names[i].errand) == 0) {
            /* core's messages begin with the field's name: say Faktory's */
            size_t n = strlen(names[i].errand);
            if (strncmp(err->message, names[i].errand, n) == 0 &&
                (err->message[n] == ' ' || err->message[n] == '\0')) {
                char rest[sizeof err->message];
                snprintf(rest, sizeof rest, "%s", err->message + n);
                snprintf(err->message, sizeof err->message, "%s%s", names[i].faktory, rest);
            }
            snprintf(err->field, sizeof err->field, "%s", names[i].faktory);
            return;
        }
}

int er_fk_failure_spec(const json_t *obj, er_failure_spec *sp, char **bt, er_error *err)
{
    memset(sp, 0, sizeof *sp);
    *bt = NULL;
    json_t *b = json_object_get(obj, "backtrace");
    if (b && !json_is_null(b)) {
        if (!(*bt = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY)))
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        sp->backtrace = (er_spec_str){ER_SPEC_SET, *bt, strlen(*bt)};
    }
    sp->kind = ER_SPEC_SET;
    sp->cls = (er_spec_str){ER_SPEC_SET, "transient", 9};
    er_http_spec_str(json_object_get(obj, "message"), ER_SPEC_ABSENT, &sp->message);
    er_http_spec_str(json_object_get(obj, "errtype"), ER_SPEC_ABSENT, &sp->errtype);
    return 0;
}

int64_t er_fk_lease_ms(const er_job *job, int64_t min_ms)
{
    int64_t ms = job->timeout_ms > 0 ? job->timeout_ms : ER_FK_RESERVE_DEFAULT_MS;
    if (ms < min_ms)
        ms = min_ms;
    if (ms > ER_FK_RESERVE_MAX_MS)
        ms = ER_FK_RESERVE_MAX_MS;
    return ms;
}

void er_fk_job_write(const er_job *job, int64_t lease_s, er_jsonw *w)
{
    er_jsonw_begin_object(w);
    er_jsonw_key(w, "jid");
    er_jsonw_str(w, job->id);
    er_jsonw_key(w, "jobtype");
    er_jsonw_str(w, job->name ? job->name : "");
    er_jsonw_key(w, "queue");
    er_jsonw_str(w, job->queue);
    er_jsonw_key(w, "args");
    const char *p = job->payload ? job->payload : "null";
    size_t n = job->payload ? job->payload_len : 4;
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    if (i < n && p[i] == '[') {
        er_jsonw_raw(w, p, n);
    } else {
        er_jsonw_begin_array(w);
        er_jsonw_raw(w, p, n);
        er_jsonw_end_array(w);
    }
    er_jsonw_key(w, "priority");
    er_jsonw_int(w, job->priority);
    /* one attempt is retry 0 when it is discarded on failure, else -1 */
    er_jsonw_key(w, "retry");
    er_jsonw_int(w, job->discard ? 0 : job->max_attempts > 1 ? job->max_attempts - 1 : -1);
    er_jsonw_key(w, "reserve_for");
    er_jsonw_int(w, lease_s);
    er_jsonw_key(w, "created_at");
    er_jsonw_time(w, job->created_at);
    er_jsonw_key(w, "enqueued_at");
    er_jsonw_time(w, job->run_at);
    bool idem = job->idempotency_key && strcmp(job->idempotency_key, job->id) != 0;
    if (job->custom) {
        er_jsonw_key(w, "custom");
        er_jsonw_raw(w, job->custom, strlen(job->custom));
    } else if (job->group || idem || job->trace_id) {
        er_jsonw_key(w, "custom");
        er_jsonw_begin_object(w);
        if (job->group) {
            er_jsonw_key(w, "group");
            er_jsonw_str(w, job->group);
        }
        if (idem) {
            er_jsonw_key(w, "idempotency_key");
            er_jsonw_str(w, job->idempotency_key);
        }
        if (job->trace_id) {
            er_jsonw_key(w, "trace_id");
            er_jsonw_str(w, job->trace_id);
        }
        er_jsonw_end_object(w);
    }
    er_jsonw_end_object(w);
}
