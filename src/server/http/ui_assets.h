/* SPDX-License-Identifier: MIT
 *
 * The dashboard's static files (src/server/ui/assets), built into the
 * binary by src/server/ui/embed.cmake: one table, sorted by name. The
 * frontend serves them from memory; nothing is read from disk at run time.
 */
#ifndef ER_SERVER_HTTP_UI_ASSETS_H
#define ER_SERVER_HTTP_UI_ASSETS_H

#include <stddef.h>

typedef struct er_ui_asset {
    const char *name;          /* "app.js" */
    const unsigned char *data; /* NUL-terminated copy of the file */
    size_t len;
} er_ui_asset;

extern const er_ui_asset er_ui_assets[];
extern const size_t er_ui_nassets;

#endif
