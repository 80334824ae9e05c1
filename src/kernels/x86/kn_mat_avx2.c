/*
 * kn_mat_avx2.c — AVX2+FMA+F16C matmul for f32, f16, bf16 and MLX affine
 * (every bit width; 4 and 8 bits have their own code decoders, 2/3/5/6 share
 * a byte-shuffle one).
 *
 * Fixed reduction per (t, r) — the batch-invariance contract — whatever n,
 * the tile or the thread split:
 *   acc (8 lanes) = Σ over 8-wide column chunks k, ascending, of fma(w̃_k, x_k, acc)
 *   y[t][r] = hsum8(acc) (fixed tree) + tail
 * where for float formats w̃ is the converted weight and the tail is the
 * cols % 8 remainder in ascending order (scalar); for affine w̃_k = q_k · scale_g
 * (one f32 multiply; 4-bit chunk pairs are lane-permuted, see q4_pair) and the
 * tail is the bias term Σ_g bias_g · xsum_g (xsum_g = hsum8 of the group's
 * chunks of x, added in order; bias dot in 8-group vectors, then scalar tail).
 * Algebraically Σ_i (s·q_i + b)·x_i, as in mlx-quant-format.md §3.1.
 *
 * Exception, affine with kn_qx_ok (kn_int.h: 4-bit; 8-bit only if KN_QX_BITS8): x is quantized per
 * 64-column block to two int16 levels, q = hi + lo/2^15 (x ≈ d_b·q, error
 * ≤ 2^-31 of the block's max |x|), codes are unpacked in place into int16
 * lanes (no shuffles) and multiplied with _mm256_madd_epi16 into exact int32
 * block sums; per block acc = fma(fma(cvt(Σlo), 2^-15, cvt(Σhi)), s_g·d_b, acc)
 * in ascending order, then hsum8 + the bias term as above. Decode and prefill
 * both run qdot() per (token, 4-row tile), so they agree bit for bit.
 *
 * Drivers that produce these exact values: decode (n == 1) dequantizes on the
 * fly for 4 rows at a time; prefill (n > 1, pf_rows) converts a slab of up to
 * 16 whole rows (≤ 128 KiB of f32, L2) once per block of 64 tokens and runs
 * 4-row × 3-token register tiles over whole rows, accumulators in registers;
 * rows wider than 8192 and 4-bit f32-path matrices keep the older column-slab
 * driver (pf_float / pf_q: 16 rows × KC columns, accumulators carried across
 * slabs in memory — a store and reload changes no bits).
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels/kn_int.h"
#include "kernels/x86/kn_avx2_load.h"
#include "kernels/x86/kn_avx2_math.h"
#include "util/kiln_assert.h"

#define AI static inline __attribute__((always_inline))

#define RB 16     /* prefill rows per slab */
#define KC 256    /* prefill columns per slab: a multiple of every group size */
#define TB_MAX 24 /* prefill tokens per block (a multiple of the tile's 3) */
#define XSUM_MAX 4096
#define PF_BYTES 16384 /* decode: prefetch at least this far ahead, in whole row tiles */

/* ---------------------------------------------------------------- loaders */

static int64_t esize(kn_fmt fmt)
{
    return fmt == KN_F32 ? 4 : 2;
}

/* Codes of chunk k of a group as f32 lanes, when at least 8 bytes are readable
 * from the chunk start (always, except at the very end of the matrix): one
 * qword broadcast, a byte shuffle that gives lane j the two bytes holding code
 * j, then a per-lane shift and mask. */
#define SB(j) (char)(((j)*bits) >> 3), (char)((((j)*bits) >> 3) + 1), (char)-128, (char)-128
AI __m256 dec8_fast(const uint8_t *p, const int bits)
{
    int64_t v;
    memcpy(&v, p, 8);
    const __m256i ctl = _mm256_setr_epi8(SB(0), SB(1), SB(2), SB(3), SB(4), SB(5), SB(6), SB(7));
    const __m256i sh =
        _mm256_setr_epi32((0 * bits) & 7, (1 * bits) & 7, (2 * bits) & 7, (3 * bits) & 7,
                          (4 * bits) & 7, (5 * bits) & 7, (6 * bits) & 7, (7 * bits) & 7);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi64x(v), ctl);
    b = _mm256_and_si256(_mm256_srlv_epi32(b, sh), _mm256_set1_epi32((1 << bits) - 1));
    return _mm256_cvtepi32_ps(b);
}
#undef SB

/* Codes of chunk k (8 codes = `bits` bytes, starting at byte bits*k of the
 * group). `fast`: 8 bytes are readable from every chunk start (false only for
 * the matrix's last row, whose last chunks end at the tensor's end). */
AI __m256 dec8(const uint8_t *g, int64_t k, const int bits, const int fast)
{
    if (bits == 8)
        return _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(g + 8 * k))));
    if (bits == 4) {
        uint32_t w;
        memcpy(&w, g + 4 * k, 4);
        __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)w),
                                      _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
        return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    }
    if (fast) return dec8_fast(g + bits * k, bits);
    /* whole loads only: a partial memcpy into a wider local stalls store forwarding */
    const uint8_t *p = g + bits * k;
    uint64_t v;
    if (bits == 2) {
        uint16_t a;
        memcpy(&a, p, 2);
        v = a;
    } else if (bits == 3) {
        uint16_t a;
        memcpy(&a, p, 2);
        v = a | (uint64_t)p[2] << 16;
    } else if (bits == 5) {
        uint32_t a;
        memcpy(&a, p, 4);
        v = a | (uint64_t)p[4] << 32;
    } else {
        uint32_t a;
        uint16_t b2;
        memcpy(&a, p, 4);
        memcpy(&b2, p + 4, 2);
        v = a | (uint64_t)b2 << 32;
    }
    uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> (4 * bits));
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32((int)lo)),
                                        _mm_set1_epi32((int)hi), 1);
    const __m256i sh = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 0, bits, 2 * bits, 3 * bits);
    b = _mm256_and_si256(_mm256_srlv_epi32(b, sh), _mm256_set1_epi32((1 << bits) - 1));
    return _mm256_cvtepi32_ps(b);
}

/* 4-bit chunk pair (k, k+1) without per-chunk shuffles: one qword broadcast of
 * words k and k+1; lanes alternate word k / word k+1, and lane masks pick
 * nibbles (0,0,1,1,4,4,5,5) in place (value q·2^(4·nibble), exact); the same
 * masks on the broadcast shifted right by 8 bits pick nibbles (2,2,3,3,6,6,7,7).
 * The matching x lanes are unpacklo/unpackhi(x[8k..], x[8k+8..]) times
 * 2^-(4·nibble), so every product is exactly q·x (powers of two are exact). */
AI __m256 q4_xscale(void)
{
    const float a = 1.0f / 16, b = 1.0f / 65536, c = 1.0f / 1048576;
    return _mm256_setr_ps(1.0f, 1.0f, a, a, b, b, c, c);
}
AI __m256i q4_mask(void)
{
    return _mm256_setr_epi32(0xF, 0xF, 0xF0, 0xF0, 0xF0000, 0xF0000, 0xF00000, 0xF00000);
}
AI void q4_pair(const uint8_t *g, int64_t k, __m256 *qa, __m256 *qb)
{
    int64_t v;
    memcpy(&v, g + 4 * k, 8);
    __m256i bc = _mm256_set1_epi64x(v), m = q4_mask();
    *qa = _mm256_cvtepi32_ps(_mm256_and_si256(bc, m));
    *qb = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(bc, 8), m));
}
/* x lanes matching q4_pair (xa, xb in: x[8k..8k+8), x[8k+8..8k+16)). */
AI void q4_xpair(__m256 x0, __m256 x1, __m256 *xa, __m256 *xb)
{
    *xa = _mm256_mul_ps(_mm256_unpacklo_ps(x0, x1), q4_xscale());
    *xb = _mm256_mul_ps(_mm256_unpackhi_ps(x0, x1), q4_xscale());
}

