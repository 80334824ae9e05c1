/*
 * gr.h — constrained decoding: grammars (GBNF, JSON Schema, or built in C),
 * compiled once, matched per sequence against a tokenizer's vocabulary.
 *
 *   gr_vocab *v;     gr_vocab_create(tok, &v, &err);              // once per tokenizer
 *   gr_grammar *g;   gr_compile_json_schema(schema, &opts, &g, &err);   // or gr_compile_gbnf
 *   gr_matcher *m;   gr_matcher_create(g, v, &m, &err);           // one per generated sequence
 *   uint64_t *bits = calloc(gr_vocab_words(v), 8);
 *   for (;;) {
 *       gr_matcher_mask(m, bits, &err);            // 1 = allowed (special tokens only via gr_special)
 *       ... sample tok among allowed bits (EOS only when gr_matcher_accepting(m)) ...
 *       gr_matcher_accept_token(m, tok, &err);
 *       if (gr_matcher_done(m)) break;            // nothing but the end can follow
 *   }
 *   gr_matcher_destroy(m); gr_grammar_release(g); gr_vocab_destroy(v);
 *
 * A grammar is a set of rules over bytes (character classes are Unicode code
 * points, matched as UTF-8); a sequence's state is the set of parse stacks of a
 * pushdown automaton whose frames are states of per-rule DFAs (docs/structured-
 * output.md says why). Everything is exact: a token is allowed iff its bytes
 * extend the text so far to a prefix of some sentence of the grammar; what kiln
 * cannot enforce exactly is refused at compile time with KILN_E_INVALID or
 * KILN_E_UNSUPPORTED and a message naming the keyword or construct.
 *
 * Threads: a compiled gr_grammar is immutable and reference counted; a gr_vocab
 * is shared by any number of threads (its cache locks inside); a gr_matcher
 * belongs to one thread at a time.
 */
#ifndef KILN_GR_H
#define KILN_GR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tok.h"
#include "util/kiln_err.h"

typedef struct gr_vocab gr_vocab;     /* a tokenizer's tokens as bytes, in a trie */
typedef struct gr_grammar gr_grammar; /* compiled, immutable, reference counted */
typedef struct gr_matcher gr_matcher; /* one sequence's parse state and caches */
typedef struct gr_builder gr_builder; /* rules under construction */

typedef int32_t gr_expr; /* an expression node of a builder; < 0 after an error */
typedef int32_t gr_rule; /* a rule of a builder; < 0 after an error */

/* Compile limits and options. A compile over a limit fails with KILN_E_INVALID
 * naming the limit (the server answers 400). */
typedef struct {
    int32_t max_nfa_states; /* all rules together, before determinization */
    int32_t max_dfa_states; /* all rules together, after */
    /* CPU time of the compiling thread, in ms (a loaded machine does not make a
     * schema fail, a schema built to blow up cannot hold a thread); 0 = none */
    int32_t max_ms;
    /* JSON: most whitespace bytes between two tokens of JSON syntax ([ \t\n\r]{0,N});
     * 0 = compact JSON (no whitespace at all) */
    int32_t json_ws_max;
    /* JSON Schema: an object without `additionalProperties` gets no other
     * properties than its `properties` (OpenAI's strict mode); false: any
     * others, as JSON Schema reads a missing `additionalProperties` */
    bool json_strict;
} gr_options;

/* API: options */
gr_options gr_options_default(void); /* 1M NFA / 256k DFA states, 500 ms, ws 20, strict */

/* API: vocabulary */
/* Every token's bytes as they appear in generated text (tok_decode mid-text),
 * a special token's as its marker (gr_special), a trie over them, and a cache
 * of per-lexeme token sets shared by every matcher on this vocabulary. tok is
 * only read during the call. */
kiln_code gr_vocab_create(const tok_tokenizer *tok, gr_vocab **out, kiln_err *err);
void gr_vocab_destroy(gr_vocab *v); /* NULL is a no-op; no matcher may use it any more */
int32_t gr_vocab_size(const gr_vocab *v);
size_t gr_vocab_words(const gr_vocab *v); /* uint64 words of a token bitset */
/* The token's bytes as the grammar reads them (BORROWED from v; a special
 * token's marker); *n = 0 for an unknown id. */
const uint8_t *gr_vocab_token(const gr_vocab *v, int32_t id, size_t *n);
/* Not empty, and not an ordinary token holding byte 0xFF (which no UTF-8
 * text has); special tokens are, and match only where gr_special names them. */
bool gr_vocab_constrainable(const gr_vocab *v, int32_t id);

/* API: compiling */
kiln_code gr_compile_gbnf(const char *text, size_t len, const gr_options *o, gr_grammar **out,
                          kiln_err *err);
kiln_code gr_compile_json_schema(const json_t *schema, const gr_options *o, gr_grammar **out,
                                 kiln_err *err);
/* Any JSON value (type = NULL), or one of "object" / "array" (json_object mode). */
kiln_code gr_compile_json_any(const char *type, const gr_options *o, gr_grammar **out,
                              kiln_err *err);
