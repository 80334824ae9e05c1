/*
 * kn_mat_i8_avx2.c — MLX affine 4-bit matmul on int8 activations (the int8
 * matmul mode, the default for 4-bit; the math is kn_int.h's, shared with ref).
 *
 * The exact int16 path (kn_mat_avx2.c) needs two vpmaddwd levels per 16 codes
 * and per token; here one vpmaddubsw multiplies 32 unsigned codes by 32 signed
 * int8 activations. Per 64 codes and token that is 2 maddubs + add + madd +
 * cvt + mul + fma, and the code unpack (and, shift, and) is shared by every token
 * of a tile. (8-bit was built too and measured no faster than its exact path
 * end to end — its f32 decoder is cheap and its codes need a sign trick — so
 * it stays exact.)
 *
 * Layout of a token's q (per 64-column block b, 64 int8): q[0..31] = x̂[2k],
 * q[32..63] = x̂[2k+1] — the byte order of the low-nibble and high-nibble
 * vectors of the block's 32 code bytes (byte k holds codes 2k and 2k+1), so
 * no shuffles in the loop; the int32 lanes after madd are codes 0..31 (lanes
 * 0-3) and 32..63.
 * The halves' d (32 columns each) are lanes 0-3 and 4-7 of the token's dv
 * vector for the block, so the per-half scale costs one vmulps.
 * Batch invariance: per (t, r) the f32 accumulator lanes get
 * fma(cvt(Σ_block)·dv_b, s_g, acc) for blocks in ascending order, then hsum8 +
 * bias_dot — the same in every tile shape, token count and thread split.
 *
 * kn_mat_i8_avx512vnni.c compiles this file again with I8_DOT as two
 * vpdpbusd: each int32 lane is the sum of the same 8 byte products (4 of lo,
 * 4 of hi; no int16 step can saturate: 2·15·127 per pair), so both variants
 * give the same integers, hence the same bits.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "kernels/kn_int.h"
#include "kernels/x86/kn_avx2_load.h"
#include "kernels/x86/kn_avx2_math.h"
#include "util/kiln_assert.h"

#define AI static inline __attribute__((always_inline))

#define NB_MAX (KN_QX_MAX_COLS / KN_QX_BLOCK) /* blocks per row */
#define I8_QBYTES 131072                      /* stack q per token block (128 KiB) */
#define I8_TB 64                              /* tokens per prefill block, at most */
#define I8_SLAB 16384                         /* prefill: packed weight bytes per row slab (L1) */
#define I8_SMALL 3                            /* up to this many tokens: decode driver */
#define I8_PF 16384                           /* decode prefetch distance (bytes, ≥) */
#define I8_WIDE 4096                          /* prefill: wider rows take 2×4 tiles, not 1×8 */

typedef struct {
    const int8_t *q;     /* cols, layout above */
    const float *dv;     /* per block 8 floats: d of its first 32 columns ×4, of the second ×4 */
    const float *xsum;   /* per group: Σ x̂ (kn_i8_xsum) */
} i8_tok;

typedef struct {
    int8_t q[I8_QBYTES] __attribute__((aligned(64)));
    float dv[I8_QBYTES / KN_QX_BLOCK * 8] __attribute__((aligned(32)));
    float xsum[I8_QBYTES / 32];
} i8_buf;

/* max |x_i| over 32 consecutive floats: the scale of an activation half-block. */
AI float amax32(const float *x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    for (int k = 1; k < 4; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

/* Quantizes one token (kn_int.h): q, d per 32 columns (as dv), Σ x̂ per group. */
static void i8_make(const float *x, int64_t cols, int64_t gs, int8_t *q, float *dv, float *xsum)
{
    for (int64_t b = 0; b < cols / KN_QX_BLOCK; b++) {
        const float *xb = x + b * KN_QX_BLOCK;
        float d[2];
        int32_t qi[KN_QX_BLOCK], sum[2];
        for (int h = 0; h < 2; h++) {
            float amax = amax32(xb + 32 * h);
            float inv = amax > 0 ? 127.0f / amax : 0.0f;
            d[h] = amax > 0 ? amax / 127.0f : 0.0f;
            __m256i s = _mm256_setzero_si256();
            for (int k = 4 * h; k < 4 * h + 4; k++) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), _mm256_set1_ps(inv));
                v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                __m256i vi = _mm256_cvtps_epi32(v);
                s = _mm256_add_epi32(s, vi);
                _mm256_storeu_si256((__m256i *)(qi + 8 * k), vi);
            }
            __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
            sum[h] = _mm_cvtsi128_si32(t);
        }
        int8_t *qb = q + b * KN_QX_BLOCK;
        for (int k = 0; k < 32; k++) {
            qb[k] = (int8_t)qi[2 * k];
            qb[32 + k] = (int8_t)qi[2 * k + 1];
        }
        _mm256_store_ps(dv + 8 * b, _mm256_set_m128(_mm_set1_ps(d[1]), _mm_set1_ps(d[0])));
        kn_i8_xsum(xsum, b, gs, d[0], d[1], sum[0], sum[1]);
    }
}

