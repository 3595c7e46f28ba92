/* SPDX-License-Identifier: MIT
 *
 * Outbox routes, job ids and envelopes (outbox.h).
 */
#include "core/outbox.h"

#include <jansson.h>
#include <stdarg.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/jsonw.h"

/* ---- routes ---------------------------------------------------------- */

/* Offsets into a text jansson accepted (valid JSON), so the scans below
 * need not check its syntax again. */

static int line_at(const char *text, size_t at)
{
    int line = 1;
    for (size_t k = 0; k < at; k++)
        line += text[k] == '\n';
    return line;
}

static size_t skip_ws(const char *t, size_t len, size_t p)
{
    while (p < len && (t[p] == ' ' || t[p] == '\t' || t[p] == '\n' || t[p] == '\r'))
        p++;
    return p;
}

/* After the string whose opening quote is at p. */
static size_t skip_string(const char *t, size_t len, size_t p)
{
    for (p++; p < len; p++) {
        if (t[p] == '\\')
            p++;
        else if (t[p] == '"')
            return p + 1;
    }
    return len;
}

/* After the value that starts at p. */
static size_t skip_value(const char *t, size_t len, size_t p)
{
    if (p < len && t[p] == '"')
        return skip_string(t, len, p);
    if (p < len && t[p] != '{' && t[p] != '[') {
        while (p < len && !strchr(",}] \t\n\r", t[p]))
            p++;
        return p;
    }
    int depth = 0;
    while (p < len) {
        if (t[p] == '"') {
            p = skip_string(t, len, p);
            continue;
        }
        if (t[p] == '{' || t[p] == '[')
            depth++;
        else if ((t[p] == '}' || t[p] == ']') && --depth == 0)
            return p + 1;
        p++;
    }
    return len;
}

/* The line where topic's member starts (*at: its key's offset): the
 * top-level key that decodes to topic; 0 when none does. */
static int topic_line(const char *text, size_t len, const char *topic, size_t *at)
{
    size_t p = skip_ws(text, len, 0), n = strlen(topic);
    if (p >= len || text[p] != '{')
        return 0;
    for (p = skip_ws(text, len, p + 1); p < len && text[p] == '"';) {
        size_t end = skip_string(text, len, p);
        json_t *k = json_loadb(text + p, end - p, JSON_DECODE_ANY, NULL);
        bool same = json_is_string(k) && json_string_length(k) == n &&
                    memcmp(json_string_value(k), topic, n) == 0;
        json_decref(k);
        if (same) {
            if (at)
                *at = p;
            return line_at(text, p);
        }
        p = skip_ws(text, len, end);
        if (p < len && text[p] == ':')
            p = skip_ws(text, len, p + 1);
        p = skip_ws(text, len, skip_value(text, len, p));
        if (p < len && text[p] == ',')
            p = skip_ws(text, len, p + 1);
        else
            break;
    }
    return 0;
}

/* The line where element i of topic's route list starts; else the
 * topic's line. */
static int route_line(const char *text, size_t len, const char *topic, size_t i)
{
    size_t p = 0;
    int line = topic_line(text, len, topic, &p);
    if (!line)
        return 0;
    p = skip_ws(text, len, skip_string(text, len, p));
    p = skip_ws(text, len, p < len && text[p] == ':' ? p + 1 : p);
    if (p >= len || text[p] != '[')
        return line;
    p = skip_ws(text, len, p + 1);
    for (size_t k = 0; p < len && text[p] != ']'; k++) {
        if (k == i)
            return line_at(text, p);
        size_t was = p;
        p = skip_ws(text, len, skip_value(text, len, p));
        if (p == was)
            break;
        if (p < len && text[p] == ',')
            p = skip_ws(text, len, p + 1);
    }
    return line;
}

