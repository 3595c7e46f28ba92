/* SPDX-License-Identifier: MIT
 *
 * A small C Faktory client for the benchmark rows beside the Node ones
 * (bench/faktory/run.sh, bench/README.md): push singly (--conc connections,
 * one command in flight on each, as Faktory clients do), push in bulk
 * (PUSHB on one connection), and process (--conc connections looping FETCH
 * then ACK). No password (a loopback server without tokens). Prints one JSON
 * line with the peers' fields. Built only with -DERRAND_BENCH_FAKTORY=ON.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RBUF 65536

typedef struct conn {
    int fd;
    char buf[RBUF];
    size_t off, len;
} conn;

typedef struct opts {
    const char *host, *queue, *label, *phase;
    int port, conc, batch;
    long jobs, server_pid;
} opts;

static opts o = {"127.0.0.1", "fkbench", "errand-faktory-c", "push", 7419, 10, 1000, 20000, 0};
static atomic_long next_job, done_jobs;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what)
{
    fprintf(stderr, "faktory_bench: %s: %s\n", what, errno ? strerror(errno) : "protocol");
    exit(1);
}

static void send_all(conn *c, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("send");
        p += w;
        n -= (size_t)w;
    }
}

/* Reads one CRLF-terminated line into out (cut at cap-1 bytes); returns its length. */
static size_t read_line(conn *c, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        while (c->off < c->len) {
            char ch = c->buf[c->off++];
            if (ch == '\n') {
                if (n && out[n - 1] == '\r')
                    n--;
                out[n] = '\0';
                return n;
            }
            if (n + 1 < cap)
                out[n++] = ch;
        }
        ssize_t r = recv(c->fd, c->buf, sizeof c->buf, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            die("recv");
        c->off = 0;
        c->len = (size_t)r;
    }
}

/* One reply: 1 for +OK-like and bulk strings (into out), 0 for a null bulk;
 * an error reply ends the run. */
static int reply(conn *c, char *out, size_t cap)
{
    char line[512];
    read_line(c, line, sizeof line);
    if (line[0] == '+') {
        snprintf(out, cap, "%s", line + 1);
        return 1;
    }
    if (line[0] == '$') {
        long n = strtol(line + 1, NULL, 10);
        if (n < 0)
            return 0;
        size_t got = read_line(c, out, cap);
        if ((long)got != n && got + 1 < cap)
            die("short bulk string");
        return 1;
    }
    fprintf(stderr, "faktory_bench: server said %s\n", line);
    exit(1);
}

static void command(conn *c, const char *line, char *out, size_t cap)
{
    send_all(c, line, strlen(line));
    send_all(c, "\r\n", 2);
    if (!reply(c, out, cap))
        die("unexpected null reply");
}

static void dial(conn *c, const char *wid)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o.port)};
    if (inet_pton(AF_INET, o.host, &a.sin_addr) != 1)
        die("--host must be an IPv4 address");
    c->off = c->len = 0;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char line[512], hello[256];
    read_line(c, line, sizeof line); /* +HI {...} */
    if (strncmp(line, "+HI ", 4) != 0)
        die("no greeting");
    if (strstr(line, "\"s\":"))
        die("the server wants a password; run it without tokens");
    if (wid)
        snprintf(hello, sizeof hello, "HELLO {\"v\":2,\"hostname\":\"bench\",\"wid\":\"%s\",\"pid\":%ld}",
                 wid, (long)getpid());
    else
        snprintf(hello, sizeof hello, "HELLO {\"v\":2,\"hostname\":\"bench\"}");
    command(c, hello, line, sizeof line);
}

static int job_json(char *out, size_t cap, const char *queue, long i)
{
    return snprintf(out, cap, "{\"jid\":\"cb-%ld-%s-%ld\",\"jobtype\":\"j\",\"queue\":\"%s\",\"args\":[{\"n\":%ld}]}",
                    (long)getpid(), queue, i, queue, i);
}

static void *push_lane(void *arg)
{
    (void)arg;
    conn *c = malloc(sizeof *c);
    if (!c)
        die("malloc");
    dial(c, NULL);
    char line[512], ok[64];
    long i;
    while ((i = atomic_fetch_add(&next_job, 1)) < o.jobs) {
        int n = snprintf(line, sizeof line, "PUSH ");
        job_json(line + n, sizeof line - (size_t)n, o.queue, i);
        command(c, line, ok, sizeof ok);
        atomic_fetch_add(&done_jobs, 1);
    }
    close(c->fd);
    free(c);
    return NULL;
}

/* PUSHB of jobs [from, to) of queue q on c. */
static void push_bulk(conn *c, const char *q, long from, long to)
{
    size_t cap = 64 + (size_t)(to - from) * 160;
    char *line = malloc(cap), out[4096];
    if (!line)
        die("malloc");
    size_t n = (size_t)snprintf(line, cap, "PUSHB [");
    for (long i = from; i < to; i++) {
        if (i > from)
            line[n++] = ',';
        n += (size_t)job_json(line + n, cap - n, q, i);
    }
    snprintf(line + n, cap - n, "]");
    command(c, line, out, sizeof out);
    if (strcmp(out, "{}") != 0) {
        fprintf(stderr, "faktory_bench: PUSHB refused %s\n", out);
        exit(1);
    }
    free(line);
}

static double t_first, t_last;
static pthread_mutex_t t_mu = PTHREAD_MUTEX_INITIALIZER;

