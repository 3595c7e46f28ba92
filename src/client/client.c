/* SPDX-License-Identifier: MIT
 *
 * liberrand's HTTP client (include/errand/errand.h): one libcurl easy handle
 * per client, reused so the connection stays open between calls, and
 * jansson for building requests and reading replies. It owns the client's
 * last-error record; it never prints, exits, or touches server internals.
 */
#include "client/client_int.h"
#include "util/buf.h"
#include "util/err.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CONNECT_MS 10000L
#define DEFAULT_TOTAL_MS 120000L /* above the server's longest long-poll (60 s) */
#define DEFAULT_MAX_REPLY ((size_t)64 << 20)
#define TOKEN_MAX 4096

struct errand_client {
    CURL *curl;
    char *base;                    /* server URL without trailing '/' */
    struct curl_slist *hdr_body;   /* headers for a request with a JSON body */
    struct curl_slist *hdr_nobody; /* the same without Content-Type */
    long connect_ms, total_ms;
    size_t max_reply;
    char errbuf[CURL_ERROR_SIZE];
    long last_status;
    errand_error last; /* its strings point at the buffers below */
    char code_name[64];
    char message[512];
    char field[128];
};

/* ---- errors ----------------------------------------------------------- */

/* liberrand's codes are util's (whose table names them on the wire). */
#define SAME(e) ((int)ERRAND_##e == (int)ER_##e)
_Static_assert(SAME(EINVAL) && SAME(EAUTH) && SAME(EPERM) && SAME(ENOTFOUND) && SAME(ESTALE) &&
                   SAME(ECONFLICT) && SAME(ETOOBIG) && SAME(ERATE) && SAME(EUNAVAIL) &&
                   SAME(EFULL) && SAME(ENOMEM) && SAME(EINTERNAL),
               "errand.h codes match util/err.h");
#undef SAME

static const struct {
    int code;
    const char *text;
} codes[] = {
    {ERRAND_OK, "success"},
    {ERRAND_EINVAL, "invalid argument"},
    {ERRAND_EAUTH, "missing or unknown token"},
    {ERRAND_EPERM, "permission denied"},
    {ERRAND_ENOTFOUND, "not found"},
    {ERRAND_ESTALE, "lease lost"},
    {ERRAND_ECONFLICT, "conflict"},
    {ERRAND_ETOOBIG, "too large"},
    {ERRAND_ERATE, "rate limited"},
    {ERRAND_EUNAVAIL, "server unavailable, nothing was written"},
    {ERRAND_EFULL, "server disk full, nothing was written"},
    {ERRAND_ENOMEM, "out of memory"},
    {ERRAND_EINTERNAL, "internal error"},
    {ERRAND_ECONNECT, "cannot reach the server"},
};
#define NCODES (sizeof codes / sizeof codes[0])

const char *errand_strerror(int code)
{
    for (size_t i = 0; i < NCODES; i++)
        if (codes[i].code == code)
            return codes[i].text;
    return "unknown error";
}

/* The API's code string: the server's own table, and two of ours. */
static const char *code_name(int code)
{
    if (code == ERRAND_OK)
        return "";
    if (code == ERRAND_ECONNECT)
        return "connect_failed"; /* never on the wire */
    return er_error_code_name(code);
}

/* The code for a server error reply: from its "code" string when known,
 * otherwise from the HTTP status. */
static int code_from_reply(const char *name, long status)
{
    if (name) {
        /* EFULL and ENOMEM share "unavailable" on the wire: read it as EUNAVAIL. */
        for (size_t i = 1; i < NCODES; i++)
            if (codes[i].code != ERRAND_EFULL && codes[i].code != ERRAND_ENOMEM &&
                strcmp(code_name(codes[i].code), name) == 0)
                return codes[i].code;
    }
    switch (status) {
    case 400: return ERRAND_EINVAL;
    case 401: return ERRAND_EAUTH;
    case 403: return ERRAND_EPERM;
    case 404: return ERRAND_ENOTFOUND;
    case 409: return ERRAND_ECONFLICT;
    case 413: return ERRAND_ETOOBIG;
    case 429: return ERRAND_ERATE;
    case 503: return ERRAND_EUNAVAIL;
    default: return status >= 500 ? ERRAND_EINTERNAL : ERRAND_EINVAL;
    }
}

void er_client_clear(errand_client *c)
{
    c->last_status = 0;
    c->code_name[0] = c->message[0] = c->field[0] = '\0';
    c->last.code = 0;
    c->last.http_status = 0;
}

