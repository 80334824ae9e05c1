/*
 * kv_layout.h — which layers of a model keep K/V in the paged cache, each
 * layer's K/V geometry, and the groups the pool keeps their blocks in.
 *
 *   kv_layout l;  kv_layout_uniform(&l, n_layers, n_kv_heads, head_dim, 0);
 *   // or, for a model with its own kinds: mdl_kv_layout(plan, 0, &l, &err) (model/)
 *   uint64_t bpt = kv_layout_bytes_per_token(&l, &fmt, g, KV_CLASS_MAIN);
 *
 * A group is a set of layers whose KV blocks live and die together: every
 * layer of a group keeps the same positions. Layers that attend to every
 * position form one group; sliding-window layers of one window W another,
 * whose sequences give back the blocks that left the window (eng_seq), so
 * their KV costs the window whatever the context. A layer in no group (-1)
 * stores nothing: a KV-shared layer reads its donor's records, a recurrent
 * layer keeps state elsewhere. A group's block holds, for block_tokens
 * positions, K then V records of each of its layers in its own geometry
 * (n_kv_heads x head_dim) and format: no layer is padded to another's shape.
 * All groups share block_tokens, so the hash chain of a prefix names the same
 * block boundaries in every group (kv_pool salts the key per group).
 *
 * Recurrent state (hybrid models, docs/hybrid.md): a recurrent layer (in no
 * group) keeps a fixed-size f32 state per sequence instead of K/V per
 * position; state_floats[L] > 0 says how big. The pool keeps every recurrent
 * layer's state of one sequence together in one *state block* (its own block
 * class, KV_STATE_GROUP): a sequence's working state, or a snapshot of it at a
 * block boundary published under the same hash chain as the KV blocks.
 */
#ifndef KILN_KV_LAYOUT_H
#define KILN_KV_LAYOUT_H

#include <stdint.h>

#include "kv/kv_format.h"

#define KV_MAX_GROUPS 4
#define KV_STATE_GROUP KV_MAX_GROUPS /* the state blocks' "group": their keys are salted by it */

typedef struct {
    int32_t n_layers;                /* model layers (indexing below) */
    int32_t n_groups;                /* 1 .. KV_MAX_GROUPS */
    int32_t window[KV_MAX_GROUPS];   /* 0: keeps every position; W: a sequence keeps only
                                        the blocks a query can still read (last W positions) */
    int8_t group[KV_FMT_MAX_LAYERS]; /* the layer's group; -1 = stores no K/V */
    int32_t n_kv_heads[KV_FMT_MAX_LAYERS];
    int32_t head_dim[KV_FMT_MAX_LAYERS]; /* also set for layers in no group (their format) */
    uint32_t state_floats[KV_FMT_MAX_LAYERS]; /* recurrent layers: f32 values of the layer's
                                                 state per sequence (in no group); else 0 */
} kv_layout;

/* API */
/* Every layer stores n_kv_heads x head_dim in one group with `window`. */
void kv_layout_uniform(kv_layout *l, int32_t n_layers, int32_t n_kv_heads, int32_t head_dim,
                       int32_t window);
/* 1 when l is well formed (groups in range and non-empty, shapes positive). */
int kv_layout_valid(const kv_layout *l);
/* K+V bytes of one position over group g's layers in block class cls of f
 * (g < 0: over every group). */
uint64_t kv_layout_bytes_per_token(const kv_layout *l, const kv_format *f, int g, int cls);
/* Layers in group g (g < 0: layers that store K/V). */
int32_t kv_layout_layers(const kv_layout *l, int g);
/* Every window set to 0 (nothing is given back: tests compare against it). */
void kv_layout_keep_all(kv_layout *l);
/* Bytes of one state block: every recurrent layer's state (0: the model has none). */
uint64_t kv_layout_state_bytes(const kv_layout *l);
/* Byte offset of layer L's state inside a state block. */
uint64_t kv_layout_state_offset(const kv_layout *l, int32_t layer);

#endif
