/* SPDX-License-Identifier: MIT
 *
 * Transcript tests of the Faktory port: each test starts a real
 * `errand serve --faktory-listen 127.0.0.1:0` on a temporary SQLite file
 * (on PostgreSQL, a schema per test, with ERRAND_FK_TRANSCRIPT_PG=1 and
 * ERRAND_TEST_PG_URL: CTest's faktory.transcript_pg), reads the
 * bound addresses from its log, and speaks the raw protocol over sockets;
 * what the HTTP API shows of the jobs is read over HTTP. Replies are read
 * with the frontend's own reply reader (src/server/faktory/proto.h).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/faktory/proto.h"
#include "../store/pg_test_url.h"

#define TOKEN_ADMIN "admin-token-0123456789"
#define TOKEN_WORKER "worker-token-0123456789"
#define TOKEN_PRODUCER "producer-token-0123456789"

typedef struct srv {
    pid_t pid;
    char dir[64];
    int fk_port, http_port;
    char pg_schema[64];
} srv;

static srv S;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The port of the log line whose msg is `msg`, or 0. */
static int port_in_log(const char *path, const char *msg)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[4096];
    int port = 0;
    while (!port && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *m = json_string_value(json_object_get(o, "msg"));
        const char *l = json_string_value(json_object_get(o, "listen"));
        if (m && l && strcmp(m, msg) == 0 && strrchr(l, ':'))
            port = (int)strtol(strrchr(l, ':') + 1, NULL, 10);
        json_decref(o);
    }
    fclose(f);
    return port;
}

/* Starts errand serve with extra flags (NULL-terminated). */
static void start_with(const char *store, const char *first, ...)
{
    const char *bin = getenv("ERRAND_BIN");
    cr_assert(bin, "ERRAND_BIN is not set");
    snprintf(S.dir, sizeof S.dir, "/tmp/errand-fk-XXXXXX");
    cr_assert(mkdtemp(S.dir));
    char db[512], logp[128];
    snprintf(db, sizeof db, "sqlite:%s/e.db", S.dir);
    const char *all_pg = getenv("ERRAND_FK_TRANSCRIPT_PG");
    if (!store && all_pg && strcmp(all_pg, "1") == 0) {
        /* the whole transcript on PostgreSQL, a schema per test */
        const char *base = getenv("ERRAND_TEST_PG_URL");
        if (!base || !*base)
            cr_skip_test("ERRAND_TEST_PG_URL is not set");
        snprintf(S.pg_schema, sizeof S.pg_schema, "fk_transcript_%d", (int)getpid());
        snprintf(db, sizeof db, "%s%sschema=%s", base, strchr(base, '?') ? "&" : "?",
                 S.pg_schema);
    }
    snprintf(logp, sizeof logp, "%s/log", S.dir);
    const char *argv[40] = {bin, "serve", "--listen", "127.0.0.1:0", "--faktory-listen",
                            "127.0.0.1:0", "--store", store ? store : db,
                            "--faktory-min-reserve", "1s", "--maintenance-interval", "20ms"};
    int n = 12;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 38; a = va_arg(ap, const char *))
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    S.pid = fork();
    cr_assert(S.pid >= 0);
    if (S.pid == 0) {
        /* the server dies with the test, and holds none of its pipes */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        FILE *lf = freopen(logp, "w", stderr);
        FILE *nf = freopen("/dev/null", "w", stdout);
        (void)lf;
        (void)nf;
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 600 && (!S.fk_port || !S.http_port); i++) {
        int st;
        cr_assert_eq(waitpid(S.pid, &st, WNOHANG), 0, "errand serve exited early");
        S.fk_port = port_in_log(logp, "faktory listening");
        S.http_port = port_in_log(logp, "listening");
        if (!S.fk_port || !S.http_port)
            usleep(50000);
    }
    cr_assert(S.fk_port && S.http_port, "errand serve did not log its ports");
}

static void start(void)
{
    start_with(NULL, NULL);
}

static void stop(void)
{
    if (S.pid > 0) {
        kill(S.pid, SIGTERM);
        int st;
        waitpid(S.pid, &st, 0);
        S.pid = 0;
    }
    if (S.pg_schema[0])
        pg_test_drop_schema(S.pg_schema);
    if (S.dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", S.dir);
        int rc = system(cmd);
        (void)rc;
    }
}

/* ---- sockets ---- */

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; /* the server may close first: what it read is what counts */
        s += w;
        n -= (size_t)w;
    }
}

typedef struct conn {
    int fd;
    char buf[1 << 16];
    size_t len;
    char reply[1 << 16]; /* the last reply's text, NUL-terminated */
    er_fk_reply_kind kind;
} conn;

/* Reads one reply (15 s at most): 1, or 0 at EOF. */
static int read_reply(conn *c)
{
    for (;;) {
        er_fk_reply r;
        size_t used;
        int rc = er_fk_reply_next(c->buf, c->len, sizeof c->buf, sizeof c->buf, &r, &used);
        cr_assert_geq(rc, 0, "bad reply bytes: %.*s", (int)c->len, c->buf);
        if (rc == 1) {
            c->kind = r.kind;
            memcpy(c->reply, r.data ? r.data : "", r.len);
            c->reply[r.len] = '\0';
            memmove(c->buf, c->buf + used, c->len - used);
            c->len -= used;
            return 1;
        }
        struct pollfd p = {c->fd, POLLIN, 0};
        cr_assert_eq(poll(&p, 1, 15000), 1, "no reply within 15 s");
        ssize_t n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
        if (n <= 0)
            return 0;
        c->len += (size_t)n;
    }
}

/* True when the server closes the connection (within 15 s) with nothing
 * more to read. */
static bool closed(conn *c)
{
    struct pollfd p = {c->fd, POLLIN, 0};
    if (poll(&p, 1, 15000) != 1)
        return false;
    char b[16];
    /* a reset counts: the server closed with our excess bytes unread */
    return recv(c->fd, b, sizeof b, 0) <= 0 && c->len == 0;
}

static conn *fk_open(void)
{
    conn *c = calloc(1, sizeof *c);
    c->fd = dial(S.fk_port);
    cr_assert_eq(read_reply(c), 1);
    cr_assert_eq(c->kind, ER_FK_R_SIMPLE);
    cr_assert_eq(strncmp(c->reply, "HI {", 4), 0, "greeting: %s", c->reply);
    return c;
}

static void fk_close(conn *c)
{
    close(c->fd);
    free(c);
}

/* Sends a command line and reads its reply. */
static const char *cmd(conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *cmd(conn *c, const char *fmt, ...)
{
    char line[1 << 15];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 2, fmt, ap);
    va_end(ap);
    memcpy(line + n, "\r\n", 2);
    send_all(c->fd, line, (size_t)n + 2);
    cr_assert_eq(read_reply(c), 1, "no reply to %s", line);
    return c->reply;
}

#define OK(c, ...)                                                                      \
    do {                                                                                \
        const char *r_ = cmd(c, __VA_ARGS__);                                           \
        cr_assert(c->kind == ER_FK_R_SIMPLE && strcmp(r_, "OK") == 0, "reply: %s", r_); \
    } while (0)
#define ERR(c, part, ...)                                                               \
    do {                                                                                \
        const char *r_ = cmd(c, __VA_ARGS__);                                           \
        cr_assert(c->kind == ER_FK_R_ERROR && strstr(r_, part), "reply: %s", r_);       \
    } while (0)

static conn *fk_hello(const char *wid)
{
    conn *c = fk_open();
    if (wid)
        OK(c, "HELLO {\"v\":2,\"wid\":\"%s\",\"hostname\":\"t\",\"pid\":1,\"labels\":[]}", wid);
    else
        OK(c, "HELLO {\"v\":2}");
    return c;
}

static void hash_hex(const char *pwd, const char *salt, int iters, char out[65])
{
    unsigned char md[32];
    unsigned int n = 0;
    char in[256];
    snprintf(in, sizeof in, "%s%s", pwd, salt);
    EVP_Digest(in, strlen(in), md, &n, EVP_sha256(), NULL);
    for (int i = 1; i < iters; i++)
        EVP_Digest(md, 32, md, &n, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

/* Connects and says HELLO with password pwd (hashed with the greeting's
 * salt); returns the connection and the reply kind in c->kind. */
static conn *fk_login(const char *wid, const char *pwd)
{
    conn *c = fk_open();
    json_t *hi = json_loads(c->reply + 3, 0, NULL);
    const char *salt = json_string_value(json_object_get(hi, "s"));
    int iters = (int)json_integer_value(json_object_get(hi, "i"));
    cr_assert(salt && iters >= 1, "greeting without a salt: %s", c->reply);
    char h[65];
    hash_hex(pwd, salt, iters, h);
    json_decref(hi);
    cmd(c, "HELLO {\"v\":2,\"wid\":\"%s\",\"pwdhash\":\"%s\"}", wid, h);
    return c;
}

/* ---- HTTP ---- */

/* method path body -> status and the parsed JSON body (*out, NULL when none). */
static int http(const char *method, const char *path, const char *body, const char *token,
                json_t **out)
{
    int fd = dial(S.http_port);
    char req[8192];
    char auth[128] = "";
    if (token)
        snprintf(auth, sizeof auth, "Authorization: Bearer %s\r\n", token);
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     method, path, auth, body ? strlen(body) : 0, body ? body : "");
    send_all(fd, req, (size_t)n);
    static char resp[1 << 16];
    size_t len = 0;
    ssize_t r;
    while ((r = recv(fd, resp + len, sizeof resp - 1 - len, 0)) > 0)
        len += (size_t)r;
    resp[len] = '\0';
    close(fd);
    int status = 0;
    sscanf(resp, "HTTP/1.1 %d", &status);
    char *b = strstr(resp, "\r\n\r\n");
    if (out)
        *out = b ? json_loads(b + 4, 0, NULL) : NULL;
    return status;
}

static json_t *get_job(const char *id)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/jobs/%s", id);
    json_t *o = NULL;
    int st = http("GET", path, NULL, NULL, &o);
    if (st != 200) {
        json_decref(o);
        return NULL;
    }
    json_t *j = json_incref(json_object_get(o, "job"));
    json_decref(o);
    return j;
}