/* Records an error of the last call and returns code. name NULL: the
 * code's own name. The message is cut to one line. */
static int set_error(errand_client *c, int code, const char *name, const char *field,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int vset_error(errand_client *c, int code, const char *name, const char *field,
                      const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

static int vset_error(errand_client *c, int code, const char *name, const char *field,
                      const char *fmt, va_list ap)
{
    c->last.code = code;
    c->last.http_status = c->last_status;
    snprintf(c->code_name, sizeof c->code_name, "%s", name ? name : code_name(code));
    snprintf(c->field, sizeof c->field, "%s", field ? field : "");
    vsnprintf(c->message, sizeof c->message, fmt, ap);
    for (char *p = c->message; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return code;
}

static int set_error(errand_client *c, int code, const char *name, const char *field,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vset_error(c, code, name, field, fmt, ap);
    va_end(ap);
    return rc;
}

int er_client_error(errand_client *c, int code, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vset_error(c, code, NULL, field, fmt, ap);
    va_end(ap);
    return rc;
}

const errand_error *errand_last_error(const errand_client *c)
{
    return c ? &c->last : NULL;
}

long errand_last_status(const errand_client *c)
{
    return c ? c->last_status : 0;
}

void errand_free(void *p)
{
    free(p);
}

/* ---- client ------------------------------------------------------------ */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

/* Once per process; never cleaned up, since the application may use libcurl too. */
static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            return true;
    return false;
}

static bool append_header(struct curl_slist **list, const char *h)
{
    struct curl_slist *n = curl_slist_append(*list, h);
    if (!n)
        return false;
    *list = n;
    return true;
}

/* Builds the two header lists; false on out of memory. */
static bool build_headers(errand_client *c, const char *token)
{
    char auth[TOKEN_MAX + 32] = "";
    if (token && *token)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    struct curl_slist **lists[2] = {&c->hdr_body, &c->hdr_nobody};
    for (int i = 0; i < 2; i++) {
        if (!append_header(lists[i], "Accept: application/json"))
            return false;
        /* No "Expect: 100-continue" round trip before large bodies. */
        if (!append_header(lists[i], "Expect:"))
            return false;
        if (auth[0] && !append_header(lists[i], auth))
            return false;
    }
    return append_header(&c->hdr_body, "Content-Type: application/json");
}

int errand_client_new(const char *server_url, const char *token, errand_client **out)
{
    if (!out || !server_url)
        return ERRAND_EINVAL;
    if ((strncmp(server_url, "http://", 7) != 0 && strncmp(server_url, "https://", 8) != 0) ||
        has_ctl(server_url) || strchr(server_url, ' '))
        return ERRAND_EINVAL;
    if (token && (strlen(token) > TOKEN_MAX || has_ctl(token)))
        return ERRAND_EINVAL;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return ERRAND_ENOMEM; /* curl_global_init fails only for lack of resources */

    errand_client *c = calloc(1, sizeof *c);
    if (!c)
        return ERRAND_ENOMEM;
    c->last.code_name = c->code_name;
    c->last.message = c->message;
    c->last.field = c->field;
    c->connect_ms = DEFAULT_CONNECT_MS;
    c->total_ms = DEFAULT_TOTAL_MS;
    c->max_reply = DEFAULT_MAX_REPLY;

    size_t n = strlen(server_url);
    while (n > 0 && server_url[n - 1] == '/')
        n--;
    c->base = strndup(server_url, n);
    c->curl = curl_easy_init();
    if (!c->base || !c->curl || !build_headers(c, token)) {
        errand_client_free(c);
        return ERRAND_ENOMEM;
    }
    CURL *h = c->curl;
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* safe in threaded applications */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_USERAGENT, "liberrand/" ERRAND_VERSION_STRING);
    *out = c;
    return 0;
}

void errand_client_free(errand_client *c)
{
    if (!c)
        return;
    if (c->curl)
        curl_easy_cleanup(c->curl);
    curl_slist_free_all(c->hdr_body);
    curl_slist_free_all(c->hdr_nobody);
    free(c->base);
    free(c);
}

int errand_client_set_timeouts(errand_client *c, long connect_ms, long total_ms)
{
    if (!c || connect_ms < 0 || total_ms < 0)
        return ERRAND_EINVAL;
    c->connect_ms = connect_ms;
    c->total_ms = total_ms;
    return 0;
}

int errand_client_set_max_reply(errand_client *c, size_t bytes)
{
    if (!c || bytes == 0)
        return ERRAND_EINVAL;
    c->max_reply = bytes;
    return 0;
}

/* ---- one exchange ------------------------------------------------------ */

/* Takes the reply body into an er_buf bounded by the client's max_reply. */
static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
    er_buf *b = arg;
    size_t n = size * nmemb;
    if (er_buf_add(b, data, n) < 0)
        return 0; /* aborts the transfer; b->err says why */
    return n;
}

