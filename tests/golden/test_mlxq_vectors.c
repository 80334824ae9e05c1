/*
 * test_mlxq_vectors.c — MLX affine golden vectors (shared/vectors/mlx-quant):
 * kn_mat_row must equal `*.dequant` bit for bit for f32/bf16/f16 scales, and
 * kn_matmul must match `*.y` within 1e-5 · Σ|W·x| (that folder's README), for
 * every kernel variant this CPU has; plus the spec's worked examples (§3.6).
 */
#include <jansson.h>

#include "kernels/kn_cpu.h"
#include "kernels/kn_mat.h"
#include "test.h"
#include "weights/wt_safetensors.h"

static const char *variants[] = {"ref", "avx2"};

static int have(const char *v)
{
    kiln_err err;
    return kn_init(v, &err) == KILN_OK;
}

static const wt_tensor *need(const wt_st *st, const char *name, wt_dtype dt)
{
    const wt_tensor *t = wt_st_find(st, name);
    if (!t || t->dtype != dt) {
        fprintf(stderr, "  tensor %s missing or wrong dtype\n", name);
        return NULL;
    }
    return t;
}

/* One file, one model dtype prefix ("f32", "bf16", "f16"). Returns 1 if all agree. */
static int check_variant(const wt_st *st, const char *pfx, int bits, int gs, kn_pool *pool)
{
    char n_w[64], n_s[64], n_b[64], n_d[64], n_y[64];
    snprintf(n_w, sizeof n_w, "%s.weight", pfx);
    snprintf(n_s, sizeof n_s, "%s.scales", pfx);
    snprintf(n_b, sizeof n_b, "%s.biases", pfx);
    snprintf(n_d, sizeof n_d, "%s.dequant", pfx);
    snprintf(n_y, sizeof n_y, "%s.y", pfx);
    wt_dtype sdt = strcmp(pfx, "f32") == 0 ? WT_F32 : strcmp(pfx, "bf16") == 0 ? WT_BF16 : WT_F16;
    const wt_tensor *w = need(st, n_w, WT_U32), *s = need(st, n_s, sdt), *b = need(st, n_b, sdt);
    const wt_tensor *d = need(st, n_d, WT_F32), *y = need(st, n_y, WT_F32), *x = need(st, "x", WT_F32);
    if (!w || !s || !b || !d || !y || !x) return 0;
    int64_t rows = d->shape[0], cols = d->shape[1];
    kn_mat m = {.fmt = KN_QAFFINE, .rows = rows, .cols = cols, .w = w->data, .scales = s->data,
                .biases = b->data, .sfmt = sdt == WT_F32 ? KN_F32 : sdt == WT_BF16 ? KN_BF16 : KN_F16,
                .bits = bits, .group = gs};
    const float *dq = d->data, *yy = y->data, *xx = x->data;
    float *row = malloc((size_t)cols * 4), *out = malloc((size_t)rows * 4);
    int ok = 1;
    for (int64_t r = 0; r < rows; r++) {
        kn_mat_row(&m, r, row);
        if (memcmp(row, dq + r * cols, (size_t)cols * 4) != 0) {
            for (int64_t i = 0; i < cols; i++)
                if (memcmp(&row[i], &dq[r * cols + i], 4) != 0) {
                    fprintf(stderr, "  %s b%d g%d row %" PRId64 " col %" PRId64 ": %.9g != %.9g\n",
                            pfx, bits, gs, r, i, row[i], dq[r * cols + i]);
                    break;
                }
            ok = 0;
        }
    }
    kn_matmul(pool, &m, xx, 1, out);
    for (int64_t r = 0; r < rows; r++) {
        double sa = 0;
        for (int64_t i = 0; i < cols; i++) sa += fabs((double)dq[r * cols + i] * xx[i]);
        if (!(fabs((double)out[r] - yy[r]) <= 1e-5 * sa + 1e-30)) {
            fprintf(stderr, "  %s b%d g%d y[%" PRId64 "] = %.9g, want %.9g (tol %g)\n", pfx, bits,
                    gs, r, out[r], yy[r], 1e-5 * sa);
            ok = 0;
        }
    }
    free(row);
    free(out);
    return ok;
}

static void test_dequant_bit_exact_and_matvec_within_tolerance(void)
{
    char buf[512], rel[128];
    test_shared_path(buf, sizeof buf, "vectors/mlx-quant/affine_b4_g64.safetensors");
    if (!test_path_exists(buf)) TEST_SKIP("%s absent", buf);
    kiln_err err;
    kn_pool *pool;
    ASSERT_OK(kn_pool_create(2, &pool, &err));
    static const int bits[] = {2, 3, 4, 5, 6, 8}, gss[] = {32, 64, 128};
    static const char *pfx[] = {"f32", "bf16", "f16"};
    int files = 0, bad = 0;
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++) {
            snprintf(rel, sizeof rel, "vectors/mlx-quant/affine_b%d_g%d.safetensors", bits[bi], gss[gi]);
            test_shared_path(buf, sizeof buf, rel);
            wt_st *st;
            if (wt_st_open(buf, &st, &err) != KILN_OK) {
                fprintf(stderr, "  %s: %s\n", buf, err.msg);
                bad++;
                continue;
            }
            files++;
            for (int vi = 0; vi < 2; vi++) {
                if (!have(variants[vi])) continue;
                for (int p = 0; p < 3; p++)
                    if (!check_variant(st, pfx[p], bits[bi], gss[gi], pool)) {
                        fprintf(stderr, "  variant %s failed %s\n", variants[vi], rel);
                        bad++;
                    }
            }
            wt_st_close(st);
        }
    kn_pool_destroy(pool);
    ASSERT_EQ_I64(files, 18);
    ASSERT_EQ_I64(bad, 0);
}

