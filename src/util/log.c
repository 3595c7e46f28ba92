/* SPDX-License-Identifier: MIT
 *
 * JSON-lines logger. Messages are escaped; each line is written with one
 * write(2) so lines from different threads never interleave.
 */
#include "util/log.h"
#include "util/clock.h"
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int er_log_level = ER_LOG_INFO;

int er_log_set_level(const char *name)
{
    static const char *names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (strcmp(name, names[i]) == 0) {
            er_log_level = i;
            return 0;
        }
    return ER_EINVAL;
}

void er_log_write(int level, const char *extra, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    char msg[512], line[1024], ts[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    er_time_format(er_now_ms(), ts);
    size_t n = (size_t)snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts,
                                names[level < 0 ? 0 : level > 3 ? 3 : level]);
    for (const char *p = msg; *p && n < sizeof line - 8; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            line[n++] = '\\';
            line[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(line + n, sizeof line - n, "\\u%04x", c);
        } else {
            line[n++] = (char)c;
        }
    }
    if (n > sizeof line - 8)
        n = sizeof line - 8;
    int m = snprintf(line + n, sizeof line - n, "\"%s%s}\n", extra && *extra ? "," : "",
                     extra ? extra : "");
    n = (m < 0 || (size_t)m >= sizeof line - n) ? sizeof line - 1 : n + (size_t)m;
    line[sizeof line - 2] = '}';
    line[sizeof line - 1] = '\n';
    if (n < sizeof line - 1) {
        /* fine */
    } else {
        n = sizeof line;
    }
    ssize_t w = write(2, line, n);
    (void)w;
}
