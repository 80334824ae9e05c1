/*
 * kn_kvq.h — the storage formats of K/V rows in the paged cache, and the
 * codec the attention kernels read them through (the kv/ layer picks formats
 * per layer, the kernels only need to decode; see docs/kv.md).
 *
 *   kn_kv_fmt f = {.dtype = KN_KV_Q8, .group = 64, .rot = kn_kv_rot_block(head_dim)};
 *   size_t rec = kn_kv_rec_bytes(f, head_dim);        // one head of one position
 *   kn_kv_store(f, k_row, head_dim, dst);             // rotate, quantize (deterministic)
 *   kn_kv_load(f, dst, head_dim, out);                // dequantize to f32 (rotated basis)
 *   kn_kv_rotate(f.rot, out, head_dim);               // back to the model's basis
 *
 * A record is one (position, KV head): head_dim values. Formats:
 *   F32    head_dim f32 (the compute dtype; today's cache)
 *   F16    head_dim IEEE half, round to nearest even
 *   BF16   head_dim bfloat16, round to nearest even
 *   Q8/Q4  affine per group of `group` values along head_dim:
 *          [n_groups f32 scale][n_groups f32 bias][codes], code = round((x - min) / scale)
 *          clamped to [0, 2^bits - 1], value = code * scale + bias (f32 mul, then add).
 *          Q4 packs two codes per byte, the even element in the low nibble.
 *          The encoder picks min/max, then refits scale and bias by least
 *          squares on the codes (kept only when the squared error drops):
 *          the decoder does not care how they were chosen.
 * Rotation (`rot`, any dtype; kv/ sets it for Q8/Q4): the row is multiplied
 * by the normalized Walsh-Hadamard matrix H over each block of `rot`
 * consecutive values before encoding, and the decoder returns the rotated
 * values. H is orthogonal and symmetric (H = H^-1), so attention rotates the
 * query the same way (scores are unchanged: Hq·Hk = q·k) and rotates the
 * weighted sum of V back once per (query, head). Why: a row's few large
 * channels (outliers) set the affine range of their group; after H every
 * value is a mix of the whole block, the range shrinks toward the row's RMS
 * and the small channels keep more precision (QuaRot-style).
 * Scale and bias are f32 (not f16): no overflow or subnormal cases, decoding is
 * one multiply and one add with no conversion, and the cost is 8 bytes per group
 * (0.125 byte per value at group 64). Every function is a pure function of its
 * inputs: a row's bytes depend only on that row (batch invariance, content-
 * addressed sharing), and ref and AVX2 decode to bitwise the same floats.
 */
#ifndef KILN_KN_KVQ_H
#define KILN_KN_KVQ_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KN_KV_F32 = 0,
    KN_KV_F16,
    KN_KV_BF16,
    KN_KV_Q8,
    KN_KV_Q4,
    KN_KV_DTYPE_COUNT
} kn_kv_dtype;

typedef struct {
    int32_t dtype; /* kn_kv_dtype */
    int32_t group; /* Q8/Q4: values per scale/bias pair, divides head_dim; else 0 */
    int32_t rot;   /* 0 = none, else the Hadamard block: a power of two in
                      [2, KN_KV_ROT_MAX] that divides head_dim */
} kn_kv_fmt;

#define KN_KV_ROT_MAX 512
#define KN_KV_ROT_ROW_MAX 1024 /* longest rotated row (a stack buffer in the encoder) */

/* API */
/* Bytes of one record of n values (n a multiple of the group for Q8/Q4). */
size_t kn_kv_rec_bytes(kn_kv_fmt f, int32_t n);
/* "f32", "f16", "bf16", "q8", "q4". */
const char *kn_kv_dtype_name(int32_t dtype);
/* Encodes n values of x into dst (kn_kv_rec_bytes(f, n) bytes). */
void kn_kv_store(kn_kv_fmt f, const float *x, int32_t n, void *dst);
/* Decodes a record into n floats (scalar; the oracle every variant matches). */
void kn_kv_load(kn_kv_fmt f, const void *src, int32_t n, float *out);
/* Rotates x (n values, a multiple of block) in place by the normalized
 * Walsh-Hadamard transform over each block of `block` values (block 0: no-op).
 * Self-inverse up to f32 rounding; scalar, a fixed order of operations, so
 * every kernel variant gets the same floats. */
void kn_kv_rotate(int32_t block, float *x, int32_t n);
/* The rotation block for rows of head_dim values: the largest power of two
 * that divides head_dim, at most KN_KV_ROT_MAX (head_dim 128 -> 128, 80 -> 16,
 * 96 -> 32); 0 when head_dim is odd or longer than KN_KV_ROT_ROW_MAX. */
int32_t kn_kv_rot_block(int32_t head_dim);
/* The rotation a record of n values of format f really has: f.rot when it is
 * a valid block for n (power of two <= KN_KV_ROT_MAX dividing n <=
 * KN_KV_ROT_ROW_MAX), else 0. The encoder and every attention kernel use this,
 * so a malformed f cannot make them disagree. */
int32_t kn_kv_rot_of(kn_kv_fmt f, int32_t n);
/* Decodes through the installed kernel variant (AVX2 when present): bitwise
 * the same floats as kn_kv_load. */
void kn_kv_load_fast(kn_kv_fmt f, const void *src, int32_t n, float *out);

#endif