static void *work_lane(void *arg)
{
    long lane = (long)(intptr_t)arg;
    conn *c = malloc(sizeof *c);
    char *job = malloc(RBUF);
    if (!c || !job)
        die("malloc");
    char wid[64], line[512], ok[64];
    snprintf(wid, sizeof wid, "cb-%ld-%ld", (long)getpid(), lane);
    dial(c, wid);
    snprintf(line, sizeof line, "FETCH %s", o.queue);
    while (atomic_load(&done_jobs) < o.jobs) {
        send_all(c, line, strlen(line));
        send_all(c, "\r\n", 2);
        if (!reply(c, job, RBUF))
            continue; /* empty: the others are finishing */
        pthread_mutex_lock(&t_mu);
        if (t_first == 0)
            t_first = now_ms();
        pthread_mutex_unlock(&t_mu);
        const char *p = strstr(job, "\"jid\":\"");
        const char *e = p ? strchr(p + 7, '"') : NULL;
        if (!e)
            die("no jid in the fetched job");
        char ack[300];
        snprintf(ack, sizeof ack, "ACK {\"jid\":\"%.*s\"}", (int)(e - (p + 7)), p + 7);
        command(c, ack, ok, sizeof ok);
        atomic_fetch_add(&done_jobs, 1);
        pthread_mutex_lock(&t_mu);
        t_last = now_ms();
        pthread_mutex_unlock(&t_mu);
    }
    close(c->fd);
    free(job);
    free(c);
    return NULL;
}

static long server_ticks(void)
{
    if (!o.server_pid)
        return -1;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", o.server_pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    long v[16] = {0};
    for (int i = 0; p && i < 15; i++) { /* after ')': fields 3.. */
        p = strchr(p + 1, ' ');
        if (p)
            v[i] = strtol(p + 1, NULL, 10);
    }
    return v[11] + v[12]; /* utime + stime (fields 14, 15) */
}

static double client_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static void run_lanes(void *(*fn)(void *), int n)
{
    pthread_t *t = calloc((size_t)n, sizeof *t);
    if (!t)
        die("calloc");
    for (long i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, fn, (void *)(intptr_t)i) != 0)
            die("pthread_create");
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    free(t);
}

static void usage(void)
{
    fprintf(stderr, "usage: faktory_bench --port P [--host 127.0.0.1] --phase push|pushb|process "
                    "[--jobs 20000] [--conc 10] [--batch 1000] [--queue Q] [--label L] "
                    "[--server-pid PID]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        i++;
        if (!strcmp(k, "--host"))
            o.host = v;
        else if (!strcmp(k, "--port"))
            o.port = (int)strtol(v, NULL, 10);
        else if (!strcmp(k, "--phase"))
            o.phase = v;
        else if (!strcmp(k, "--jobs"))
            o.jobs = strtol(v, NULL, 10);
        else if (!strcmp(k, "--conc"))
            o.conc = (int)strtol(v, NULL, 10);
        else if (!strcmp(k, "--batch"))
            o.batch = (int)strtol(v, NULL, 10);
        else if (!strcmp(k, "--queue"))
            o.queue = v;
        else if (!strcmp(k, "--label"))
            o.label = v;
        else if (!strcmp(k, "--server-pid"))
            o.server_pid = strtol(v, NULL, 10);
        else
            usage();
    }
    if (o.port <= 0 || o.jobs <= 0 || o.conc <= 0 || o.batch <= 0)
        usage();
    conn *c = malloc(sizeof *c);
    if (!c)
        die("malloc");
    const char *phase;
    char extra[64] = "";
    double t0, t1, w0, w1; /* the measured span; the wall span CPU is taken over */
    long s0, s1;
    double c0, c1;
    if (!strcmp(o.phase, "process")) {
        dial(c, NULL);
        for (long b = 0; b < o.jobs; b += o.batch)
            push_bulk(c, o.queue, b, b + o.batch < o.jobs ? b + o.batch : o.jobs);
        close(c->fd);
        s0 = server_ticks();
        c0 = client_cpu_s();
        w0 = now_ms();
        run_lanes(work_lane, o.conc);
        w1 = now_ms();
        phase = "process";
        t0 = t_first;
        t1 = t_last;
    } else if (!strcmp(o.phase, "pushb")) {
        dial(c, NULL);
        s0 = server_ticks();
        c0 = client_cpu_s();
        w0 = t0 = now_ms();
        for (long b = 0; b < o.jobs; b += o.batch)
            push_bulk(c, o.queue, b, b + o.batch < o.jobs ? b + o.batch : o.jobs);
        w1 = t1 = now_ms();
        close(c->fd);
        atomic_store(&done_jobs, o.jobs);
        phase = "enqueue_bulk";
        snprintf(extra, sizeof extra, ",\"batch\":%d", o.batch);
    } else if (!strcmp(o.phase, "push")) {
        s0 = server_ticks();
        c0 = client_cpu_s();
        w0 = t0 = now_ms();
        run_lanes(push_lane, o.conc);
        w1 = t1 = now_ms();
        phase = "enqueue_single";
    } else {
        usage();
        return 2;
    }
    s1 = server_ticks();
    c1 = client_cpu_s();
    free(c);
    double ms = t1 - t0, wall_s = (w1 - w0) / 1000.0;
    long jobs = atomic_load(&done_jobs);
    char srv[32] = "null";
    if (s0 >= 0 && s1 >= 0)
        snprintf(srv, sizeof srv, "%.1f", (double)(s1 - s0) / 100.0 / wall_s * 100.0);
    printf("{\"system\":\"%s\",\"phase\":\"%s\",\"jobs\":%ld,\"conc\":%d%s,\"complete\":%s,"
           "\"ms\":%.1f,\"jobs_per_s\":%.1f,\"server_cpu_pct\":%s,\"client_cpu_pct\":%.1f}\n",
           o.label, phase, jobs, o.conc, extra, jobs >= o.jobs ? "true" : "false", ms,
           (double)jobs / (ms / 1000.0), srv, (c1 - c0) / wall_s * 100.0);
    return 0;
}