/* ---------------------------------------------------------------- shared pieces */

/* Float formats: the cols % 8 tail, ascending. */
static float float_tail(const void *row, kn_fmt fmt, const float *x, int64_t c8, int64_t cols)
{
    float s = 0;
    for (int64_t k = c8; k < cols; k++)
        s += (fmt == KN_F32 ? ((const float *)row)[k] : kn_ref_sf(row, fmt, k)) * x[k];
    return s;
}

/* ---------------------------------------------------------------- decode (n == 1) */

static inline int64_t pf_tiles(int64_t tile_bytes)
{
    return tile_bytes >= PF_BYTES ? 1 : (PF_BYTES + tile_bytes - 1) / tile_bytes;
}

/* Decode: the scales and biases of the R-row tile `ahead` rows on are a
 * separate stream (R·ng values each) that the weight prefetch does not cover;
 * without this their first use in a tile missed to DRAM (~15% of 4-bit
 * decode time in qx_sd / bias_dot). Prefetch never faults, so rows past the
 * end are harmless. */
AI void pf_scales(const kn_mat *W, int64_t r, int64_t ahead, const int R)
{
    const int64_t ng = W->cols / W->group, es = W->sfmt == KN_F32 ? 4 : 2;
    const char *sc = (const char *)W->scales + (r + ahead) * ng * es;
    const char *bi = (const char *)W->biases + (r + ahead) * ng * es;
    for (int64_t o = 0; o < R * ng * es; o += 64) {
        _mm_prefetch(sc + o, _MM_HINT_T0);
        _mm_prefetch(bi + o, _MM_HINT_T0);
    }
}