/* An RFC 3339 UTC time with milliseconds as the API writes it, in ms. */
static int64_t ms_of(const char *t)
{
    struct tm tm = {0};
    int ms = 0;
    cr_assert(sscanf(t, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                     &tm.tm_min, &tm.tm_sec, &ms) == 7, "not a time: %s", t);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000 + ms;
}

/* json_equal against a new reference, which it releases. */
static bool same(const json_t *a, json_t *want)
{
    bool eq = json_equal(a, want);
    json_decref(want);
    return eq;
}

static const char *jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

TestSuite(transcript, .init = start, .fini = stop, .timeout = 60);

/* ---- the round trip, both directions ---- */

Test(transcript, push_fetch_ack_round_trip)
{
    conn *c = fk_hello("w1");
    OK(c, "PUSH {\"jid\":\"j1\",\"jobtype\":\"send\",\"args\":[1,\"two\",{\"three\":3}]}");
    const char *r = cmd(c, "FETCH default");
    cr_assert_eq(c->kind, ER_FK_R_BULK, "reply: %s", r);
    json_t *j = json_loads(r, 0, NULL);
    cr_assert_str_eq(jstr(j, "jid"), "j1");
    cr_assert_str_eq(jstr(j, "jobtype"), "send");
    cr_assert_str_eq(jstr(j, "queue"), "default");
    cr_assert(same(json_object_get(j, "args"), json_pack("[is{si}]", 1, "two", "three", 3)));
    cr_assert_eq(json_integer_value(json_object_get(j, "retry")), 25);
    json_decref(j);
    json_t *h = get_job("j1");
    cr_assert_str_eq(jstr(h, "state"), "active");
    cr_assert_str_eq(jstr(h, "lease_owner"), "w1");
    cr_assert_str_eq(jstr(h, "name"), "send");
    cr_assert_eq(json_integer_value(json_object_get(h, "max_attempts")), 26);
    cr_assert_str_eq(jstr(json_object_get(h, "backoff"), "type"), "faktory");
    json_decref(h);
    OK(c, "ACK {\"jid\":\"j1\"}");
    h = get_job("j1");
    cr_assert_str_eq(jstr(h, "state"), "completed");
    json_decref(h);
    ERR(c, "completed", "ACK {\"jid\":\"j1\"}"); /* twice: refused */
    fk_close(c);
}

Test(transcript, custom_is_kept_and_its_errand_members_apply)
{
    conn *c = fk_hello("w1");
    OK(c, "PUSH {\"jid\":\"c1\",\"jobtype\":\"t\",\"custom\":{\"tenant\":{\"id\":9},"
          "\"group\":\"acme\",\"trace_id\":\"tr-1\"}}");
    const char *r = cmd(c, "FETCH default");
    cr_assert_eq(c->kind, ER_FK_R_BULK, "reply: %s", r);
    json_t *j = json_loads(r, 0, NULL);
    cr_assert(same(json_object_get(j, "custom"),
                   json_pack("{s{si}ssss}", "tenant", "id", 9, "group", "acme", "trace_id", "tr-1")),
              "%s", r);
    json_decref(j);
    json_t *h = get_job("c1");
    cr_assert_str_eq(jstr(h, "group"), "acme");
    cr_assert_str_eq(jstr(h, "trace_id"), "tr-1");
    json_decref(h);
    ERR(c, "custom.group", "PUSH {\"jid\":\"c2\",\"jobtype\":\"t\",\"custom\":{\"group\":\"no spaces\"}}");
    ERR(c, "Enterprise", "PUSH {\"jid\":\"c3\",\"jobtype\":\"t\",\"custom\":{\"bid\":\"b\"}}");
    ERR(c, "custom", "PUSH {\"jid\":\"c4\",\"jobtype\":\"t\",\"custom\":[1]}");
    cr_assert_null(get_job("c2"));
    OK(c, "ACK {\"jid\":\"c1\"}");
    fk_close(c);
}

Test(transcript, an_expired_job_is_not_handed_out_and_goes_to_the_dead_letters)
{
    conn *c = fk_hello("w1");
    OK(c, "PUSH {\"jid\":\"e1\",\"jobtype\":\"t\",\"queue\":\"exp\","
          "\"custom\":{\"expires_at\":\"2020-01-01T00:00:00Z\"}}");
    OK(c, "PUSH {\"jid\":\"e2\",\"jobtype\":\"t\",\"queue\":\"exp\",\"custom\":{\"expires_in\":3600}}");
    const char *r = cmd(c, "FETCH exp");
    cr_assert_eq(c->kind, ER_FK_R_BULK, "%s", r);
    json_t *j = json_loads(r, 0, NULL);
    cr_assert_str_eq(jstr(j, "jid"), "e2");
    cr_assert(json_is_string(json_object_get(json_object_get(j, "custom"), "expires_at")), "%s", r);
    cr_assert_null(json_object_get(json_object_get(j, "custom"), "expires_in"));
    json_decref(j);
    json_t *h = get_job("e1");
    cr_assert_str_eq(jstr(h, "state"), "dead");
    cr_assert(strstr(jstr(json_object_get(h, "last_error"), "message"), "expired"));
    json_decref(h);
    ERR(c, "expires_at", "PUSH {\"jid\":\"e3\",\"jobtype\":\"t\",\"custom\":{\"expires_at\":\"soon\"}}");
    ERR(c, "expires_in", "PUSH {\"jid\":\"e3\",\"jobtype\":\"t\",\"custom\":{\"expires_in\":0}}");
    ERR(c, "not both", "PUSH {\"jid\":\"e3\",\"jobtype\":\"t\",\"custom\":{\"expires_in\":5,"
                       "\"expires_at\":\"2030-01-01T00:00:00Z\"}}");
    cr_assert_null(get_job("e3"));
    OK(c, "ACK {\"jid\":\"e2\"}");
    fk_close(c);
}

Test(transcript, unique_for_refuses_a_twin_until_the_job_succeeds_or_starts)
{
    conn *c = fk_hello("w1");
    const char *u = "\"custom\":{\"unique_for\":600}";
    OK(c, "PUSH {\"jid\":\"u1\",\"jobtype\":\"mail\",\"queue\":\"uq\",\"args\":[1],%s}", u);
    const char *r = cmd(c, "PUSH {\"jid\":\"u2\",\"jobtype\":\"mail\",\"queue\":\"uq\",\"args\":[1],%s}", u);
    cr_assert(c->kind == ER_FK_R_ERROR && strncmp(r, "NOTUNIQUE", 9) == 0, "%s", r);
    cr_assert_null(get_job("u2"));
    OK(c, "PUSH {\"jid\":\"u3\",\"jobtype\":\"mail\",\"queue\":\"uq\",\"args\":[2],%s}", u);
    OK(c, "PUSH {\"jid\":\"u4\",\"jobtype\":\"mail\",\"queue\":\"uq2\",\"args\":[1],%s}", u);
    cr_assert_eq((cmd(c, "FETCH uq"), c->kind), ER_FK_R_BULK);
    json_t *j = json_loads(c->reply, 0, NULL);
    char first[16];
    snprintf(first, sizeof first, "%s", jstr(j, "jid"));
    json_decref(j);
    cr_assert_str_eq(first, "u1");
    r = cmd(c, "PUSH {\"jid\":\"u5\",\"jobtype\":\"mail\",\"queue\":\"uq\",\"args\":[1],%s}", u);
    cr_assert(c->kind == ER_FK_R_ERROR && strncmp(r, "NOTUNIQUE", 9) == 0, "running: %s", r);
    OK(c, "ACK {\"jid\":\"u1\"}"); /* success gives the lock back */
    OK(c, "PUSH {\"jid\":\"u6\",\"jobtype\":\"mail\",\"queue\":\"uq\",\"args\":[1],%s}", u);
    /* until start: the lock goes when the job is fetched */
    const char *us = "\"custom\":{\"unique_for\":600,\"unique_until\":\"start\"}";
    OK(c, "PUSH {\"jid\":\"s1\",\"jobtype\":\"mail\",\"queue\":\"us\",\"args\":[7],%s}", us);
    r = cmd(c, "PUSH {\"jid\":\"s2\",\"jobtype\":\"mail\",\"queue\":\"us\",\"args\":[7],%s}", us);
    cr_assert(c->kind == ER_FK_R_ERROR && strncmp(r, "NOTUNIQUE", 9) == 0, "%s", r);
    cr_assert_eq((cmd(c, "FETCH us"), c->kind), ER_FK_R_BULK);
    OK(c, "PUSH {\"jid\":\"s3\",\"jobtype\":\"mail\",\"queue\":\"us\",\"args\":[7],%s}", us);
    ERR(c, "unique_for", "PUSH {\"jid\":\"b1\",\"jobtype\":\"t\",\"custom\":{\"unique_for\":0}}");
    ERR(c, "unique_until", "PUSH {\"jid\":\"b2\",\"jobtype\":\"t\",\"custom\":{\"unique_until\":\"start\"}}");
    ERR(c, "Enterprise", "PUSH {\"jid\":\"b3\",\"jobtype\":\"t\",\"custom\":{\"bid\":\"x\"}}");
    fk_close(c);
}