void gr_grammar_retain(gr_grammar *g);
void gr_grammar_release(gr_grammar *g); /* NULL is a no-op; frees at zero */
/* Shape of a compiled grammar (tests, /stats, the benchmark). */
typedef struct {
    int32_t rules, states, leaf_rules, nfa_states;
    double compile_s;
} gr_grammar_info;
gr_grammar_info gr_grammar_get_info(const gr_grammar *g);
size_t gr_grammar_bytes(const gr_grammar *g); /* heap bytes of its tables */
/* A hash of the compiled tables: two grammars with equal fingerprints accept the
 * same texts (a generation checkpoint of one never resumes under another). */
uint64_t gr_grammar_fingerprint(const gr_grammar *g);

/* API: compile cache. Compiled grammars kept under a caller's key (the
 * canonical text of what was compiled, with every option that shaped it),
 * bounded in bytes, least recently used evicted. An entry holds one reference
 * to its grammar; a hit hands out another, so a request keeps its grammar
 * alive after eviction. Thread-safe (one mutex; compiles run outside it, so
 * two concurrent misses on one key both compile and the first stored wins). */
typedef struct gr_cache gr_cache;
typedef struct {
    int64_t entries;
    size_t bytes, max_bytes; /* keys + grammars' tables */
    uint64_t hits, misses, evictions;
} gr_cache_stats;
kiln_code gr_cache_create(size_t max_bytes, gr_cache **out, kiln_err *err);
void gr_cache_destroy(gr_cache *c); /* NULL is a no-op; grammars in use stay alive */
/* On a hit: *g = a new reference (the caller releases it), the entry's aux bytes
 * copied to aux (at most aux_cap; *aux_len = their count), returns true. A miss
 * counts and returns false. c NULL: always a miss, uncounted. */
bool gr_cache_get(gr_cache *c, const void *key, size_t klen, gr_grammar **g, void *aux,
                  size_t aux_cap, size_t *aux_len);
/* Stores g (retained) with aux bytes under key (both copied). A key already
 * present keeps its entry; an entry bigger than the whole cache is not stored.
 * KILN_E_NOMEM leaves the cache as it was. */
kiln_code gr_cache_put(gr_cache *c, const void *key, size_t klen, gr_grammar *g, const void *aux,
                       size_t aux_len, kiln_err *err);
gr_cache_stats gr_cache_get_stats(gr_cache *c);

/* API: building grammars in C (tool-call syntax around JSON Schemas, tests).
 * Expressions live in the builder; every constructor returns < 0 once the
 * builder has failed (the first error is kept; gr_builder_compile reports it). */
kiln_code gr_builder_create(const gr_options *o, gr_builder **out, kiln_err *err);
void gr_builder_destroy(gr_builder *b);                 /* NULL is a no-op */
gr_expr gr_lit(gr_builder *b, const char *s, size_t n); /* these bytes */
gr_expr gr_str(gr_builder *b, const char *s);           /* NUL-terminated bytes */
/* Exactly the special token `id` (0 <= id < 2^21), sampled as one token:
 * control tokens inside a grammar (Gemma 4's <|"|>, <tool_call|>). Special
 * tokens a grammar does not name stay masked out. */
gr_expr gr_special(gr_builder *b, int32_t id);
/* A code point class: pairs [lo, hi] inclusive (n_pairs of them); negate: the
 * complement within U+0000..U+10FFFF. Surrogates are never matched. */
gr_expr gr_class(gr_builder *b, const uint32_t *pairs, size_t n_pairs, bool negate);
gr_expr gr_seq(gr_builder *b, const gr_expr *xs, size_t n); /* n = 0: the empty string */
gr_expr gr_alt(gr_builder *b, const gr_expr *xs, size_t n); /* n = 0: nothing matches */
gr_expr gr_seq2(gr_builder *b, gr_expr x, gr_expr y);
gr_expr gr_alt2(gr_builder *b, gr_expr x, gr_expr y);
gr_expr gr_rep(gr_builder *b, gr_expr x, int32_t min, int32_t max); /* max < 0: unbounded */
/* Any text (any code points, the empty string included) that contains none of
 * the n ASCII patterns: free text beside a marker (reasoning before
 * "</think>", content before "<tool_call>"). */
gr_expr gr_text_without(gr_builder *b, const char *const *patterns, size_t n);
/* An ECMAScript regular expression (JSON Schema's `pattern` syntax; unanchored
 * unless ^/$) as an expression over code points; json: every character spelled
 * as inside a JSON string. Unsupported syntax is KILN_E_UNSUPPORTED naming it. */
kiln_code gr_regex(gr_builder *b, const char *re, bool json, gr_expr *out, kiln_err *err);
/* The intersection of expressions without rule references (a new rule; the
 * product of their automata). */