AI void dec_float(const kn_mat *W, const float *x, float *y, int64_t r, const int R,
                  const kn_fmt fmt)
{
    const int64_t cols = W->cols, c8 = cols & ~(int64_t)7, rs = cols * esize(fmt);
    const uint8_t *w0 = (const uint8_t *)W->w + r * rs;
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        acc[i] = _mm256_setzero_ps();
    /* rows are contiguous: stream a tile ~PF_BYTES ahead into cache in step with
     * this one (short per-row streams defeat the hardware prefetcher) */
    const uintptr_t pf =
        (uintptr_t)w0 + (uintptr_t)(pf_tiles(R * rs) * R * rs); /* may pass the end */
    const int64_t pf_step = 8 * R * esize(fmt);
    for (int64_t c = 0; c < c8; c += 8) {
        for (int64_t o = 0; o < pf_step; o += 64)
            _mm_prefetch((const char *)(pf + (uintptr_t)(c / 8 * pf_step + o)), _MM_HINT_T0);
        __m256 xv = _mm256_loadu_ps(x + c);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            acc[i] = _mm256_fmadd_ps(ld_w(w0 + i * rs, c, fmt), xv, acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        y[r + i] = kn_hsum256(acc[i]) + float_tail(w0 + i * rs, fmt, x, c8, cols);
}

AI void dec_q(const kn_mat *W, const float *x, const float *xsum, float *y, int64_t r, const int R,
              const int bits, const int fast)
{
    const int64_t cols = W->cols, gs = W->group, ng = cols / gs, nck = gs / 8;
    const int64_t rs = cols * bits / 8, gbytes = gs * bits / 8;
    const uint8_t *w0 = (const uint8_t *)W->w + r * rs;
    const kn_fmt sf = W->sfmt;
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        acc[i] = _mm256_setzero_ps();
    const uintptr_t pf =
        (uintptr_t)w0 + (uintptr_t)(pf_tiles(R * rs) * R * rs); /* as in dec_float */
    pf_scales(W, r, pf_tiles(R * rs) * R, R);
    for (int64_t g = 0; g < ng; g++) {
        for (int64_t o = 0; o < R * gbytes; o += 64)
            _mm_prefetch((const char *)(pf + (uintptr_t)(g * R * gbytes + o)), _MM_HINT_T0);
        __m256 s[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            s[i] = _mm256_set1_ps(ld_sf(W->scales, sf, (r + i) * ng + g));
        const float *xg = x + g * gs;
        for (int64_t k = 0; k < nck; k += 2) {
            __m256 xa = _mm256_loadu_ps(xg + 8 * k), xb = _mm256_loadu_ps(xg + 8 * k + 8);
            if (bits == 4) q4_xpair(xa, xb, &xa, &xb);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                const uint8_t *gp = w0 + i * rs + g * gbytes;
                __m256 qa, qb;
                if (bits == 4) {
                    q4_pair(gp, k, &qa, &qb);
                } else {
                    qa = dec8(gp, k, bits, fast);
                    qb = dec8(gp, k + 1, bits, fast);
                }
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(qa, s[i]), xa, acc[i]);
                acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(qb, s[i]), xb, acc[i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        y[r + i] = kn_hsum256(acc[i]) + bias_dot(W->biases, sf, (r + i) * ng, xsum, ng);
}

/* ---------------------------------------------------------------- prefill (n > 1) */

/* acc[i][j] (memory, [RB][TB_MAX]) += Σ_c w_i[c] · x_j[c] over nch chunks. */
AI void tile(const float *const *wp, const float *const *xp, int64_t nch, __m256 *accm, int i0,
             int j0, const int R, const int T)
{
    __m256 a[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            a[i][j] = accm[(i0 + i) * TB_MAX + j0 + j];
    for (int64_t c = 0; c < nch * 8; c += 8) {
        __m256 xv[3];
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            xv[j] = _mm256_loadu_ps(xp[j0 + j] + c);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256 w = _mm256_loadu_ps(wp[i0 + i] + c);
#pragma GCC unroll 3
            for (int j = 0; j < T; j++)
                a[i][j] = _mm256_fmadd_ps(w, xv[j], a[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            accm[(i0 + i) * TB_MAX + j0 + j] = a[i][j];
}

#define TILE_FN(R, T)                                                                              \
    static void tile_##R##x##T(const float *const *wp, const float *const *xp, int64_t nch,        \
                               __m256 *accm, int i0, int j0)                                       \
    {                                                                                              \
        tile(wp, xp, nch, accm, i0, j0, R, T);                                                     \
    }
TILE_FN(4, 3)
TILE_FN(4, 2)
TILE_FN(4, 1)
TILE_FN(1, 3)
TILE_FN(1, 2)
TILE_FN(1, 1)
typedef void (*tile_fn)(const float *const *, const float *const *, int64_t, __m256 *, int, int);
static const tile_fn tiles[5][4] = {
    [4] = {NULL, tile_4x1, tile_4x2, tile_4x3}, [1] = {NULL, tile_1x1, tile_1x2, tile_1x3}};

/* All register tiles over nr rows × nt tokens of one slab. */
static void slab_tiles(const float *const *wp, const float *const *xp, int64_t nch, __m256 *accm,
                       int nr, int nt)
{
    int i = 0;
    for (; i < nr; i += (nr - i >= 4 ? 4 : 1)) {
        int R = nr - i >= 4 ? 4 : 1;
        for (int j = 0; j < nt; j += 3) {
            int T = nt - j >= 3 ? 3 : nt - j;
            tiles[R][T](wp, xp, nch, accm, i, j);
        }
    }
}

/* Slab of w̃ for rows [r, r+nr), columns [kb, kb+kc) of an affine matrix, in
 * the chunk order decode uses (4-bit: permuted pairs). */
AI void deq_slab_q(const kn_mat *W, int64_t r, int nr, int64_t kb, int64_t kc, float *buf,
                   int64_t stride, const int bits)
{
    const int64_t cols = W->cols, gs = W->group, ng = cols / gs, nck = gs / 8;
    const int64_t rs = cols * bits / 8, gbytes = gs * bits / 8;
    for (int i = 0; i < nr; i++) {
        const uint8_t *row = (const uint8_t *)W->w + (r + i) * rs;
        float *o = buf + (int64_t)i * stride;
        for (int64_t c0 = kb; c0 < kb + kc; c0 += gs) {
            int64_t g = c0 / gs;
            __m256 s = _mm256_set1_ps(ld_sf(W->scales, W->sfmt, (r + i) * ng + g));
            const uint8_t *gp = row + g * gbytes;
            for (int64_t k = 0; k < nck; k += 2) {
                __m256 qa, qb;
                if (bits == 4) {
                    q4_pair(gp, k, &qa, &qb);
                } else if (r + i + 1 < W->rows) {
                    qa = dec8(gp, k, bits, 1);
                    qb = dec8(gp, k + 1, bits, 1);
                } else {
                    qa = dec8(gp, k, bits, 0);
                    qb = dec8(gp, k + 1, bits, 0);
                }
                _mm256_storeu_ps(o + (c0 - kb) + 8 * k, _mm256_mul_ps(qa, s));
                _mm256_storeu_ps(o + (c0 - kb) + 8 * k + 8, _mm256_mul_ps(qb, s));
            }
        }
    }
}

/* Tokens per prefill block so that the group sums fit XSUM_MAX floats. */
static int token_block(int64_t ng)
{
    int64_t tb = TB_MAX;
    while (tb > 3 && tb * ng > XSUM_MAX)
        tb -= 3;
    return (int)tb;
}

AI void pf_q(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1,
             const int bits)
{
    const int64_t cols = W->cols, gs = W->group, ng = cols / gs, rows = W->rows;
    const int tb = token_block(ng);
    KILN_ASSERT(ng * 3 <= XSUM_MAX);
    float wbuf[RB * KC] __attribute__((aligned(32)));
    float xbuf[TB_MAX * KC] __attribute__((aligned(32)));
    float xsum[XSUM_MAX];
    __m256 accm[RB * TB_MAX];
    const float *wp[RB], *xp[TB_MAX];
    for (int i = 0; i < RB; i++)
        wp[i] = wbuf + i * KC;
    /* token block outside: its rows of x stay in L2 while every row slab passes */
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
        int nt = (int)(n - t0 < tb ? n - t0 : tb);
        for (int j = 0; j < nt; j++)
            group_sums(x + (t0 + j) * cols, cols, gs, xsum + j * ng);
        for (int64_t rb = r0; rb < r1; rb += RB) {
            int nr = (int)(r1 - rb < RB ? r1 - rb : RB);
            for (int i = 0; i < nr * TB_MAX; i++)
                accm[i] = _mm256_setzero_ps();
            for (int64_t kb = 0; kb < cols; kb += KC) {
                int64_t kc = cols - kb < KC ? cols - kb : KC;
                deq_slab_q(W, rb, nr, kb, kc, wbuf, KC, bits);
                for (int j = 0; j < nt; j++) {
                    const float *xs = x + (t0 + j) * cols + kb;
                    if (bits == 4) {
                        float *xo = xbuf + j * KC;
                        for (int64_t c = 0; c < kc; c += 16) {
                            __m256 xa, xb;
                            q4_xpair(_mm256_loadu_ps(xs + c), _mm256_loadu_ps(xs + c + 8), &xa,
                                     &xb);
                            _mm256_storeu_ps(xo + c, xa);
                            _mm256_storeu_ps(xo + c + 8, xb);
                        }
                        xp[j] = xo;
                    } else {
                        xp[j] = xs;
                    }
                }
                slab_tiles(wp, xp, kc / 8, accm, nr, nt);
            }
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nt; j++)
                    y[(t0 + j) * rows + rb + i] =
                        kn_hsum256(accm[i * TB_MAX + j]) +
                        bias_dot(W->biases, W->sfmt, (rb + i) * ng, xsum + j * ng, ng);
        }
    }
}

AI void pf_float(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1,
                 const kn_fmt fmt)
{
    const int64_t cols = W->cols, c8 = cols & ~(int64_t)7, rows = W->rows, rs = cols * esize(fmt);
    float wbuf[RB * KC] __attribute__((aligned(32)));
    __m256 accm[RB * TB_MAX];
    const float *wp[RB], *xp[TB_MAX];
    for (int64_t t0 = 0; t0 < n; t0 += TB_MAX) { /* as in pf_q */
        int nt = (int)(n - t0 < TB_MAX ? n - t0 : TB_MAX);
        for (int64_t rb = r0; rb < r1; rb += RB) {
            int nr = (int)(r1 - rb < RB ? r1 - rb : RB);
            for (int i = 0; i < nr * TB_MAX; i++)
                accm[i] = _mm256_setzero_ps();
            for (int64_t kb = 0; kb < c8; kb += KC) {
                int64_t kc = c8 - kb < KC ? c8 - kb : KC;
                for (int i = 0; i < nr; i++) {
                    const uint8_t *row = (const uint8_t *)W->w + (rb + i) * rs;
                    if (fmt == KN_F32) {
                        wp[i] = (const float *)row + kb;
                    } else {
                        for (int64_t c = 0; c < kc; c += 8)
                            _mm256_storeu_ps(wbuf + i * KC + c, ld_w(row, kb + c, fmt));
                        wp[i] = wbuf + i * KC;
                    }
                }
                for (int j = 0; j < nt; j++)
                    xp[j] = x + (t0 + j) * cols + kb;
                slab_tiles(wp, xp, kc / 8, accm, nr, nt);
            }
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nt; j++)
                    y[(t0 + j) * rows + rb + i] = kn_hsum256(accm[i * TB_MAX + j]) +
                                                  float_tail((const uint8_t *)W->w + (rb + i) * rs,
                                                             fmt, x + (t0 + j) * cols, c8, cols);
        }
    }
}

/* ---------------------------------------------------------------- int16 activations (4/8-bit) */

/* One token's quantized x (kn_int.h, kn_qx_ok): q in the lane order the code
 * unpackers produce (per 64-block; 4-bit: q[16k + j] = x̂[4j + k], k < 4;
 * 8-bit: q[32h + 16e + j] = x̂[32h + 2j + e]), d per block, xsum per group. */
typedef struct {
    int16_t *q;
    float *d, *xsum;
} qx_tok;

static void qx_make(const float *x, int64_t cols, int64_t gs, const int bits, qx_tok *o)
{
    for (int64_t b = 0; b < cols / KN_QX_BLOCK; b++) {
        const float *xb = x + b * KN_QX_BLOCK;
        float amax = kn_amax64(xb);
        float inv = amax > 0 ? 32767.0f / amax : 0.0f;
        o->d[b] = amax > 0 ? amax / 32767.0f : 0.0f;
        int32_t qi[2 * KN_QX_BLOCK];
        for (int k = 0; k < 8; k++) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), _mm256_set1_ps(inv));
            __m256 hi = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256 lo = _mm256_mul_ps(_mm256_sub_ps(v, hi), _mm256_set1_ps(32768.0f));
            _mm256_storeu_si256((__m256i *)(qi + 8 * k), _mm256_cvtps_epi32(hi));
            _mm256_storeu_si256((__m256i *)(qi + KN_QX_BLOCK + 8 * k), _mm256_cvtps_epi32(lo));
        }
        int16_t *q = o->q + b * 2 * KN_QX_BLOCK;
        for (int l = 0; l < 2; l++, q += KN_QX_BLOCK) {
            const int32_t *src = qi + l * KN_QX_BLOCK;
            if (bits == 4) {
                for (int k = 0; k < 4; k++)
                    for (int j = 0; j < 16; j++)
                        q[16 * k + j] = (int16_t)src[4 * j + k];
            } else {
                for (int hh = 0; hh < 2; hh++)
                    for (int e = 0; e < 2; e++)
                        for (int j = 0; j < 16; j++)
                            q[32 * hh + 16 * e + j] = (int16_t)src[32 * hh + 2 * j + e];
            }
        }
    }
    group_sums(x, cols, gs, o->xsum);
}

/* Per block b of row i: f32 lanes of s_g·d_b matching the int32 lanes (lane l
 * holds codes 8l..8l+7 of the block for 4-bit; for 8-bit, see qdot). */
AI __m256 qx_scale(const void *sc, kn_fmt sf, int64_t off, int64_t b, float d, const int64_t gs)
{
    if (gs == 32) {
        __m128 lo = _mm_set1_ps(ld_sf(sc, sf, off + 2 * b) * d),
               hi = _mm_set1_ps(ld_sf(sc, sf, off + 2 * b + 1) * d);
        return _mm256_set_m128(hi, lo);
    }
    return _mm256_set1_ps(ld_sf(sc, sf, off + (gs == 64 ? b : b / 2)) * d);
}

/* sd[b] = s_g(b)·d_b for the nb blocks of one row (gs 64 or 128). */
static void qx_sd(const void *sc, kn_fmt sf, int64_t off, const float *d, int64_t nb, int64_t gs,
                  float *sd)
{
    int64_t b = 0;
    if (gs == 64)
        for (; b + 8 <= nb; b += 8)
            _mm256_store_ps(sd + b, _mm256_mul_ps(ld_sf8(sc, sf, off + b), _mm256_loadu_ps(d + b)));
    for (; b < nb; b++)
        sd[b] = ld_sf(sc, sf, off + (gs == 64 ? b : b / 2)) * d[b];
}

/* R rows × 1 token: y[r+i] for the kn_qx_ok math. facc per row gets
 * fma(fma(cvt(Σlo), 2^-15, cvt(Σhi)), s_g·d_b, facc) for blocks in ascending
 * order, then hsum8 + bias_dot: one fixed order per (t, r), whatever R or n.
 * Σhi and Σlo are exact int32, so the order of their madd terms is free: each
 * is added as soon as it is made, which keeps ~10 registers live (building
 * all eight products first spilled the accumulators). */
AI void qdot(const kn_mat *W, const qx_tok *xt, float *yr, int64_t r, const int R, const int bits,
             const int64_t gs, const int pf_on)
{
    const int64_t cols = W->cols, ng = cols / gs, nb = cols / KN_QX_BLOCK, rs = cols * bits / 8;
    const uint8_t *w0 = (const uint8_t *)W->w + r * rs;
    const kn_fmt sf = W->sfmt;
    __m256 acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        acc[i] = _mm256_setzero_ps();
    const uintptr_t pf = (uintptr_t)w0 + (uintptr_t)(pf_tiles(R * rs) * R * rs);
    if (pf_on) pf_scales(W, r, pf_tiles(R * rs) * R, R);
    const int64_t bb = KN_QX_BLOCK * bits / 8; /* bytes per block per row */
    const __m256i lo_mask = _mm256_set1_epi16(bits == 4 ? 0xF : 0xFF);
    const __m256 lo_w = _mm256_set1_ps(1.0f / 32768);
    /* s_g·d_b per row and block, made 8 at a time up front (the same f32
     * products the per-block scalar path makes); gs == 32 splits each block
     * over two groups and keeps qx_scale */
    float sd[4][KN_QX_MAX_COLS / KN_QX_BLOCK] __attribute__((aligned(32)));
    if (gs != 32)
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            qx_sd(W->scales, sf, (r + i) * ng, xt->d, nb, gs, sd[i]);
    for (int64_t b = 0; b < nb; b++) {
        if (pf_on)
            for (int64_t o = 0; o < R * bb; o += 64)
                _mm_prefetch((const char *)(pf + (uintptr_t)(b * R * bb + o)), _MM_HINT_T0);
        const __m256i *q = (const __m256i *)(xt->q + b * 2 * KN_QX_BLOCK);
        const float d = xt->d[b];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const uint8_t *wp = w0 + i * rs + b * bb;
            const int64_t off = (r + i) * ng;
            if (bits == 4) {
                __m256i v = _mm256_loadu_si256((const __m256i *)wp);
                __m256i c = _mm256_and_si256(v, lo_mask);
                __m256i hi = _mm256_madd_epi16(c, _mm256_load_si256(q + 0));
                __m256i lo = _mm256_madd_epi16(c, _mm256_load_si256(q + 4));
                c = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo_mask);
                hi = _mm256_add_epi32(hi, _mm256_madd_epi16(c, _mm256_load_si256(q + 1)));
                lo = _mm256_add_epi32(lo, _mm256_madd_epi16(c, _mm256_load_si256(q + 5)));
                c = _mm256_and_si256(_mm256_srli_epi16(v, 8), lo_mask);
                hi = _mm256_add_epi32(hi, _mm256_madd_epi16(c, _mm256_load_si256(q + 2)));
                lo = _mm256_add_epi32(lo, _mm256_madd_epi16(c, _mm256_load_si256(q + 6)));
                c = _mm256_srli_epi16(v, 12);
                hi = _mm256_add_epi32(hi, _mm256_madd_epi16(c, _mm256_load_si256(q + 3)));
                lo = _mm256_add_epi32(lo, _mm256_madd_epi16(c, _mm256_load_si256(q + 7)));
                __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), lo_w, _mm256_cvtepi32_ps(hi));
                __m256 sv = gs == 32 ? qx_scale(W->scales, sf, off, b, d, gs)
                                     : _mm256_broadcast_ss(&sd[i][b]);
                acc[i] = _mm256_fmadd_ps(f, sv, acc[i]);
            } else {
                /* 8-bit (KN_QX_BITS8): lanes of each half hold one group when gs == 32 */
                __m256i va = _mm256_loadu_si256((const __m256i *)wp),
                        vb = _mm256_loadu_si256((const __m256i *)(wp + 32));
                __m256i c0 = _mm256_and_si256(va, lo_mask), c1 = _mm256_srli_epi16(va, 8);
                __m256i c2 = _mm256_and_si256(vb, lo_mask), c3 = _mm256_srli_epi16(vb, 8);
                __m256i h0 = _mm256_add_epi32(_mm256_madd_epi16(c0, _mm256_load_si256(q + 0)),
                                              _mm256_madd_epi16(c1, _mm256_load_si256(q + 1)));
                __m256i l0 = _mm256_add_epi32(_mm256_madd_epi16(c0, _mm256_load_si256(q + 4)),
                                              _mm256_madd_epi16(c1, _mm256_load_si256(q + 5)));
                __m256i h1 = _mm256_add_epi32(_mm256_madd_epi16(c2, _mm256_load_si256(q + 2)),
                                              _mm256_madd_epi16(c3, _mm256_load_si256(q + 3)));
                __m256i l1 = _mm256_add_epi32(_mm256_madd_epi16(c2, _mm256_load_si256(q + 6)),
                                              _mm256_madd_epi16(c3, _mm256_load_si256(q + 7)));
                if (gs == 32) { /* halves are separate groups */
                    __m256 s0 = _mm256_set1_ps(ld_sf(W->scales, sf, off + 2 * b) * d);
                    __m256 s1 = _mm256_set1_ps(ld_sf(W->scales, sf, off + 2 * b + 1) * d);
                    __m256 f0 =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(l0), lo_w, _mm256_cvtepi32_ps(h0));
                    __m256 f1 =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(l1), lo_w, _mm256_cvtepi32_ps(h1));
                    acc[i] = _mm256_fmadd_ps(f0, s0, acc[i]);
                    acc[i] = _mm256_fmadd_ps(f1, s1, acc[i]);
                } else {
                    __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(l0, l1)), lo_w,
                                               _mm256_cvtepi32_ps(_mm256_add_epi32(h0, h1)));
                    acc[i] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(&sd[i][b]), acc[i]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        yr[r + i] = kn_hsum256(acc[i]) + bias_dot(W->biases, sf, (r + i) * ng, xt->xsum, ng);
}

