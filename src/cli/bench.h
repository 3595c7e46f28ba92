/* SPDX-License-Identifier: MIT
 *
 * `errand bench`, shared between its files: the run's state (struct bench)
 * and its keep-alive connections (struct conn). bench_client.c is the load
 * client (raw-socket HTTP/1.1 on libevent's event loop), bench_scenarios.c
 * drives the scenarios over it, bench.c reads the settings and reports.
 */
#ifndef ER_CLI_BENCH_H
#define ER_CLI_BENCH_H

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct bench bench;

/* Connections the paced producer spreads its enqueues over, so one slow
 * reply does not queue the requests behind it. */
#define PRODUCERS 4

typedef enum scenario { SC_ENQUEUE, SC_BULK, SC_PROCESS, SC_LATENCY } scenario;

typedef struct conn conn;
/* A complete reply (status 0: the connection failed); body borrowed. */
typedef void (*reply_fn)(conn *c, int status, const char *body, size_t len);

/* One keep-alive HTTP/1.1 connection with at most one request in flight.
 * Its read event stays registered, so a request costs one send() and
 * (usually) one recv(), and no epoll_ctl. */
struct conn {
    bench *b;
    int fd; /* -1: not connected */
    struct event *rev, *wev;
    char *out;        /* request being written */
    size_t outlen, outoff, outcap;
    char *in;         /* reply bytes read so far */
    size_t inlen, incap;
    reply_fn on_reply;
    int64_t sent_us;  /* when the request in flight was queued */
    int idx;
    char *acks;       /* process: serialized completes for the next fetch ("" when none) */
    long nacks;
    long sending;     /* enqueue/bulk: jobs in the request in flight */
    bool busy;
    /* latency producers: production times not yet sent, FIFO */
    int64_t *q;
    size_t qhead, qlen, qcap;
};

struct bench {
    struct event_base *base;
    const char *scenario;
    scenario sc;
    const char *queue;
    const char *token;
    char host[128];
    int port;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    long total;       /* jobs to enqueue / process */
    long sent, acked, done, errors;
    long held;        /* process: completes waiting to ride on a fetch */
    int batch;        /* bulk size / fetch max */
    long groups;      /* > 0: job n has group "g<n mod groups>" */
    int nconns;
    conn *conns;
    int64_t t0_us, t1_us;
    int64_t deadline_mono;
    /* latency */
    int rate;
    int64_t lat_secs;
    double *lat;
    long nlat, caplat;
    struct event *tick, *watchdog;
    conn producers[PRODUCERS];
    double *enq_lat;  /* latency: enqueue request round trips (ms) */
    long nenq;
    long produced;
    char run_id[40];
    char enq_path[256]; /* /v1/queues/QUEUE/jobs */
    char hdr[512];      /* Host, Content-Type and Authorization header lines */
    size_t hdrlen;
};

/* ---- the load client (bench_client.c) ---- */

/* The monotonic clock in microseconds. */
int64_t er_bench_now_us(void);
/* A connection of b, not connected yet (idx: its worker number, -1 for a
 * producer); er_bench_conn_fini closes it and frees its buffers. */
void er_bench_conn_init(conn *c, bench *b, int idx);
void er_bench_conn_fini(conn *c);
/* Sends one POST of body (copied) to path on c; the reply goes to cb. When
 * no connection can be opened the request counts as an error and c stays
 * idle. */
void er_bench_send_json(conn *c, const char *path, const char *body, size_t len, reply_fn cb);
/* The run's once-a-second timer (arg: the bench): fails requests without a
 * reply in time and ends a run that cannot go on. */
void er_bench_watchdog_tick(evutil_socket_t fd, short what, void *arg);

/* ---- the scenarios (bench_scenarios.c) ---- */

/* Whether b's scenario is done (or past its deadline). */
bool er_bench_finished(bench *b);
/* Runs b's scenario to its end on a fresh event base. */
void er_bench_run(bench *b);
/* Bulk-enqueues n jobs into queue (untimed set-up); 0 or -1. */
int er_bench_fill(const bench *like, const char *queue, long n);

#endif
