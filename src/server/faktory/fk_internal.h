/* SPDX-License-Identifier: MIT
 *
 * The Faktory frontend's insides, shared by its files: the server and its
 * connections (conn.c: listener, buffers, framing, replies), the command
 * handlers (cmds.c) and the worker registry with the jid -> lease cache
 * (workers.c). Loop thread only.
 */
#ifndef ER_SERVER_FAKTORY_FK_INTERNAL_H
#define ER_SERVER_FAKTORY_FK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/ack.h"
#include "core/fetch.h"
#include "core/job.h"
#include "core/lease.h"
#include "server/faktory/faktory.h"
#include "server/faktory/proto.h"
#include "util/buf.h"
#include "util/clock.h"

struct bufferevent;
struct evconnlistener;
struct event;
struct ssl_ctx_st;

#define ER_FK_HASH_ITERATIONS 100   /* "i" of the greeting */
#define ER_FK_FETCH_WAIT_MS 2000    /* FETCH blocks this long */
#define ER_FK_BEAT_FLUSH_MS 1000    /* beats are written to the store this often */
#define ER_FK_BEATS_INFLIGHT 8      /* beat writes in flight at once */
#define ER_FK_ASK_MAX 1000          /* wids one beat write reads back */
#define ER_FK_WORKERS_MAX 100000
#define ER_FK_HANDSHAKE_S 10        /* HELLO must come within this */
#define ER_FK_OUT_MAX (64u << 20)   /* one reply */
#define ER_FK_OUT_PENDING (1u << 20) /* replies unread by the peer before reading stops */
#define ER_FK_CACHE_MAX 200000      /* jid -> lease entries kept */
#define ER_FK_PREFETCH_MAX 256      /* --faktory-prefetch's bound */
#define ER_FK_PREFETCH_HOLD_MS 1000 /* a buffered job not handed out this long is released */
#define ER_FK_PREFETCH_SWEEP_MS 250 /* how often that is checked */
#define ER_FK_PREFETCH_BACKOFF_MS 5000 /* k does not grow this long after such a release */

typedef struct fk_worker {
    er_fk_worker_view v;
    /* prefetch (prefetch.c): jobs leased to this wid, not handed out yet */
    er_job *pre;       /* f->prefetch slots, NULL until the first is buffered */
    int64_t *pre_at;   /* when each was leased (ms) */
    size_t npre;
    int k;             /* the next store fetch's size */
    bool released;     /* a buffered job was released since the last store fetch */
    int64_t grow_at;   /* k grows again from then (ms) */
    int held;          /* jobs handed out and not acknowledged */
    int peak;          /* the most it held at a FETCH lately, plus one */
    bool refilling;    /* a refill of its buffer is in flight (one at a time) */
    int64_t refill_ns; /* when it was submitted (monotonic ns) */
    bool refill_dry;   /* a refill came back short: none until a FETCH goes to the store */
    int64_t ask_ns;    /* its last FETCH (monotonic ns) */
    int64_t gap_ns;    /* time between its FETCHes, averaged */
    int64_t fetch_ns;  /* a store fetch's round trip for it, averaged */
    /* the registry in the store (workers.c) */
    char *labels;      /* HELLO's labels as JSON text, or NULL */
    int64_t proto_v;   /* HELLO's v (0: not said) */
    bool dirty;        /* beat since the last write to the store */
    int64_t stored_beat; /* its last beat anywhere, as the store said lately */
    struct fk_worker *next;
} fk_worker;

/* A lease FETCH handed out on this node: the fast path of ACK and FAIL
 * (the store stays the authority: a refused token falls back to it). */
typedef struct fk_lease {
    char *jid, *token, *wid; /* owned */
    int64_t expires_at;
    struct fk_lease *next;
} fk_lease;

#define FK_CACHE_BUCKETS 65536

/* A jid -> (token, wid) table: the leases FETCH handed out (workers.c). */
typedef struct fk_cache {
    fk_lease **b; /* FK_CACHE_BUCKETS chains, NULL until the first put */
    size_t n;
} fk_cache;

typedef struct fk_conn fk_conn;
typedef void (*fk_finish)(fk_conn *c, er_req *r);

