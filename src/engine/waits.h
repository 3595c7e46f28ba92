/* SPDX-License-Identifier: MIT
 *
 * Waits for a job's outcome (GET /v1/jobs/{id}?wait_ms=N): the registry of
 * read requests that wait for their job to finish, keyed by a 32-bit key
 * of the job id, and the keys of the jobs a transaction finished. A wait
 * is registered on the loop thread before its first read, so a job that
 * finishes after the read began is seen by the writer's look at the
 * registry after its commit (or by another node's announcement) and the
 * wait reads again; one read at a time per wait, on the reader thread,
 * never on the writer. Internal to src/engine; it knows no store.
 */
#ifndef ER_ENGINE_WAITS_H
#define ER_ENGINE_WAITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

struct event_base;

/* The key of a job id: 32-bit FNV-1a of its bytes. Servers sharing a store
 * exchange keys (store.h's ops->finished), so every server on one store
 * must compute the same: changing it needs a new channel (store) name. Two
 * ids with one key only cost a wait a needless read. */
uint32_t er_wait_key(const char *id);

/* Keys of jobs finished in the open transaction. `all`: a key could not be
 * kept (out of memory), so any job may have finished. */
typedef struct er_keys {
    uint32_t *v;
    size_t n, cap;
    bool all;
} er_keys;

void er_keys_add(er_keys *k, const char *id);
/* Empties k (keeps its memory for the next transaction). */
void er_keys_clear(er_keys *k);
void er_keys_fini(er_keys *k);

typedef struct er_waits er_waits;

typedef struct er_waits_cbs {
    /* Reads r's job again: r goes to the reader, and comes back through
     * er_waits_settle. Loop thread. */
    void (*read)(er_req *r, void *arg);
    /* Answers r, which the waits no longer hold. Loop thread. */
    void (*answer)(er_req *r, void *arg);
    void *arg;
} er_waits_cbs;

/* A registry of at most `max` waits (0: none) on `base` (notifiable from
 * other threads). Returns 0 or ER_ENOMEM. */
int er_waits_new(struct event_base *base, size_t max, const er_waits_cbs *cbs, er_waits **out);
/* Frees the registry and the requests it alone holds (parked ones); the
 * ones being read only lose their timers. NULL-safe. Loop thread, after
 * the reader stopped. */
void er_waits_free(er_waits *w);

/* ---- loop thread ---- */

/* Registers r (GET_JOB, wait_ms > 0) before its first read; its deadline
 * is now + wait_ms. 0; ER_EUNAVAIL when `max` waits are registered (r is
 * not); ER_ENOMEM. */
int er_waits_add(er_waits *w, er_req *r);
/* r's read came back. True: r is unregistered, answer it now (its job
 * finished or is not there, the read failed, its wait ran out, its client
 * left, or waits stopped). False: the waits keep r (parked until a wake-up
 * or its deadline, or reading again). */
bool er_waits_settle(er_waits *w, er_req *r);
/* r's client is gone: a parked r is answered soon (never inside this
 * call); one being read is answered when its read is back. */
void er_waits_abandon(er_waits *w, er_req *r);
/* Answers every wait after one more read, and makes later ones settle at
 * their first read (shutdown). */
void er_waits_stop(er_waits *w);
bool er_waits_stopped(const er_waits *w);

/* ---- any thread ---- */

/* Jobs with these keys finished (a commit of this node, or another
 * node's): waits on them read again. keys NULL: every wait reads again. */
void er_waits_wake(er_waits *w, const uint32_t *keys, size_t n);
/* Waits registered now (a cheap check before er_waits_wake). */
size_t er_waits_count(const er_waits *w);

typedef struct er_waits_stats {
    uint64_t parked;  /* waits that parked (found their job unfinished) */
    uint64_t refused; /* waits refused: `max` were registered */
    uint64_t waiting; /* registered now */
} er_waits_stats;

/* Loop thread (refused is counted by the engine, here zero). */
void er_waits_get_stats(const er_waits *w, er_waits_stats *out);

#endif
