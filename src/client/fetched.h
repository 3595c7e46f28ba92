/* SPDX-License-Identifier: MIT
 *
 * The reader of one leased job of a fetch reply (tokenized by jscan.h)
 * into a single block: the job's fields as strings and integers, its
 * payload and its whole object as the JSON text the server sent. Pure: no
 * I/O, no locks, no clock.
 */
#ifndef ER_CLIENT_FETCHED_H
#define ER_CLIENT_FETCHED_H

#include <stddef.h>
#include <stdint.h>

#include "client/jscan.h"

/* ---- one leased job --------------------------------------------------------- */

/* A leased job's fields; the strings live in the block returned by
 * er_fetched_read. Absent or non-string fields read as "" (payload: "null"),
 * absent or non-integer numbers as 0. */
typedef struct er_fetched {
    const char *id, *token, *queue, *name, *idem, *trace, *created_at;
    const char *payload; /* the payload's JSON text as sent */
    const char *json;    /* the whole job object's JSON text as sent */
    int64_t attempt, started, timeout_ms;
} er_fetched;

/* Reads the job object at index obj of a parsed reply. Returns owned (free())
 * one block of head zeroed bytes followed by the strings of *out, or NULL
 * when obj is not an object, lacks a string id or lease_token, or memory
 * ran out. */
void *er_fetched_read(const char *text, const er_jscan *s, long obj, size_t head,
                      er_fetched *out);

#endif