/* 4-bit, R rows × 2 tokens, no prefetch (prefill): per (row, token) exactly
 * the qdot sequence (same int32 sums, same f32 ops in the same order), with
 * each row's codes unpacked once for both tokens. */
AI void qdot2(const kn_mat *W, const qx_tok *xt, float *y0, float *y1, int64_t r, const int R,
              const int64_t gs)
{
    const int64_t cols = W->cols, ng = cols / gs, nb = cols / KN_QX_BLOCK, rs = cols / 2;
    const uint8_t *w0 = (const uint8_t *)W->w + r * rs;
    const kn_fmt sf = W->sfmt;
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
        a0[i] = a1[i] = _mm256_setzero_ps();
    const __m256i mask = _mm256_set1_epi16(0xF);
    const __m256 lo_w = _mm256_set1_ps(1.0f / 32768);
    float sd[2][4][KN_QX_MAX_COLS / KN_QX_BLOCK] __attribute__((aligned(32)));
    if (gs != 32)
        for (int j = 0; j < 2; j++)
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                qx_sd(W->scales, sf, (r + i) * ng, xt[j].d, nb, gs, sd[j][i]);
    for (int64_t b = 0; b < nb; b++) {
        const __m256i *q0 = (const __m256i *)(xt[0].q + b * 2 * KN_QX_BLOCK);
        const __m256i *q1 = (const __m256i *)(xt[1].q + b * 2 * KN_QX_BLOCK);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w0 + i * rs + b * 32));
            __m256i c = _mm256_and_si256(v, mask);
            __m256i h0 = _mm256_madd_epi16(c, _mm256_load_si256(q0 + 0));
            __m256i l0 = _mm256_madd_epi16(c, _mm256_load_si256(q0 + 4));
            __m256i h1 = _mm256_madd_epi16(c, _mm256_load_si256(q1 + 0));
            __m256i l1 = _mm256_madd_epi16(c, _mm256_load_si256(q1 + 4));
