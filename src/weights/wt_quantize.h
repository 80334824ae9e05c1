/*
 * wt_quantize.h — MLX affine quantization, bit-exact with MLX's CPU backend
 * (spec: ../shared/design/mlx-quant-format.md §3), and a whole-snapshot
 * converter that writes what `mlx_lm.convert -q` writes.
 *
 *   uint32_t w[rows * cols * bits / 32]; uint16_t s[rows * cols / gs], b[rows * cols / gs];
 *   wt_quantize_affine(f32, rows, cols, 4, 64, WT_BF16, w, s, b, NULL, &err);
 *   wt_quantize_snapshot("models/llama", "models/llama-4bit", 4, 64, &err);
 *
 * Per group of gs values: scale/bias from the edge/q0 scheme in float32, codes
 * = clip(rint((v - bias) / scale), 0, 2^bits - 1) with the unrounded float32
 * scale/bias, and only then scale/bias are rounded to the model dtype
 * (BF16/F16 round to nearest even, or kept F32). Codes are packed per row as
 * an LSB-first bit stream in little-endian uint32 words.
 */
#ifndef KILN_WT_QUANTIZE_H
#define KILN_WT_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/kiln_err.h"
#include "weights/wt_safetensors.h"

/* Options of wt_quantize_snapshot_ex; zero-initialised = mlx_lm.convert -q defaults. */
typedef struct {
    int bits;           /* 2, 3, 4, 5, 6, 8 (0 = 4) */
    int group_size;     /* 32, 64, 128 (0 = 64) */
    wt_dtype dtype;     /* model dtype for float tensors and scales/biases ... */
    bool dtype_set;     /* ... when true; else config.json's torch_dtype (F32/F16/BF16), else
                         * the embedding's stored dtype */
    const char *recipe; /* NULL, or "mixed_2_6", "mixed_3_4", "mixed_3_6", "mixed_4_6"
                         * (mlx-lm --quant-predicate): per-module bits, written as overrides */
    /* progress (may be NULL): after each output tensor is written, the output bytes
     * done and their total; progress_user is passed back */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *progress_user;
} wt_quant_opts;

/* API */
/* One group of gs floats -> *scale, *bias (float32, before any cast) and gs codes. */
void wt_affine_group(const float *v, int gs, int bits, float *scale, float *bias, uint8_t *codes);
/* Packs n codes (each < 2^bits) LSB-first into n*bits/32 words (n*bits % 32 == 0). */
void wt_pack_codes(const uint8_t *codes, int64_t n, int bits, uint32_t *words);
/* Unpacks n codes from the bit stream (the inverse of wt_pack_codes). */
void wt_unpack_codes(const uint32_t *words, int64_t n, int bits, uint8_t *codes);
/* Quantizes a [rows, cols] float32 matrix. Outputs (caller-allocated):
 *   packed  [rows, cols*bits/32] uint32
 *   scales, biases [rows, cols/gs] in dtype (WT_F32, WT_F16 or WT_BF16)
 *   codes   [rows, cols] uint8, or NULL
 * Errors: KILN_E_UNSUPPORTED for bits/group_size/dtype outside the valid sets,
 * KILN_E_INVALID when cols % group_size != 0. */
kiln_code wt_quantize_affine(const float *w, /* [rows, cols] */
                             int64_t rows, int64_t cols, int bits, int group_size,
                             wt_dtype dtype,   /* of scales/biases */
                             uint32_t *packed, /* OUT */
                             void *scales,     /* OUT */
                             void *biases,     /* OUT */
                             uint8_t *codes,   /* OUT, optional */
                             kiln_err *err);
/* 1 if bits/group_size are a valid affine combination (see spec §3.4). */
int wt_affine_valid(int bits, int group_size);
/* Converts n values of a float dtype (F32/F16/BF16/F64) to float32; 0 on success. */
int wt_to_f32(wt_dtype dt, const void *src, int64_t n, float *dst);
/* Stores n float32 values as dt (F32/F16/BF16, round to nearest even); 0 on success. */
int wt_from_f32(wt_dtype dt, const float *src, int64_t n, void *dst);

/* Quantizes the snapshot in_dir into out_dir (created if absent; must not be
 * in_dir): model.safetensors + model.safetensors.index.json, config.json with
 * "quantization" and "quantization_config", and the tokenizer and generation
 * files copied. Linear weights and embed_tokens whose last dim % group_size == 0
 * are quantized; norms and the rest are cast to the model dtype; lm_head is
 * dropped when the embeddings are tied. */
kiln_code wt_quantize_snapshot(const char *in_dir, const char *out_dir, int bits, int group_size,
                               kiln_err *err);
kiln_code wt_quantize_snapshot_ex(const char *in_dir, const char *out_dir,
                                  const wt_quant_opts *opts, kiln_err *err);

#endif