gr_expr gr_intersect(gr_builder *b, const gr_expr *xs, size_t n);
gr_rule gr_rule_new(gr_builder *b, const char *name); /* name is copied (error messages) */
gr_expr gr_ref(gr_builder *b, gr_rule r);
kiln_code gr_rule_define(gr_builder *b, gr_rule r, gr_expr body, kiln_err *err);
/* GBNF text into b; *root = its `root` rule (or the first rule when root_name is NULL
 * and no `root` exists). Rule names get prefix so that several texts can share b. */
kiln_code gr_builder_add_gbnf(gr_builder *b, const char *text, size_t len, const char *prefix,
                              gr_rule *root, kiln_err *err);
/* A JSON Schema into b; *out = an expression matching exactly the values it
 * allows (a subset, see docs/structured-output.md). strict: objects without
 * `additionalProperties` get no unlisted properties (OpenAI's strict mode). */
kiln_code gr_builder_add_json_schema(gr_builder *b, const json_t *schema, bool strict, gr_expr *out,
                                     kiln_err *err);
/* Values in a syntax other than JSON, for gr_builder_add_json_schema_as:
 * Gemma 4's call arguments, say ({key:value,...}: keys bare, strings raw
 * between a delimiter that is a special token, numbers / true / false / null
 * and arrays as in JSON). Keys a bare spelling cannot carry (empty, with ':'
 * or '}', edge whitespace, starting with the delimiter) are delimited like
 * strings; other keys (additionalProperties) are bare [A-Za-z0-9_.-]{1,64}.
 * Each value is read back alone by a JSON reader: unbounded numbers have at
 * most 18 integer digits and 2 exponent digits (never overflow). */
typedef struct {
    gr_expr quote;          /* opens and closes a string (gr_special or gr_str) */
    const char *quote_text; /* its text */
    /* ASCII texts no string or key may contain (the delimiter's text, the end
     * of the call...): a parser reading the text would stop there */
    const char *const *forbid;
    size_t n_forbid;
} gr_value_syntax;
/* gr_builder_add_json_schema in that syntax (syn NULL: JSON). */
kiln_code gr_builder_add_json_schema_as(gr_builder *b, const json_t *schema, bool strict,
                                        const gr_value_syntax *syn, gr_expr *out, kiln_err *err);
/* JSON whitespace between tokens (options' json_ws_max). */
gr_expr gr_json_ws(gr_builder *b);
/* The builder's first error (the code; KILN_OK while none). */
kiln_code gr_builder_error(const gr_builder *b, kiln_err *err);
/* Compiles with `root` as the start rule. b may be destroyed afterwards. */
kiln_code gr_builder_compile(gr_builder *b, gr_rule root, gr_grammar **out, kiln_err *err);

/* API: matching */
/* g and v are BORROWED (g retained until destroy; v must outlive the matcher). */
kiln_code gr_matcher_create(gr_grammar *g, const gr_vocab *v, gr_matcher **out, kiln_err *err);
void gr_matcher_destroy(gr_matcher *m); /* NULL is a no-op */
/* Writes the allowed tokens as a bitset of gr_vocab_words(v) words (bit t of
 * word t/64). Empty tokens are never allowed, special ones only where the
 * grammar has their gr_special; the caller adds the end of sequence when
 * gr_matcher_accepting. KILN_E_NOMEM / KILN_E_BUDGET when the
 * matcher's memory cap is hit. */
kiln_code gr_matcher_mask(gr_matcher *m, uint64_t *bits, kiln_err *err);
bool gr_matcher_accepting(const gr_matcher *m); /* the text so far is a sentence */
bool gr_matcher_done(const gr_matcher *m);      /* ... and nothing may follow it */
/* Fewest bytes that complete a sentence from here (0 when accepting). */
int32_t gr_matcher_distance(const gr_matcher *m);
/* Advances over one token / raw bytes. KILN_E_INVALID (state unchanged) when the
 * grammar does not allow them. One history entry per call (gr_matcher_rollback). */
kiln_code gr_matcher_accept_token(gr_matcher *m, int32_t tok, kiln_err *err);
kiln_code gr_matcher_accept_bytes(gr_matcher *m, const char *s, size_t n, kiln_err *err);
/* gr_matcher_distance after tok without advancing; -1 when tok is not allowed. */
int32_t gr_matcher_distance_after(gr_matcher *m, int32_t tok);
/* The allowed tokens after which a sentence can still be completed within
 * max_bytes bytes (a length budget: see docs/structured-output.md). */
kiln_code gr_matcher_mask_within(gr_matcher *m, int32_t max_bytes, uint64_t *bits, kiln_err *err);
/* Speculative decoding: advances over the longest allowed prefix of toks and
 * returns its length; gr_matcher_rollback(m, k) undoes the last k accepts. */
int32_t gr_matcher_try_tokens(gr_matcher *m, const int32_t *toks, int32_t n);
kiln_code gr_matcher_rollback(gr_matcher *m, int32_t k, kiln_err *err);
int32_t gr_matcher_history(const gr_matcher *m); /* accepts that can be rolled back */

#endif