#pragma GCC unroll 3
            for (int k = 1; k < 4; k++) {
                c = k == 3 ? _mm256_srli_epi16(v, 12)
                           : _mm256_and_si256(_mm256_srli_epi16(v, 4 * k), mask);
                h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(c, _mm256_load_si256(q0 + k)));
                l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(c, _mm256_load_si256(q0 + 4 + k)));
                h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(c, _mm256_load_si256(q1 + k)));
                l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(c, _mm256_load_si256(q1 + 4 + k)));
            }
            __m256 f0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l0), lo_w, _mm256_cvtepi32_ps(h0));
            __m256 f1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l1), lo_w, _mm256_cvtepi32_ps(h1));
            const int64_t off = (r + i) * ng;
            __m256 s0 = gs == 32 ? qx_scale(W->scales, sf, off, b, xt[0].d[b], gs)
                                 : _mm256_broadcast_ss(&sd[0][i][b]);
            __m256 s1 = gs == 32 ? qx_scale(W->scales, sf, off, b, xt[1].d[b], gs)
                                 : _mm256_broadcast_ss(&sd[1][i][b]);
            a0[i] = _mm256_fmadd_ps(f0, s0, a0[i]);
            a1[i] = _mm256_fmadd_ps(f1, s1, a1[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
        y0[r + i] = kn_hsum256(a0[i]) + bias_dot(W->biases, sf, (r + i) * ng, xt[0].xsum, ng);
        y1[r + i] = kn_hsum256(a1[i]) + bias_dot(W->biases, sf, (r + i) * ng, xt[1].xsum, ng);
    }
}

#define QDOT2_FN(R)                                                                                \
    static void qdot2_##R(const kn_mat *W, const qx_tok *xt, float *y0, float *y1, int64_t r)      \
    {                                                                                              \
        if (W->group == 64)                                                                        \
            qdot2(W, xt, y0, y1, r, R, 64);                                                        \
        else if (W->group == 32)                                                                   \
            qdot2(W, xt, y0, y1, r, R, 32);                                                        \
        else                                                                                       \
            qdot2(W, xt, y0, y1, r, R, 128);                                                       \
    }
QDOT2_FN(4)
QDOT2_FN(1)

/* qdot<R>_<pf>: bits and group size as constants. */
#define QDOT_FN(R, PF)                                                                             \
    static void qdot##R##_##PF(const kn_mat *W, const qx_tok *xt, float *yr, int64_t r)            \
    {                                                                                              \
        const int64_t gs = W->group;                                                               \
        if (W->bits == 4) {                                                                        \
            if (gs == 64)                                                                          \
                qdot(W, xt, yr, r, R, 4, 64, PF);                                                  \
            else if (gs == 32)                                                                     \
                qdot(W, xt, yr, r, R, 4, 32, PF);                                                  \
            else                                                                                   \
                qdot(W, xt, yr, r, R, 4, 128, PF);                                                 \
        } else {                                                                                   \
            if (gs == 64)                                                                          \
                qdot(W, xt, yr, r, R, 8, 64, PF);                                                  \
            else if (gs == 32)                                                                     \
                qdot(W, xt, yr, r, R, 8, 32, PF);                                                  \
            else                                                                                   \
                qdot(W, xt, yr, r, R, 8, 128, PF);                                                 \
        }                                                                                          \
    }
QDOT_FN(4, 0)
QDOT_FN(1, 0)
QDOT_FN(4, 1)
QDOT_FN(1, 1)

/* Prefill of the int16 path: the same qdot per (token, 4-row tile) as
 * decode, ordered for reuse. Up to QP_TB tokens are quantized into the
 * caller's stack buffer (QP_SLOTS int16); rows go in slabs of ~QP_SLAB bytes of packed weights
 * (L1), and for each slab every token of the block passes over it (the
 * token's q, 2·cols int16, stays in L1 across the slab's tiles), while the
 * next slab is prefetched a slice per token. Weights are read from memory
 * once per token block. */
/* Scratch lives on the stack, not in _Thread_local arrays: glibc zeroes a
 * thread's whole static TLS block at pthread_create (resident memory in every
 * server thread) and refuses small explicit stacks. Pool threads have 4 MiB. */
#define QP_SLOTS 131072 /* int16 q (256 KiB): 2 tokens of the widest matrix, 32 of 2048 */
#define QP_TB 64
#define QP_SLAB 16384