static const char *fetch_jid(conn *c, const char *queues, char out[64]);

/* PUSHB's reply as a JSON object (a new reference). */
static json_t *pushb(conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *pushb(conn *c, const char *fmt, ...)
{
    char line[1 << 14];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const char *r = cmd(c, "PUSHB %s", line);
    cr_assert_eq(c->kind, ER_FK_R_BULK, "PUSHB: %s", r);
    json_t *o = json_loads(r, 0, NULL);
    cr_assert(json_is_object(o), "%s", r);
    return o;
}

Test(transcript, pushb_honours_unique_for_and_names_each_twin_notunique)
{
    conn *c = fk_hello("w1");
    const char *u = "\"custom\":{\"unique_for\":600}";
    /* a twin later in the same batch, and one already held by a PUSH */
    OK(c, "PUSH {\"jid\":\"p0\",\"jobtype\":\"mail\",\"queue\":\"ub\",\"args\":[9],%s}", u);
    json_t *o = pushb(c, "[{\"jid\":\"b1\",\"jobtype\":\"mail\",\"queue\":\"ub\",\"args\":[1],%s},"
                         "{\"jid\":\"b2\",\"jobtype\":\"mail\",\"queue\":\"ub\",\"args\":[1],%s},"
                         "{\"jid\":\"b3\",\"jobtype\":\"mail\",\"queue\":\"ub\",\"args\":[9],%s},"
                         "{\"jid\":\"b4\",\"jobtype\":\"mail\",\"queue\":\"ub\",\"args\":[1]},"
                         "{\"jid\":\"b5\",\"jobtype\":\"mail\",\"queue\":\"ub2\",\"args\":[1],%s},"
                         "{\"jid\":\"b 6\",\"jobtype\":\"mail\"}]",
                    u, u, u, u);
    cr_assert_eq(json_object_size(o), 3, "two twins and a bad jid");
    cr_assert_str_eq(jstr(o, "b2"), "NOTUNIQUE Job not unique");
    cr_assert_str_eq(jstr(o, "b3"), "NOTUNIQUE Job not unique");
    cr_assert(json_object_get(o, "b 6"));
    json_decref(o);
    cr_assert_null(get_job("b2"));
    cr_assert_null(get_job("b3"));
    static const char *const taken[] = {"b1", "b4", "b5"};
    for (size_t i = 0; i < 3; i++) {
        json_t *h = get_job(taken[i]);
        cr_assert_not_null(h, "%s enqueued", taken[i]);
        cr_assert_str_eq(jstr(h, "state"), "waiting");
        json_decref(h);
    }
    /* b1's lock, taken by PUSHB, holds for PUSH and PUSHB alike */
    const char *r = cmd(c, "PUSH {\"jid\":\"b7\",\"jobtype\":\"mail\",\"queue\":\"ub\",\"args\":[1],%s}", u);
    cr_assert(c->kind == ER_FK_R_ERROR && strcmp(r, "NOTUNIQUE Job not unique") == 0, "%s", r);
    o = pushb(c, "[{\"jid\":\"b8\",\"jobtype\":\"mail\",\"queue\":\"ub\",\"args\":[1],%s}]", u);
    cr_assert_str_eq(jstr(o, "b8"), "NOTUNIQUE Job not unique");
    json_decref(o);
    /* b1 succeeds: its lock is given back, and a twin goes in */
    char jid[64];
    cr_assert_str_eq(fetch_jid(c, "ub", jid), "p0");
    cr_assert_str_eq(fetch_jid(c, "ub", jid), "b1");
    OK(c, "ACK {\"jid\":\"b1\"}");
    o = pushb(c, "[{\"jid\":\"b9\",\"jobtype\":\"mail\",\"queue\":\"ub\",\"args\":[1],%s}]", u);
    cr_assert_eq(json_object_size(o), 0);
    json_decref(o);
    /* until start, over PUSHB: the FETCH gives the lock back */
    const char *us = "\"custom\":{\"unique_for\":600,\"unique_until\":\"start\"}";
    o = pushb(c, "[{\"jid\":\"s1\",\"jobtype\":\"mail\",\"queue\":\"ubs\",\"args\":[7],%s},"
                 "{\"jid\":\"s2\",\"jobtype\":\"mail\",\"queue\":\"ubs\",\"args\":[7],%s}]",
              us, us);
    cr_assert_eq(json_object_size(o), 1);
    cr_assert_str_eq(jstr(o, "s2"), "NOTUNIQUE Job not unique");
    json_decref(o);
    cr_assert_str_eq(fetch_jid(c, "ubs", jid), "s1");
    o = pushb(c, "[{\"jid\":\"s3\",\"jobtype\":\"mail\",\"queue\":\"ubs\",\"args\":[7],%s}]", us);
    cr_assert_eq(json_object_size(o), 0);
    json_decref(o);
    /* a bad unique_for is the job's own refusal */
    o = pushb(c, "[{\"jid\":\"bad1\",\"jobtype\":\"t\",\"custom\":{\"unique_for\":0}}]");
    cr_assert(strstr(jstr(o, "bad1"), "unique_for"), "%s", jstr(o, "bad1"));
    json_decref(o);
    fk_close(c);
}

Test(transcript, http_job_is_fetched_with_its_payload_as_the_only_arg)
{
    cr_assert_eq(http("POST", "/v1/queues/mail/jobs",
                      "{\"id\":\"h1\",\"name\":\"welcome\",\"payload\":{\"user\":7}}", NULL, NULL),
                 201);
    conn *c = fk_hello("w1");
    const char *r = cmd(c, "FETCH critical mail");
    cr_assert_eq(c->kind, ER_FK_R_BULK, "reply: %s", r);
    json_t *j = json_loads(r, 0, NULL);
    cr_assert_str_eq(jstr(j, "jid"), "h1");
    cr_assert(same(json_object_get(j, "args"), json_pack("[{si}]", "user", 7)));
    json_decref(j);
    OK(c, "ACK {\"jid\":\"h1\"}");
    fk_close(c);
}

Test(transcript, fetch_waits_then_answers_null_and_wakes_on_a_push)
{
    conn *c = fk_hello("w1");
    int64_t t0 = now_ms();
    cmd(c, "FETCH empty");
    cr_assert_eq(c->kind, ER_FK_R_NULL);
    cr_assert_geq(now_ms() - t0, 1500, "FETCH returned before its wait");
    fk_close(c);
}

Test(transcript, fail_keeps_errtype_message_and_backtrace)
{
    conn *c = fk_hello("w1");
    OK(c, "PUSH {\"jid\":\"f1\",\"jobtype\":\"t\",\"args\":[],\"retry\":2}");
    cr_assert_eq((cmd(c, "FETCH default"), c->kind), ER_FK_R_BULK);
    OK(c, "FAIL {\"jid\":\"f1\",\"errtype\":\"RuntimeError\",\"message\":\"boom\","
          "\"backtrace\":[\"app.rb:1\",\"lib.rb:2\"]}");
    json_t *h = get_job("f1");
    cr_assert_str_eq(jstr(h, "state"), "scheduled");
    json_t *e = json_object_get(h, "last_error");
    cr_assert_str_eq(jstr(e, "errtype"), "RuntimeError");
    cr_assert_str_eq(jstr(e, "message"), "boom");
    cr_assert(same(json_object_get(e, "backtrace"), json_pack("[ss]", "app.rb:1", "lib.rb:2")));
    json_decref(h);
    fk_close(c);
}

Test(transcript, retry_minus_one_and_zero_go_dead_on_the_first_failure)
{
    conn *c = fk_hello("w1");
    OK(c, "PUSH {\"jid\":\"d1\",\"jobtype\":\"t\",\"retry\":-1}");
    OK(c, "PUSH {\"jid\":\"d0\",\"jobtype\":\"t\",\"retry\":0}");
    for (int i = 0; i < 2; i++) {
        const char *r = cmd(c, "FETCH default");
        cr_assert_eq(c->kind, ER_FK_R_BULK, "reply: %s", r);
        json_t *j = json_loads(r, 0, NULL);
        char jid[16];
        snprintf(jid, sizeof jid, "%s", jstr(j, "jid"));
        cr_assert_eq(json_integer_value(json_object_get(j, "retry")),
                     strcmp(jid, "d0") == 0 ? 0 : -1, "%s", r);
        OK(c, "FAIL {\"jid\":\"%s\",\"errtype\":\"E\",\"message\":\"m\"}", jid);
        json_t *h = get_job(jid);
        cr_assert_str_eq(jstr(h, "state"), "dead", "%s", jid);
        json_t *e = json_object_get(h, "last_error");
        if (strcmp(jid, "d0") == 0)
            cr_assert_str_eq(jstr(e, "reason"), "discarded (retry 0)");
        else
            cr_assert_null(json_object_get(e, "reason"));
        json_decref(h);
        json_decref(j);
    }
    ERR(c, "retry", "PUSH {\"jid\":\"d2\",\"jobtype\":\"t\",\"retry\":-2}");
    fk_close(c);
}

/* ---- acknowledgements and leases ---- */

Test(transcript, ack_on_another_connection_with_the_same_wid_works_another_wid_is_refused)
{
    conn *a = fk_hello("pool-1"), *b = fk_hello("pool-1"), *x = fk_hello("other");
    OK(a, "PUSH {\"jid\":\"p1\",\"jobtype\":\"t\"}");
    OK(a, "PUSH {\"jid\":\"p2\",\"jobtype\":\"t\"}");
    cr_assert_eq((cmd(a, "FETCH default"), a->kind), ER_FK_R_BULK);
    cr_assert_eq((cmd(a, "FETCH default"), a->kind), ER_FK_R_BULK);
    OK(b, "ACK {\"jid\":\"p1\"}");
    ERR(x, "another worker", "ACK {\"jid\":\"p2\"}");
    ERR(x, "another worker", "FAIL {\"jid\":\"p2\",\"message\":\"m\"}");
    json_t *h = get_job("p2");
    cr_assert_str_eq(jstr(h, "state"), "active"); /* the refusal changed nothing */
    json_decref(h);
    ERR(x, "no job", "ACK {\"jid\":\"nope\"}");
    ERR(x, "jid", "ACK {}");
    OK(a, "ACK {\"jid\":\"p2\"}");
    fk_close(a);
    fk_close(b);
    fk_close(x);
}

Test(transcript, a_connection_without_wid_pushes_but_cannot_fetch_or_ack)
{
    conn *c = fk_hello(NULL);
    OK(c, "PUSH {\"jid\":\"n1\",\"jobtype\":\"t\"}");
    ERR(c, "wid", "FETCH default");
    ERR(c, "wid", "ACK {\"jid\":\"n1\"}");
    fk_close(c);
}

Test(transcript, disconnect_mid_reservation_keeps_the_lease_until_it_expires)
{
    conn *a = fk_hello("gone");
    OK(a, "PUSH {\"jid\":\"r1\",\"jobtype\":\"t\",\"reserve_for\":3}");
    const char *r = cmd(a, "FETCH default");
    cr_assert_eq(a->kind, ER_FK_R_BULK, "reply: %s", r);
    json_t *j = json_loads(r, 0, NULL);
    cr_assert_eq(json_integer_value(json_object_get(j, "reserve_for")), 3);
    json_decref(j);
    fk_close(a); /* without ACK */
    json_t *h = get_job("r1");
    cr_assert_str_eq(jstr(h, "state"), "active");
    cr_assert_str_eq(jstr(h, "lease_owner"), "gone");
    char expires[64];
    snprintf(expires, sizeof expires, "%s", jstr(h, "lease_expires_at"));
    json_decref(h);
    struct tm tm = {0};
    int ms = 0;
    cr_assert(sscanf(expires, "%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                     &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) == 7, "%s", expires);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    int64_t exp_ms = (int64_t)timegm(&tm) * 1000 + ms;
    conn *b = fk_hello("next");
    int64_t got_at = 0;
    for (int i = 0; i < 15 && !got_at; i++) {
        cmd(b, "FETCH default");
        if (b->kind == ER_FK_R_BULK)
            got_at = now_ms();
    }
    cr_assert(got_at, "the job was never redelivered");
    cr_assert_geq(got_at, exp_ms, "redelivered before the lease expired");
    OK(b, "ACK {\"jid\":\"r1\"}");
    fk_close(b);
}

Test(transcript, track_sets_progress_and_extends_the_lease_of_the_wids_job)
{
    conn *c = fk_hello("w1"), *x = fk_hello("w2");
    OK(c, "PUSH {\"jid\":\"t1\",\"jobtype\":\"t\",\"reserve_for\":120}");
    cr_assert_eq((cmd(c, "FETCH default"), c->kind), ER_FK_R_BULK);
    char until[32];
    time_t later = time(NULL) + 3600;
    strftime(until, sizeof until, "%Y-%m-%dT%H:%M:%S.000Z", gmtime(&later));
    OK(c, "TRACK SET {\"jid\":\"t1\",\"percent\":40,\"desc\":\"half\",\"reserve_until\":\"%s\"}",
       until);
    /* a heartbeat extends from the store's now: the end lands within the
     * milliseconds the request took */
    json_t *h = get_job("t1");
    int64_t got = ms_of(jstr(h, "lease_expires_at")), want = ms_of(until);
    cr_assert(got >= want && got < want + 1000, "%s, not %s", jstr(h, "lease_expires_at"), until);
    json_decref(h);
    const char *r = cmd(x, "TRACK GET t1");
    cr_assert_eq(x->kind, ER_FK_R_BULK, "%s", r);
    json_t *t = json_loads(r, 0, NULL);
    cr_assert_eq(json_integer_value(json_object_get(t, "percent")), 40, "%s", r);
    cr_assert_str_eq(jstr(t, "desc"), "half");
    cr_assert_str_eq(jstr(t, "state"), "active");
    json_decref(t);
    OK(c, "TRACK SET {\"jid\":\"t1\",\"percent\":60}"); /* the lease's end is kept */
    h = get_job("t1");
    int64_t kept = ms_of(jstr(h, "lease_expires_at"));
    cr_assert(kept >= got && kept < got + 1000, "%s moved", jstr(h, "lease_expires_at"));
    json_decref(h);
    ERR(x, "another worker", "TRACK SET {\"jid\":\"t1\",\"percent\":1}");
    ERR(c, "percent", "TRACK SET {\"jid\":\"t1\",\"percent\":101}");
    ERR(c, "reserve_until", "TRACK SET {\"jid\":\"t1\",\"reserve_until\":\"soon\"}");
    ERR(c, "reserve_until", "TRACK SET {\"jid\":\"t1\",\"reserve_until\":\"2020-01-01T00:00:00Z\"}");
    ERR(c, "SET", "TRACK FOO t1");
    ERR(c, "not found", "TRACK GET nosuchjob");
    OK(c, "ACK {\"jid\":\"t1\"}");
    fk_close(c);
    fk_close(x);
}

/* ---- BEAT ---- */

Test(transcript, beat_go_and_ruby_style_with_state_and_rss)
{
    conn *c = fk_hello("beater");
    OK(c, "BEAT {\"wid\":\"beater\"}");
    OK(c, "BEAT {\"wid\":\"beater\",\"current_state\":\"quiet\",\"rss_kb\":123456}");
    OK(c, "BEAT {\"wid\":\"beater\",\"current_state\":\"\",\"rss_kb\":1}");
    ERR(c, "wid", "BEAT {\"wid\":\"someone-else\"}");
    ERR(c, "current_state", "BEAT {\"wid\":\"beater\",\"current_state\":\"sleepy\"}");
    ERR(c, "rss_kb", "BEAT {\"wid\":\"beater\",\"rss_kb\":-5}");
    json_t *o = NULL;
    cr_assert_eq(http("GET", "/v1/workers", NULL, NULL, &o), 200);
    json_t *w = json_array_get(json_object_get(o, "workers"), 0);
    cr_assert_str_eq(jstr(w, "wid"), "beater");
    cr_assert_eq(json_integer_value(json_object_get(w, "rss_kb")), 1);
    json_decref(o);
    cr_assert_eq(http("POST", "/v1/workers/beater/quiet", "", NULL, NULL), 200);
    const char *r = cmd(c, "BEAT {\"wid\":\"beater\"}");
    cr_assert(c->kind == ER_FK_R_BULK && strcmp(r, "{\"state\":\"quiet\"}") == 0, "%s", r);
    cr_assert_eq((cmd(c, "FETCH default"), c->kind), ER_FK_R_NULL); /* quiet: no more jobs */
    cr_assert_eq(http("POST", "/v1/workers/beater/terminate", "", NULL, NULL), 200);
    r = cmd(c, "BEAT {\"wid\":\"beater\",\"current_state\":\"quiet\"}");
    cr_assert(c->kind == ER_FK_R_BULK && strcmp(r, "{\"state\":\"terminate\"}") == 0, "%s", r);
    cr_assert_eq(http("POST", "/v1/workers/nobody/quiet", "", NULL, NULL), 404);
    fk_close(c);
}

Test(transcript, hello_labels_and_v_are_kept_in_the_registry_and_bad_labels_refused)
{
    static const char *const bad[] = {
        "{\"v\":2,\"wid\":\"lab\",\"labels\":\"node\"}",
        "{\"v\":2,\"wid\":\"lab\",\"labels\":[\"a\",1]}",
        "{\"v\":2,\"wid\":\"lab\",\"labels\":[{}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        conn *c = fk_open();
        ERR(c, "labels must be an array of strings", "HELLO %s", bad[i]);
        cr_assert(closed(c), "a bad HELLO closes: %s", bad[i]);
        fk_close(c);
    }
    char big[5000] = "{\"v\":2,\"wid\":\"lab\",\"labels\":[\"";
    size_t at = strlen(big);
    memset(big + at, 'x', 4100);
    memcpy(big + at + 4100, "\"]}", 4);
    conn *c = fk_open();
    ERR(c, "labels must be at most 4096 bytes", "HELLO %s", big);
    fk_close(c);
    json_t *o = NULL;
    cr_assert_eq(http("GET", "/v1/workers", NULL, NULL, &o), 200);
    cr_assert_eq(json_array_size(json_object_get(o, "workers")), 0, "refused: not registered");
    json_decref(o);
    c = fk_open();
    OK(c, "HELLO {\"v\":2,\"wid\":\"lab\",\"hostname\":\"h\",\"pid\":7,"
          "\"labels\":[\"node\",\"blue\"]}");
    cr_assert_eq(http("GET", "/v1/workers", NULL, NULL, &o), 200);
    json_t *w = json_array_get(json_object_get(o, "workers"), 0);
    cr_assert_str_eq(jstr(w, "wid"), "lab");
    json_t *want = json_pack("[ss]", "node", "blue");
    cr_assert(same(json_object_get(w, "labels"), want), "labels as HELLO said");
    cr_assert(strlen(jstr(w, "node")) > 0, "the node that saw it");
    json_decref(o);
    fk_close(c);
}

/* ---- prefetch (docs/faktory.md, "Prefetch") ---- */

/* FETCH's job id into out (a copy), "" when it answered null. */
static const char *fetch_jid(conn *c, const char *queues, char out[64])
{
    const char *r = cmd(c, "FETCH %s", queues);
    out[0] = '\0';
    if (c->kind == ER_FK_R_NULL)
        return out;
    cr_assert_eq(c->kind, ER_FK_R_BULK, "reply: %s", r);
    json_t *j = json_loads(r, 0, NULL);
    snprintf(out, 64, "%s", jstr(j, "jid"));
    json_decref(j);
    return out;
}

/* The job's state and lease owner now ("" when none). */
static void job_state(const char *id, char state[32], char owner[64], int *attempts)
{
    json_t *h = get_job(id);
    cr_assert(h, "no job %s", id);
    snprintf(state, 32, "%s", jstr(h, "state"));
    snprintf(owner, 64, "%s", jstr(h, "lease_owner"));
    if (attempts)
        *attempts = (int)json_integer_value(json_object_get(h, "attempts"));
    json_decref(h);
}

/* Waits (up to 10 s) for the job to be waiting again: the ms it took. */
static int64_t wait_waiting(const char *id, int *attempts)
{
    int64_t t0 = now_ms();
    char st[32], ow[64];
    for (;;) {
        job_state(id, st, ow, attempts);
        if (strcmp(st, "waiting") == 0)
            return now_ms() - t0;
        cr_assert_lt(now_ms() - t0, 10000, "job %s is still %s (%s)", id, st, ow);
        usleep(20000);
    }
}

Test(transcript, prefetch_hands_one_wid_distinct_jobs_in_queue_order_acked_anywhere)
{
    conn *a = fk_hello("pf-w"), *b = fk_hello("pf-w");
    for (int i = 1; i <= 8; i++)
        OK(a, "PUSH {\"jid\":\"pd%d\",\"jobtype\":\"t\"}", i);
    OK(a, "PUSH {\"jid\":\"ph1\",\"jobtype\":\"t\",\"queue\":\"hi\"}");
    OK(a, "PUSH {\"jid\":\"ph2\",\"jobtype\":\"t\",\"queue\":\"hi\"}");
    const char *want[] = {"ph1", "ph2", "pd1", "pd2", "pd3", "pd4", "pd5", "pd6", "pd7", "pd8"};
    char jid[64];
    for (int i = 0; i < 10; i++) {
        int64_t t0 = now_ms();
        cr_assert_str_eq(fetch_jid(i % 2 ? b : a, "hi default", jid), want[i], "fetch %d", i);
        /* handed out with its whole reserve_for (1800 s) ahead, leased to the wid */
        json_t *h = get_job(jid);
        cr_assert_str_eq(jstr(h, "state"), "active");
        cr_assert_str_eq(jstr(h, "lease_owner"), "pf-w");
        cr_assert_geq(ms_of(jstr(h, "lease_expires_at")), t0 + 1800 * 1000, "%s", jid);
        cr_assert_eq(json_integer_value(json_object_get(h, "attempts")), 1);
        json_decref(h);
    }
    for (int i = 0; i < 10; i++) {
        conn *other = i % 2 ? a : b; /* not the connection that fetched it */
        OK(other, "ACK {\"jid\":\"%s\"}", want[i]);
    }
    for (int i = 0; i < 10; i++) {
        json_t *h = get_job(want[i]);
        cr_assert_str_eq(jstr(h, "state"), "completed", "%s", want[i]);
        json_decref(h);
    }
    fk_close(a);
    fk_close(b);
}

Test(transcript, prefetch_refills_the_buffer_while_it_still_holds_jobs)
{
    conn *a = fk_hello("pf-rf"), *b = fk_hello("pf-rf");
    for (int i = 1; i <= 12; i++)
        OK(a, "PUSH {\"jid\":\"rf%d\",\"jobtype\":\"t\",\"queue\":\"rf\"}", i);
    char jid[64], st[32], ow[64];
    int attempts = -1;
    /* a store fetch of 2 (rf1 handed out, rf2 buffered), then rf2 from the
     * buffer: it is empty now, so a refill leases the next jobs to the wid
     * before any FETCH asks for them */
    cr_assert_str_eq(fetch_jid(a, "rf", jid), "rf1");
    cr_assert_str_eq(fetch_jid(b, "rf", jid), "rf2");
    int64_t until = now_ms() + 2000;
    do {
        job_state("rf3", st, ow, &attempts);
        if (strcmp(st, "active") == 0)
            break;
        usleep(5000);
    } while (now_ms() < until);
    cr_assert_str_eq(st, "active", "rf3 was not leased ahead");
    cr_assert_str_eq(ow, "pf-rf");
    /* every job once, in queue order, whichever connection asks */
    for (int i = 3; i <= 12; i++) {
        char want[16];
        snprintf(want, sizeof want, "rf%d", i);
        cr_assert_str_eq(fetch_jid(i % 2 ? a : b, "rf", jid), want);
    }
    for (int i = 1; i <= 12; i++) {
        conn *other = i % 2 ? b : a;
        OK(other, "ACK {\"jid\":\"rf%d\"}", i);
        char id[16];
        snprintf(id, sizeof id, "rf%d", i);
        json_t *h = get_job(id);
        cr_assert_str_eq(jstr(h, "state"), "completed", "%s", id);
        cr_assert_eq(json_integer_value(json_object_get(h, "attempts")), 1, "%s", id);
        json_decref(h);
    }
    fk_close(a);
    fk_close(b);
}

Test(transcript, prefetch_gives_a_buffered_job_its_own_reserve_for_at_hand_out)
{
    conn *a = fk_hello("pf-r");
    OK(a, "PUSH {\"jid\":\"pr1\",\"jobtype\":\"t\",\"reserve_for\":60}");
    OK(a, "PUSH {\"jid\":\"pr2\",\"jobtype\":\"t\",\"reserve_for\":60}");
    char jid[64], st[32], ow[64];
    cr_assert_str_eq(fetch_jid(a, "default", jid), "pr1");
    job_state("pr2", st, ow, NULL);
    cr_assert_str_eq(st, "active", "pr2 was not prefetched");
    cr_assert_str_eq(ow, "pf-r");
    usleep(300000); /* pr2 waits in the buffer meanwhile */
    int64_t t0 = now_ms();
    cr_assert_str_eq(fetch_jid(a, "default", jid), "pr2");
    int64_t t1 = now_ms();
    json_t *h = get_job("pr2");
    int64_t exp = ms_of(jstr(h, "lease_expires_at"));
    json_decref(h);
    cr_assert(exp >= t0 + 60000 - 5 && exp <= t1 + 60000 + 5, "lease ends %lld ms after",
              (long long)(exp - t0));
    OK(a, "ACK {\"jid\":\"pr1\"}");
    OK(a, "ACK {\"jid\":\"pr2\"}");
    fk_close(a);
}

Test(transcript, prefetch_releases_a_job_not_fetched_and_only_then_another_wid_gets_it)
{
    conn *a = fk_hello("pf-a"), *x = fk_hello("pf-x");
    OK(a, "PUSH {\"jid\":\"pb1\",\"jobtype\":\"t\"}");
    OK(a, "PUSH {\"jid\":\"pb2\",\"jobtype\":\"t\"}");
    char jid[64], st[32], ow[64];
    int attempts = -1;
    int64_t t0 = now_ms();
    cr_assert_str_eq(fetch_jid(a, "default", jid), "pb1");
    job_state("pb2", st, ow, &attempts); /* in pf-a's buffer: leased to it */
    cr_assert_str_eq(st, "active");
    cr_assert_str_eq(ow, "pf-a");
    /* pf-x's FETCH waits while pb2 is buffered, and gets it once released */
    cr_assert_str_eq(fetch_jid(x, "default", jid), "pb2");
    cr_assert_geq(now_ms() - t0, 1000, "pb2 went to another wid while buffered");
    job_state("pb2", st, ow, &attempts);
    cr_assert_str_eq(ow, "pf-x");
    cr_assert_eq(attempts, 1, "the release counted an attempt");
    OK(x, "ACK {\"jid\":\"pb2\"}");
    OK(a, "ACK {\"jid\":\"pb1\"}");
    fk_close(a);
    /* alone: back to waiting within the hold (1 s) and a sweep (0.25 s); a
     * new wid (pf-a's k is halved now, and does not grow for 5 s) */
    a = fk_hello("pf-a2");
    OK(a, "PUSH {\"jid\":\"pb3\",\"jobtype\":\"t\"}");
    OK(a, "PUSH {\"jid\":\"pb4\",\"jobtype\":\"t\"}");
    cr_assert_str_eq(fetch_jid(a, "default", jid), "pb3");
    job_state("pb4", st, ow, NULL);
    cr_assert_str_eq(st, "active", "pb4 was not prefetched");
    wait_waiting("pb4", &attempts);
    cr_assert_eq(attempts, 0);
    cr_assert_str_eq(fetch_jid(a, "default", jid), "pb4");
    OK(a, "ACK {\"jid\":\"pb3\"}");
    OK(a, "ACK {\"jid\":\"pb4\"}");
    fk_close(a);
    fk_close(x);
}

/* HELLO as wid, fetches `first` of queue q with `next` buffered (*t0: just
 * before): the connection. */
static conn *prefetched(const char *wid, const char *q, const char *first, const char *next,
                        int64_t *t0)
{
    conn *c = fk_hello(wid);
    OK(c, "PUSH {\"jid\":\"%s\",\"jobtype\":\"t\",\"queue\":\"%s\"}", first, q);
    OK(c, "PUSH {\"jid\":\"%s\",\"jobtype\":\"t\",\"queue\":\"%s\"}", next, q);
    char jid[64], st[32], ow[64];
    *t0 = now_ms();
    cr_assert_str_eq(fetch_jid(c, q, jid), first);
    job_state(next, st, ow, NULL);
    cr_assert_str_eq(st, "active", "%s was not prefetched", next);
    cr_assert_str_eq(ow, wid);
    return c;
}

Test(transcript, prefetch_quiet_and_the_last_disconnect_release_at_once)
{
    int attempts = -1;
    int64_t t0;
    /* quiet over HTTP */
    conn *a = prefetched("pf-q", "qa", "pq1", "pq2", &t0);
    cr_assert_eq(http("POST", "/v1/workers/pf-q/quiet", "", NULL, NULL), 200);
    wait_waiting("pq2", &attempts);
    cr_assert_lt(now_ms() - t0, 1000, "released by the hold, not by quiet");
    cr_assert_eq(attempts, 0);
    OK(a, "ACK {\"jid\":\"pq1\"}");
    fk_close(a);
    /* BEAT saying quiet */
    conn *q = prefetched("pf-b", "qb", "pq3", "pq4", &t0);
    OK(q, "BEAT {\"wid\":\"pf-b\",\"current_state\":\"quiet\"}");
    wait_waiting("pq4", &attempts);
    cr_assert_lt(now_ms() - t0, 1000, "released by the hold, not by the BEAT");
    OK(q, "ACK {\"jid\":\"pq3\"}");
    fk_close(q);
    /* the wid's last connection closes; the first closing releases nothing */
    conn *d = prefetched("pf-d", "qc", "pq5", "pq6", &t0);
    conn *e = fk_hello("pf-d");
    fk_close(e);
    usleep(100000);
    char st[32], ow[64];
    job_state("pq6", st, ow, NULL);
    cr_assert_str_eq(st, "active", "released while pf-d still had a connection");
    fk_close(d);
    wait_waiting("pq6", &attempts);
    cr_assert_lt(now_ms() - t0, 1000, "released by the hold, not by the disconnect");
    cr_assert_eq(attempts, 0);
    json_t *h = get_job("pq5");
    cr_assert_str_eq(jstr(h, "state"), "active"); /* handed out: its lease stands */
    json_decref(h);
}

/* ---- bad input ---- */

Test(transcript, commands_before_hello_close_the_connection_and_change_nothing)
{
    conn *c = fk_open();
    cmd(c, "PUSH {\"jid\":\"early\",\"jobtype\":\"t\"}");
    cr_assert_eq(c->kind, ER_FK_R_ERROR);
    cr_assert(strstr(c->reply, "HELLO"), "%s", c->reply);
    cr_assert(closed(c));
    fk_close(c);
    cr_assert_null(get_job("early"));
}

Test(transcript, an_http_request_is_closed_without_a_word)
{
    conn *c = fk_open();
    send_all(c->fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
    cr_assert(closed(c));
    fk_close(c);
    c = fk_open();
    send_all(c->fd, "POST /v1/queues/q/jobs HTTP/1.1\r\n", 33);
    cr_assert(closed(c));
    fk_close(c);
}

Test(transcript, malformed_lines_and_unknown_commands_get_errors)
{
    conn *c = fk_hello("w1");
    ERR(c, "malformed", "push {\"jid\":\"x\"}");
    ERR(c, "malformed", "*2");
    ERR(c, "malformed", "$4");
    ERR(c, "empty", "%s", "");
    ERR(c, "Unknown command", "FROBNICATE now");
    ERR(c, "invalid JSON", "PUSH {\"jid\":");
    ERR(c, "JSON object", "PUSH [1,2]");
    ERR(c, "missing", "PUSH");
    ERR(c, "args", "PUSH {\"jobtype\":\"t\",\"args\":{\"a\":1}}");
    ERR(c, "jobtype", "PUSH {\"jid\":\"x\",\"args\":[]}");
    ERR(c, "not a known field", "PUSH {\"jid\":\"x\",\"jobtype\":\"t\",\"colour\":1}");
    ERR(c, "Enterprise", "PUSH {\"jid\":\"x\",\"jobtype\":\"t\",\"custom\":{\"bid\":\"b\"}}");
    ERR(c, "already", "HELLO {\"v\":2}");
    cr_assert_null(get_job("x"));
    /* the connection still works */
    cmd(c, "INFO");
    cr_assert_eq(c->kind, ER_FK_R_BULK);
    json_t *info = json_loads(c->reply, 0, NULL);
    cr_assert(json_is_object(json_object_get(info, "faktory")), "%s", c->reply);
    json_decref(info);
    /* END closes without a reply */
    send_all(c->fd, "END\r\n", 5);
    cr_assert(closed(c));
    fk_close(c);
}

Test(transcript, a_long_line_sent_in_small_pieces_is_read_whole)
{
    conn *c = fk_hello("w1");
    enum { ARG = 50000 }; /* the reply fits this file's HTTP reader */
    static char line[ARG + 128];
    int n = snprintf(line, sizeof line, "PUSH {\"jid\":\"long\",\"jobtype\":\"t\",\"args\":[\"");
    memset(line + n, 'y', ARG);
    n += ARG;
    n += snprintf(line + n, sizeof line - (size_t)n, "\"]}\r\n");
    for (int at = 0; at < n; at += 997) {
        send_all(c->fd, line + at, (size_t)(n - at < 997 ? n - at : 997));
        usleep(100); /* separate reads, not a wait for anything */
    }
    cr_assert_eq(read_reply(c), 1);
    cr_assert(c->kind == ER_FK_R_SIMPLE && strcmp(c->reply, "OK") == 0, "%s", c->reply);
    json_t *h = get_job("long");
    cr_assert_eq(strlen(json_string_value(json_array_get(json_object_get(h, "payload"), 0))), ARG);
    json_decref(h);
    fk_close(c);
}

/* A peer that sends and does not read: the server stops reading past
 * ER_FK_OUT_PENDING of unread replies and goes on once they are read. */
Test(transcript, a_peer_that_does_not_read_its_replies_is_held_then_served)
{
    conn *c = fk_hello("w1");
    enum { N = 10000 };
    static char lines[N * 6];
    for (int i = 0; i < N; i++)
        memcpy(lines + 6 * i, "INFO\r\n", 6);
    send_all(c->fd, lines, sizeof lines);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(read_reply(c), 1, "reply %d", i);
        cr_assert_eq(c->kind, ER_FK_R_BULK);
    }
    OK(c, "PUSH {\"jid\":\"after\",\"jobtype\":\"t\"}");
    fk_close(c);
}

Test(transcript, pushb_takes_the_good_jobs_and_names_the_bad)
{
    conn *c = fk_hello("w1");
    const char *r = cmd(c, "PUSHB [{\"jid\":\"b1\",\"jobtype\":\"t\"},{\"jid\":\"b 2\",\"jobtype\":\"t\"},"
                           "{\"jid\":\"b3\",\"jobtype\":\"t\",\"args\":[3]}]");
    cr_assert_eq(c->kind, ER_FK_R_BULK, "%s", r);
    json_t *fails = json_loads(r, 0, NULL);
    cr_assert_eq(json_object_size(fails), 1, "%s", r);
    cr_assert(json_object_get(fails, "b 2"));
    json_decref(fails);
    json_t *h = get_job("b3");
    cr_assert_str_eq(jstr(h, "state"), "waiting");
    json_decref(h);
    ERR(c, "array", "PUSHB []");
    ERR(c, "array", "PUSHB {\"jid\":\"b4\"}");
    fk_close(c);
}

/* ---- admin: MUTATE and QUEUE ---- */

static json_t *get_queue(const char *q)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/queues/%s", q);
    json_t *o = NULL;
    cr_assert_eq(http("GET", path, NULL, NULL, &o), 200);
    return o;
}

Test(transcript, mutate_dead_letters_and_named_scheduled_jobs)
{
    conn *c = fk_hello("w1");
    for (int i = 0; i < 3; i++) {
        OK(c, "PUSH {\"jid\":\"m%d\",\"jobtype\":\"%s\",\"retry\":-1}", i,
           i == 2 ? "keep" : "drop");
        cr_assert_eq((cmd(c, "FETCH default"), c->kind), ER_FK_R_BULK);
        OK(c, "FAIL {\"jid\":\"m%d\",\"message\":\"x\"}", i);
    }
    OK(c, "MUTATE {\"cmd\":\"requeue\",\"target\":\"dead\",\"filter\":{\"jids\":[\"m0\"]}}");
    json_t *h = get_job("m0-redrive-1");
    cr_assert_str_eq(jstr(h, "state"), "waiting");
    json_decref(h);
    OK(c, "MUTATE {\"cmd\":\"discard\",\"target\":\"dead\",\"filter\":{\"jobtype\":\"drop\"}}");
    cr_assert_null(get_job("m1"));
    h = get_job("m2");
    cr_assert_str_eq(jstr(h, "state"), "dead");
    json_decref(h);
    OK(c, "MUTATE {\"cmd\":\"kill\",\"target\":\"dead\"}");
    char at[32];
    time_t tomorrow = time(NULL) + 86400;
    strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tomorrow));
    OK(c, "PUSH {\"jid\":\"s1\",\"jobtype\":\"t\",\"at\":\"%s\"}", at);
    h = get_job("s1");
    cr_assert_str_eq(jstr(h, "state"), "scheduled");
    json_decref(h);
    OK(c, "MUTATE {\"cmd\":\"discard\",\"target\":\"scheduled\",\"filter\":{\"jids\":[\"s1\"]}}");
    h = get_job("s1");
    cr_assert_str_eq(jstr(h, "state"), "cancelled");
    json_decref(h);
    ERR(c, "regexp", "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\",\"filter\":{\"regexp\":7}}");
    char big[1200];
    memset(big, '*', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ERR(c, "1024", "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\",\"filter\":{\"regexp\":\"%s\"}}",
        big);
    ERR(c, "invalid JSON", "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\",\"filter\":{\"regexp\":\"a\\u0000*\"}}");
    ERR(c, "filter must be an object", "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\",\"filter\":[1]}");
    ERR(c, "cmd", "MUTATE {\"cmd\":\"explode\",\"target\":\"dead\"}");
    ERR(c, "target", "MUTATE {\"cmd\":\"clear\",\"target\":\"everything\"}");
    ERR(c, "jids", "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\",\"filter\":{\"jids\":[]}}");
    ERR(c, "jid", "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\",\"filter\":{\"jids\":[7]}}");
    ERR(c, "jobtype", "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\",\"filter\":{\"jobtype\":\"a b\"}}");
    ERR(c, "jobtype", "MUTATE {\"cmd\":\"discard\",\"target\":\"dead\",\"filter\":{\"jobtype\":\"a b\"}}");
    OK(c, "MUTATE {\"cmd\":\"discard\",\"target\":\"dead\",\"filter\":{\"regexp\":\"*\\\"jobtype\\\":\\\"dro[p]\\\"*\"}}");
    cr_assert_null(get_job("m0")); /* the glob took the dead "drop" m0 */
    h = get_job("m2");
    cr_assert_str_eq(jstr(h, "state"), "dead"); /* the refusals changed nothing */
    json_decref(h);
    /* with jids, the jids alone choose, as the real server's matchForFilter:
     * m2 goes though it is not a "drop" (the jobtype is still checked) */
    ERR(c, "jobtype", "MUTATE {\"cmd\":\"discard\",\"target\":\"dead\",\"filter\":{\"jids\":[\"m2\"],\"jobtype\":\"a b\"}}");
    OK(c, "MUTATE {\"cmd\":\"discard\",\"target\":\"dead\",\"filter\":{\"jids\":[\"m2\"],\"jobtype\":\"drop\"}}");
    cr_assert_null(get_job("m2"));
    OK(c, "PUSH {\"jid\":\"m3\",\"jobtype\":\"drop\",\"retry\":-1}");
    cr_assert_eq((cmd(c, "FETCH default"), c->kind), ER_FK_R_BULK);
    OK(c, "FAIL {\"jid\":\"m3\",\"message\":\"x\"}");
    /* clear empties the set whatever its (well-formed) filter, as Faktory's */
    OK(c, "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\",\"filter\":{\"jids\":[\"nobody\"],\"jobtype\":\"drop\",\"regexp\":\"*nothing*\"}}");
    cr_assert_null(get_job("m3"));
    json_t *o = NULL;
    cr_assert_eq(http("GET", "/v1/audit", NULL, NULL, &o), 200);
    char *audit = json_dumps(o, 0);
    bool found = strstr(audit, "faktory MUTATE") != NULL;
    free(audit);
    cr_assert(found, "no audit row");
    json_decref(o);
    fk_close(c);
}

/* INFO's tasks: {"Busy","Retries","Scheduled","Dead"} sizes. */
static int64_t info_size(conn *c, const char *set)
{
    const char *r = cmd(c, "INFO");
    cr_assert_eq(c->kind, ER_FK_R_BULK, "INFO: %s", r);
    json_t *o = json_loads(r, 0, NULL);
    cr_assert_not_null(o);
    json_t *n = json_object_get(json_object_get(json_object_get(json_object_get(o, "faktory"),
                                                                "tasks"), set), "size");
    cr_assert(json_is_integer(n), "no tasks.%s.size in %s", set, r);
    int64_t v = json_integer_value(n);
    json_decref(o);
    return v;
}

/* A job FETCHed and FAILed: in the retry set (scheduled, attempts 1). */
static void push_failed(conn *c, const char *jid, const char *type, const char *arg)
{
    OK(c, "PUSH {\"jid\":\"%s\",\"jobtype\":\"%s\",\"queue\":\"mr\",\"args\":[\"%s\"],\"retry\":5}",
       jid, type, arg);
    const char *r = cmd(c, "FETCH mr");
    cr_assert(c->kind == ER_FK_R_BULK && strstr(r, jid), "FETCH: %s", r);
    OK(c, "FAIL {\"jid\":\"%s\",\"message\":\"x\"}", jid);
}

static void state_is(const char *jid, const char *want)
{
    json_t *h = get_job(jid);
    cr_assert_not_null(h, "no job %s", jid);
    cr_assert_str_eq(jstr(h, "state"), want, "%s", jid);
    json_decref(h);
}

Test(transcript, mutate_tells_retries_from_scheduled_jobs)
{
    conn *c = fk_hello("w1");
    char at[32];
    time_t tomorrow = time(NULL) + 86400;
    strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tomorrow));
    push_failed(c, "r1", "rt", "uniquearg");
    push_failed(c, "r2", "rt", "other");
    push_failed(c, "r3", "rt2", "other");
    OK(c, "PUSH {\"jid\":\"s1\",\"jobtype\":\"st\",\"args\":[\"uniquearg\"],\"at\":\"%s\"}", at);
    OK(c, "PUSH {\"jid\":\"s2\",\"jobtype\":\"st\",\"args\":[\"x\"],\"at\":\"%s\"}", at);
    OK(c, "PUSH {\"jid\":\"s3\",\"jobtype\":\"st2\",\"args\":[\"x\"],\"at\":\"%s\"}", at);
    cr_assert_eq(info_size(c, "Retries"), 3);
    cr_assert_eq(info_size(c, "Scheduled"), 3);
    cr_assert_eq(info_size(c, "Dead"), 0);
    cr_assert_eq(info_size(c, "Busy"), 0);

    /* kill by glob: only the retry set's r1, not s1 */
    OK(c, "MUTATE {\"cmd\":\"kill\",\"target\":\"retries\",\"filter\":{\"regexp\":\"*uniquearg*\"}}");
    state_is("r1", "dead");
    state_is("s1", "scheduled");
    json_t *h = get_job("r1");
    char *le = json_dumps(json_object_get(h, "last_error"), 0);
    cr_assert(le && strstr(le, "killed by Faktory MUTATE") && strstr(le, "permanent"), "%s", le);
    free(le);
    json_decref(h);
    cr_assert_eq(info_size(c, "Dead"), 1);
    cr_assert_eq(info_size(c, "Retries"), 2);

    /* a jid of the other set is not taken */
    OK(c, "MUTATE {\"cmd\":\"discard\",\"target\":\"retries\",\"filter\":{\"jids\":[\"s2\"]}}");
    state_is("s2", "scheduled");
    OK(c, "MUTATE {\"cmd\":\"kill\",\"target\":\"scheduled\",\"filter\":{\"jids\":[\"r2\"]}}");
    state_is("r2", "scheduled");

    /* requeue by jobtype: r3 waits now and is fetched */
    OK(c, "MUTATE {\"cmd\":\"requeue\",\"target\":\"retry\",\"filter\":{\"jobtype\":\"rt2\"}}");
    state_is("r3", "waiting");
    state_is("r2", "scheduled");
    const char *r = cmd(c, "FETCH mr");
    cr_assert(c->kind == ER_FK_R_BULK && strstr(r, "\"r3\""), "FETCH: %s", r);
    OK(c, "ACK {\"jid\":\"r3\"}");

    /* the scheduled set: requeue by jid, kill by jobtype, clear the rest */
    OK(c, "MUTATE {\"cmd\":\"requeue\",\"target\":\"scheduled\",\"filter\":{\"jids\":[\"s2\"]}}");
    state_is("s2", "waiting");
    OK(c, "MUTATE {\"cmd\":\"kill\",\"target\":\"scheduled\",\"filter\":{\"jobtype\":\"st2\"}}");
    state_is("s3", "dead");
    OK(c, "MUTATE {\"cmd\":\"clear\",\"target\":\"scheduled\"}");
    state_is("s1", "cancelled");
    state_is("r2", "scheduled"); /* a retry, not a scheduled job */
    cr_assert_eq(info_size(c, "Scheduled"), 0);
    cr_assert_eq(info_size(c, "Retries"), 1);
    /* the filter does not narrow clear (as Faktory's): r2 is not a "nosuch" */
    OK(c, "MUTATE {\"cmd\":\"clear\",\"target\":\"retries\",\"filter\":{\"jobtype\":\"nosuch\"}}");
    state_is("r2", "cancelled");
    cr_assert_eq(info_size(c, "Retries"), 0);
    cr_assert_eq(info_size(c, "Dead"), 2);
    fk_close(c);
}

