/*
 * gr_int.h — layouts shared by the files of grammar/ (nothing outside includes it).
 *
 * Builder (gr_build.c): expressions are nodes in one array; rules name a body.
 * Compiled grammar (gr_compile.c): every rule is a minimal DFA whose edges are
 * byte classes or calls of other rules; states of all rules are numbered
 * together ("gstates"), so a parse-stack frame is one int32.
 * Vocabulary (gr_vocab.c): token bytes and a preorder trie; the leaf cache.
 * Matcher (gr_match.c): interned stacks and configurations, lazily built
 * transition rows, per-configuration masks.
 */
#ifndef KILN_GR_INT_H
#define KILN_GR_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "grammar/gr.h"

#define GR_INF_DIST (1 << 29) /* "no finite completion" */
#define GR_MAX_CP 0x10FFFFu

/* A special token as grammar bytes: 0xFF and its id in three 7-bit digits,
 * each with the high bit set (no NUL, no ASCII). 0xFF never occurs in UTF-8,
 * so no grammar over text reaches it, and the vocabulary keeps ordinary
 * tokens holding 0xFF out of its trie: only the special token itself can
 * match its marker (gr_special). */
#define GR_SPECIAL_LEAD 0xFFu
#define GR_SPECIAL_LEN 4
#define GR_SPECIAL_MAX_ID ((1 << 21) - 1)

static inline void gr_special_marker(int32_t id, uint8_t out[GR_SPECIAL_LEN])
{
    out[0] = (uint8_t)GR_SPECIAL_LEAD;
    out[1] = (uint8_t)(0x80 | ((id >> 14) & 0x7F));
    out[2] = (uint8_t)(0x80 | ((id >> 7) & 0x7F));
    out[3] = (uint8_t)(0x80 | (id & 0x7F));
}

/* ------------------------------------------------------------ builder */

typedef enum {
    GR_E_EMPTY,   /* the empty string */
    GR_E_NONE,    /* matches nothing */
    GR_E_BYTES,   /* a: offset in bytes, b: length */
    GR_E_CLASS,   /* a: offset in ranges (pairs), b: pairs; code points, normalized */
    GR_E_SEQ,     /* a: offset in kids, b: count */
    GR_E_ALT,     /* a: offset in kids, b: count */
    GR_E_REP,     /* a: child, min, max (-1 = unbounded) */
    GR_E_REF,     /* a: rule */
    GR_E_AND,     /* a: offset in kids, b: count; only ever a whole rule body (gr_and), no calls */
    GR_E_WITHOUT, /* a: offset in bytes, b: length: NUL-separated ASCII patterns (gr_text_without)
                   */
    GR_E_EXCEPT,  /* a: class node, b: offset in bytes: NUL-separated names, min: bytes
                     (gr_class_star_except) */
} gr_ekind;

typedef struct {
    uint8_t kind;
    int32_t a, b;
    int32_t min, max;
} gr_node;

typedef struct {
    char *name;   /* OWNED */
    gr_expr body; /* -1 until defined */
} gr_brule;

struct gr_builder {
    gr_options o;
    gr_node *nodes; /* OWNED */
    int32_t n_nodes, cap_nodes;
    int32_t *kids; /* OWNED */
    int32_t n_kids, cap_kids;
    uint8_t *bytes; /* OWNED */
    int32_t n_bytes, cap_bytes;
    uint32_t *ranges; /* OWNED: pairs */
    int32_t n_ranges, cap_ranges;
    gr_brule *rules; /* OWNED */
    int32_t n_rules, cap_rules;
    gr_expr ws; /* cached gr_json_ws expression; -1 until first use */
    bool failed;
    kiln_err err;   /* the first error */
    double t_start; /* plat_thread_cpu at create (max_ms) */
};