static bool method_ok(const char *m)
{
    size_t n = strlen(m);
    if (n == 0 || n > 16)
        return false;
    for (size_t i = 0; i < n; i++)
        if (m[i] < 'A' || m[i] > 'Z')
            return false;
    return true;
}

/* Reads the server's {"error": {...}} (if any) into the last error. */
static void record_reply_error(errand_client *c, const char *body, size_t len)
{
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *e = json_is_object(root) ? json_object_get(root, "error") : NULL;
    const char *name = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *field = json_string_value(json_object_get(e, "field"));
    int code = code_from_reply(name, c->last_status);
    if (msg)
        set_error(c, code, name, field, "%s", msg);
    else
        set_error(c, code, name, field, "HTTP %ld", c->last_status);
    json_decref(root);
}

/* errand_request with the reply's length; see er_client_call_text. */
static int request_len(errand_client *c, const char *method, const char *path,
                       const char *json_body, long *status, char **body_out, size_t *len);

int errand_request(errand_client *c, const char *method, const char *path,
                   const char *json_body, long *status, char **body_out)
{
    size_t len = 0;
    return request_len(c, method, path, json_body, status, body_out, &len);
}

static int request_len(errand_client *c, const char *method, const char *path,
                       const char *json_body, long *status, char **body_out, size_t *len)
{
    if (!c)
        return ERRAND_EINVAL;
    er_client_clear(c);
    if (!method || !method_ok(method))
        return set_error(c, ERRAND_EINVAL, NULL, "method", "method must be an HTTP verb");
    if (!path || path[0] != '/' || has_ctl(path) || strchr(path, ' '))
        return set_error(c, ERRAND_EINVAL, NULL, "path",
                         "path must start with '/' and be percent-encoded");
    bool get = strcmp(method, "GET") == 0;
    if (get && json_body)
        return set_error(c, ERRAND_EINVAL, NULL, "json_body", "a GET request takes no body");

    size_t blen = strlen(c->base), plen = strlen(path);
    char *url = malloc(blen + plen + 1);
    if (!url)
        return set_error(c, ERRAND_ENOMEM, NULL, "", "out of memory");
    memcpy(url, c->base, blen);
    memcpy(url + blen, path, plen + 1);

    er_buf buf;
    er_buf_init(&buf, c->max_reply);
    CURL *h = c->curl;
    c->errbuf[0] = '\0';
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->connect_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->total_ms);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, json_body ? c->hdr_body : c->hdr_nobody);
    if (get) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, NULL);
    } else {
        /* POST semantics carry the body; another verb replaces the name. */
        const char *b = json_body ? json_body : "";
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, b);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(b));
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, strcmp(method, "POST") == 0 ? NULL : method);
    }
    CURLcode rc = curl_easy_perform(h);
    free(url);
    /* The handle keeps no pointer to our stack or to the caller's body. */
    curl_easy_setopt(h, CURLOPT_WRITEDATA, NULL);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);

    if (rc != CURLE_OK) {
        int berr = buf.err;
        er_buf_fini(&buf);
        if (berr == ER_ETOOBIG)
            return set_error(c, ERRAND_ETOOBIG, NULL, "", "reply larger than %zu bytes",
                             c->max_reply);
        if (berr == ER_ENOMEM || rc == CURLE_OUT_OF_MEMORY)
            return set_error(c, ERRAND_ENOMEM, NULL, "", "out of memory");
        if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL)
            return set_error(c, ERRAND_EINVAL, NULL, "server_url", "bad server URL %s: %s",
                             c->base, c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc));
        return set_error(c, ERRAND_ECONNECT, NULL, "", "cannot reach %s: %s", c->base,
                         c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc));
    }
    long st = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    c->last_status = st;
    c->last.http_status = st;
    size_t blen_out = 0;
    char *body = er_buf_take(&buf, &blen_out);
    er_buf_fini(&buf);
    if (!body)
        return set_error(c, ERRAND_ENOMEM, NULL, "", "out of memory");
    if (st >= 400)
        record_reply_error(c, body, blen_out);
    if (status)
        *status = st;
    *len = blen_out;
    if (body_out)
        *body_out = body;
    else
        free(body);
    return 0;
}

