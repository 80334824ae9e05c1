/*
 * kn_mat.c — y = x · Wᵀ over stored-format weights: picks the kernel from the
 * table and splits rows of W over the pool (never the reduction axis), so each
 * y[t][r] is reduced by one thread in the variant's fixed order.
 * Threads: engine thread calls; kernels run on pool threads.
 */
#include "kernels/kn_int.h"
#include "util/kiln_assert.h"

/* Rows per pool grain: a multiple of every kernel's row tile (4). */
#define ROW_GRAIN 16

typedef struct {
    kn_matmul_fn fn;
    const kn_mat *W;
    const float *x;
    int64_t n;
    float *y;
} mm_job;

static void mm_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const mm_job *j = ctx;
    j->fn(j->W, j->x, j->n, j->y, r0, r1);
}

static kn_matmul_fn pick(const kn_ops *t, const kn_mat *W)
{
    switch (W->fmt) {
    case KN_F32: return t->mm_f32;
    case KN_F16: return t->mm_f16;
    case KN_BF16: return t->mm_bf16;
    case KN_QAFFINE:
        KILN_ASSERT(W->bits >= 2 && W->bits <= 8 && t->mm_q[W->bits]);
        KILN_ASSERT(W->group == 32 || W->group == 64 || W->group == 128);
        return t->mm_q[W->bits];
    }
    return NULL;
}

void kn_matmul(kn_pool *pool, const kn_mat *W, const float *x, int64_t n, float *y)
{
    if (n <= 0 || W->rows <= 0) return;
    mm_job j = {pick(kn_get(), W), W, x, n, y};
    KILN_ASSERT(j.fn != NULL);
    int threads = kn_pool_threads(pool);
    int64_t grain = ROW_GRAIN;
    /* small matrices: fewer, larger chunks are not worth splitting further */
    if (W->rows < (int64_t)threads * ROW_GRAIN) grain = 4;
    kn_pool_for(pool, W->rows, grain, mm_rows, &j);
}

void kn_matmul_rows(const kn_mat *W, const float *x, int64_t n, float *y, int64_t r0, int64_t r1)
{
    if (n <= 0 || r0 >= r1) return;
    KILN_ASSERT(r0 >= 0 && r1 <= W->rows);
    kn_matmul_fn fn = pick(kn_get(), W);
    KILN_ASSERT(fn != NULL);
    fn(W, x, n, y, r0, r1);
}

/* ---------------------------------------------------------------- fused jobs */

/* Each job below runs as one kn_pool_for over rows: a chunk computes its rows
 * with the same kernel call kn_matmul would make for them (so each y[t][r] is
 * bitwise kn_matmul's, by the kernels' invariant) and then the element-wise
 * steps that need only those rows. One barrier instead of one per op: decode
 * issues a few hundred of these per token. */

typedef struct {
    const kn_ops *t;
    int nm;
    const kn_mat *const *W;
    const float *const *b;
    const float *x;
    int64_t n;
    float *const *y;
} multi_job;

static void add_bias(float *y, int64_t ld, const float *b, int64_t n, int64_t r0, int64_t r1,
                     const kn_ops *t)
{
    if (!b) return;
    for (int64_t k = 0; k < n; k++)
        t->add(y + k * ld + r0, b + r0, r1 - r0);
}

static void multi_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const multi_job *j = ctx;
    int64_t base = 0;
    for (int i = 0; i < j->nm && base < r1; base += j->W[i]->rows, i++) {
        int64_t rows = j->W[i]->rows, b = r0 - base, e = r1 - base;
        if (b < 0) b = 0;
        if (e > rows) e = rows;
        if (b >= e) continue;
        pick(j->t, j->W[i])(j->W[i], j->x, j->n, j->y[i], b, e);
        add_bias(j->y[i], rows, j->b ? j->b[i] : NULL, j->n, b, e, j->t);
    }
}

/* Same grain rule as kn_matmul, on the rows of the whole job. */
static int64_t row_grain(kn_pool *pool, int64_t rows)
{
    return rows < (int64_t)kn_pool_threads(pool) * ROW_GRAIN ? 4 : ROW_GRAIN;
}