static int fail_at(er_error *err, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail_at(er_error *err, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        return er_error_set(err, ER_EINVAL, "routes", "line %d: %s", line, msg);
    return er_error_set(err, ER_EINVAL, "routes", "%s", msg);
}

static bool topic_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > ER_OUTBOX_TOPIC_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

static int cmp_topic(const void *a, const void *b)
{
    return strcmp(((const er_outbox_topic *)a)->topic, ((const er_outbox_topic *)b)->topic);
}

static int read_route(const char *text, size_t len, const char *topic, size_t i, json_t *r,
                      er_outbox_route *out, er_error *err)
{
    char where[300];
    snprintf(where, sizeof where, "route %zu of topic \"%.200s\"", i + 1, topic);
    if (!json_is_object(r))
        return fail_at(err, route_line(text, len, topic, i), "%s must be an object {\"queue\", "
                       "\"name\"}", where);
    const char *key;
    json_t *v;
    json_object_foreach(r, key, v) {
        if (strcmp(key, "queue") != 0 && strcmp(key, "name") != 0)
            return fail_at(err, route_line(text, len, topic, i), "%s: unknown member \"%.100s\"",
                           where, key);
    }
    const char *field[2] = {"queue", "name"};
    char **dst[2] = {&out->queue, &out->name};
    for (int k = 0; k < 2; k++) {
        json_t *f = json_object_get(r, field[k]);
        const char *s = json_string_value(f);
        if (!s || !er_name_ok(s, strlen(s))) {
            char what[400];
            snprintf(what, sizeof what, "%s: %s", where, field[k]);
            return fail_at(err, route_line(text, len, topic, i),
                           "%s must be 1..128 bytes of [A-Za-z0-9_.:-]", what);
        }
        *dst[k] = strdup(s);
        if (!*dst[k])
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    return 0;
}

static int read_topic(const char *text, size_t len, const char *topic, json_t *list,
                      er_outbox_topic *t, er_error *err)
{
    if (!topic_ok(topic))
        return fail_at(err, topic_line(text, len, topic, NULL),
                       "topic \"%.200s\" must be 1..200 printable ASCII bytes", topic);
    size_t n = json_array_size(list);
    if (!json_is_array(list) || n < 1 || n > ER_OUTBOX_ROUTES_MAX)
        return fail_at(err, topic_line(text, len, topic, NULL),
                       "topic \"%.200s\" needs a list of 1..64 routes", topic);
    t->topic = strdup(topic);
    t->routes = calloc(n, sizeof *t->routes);
    if (!t->topic || !t->routes)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    for (size_t i = 0; i < n; i++) {
        int rc = read_route(text, len, topic, i, json_array_get(list, i), &t->routes[i], err);
        t->nroutes = i + 1;
        if (rc < 0)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->routes[j].queue, t->routes[i].queue) == 0 &&
                strcmp(t->routes[j].name, t->routes[i].name) == 0)
                return fail_at(err, route_line(text, len, topic, i),
                               "topic \"%.200s\" lists the route to queue \"%s\" twice", topic,
                               t->routes[i].queue);
    }
    return 0;
}

int er_outbox_routes_parse(const char *text, size_t len, er_outbox_routes *out, er_error *err)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return er_error_set(err, ER_EINVAL, "routes", "line %d: %s", jerr.line, jerr.text);
    int rc = 0;
    size_t n = json_object_size(root);
    if (!json_is_object(root))
        rc = er_error_set(err, ER_EINVAL, "routes",
                          "line 1: the routes must be an object of topic: [routes]");
    else if (n < 1 || n > ER_OUTBOX_TOPICS_MAX)
        rc = er_error_set(err, ER_EINVAL, "routes", "line 1: the routes need 1..%d topics",
                          ER_OUTBOX_TOPICS_MAX);
    else if (!(out->topics = calloc(n, sizeof *out->topics)))
        rc = er_error_set(err, ER_ENOMEM, "", "out of memory");
    const char *topic;
    json_t *list;
    if (rc == 0) {
        json_object_foreach(root, topic, list) {
            rc = read_topic(text, len, topic, list, &out->topics[out->ntopics], err);
            out->ntopics++;
            if (rc < 0)
                break;
        }
    }
    json_decref(root);
    if (rc < 0) {
        er_outbox_routes_fini(out);
        return rc;
    }
    qsort(out->topics, out->ntopics, sizeof *out->topics, cmp_topic);
    return 0;
}

void er_outbox_routes_fini(er_outbox_routes *r)
{
    for (size_t i = 0; r && i < r->ntopics; i++) {
        for (size_t j = 0; j < r->topics[i].nroutes; j++) {
            free(r->topics[i].routes[j].queue);
            free(r->topics[i].routes[j].name);
        }
        free(r->topics[i].routes);
        free(r->topics[i].topic);
    }
    if (r) {
        free(r->topics);
        memset(r, 0, sizeof *r);
    }
}

const er_outbox_topic *er_outbox_routes_find(const er_outbox_routes *r, const char *topic)
{
    er_outbox_topic key = {.topic = (char *)topic};
    return r->ntopics ? bsearch(&key, r->topics, r->ntopics, sizeof key, cmp_topic) : NULL;
}

/* ---- jobs ------------------------------------------------------------ */

