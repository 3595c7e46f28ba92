/* SPDX-License-Identifier: MIT
 *
 * JSON-lines logger. Messages are escaped; each line is written with one
 * write(2) so lines from different threads never interleave.
 */
#include "util/log.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/jsonw.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
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
    char msg[1024], ts[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    er_time_format(er_now_ms(), ts);
    er_jsonw w;
    er_jsonw_init(&w, 8192);
    er_jsonw_begin_object(&w);
    er_jsonw_key(&w, "ts");
    er_jsonw_str(&w, ts);
    er_jsonw_key(&w, "level");
    er_jsonw_str(&w, names[level < 0 ? 0 : level > 3 ? 3 : level]);
    er_jsonw_key(&w, "msg");
    er_jsonw_str(&w, msg);
    er_jsonw_members(&w, extra);
    er_jsonw_end_object(&w);
    if (!w.failed) {
        /* one system call per line, so lines from threads never interleave */
        struct iovec iov[2] = {{w.out.data, w.out.len}, {(void *)"\n", 1}};
        ssize_t n = writev(2, iov, 2);
        (void)n;
    } else {
        static const char lost[] = "{\"level\":\"error\",\"msg\":\"log line too long\"}\n";
        ssize_t n = write(2, lost, sizeof lost - 1);
        (void)n;
    }
    er_jsonw_fini(&w);
}
