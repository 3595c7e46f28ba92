/* SPDX-License-Identifier: MIT
 *
 * The cross-node wake-up listener: one thread, one store listener
 * (ops->listener_open), a pipe to stop it. It only forwards queue names to
 * the engine's callbacks; the engine decides what to retry. A broken
 * connection is reopened with a backoff from 100 ms up to 5 s.
 */
#include "engine/notify.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

struct er_notify {
    const er_store_ops *ops;
    char *url;
    er_notify_cbs cbs;
    int stop_pipe[2]; /* [0] polled by the thread; closing [1] stops it */
    pthread_t thread;
};

/* Waits up to timeout_ms (-1: forever) for `fd` to be readable or a stop.
 * Returns 1 readable, 0 timeout, -1 stop requested. */
static int wait_fd(er_notify *n, int fd, int timeout_ms)
{
    struct pollfd p[2] = {{.fd = n->stop_pipe[0], .events = POLLIN},
                          {.fd = fd, .events = POLLIN}};
    int rc;
    do {
        rc = poll(p, fd >= 0 ? 2 : 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0 || p[0].revents)
        return -1;
    return rc > 0 ? 1 : 0;
}

static void *notify_main(void *arg)
{
    er_notify *n = arg;
    const er_store_ops *ops = n->ops;
    er_store_listener *l = NULL;
    int backoff = BACKOFF_MIN_MS;
    bool warned = false;
    for (;;) {
        if (!l) {
            er_error err;
            er_error_clear(&err);
            if (ops->listener_open(n->url, &l, &err) < 0) {
                if (!warned)
                    ER_LOG(ER_LOG_WARN, NULL, "cross-node wake-ups: cannot listen (retrying): %s",
                           err.message);
                warned = true;
                if (wait_fd(n, -1, backoff) < 0)
                    break;
                backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
                continue;
            }
            if (warned)
                ER_LOG(ER_LOG_INFO, NULL, "cross-node wake-ups: listening again");
            warned = false;
            backoff = BACKOFF_MIN_MS;
            n->cbs.all(n->cbs.arg); /* what was sent while we were away is lost */
        }
        int w = wait_fd(n, ops->listener_fd(l), -1);
        if (w < 0)
            break;
        er_error err;
        er_error_clear(&err);
        if (w > 0 && ops->listener_poll(l, n->cbs.ready, n->cbs.finished, n->cbs.arg, &err) < 0) {
            ER_LOG(ER_LOG_WARN, NULL, "cross-node wake-ups: connection lost (reconnecting): %s",
                   err.message);
            warned = true;
            ops->listener_close(l);
            l = NULL;
        }
    }
    ops->listener_close(l);
    return NULL;
}

int er_notify_start(const er_store_ops *ops, const char *url, const er_notify_cbs *cbs,
                    er_notify **out, er_error *err)
{
    *out = NULL;
    er_notify *n = calloc(1, sizeof *n);
    if (!n || !(n->url = strdup(url))) {
        free(n);
        return er_error_set(err, ER_ENOMEM, "", "out of memory");
    }
    n->ops = ops;
    n->cbs = *cbs;
    if (pipe(n->stop_pipe) != 0) {
        free(n->url);
        free(n);
        return er_error_set(err, ER_ENOMEM, "", "cannot create a pipe");
    }
    fcntl(n->stop_pipe[0], F_SETFD, FD_CLOEXEC);
    fcntl(n->stop_pipe[1], F_SETFD, FD_CLOEXEC);
    if (pthread_create(&n->thread, NULL, notify_main, n) != 0) {
        close(n->stop_pipe[0]);
        close(n->stop_pipe[1]);
        free(n->url);
        free(n);
        return er_error_set(err, ER_ENOMEM, "", "cannot start a thread");
    }
    *out = n;
    return 0;
}

void er_notify_stop(er_notify *n)
{
    if (!n)
        return;
    close(n->stop_pipe[1]); /* the read end sees EOF: POLLIN/POLLHUP */
    pthread_join(n->thread, NULL);
    close(n->stop_pipe[0]);
    free(n->url);
    free(n);
}