struct fk_conn {
    er_faktory *f;
    struct bufferevent *bev;
    char salt[17];
    bool hello;        /* the handshake is done */
    bool closing;      /* close once the output is written */
    bool gone;         /* the socket is closed; freed when pending comes back */
    bool in_process;   /* process() is on the stack */
    bool blocked;      /* reading stopped until the peer reads its replies */
    bool parked;       /* its FETCH (pending, not submitted) waits for its wid's refill */
    bool wake;         /* parked, and woken by the refill that came back */
    int64_t fetch_ns;  /* when its store fetch was submitted (monotonic ns) */
    size_t scanned;    /* input bytes known to hold no line end */
    er_role role;
    char wid[ER_NAME_MAX + 1]; /* "" when the HELLO gave none */
    er_req *pending;   /* the engine request in flight (one at a time) */
    fk_finish finish;
    /* ACK / FAIL in progress */
    char jid[ER_ID_MAX + 1];
    bool fail;
    bool track;        /* TRACK SET: a heartbeat instead of an outcome */
    int64_t track_until; /* TRACK SET's reserve_until (ms); 0: the lease's end is kept */
    char *track_progress; /* TRACK SET's {"percent","desc"} as JSON text, or NULL */
    int64_t lease_end; /* the lease's end as the cache or the store said */
    bool from_cache;   /* the token came from the cache */
    er_failure failure;
    int64_t lease_ms;  /* FETCH: the lease the job gets */
    /* QUEUE PAUSE|RESUME over several queues (admin.c): names left */
    char **names;
    size_t nnames, at;
    bool pause;
    int64_t retries;   /* INFO: the retry set's size, counted before the queues are read */
    int64_t live_workers; /* INFO: the store's live workers (every node's) */
    er_buf out;        /* the reply being built */
    fk_conn *prev, *next;
};

struct er_faktory {
    struct event_base *base;
    er_engine *engine;
    const er_token *tokens;
    size_t ntokens;
    size_t line_max, payload_max;
    int max_conns, nconns;
    int64_t reserve_min_ms;
    int prefetch;      /* most jobs one FETCH leases to a wid (1: no prefetch) */
    bool stopping;     /* shutdown began: no more prefetch */
    struct event *pre_ev; /* releases buffered jobs held too long */
    er_req **refills;  /* buffer refills in flight */
    size_t nrefills, refills_cap;
    struct evconnlistener *lev;
    struct ssl_ctx_st *tls; /* the TLS context of every connection, NULL: plain TCP */
    int port;
    fk_conn *conns;
    er_rand rand;
    fk_worker *workers;
    size_t nworkers;
    struct event *reap_ev;
    int64_t started_ms;
    uint64_t commands; /* command lines read, for INFO */
    fk_cache leases;  /* jid -> the lease this node handed out */
    char node[ER_WORKER_NODE_MAX + 1]; /* this server, as worker rows name it */
    struct event *beat_ev; /* writes the beats to the store */
    er_req *beats[ER_FK_BEATS_INFLIGHT]; /* beat writes in flight */
};

/* conn.c: sends c->out (and empties it); closes after it when `close`. */
void er_fk_send(fk_conn *c, bool close);
/* A reply of one error line, then (close) the connection closes. */
void er_fk_send_error(fk_conn *c, const char *code, const char *msg, bool close);
/* Submits r with finish as its continuation (c->pending until it returns). */
void er_fk_submit(fk_conn *c, er_req *r, fk_finish finish);
/* Holds r (c->pending, not submitted) until er_fk_wake calls finish. */
void er_fk_park(fk_conn *c, er_req *r, fk_finish finish);
/* Runs the continuation of every connection of wid parked now. */
void er_fk_wake(er_faktory *f, const char *wid);

/* cmds.c: one command line of a connection past its handshake check. */
void er_fk_run(fk_conn *c, const char *line, size_t n);

