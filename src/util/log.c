/* SPDX-License-Identifier: MIT
 *
 * JSON-lines logger. Messages are escaped; each line is written with one
 * write(2) so lines from different threads never interleave.
 */
#include "util/log.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/jsonw.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

int er_log_level = ER_LOG_INFO;
bool er_log_text = false;

/* The members of a JSON object's inside ("k":v,...) as " k=v" pairs into b:
 * keys lose their quotes, values stay JSON. */
static void text_members(er_buf *b, const char *m)
{
    bool in_str = false, esc = false, key = true;
    int depth = 0;
    er_buf_add(b, " ", 1);
    for (const char *p = m; *p; p++) {
        char ch = *p;
        if (in_str) {
            if (esc)
                esc = false;
            else if (ch == '\\')
                esc = true;
            else if (ch == '"')
                in_str = false;
            if (!(key && depth == 0 && ch == '"' && !in_str))
                er_buf_add(b, p, 1);
            continue;
        }
        if (ch == '"') {
            in_str = true;
            if (!(key && depth == 0))
                er_buf_add(b, p, 1);
            continue;
        }
        if (depth == 0 && key && ch == ':') {
            er_buf_add(b, "=", 1);
            key = false;
            continue;
        }
        if (depth == 0 && ch == ',') {
            er_buf_add(b, " ", 1);
            key = true;
            continue;
        }
        if (ch == '{' || ch == '[')
            depth++;
        else if (ch == '}' || ch == ']')
            depth--;
        er_buf_add(b, p, 1);
    }
}

static void write_line(const char *data, size_t len)
{
    /* one system call per line, so lines from threads never interleave */
    struct iovec iov[2] = {{(void *)data, len}, {(void *)"\n", 1}};
    ssize_t n = writev(2, iov, 2);
    (void)n;
}

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
    if (er_log_text) {
        static const char *upper[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
        er_buf b;
        er_buf_init(&b, 16384);
        er_buf_add(&b, ts, strlen(ts));
        er_buf_add(&b, " ", 1);
        er_buf_add(&b, upper[level < 0 ? 0 : level > 3 ? 3 : level], 5);
        er_buf_add(&b, " ", 1);
        er_buf_add(&b, msg, strlen(msg));
        if (extra && *extra)
            text_members(&b, extra);
        if (!b.err)
            write_line(b.data, b.len);
        er_buf_fini(&b);
        return;
    }
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
        write_line(w.out.data, w.out.len);
    } else {
        static const char lost[] = "{\"level\":\"error\",\"msg\":\"log line too long\"}\n";
        ssize_t n = write(2, lost, sizeof lost - 1);
        (void)n;
    }
    er_jsonw_fini(&w);
}
