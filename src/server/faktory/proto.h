/* SPDX-License-Identifier: MIT
 *
 * The Faktory Work Protocol's framing (version 2), with no I/O: command
 * lines a client sends ("VERB arg\r\n"), the RESP replies a server sends
 * (+simple, -error, $len bulk, $-1 null) and a reader for those replies
 * (for clients and tests). Every reader takes a length limit and never reads
 * past the bytes it is given. The RESP shapes of the protocol live here and
 * nowhere else.
 */
#ifndef ER_SERVER_FAKTORY_PROTO_H
#define ER_SERVER_FAKTORY_PROTO_H

#include <stdbool.h>
#include <stddef.h>

#include "util/buf.h"

#define ER_FK_LINE_MAX_DEFAULT (16u * 1024 * 1024) /* one command line */
#define ER_FK_BULK_MAX_DEFAULT (16u * 1024 * 1024) /* one bulk reply */

typedef enum er_fk_verb {
    ER_FK_UNKNOWN = 0,
    ER_FK_HELLO,
    ER_FK_PUSH,
    ER_FK_PUSHB,
    ER_FK_FETCH,
    ER_FK_ACK,
    ER_FK_FAIL,
    ER_FK_BEAT,
    ER_FK_INFO,
    ER_FK_END,
    ER_FK_FLUSH,
    ER_FK_MUTATE,
    ER_FK_QUEUE,
    ER_FK_TRACK,
} er_fk_verb;

/* "PUSH", ...; "" for ER_FK_UNKNOWN. Static text. */
const char *er_fk_verb_name(er_fk_verb v);

/* Finds the first line in buf[0..len): 1 with *line_len (without the line
 * end, "\r\n" or a bare "\n") and *used (with it); 0 when no line end is
 * there yet and len <= max; ER_ETOOBIG when the line (its end not counted)
 * is longer than max bytes. */
int er_fk_line_next(const char *buf, size_t len, size_t max, size_t *line_len, size_t *used);

/* One command line: the verb and the argument after the first space
 * (borrowed slices of the line; arg_len 0 when none). */
typedef struct er_fk_command {
    er_fk_verb verb;
    const char *name; /* the verb as sent */
    size_t name_len;
    const char *arg;
    size_t arg_len;
} er_fk_command;

/* Splits line[0..n) into *out. ER_EINVAL with a message in *why (static
 * text) for an empty line, a verb that is not 1..16 of A-Z, or a line
 * holding NUL or a control byte other than tab; an unknown verb of
 * capitals is ER_FK_UNKNOWN and 0. */
int er_fk_command_parse(const char *line, size_t n, er_fk_command *out, const char **why);

/* True when line[0..n) looks like the start of an HTTP request (a method
 * followed by a space, or " HTTP/1." in it): a browser or a proxy, never a
 * Faktory client. */
bool er_fk_looks_like_http(const char *line, size_t n);

/* Replies appended to b (its own limit applies; the first failure is in
 * b->err). Error text has CR and LF replaced by spaces. */
void er_fk_reply_simple(er_buf *b, const char *text); /* "+text\r\n" */
void er_fk_reply_error(er_buf *b, const char *code, const char *msg); /* "-CODE msg\r\n" */
void er_fk_reply_bulk(er_buf *b, const char *data, size_t n);         /* "$n\r\ndata\r\n" */
void er_fk_reply_null(er_buf *b);                                     /* "$-1\r\n" */

/* A reply as read. */
typedef enum er_fk_reply_kind {
    ER_FK_R_SIMPLE = 1,
    ER_FK_R_ERROR = 2,
    ER_FK_R_BULK = 3,
    ER_FK_R_NULL = 4,
} er_fk_reply_kind;

typedef struct er_fk_reply {
    er_fk_reply_kind kind;
    const char *data; /* borrowed from the buffer: the text after +/-, or the bulk's bytes */
    size_t len;
} er_fk_reply;

/* Reads the first reply of buf[0..len): 1 with *r and *used; 0 when more
 * bytes are needed; ER_ETOOBIG past line_max or a bulk longer than
 * bulk_max; ER_EINVAL for anything else (an unknown type byte, a bad
 * length, a bulk not ended by "\r\n"). */
int er_fk_reply_next(const char *buf, size_t len, size_t line_max, size_t bulk_max,
                     er_fk_reply *r, size_t *used);

#endif