/* R rows × T tokens of the int8 math: yp[j][r + i]. PF: prefetch the weights
 * pfd bytes ahead (decode streams rows from memory; a compile-time 0 for the
 * prefill tiles, whose slab is in L1/L2). */
#ifndef I8_DOT
/* The 8 int32 lane sums of one block of 64 codes (lo: codes 0..31, hi: 32..63)
 * times a token's q (2 vectors): lane l = codes 4l..4l+3 of lo and of hi. */
#define I8_DOT(lo, hi, q)                                                                          \
    _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256(q)),             \
                                       _mm256_maddubs_epi16(hi, _mm256_load_si256((q) + 1))),      \
                      ones)
#define I8_INSTALL kn_avx2_install_mat_i8
#endif

AI void i8_tile(const kn_mat *W, const i8_tok *xt, float *const *yp, int64_t r, const int R,
                const int T, const int64_t gs, const int PF, const int64_t pfd)
{
    const int64_t cols = W->cols, ng = cols / gs, nb = cols / KN_QX_BLOCK, rs = cols / 2;
    const int64_t bb = KN_QX_BLOCK / 2; /* code bytes per block and row */
    const uint8_t *w0 = (const uint8_t *)W->w + r * rs;
    /* the tile rows' weight scales as f32, one per group (rows padded by 32
     * bytes so that they do not share L1 sets) */
    float sf[4][2 * NB_MAX + 8] __attribute__((aligned(32)));
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) {
        int64_t g = 0, off = (r + i) * ng;
        for (; g + 8 <= ng; g += 8) _mm256_store_ps(sf[i] + g, ld_sf8(W->scales, W->sfmt, off + g));
        for (; g < ng; g++) sf[i][g] = ld_sf(W->scales, W->sfmt, off + g);
    }
    __m256 acc[4][8];
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    (void)ones; /* unused by the vpdpbusd I8_DOT */
    for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const uint8_t *wp = w0 + i * rs + b * bb;
            if (PF && (b & 1) == 0) _mm_prefetch((const char *)(wp + pfd), _MM_HINT_T0);
            __m256i v = _mm256_loadu_si256((const __m256i *)wp);
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            const __m256 s = gs == 32 ? _mm256_set_m128(_mm_set1_ps(sf[i][2 * b + 1]),
                                                         _mm_set1_ps(sf[i][2 * b]))
                                      : _mm256_broadcast_ss(&sf[i][gs == 64 ? b : b / 2]);
#pragma GCC unroll 8
            for (int j = 0; j < T; j++) {
                const __m256i *q = (const __m256i *)(xt[j].q + b * KN_QX_BLOCK);
                __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(I8_DOT(lo, hi, q)),
                                         _mm256_load_ps(xt[j].dv + 8 * b));
                acc[i][j] = _mm256_fmadd_ps(f, s, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < T; j++)
            yp[j][r + i] =
                kn_hsum256(acc[i][j]) + bias_dot(W->biases, W->sfmt, (r + i) * ng, xt[j].xsum, ng);
}

typedef void (*i8_tile_fn)(const kn_mat *, const i8_tok *, float *const *, int64_t, int64_t);

/* Tile functions, every constant folded: i8_<gs>_<R>x<T>, and the decode
 * tiles with the prefetch, i8_<gs>_<R>x<T>p. */
#define I8_FN(NAME, G, R, T, PF)                                                                   \
    static void NAME(const kn_mat *W, const i8_tok *xt, float *const *yp, int64_t r, int64_t pfd) \
    {                                                                                              \
        i8_tile(W, xt, yp, r, R, T, G, PF, pfd);                                                   \
    }
