/* SPDX-License-Identifier: MIT
 *
 * The datagrams of sdnotify.h. The socket is opened for each message: a
 * server sends a handful (READY, STOPPING) plus a watchdog ping every few
 * seconds, so keeping one open buys nothing.
 */
#include "cli/sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int er_sd_notify(const char *msg, char why[128])
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 1;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof sa.sun_path) {
        snprintf(why, 128, "NOTIFY_SOCKET is not an absolute path or @name of at most %zu bytes",
                 sizeof sa.sun_path - 1);
        return -1;
    }
    memcpy(sa.sun_path, path, len);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* abstract namespace: no NUL at the end */
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                                  (path[0] == '/' ? 1 : 0));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(why, 128, "socket: %s", strerror(errno));
        return -1;
    }
    ssize_t n = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    int e = errno;
    close(fd);
    if (n < 0) {
        snprintf(why, 128, "%s: %s", path, strerror(e));
        return -1;
    }
    return 0;
}

int64_t er_sd_watchdog_usec(void)
{
    const char *pid = getenv("WATCHDOG_PID");
    if (pid && *pid) {
        char *end;
        errno = 0;
        long long p = strtoll(pid, &end, 10);
        if (*end || errno || p <= 0)
            return -1;
        if (p != (long long)getpid())
            return 0;
    }
    const char *us = getenv("WATCHDOG_USEC");
    if (!us || !*us)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(us, &end, 10);
    if (*end || errno || v <= 0)
        return -1;
    return v;
}
