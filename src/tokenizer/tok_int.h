/*
 * tok_int.h — struct layouts and helpers shared only inside tokenizer/.
 * Nothing outside src/tokenizer/ includes this file.
 *
 * The pipeline (tok_encode.c), mirroring HF tokenizers:
 *   text --sanitize--> split on raw added tokens (tok_added.c)
 *        --each text segment--> normalizer (tok_norm.c)
 *        --> split on normalized added tokens --> pre-tokenizer (tok_pretok.c)
 *        --> pieces --> BPE (tok_bpe.c) --> ids --> post-processor (BOS/EOS)
 * Decoding: ids --> token strings --> decoder chain (tok_decode.c) --> lossy UTF-8.
 */
#ifndef KILN_TOK_INT_H
#define KILN_TOK_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok.h"
#include "util/kiln_err.h"

/* ------------------------------------------------------------ buffers */
typedef struct {
    char *p; /* OWNED; NUL-terminated when len < cap */
    size_t len, cap;
} tok_buf;

int tok_buf_reserve(tok_buf *b, size_t extra); /* 0 ok, -1 nomem */
int tok_buf_put(tok_buf *b, const void *s, size_t n);
int tok_buf_putc(tok_buf *b, char c);
void tok_buf_free(tok_buf *b);
/* First occurrence of n[0..nn) in h[0..hn), or NULL (portable memmem). */
const char *tok_memmem(const char *h, size_t hn, const char *n, size_t nn);

/* A piece: a span of a tok_pieces text buffer. */
typedef struct {
    size_t off, len;
    bool at_start; /* the piece begins at offset 0 of the whole input (Metaspace "first") */
    bool added;    /* decoding: the piece is an added token's content (kept verbatim) */
} tok_span;

typedef struct {
    tok_buf text;  /* OWNED */
    tok_span *v;   /* OWNED */
    size_t n, cap;
} tok_pieces;

int tok_pieces_add(tok_pieces *p, const char *s, size_t len, bool at_start);
void tok_pieces_clear(tok_pieces *p);
void tok_pieces_free(tok_pieces *p);

/* ------------------------------------------------------------ UTF-8 */
/* Length of the valid sequence at s (1..4), or 0 when s[0..n) starts with an
 * invalid or truncated one; *cp gets the code point. */
int tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* Length of the maximal subpart of an ill-formed sequence at s (>= 1): what one
 * U+FFFD replaces (WHATWG / Rust from_utf8_lossy). */
size_t tok_utf8_bad_len(const unsigned char *s, size_t n);
/* Appends s with each ill-formed subpart replaced by U+FFFD. */
int tok_utf8_lossy(tok_buf *out, const char *s, size_t n);
bool tok_utf8_valid(const char *s, size_t n);
int tok_utf8_put(tok_buf *b, uint32_t cp);
bool tok_is_whitespace(uint32_t cp); /* Unicode White_Space */
/* Bytes of the UTF-8 character that maps to byte b in GPT-2's bytes_to_unicode. */
int tok_bytelevel_char(unsigned b, char out[2]);
/* Inverse: the byte for code point cp, or -1. */
int tok_bytelevel_byte(uint32_t cp);

/* ------------------------------------------------------------ hash tables */
uint64_t tok_hash(const void *p, size_t n);

/* string -> int32, keys copied into the map's own arena. A lookup touches one
 * slot and the key bytes (two cache misses); ents keeps insertion order for
 * iteration. */
typedef struct {
    struct tok_strslot {
        uint32_t h;   /* low hash bits */
        uint32_t len; /* UINT32_MAX = empty */
        uint32_t off; /* into keys */
        int32_t val;
    } *slots;         /* OWNED */
    size_t mask;
    struct tok_strent {
        uint32_t off, len; /* into keys; the value: tok_strmap_get */
    } *ents;               /* OWNED, in insertion order */
    size_t n, cap;
    tok_buf keys;          /* OWNED */
} tok_strmap;

