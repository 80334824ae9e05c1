/*
 * srv_webui.c — serving the embedded chat page (docs/webui.md): path lookup,
 * ETags, and the headers that keep model output inert in the browser.
 * Threads: pure lookups over constant tables.
 */
#include "server/srv_webui.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

const char *const srv_webui_headers[] = {
    "Content-Security-Policy",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options", "nosniff",
    "Referrer-Policy", "no-referrer",
    "X-Frame-Options", "DENY",
    "Cache-Control", "no-cache",
    NULL,
};

const srv_asset *srv_webui_find(const char *url)
{
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) url = "/webui/index.html";
    for (size_t i = 0; i < srv_webui_n_files; i++)
        if (!strcmp(srv_webui_files[i].path, url)) return &srv_webui_files[i];
    return NULL;
}

void srv_webui_etag(const srv_asset *a, char *out, size_t n)
{
    snprintf(out, n, "\"%016llx\"", (unsigned long long)XXH64(a->data, a->len, 0));
}
