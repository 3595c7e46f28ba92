/* SPDX-License-Identifier: MIT
 *
 * Helpers shared by the shop's programs (shop.h): environment settings, JSON
 * log lines, HTTP calls to the fakes through libcurl, and a PostgreSQL
 * connection per thread, closed by a thread-key destructor.
 */
#include "shop.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static const char *prog = "shop";

const char *shop_env(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

long shop_env_long(const char *name, long def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end) {
        fprintf(stderr, "%s: %s=%s is not a whole number\n", prog, name, v);
        exit(2);
    }
    return n;
}

void shop_set_prog(const char *p)
{
    prog = p;
}

void shop_log(const char *level, const char *msg, const char *trace_id, const char *extra_json)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32], m[512];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    shop_json_escape(m, sizeof m, msg);
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"prog\":\"%s\",\"msg\":\"%s\"", when,
            ts.tv_nsec / 1000000, level, prog, m);
    if (trace_id && *trace_id)
        fprintf(stderr, ",\"trace_id\":\"%s\"", trace_id);
    if (extra_json && *extra_json)
        fprintf(stderr, ",%s", extra_json);
    fputs("}\n", stderr);
    pthread_mutex_unlock(&log_mu);
}

void shop_json_escape(char *dst, size_t size, const char *src)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p && o + 7 < size; p++) {
        if (*p == '"' || *p == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)*p;
        } else if (*p < 0x20) {
            o += (size_t)snprintf(dst + o, size - o, "\\u%04x", *p);
        } else {
            dst[o++] = (char)*p;
        }
    }
    dst[o] = '\0';
}

void shop_trace_id(char out[33])
{
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (unsigned char)((ts.tv_nsec >> (i % 4 * 8)) ^ (long)i * 131);
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* ---- HTTP ---- */

typedef struct buf {
    char *p;
    size_t n;
} buf;

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    buf *b = user;
    size_t len = size * nmemb;
    if (b->n + len > (1u << 20))
        return 0; /* a fake never answers a megabyte: refuse */
    char *np = realloc(b->p, b->n + len + 1);
    if (!np)
        return 0;
    memcpy(np + b->n, data, len);
    b->p = np;
    b->n += len;
    b->p[b->n] = '\0';
    return len;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user)
{
    shop_http *h = user;
    size_t len = size * nmemb;
    const char name[] = "retry-after:";
    if (len > sizeof name - 1 && strncasecmp(data, name, sizeof name - 1) == 0) {
        size_t i = sizeof name - 1, e = len;
        while (i < e && (data[i] == ' ' || data[i] == '\t'))
            i++;
        while (e > i && (data[e - 1] == '\r' || data[e - 1] == '\n' || data[e - 1] == ' '))
            e--;
        size_t n = e - i < sizeof h->retry_after - 1 ? e - i : sizeof h->retry_after - 1;
        memcpy(h->retry_after, data + i, n);
        h->retry_after[n] = '\0';
    }
    return len;
}

int shop_http_call(const char *method, const char *url, const char *body, const char *hdr1,
                   const char *hdr2, long timeout_ms, shop_http *out)
{
    memset(out, 0, sizeof *out);
    CURL *e = curl_easy_init();
    if (!e)
        return -1;
    buf b = {0};
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    if (hdr1)
        hl = curl_slist_append(hl, hdr1);
    if (hdr2)
        hl = curl_slist_append(hl, hdr2);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    if (body)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 2000 ? timeout_ms : 2000);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, out);
    if (curl_easy_perform(e) == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &out->status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(e);
    out->body = b.p ? b.p : strdup("");
    return out->body ? 0 : -1;
}

void shop_http_free(shop_http *h)
{
    free(h->body);
    h->body = NULL;
}

/* ---- PostgreSQL ---- */

static pthread_key_t db_key;
static pthread_once_t db_once = PTHREAD_ONCE_INIT;

static void db_close(void *c)
{
    PQfinish(c);
}

static void db_key_init(void)
{
    pthread_key_create(&db_key, db_close);
}

PGconn *shop_db(void)
{
    pthread_once(&db_once, db_key_init);
    PGconn *c = pthread_getspecific(db_key);
    if (c && PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE)
        return c;
    PQfinish(c);
    pthread_setspecific(db_key, NULL);
    c = PQconnectdb(shop_env("SHOP_DB", "postgres:///shop"));
    if (PQstatus(c) != CONNECTION_OK) {
        char m[300];
        snprintf(m, sizeof m, "cannot connect to the shop database: %s", PQerrorMessage(c));
        shop_log("error", m, NULL, NULL);
        PQfinish(c);
        return NULL;
    }
    pthread_setspecific(db_key, c);
    return c;
}

int shop_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) {
        char m[400];
        snprintf(m, sizeof m, "%.60s: %s", sql, PQerrorMessage(c));
        shop_log("error", m, NULL, NULL);
    }
    PQclear(r);
    return ok ? 0 : -1;
}
