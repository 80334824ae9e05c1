/*
 * kn_kvq.h — the storage formats of K/V rows in the paged cache, and the
 * codec the attention kernels read them through (the kv/ layer picks formats
 * per layer, the kernels only need to decode; see docs/kv.md).
 *
 *   kn_kv_fmt f = {.dtype = KN_KV_Q8, .group = 64};
 *   size_t rec = kn_kv_rec_bytes(f, head_dim);        // one head of one position
 *   kn_kv_store(f, k_row, head_dim, dst);             // quantize (deterministic)
 *   kn_kv_load(f, dst, head_dim, out);                // dequantize to f32
 *
 * A record is one (position, KV head): head_dim values. Formats:
 *   F32    head_dim f32 (the compute dtype; today's cache)
 *   F16    head_dim IEEE half, round to nearest even
 *   BF16   head_dim bfloat16, round to nearest even
 *   Q8/Q4  affine per group of `group` values along head_dim:
 *          [n_groups f32 scale][n_groups f32 bias][codes], code = round((x - min) / scale)
 *          clamped to [0, 2^bits - 1], value = code * scale + bias (f32 mul, then add).
 *          Q4 packs two codes per byte, the even element in the low nibble.
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
} kn_kv_fmt;

/* API */
/* Bytes of one record of n values (n a multiple of the group for Q8/Q4). */
size_t kn_kv_rec_bytes(kn_kv_fmt f, int32_t n);
/* "f32", "f16", "bf16", "q8", "q4". */
const char *kn_kv_dtype_name(int32_t dtype);
/* Encodes n values of x into dst (kn_kv_rec_bytes(f, n) bytes). */
void kn_kv_store(kn_kv_fmt f, const float *x, int32_t n, void *dst);
/* Decodes a record into n floats (scalar; the oracle every variant matches). */
void kn_kv_load(kn_kv_fmt f, const void *src, int32_t n, float *out);
/* Decodes through the installed kernel variant (AVX2 when present): bitwise
 * the same floats as kn_kv_load. */
void kn_kv_load_fast(kn_kv_fmt f, const void *src, int32_t n, float *out);

#endif