Test(transcript, queue_pause_resume_latency_remove)
{
    conn *c = fk_hello("w1");
    OK(c, "PUSH {\"jid\":\"q1\",\"jobtype\":\"t\",\"queue\":\"qa\"}");
    OK(c, "PUSH {\"jid\":\"q2\",\"jobtype\":\"t\",\"queue\":\"qb\"}");
    OK(c, "QUEUE PAUSE qa qb");
    json_t *q = get_queue("qa");
    cr_assert(json_is_true(json_object_get(json_object_get(q, "queue"), "paused")));
    json_decref(q);
    OK(c, "QUEUE RESUME *");
    q = get_queue("qb");
    cr_assert(json_is_false(json_object_get(json_object_get(q, "queue"), "paused")));
    json_decref(q);
    const char *r = cmd(c, "QUEUE LATENCY qa nosuch");
    cr_assert_eq(c->kind, ER_FK_R_BULK, "%s", r);
    json_t *lat = json_loads(r, 0, NULL);
    cr_assert(json_is_number(json_object_get(lat, "qa")) && json_is_number(json_object_get(lat, "nosuch")), "%s", r);
    json_decref(lat);
    OK(c, "QUEUE REMOVE qa");
    json_t *h = get_job("q1");
    cr_assert_str_eq(jstr(h, "state"), "cancelled");
    json_decref(h);
    h = get_job("q2");
    cr_assert_str_eq(jstr(h, "state"), "waiting");
    json_decref(h);
    ERR(c, "PAUSE, RESUME", "QUEUE SHRED qa");
    ERR(c, "queue", "QUEUE PAUSE bad/name");
    ERR(c, "names", "QUEUE PAUSE");
    ERR(c, "stands alone", "QUEUE REMOVE *");
    fk_close(c);
}

