/*
 * srv_conv.h — conversations kept server-side: one SQLite file in the data
 * folder, with FTS5 full-text search over titles and messages. The chat page
 * (docs/webui.md), the /v1/conversations REST surface and `kiln run`'s /save
 * all go through this API.
 *
 *   srv_conv_store *st;  srv_conv_open("~/.local/share/kiln", &st, &err);
 *   json_t *doc = json_pack("{s:s, s:[{s:s, s:s}]}", "title", "hi", "messages", "role", "user", "content", "hello");
 *   char id[SRV_CONV_ID_MAX];  srv_conv_create(st, doc, id, &err);
 *   json_t *got;  srv_conv_get(st, id, &got, &err);       // the stored conversation
 *   srv_conv_close(st);
 *
 * A conversation document (what GET returns, what create / replace / import take):
 *   {"id", "object": "conversation", "title", "system", "model", "settings": {...},
 *    "created_at", "updated_at" (unix seconds), "messages": [{"id", "role", "content",
 *    "reasoning", "tool_calls", "figures", "created_at"}]}
 * Roles: system, user, assistant, tool. settings and figures are any JSON object the
 * client keeps (the page's sampler settings, a reply's token counts and speeds).
 * Threads: any; one connection behind a mutex (each call is one transaction).
 * Errors: KILN_E_INVALID (bad document, with the field), KILN_E_NOT_FOUND (no such
 * id), KILN_E_TOO_LARGE (over the limits below), KILN_E_IO (SQLite said no).
 */
#ifndef KILN_SRV_CONV_H
#define KILN_SRV_CONV_H

#include <jansson.h>
#include <stddef.h>

#include "util/kiln_err.h"

typedef struct srv_conv_store srv_conv_store;

#define SRV_CONV_ID_MAX 64          /* bytes of an id, NUL included */
#define SRV_CONV_MAX_TITLE 1000     /* bytes */
#define SRV_CONV_MAX_MESSAGES 20000 /* per conversation */
#define SRV_CONV_DB_NAME "conversations.sqlite3"

/* API */
/* The default data folder: $XDG_DATA_HOME/kiln, else ~/.local/share/kiln. */
void srv_conv_default_dir(char *out, size_t n);
/* Opens (creating the folder, mode 0700, and the schema) DIR/conversations.sqlite3.
 * *out is OWNED by the caller (srv_conv_close). */
kiln_code srv_conv_open(const char *dir, srv_conv_store **out, kiln_err *err);
void srv_conv_close(srv_conv_store *st); /* NULL is a no-op */
const char *srv_conv_db_path(const srv_conv_store *st); /* BORROWED */
/* Does s look like an id this store makes or accepts ([A-Za-z0-9_-], 1..63 bytes)? */
int srv_conv_id_ok(const char *s);

/* Summaries, most recently updated first: [{"id", "object", "title", "model",
 * "created_at", "updated_at", "n_messages"}]. With q (any text, NULL = none) only
 * conversations whose title or messages match every word of q (prefix match on
 * the last), best first, each with a "snippet" whose matches are wrapped in
 * U+E000 .. U+E001. *out (OWNED) is a new array; *has_more tells whether more follow. */
kiln_code srv_conv_list(srv_conv_store *st, const char *q, int limit, int offset, json_t **out,
                        int *has_more, kiln_err *err);
/* The whole document (OWNED). KILN_E_NOT_FOUND when there is no such id. */
kiln_code srv_conv_get(srv_conv_store *st, const char *id, json_t **out, kiln_err *err);
/* Stores doc as a new conversation (its "id", if any, is ignored; timestamps kept
 * when given, else now). id_out (SRV_CONV_ID_MAX bytes) gets the new id. */
kiln_code srv_conv_create(srv_conv_store *st, const json_t *doc, char *id_out, kiln_err *err);
/* Replaces title, system, model, settings (those given) and, when doc has
 * "messages", every message. */
kiln_code srv_conv_replace(srv_conv_store *st, const char *id, const json_t *doc, kiln_err *err);
/* Appends messages (an array, or one message object); *first_id (may be NULL)
 * gets the first new message id. */
kiln_code srv_conv_append(srv_conv_store *st, const char *id, const json_t *msgs,
                          long long *first_id, kiln_err *err);
kiln_code srv_conv_delete(srv_conv_store *st, const char *id, kiln_err *err);
/* {"object": "kiln.conversations", "version": 1, "exported_at", "conversations": [doc...]}
 * with one conversation (id) or all of them (id NULL), OWNED. */
kiln_code srv_conv_export(srv_conv_store *st, const char *id, json_t **out, kiln_err *err);
/* Imports an export (above), an array of documents, or one document; each gets a
 * new id (nothing is overwritten). All or nothing. *ids (OWNED) lists the new ids. */
kiln_code srv_conv_import(srv_conv_store *st, const json_t *in, json_t **ids, kiln_err *err);

#endif
