/*
 * kn_mat_i8_avx2.c — MLX affine 4-bit matmul on int8 activations (the opt-in
 * int8 matmul mode; the math is kn_int.h's, shared with ref).
 *
 * The exact int16 path (kn_mat_avx2.c) needs two vpmaddwd levels per 16 codes
 * and per token; here one vpmaddubsw multiplies 32 unsigned codes by 32 signed
 * int8 activations. Per 64 codes and token that is 2 maddubs + add + madd +
 * cvt + fma, and the code unpack (and, shift, and) is shared by every token
 * of a tile. (8-bit was built too and measured no faster than its exact path
 * end to end — its f32 decoder is cheap and its codes need a sign trick — so
 * it stays exact.)
 *
 * Layout of a token's q (per 64-column block b, 64 int8): q[0..31] = x̂[2k],
 * q[32..63] = x̂[2k+1] — the byte order of the low-nibble and high-nibble
 * vectors of the block's 32 code bytes (byte k holds codes 2k and 2k+1), so
 * no shuffles in the loop; the int32 lanes after madd are codes 0..31 (lanes
 * 0-3) and 32..63.
 * Batch invariance: per (t, r) the f32 accumulator lanes get
 * fma(cvt(Σ_block), s_g·d_b, acc) for blocks in ascending order, then hsum8 +
 * bias_dot — the same in every tile shape, token count and thread split.
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

typedef struct {
    const int8_t *q;     /* cols, layout above */
    const float *d;      /* per block */
    const float *xsum;   /* per group */
} i8_tok;

typedef struct {
    int8_t q[I8_QBYTES] __attribute__((aligned(64)));
    float d[I8_QBYTES / KN_QX_BLOCK];
    float xsum[I8_QBYTES / 32];
} i8_buf;

/* Quantizes one token (kn_int.h): q, d per block, xsum per group. */
static void i8_make(const float *x, int64_t cols, int64_t gs, int8_t *q, float *d, float *xsum)
{
    for (int64_t b = 0; b < cols / KN_QX_BLOCK; b++) {
        const float *xb = x + b * KN_QX_BLOCK;
        float amax = kn_amax64(xb);
        float inv = amax > 0 ? 127.0f / amax : 0.0f;
        d[b] = amax > 0 ? amax / 127.0f : 0.0f;
        int32_t qi[KN_QX_BLOCK];
        for (int k = 0; k < 8; k++) {
            __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * k), _mm256_set1_ps(inv));
            v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm256_storeu_si256((__m256i *)(qi + 8 * k), _mm256_cvtps_epi32(v));
        }
        int8_t *qb = q + b * KN_QX_BLOCK;
        for (int k = 0; k < 32; k++) {
            qb[k] = (int8_t)qi[2 * k];
            qb[32 + k] = (int8_t)qi[2 * k + 1];
        }
    }
    group_sums(x, cols, gs, xsum);
}

/* sd[k] = s_g·d_b for the scale slots of row r (one per block; gs 32: two,
 * one per half). The same f32 product whichever loop makes it. */
AI void i8_sd(const kn_mat *W, int64_t r, const float *d, float *sd, const int64_t gs)
{
    const int64_t nb = W->cols / KN_QX_BLOCK, ng = W->cols / gs, off = r * ng;
    const kn_fmt sf = W->sfmt;
    int64_t b = 0;
    if (gs == 64) {
        for (; b + 8 <= nb; b += 8)
            _mm256_store_ps(sd + b,
                            _mm256_mul_ps(ld_sf8(W->scales, sf, off + b), _mm256_loadu_ps(d + b)));
        for (; b < nb; b++)
            sd[b] = ld_sf(W->scales, sf, off + b) * d[b];
    } else if (gs == 128) {
        for (; b < nb; b++)
            sd[b] = ld_sf(W->scales, sf, off + b / 2) * d[b];
    } else {
        for (; b < nb; b++) {
            sd[2 * b] = ld_sf(W->scales, sf, off + 2 * b) * d[b];
            sd[2 * b + 1] = ld_sf(W->scales, sf, off + 2 * b + 1) * d[b];
        }
    }
}

/* R rows × T tokens of the int8 math: yp[j][r + i]. `pf`: prefetch the
 * weights pfd bytes ahead (decode streams rows from memory). */