Test(transcript, flush_cancels_waiting_and_scheduled_jobs_and_deletes_dead_letters)
{
    conn *c = fk_hello("w1");
    OK(c, "PUSH {\"jid\":\"x1\",\"jobtype\":\"t\",\"retry\":-1}");
    cr_assert_eq((cmd(c, "FETCH default"), c->kind), ER_FK_R_BULK);
    OK(c, "FAIL {\"jid\":\"x1\",\"message\":\"m\"}");
    OK(c, "PUSH {\"jid\":\"x2\",\"jobtype\":\"t\",\"queue\":\"other\"}");
    char at[32];
    time_t tomorrow = time(NULL) + 86400;
    strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tomorrow));
    OK(c, "PUSH {\"jid\":\"x3\",\"jobtype\":\"t\",\"at\":\"%s\"}", at);
    OK(c, "PUSH {\"jid\":\"x4\",\"jobtype\":\"t\"}");
    cr_assert_eq((cmd(c, "FETCH default"), c->kind), ER_FK_R_BULK); /* x4 is active */
    OK(c, "FLUSH");
    cr_assert_null(get_job("x1"));
    const char *want[][2] = {{"x2", "cancelled"}, {"x3", "cancelled"}, {"x4", "active"}};
    for (int i = 0; i < 3; i++) {
        json_t *h = get_job(want[i][0]);
        cr_assert_str_eq(jstr(h, "state"), want[i][1], "%s", want[i][0]);
        json_decref(h);
    }
    OK(c, "ACK {\"jid\":\"x4\"}");
    fk_close(c);
}

