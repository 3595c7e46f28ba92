/* SPDX-License-Identifier: MIT
 *
 * The upkeep thread (upkeep.h): one connection, one flag, one loop.
 */
#include "engine/upkeep.h"
#include "util/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

struct er_upkeep {
    const er_store_ops *ops;
    er_store *store; /* set by er_upkeep_open (under mu) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool due, stop; /* under mu */
    _Atomic bool ran; /* a run finished since er_upkeep_ran last said so */
};

static void *upkeep_main(void *arg)
{
    er_upkeep *u = arg;
    pthread_setname_np(pthread_self(), "errand-upkeep");
    pthread_mutex_lock(&u->mu);
    for (;;) {
        while (!u->due && !u->stop)
            pthread_cond_wait(&u->cv, &u->mu);
        if (u->stop)
            break;
        u->due = false;
        er_store *store = u->store;
        pthread_mutex_unlock(&u->mu);
        er_error err = {0};
        if (store && u->ops->checkpoint(store, &err) < 0)
            ER_LOG(ER_LOG_WARN, NULL, "checkpoint: %s", err.message);
        atomic_store(&u->ran, true);
        pthread_mutex_lock(&u->mu);
    }
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

int er_upkeep_start(const er_store_ops *ops, er_upkeep **out, er_error *err)
{
    *out = NULL;
    if (!ops->checkpoint || !ops->checkpoint_due)
        return 0;
    er_upkeep *u = calloc(1, sizeof *u);
    if (!u)
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    u->ops = ops;
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, NULL);
    if (pthread_create(&u->thread, NULL, upkeep_main, u) != 0) {
        pthread_mutex_destroy(&u->mu);
        pthread_cond_destroy(&u->cv);
        free(u);
        return er_error_set(err, ER_ENOMEM, "", "cannot start a thread");
    }
    *out = u;
    return 0;
}

int er_upkeep_open(er_upkeep *u, const char *url, const er_store_options *opt, er_error *err)
{
    er_store *store = NULL;
    int rc = u->ops->open(url, opt, &store, err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&u->mu);
    u->store = store;
    pthread_mutex_unlock(&u->mu);
    return 0;
}

void er_upkeep_kick(er_upkeep *u)
{
    pthread_mutex_lock(&u->mu);
    u->due = true;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
}

bool er_upkeep_ran(er_upkeep *u)
{
    return atomic_exchange(&u->ran, false);
}

void er_upkeep_stop(er_upkeep *u)
{
    if (!u)
        return;
    pthread_mutex_lock(&u->mu);
    u->stop = true;
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
    pthread_join(u->thread, NULL);
    if (u->store)
        u->ops->close(u->store);
    pthread_mutex_destroy(&u->mu);
    pthread_cond_destroy(&u->cv);
    free(u);
}