typedef struct {
    int16_t q[QP_SLOTS] __attribute__((aligned(64)));
    float d[QP_SLOTS / (2 * KN_QX_BLOCK)];
    float s[QP_SLOTS / (2 * 32)];
} qx_buf;

static void mm_qx_prefill(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0,
                          int64_t r1, qx_buf *qb)
{
    const int64_t cols = W->cols, rows = W->rows, gs = W->group, ng = cols / gs,
                  nbk = cols / KN_QX_BLOCK;
    const int64_t rs = cols * W->bits / 8;
    int64_t tb = QP_SLOTS / (2 * cols);
    if (tb > QP_TB) tb = QP_TB;
    int64_t slab = QP_SLAB / rs & ~(int64_t)3;
    if (slab < 4) slab = 4;
    qx_tok xt[QP_TB];
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
        const int nt = (int)(n - t0 < tb ? n - t0 : tb);
        for (int j = 0; j < nt; j++) {
            xt[j] = (qx_tok){qb->q + j * 2 * cols, qb->d + j * nbk, qb->s + j * ng};
            qx_make(x + (t0 + j) * cols, cols, gs, W->bits, &xt[j]);
        }
        for (int64_t rb = r0; rb < r1; rb += slab) {
            const int64_t re = r1 - rb < slab ? r1 : rb + slab;
            /* the next slab, a slice per token (may pass r1: prefetch never faults) */
            const char *nx = (const char *)W->w + re * rs;
            const int64_t nxb = (re + slab < r1 ? slab : r1 - re) * rs,
                          per = (nxb / nt + 63) & ~(int64_t)63;
            int j = 0;
            for (; W->bits == 4 && j + 2 <= nt; j += 2) { /* token pairs share the unpack */
                for (int64_t o = j * per; o < (j + 2) * per && o < nxb; o += 64)
                    _mm_prefetch(nx + o, _MM_HINT_T0);
                float *ya = y + (t0 + j) * rows, *yb = ya + rows;
                int64_t r = rb;
                for (; r + 4 <= re; r += 4)
                    qdot2_4(W, xt + j, ya, yb, r);
                for (; r < re; r++)
                    qdot2_1(W, xt + j, ya, yb, r);
            }
            for (; j < nt; j++) {
                for (int64_t o = j * per; o < (j + 1) * per && o < nxb; o += 64)
                    _mm_prefetch(nx + o, _MM_HINT_T0);
                float *yr = y + (t0 + j) * rows;
                int64_t r = rb;
                for (; r + 4 <= re; r += 4)
                    qdot4_0(W, xt + j, yr, r);
                for (; r < re; r++)
                    qdot1_0(W, xt + j, yr, r);
            }
        }
    }
}

static void mm_qx(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    const int64_t cols = W->cols, rows = W->rows, gs = W->group, ng = cols / gs,
                  nbk = cols / KN_QX_BLOCK;
    qx_buf qb;
    if (n > 2) {
        mm_qx_prefill(W, x, n, y, r0, r1, &qb);
        return;
    }
    qx_tok xt[2];
    for (int j = 0; j < n; j++) { /* 2 tokens fit: 2 · 2 · KN_QX_MAX_COLS = QP_SLOTS */
        xt[j] = (qx_tok){qb.q + j * 2 * cols, qb.d + j * nbk, qb.s + j * ng};
        qx_make(x + j * cols, cols, gs, W->bits, &xt[j]);
    }
    /* decode: stream rows ahead (prefetch on); token inner, the tile's rows stay in L1 */
    int64_t r = r0;
    for (; r < r1; r += (r1 - r >= 4 ? 4 : 1)) {
        int R = r1 - r >= 4 ? 4 : 1;
        for (int j = 0; j < n; j++)
            (R == 4 ? qdot4_1 : qdot1_1)(W, xt + j, y + j * rows, r);
    }
}

/* ---------------------------------------------------------------- prefill, whole-row tiles */

/* The float-accumulator prefill used for every format except the int16 path:
 * per block of PT_MAX tokens and per slab of rows (as many as fit PW_FLOATS
 * converted f32 weights, at most 16), the slab is converted once (a
 * contiguous per-row read the hardware prefetcher follows), then 4-row ×
 * 3-token register tiles run over the whole row with the accumulators in
 * registers: the same chunk-ascending fma sequence per (t, r) as decode, so
 * the result is bitwise the decode result. The converted slab (≤ 128 KiB,
 * on the stack: see QP_SLOTS on thread-local arrays) stays in L2 while every token group of the
 * block passes over it; the weights are read from memory once per PT_MAX tokens. */
#define PW_FLOATS (4 * (8192 + 16)) /* converted weights per thread: 4 rows of 8192 */
#define PW_PAD 16 /* floats between slab rows: rows 8 KiB apart would alias in L1 */
#define PT_MAX 64
#define PX_SUMS 8192 /* group sums of one token block */

/* out[i][j] = hsum8 of the chunk-ascending fma over c8 columns of weight
 * rows w + i·ws and x rows xp[j]. */