static bool uuid_ok(const char *s)
{
    if (strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !strchr("0123456789abcdefABCDEF", s[i]))
            return false;
    }
    return true;
}

int er_outbox_job_id(const char *event_id, const char *queue, const char *name,
                     char out[ER_OUTBOX_JOB_ID_LEN + 1], er_error *err)
{
    if (!uuid_ok(event_id))
        return er_error_set(err, ER_EINVAL, "id", "the event id must be a uuid");
    size_t nq = strlen(queue), nn = strlen(name);
    char *in = malloc(nq + 1 + nn);
    if (!in)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    memcpy(in, queue, nq);
    in[nq] = '\n';
    memcpy(in + nq + 1, name, nn);
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    int ok = EVP_Digest(in, nq + 1 + nn, d, &dlen, EVP_sha256(), NULL);
    free(in);
    if (ok != 1 || dlen < 8)
        return er_error_set(err, ER_EINTERNAL, "", "SHA-256 failed");
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "outbox:", 7);
    for (int i = 0; i < 36; i++)
        out[7 + i] = (char)(event_id[i] >= 'A' && event_id[i] <= 'F' ? event_id[i] + 32
                                                                      : event_id[i]);
    out[43] = ':';
    for (int i = 0; i < 8; i++) {
        out[44 + 2 * i] = hex[d[i] >> 4];
        out[45 + 2 * i] = hex[d[i] & 15];
    }
    out[ER_OUTBOX_JOB_ID_LEN] = '\0';
    return 0;
}

static er_spec_str str_of(const char *s)
{
    er_spec_str v = {0};
    if (s) {
        v.kind = ER_SPEC_SET;
        v.s = s;
        v.n = strlen(s);
    }
    return v;
}

int er_outbox_job(const er_outbox_event *ev, const er_outbox_route *rt, const er_job_limits *lim,
                  int64_t now, er_rand *r, er_job *job, er_outbox_failure *why, er_error *err)
{
    *why = ER_OUTBOX_RETRY;
    if (!ev->payload_is_object) {
        *why = ER_OUTBOX_SET_ASIDE;
        return er_error_set(err, ER_EINVAL, "payload", "the event's payload must be a JSON object");
    }
    char id[ER_OUTBOX_JOB_ID_LEN + 1];
    int rc = er_outbox_job_id(ev->id, rt->queue, rt->name, id, err);
    if (rc < 0) {
        *why = ER_OUTBOX_SET_ASIDE;
        return rc;
    }
    char event[37]; /* the event id as the job id spells it (lowercase) */
    memcpy(event, id + 7, 36);
    event[36] = '\0';
    er_buf b;
    er_buf_init(&b, lim->payload_max + 1024);
    er_buf_adds(&b, "{\"event_id\":\"");
    er_buf_adds(&b, event);
    er_buf_adds(&b, "\",\"topic\":");
    er_json_str(&b, ev->topic);
    er_buf_adds(&b, ",\"trace_id\":");
    if (ev->trace_id)
        er_json_str(&b, ev->trace_id);
    else
        er_buf_adds(&b, "null");
    er_buf_adds(&b, ",\"payload\":");
    er_buf_adds(&b, ev->payload);
    er_buf_adds(&b, "}");
    if (b.err) {
        int berr = b.err;
        er_buf_fini(&b);
        if (berr == ER_ENOMEM)
            return er_error_set(err, ER_ENOMEM, "", "out of memory");
        return er_error_set(err, ER_ETOOBIG, "payload",
                            "the event's envelope is larger than --payload-max (%zu bytes)",
                            lim->payload_max);
    }
    size_t plen = 0;
    char *payload = er_buf_take(&b, &plen);
    er_job_spec sp = {
        .queue = str_of(rt->queue),
        .name = str_of(rt->name),
        .payload = {.kind = ER_SPEC_SET, .s = payload, .n = plen},
        .id = str_of(id),
        .trace_id = str_of(ev->trace_id),
        /* the event id, not the job id: the same on every route */
        .idempotency_key = str_of(ev->idempotency_key ? ev->idempotency_key : event),
        .payload_buf = payload,
    };
    rc = er_job_validate(&sp, lim, now, r, job, err);
    er_job_spec_fini(&sp);
    return rc;
}

int64_t er_outbox_retry_delay_ms(int attempts)
{
    int64_t d = 1000;
    for (int i = 1; i < attempts && d < 300000; i++)
        d *= 2;
    return d < 300000 ? d : 300000;
}