#define I8_FNS(G)                                                                                  \
    I8_FN(i8_##G##_1x1, G, 1, 1, 0) I8_FN(i8_##G##_1x2, G, 1, 2, 0)                                \
    I8_FN(i8_##G##_1x3, G, 1, 3, 0) I8_FN(i8_##G##_1x4, G, 1, 4, 0)                                \
    I8_FN(i8_##G##_1x5, G, 1, 5, 0) I8_FN(i8_##G##_1x6, G, 1, 6, 0)                                \
    I8_FN(i8_##G##_1x7, G, 1, 7, 0) I8_FN(i8_##G##_1x8, G, 1, 8, 0)                                \
    I8_FN(i8_##G##_2x1, G, 2, 1, 0) I8_FN(i8_##G##_2x2, G, 2, 2, 0)                                \
    I8_FN(i8_##G##_2x3, G, 2, 3, 0) I8_FN(i8_##G##_2x4, G, 2, 4, 0)                                \
    I8_FN(i8_##G##_1x1p, G, 1, 1, 1) I8_FN(i8_##G##_1x2p, G, 1, 2, 1)                              \
    I8_FN(i8_##G##_1x3p, G, 1, 3, 1) I8_FN(i8_##G##_4x1p, G, 4, 1, 1)                              \
    I8_FN(i8_##G##_4x2p, G, 4, 2, 1) I8_FN(i8_##G##_4x3p, G, 4, 3, 1)
I8_FNS(32)
I8_FNS(64)
I8_FNS(128)
#define I8_ROW(G)                                                                                  \
    {{NULL, i8_##G##_1x1, i8_##G##_1x2, i8_##G##_1x3, i8_##G##_1x4, i8_##G##_1x5, i8_##G##_1x6,    \
      i8_##G##_1x7, i8_##G##_1x8},                                                                 \
     {NULL, i8_##G##_2x1, i8_##G##_2x2, i8_##G##_2x3, i8_##G##_2x4},                               \
     {NULL, i8_##G##_1x1p, i8_##G##_1x2p, i8_##G##_1x3p},                                          \
     {NULL, i8_##G##_4x1p, i8_##G##_4x2p, i8_##G##_4x3p}}
/* [gs 32/64/128][1 row, 2 rows, 1 row + prefetch, 4 rows + prefetch][T] */
static const i8_tile_fn i8_tiles[3][4][9] = {I8_ROW(32), I8_ROW(64), I8_ROW(128)};

/* Rows [r0, r1) for tokens xt[0..nt). Decode (≤ 3 tokens streamed from
 * memory, pfd > 0): 4-row tiles with the prefetch. Prefill (the rows' slab in
 * L1/L2): 1 row × 8 tokens while 8 tokens' q fit in L1 beside the row (cols ≤
 * 4096: the weight unpack is shared by 8 tokens), else 2 rows × 4 tokens.
 * Leftover rows one by one. */
static void i8_rows(const kn_mat *W, const i8_tok *xt, int nt, float *const *yp, int64_t r0,
                    int64_t r1, int64_t pfd)
{
    const int g = W->group == 32 ? 0 : W->group == 64 ? 1 : 2;
    const int kind = pfd > 0 ? 3 : W->cols <= I8_WIDE ? 0 : 1;
    const i8_tile_fn *tr = i8_tiles[g][kind], *t1 = i8_tiles[g][0];
    const int R = kind == 3 ? 4 : kind + 1, TT = kind == 3 ? 3 : kind == 0 ? 8 : 4;
    for (int j = 0, T; j < nt; j += T) {
        /* groups of TT; a last group of 1 becomes 2 + 2 (a 1-token tile costs
         * more per token) */
        T = nt - j < TT ? nt - j : TT;
        if (nt - j == TT + 1) T = TT - 1;
        int64_t r = r0;
        for (; r + R <= r1; r += R)
            tr[T](W, xt + j, yp + j, r, pfd);
        for (; r < r1; r++)
            t1[T](W, xt + j, yp + j, r, 0);
    }
}

static void mm_i8(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    const int64_t cols = W->cols, rows = W->rows, gs = W->group, ng = cols / gs,
                  nb = cols / KN_QX_BLOCK;
    const int64_t rs = cols / 2;
    i8_buf buf;
    int64_t tb = I8_QBYTES / cols;
    if (tb > I8_TB) tb = I8_TB;
    i8_tok xt[I8_TB];
    float *yp[I8_TB];
    if (n <= I8_SMALL) {
        for (int j = 0; j < n; j++) {
            i8_make(x + j * cols, cols, gs, buf.q + j * cols, buf.dv + 8 * j * nb, buf.xsum + j * ng);
            xt[j] = (i8_tok){buf.q + j * cols, buf.dv + 8 * j * nb, buf.xsum + j * ng};
            yp[j] = y + j * rows;
        }
        /* stream rows: prefetch whole 4-row tiles at least I8_PF ahead
         * (a prefetch past the matrix never faults) */
        int64_t tile = 4 * rs;
        i8_rows(W, xt, (int)n, yp, r0, r1, (I8_PF + tile - 1) / tile * tile);
        return;
    }
    int64_t slab = I8_SLAB / rs & ~(int64_t)1; /* whole 2-row tiles */
    if (slab < 2) slab = 2;
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
        const int nt = (int)(n - t0 < tb ? n - t0 : tb);
        for (int j = 0; j < nt; j++) {
            i8_make(x + (t0 + j) * cols, cols, gs, buf.q + j * cols, buf.dv + 8 * j * nb,
                    buf.xsum + j * ng);
            xt[j] = (i8_tok){buf.q + j * cols, buf.dv + 8 * j * nb, buf.xsum + j * ng};
            yp[j] = y + (t0 + j) * rows;
        }
        for (int64_t rb = r0; rb < r1; rb += slab) {
            const int64_t re = r1 - rb < slab ? r1 : rb + slab;
            i8_rows(W, xt, nt, yp, rb, re, 0);
        }
    }
}

static void mm_q4_i8(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    if (kn_i8_ok(W))
        mm_i8(W, x, n, y, r0, r1);
    else
        kn->mm_q_base[4](W, x, n, y, r0, r1);
}

void I8_INSTALL(kn_ops *t)
{
    t->mm_q[4] = mm_q4_i8;
}
#endif
