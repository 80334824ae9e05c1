/*
 * srv_webui.h — the chat page's files, embedded in the binary at build time
 * (tools/embed_assets.cmake writes them from webui/), and how they are served.
 *
 *   const srv_asset *a = srv_webui_find("/");      // index.html
 *   if (a) send a->data, a->len as a->ctype with srv_webui_headers
 */
#ifndef KILN_SRV_WEBUI_H
#define KILN_SRV_WEBUI_H

#include <stddef.h>

typedef struct {
    const char *path;          /* "/webui/app.js" */
    const unsigned char *data; /* STATIC bytes */
    size_t len;
    const char *ctype;         /* Content-Type */
} srv_asset;

/* The security headers every page response carries: name, value pairs, NULL-ended.
 * The CSP allows scripts, styles and connections from this server only. */
extern const char *const srv_webui_headers[];

/* generated (build/generated/srv_webui_assets.c) */
extern const srv_asset srv_webui_files[];
extern const size_t srv_webui_n_files;

/* API */
/* The asset for a URL path ("/" and "/index.html" are the page), or NULL. */
const srv_asset *srv_webui_find(const char *url);
/* A strong ETag for an asset ("\"<16 hex>\""), into out (>= 20 bytes). */
void srv_webui_etag(const srv_asset *a, char *out, size_t n);

#endif
