/* SPDX-License-Identifier: MIT
 *
 * What one commit's log write costs on this machine's disk, written as
 * SQLite writes it (two calls a frame: a 24-byte header, then a 4096-byte
 * page) or as one call (src/store/sqlite/walbuf.c), with or without an
 * fdatasync after it. The file is written once first, so the commits
 * overwrite allocated blocks, as errand's kept log does. Prints the CPU and
 * wall time a commit took, averaged. bench/README.md, "One write a commit".
 *   cc -O2 -o /tmp/wal_write_calls bench/wal_write_calls.c
 *   /tmp/wal_write_calls FILE FRAMES pairs|one sync|nosync [COMMITS (1000)]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double cpu_us(void)
{
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
}

static double wall_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s FILE FRAMES pairs|one sync|nosync [COMMITS]\n", argv[0]);
        return 2;
    }
    int frames = atoi(argv[2]);
    int one = strcmp(argv[3], "one") == 0;
    int sync = strcmp(argv[4], "sync") == 0;
    int commits = argc > 5 ? atoi(argv[5]) : 1000;
    if (frames < 1 || commits < 1)
        return 2;
    size_t fs = 24 + 4096, sz = fs * (size_t)frames, total = sz * (size_t)commits;
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
    char *buf = malloc(sz), *zero = calloc(1, 1 << 20);
    if (fd < 0 || !buf || !zero) {
        perror("setup");
        return 1;
    }
    memset(buf, 'x', sz);
    for (size_t o = 0; o < total; o += 1 << 20)
        if (pwrite(fd, zero, 1 << 20, (off_t)o) != 1 << 20) {
            perror("prefill");
            return 1;
        }
    fsync(fd);
    double c0 = cpu_us(), t0 = wall_us();
    off_t off = 0;
    for (int i = 0; i < commits; i++) {
        if (one) {
            if (pwrite(fd, buf, sz, off) != (ssize_t)sz)
                return 1;
            off += (off_t)sz;
        } else {
            for (int f = 0; f < frames; f++, off += (off_t)fs)
                if (pwrite(fd, buf, 24, off) != 24 || pwrite(fd, buf + 24, 4096, off + 24) != 4096)
                    return 1;
        }
        if (sync && fdatasync(fd) != 0)
            return 1;
    }
    printf("{\"frames\":%d,\"calls\":\"%s\",\"sync\":%s,\"cpu_us_per_commit\":%.1f,"
           "\"wall_us_per_commit\":%.1f}\n",
           frames, one ? "one" : "pairs", sync ? "true" : "false", (cpu_us() - c0) / commits,
           (wall_us() - t0) / commits);
    close(fd);
    unlink(argv[1]);
    return 0;
}
