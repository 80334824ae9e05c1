/*
 * test_mlxq_quantize.c — kiln's MLX affine quantizer against the golden vectors
 * in ../shared/vectors/mlx-quant/: for every bits x group size x model dtype,
 * packed words, codes, scales and biases must be bit-exact, and dequantizing
 * with the stored scale/bias must reproduce `dequant` bit for bit; the CPU
 * variant of affine_edge_cases must match too, and worked_examples.json.
 */
#include <jansson.h>

#include "test.h"
#include "util/half.h"
#include "util/kiln_err.h"
#include "weights/wt_quantize.h"
#include "weights/wt_safetensors.h"

static const wt_tensor *need(const wt_st *st, const char *name)
{
    const wt_tensor *t = wt_st_find(st, name);
    if (!t) fprintf(stderr, "  missing tensor %s in %s\n", name, wt_st_path(st));
    return t;
}

/* Loads a float tensor (F32/F16/BF16) as f32 into a new buffer. */
static float *as_f32(const wt_tensor *t)
{
    float *f = malloc((size_t)t->numel * sizeof *f);
    if (f && wt_to_f32(t->dtype, t->data, t->numel, f) != 0) {
        free(f);
        return NULL;
    }
    return f;
}

/* Compares n bytes; reports the first difference. Returns 0 when equal. */
static int bytes_differ(const char *what, const char *file, const void *a, const void *b, size_t n)
{
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) {
            fprintf(stderr, "  %s: %s differs at byte %zu (%u vs %u)\n", file, what, i, x[i], y[i]);
            return 1;
        }
    return 0;
}

/* Quantizes `input` as the `prefix` pipeline of file st and compares. */
static int check_pipeline(const wt_st *st, const char *prefix, const char *input, wt_dtype dt,
                          int bits, int gs)
{
    char n_w[64], n_s[64], n_b[64], n_c[64], n_d[64];
    snprintf(n_w, sizeof n_w, "%s.weight", prefix);
    snprintf(n_s, sizeof n_s, "%s.scales", prefix);
    snprintf(n_b, sizeof n_b, "%s.biases", prefix);
    snprintf(n_c, sizeof n_c, "%s.codes", prefix);
    snprintf(n_d, sizeof n_d, "%s.dequant", prefix);
    const wt_tensor *in = need(st, input), *w = need(st, n_w), *s = need(st, n_s),
                    *b = need(st, n_b), *c = need(st, n_c), *d = need(st, n_d);
    if (!in || !w || !s || !b || !c || !d) return 1;
    if (s->dtype != dt || w->dtype != WT_U32 || in->ndim != 2) return 1;
    int64_t rows = in->shape[0], cols = in->shape[1];
    float *x = as_f32(in);
    uint32_t *pw = malloc(w->nbytes);
    uint8_t *ps = malloc(s->nbytes), *pb = malloc(b->nbytes), *pc = malloc((size_t)c->numel);
    float *deq = malloc((size_t)d->numel * sizeof *deq);
    kiln_err err;
    int bad = !x || !pw || !ps || !pb || !pc || !deq;
    if (!bad && wt_quantize_affine(x, rows, cols, bits, gs, dt, pw, ps, pb, pc, &err) != KILN_OK) {
        fprintf(stderr, "  %s\n", err.msg);
        bad = 1;
    }
    const char *file = wt_st_path(st);
    if (!bad) {
        bad |= bytes_differ(n_w, file, pw, w->data, w->nbytes);
        bad |= bytes_differ(n_c, file, pc, c->data, (size_t)c->numel);
        bad |= bytes_differ(n_s, file, ps, s->data, s->nbytes);
        bad |= bytes_differ(n_b, file, pb, b->data, b->nbytes);
    }
    /* unpack + dequantize with the stored (cast) scale/bias */
    if (!bad) {
        float *sf = as_f32(s), *bf = as_f32(b);
        uint8_t *uc = malloc((size_t)(rows * cols));
        wt_unpack_codes(w->data, rows * cols, bits, uc);
        bad |= bytes_differ("unpacked codes", file, uc, c->data, (size_t)c->numel);
        for (int64_t i = 0; i < rows * cols; i++) {
            int64_t g = (i / cols) * (cols / gs) + (i % cols) / gs;
            volatile float p = (float)uc[i] * sf[g];
            deq[i] = p + bf[g];
        }
        bad |= bytes_differ(n_d, file, deq, d->data, d->nbytes);
        free(sf);
        free(bf);
        free(uc);
    }
    free(x);
    free(pw);
    free(ps);
    free(pb);
    free(pc);
    free(deq);
    return bad;
}

