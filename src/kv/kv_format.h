/*
 * kv_format.h — how K/V are stored in the paged cache, per layer: f32 (the
 * compute dtype, `--kv-quant off`), f16, bf16, or affine 8/4-bit with a group
 * size along head_dim (the record codec is kernels/kn_kvq.h), plus the
 * `--quantized-kv-start` split: blocks that start before that position keep
 * the full-precision format (f32). Every 8/4-bit format is Hadamard-rotated
 * (kn_kv_fmt.rot = kn_kv_rot_block(head_dim), kernels/kn_kvq.h): part of the
 * format's identity, so it is in kv_format_hash and kv_format_describe's names
 * ("q8g64") mean the rotated formats.
 *
 *   kv_format f;
 *   kv_format_init(&f, KV_QUANT_8, 64, 0, n_layers, head_dim, &err);   // or
 *   kv_format_load_config(dir, 64, 0, n_layers, head_dim, &f, &err);   // kv_config.json
 *   size_t per_tok = kv_format_bytes_per_token(&f, KV_CLASS_MAIN, n_kv_heads);
 *   uint64_t ns = fingerprint ^ kv_format_hash(&f);     // the prefix-cache namespace
 *
 * A block's class follows from its position only (kv_format_class), so two
 * sequences with the same tokens always store the same bytes in the same
 * class: hash chains and sharing stay consistent.
 *
 * kv_config.json (per-layer formats, as OptiQ snapshots ship one; the schema
 * is documented in docs/kv.md):
 *   {"default": {"bits": 8, "group_size": 64},
 *    "layers": {"0": {"bits": 4}, "5": {"bits": 8, "group_size": 32}, "7": 16}}
 * bits 4 or 8 (affine), 16 (bf16) or 32 (f32); "layers" may also be an array
 * (entry i is layer i). Layers not listed take "default", else stay f32.
 */
#ifndef KILN_KV_FORMAT_H
#define KILN_KV_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kn_kvq.h"
#include "util/kiln_err.h"

#define KV_FMT_MAX_LAYERS 1024
#define KV_GROUP_DEFAULT 64

typedef enum {
    KV_QUANT_OFF = 0, /* f32 */
    KV_QUANT_F16,
    KV_QUANT_BF16,
    KV_QUANT_8,
    KV_QUANT_4,
    KV_QUANT_CONFIG, /* kv_config.json from the model folder */
} kv_quant_mode;

enum { KV_CLASS_FULL = 0, KV_CLASS_MAIN = 1 }; /* block classes */

typedef struct {
    int32_t n_layers;
    int32_t head_dim;                   /* every layer's head_dim, or 0 when they differ */
    int32_t hd[KV_FMT_MAX_LAYERS];      /* head_dim of each layer's records */
    int32_t quant_start;                /* positions; 0 = no full-precision prefix */
    kn_kv_fmt full;                     /* blocks starting before quant_start: f32 */
    kn_kv_fmt layer[KV_FMT_MAX_LAYERS]; /* every other block, per layer */
} kv_format;

/* API */
/* "off" (also "f32", "none"), "f16", "bf16", "8", "4", "config". */
kiln_code kv_quant_parse(const char *s, kv_quant_mode *out, kiln_err *err);
const char *kv_quant_name(kv_quant_mode m);
/* One format for every layer (mode != CONFIG). group 0 = 64; a group wider
 * than head_dim is clamped to it; it must be even and divide head_dim. */
kiln_code kv_format_init(kv_format *f, kv_quant_mode mode, int32_t group, int32_t quant_start,
                         int32_t n_layers, int32_t head_dim, kiln_err *err);
/* The same for layers of different head_dim (hd[n_layers]): each layer's
 * group is clamped to and must divide its own head_dim. */
kiln_code kv_format_init_dims(kv_format *f, kv_quant_mode mode, int32_t group, int32_t quant_start,
                              int32_t n_layers, const int32_t *hd, kiln_err *err);
/* Parses kv_config.json text (label names it in messages). */
kiln_code kv_format_parse_config(const char *json, size_t len, const char *label, int32_t group,
                                 int32_t quant_start, int32_t n_layers, int32_t head_dim,
                                 kv_format *f, kiln_err *err);
kiln_code kv_format_parse_config_dims(const char *json, size_t len, const char *label,
                                      int32_t group, int32_t quant_start, int32_t n_layers,
                                      const int32_t *hd, kv_format *f, kiln_err *err);
/* Reads DIR/kv_config.json (KILN_E_NOT_FOUND when absent). */
kiln_code kv_format_load_config(const char *dir, int32_t group, int32_t quant_start,
                                int32_t n_layers, int32_t head_dim, kv_format *f, kiln_err *err);
kiln_code kv_format_load_config_dims(const char *dir, int32_t group, int32_t quant_start,
                                     int32_t n_layers, const int32_t *hd, kv_format *f,
                                     kiln_err *err);
/* 1 when blocks before quant_start use another format than the rest. */
int kv_format_split(const kv_format *f);
/* The class of the block holding positions [block_index*bt, (block_index+1)*bt). */
int kv_format_class(const kv_format *f, int32_t block_index, int32_t block_tokens);
kn_kv_fmt kv_format_at(const kv_format *f, int cls, int32_t layer);
/* K+V bytes of one position over all layers in a class (scale/bias included),
 * every layer with n_kv_heads heads (uniform shapes; kv_layout.h sums a model's
 * real geometry). */
uint64_t kv_format_bytes_per_token(const kv_format *f, int cls, int32_t n_kv_heads);
/* "f32", "q8g64", "q4g32@256" (start 256), mixed layers as runs
 * "q4g64x3,q8g64,bf16x2"; truncated with "..." past n bytes. */
void kv_format_describe(const kv_format *f, char *buf, size_t n);
/* Hash of everything that changes the stored bytes (per-layer formats, group
 * sizes, rotations, quant_start): part of the prefix-cache namespace. Formats
 * without rotation hash as they did before rotation existed. */
uint64_t kv_format_hash(const kv_format *f);

#endif
