/* SPDX-License-Identifier: MIT
 *
 * The shop example's shared helpers: settings from the environment, JSON log
 * lines that carry the trace id, one HTTP call to a third party (libcurl),
 * and a PostgreSQL connection per thread. Used by shop_api, shop_worker and
 * shop_setup; none of it is part of liberrand.
 */
#ifndef SHOP_H
#define SHOP_H

#include <libpq-fe.h>
#include <stddef.h>

/* An environment setting, or def when unset or empty (borrowed). */
const char *shop_env(const char *name, const char *def);
/* A numeric environment setting, or def when unset; exits the program on a
 * value that is not a whole number (called from main only). */
long shop_env_long(const char *name, long def);

/* One JSON log line on stderr: {"ts","level","msg","prog", extra...}.
 * extra_json is "" or members such as "\"order_id\":\"…\"". Thread-safe. */
void shop_log(const char *level, const char *msg, const char *trace_id, const char *extra_json);
void shop_set_prog(const char *prog);

/* The answer of one HTTP call. body is NUL-terminated, owned: free it. */
typedef struct shop_http {
    long status;          /* 0: no answer (connection error, timeout) */
    char retry_after[64]; /* the Retry-After header, "" when absent */
    char *body;
} shop_http;

/* Calls method url with a JSON body (NULL: none) and up to two extra
 * header lines ("Name: value", NULL to skip). Blocks at most timeout_ms.
 * Returns 0 (see out->status), or -1 when out of memory. */
int shop_http_call(const char *method, const char *url, const char *body, const char *hdr1,
                   const char *hdr2, long timeout_ms, shop_http *out);
void shop_http_free(shop_http *h);

/* This thread's connection to SHOP_DB, (re)connected when bad; NULL with a
 * log line when the database cannot be reached. Closed when the thread ends. */
PGconn *shop_db(void);
/* Runs one statement with no parameters; 0, or -1 (logged). */
int shop_exec(PGconn *c, const char *sql);

/* A fresh 32-hex-digit trace id. */
void shop_trace_id(char out[33]);
/* Copies the JSON string src escaped into dst (no quotes); cuts it to fit. */
void shop_json_escape(char *dst, size_t size, const char *src);

#endif
