/* SPDX-License-Identifier: MIT
 *
 * The HTTP API's JSON shape of queue settings: a PUT body read into an
 * er_queue_patch (core/queue.h judges it), and the settings object that GET
 * and PUT answer with.
 */
#ifndef ER_SERVER_HTTP_QUEUE_JSON_H
#define ER_SERVER_HTTP_QUEUE_JSON_H

#include <jansson.h>

#include "core/queue.h"

/* Reads a settings body into *p (strings borrowed from body). Any JSON
 * value may come in: a non-object is refused by er_queue_patch_check. */
void er_http_queue_patch(const json_t *body, er_queue_patch *p);

/* The settings as the API shows them (new reference, NULL on ENOMEM). */
json_t *er_http_settings_json(const er_queue_settings *s);

#endif