TestSuite(transcript_limits, .fini = stop, .timeout = 60);

Test(transcript_limits, an_oversized_line_is_refused_and_closes)
{
    start_with(NULL, "--max-body", "1024", NULL);
    conn *c = fk_hello("w1");
    char big[3000];
    int n = snprintf(big, sizeof big, "PUSH {\"jid\":\"big\",\"jobtype\":\"t\",\"args\":[\"");
    memset(big + n, 'x', sizeof big - (size_t)n - 8);
    memcpy(big + sizeof big - 8, "\"]}\r\n", 5);
    send_all(c->fd, big, sizeof big - 3);
    cr_assert_eq(read_reply(c), 1);
    cr_assert(c->kind == ER_FK_R_ERROR && strstr(c->reply, "longer than 1024"), "%s", c->reply);
    cr_assert(closed(c));
    fk_close(c);
    cr_assert_null(get_job("big"));
}

Test(transcript_limits, a_wrong_password_is_refused_and_closes)
{
    start_with(NULL, "--token", "admin:" TOKEN_ADMIN, NULL);
    conn *c = fk_login("w1", "not-the-token-at-all");
    cr_assert(c->kind == ER_FK_R_ERROR && strstr(c->reply, "Invalid password"), "%s", c->reply);
    cr_assert(closed(c));
    fk_close(c);
    c = fk_open(); /* no pwdhash at all */
    cmd(c, "HELLO {\"v\":2,\"wid\":\"w1\"}");
    cr_assert(c->kind == ER_FK_R_ERROR && strstr(c->reply, "Invalid password"), "%s", c->reply);
    cr_assert(closed(c));
    fk_close(c);
    c = fk_login("w1", TOKEN_ADMIN);
    cr_assert(c->kind == ER_FK_R_SIMPLE, "%s", c->reply);
    fk_close(c);
}