/* ---- typed helpers ----------------------------------------------------- */

int er_client_call_text(errand_client *c, const char *method, const char *path, const char *body,
                        char **text, size_t *len)
{
    long st = 0;
    char *t = NULL;
    size_t n = 0;
    int rc = request_len(c, method, path, body, &st, &t, &n);
    if (rc < 0)
        return rc;
    if (st >= 400) {
        free(t);
        return c->last.code;
    }
    if (st < 200 || st > 299) {
        free(t);
        return set_error(c, ERRAND_EINTERNAL, NULL, "", "unexpected HTTP status %ld", st);
    }
    *text = t;
    *len = n;
    return 0;
}

/* Sends a request and parses a 2xx reply into *root (new reference).
 * Returns 0 or the error code (already recorded). */
int er_client_call_json(errand_client *c, const char *method, const char *path, const char *body,
                     json_t **root)
{
    char *text = NULL;
    size_t n = 0;
    int rc = er_client_call_text(c, method, path, body, &text, &n);
    if (rc < 0)
        return rc;
    json_error_t jerr;
    *root = json_loads(text, 0, &jerr);
    free(text);
    if (!*root)
        return set_error(c, ERRAND_EINTERNAL, NULL, "", "reply is not JSON: %s", jerr.text);
    return 0;
}

/* Dumps root (key NULL) or its member `key` as owned text into *out; takes root. */
int er_client_take_json(errand_client *c, json_t *root, const char *key, char **out)
{
    json_t *v = key ? json_object_get(root, key) : root;
    int rc = 0;
    if (!v) {
        rc = set_error(c, ERRAND_EINTERNAL, NULL, "", "reply has no \"%s\"",
                       key ? key : "value");
    } else {
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
            rc = set_error(c, ERRAND_ENOMEM, NULL, "", "out of memory");
        else
            *out = text;
    }
    json_decref(root);
    return rc;
}

int er_client_need(errand_client *c, const char *s, const char *field)
{
    if (!s || !*s)
        return set_error(c, ERRAND_EINVAL, NULL, field, "%s is required", field);
    return 0;
}

/* prefix + percent-encoded seg + suffix, owned; NULL on out of memory. */
char *er_client_path(errand_client *c, const char *prefix, const char *seg, const char *suffix)
{
    char *esc = curl_easy_escape(c->curl, seg, 0);
    if (!esc)
        return NULL;
    size_t n = strlen(prefix) + strlen(esc) + strlen(suffix) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s%s%s", prefix, esc, suffix);
    curl_free(esc);
    return p;
}

/* GET/POST prefix+seg+suffix and hand back member `key` (NULL: all). */
int er_client_simple(errand_client *c, const char *method, const char *prefix, const char *seg,
                       const char *suffix, const char *key, char **out)
{
    char *path = er_client_path(c, prefix, seg, suffix);
    if (!path)
        return set_error(c, ERRAND_ENOMEM, NULL, "", "out of memory");
    /* A POST sends "{}" so a server that reads a body finds a valid one. */
    json_t *root = NULL;
    int rc = er_client_call_json(c, method, path, strcmp(method, "GET") == 0 ? NULL : "{}", &root);
    free(path);
    if (rc < 0)
        return rc;
    return er_client_take_json(c, root, key, out);
}

