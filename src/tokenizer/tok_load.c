/*
 * tok_load.c — a tokenizer's life: loading from a model folder or from memory,
 * destruction, and the read-only accessors (vocab, special tokens, templates).
 *
 * Lifecycle: tok_load / tok_load_json -> (immutable, shared by threads) -> tok_destroy.
 * tok_destroy accepts a half-built tokenizer (every field starts zeroed).
 * Files read from the folder: tokenizer.json (required), tokenizer_config.json,
 * chat_template.json and chat_template.jinja (optional; later ones win for the
 * templates they define, as transformers loads them).
 * Errors: KILN_E_NOT_FOUND for a missing tokenizer.json; KILN_E_IO; parse errors
 * from tok_json.c.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"
#include "util/plat.h"

#define MAX_JSON_BYTES ((size_t)1 << 30)

kiln_code tok_json_templates(tok_tokenizer *t, const json_t *ct, kiln_err *err);

void tok_destroy(tok_tokenizer *t)
{
    if (!t) return;
    tok_strmap_free(&t->vocab);
    tok_mergemap_free(&t->merges);
    free(t->piece_off);
    free(t->piece_len);
    tok_buf_free(&t->piece_buf);
    free(t->special);
    if (t->norm) tok_norm_free(t->norm);
    free(t->norm);
    if (t->pre) tok_pretok_free(t->pre);
    free(t->pre);
    if (t->dec) tok_dec_free(t->dec);
    free(t->dec);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].norm_content);
    }
    free(t->added);
    tok_strmap_free(&t->added_map);
    tok_trie_free(&t->trie_raw);
    tok_trie_free(&t->trie_norm);
    free(t->post_pre);
    free(t->post_post);
    for (int i = 0; i < TOK_SP_COUNT; i++) free(t->special_text[i]);
    for (size_t i = 0; i < t->n_tmpls; i++) {
        free(t->tmpls[i].name);
        free(t->tmpls[i].text);
    }
    free(t->tmpls);
    free(t);
}

kiln_code tok_load_json(const char *json, size_t len, const char *cfg, size_t cfg_len,
                        tok_tokenizer **out, kiln_err *err)
{
    *out = NULL;
    tok_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory");
    kiln_code rc = tok_json_build(t, json, len, cfg, cfg_len, err);
    if (rc != KILN_OK) {
        tok_destroy(t);
        return rc;
    }
    *out = t;
    return KILN_OK;
}

static kiln_code load_template_files(tok_tokenizer *t, const char *dir, kiln_err *err)
{
    char path[4096];
    char *buf = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/chat_template.json", dir);
    if (plat_is_file(path)) {
        kiln_code rc = plat_read_file(path, MAX_JSON_BYTES, &buf, &len, err);
        if (rc != KILN_OK) return rc;
        json_error_t je;
        json_t *j = json_loadb(buf, len, 0, &je);
        free(buf);
        if (!json_is_object(j)) {
            json_decref(j);
            return kiln_fail(err, KILN_E_CORRUPT, "%s: not a JSON object", path);
        }
        rc = tok_json_templates(t, json_object_get(j, "chat_template"), err);
        json_decref(j);
        if (rc != KILN_OK) return rc;
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (plat_is_file(path)) {
        kiln_code rc = plat_read_file(path, MAX_JSON_BYTES, &buf, &len, err);
        if (rc != KILN_OK) return rc;
        json_t *s = json_stringn_nocheck(buf, len);
        free(buf);
        if (!s) return kiln_fail(err, KILN_E_NOMEM, "tokenizer: out of memory");
        rc = tok_json_templates(t, s, err);
        json_decref(s);
        if (rc != KILN_OK) return rc;
    }
    return KILN_OK;
}

kiln_code tok_load(const char *dir, tok_tokenizer **out, kiln_err *err)
{
    *out = NULL;
    char path[4096];
    char *json = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    kiln_code rc;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!plat_is_file(path)) return kiln_fail(err, KILN_E_NOT_FOUND, "%s: no such file", path);
    if ((rc = plat_read_file(path, MAX_JSON_BYTES, &json, &len, err)) != KILN_OK) return rc;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (plat_is_file(path) && (rc = plat_read_file(path, MAX_JSON_BYTES, &cfg, &cfg_len, err)) != KILN_OK) {
        free(json);
        return rc;
    }
    rc = tok_load_json(json, len, cfg, cfg_len, out, err);
    free(json);
    free(cfg);
    if (rc != KILN_OK) return kiln_err_prefix(err, "%s: ", dir);
    if ((rc = load_template_files(*out, dir, err)) != KILN_OK) {
        tok_destroy(*out);
        *out = NULL;
    }
    return rc;
}

/* ================================================================ accessors */

int32_t tok_vocab_size(const tok_tokenizer *t)
{
    return t->n_ids;
}

const char *tok_token_to_piece(const tok_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_ids || t->piece_off[id] == SIZE_MAX) return NULL;
    if (len) *len = t->piece_len[id];
    return t->piece_buf.p + t->piece_off[id];
}

int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece, size_t len)
{
    int32_t id = tok_strmap_get(&t->added_map, piece, len);
    return id >= 0 ? id : tok_strmap_get(&t->vocab, piece, len);
}

bool tok_is_special(const tok_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->special[id];
}

int32_t tok_bos_id(const tok_tokenizer *t)
{
    return t->bos_id;
}

int32_t tok_eos_id(const tok_tokenizer *t)
{
    return t->eos_id;
}

bool tok_adds_bos(const tok_tokenizer *t)
{
    return t->bos_id >= 0 && t->n_post_pre > 0 && t->post_pre[0] == t->bos_id;
}

bool tok_cleanup_default(const tok_tokenizer *t)
{
    return t->cleanup;
}

const char *tok_special_text(const tok_tokenizer *t, tok_special which)
{
    return (unsigned)which < TOK_SP_COUNT ? t->special_text[which] : NULL;
}

const char *tok_chat_template(const tok_tokenizer *t, const char *name)
{
    for (size_t i = 0; i < t->n_tmpls; i++)
        if (!strcmp(t->tmpls[i].name, name ? name : "default")) return t->tmpls[i].text;
    return NULL;
}