int tok_strmap_init(tok_strmap *m, size_t expect);
int tok_strmap_put(tok_strmap *m, const char *k, size_t n, int32_t val); /* overwrites */
int32_t tok_strmap_get(const tok_strmap *m, const char *k, size_t n);   /* -1 if absent */
void tok_strmap_free(tok_strmap *m);

/* (left id, right id) -> (rank, merged id) */
typedef struct {
    struct tok_mergeent {
        uint64_t key; /* (uint64)left << 32 | right; UINT64_MAX = empty */
        int32_t rank, id;
    } *slots; /* OWNED */
    size_t mask, n;
} tok_mergemap;

int tok_mergemap_init(tok_mergemap *m, size_t expect);
int tok_mergemap_put(tok_mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
static inline const struct tok_mergeent *tok_mergemap_get(const tok_mergemap *m, int32_t a,
                                                          int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 20) & m->mask;
    for (;;) {
        const struct tok_mergeent *e = &m->slots[i];
        if (e->key == key) return e;
        if (e->key == UINT64_MAX) return NULL;
        i = (i + 1) & m->mask;
    }
}
void tok_mergemap_free(tok_mergemap *m);

/* ------------------------------------------------------------ regex and patterns */
/* Per-call match state: one per tok_encode call (PCRE2 match data is not shareable). */
typedef struct {
    pcre2_match_data *md;     /* OWNED */
    pcre2_match_context *mc;  /* OWNED */
    pcre2_jit_stack *js;      /* OWNED */
} tok_rx;

int tok_rx_init(tok_rx *rx);
void tok_rx_free(tok_rx *rx);

/* A tokenizer.json pattern: {"String": s} (literal) or {"Regex": r} (PCRE2, UTF+UCP). */
typedef struct {
    bool is_regex;
    char *lit;        /* OWNED literal bytes (String) */
    size_t lit_len;
    pcre2_code *code; /* OWNED compiled regex (Regex) */
    bool jit;         /* code has JIT code: match with pcre2_jit_match */
} tok_pattern;

typedef struct {
    size_t start, end;
} tok_range;

kiln_code tok_pattern_compile_regex(tok_pattern *p, const char *re, size_t len, kiln_err *err);
void tok_pattern_free(tok_pattern *p);
/* All non-overlapping matches of p in s[0..n) (s valid UTF-8), appended to *v. */
kiln_code tok_pattern_find(const tok_pattern *p, tok_rx *rx, const char *s, size_t n,
                           tok_range **v, size_t *nv, size_t *cap, kiln_err *err);
/* The same from offset `from`, stopping after max matches (*nv == max: call again
 * from the last match's end). */
kiln_code tok_pattern_find_from(const tok_pattern *p, tok_rx *rx, const char *s, size_t n,
                                size_t from, size_t max, tok_range **v, size_t *nv, size_t *cap,
                                kiln_err *err);

/* ------------------------------------------------------------ components */
typedef enum {
    TOK_NORM_SEQUENCE,
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_REPLACE,
    TOK_NORM_PREPEND,
    TOK_NORM_STRIP,
    TOK_NORM_STRIP_ACCENTS,
} tok_norm_kind;

typedef struct tok_norm {
    tok_norm_kind kind;
    struct tok_norm *subs; /* OWNED array (Sequence) */
    size_t n_subs;
    tok_pattern pat;       /* Replace */
    char *content;         /* OWNED: Replace content / Prepend text */
    size_t content_len;
    bool strip_left, strip_right;
} tok_norm;