AI void ktile(const float *w, int64_t ws, const float *const *xp, int64_t c8, float *out,
              const int R, const int T)
{
    __m256 a[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            a[i][j] = _mm256_setzero_ps();
    const float *x0 = xp[0], *x1 = T > 1 ? xp[1] : xp[0], *x2 = T > 2 ? xp[2] : xp[0];
    for (int64_t c = 0; c < c8; c += 8) {
        __m256 xv[3];
        xv[0] = _mm256_loadu_ps(x0 + c);
        if (T > 1) xv[1] = _mm256_loadu_ps(x1 + c);
        if (T > 2) xv[2] = _mm256_loadu_ps(x2 + c);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256 wv = _mm256_load_ps(w + i * ws + c);
#pragma GCC unroll 3
            for (int j = 0; j < T; j++)
                a[i][j] = _mm256_fmadd_ps(wv, xv[j], a[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            out[i * 3 + j] = kn_hsum256(a[i][j]);
}

#define KTILE_FN(R, T)                                                                             \
    static void ktile_##R##x##T(const float *w, int64_t ws, const float *const *xp, int64_t c8,    \
                                float *out)                                                        \
    {                                                                                              \
        ktile(w, ws, xp, c8, out, R, T);                                                           \
    }
KTILE_FN(4, 3)
KTILE_FN(4, 2)
KTILE_FN(4, 1)
KTILE_FN(1, 3)
KTILE_FN(1, 2)
KTILE_FN(1, 1)
typedef void (*ktile_fn)(const float *, int64_t, const float *const *, int64_t, float *);
static const ktile_fn ktiles[5][4] = {
    [4] = {NULL, ktile_4x1, ktile_4x2, ktile_4x3}, [1] = {NULL, ktile_1x1, ktile_1x2, ktile_1x3}};

/* Rows per converted slab for this width (a multiple of 4, at most 16); 0 if
 * even 4 rows do not fit (very wide matrices keep the column-slab driver). */
static int64_t pw_stride(int64_t cols)
{
    return ((cols + 7) & ~(int64_t)7) + PW_PAD; /* 32-byte aligned rows */
}
static int64_t pw_rows(int64_t cols)
{
    int64_t rb = PW_FLOATS / pw_stride(cols) & ~(int64_t)3;
    return rb > 16 ? 16 : rb;
}

/* bits == 0: float format fmt; else an affine matrix (not 4-bit: its permuted
 * chunk pairs keep pf_q). Caller checks pw_rows(cols) > 0. */
AI void pf_rows(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1,
                const kn_fmt fmt, const int bits)
{
    const int64_t cols = W->cols, rows = W->rows, ws = pw_stride(cols);
    const int64_t c8 = bits ? cols : cols & ~(int64_t)7,
                  rs = bits ? cols * bits / 8 : cols * esize(fmt);
    const int64_t gs = bits ? W->group : 1, ng = bits ? cols / gs : 0, rbn = pw_rows(cols);
    float pw_buf[PW_FLOATS] __attribute__((aligned(64))), px_sum[PX_SUMS];
    int64_t tb = PT_MAX;
    while (bits && tb > 1 && tb * ng > PX_SUMS)
        tb /= 2;
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
        const int nt = (int)(n - t0 < tb ? n - t0 : tb);
        if (bits)
            for (int j = 0; j < nt; j++)
                group_sums(x + (t0 + j) * cols, cols, gs, px_sum + j * ng);
        for (int64_t rb = r0; rb < r1; rb += rbn) {
            const int nr = (int)(r1 - rb < rbn ? r1 - rb : rbn);
            if (bits) {
                deq_slab_q(W, rb, nr, 0, cols, pw_buf, ws, bits);
            } else {
                for (int i = 0; i < nr; i++) {
                    const uint8_t *row = (const uint8_t *)W->w + (rb + i) * rs;
                    for (int64_t c = 0; c < c8; c += 8)
                        _mm256_store_ps(pw_buf + i * ws + c, ld_w(row, c, fmt));
                }
            }
            for (int j = 0; j < nt; j += 3) {
                const int T = nt - j >= 3 ? 3 : nt - j;
                const float *xp[3];
                for (int jj = 0; jj < T; jj++)
                    xp[jj] = x + (t0 + j + jj) * cols;
                for (int i = 0; i < nr; i += (nr - i >= 4 ? 4 : 1)) {
                    const int R = nr - i >= 4 ? 4 : 1;
                    float out[12];
                    ktiles[R][T](pw_buf + i * ws, ws, xp, c8, out);
                    for (int ii = 0; ii < R; ii++) {
                        const int64_t r = rb + i + ii;
                        for (int jj = 0; jj < T; jj++) {
                            const int64_t t = t0 + j + jj;
                            float tail = bits ? bias_dot(W->biases, W->sfmt, r * ng,
                                                         px_sum + (j + jj) * ng, ng)
                                              : float_tail((const uint8_t *)W->w + r * rs, fmt,
                                                           x + t * cols, c8, cols);
                            y[t * rows + r] = out[ii * 3 + jj] + tail;
                        }
                    }
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- batched decode, float formats */

/* Few tokens (2..SMALL_N, a batched decode step): converting a slab would cost
 * as much as the FMAs it feeds, so 4-row × 3-token tiles read and convert
 * the stored weights directly, rows outer (each 4-row tile stays in L1 for
 * every token group; the weights stream from memory once, prefetched a tile
 * ahead as in dec_float). Same chunk-ascending fma per (t, r) as decode. */
#define SMALL_N 16

AI void dtile(const uint8_t *w0, int64_t rs, const kn_fmt fmt, const float *const *xp, int64_t c8,
              float *out, const int R, const int T, const int pf_on)
{
    __m256 a[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            a[i][j] = _mm256_setzero_ps();
    const float *x0 = xp[0], *x1 = T > 1 ? xp[1] : xp[0], *x2 = T > 2 ? xp[2] : xp[0];
    const uintptr_t pf =
        (uintptr_t)w0 + (uintptr_t)(pf_tiles(R * rs) * R * rs); /* may pass the end */
    const int64_t pf_step = 8 * R * esize(fmt);
    for (int64_t c = 0; c < c8; c += 8) {
        if (pf_on)
            for (int64_t o = 0; o < pf_step; o += 64)
                _mm_prefetch((const char *)(pf + (uintptr_t)(c / 8 * pf_step + o)), _MM_HINT_T0);
        __m256 xv[3];
        xv[0] = _mm256_loadu_ps(x0 + c);
        if (T > 1) xv[1] = _mm256_loadu_ps(x1 + c);
        if (T > 2) xv[2] = _mm256_loadu_ps(x2 + c);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256 wv = ld_w(w0 + i * rs, c, fmt);
#pragma GCC unroll 3
            for (int j = 0; j < T; j++)
                a[i][j] = _mm256_fmadd_ps(wv, xv[j], a[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            out[i * 3 + j] = kn_hsum256(a[i][j]);
}

#define DTILE_FN(R, T, PF)                                                                         \
    static void dtile_##R##x##T##_##PF(const uint8_t *w0, int64_t rs, kn_fmt fmt,                  \
                                       const float *const *xp, int64_t c8, float *out)             \
    {                                                                                              \
        if (fmt == KN_F32)                                                                         \
            dtile(w0, rs, KN_F32, xp, c8, out, R, T, PF);                                          \
        else if (fmt == KN_F16)                                                                    \
            dtile(w0, rs, KN_F16, xp, c8, out, R, T, PF);                                          \
        else                                                                                       \
            dtile(w0, rs, KN_BF16, xp, c8, out, R, T, PF);                                         \
    }
DTILE_FN(4, 3, 1)
DTILE_FN(4, 2, 1)
DTILE_FN(4, 1, 1)
DTILE_FN(4, 3, 0)
DTILE_FN(4, 2, 0)
DTILE_FN(4, 1, 0)
DTILE_FN(1, 3, 0)
DTILE_FN(1, 2, 0)
DTILE_FN(1, 1, 0)
typedef void (*dtile_fn)(const uint8_t *, int64_t, kn_fmt, const float *const *, int64_t, float *);
static const dtile_fn dtiles[2][5][4] = {
    [1] = {[4] = {NULL, dtile_4x1_1, dtile_4x2_1, dtile_4x3_1}},
    [0] = {[4] = {NULL, dtile_4x1_0, dtile_4x2_0, dtile_4x3_0},
           [1] = {NULL, dtile_1x1_0, dtile_1x2_0, dtile_1x3_0}}};

static void small_float(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0,
                        int64_t r1, kn_fmt fmt)
{
    const int64_t cols = W->cols, rows = W->rows, c8 = cols & ~(int64_t)7, rs = cols * esize(fmt);
    for (int64_t r = r0; r < r1; r += (r1 - r >= 4 ? 4 : 1)) {
        const int R = r1 - r >= 4 ? 4 : 1;
        const uint8_t *w0 = (const uint8_t *)W->w + r * rs;
        for (int j = 0; j < n; j += 3) {
            const int T = n - j >= 3 ? 3 : (int)(n - j);
            const float *xp[3];
            for (int jj = 0; jj < T; jj++)
                xp[jj] = x + (j + jj) * cols;
            float out[12];
            /* the first token group streams the tile and prefetches the next one */
            dtiles[R == 4 && j == 0][R][T](w0, rs, fmt, xp, c8, out);
            for (int ii = 0; ii < R; ii++)
                for (int jj = 0; jj < T; jj++)
                    y[(j + jj) * rows + r + ii] =
                        out[ii * 3 + jj] +
                        float_tail(w0 + ii * rs, fmt, x + (j + jj) * cols, c8, cols);
        }
    }
}

/* 8-bit affine, few tokens: as dtile, with w̃ = q·s_g made per chunk exactly
 * as dec_q makes it (s_g from a per-tile f32 table: the same value). */
AI void dtile_q8(const uint8_t *w0, int64_t rs, const float *sc, int64_t ng, int64_t gs,
                 const float *const *xp, int64_t cols, float *out, const int R, const int T,
                 const int pf_on)
{
    __m256 a[4][3];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            a[i][j] = _mm256_setzero_ps();
    const float *x0 = xp[0], *x1 = T > 1 ? xp[1] : xp[0], *x2 = T > 2 ? xp[2] : xp[0];
    const uintptr_t pf =
        (uintptr_t)w0 + (uintptr_t)(pf_tiles(R * rs) * R * rs); /* may pass the end */
    for (int64_t c = 0; c < cols; c += 8) {
        if (pf_on) _mm_prefetch((const char *)(pf + (uintptr_t)(c / 8 * 8 * R)), _MM_HINT_T0);
        __m256 xv[3];
        xv[0] = _mm256_loadu_ps(x0 + c);
        if (T > 1) xv[1] = _mm256_loadu_ps(x1 + c);
        if (T > 2) xv[2] = _mm256_loadu_ps(x2 + c);
        const int64_t g = c / gs;
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256 q = _mm256_cvtepi32_ps(
                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(w0 + i * rs + c))));
            __m256 wv = _mm256_mul_ps(q, _mm256_broadcast_ss(sc + i * ng + g));
#pragma GCC unroll 3
            for (int j = 0; j < T; j++)
                a[i][j] = _mm256_fmadd_ps(wv, xv[j], a[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 3
        for (int j = 0; j < T; j++)
            out[i * 3 + j] = kn_hsum256(a[i][j]);
}

#define DTQ_FN(R, T, PF)                                                                           \
    static void dtq_##R##x##T##_##PF(const uint8_t *w0, int64_t rs, const float *sc, int64_t ng,   \
                                     int64_t gs, const float *const *xp, int64_t cols, float *out) \
    {                                                                                              \
        dtile_q8(w0, rs, sc, ng, gs, xp, cols, out, R, T, PF);                                     \
    }
DTQ_FN(4, 3, 1)
DTQ_FN(4, 2, 1)
DTQ_FN(4, 1, 1)
DTQ_FN(4, 3, 0)
DTQ_FN(4, 2, 0)
DTQ_FN(4, 1, 0)
DTQ_FN(1, 3, 0)
DTQ_FN(1, 2, 0)
DTQ_FN(1, 1, 0)
typedef void (*dtq_fn)(const uint8_t *, int64_t, const float *, int64_t, int64_t,
                       const float *const *, int64_t, float *);
static const dtq_fn dtqs[2][5][4] = {[1] = {[4] = {NULL, dtq_4x1_1, dtq_4x2_1, dtq_4x3_1}},
                                     [0] = {[4] = {NULL, dtq_4x1_0, dtq_4x2_0, dtq_4x3_0},
                                            [1] = {NULL, dtq_1x1_0, dtq_1x2_0, dtq_1x3_0}}};

#define SMALL_GROUPS 1024 /* groups per row the small 8-bit path takes */
/* it re-converts each code per token group of 3, so it only pays below ~8
 * tokens (2048²: n = 2 0.64 -> 0.43 ms, n = 8 equal, n = 16 worse) */
#define SMALL_N_Q8 4

static void small_q8(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    const int64_t cols = W->cols, rows = W->rows, gs = W->group, ng = cols / gs, rs = cols;
    float xsum[SMALL_N_Q8 * SMALL_GROUPS], sc[4 * SMALL_GROUPS];
    for (int64_t j = 0; j < n; j++)
        group_sums(x + j * cols, cols, gs, xsum + j * ng);
    for (int64_t r = r0; r < r1; r += (r1 - r >= 4 ? 4 : 1)) {
        const int R = r1 - r >= 4 ? 4 : 1;
        const uint8_t *w0 = (const uint8_t *)W->w + r * rs;
        for (int64_t k = 0; k < R * ng; k++)
            sc[k] = ld_sf(W->scales, W->sfmt, r * ng + k);
        for (int j = 0; j < n; j += 3) {
            const int T = n - j >= 3 ? 3 : (int)(n - j);
            const float *xp[3];
            for (int jj = 0; jj < T; jj++)
                xp[jj] = x + (j + jj) * cols;
            float out[12];
            dtqs[R == 4 && j == 0][R][T](w0, rs, sc, ng, gs, xp, cols, out);
            for (int ii = 0; ii < R; ii++)
                for (int jj = 0; jj < T; jj++)
                    y[(j + jj) * rows + r + ii] =
                        out[ii * 3 + jj] +
                        bias_dot(W->biases, W->sfmt, (r + ii) * ng, xsum + (j + jj) * ng, ng);
        }
    }
}

/* ---------------------------------------------------------------- entry points */

/* 4 rows at a time (8 made gcc spill accumulators), then single rows. */
#define DEC_ROWS(call4, call1)                                                                     \
    do {                                                                                           \
        int64_t r = r0;                                                                            \
        for (; r + 4 <= r1; r += 4)                                                                \
            call4;                                                                                 \
        for (; r < r1; r++)                                                                        \
            call1;                                                                                 \
    } while (0)

#define DEF_FLOAT(name, fmt)                                                                       \
    static void name(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1) \
    {                                                                                              \
        if (n == 1)                                                                                \
            DEC_ROWS(dec_float(W, x, y, r, 4, fmt), dec_float(W, x, y, r, 1, fmt));                \
        else if (n <= SMALL_N)                                                                     \
            small_float(W, x, n, y, r0, r1, fmt);                                                  \
        else if (pw_rows(W->cols) > 0)                                                             \
            pf_rows(W, x, n, y, r0, r1, fmt, 0);                                                   \
        else                                                                                       \
            pf_float(W, x, n, y, r0, r1, fmt);                                                     \
    }
DEF_FLOAT(mm_f32, KN_F32)
DEF_FLOAT(mm_f16, KN_F16)
DEF_FLOAT(mm_bf16, KN_BF16)

#define DEF_Q(b)                                                                                   \
    static void mm_q##b(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0,          \
                        int64_t r1)                                                                \
    {                                                                                              \
        if (kn_qx_ok(W)) {                                                                         \
            mm_qx(W, x, n, y, r0, r1);                                                             \
        } else if (n == 1) {                                                                       \
            float xsum[XSUM_MAX];                                                                  \
            KILN_ASSERT(W->cols / W->group <= XSUM_MAX);                                           \
            group_sums(x, W->cols, W->group, xsum);                                                \
            DEC_ROWS(r + 4 < W->rows ? dec_q(W, x, xsum, y, r, 4, b, 1)                            \
                                     : dec_q(W, x, xsum, y, r, 4, b, 0),                           \
                     r + 1 < W->rows ? dec_q(W, x, xsum, y, r, 1, b, 1)                            \
                                     : dec_q(W, x, xsum, y, r, 1, b, 0));                          \
        } else if (b == 8 && n <= SMALL_N_Q8 && W->cols / W->group <= SMALL_GROUPS) {              \
            small_q8(W, x, n, y, r0, r1);                                                          \
        } else if (b != 4 && pw_rows(W->cols) > 0) {                                               \
            pf_rows(W, x, n, y, r0, r1, KN_F32, b);                                                \
        } else {                                                                                   \
            pf_q(W, x, n, y, r0, r1, b);                                                           \
        }                                                                                          \
    }
DEF_Q(2)
DEF_Q(3)
DEF_Q(4)
DEF_Q(5)
DEF_Q(6)
DEF_Q(8)

void kn_avx2_install_mat(kn_ops *t)
{
    t->mm_f32 = mm_f32;
    t->mm_f16 = mm_f16;
    t->mm_bf16 = mm_bf16;
    t->mm_q[2] = mm_q2;
    t->mm_q[3] = mm_q3;
    t->mm_q[4] = mm_q4;
    t->mm_q[5] = mm_q5;
    t->mm_q[6] = mm_q6;
    t->mm_q[8] = mm_q8;
}
#endif