AI void i8_tile(const kn_mat *W, const i8_tok *xt, float *const *yp, int64_t r, const int R,
                const int T, const int64_t gs, const int64_t pfd)
{
    const int64_t cols = W->cols, ng = cols / gs, nb = cols / KN_QX_BLOCK, rs = cols / 2;
    const int64_t bb = KN_QX_BLOCK / 2; /* code bytes per block and row */
    const uint8_t *w0 = (const uint8_t *)W->w + r * rs;
    /* s_g·d_b per (row, token); rows padded by 32 bytes: 12 arrays exactly
     * 4 KiB apart would share one L1 set. Constant offsets from one base keep
     * the loop's loads free of pointer registers. */
    float sd[4][3][2 * NB_MAX + 8] __attribute__((aligned(32)));
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            i8_sd(W, r + i, xt[j].d, sd[i][j], gs);
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            acc[i][j] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const uint8_t *wp = w0 + i * rs + b * bb;
            if (pfd && (b & 1) == 0) _mm_prefetch((const char *)(wp + pfd), _MM_HINT_T0);
            __m256i v = _mm256_loadu_si256((const __m256i *)wp);
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 4
            for (int j = 0; j < T; j++) {
                const __m256i *q = (const __m256i *)(xt[j].q + b * KN_QX_BLOCK);
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256(q)),
                                             _mm256_maddubs_epi16(hi, _mm256_load_si256(q + 1)));
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                __m256 m = gs == 32 ? _mm256_set_m128(_mm_set1_ps(sd[i][j][2 * b + 1]),
                                                      _mm_set1_ps(sd[i][j][2 * b]))
                                    : _mm256_broadcast_ss(&sd[i][j][b]);
                acc[i][j] = _mm256_fmadd_ps(f, m, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++)
            yp[j][r + i] =
                kn_hsum256(acc[i][j]) + bias_dot(W->biases, W->sfmt, (r + i) * ng, xt[j].xsum, ng);
}

typedef void (*i8_tile_fn)(const kn_mat *, const i8_tok *, float *const *, int64_t, int64_t);

/* i8_<gs>_<R>x<T>: every constant folded. */
#define I8_FN(G, R, T)                                                                             \
    static void i8_##G##_##R##x##T(const kn_mat *W, const i8_tok *xt, float *const *yp, int64_t r, \
                                   int64_t pfd)                                                    \
    {                                                                                              \
        i8_tile(W, xt, yp, r, R, T, G, pfd);                                                       \
    }
#define I8_FNS(G)                                                                                  \
    I8_FN(G, 4, 1)                                                                                 \
    I8_FN(G, 4, 2)                                                                                 \
    I8_FN(G, 4, 3)                                                                                 \
    I8_FN(G, 1, 1)                                                                                 \
    I8_FN(G, 1, 2)                                                                                 \
    I8_FN(G, 1, 3)
I8_FNS(32)
I8_FNS(64)
I8_FNS(128)
#define I8_ROW(G)                                                                                  \
    {                                                                                              \
        {NULL, i8_##G##_1x1, i8_##G##_1x2, i8_##G##_1x3},                                          \
            {NULL, i8_##G##_4x1, i8_##G##_4x2, i8_##G##_4x3},                                      \
    }
/* [gs 32/64/128][R 1/4][T] */
static const i8_tile_fn i8_tiles[3][2][4] = {I8_ROW(32), I8_ROW(64), I8_ROW(128)};

static const i8_tile_fn *i8_pick(const kn_mat *W, int four_rows)
{
    return i8_tiles[W->group == 32 ? 0 : W->group == 64 ? 1 : 2][four_rows];
}

/* Rows [r0, r1) for tokens xt[0..nt): 4-row tiles, token groups of ≤ 3. */
static void i8_rows(const kn_mat *W, const i8_tok *xt, int nt, float *const *yp, int64_t r0,
                    int64_t r1, int64_t pfd)
{
    const i8_tile_fn *t4 = i8_pick(W, 1), *t1 = i8_pick(W, 0);
    for (int j = 0; j < nt; j += 3) {
        int T = nt - j < 3 ? nt - j : 3;
        int64_t r = r0;
        for (; r + 4 <= r1; r += 4)
            t4[T](W, xt + j, yp + j, r, pfd);
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
            i8_make(x + j * cols, cols, gs, buf.q + j * cols, buf.d + j * nb, buf.xsum + j * ng);
            xt[j] = (i8_tok){buf.q + j * cols, buf.d + j * nb, buf.xsum + j * ng};
            yp[j] = y + j * rows;
        }
        /* stream rows: prefetch whole 4-row tiles at least I8_PF ahead
         * (a prefetch past the matrix never faults) */
        int64_t tile = 4 * rs;
        i8_rows(W, xt, (int)n, yp, r0, r1, (I8_PF + tile - 1) / tile * tile);
        return;
    }
    int64_t slab = I8_SLAB / rs & ~(int64_t)3;
    if (slab < 4) slab = 4;
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
        const int nt = (int)(n - t0 < tb ? n - t0 : tb);
        for (int j = 0; j < nt; j++) {
            i8_make(x + (t0 + j) * cols, cols, gs, buf.q + j * cols, buf.d + j * nb, buf.xsum + j * ng);
            xt[j] = (i8_tok){buf.q + j * cols, buf.d + j * nb, buf.xsum + j * ng};
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

void kn_avx2_install_mat_i8(kn_ops *t)
{
    t->mm_q[4] = mm_q4_i8;
}
#endif