static void test_edge_cases_dequantize_exactly(void)
{
    char buf[512];
    test_shared_path(buf, sizeof buf, "vectors/mlx-quant/affine_edge_cases.safetensors");
    if (!test_path_exists(buf)) TEST_SKIP("%s absent", buf);
    kiln_err err;
    wt_st *st;
    ASSERT_OK(wt_st_open(buf, &st, &err));
    static const char *vs[] = {"cpu", "gpu"};
    int bad = 0;
    for (int vi = 0; vi < 2; vi++) {
        if (!have(variants[vi])) continue;
        for (int k = 0; k < 2; k++) {
            char n[64];
            snprintf(n, sizeof n, "%s.weight", vs[k]);
            const wt_tensor *w = need(st, n, WT_U32);
            snprintf(n, sizeof n, "%s.scales", vs[k]);
            const wt_tensor *s = need(st, n, WT_F32);
            snprintf(n, sizeof n, "%s.biases", vs[k]);
            const wt_tensor *b = need(st, n, WT_F32);
            snprintf(n, sizeof n, "%s.dequant", vs[k]);
            const wt_tensor *d = need(st, n, WT_F32);
            if (!w || !s || !b || !d) {
                bad++;
                continue;
            }
            kn_mat m = {.fmt = KN_QAFFINE, .rows = d->shape[0], .cols = d->shape[1], .w = w->data,
                        .scales = s->data, .biases = b->data, .sfmt = KN_F32, .bits = 4, .group = 32};
            float row[32];
            for (int64_t r = 0; r < m.rows; r++) {
                kn_mat_row(&m, r, row);
                if (memcmp(row, (const float *)d->data + r * 32, sizeof row) != 0) {
                    fprintf(stderr, "  %s %s row %" PRId64 " differs\n", variants[vi], vs[k], r);
                    bad++;
                }
            }
        }
    }
    wt_st_close(st);
    ASSERT_EQ_I64(bad, 0);
}

static uint32_t hex32(const char *s)
{
    return (uint32_t)strtoul(s, NULL, 16);
}

static void test_worked_examples_decode(void)
{
    char buf[512];
    test_shared_path(buf, sizeof buf, "vectors/mlx-quant/worked_examples.json");
    if (!test_path_exists(buf)) TEST_SKIP("%s absent", buf);
    json_error_t je;
    json_t *root = json_load_file(buf, 0, &je);
    ASSERT_TRUE(root != NULL);
    json_t *cases = json_object_get(root, "cases");
    int n_cases = 0, bad = 0;
    for (int vi = 0; vi < 2; vi++) {
        if (!have(variants[vi])) continue;
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c)
        {
            int bits = (int)json_integer_value(json_object_get(c, "bits"));
            float scale = (float)json_real_value(json_object_get(c, "scale"));
            uint32_t sh = hex32(json_string_value(json_object_get(c, "scale_hex")));
            float bias = (float)json_number_value(json_object_get(c, "bias"));
            uint32_t su;
            memcpy(&su, &scale, 4);
            if (su != sh) bad++;
            json_t *pw = json_object_get(c, "packed_words"), *codes = json_object_get(c, "codes");
            uint32_t words[32] = {0};
            /* the json lists distinct leading words; the rest repeat the last pattern: rebuild
             * the stream from the codes and check it against the listed words */
            for (int k = 0; k < 32; k++) {
                uint32_t q = (uint32_t)json_integer_value(json_array_get(codes, (size_t)k));
                for (int j = 0; j < bits; j++) {
                    int p = k * bits + j;
                    words[p / 32] |= ((q >> j) & 1u) << (p % 32);
                }
            }
            for (size_t k = 0; k < json_array_size(pw); k++)
                if (words[k] != hex32(json_string_value(json_array_get(pw, k)))) bad++;
            kn_mat m = {.fmt = KN_QAFFINE, .rows = 1, .cols = 32, .w = words, .scales = &scale,
                        .biases = &bias, .sfmt = KN_F32, .bits = bits, .group = 32};
            float row[32];
            kn_mat_row(&m, 0, row);
            json_t *dq = json_object_get(c, "dequant_first8");
            for (int k = 0; k < 8; k++)
                if (row[k] != (float)json_real_value(json_array_get(dq, (size_t)k))) {
                    fprintf(stderr, "  bits %d col %d: %.9g vs %.9g\n", bits, k, row[k],
                            json_real_value(json_array_get(dq, (size_t)k)));
                    bad++;
                }
            float pad = (float)json_number_value(json_object_get(c, "dequant_of_zero_padding"));
            for (int k = 8; k < 32; k++)
                if (row[k] != pad) bad++;
            n_cases++;
        }
    }
    json_decref(root);
    ASSERT_TRUE(n_cases >= 6);
    ASSERT_EQ_I64(bad, 0);
}

int main(void)
{
    RUN(test_dequant_bit_exact_and_matvec_within_tolerance);
    RUN(test_edge_cases_dequantize_exactly);
    RUN(test_worked_examples_decode);
    return TEST_DONE();
}