static void test_affine_vectors_bit_exact(void)
{
    static const int bits_list[] = {2, 3, 4, 5, 6, 8}, gs_list[] = {32, 64, 128};
    int checked = 0;
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++) {
            char rel[128], p[512];
            snprintf(rel, sizeof rel, "vectors/mlx-quant/affine_b%d_g%d.safetensors", bits_list[bi],
                     gs_list[gi]);
            test_shared_path(p, sizeof p, rel);
            if (!test_path_exists(p)) TEST_SKIP("%s absent", p);
            kiln_err err;
            wt_st *st;
            ASSERT_OK(wt_st_open(p, &st, &err));
            int b = bits_list[bi], g = gs_list[gi];
            int bad = check_pipeline(st, "f32", "input.f32", WT_F32, b, g);
            bad |= check_pipeline(st, "bf16", "bf16.input", WT_BF16, b, g);
            bad |= check_pipeline(st, "f16", "f16.input", WT_F16, b, g);
            wt_st_close(st);
            if (bad) TEST_FAIL_("%s does not match", rel);
            checked += 3;
        }
    ASSERT_EQ_I64(checked, 54);
}

static void test_edge_cases_cpu_variant(void)
{
    char p[512];
    test_shared_path(p, sizeof p, "vectors/mlx-quant/affine_edge_cases.safetensors");
    if (!test_path_exists(p)) TEST_SKIP("%s absent", p);
    kiln_err err;
    wt_st *st;
    ASSERT_OK(wt_st_open(p, &st, &err));
    int bad = check_pipeline(st, "cpu", "input", WT_F32, 4, 32);
    wt_st_close(st);
    ASSERT_TRUE(!bad);
}

static void test_worked_examples_json(void)
{
    char p[512];
    test_shared_path(p, sizeof p, "vectors/mlx-quant/worked_examples.json");
    if (!test_path_exists(p)) TEST_SKIP("%s absent", p);
    json_error_t je;
    json_t *root = json_load_file(p, 0, &je);
    ASSERT_TRUE(root != NULL);
    float v[32] = {0};
    json_t *first = json_object_get(root, "input_first8");
    for (size_t i = 0; i < 8; i++)
        v[i] = (float)json_number_value(json_array_get(first, i));
    json_t *cases = json_object_get(root, "cases");
    ASSERT_EQ_I64(json_array_size(cases), 6);
    for (size_t k = 0; k < json_array_size(cases); k++) {
        json_t *c = json_array_get(cases, k);
        int bits = (int)json_integer_value(json_object_get(c, "bits"));
        float sc, bi;
        uint8_t codes[32];
        uint32_t words[8];
        wt_affine_group(v, 32, bits, &sc, &bi, codes);
        uint32_t sbits;
        memcpy(&sbits, &sc, 4);
        ASSERT_EQ_U64(sbits, strtoul(json_string_value(json_object_get(c, "scale_hex")), NULL, 16));
        ASSERT_NEAR_F32(bi, json_number_value(json_object_get(c, "bias")), 0);
        for (int i = 0; i < 32; i++)
            ASSERT_EQ_I64(codes[i], json_integer_value(
                                        json_array_get(json_object_get(c, "codes"), (size_t)i)));
        wt_pack_codes(codes, 32, bits, words);
        json_t *pw = json_object_get(c, "packed_words");
        ASSERT_EQ_I64(json_array_size(pw), (size_t)bits);
        for (int i = 0; i < bits; i++)
            ASSERT_EQ_U64(words[i],
                          strtoul(json_string_value(json_array_get(pw, (size_t)i)), NULL, 16));
    }
    json_decref(root);
}

static void test_pack_unpack_round_trip_all_widths(void)
{
    static const int bits_list[] = {2, 3, 4, 5, 6, 8};
    uint8_t codes[256], back[256];
    uint32_t words[64];
    for (int bi = 0; bi < 6; bi++) {
        int b = bits_list[bi];
        for (int i = 0; i < 256; i++)
            codes[i] = (uint8_t)((i * 37 + 11) & ((1 << b) - 1));
        wt_pack_codes(codes, 256, b, words);
        wt_unpack_codes(words, 256, b, back);
        ASSERT_TRUE(memcmp(codes, back, 256) == 0);
    }
}

static void test_invalid_parameters_are_refused(void)
{
    kiln_err err;
    float w[64] = {0};
    uint32_t pw[64];
    float s[4], b[4];
    ASSERT_CODE(wt_quantize_affine(w, 1, 64, 7, 64, WT_F32, pw, s, b, NULL, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_TRUE(strstr(err.msg, "bits 7") != NULL);
    ASSERT_CODE(wt_quantize_affine(w, 1, 64, 4, 16, WT_F32, pw, s, b, NULL, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_CODE(wt_quantize_affine(w, 1, 48, 4, 32, WT_F32, pw, s, b, NULL, &err), KILN_E_INVALID);
    ASSERT_CODE(wt_quantize_affine(w, 1, 64, 4, 32, WT_U8, pw, s, b, NULL, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_OK(wt_quantize_affine(w, 1, 64, 4, 32, WT_F32, pw, s, b, NULL, &err));
    ASSERT_NEAR_F32(b[0], 0.0f, 0); /* all-zero group: bias 0, scale -eps */
    ASSERT_NEAR_F32(s[0], -1e-7f, 0);
}

int main(void)
{
    RUN(test_affine_vectors_bit_exact);
    RUN(test_edge_cases_cpu_variant);
    RUN(test_worked_examples_json);
    RUN(test_pack_unpack_round_trip_all_widths);
    RUN(test_invalid_parameters_are_refused);
    return TEST_DONE();
}
