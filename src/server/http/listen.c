/* SPDX-License-Identifier: MIT
 *
 * Listen addresses and the loopback rule (listen.h).
 */
#include "server/http/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_listen(const char *listen, const char *field, char *host, size_t hcap,
                        int *port, er_error *err)
{
    if (!listen || !*listen)
        return er_error_set(err, ER_EINVAL, field, "listen address is empty");
    const char *hs, *he, *colon;
    if (listen[0] == '[') {
        hs = listen + 1;
        he = strchr(hs, ']');
        if (!he || he[1] != ':')
            return er_error_set(err, ER_EINVAL, field, "expected [IPv6]:PORT");
        colon = he + 1;
    } else {
        hs = listen;
        colon = strrchr(listen, ':');
        if (!colon || memchr(listen, ':', (size_t)(colon - listen)))
            return er_error_set(err, ER_EINVAL, field, "expected HOST:PORT or [IPv6]:PORT");
        he = colon;
    }
    size_t hl = (size_t)(he - hs);
    if (hl == 0 || hl >= hcap)
        return er_error_set(err, ER_EINVAL, field, "bad host in listen address");
    memcpy(host, hs, hl);
    host[hl] = '\0';
    const char *ps = colon + 1;
    char *end;
    errno = 0;
    long p = strtol(ps, &end, 10);
    if (!*ps || *end || errno || p < 0 || p > 65535)
        return er_error_set(err, ER_EINVAL, field, "port must be 0..65535");
    *port = (int)p;
    return 0;
}

/* 1 loopback, 0 not, -1 unknown (a host name). */
static int literal_is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    return -1;
}

bool er_sockaddr_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        return IN6_IS_ADDR_LOOPBACK(&a->sin6_addr) ||
               (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr) && a->sin6_addr.s6_addr[12] == 127);
    }
    return false;
}

int er_listen_prepare(const char *listen, size_t ntokens, const char *field, char *host,
                      size_t hcap, int *port, er_error *err)
{
    int rc = parse_listen(listen, field, host, hcap, port, err);
    if (rc < 0)
        return rc;
    if (literal_is_loopback(host) < 0) {
        /* a host name: resolved once here, so the loopback rule is checked
         * before anything binds, and the address checked is the one bound */
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_ADDRCONFIG};
        struct addrinfo *ai = NULL;
        int gai = getaddrinfo(host, NULL, &hints, &ai);
        if (gai != 0 || !ai)
            return er_error_set(err, ER_EINVAL, field, "cannot resolve %s: %s", host,
                                gai_strerror(gai));
        char name[INET6_ADDRSTRLEN];
        const void *a = ai->ai_family == AF_INET6
                            ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                            : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        bool ok = inet_ntop(ai->ai_family, a, name, sizeof name) != NULL;
        freeaddrinfo(ai);
        if (!ok || strlen(name) >= hcap)
            return er_error_set(err, ER_EINVAL, field, "cannot resolve %s", host);
        snprintf(host, hcap, "%s", name);
    }
    if (ntokens == 0 && literal_is_loopback(host) == 0)
        return er_error_set(err, ER_EINVAL, field,
                            "refusing to listen on non-loopback %s without tokens", host);
    return 0;
}

int er_listen_bound(int fd, size_t ntokens, const char *field, char *out, size_t cap, int *port,
                    bool *loopback, er_error *err)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        int e = errno;
        return er_error_set(err, ER_EINTERNAL, field, "getsockname: %s", strerror(e));
    }
    char addr[INET6_ADDRSTRLEN] = "";
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, addr, sizeof addr);
        *port = ntohs(a->sin6_port);
        snprintf(out, cap, "[%s]:%d", addr, *port);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, addr, sizeof addr);
        *port = ntohs(a->sin_port);
        snprintf(out, cap, "%s:%d", addr, *port);
    }
    *loopback = er_sockaddr_is_loopback(&ss);
    if (ntokens == 0 && !*loopback)
        return er_error_set(err, ER_EINVAL, field,
                            "refusing to listen on non-loopback %s without tokens", addr);
    return 0;
}
