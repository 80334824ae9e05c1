/*
 * tok.h — Hugging Face tokenizer.json (BPE, byte-level and SentencePiece-style)
 * as a library: encode, decode, streaming detokenize, special tokens and the raw
 * chat template text. Depends only on util/.
 *
 *   tok_tokenizer *t; kiln_err err; int32_t *ids; size_t n;
 *   if (tok_load("models/qwen3", &t, &err) != KILN_OK) die(err.msg);
 *   tok_encode(t, "Hello", 5, TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, &ids, &n, &err);
 *   char *s; size_t len; tok_decode(t, ids, n, 0, &s, &len, &err);
 *   free(ids); free(s); tok_destroy(t);
 *
 * Threads: a loaded tok_tokenizer is immutable; any number of threads may use
 * it at once (encode keeps its caches per call). A tok_stream belongs to one
 * thread at a time.
 * Text in and out is UTF-8. Invalid UTF-8 given to tok_encode is replaced by
 * U+FFFD (one per maximal invalid subpart) before anything else, as HF does
 * when Python decodes bytes with errors="replace".
 * Semantics follow Hugging Face tokenizers; where the Rust and JS versions differ
 * the choice is written in docs/tokenizer.md.
 */
#ifndef KILN_TOK_H
#define KILN_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

typedef struct tok_tokenizer tok_tokenizer; /* opaque: fields in tok_int.h */
typedef struct tok_stream tok_stream;       /* opaque: one streaming detokenizer */

/* tok_encode flags */
enum {
    TOK_ADD_SPECIAL = 1u << 0,   /* post-processor / add_bos_token: BOS, EOS (HF add_special_tokens) */
    TOK_PARSE_SPECIAL = 1u << 1, /* special-token text in the input becomes that token (HF default) */
};

/* tok_decode / tok_stream flags */
enum {
    TOK_SKIP_SPECIAL = 1u << 0,   /* drop special tokens (HF skip_special_tokens) */
    TOK_CLEANUP_SPACES = 1u << 1, /* HF clean_up_tokenization (" ." -> "."); see tok_cleanup_default */
};

/* Special token strings from tokenizer_config.json (string or AddedToken object). */
typedef enum {
    TOK_SP_BOS,
    TOK_SP_EOS,
    TOK_SP_UNK,
    TOK_SP_PAD,
    TOK_SP_SEP,
    TOK_SP_CLS,
    TOK_SP_MASK,
    TOK_SP_COUNT
} tok_special;

/* API */
/* Loads DIR/tokenizer.json and DIR/tokenizer_config.json (optional), plus
 * DIR/chat_template.jinja and DIR/chat_template.json when present.
 * *out is NULL on failure. The caller owns *out (tok_destroy). */
kiln_code tok_load(const char *dir, tok_tokenizer **out, kiln_err *err);
/* Same from memory (tests, fuzzing): config may be NULL (config_len 0). */
kiln_code tok_load_json(const char *tokenizer_json, size_t len, /* tokenizer.json bytes */
                        const char *config_json, size_t config_len, /* tokenizer_config.json or NULL */
                        tok_tokenizer **out, kiln_err *err);        /* OUT: new tokenizer */
void tok_destroy(tok_tokenizer *t); /* NULL is a no-op */

/* Encodes len bytes of text. *ids is a new malloc'd array the caller frees with
 * free() (NULL when *n is 0). Errors: KILN_E_NOMEM, KILN_E_INTERNAL (regex). */
kiln_code tok_encode(const tok_tokenizer *t, const char *text, size_t len, /* input, any bytes */
                     unsigned flags,               /* TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL */
                     int32_t **ids, size_t *n,     /* OUT: ids (caller frees), count */
                     kiln_err *err);
/* Decodes ids to UTF-8 text. *text is a new malloc'd NUL-terminated string the
 * caller frees with free(); *len excludes the NUL (may be NULL). An id outside
 * the vocabulary is KILN_E_INVALID. */
kiln_code tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, /* input ids */
                     unsigned flags,              /* TOK_SKIP_SPECIAL | TOK_CLEANUP_SPACES */
                     char **text, size_t *len,    /* OUT: text (caller frees), bytes */
                     kiln_err *err);

int32_t tok_vocab_size(const tok_tokenizer *t); /* max id + 1 (model vocab and added tokens) */
/* The token's string as stored in tokenizer.json ("Ġhello", "▁the", "<0x0A>");
 * borrowed from t, NUL-terminated; NULL for an id with no token. *len may be NULL. */
const char *tok_token_to_piece(const tok_tokenizer *t, int32_t id, size_t *len);
int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece, size_t len); /* -1 if none */
bool tok_is_special(const tok_tokenizer *t, int32_t id);
/* The raw bytes token id adds to decoded text after other tokens (what
 * tok_stream returns for it once started; a special token gives its content):
 * may be an incomplete UTF-8 character on its own (byte-level and byte-fallback
 * pieces). *bytes is a new malloc'd buffer (NUL-terminated) the caller frees;
 * KILN_E_INVALID for an id outside the vocabulary. Grammar masks use this. */
kiln_code tok_token_bytes(const tok_tokenizer *t, int32_t id, char **bytes, size_t *len,
                          kiln_err *err);
int32_t tok_bos_id(const tok_tokenizer *t); /* from tokenizer_config bos_token; -1 if none */
int32_t tok_eos_id(const tok_tokenizer *t); /* from tokenizer_config eos_token; -1 if none */
bool tok_adds_bos(const tok_tokenizer *t);  /* does TOK_ADD_SPECIAL put BOS first? */
bool tok_cleanup_default(const tok_tokenizer *t); /* clean_up_tokenization_spaces (HF default true) */
/* Special token text (borrowed, NUL-terminated) or NULL when the config has none. */
const char *tok_special_text(const tok_tokenizer *t, tok_special which);
/* Raw chat template text (borrowed) by name: "default", "tool_use", or any name of
 * a list-form template (NULL name = "default"); NULL when absent. A plain string
 * template is "default".
 * Precedence as transformers: chat_template.jinja, chat_template.json, then
 * tokenizer_config.json. */
const char *tok_chat_template(const tok_tokenizer *t, const char *name);

/* Streaming detokenizer: push ids one at a time, get back only text that is
 * complete UTF-8 (never half a character). The concatenation of all pushes and
 * the final flush equals tok_decode of the same ids (same flags, without
 * TOK_CLEANUP_SPACES, which needs look-ahead and is refused here).
 * The stream borrows t: t must outlive it. */
kiln_code tok_stream_create(const tok_tokenizer *t, unsigned flags, /* TOK_SKIP_SPECIAL */
                            tok_stream **out, kiln_err *err);       /* OUT: owned by caller */
void tok_stream_destroy(tok_stream *s); /* NULL is a no-op */
/* *text (NUL-terminated, borrowed from s, valid until the next call on s) gets
 * the newly completed text, possibly "" (*len 0). An id outside the vocabulary
 * is KILN_E_INVALID and leaves the stream as it was. */
kiln_code tok_stream_push(tok_stream *s, int32_t id,          /* the next id */
                          const char **text, size_t *len,     /* OUT: new text (borrowed), bytes */
                          kiln_err *err);
/* Ends the stream: returns held bytes (an incomplete character becomes U+FFFD). */
kiln_code tok_stream_flush(tok_stream *s, const char **text, size_t *len, kiln_err *err);
void tok_stream_reset(tok_stream *s); /* back to the start of a new text */

#endif