/* Records the first error; returns its code. */
kiln_code gr_b_fail(gr_builder *b, kiln_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* KILN_E_INVALID once the builder's thread has run past options' max_ms of CPU
 * time. Called often enough in every loop that may grow with the input. */
kiln_code gr_b_check_time(gr_builder *b);
const gr_node *gr_b_node(const gr_builder *b, gr_expr e);

/* ------------------------------------------------------------ compiled grammar */

enum {
    GR_ST_FINAL = 1u << 0, /* the rule may end here */
    GR_ST_BYTES = 1u << 1, /* some byte edge leaves */
    GR_ST_LEAF = 1u << 2,  /* the rule has no calls at all */
};

typedef struct {
    int32_t start; /* gstate the callee starts in */
    int32_t ret;   /* gstate the caller continues in */
    uint8_t tail; /* ret is final with no edges: the call returns straight to the caller's caller */
} gr_call;

typedef struct {
    int32_t first; /* gstate of local state 0 (the start) */
    int32_t n_states;
    int32_t n_classes;
    uint8_t cls[256];   /* byte -> class */
    uint64_t leaf_hash; /* leaf rules: hash of the canonical DFA; 0 otherwise */
    int32_t leaf_blob;  /* leaf rules: offset of the serialized DFA in blob; -1 otherwise */
    int32_t leaf_blob_len;
    char *name; /* OWNED */
} gr_crule;

struct gr_grammar {
    _Atomic int refs;
    int32_t n_rules;
    gr_crule *rules;   /* OWNED [n_rules] */
    int32_t n_states;  /* gstates */
    int32_t root;      /* gstate: start of the root rule */
    uint8_t *flags;    /* OWNED [n_states] GR_ST_* */
    int32_t *rule_of;  /* OWNED [n_states] */
    int32_t *row;      /* OWNED [n_states]: offset of the state's class row in trans */
    int32_t *trans;    /* OWNED: [row + class] -> gstate, -1 = none */
    int32_t *call_off; /* OWNED [n_states + 1]: calls of state s are [call_off[s], call_off[s+1]) */
    gr_call *calls;    /* OWNED */
    int32_t *dist;     /* OWNED [n_states]: fewest bytes to the end of the rule */
    uint8_t *blob;     /* OWNED: serialized leaf DFAs (gr_vocab's cache compares them) */
    int32_t nfa_states;
    double compile_s;
    size_t bytes;         /* heap bytes of the tables (the compile cache's budget) */
    uint64_t fingerprint; /* hash of the tables: equal grammars, equal fingerprints */
};

static inline int32_t gr_step_byte(const gr_grammar *g, int32_t s, uint8_t byte)
{
    const gr_crule *r = &g->rules[g->rule_of[s]];
    return g->trans[g->row[s] + r->cls[byte]];
}

/* ------------------------------------------------------------ vocabulary */

typedef struct {
    uint64_t *accept; /* OWNED [words]: tokens that stay inside the leaf */
    int32_t *maybe;   /* OWNED: tokens that may leave it mid-token (need the full stack) */
    int32_t n_maybe;
    bool useful; /* false: too many `maybe` tokens, walk the trie instead */
} gr_leaf_set;

/* The constrainable tokens as strings of one rule's byte classes, in a
 * preorder trie: tokens that read the same to a leaf rule share one path, so
 * walking a leaf rule costs its class-string nodes, not the byte trie's. */
typedef struct gr_ctrie {
    uint8_t cls[256]; /* the class map this trie is for */
    int32_t n_nodes;
    uint8_t *ncls;    /* OWNED [n_nodes]: class of the edge into the node */
    uint16_t *depth;  /* OWNED [n_nodes] */
    int32_t *end;     /* OWNED [n_nodes]: first node after the subtree */
    int32_t *tok_off; /* OWNED [n_nodes + 1]: tokens ending at node i: toks[tok_off[i] .. first
                         token of the next node); a subtree's tokens are contiguous */
    int32_t *toks;    /* OWNED [n_ok] */
    struct gr_ctrie *next;
} gr_ctrie;

typedef struct gr_leaf_entry {
    uint64_t hash; /* leaf_hash mixed with the local state */
    uint8_t *blob; /* OWNED copy of the leaf DFA (equality check) */
    int32_t blob_len, local;
    gr_leaf_set set;
    struct gr_leaf_entry *next; /* hash chain */
} gr_leaf_entry;

struct gr_vocab {
    int32_t n_tokens;
    size_t words;
    uint8_t *bytes; /* OWNED: all token bytes (a special token's: its marker) */
    uint32_t *off;  /* OWNED [n_tokens + 1] */
    uint8_t *ok;    /* OWNED [n_tokens]: in the trie (not empty; specials by their marker) */
    /* trie over constrainable tokens, nodes in preorder (no root node) */
    int32_t n_nodes;
    uint8_t *tbyte;   /* OWNED [n_nodes] */
    uint16_t *tdepth; /* OWNED [n_nodes]: 1 for children of the root */
    int32_t *tend;    /* OWNED [n_nodes]: first node after the subtree */
    int32_t *ttok;    /* OWNED [n_nodes]: a token ending here, -1 none */
    int32_t *dup;     /* OWNED [n_tokens]: next token with the same bytes, -1 none */
    int32_t max_depth;
    /* leaf cache: token sets per (leaf DFA, state), shared by every matcher */
    pthread_mutex_t mu;
    gr_leaf_entry **ltab; /* OWNED [lcap] chains */
    gr_ctrie *ctries;     /* OWNED list, one per class map in use */
    int32_t lcap;
    size_t lbytes, lbytes_cap;
};

/* The leaf set of g's gstate s (a leaf rule's state): cached, computed on first
 * use; NULL on OOM or when the cache is full (then the caller walks the trie).
 * The returned set lives as long as v. */
const gr_leaf_set *gr_vocab_leaf(gr_vocab *v, const gr_grammar *g, int32_t s);

/* ------------------------------------------------------------ internal entry points */

/* gr_build.c: the intersection of regular expressions (no rule references
 * inside): a new rule whose DFA is the product of theirs; returns a reference. */
gr_expr gr_and(gr_builder *b, const gr_expr *xs, size_t n);

/* gr_build.c: strings of class characters unequal to each of the n names
 * (UTF-8): extra object keys that must differ from the declared ones. */
gr_expr gr_class_star_except(gr_builder *b, gr_expr cls, const char *const *names, size_t n);

/* gr_match.c: the mask by a plain trie walk, bypassing the caches (tests check
 * the cached and leaf paths against it). */
kiln_code gr_matcher_mask_walk(gr_matcher *m, uint64_t *bits, kiln_err *err);

/* gr_utf8.c: calls emit for each sequence of byte ranges (n = 1..4 pairs) that
 * together match the UTF-8 encodings of code points [lo, hi] (no surrogates). */
typedef int (*gr_utf8_emit)(void *ctx, const uint8_t *lo, const uint8_t *hi, int n);
int gr_utf8_ranges(uint32_t lo, uint32_t hi, gr_utf8_emit emit, void *ctx);
int gr_utf8_encode(uint32_t cp, uint8_t out[4]); /* bytes written */

/* gr_regex.c: an ECMAScript regular expression (JSON Schema `pattern`, which
 * matches anywhere unless anchored with ^ / $) as an expression over code
 * points. Unsupported syntax is KILN_E_UNSUPPORTED naming it. `json`: every
 * character is spelled the way a JSON string body spells it. */
kiln_code gr_regex_add(gr_builder *b, const char *re, size_t len, bool json, gr_expr *out,
                       kiln_err *err);
/* gr_json.c: the expression for one code point class spelled inside a JSON
 * string (characters JSON must escape appear as their escapes). */
gr_expr gr_json_class(gr_builder *b, const uint32_t *pairs, size_t n_pairs);
gr_expr gr_json_string(gr_builder *b, int32_t min, int32_t max); /* quoted; max < 0: unbounded */
gr_expr gr_json_integer(gr_builder *b);
gr_expr gr_json_number(gr_builder *b);
gr_rule gr_json_any_rule(gr_builder *b); /* new rules for any JSON value; returns the value rule */

#endif