/* admin.c: MUTATE {json} and QUEUE SUBCOMMAND args (admin commands). */
void er_fk_mutate(fk_conn *c, const char *arg, size_t n);
void er_fk_queue(fk_conn *c, const char *arg, size_t n);
void er_fk_names_free(fk_conn *c);
/* FLUSH: cancels every waiting and scheduled job, deletes the dead letters. */
void er_fk_flush(fk_conn *c);
/* cmds.c's replies, for admin.c */
void er_fk_reply_ok(fk_conn *c);
void er_fk_reply_req_error(fk_conn *c, er_req *r);
/* When r failed (r->rc): replies its error, frees r and returns true. */
bool er_fk_failed(fk_conn *c, er_req *r);
/* Frees r (NULL: none) and replies "out of memory". */
void er_fk_oom(fk_conn *c, er_req *r);
json_t *er_fk_arg_json(fk_conn *c, const char *arg, size_t n, bool object);

/* prefetch.c. The store fetch size for w now (1: no prefetch), grown
 * when w drained its buffer since the last one. */
int er_fk_pre_size(er_faktory *f, fk_worker *w, int64_t now);
/* Moves a buffered job of the first of queues that has one into *out. */
bool er_fk_pre_take(fk_worker *w, char *const *queues, size_t nq, er_job *out);
/* Buffers *j (moved); false (j untouched) when the buffer is full. */
bool er_fk_pre_put(er_faktory *f, fk_worker *w, er_job *j, int64_t now);
/* Releases (attempt not counted) w's buffered jobs leased before `before`
 * (INT64_MAX: all of them); the store is told, nobody waits. */
void er_fk_pre_release(er_faktory *f, fk_worker *w, int64_t before);
/* Releases jobs[0..n) (moved) the same way. */
void er_fk_pre_release_jobs(er_faktory *f, er_job *jobs, size_t n);
/* A FETCH from w, a job handed to it, one it acknowledged: the
 * concurrency it shows (a FETCH while holding n jobs shows n + 1). */
void er_fk_pre_asked(fk_worker *w);
void er_fk_pre_handed(fk_worker *w);
void er_fk_pre_acked(fk_worker *w);
/* A store fetch for w took ns (it brought jobs): the average round trip. */
void er_fk_pre_fetched(fk_worker *w, int64_t ns);
/* After a buffered take for a FETCH like `like`: when w's buffer would run
 * dry within about one store round trip at its pace, one refill (no wait,
 * like's queues and lease) tops it up in the background; the wid's
 * connections whose FETCH finds the buffer empty meanwhile park until it
 * is back (er_fk_wake). */
void er_fk_pre_refill(er_faktory *f, fk_worker *w, const er_fetch_args *like);
/* Refills in flight forget f (er_faktory_free): their leases expire. */
void er_fk_pre_refills_forget(er_faktory *f);
/* The timer's pass: releases what was held ER_FK_PREFETCH_HOLD_MS. */
void er_fk_pre_sweep(er_faktory *f, int64_t now);
/* Frees w's buffer without telling the store (the leases expire). */
void er_fk_pre_free(fk_worker *w);

/* workers.c */
fk_worker *er_fk_worker_find(er_faktory *f, const char *wid);
/* Finds or adds wid (last_beat = now). NULL when the registry is full or
 * memory ran out. */
fk_worker *er_fk_worker_touch(er_faktory *f, const char *wid, int64_t now);
/* Drops the workers with no beat for ER_FK_WORKER_TTL_MS, here or (as the
 * store said lately) on any node, releasing their buffered jobs. */
void er_fk_workers_reap(er_faktory *f, int64_t now);
/* Writes the beats since the last write to the store in one request, and
 * learns the signals set on any node (and, from the timer, the last beat
 * of workers that beat elsewhere). From the timer (`timer`), nothing is
 * sent while a write is in flight. */
void er_fk_beats_flush(er_faktory *f, bool timer);
void er_fk_workers_free(er_faktory *f);
/* The lease cache: remember (copies), find (borrowed until the next
 * change), forget. */
void er_fk_cache_put(fk_cache *t, const char *jid, const char *token, const char *wid,
                     int64_t expires_at);
const fk_lease *er_fk_cache_get(const fk_cache *t, const char *jid);
void er_fk_cache_del(fk_cache *t, const char *jid);
void er_fk_cache_sweep(fk_cache *t, int64_t now);
void er_fk_cache_free(fk_cache *t);

#endif
