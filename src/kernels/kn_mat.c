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