void kn_matmul_multi(kn_pool *pool, int nm, const kn_mat *const *W, const float *const *b,
                     const float *x, int64_t n, float *const *y)
{
    KILN_ASSERT(nm >= 1 && nm <= KN_MULTI_MAX);
    int64_t rows = 0;
    for (int i = 0; i < nm; i++) {
        KILN_ASSERT(W[i]->cols == W[0]->cols && pick(kn_get(), W[i]) != NULL);
        rows += W[i]->rows;
    }
    if (n <= 0 || rows <= 0) return;
    multi_job j = {kn_get(), nm, W, b, x, n, y};
    kn_pool_for(pool, rows, row_grain(pool, rows), multi_rows, &j);
}

typedef struct {
    const kn_ops *t;
    const kn_mat *G, *U;
    const float *bg, *bu;
    kn_act act;
    const float *x;
    int64_t n;
    float *g, *u;
} glu_job;

static void glu_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const glu_job *j = ctx;
    int64_t F = j->G->rows;
    pick(j->t, j->G)(j->G, j->x, j->n, j->g, r0, r1);
    pick(j->t, j->U)(j->U, j->x, j->n, j->u, r0, r1);
    add_bias(j->g, F, j->bg, j->n, r0, r1, j->t);
    add_bias(j->u, F, j->bu, j->n, r0, r1, j->t);
    for (int64_t k = 0; k < j->n; k++) {
        float *g = j->g + k * F + r0;
        const float *u = j->u + k * F + r0;
        if (j->act == KN_ACT_GELU_TANH) j->t->gelu_tanh_mul(g, g, u, r1 - r0);
        else j->t->silu_mul(g, g, u, r1 - r0);
    }
}

void kn_matmul_glu(kn_pool *pool, const kn_mat *G, const kn_mat *U, const float *bg,
                   const float *bu, kn_act act, const float *x, int64_t n, float *g, float *u)
{
    KILN_ASSERT(G->rows == U->rows && G->cols == U->cols);
    if (n <= 0 || G->rows <= 0) return;
    glu_job j = {kn_get(), G, U, bg, bu, act, x, n, g, u};
    KILN_ASSERT(pick(j.t, G) && pick(j.t, U));
    kn_pool_for(pool, G->rows, row_grain(pool, 2 * G->rows), glu_rows, &j);
}

typedef struct {
    const kn_ops *t;
    const kn_mat *W;
    const float *b, *x;
    int64_t n;
    float *tmp, *acc;
} res_job;

static void res_rows(void *ctx, int64_t r0, int64_t r1, int tid)
{
    (void)tid;
    const res_job *j = ctx;
    int64_t R = j->W->rows;
    pick(j->t, j->W)(j->W, j->x, j->n, j->tmp, r0, r1);
    add_bias(j->tmp, R, j->b, j->n, r0, r1, j->t);
    for (int64_t k = 0; k < j->n; k++)
        j->t->add(j->acc + k * R + r0, j->tmp + k * R + r0, r1 - r0);
}

void kn_matmul_residual(kn_pool *pool, const kn_mat *W, const float *b, const float *x, int64_t n,
                        float *tmp, float *acc)
{
    if (n <= 0 || W->rows <= 0) return;
    res_job j = {kn_get(), W, b, x, n, tmp, acc};
    KILN_ASSERT(pick(j.t, W) != NULL);
    kn_pool_for(pool, W->rows, row_grain(pool, W->rows), res_rows, &j);
}

void kn_mat_row(const kn_mat *W, int64_t r, float *out)
{
    kn_get()->mat_row(W, r, out);
}

uint64_t kn_mat_bytes(const kn_mat *W)
{
    uint64_t el = (uint64_t)W->rows * (uint64_t)W->cols;
    switch (W->fmt) {
    case KN_F32: return el * 4;
    case KN_F16:
    case KN_BF16: return el * 2;
    case KN_QAFFINE: {
        uint64_t ss = W->sfmt == KN_F32 ? 4 : 2;
        uint64_t ng = (uint64_t)W->rows * (uint64_t)(W->cols / W->group);
        return el * (uint64_t)W->bits / 8 + 2 * ng * ss;
    }
    }
    return 0;
}
