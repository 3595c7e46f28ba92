/* SPDX-License-Identifier: MIT
 *
 * Structured JSON-lines logging to stderr. ER_LOG checks the level before it
 * formats anything. Thread-safe (one write per line).
 */
#ifndef ER_UTIL_LOG_H
#define ER_UTIL_LOG_H

#include <stdbool.h>

enum { ER_LOG_DEBUG = 0, ER_LOG_INFO = 1, ER_LOG_WARN = 2, ER_LOG_ERROR = 3, ER_LOG_OFF = 4 };

extern int er_log_level;
/* false (default): JSON lines; true: "TS LEVEL msg key=value ..." for a
 * terminal. Set before threads start. */
extern bool er_log_text;

/* Parses "debug|info|warn|error|off"; returns 0 or ER_EINVAL. */
int er_log_set_level(const char *name);

/* Writes {"ts":..., "level":..., "msg":..., <extra>} where extra is a
 * preformatted JSON members string (may be NULL), e.g. "\"queue\":\"q\"". */
void er_log_write(int level, const char *extra, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define ER_LOG(level, extra, ...)                                                  \
    do {                                                                           \
        if ((level) >= er_log_level)                                               \
            er_log_write((level), (extra), __VA_ARGS__);                           \
    } while (0)

#endif