typedef enum {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum {
    TOK_PRE_SEQUENCE,
    TOK_PRE_BYTELEVEL,
    TOK_PRE_SPLIT,
    TOK_PRE_DIGITS,
    TOK_PRE_METASPACE,
    TOK_PRE_WHITESPACE,
    TOK_PRE_WHITESPACE_SPLIT,
    TOK_PRE_PUNCTUATION,
    TOK_PRE_REPLACE,
} tok_pre_kind;

typedef enum { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER } tok_prepend_scheme;

typedef struct tok_pretok {
    tok_pre_kind kind;
    struct tok_pretok *subs; /* OWNED array (Sequence) */
    size_t n_subs;
    tok_pattern pat;         /* Split, Replace; ByteLevel/Whitespace regex */
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space, use_regex, individual_digits, split;
    tok_prepend_scheme prepend;
    char repl[8];            /* Metaspace replacement char (UTF-8) */
    size_t repl_len;
    char *content;           /* OWNED: Replace content */
    size_t content_len;
} tok_pretok;

typedef enum {
    TOK_DEC_SEQUENCE,
    TOK_DEC_BYTELEVEL,
    TOK_DEC_BYTEFALLBACK,
    TOK_DEC_METASPACE,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_REPLACE,
    TOK_DEC_BPE,
} tok_dec_kind;

typedef struct tok_dec {
    tok_dec_kind kind;
    struct tok_dec *subs; /* OWNED array (Sequence) */
    size_t n_subs;
    tok_pattern pat;      /* Replace */
    char *content;        /* OWNED: Replace content / BPE suffix */
    size_t content_len;
    uint32_t strip_cp;    /* Strip: the character */
    int strip_start, strip_stop;
    char repl[8];         /* Metaspace */
    size_t repl_len;
    bool prepend_first;   /* Metaspace: drop the first token's leading space */
} tok_dec;

typedef struct {
    int32_t id;
    char *content; /* OWNED */
    size_t len;
    char *norm_content; /* OWNED: content after the normalizer (normalized tokens) */
    size_t norm_len;
    bool special, normalized, lstrip, rstrip, single_word;
} tok_added;

/* Byte trie over added-token contents; leftmost-longest matching. */
typedef struct {
    int32_t *term;     /* OWNED: node -> index into tok_tokenizer.added, -1 */
    size_t n_nodes, cap_nodes;
    struct tok_edge {
        uint64_t key;  /* (node << 8 | byte) + 1; 0 = empty */
        int32_t child;
    } *edges;          /* OWNED open-addressing table */
    size_t edge_mask, n_edges;
    int32_t root[256]; /* root's children, -1 none */
} tok_trie;

/* ------------------------------------------------------------ the tokenizer */
struct tok_tokenizer {
    /* BPE model (tok_bpe.c) */
    tok_strmap vocab;     /* model vocab: token -> id */
    tok_mergemap merges;
    int32_t unk_id;       /* -1 none */
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t byte_ids[256]; /* <0xXX> ids for byte fallback; -1 missing */
    int32_t bl_ids[256];   /* id of the byte-level char of each byte; -1 missing */
    /* SentencePiece words: no merge can cross a "▁" whose previous character never
     * precedes "▁" inside a vocab token, so long words split there (tok_bpe.c). */
    bool meta_split;
    uint32_t meta_prev[16]; /* characters that do precede "▁" inside some token */
    int n_meta_prev;
    /* id -> string (model vocab, overridden by added tokens) */
    size_t *piece_off;     /* OWNED [n_ids]: NUL-terminated string at piece_buf.p + off; SIZE_MAX = none */
    uint32_t *piece_len;   /* OWNED */
    tok_buf piece_buf;     /* OWNED */
    int32_t n_ids;         /* vocab size: max id + 1 */
    uint8_t *special;      /* OWNED [n_ids]: 1 = special (skip_special drops it) */

    tok_norm *norm;        /* OWNED, NULL = none */
    tok_pretok *pre;       /* OWNED, NULL = none */
    tok_dec *dec;          /* OWNED, NULL = none (tokens joined by " ") */
    bool pre_bytelevel_last; /* the pre-tokenizer ends with ByteLevel: map bytes lazily */

    tok_added *added;      /* OWNED [n_added] */
    size_t n_added;
    tok_strmap added_map;  /* content -> id */
    tok_trie trie_raw;     /* non-normalized added tokens, matched on the input */
    tok_trie trie_norm;    /* normalized added tokens, matched after the normalizer */

    int32_t *post_pre, *post_post; /* OWNED: ids added before / after the text */
    size_t n_post_pre, n_post_post;

    int32_t bos_id, eos_id;
    char *special_text[TOK_SP_COUNT]; /* OWNED */
    bool cleanup;
    struct tok_tmpl {
        char *name, *text; /* OWNED */
    } *tmpls;              /* OWNED */
    size_t n_tmpls;
};

/* tok_json.c: tokenizer.json + tokenizer_config.json into t (t zeroed by caller). */
kiln_code tok_json_build(tok_tokenizer *t, const char *json, size_t len, const char *cfg,
                         size_t cfg_len, kiln_err *err);
void tok_norm_free(tok_norm *n);
void tok_pretok_free(tok_pretok *p);
void tok_dec_free(tok_dec *d);

/* tok_norm.c: normalizes s into out (out is reset first). */
kiln_code tok_norm_apply(const tok_norm *n, tok_rx *rx, const char *s, size_t len, tok_buf *out,
                         kiln_err *err);
/* tok_pretok.c: pre-tokenizes *io in place (uses *tmp as scratch). *bytelevel is
 * set when a trailing ByteLevel left its byte->char mapping to the model. */
kiln_code tok_pretok_apply(const tok_tokenizer *t, const tok_pretok *p, tok_rx *rx,
                           tok_pieces *io, tok_pieces *tmp, bool *bytelevel, kiln_err *err);
/* Runs the pre-tokenizer over one segment and hands each final piece to sink,
 * streaming piece by piece when the first stage allows it (Isolated/Removed
 * splits); a and b are scratch. */
typedef kiln_code (*tok_pretok_sink)(void *ctx, const char *s, size_t n, bool bytelevel, kiln_err *err);
kiln_code tok_pretok_each(const tok_tokenizer *t, tok_rx *rx, const char *s, size_t n, bool at_start,
                          tok_pieces *a, tok_pieces *b, tok_pretok_sink sink, void *ctx, kiln_err *err);
/* tok_bpe.c */
typedef struct tok_bpe_cache tok_bpe_cache;
tok_bpe_cache *tok_bpe_cache_new(void);
void tok_bpe_cache_free(tok_bpe_cache *c);
/* Appends the ids of one pre-token (raw bytes when bytelevel, else UTF-8) to ids. */
kiln_code tok_bpe_word(const tok_tokenizer *t, tok_bpe_cache *cache, const char *s, size_t n,
                       bool bytelevel, int32_t **ids, size_t *nids, size_t *cap, kiln_err *err);
/* tok_added.c */
int tok_trie_init(tok_trie *tr);
int tok_trie_add(tok_trie *tr, const char *s, size_t n, int32_t idx);
void tok_trie_free(tok_trie *tr);
/* Finds the leftmost-longest allowed added token in s[from..n). Returns 1 with
 * [*ms, *me) the span to replace (lstrip/rstrip whitespace included) and *idx the
 * added-token index; 0 when none. */
int tok_trie_find(const tok_tokenizer *t, const tok_trie *tr, const char *s, size_t n,
                  size_t from, bool parse_special, size_t *ms, size_t *me, int32_t *idx);
/* tok_decode.c: runs the decoder chain on pieces (raw bytes). first: the chunk
 * starts the text (leading-space rules apply); whole: the chunk is the whole text
 * (trailing rules apply). The result is appended to out (raw, maybe invalid UTF-8). */
kiln_code tok_dec_run(const tok_tokenizer *t, const int32_t *ids, size_t n, bool first,
                      bool whole, tok_buf *out, kiln_err *err);

#endif