Test(transcript_limits, roles_gate_commands)
{
    start_with(NULL, "--token", "admin:" TOKEN_ADMIN, "--token", "worker:" TOKEN_WORKER,
               "--token", "producer:" TOKEN_PRODUCER, NULL);
    conn *p = fk_login("prod", TOKEN_PRODUCER);
    cr_assert_eq(p->kind, ER_FK_R_SIMPLE, "%s", p->reply);
    OK(p, "PUSH {\"jid\":\"g1\",\"jobtype\":\"t\"}");
    cmd(p, "INFO");
    cr_assert_eq(p->kind, ER_FK_R_BULK);
    ERR(p, "producer role may not FETCH", "FETCH default");
    ERR(p, "may not ACK", "ACK {\"jid\":\"g1\"}");
    ERR(p, "may not BEAT", "BEAT {\"wid\":\"prod\"}");
    conn *w = fk_login("work", TOKEN_WORKER);
    cr_assert_eq(w->kind, ER_FK_R_SIMPLE, "%s", w->reply);
    cr_assert_eq((cmd(w, "FETCH default"), w->kind), ER_FK_R_BULK);
    OK(w, "ACK {\"jid\":\"g1\"}");
    ERR(w, "worker role may not MUTATE", "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\"}");
    ERR(w, "may not FLUSH", "FLUSH");
    ERR(w, "may not QUEUE", "QUEUE PAUSE default");
    conn *a = fk_login("adm", TOKEN_ADMIN);
    OK(a, "QUEUE PAUSE default"); /* allowed */
    OK(a, "FLUSH");
    OK(a, "MUTATE {\"cmd\":\"clear\",\"target\":\"dead\"}");
    fk_close(p);
    fk_close(w);
    fk_close(a);
    /* the worker routes are admin's */
    cr_assert_eq(http("POST", "/v1/workers/work/quiet", "", TOKEN_WORKER, NULL), 403);
    cr_assert_eq(http("POST", "/v1/workers/work/quiet", "", TOKEN_ADMIN, NULL), 200);
}

Test(transcript_limits, the_round_trip_on_postgresql)
{
    const char *base = getenv("ERRAND_TEST_PG_URL");
    if (!base || !*base)
        cr_skip_test("ERRAND_TEST_PG_URL is not set");
    snprintf(S.pg_schema, sizeof S.pg_schema, "fk_transcript_%d", (int)getpid());
    char url[512];
    snprintf(url, sizeof url, "%s%sschema=%s", base, strchr(base, '?') ? "&" : "?", S.pg_schema);
    start_with(url, NULL);
    conn *c = fk_hello("w1"), *d = fk_hello("w1");
    OK(c, "PUSH {\"jid\":\"pg1\",\"jobtype\":\"t\",\"args\":[1]}");
    cr_assert_eq((cmd(c, "FETCH default"), c->kind), ER_FK_R_BULK);
    OK(d, "ACK {\"jid\":\"pg1\"}");
    json_t *h = get_job("pg1");
    cr_assert_str_eq(jstr(h, "state"), "completed");
    json_decref(h);
    fk_close(c);
    fk_close(d);
}