int errand_enqueue(errand_client *c, const char *queue, const char *name,
                   const char *payload_json, const char *options_json, char **job_json_out)
{
    if (!c)
        return ERRAND_EINVAL;
    er_client_clear(c);
    if (!job_json_out)
        return set_error(c, ERRAND_EINVAL, NULL, "job_json_out", "job_json_out is required");
    int rc = er_client_need(c, queue, "queue");
    if (rc == 0)
        rc = er_client_need(c, name, "name");
    if (rc < 0)
        return rc;

    json_error_t jerr;
    json_t *body = json_pack("{s:s}", "name", name);
    if (!body)
        return set_error(c, ERRAND_EINVAL, NULL, "name", "name must be UTF-8 text");
    if (payload_json) {
        json_t *p = json_loads(payload_json, JSON_DECODE_ANY, &jerr);
        if (!p) {
            json_decref(body);
            return set_error(c, ERRAND_EINVAL, NULL, "payload",
                             "payload is not valid JSON: %s (at character %d)", jerr.text,
                             jerr.position);
        }
        json_object_set_new(body, "payload", p);
    }
    if (options_json) {
        json_t *o = json_loads(options_json, 0, &jerr);
        if (!json_is_object(o)) {
            json_decref(o);
            json_decref(body);
            return set_error(c, ERRAND_EINVAL, NULL, "options",
                             "options must be a JSON object%s%s", o ? "" : ": ",
                             o ? "" : jerr.text);
        }
        const char *bad = json_object_get(o, "name")      ? "options.name"
                          : json_object_get(o, "payload") ? "options.payload"
                                                          : NULL;
        if (bad) {
            json_decref(o);
            json_decref(body);
            return set_error(c, ERRAND_EINVAL, NULL, bad,
                             "%s is not allowed: pass it as its own argument", bad);
        }
        json_object_update(body, o);
        json_decref(o);
    }
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    char *path = er_client_path(c, "/v1/queues/", queue, "/jobs");
    if (!text || !path) {
        free(text);
        free(path);
        return set_error(c, ERRAND_ENOMEM, NULL, "", "out of memory");
    }
    json_t *root = NULL;
    rc = er_client_call_json(c, "POST", path, text, &root);
    free(text);
    free(path);
    if (rc < 0)
        return rc;
    json_t *tomb = json_object_get(root, "tombstone");
    return er_client_take_json(c, root, json_is_object(tomb) ? "tombstone" : "job", job_json_out);
}

int errand_job_get(errand_client *c, const char *id, char **job_json_out)
{
    if (!c)
        return ERRAND_EINVAL;
    er_client_clear(c);
    if (!job_json_out)
        return set_error(c, ERRAND_EINVAL, NULL, "job_json_out", "job_json_out is required");
    int rc = er_client_need(c, id, "id");
    if (rc < 0)
        return rc;
    return er_client_simple(c, "GET", "/v1/jobs/", id, "", "job", job_json_out);
}

int errand_queues(errand_client *c, char **json_out)
{
    if (!c)
        return ERRAND_EINVAL;
    er_client_clear(c);
    if (!json_out)
        return set_error(c, ERRAND_EINVAL, NULL, "json_out", "json_out is required");
    json_t *root = NULL;
    int rc = er_client_call_json(c, "GET", "/v1/queues", NULL, &root);
    if (rc < 0)
        return rc;
    return er_client_take_json(c, root, NULL, json_out);
}

int errand_dead_list(errand_client *c, const char *queue, int limit, char **json_out)
{
    if (!c)
        return ERRAND_EINVAL;
    er_client_clear(c);
    if (!json_out)
        return set_error(c, ERRAND_EINVAL, NULL, "json_out", "json_out is required");
    if (limit < 0)
        return set_error(c, ERRAND_EINVAL, NULL, "limit", "limit must be 0 or more");
    char *esc = NULL;
    if (queue && *queue && !(esc = curl_easy_escape(c->curl, queue, 0)))
        return set_error(c, ERRAND_ENOMEM, NULL, "", "out of memory");
    char path[64 + 3 * 1024];
    int n = snprintf(path, sizeof path, "/v1/dead%s%s%s%s", esc || limit ? "?" : "",
                     esc ? "queue=" : "", esc ? esc : "", esc && limit ? "&" : "");
    if (limit && n >= 0 && (size_t)n < sizeof path)
        n += snprintf(path + n, sizeof path - (size_t)n, "limit=%d", limit);
    curl_free(esc);
    if (n < 0 || (size_t)n >= sizeof path)
        return set_error(c, ERRAND_EINVAL, NULL, "queue", "queue name is too long");
    json_t *root = NULL;
    int rc = er_client_call_json(c, "GET", path, NULL, &root);
    if (rc < 0)
        return rc;
    return er_client_take_json(c, root, NULL, json_out);
}

int errand_dead_redrive(errand_client *c, const char *id, char **json_out)
{
    if (!c)
        return ERRAND_EINVAL;
    er_client_clear(c);
    if (!json_out)
        return set_error(c, ERRAND_EINVAL, NULL, "json_out", "json_out is required");
    int rc = er_client_need(c, id, "id");
    if (rc < 0)
        return rc;
    return er_client_simple(c, "POST", "/v1/dead/", id, "/redrive", "job", json_out);
}
