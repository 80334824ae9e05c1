/*
 * test_wt_quantize.c — the safetensors writer and the snapshot quantizer:
 * files read back exactly, atomic writes, and `kiln quantize`'s engine against
 * the emulated mlx-lm checkpoints of stories260K (byte for byte).
 */
#include <sys/stat.h>

#include "test.h"
#include "util/half.h"
#include "util/kiln_err.h"
#include "util/plat.h"
#include "weights/wt_config.h"
#include "weights/wt_quantize.h"
#include "weights/wt_set.h"
#include "weights/wt_writer.h"

#define ASSERT_MSG_HAS(s)                                                                          \
    do {                                                                                           \
        if (!strstr(err.msg, (s))) TEST_FAIL_("message \"%s\" lacks \"%s\"", err.msg, (s));        \
    } while (0)

static char root[256];

static const char *tmp_path(char *buf, size_t n, const char *name)
{
    if (!root[0]) {
        snprintf(root, sizeof root, "/tmp/kiln_test_wt_q_XXXXXX");
        if (!mkdtemp(root)) exit(1);
    }
    snprintf(buf, n, "%s/%s", root, name);
    return buf;
}

/* ---------------------------------------------------------------- writer */

static kiln_code fill_iota(void *ctx, int index, void *dst, uint64_t nbytes, kiln_err *err)
{
    (void)ctx;
    for (uint64_t i = 0; i < nbytes; i++)
        ((uint8_t *)dst)[i] = (uint8_t)(index * 10 + i);
    return KILN_OK;
}

static void test_writer_round_trips(void)
{
    kiln_err err;
    char p[512];
    tmp_path(p, sizeof p, "w.safetensors");
    float f[6] = {1, 2, 3, 4, 5, 6};
    wt_write_tensor t[] = {
        {.name = "z.f", .dtype = WT_F32, .ndim = 2, .shape = {2, 3}, .data = f},
        {.name = "a.fill", .dtype = WT_U8, .ndim = 1, .shape = {5}, .data = NULL},
        {.name = "m.empty", .dtype = WT_BF16, .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "s.scalar", .dtype = WT_I32, .ndim = 0, .data = f},
    };
    const char *meta[] = {"format", "mlx", "note", "x"};
    ASSERT_OK(wt_write_safetensors(p, t, 4, meta, 2, fill_iota, NULL, &err));
    wt_st *st;
    ASSERT_OK(wt_st_open(p, &st, &err));
    ASSERT_EQ_I64(wt_st_count(st), 4);
    ASSERT_STR_EQ(wt_st_meta(st, "format"), "mlx");
    ASSERT_STR_EQ(wt_st_meta(st, "note"), "x");
    const wt_tensor *z = wt_st_find(st, "z.f");
    ASSERT_EQ_I64(z->shape[1], 3);
    ASSERT_TRUE(memcmp(z->data, f, sizeof f) == 0);
    const wt_tensor *a = wt_st_find(st, "a.fill");
    ASSERT_EQ_I64(((const uint8_t *)a->data)[4], 14); /* index 1 in the caller's array */
    ASSERT_EQ_I64(wt_st_find(st, "s.scalar")->numel, 1);
    ASSERT_EQ_I64(wt_st_find(st, "m.empty")->nbytes, 0);
    wt_st_close(st);
    FILE *fp = fopen(p, "rb");
    uint8_t len8[8];
    ASSERT_TRUE(fread(len8, 1, 8, fp) == 8);
    fclose(fp);
    ASSERT_EQ_I64(len8[0] % 8, 0); /* header padded: the data section starts 8-aligned */
    /* no temp file left behind */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", p, (long)getpid());
    ASSERT_TRUE(!test_path_exists(tmp));
}

static void test_writer_refuses_bad_input_and_leaves_no_file(void)
{
    kiln_err err;
    char p[512];
    tmp_path(p, sizeof p, "bad.safetensors");
    float f[2] = {0};
    wt_write_tensor dup[] = {{.name = "a", .dtype = WT_F32, .ndim = 1, .shape = {1}, .data = f},
                             {.name = "a", .dtype = WT_F32, .ndim = 1, .shape = {1}, .data = f}};
    ASSERT_CODE(wt_write_safetensors(p, dup, 2, NULL, 0, NULL, NULL, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("bad.safetensors: tensor 'a' given twice");
    wt_write_tensor neg[] = {{.name = "a", .dtype = WT_F32, .ndim = 1, .shape = {-1}, .data = f}};
    ASSERT_CODE(wt_write_safetensors(p, neg, 1, NULL, 0, NULL, NULL, &err), KILN_E_INVALID);
    wt_write_tensor nodata[] = {{.name = "a", .dtype = WT_F32, .ndim = 1, .shape = {2}}};
    ASSERT_CODE(wt_write_safetensors(p, nodata, 1, NULL, 0, NULL, NULL, &err), KILN_E_INVALID);
    ASSERT_TRUE(!test_path_exists(p));
    ASSERT_CODE(
        wt_write_safetensors("/nonexistent/kiln/x.safetensors", dup, 1, NULL, 0, NULL, NULL, &err),
        KILN_E_IO);
    ASSERT_MSG_HAS("/nonexistent/kiln/x.safetensors");
    ASSERT_CODE(wt_write_file_atomic("/nonexistent/kiln/x.json", "{}", 2, &err), KILN_E_IO);
}

/* ------------------------------------------------------ snapshot quantizer */

/* Every tensor of `want` is in `got` with the same dtype, shape and bytes. */
static int same_tensors(const char *got_dir, const char *want_file)
{
    kiln_err err;
    wt_set *ws;
    wt_st *want;
    if (wt_set_open(got_dir, &ws, &err) != KILN_OK) {
        fprintf(stderr, "  %s\n", err.msg);
        return 0;
    }
    if (wt_st_open(want_file, &want, &err) != KILN_OK) {
        fprintf(stderr, "  %s\n", err.msg);
        wt_set_close(ws);
        return 0;
    }
    int ok = wt_set_count(ws) == wt_st_count(want);
    if (!ok) fprintf(stderr, "  %d tensors, want %d\n", wt_set_count(ws), wt_st_count(want));
    for (int i = 0; ok && i < wt_st_count(want); i++) {
        const wt_tensor *w = wt_st_at(want, i), *g = wt_set_find(ws, w->name);
        ok = g && g->dtype == w->dtype && g->ndim == w->ndim && g->nbytes == w->nbytes &&
             memcmp(g->shape, w->shape, sizeof g->shape[0] * (size_t)g->ndim) == 0 &&
             memcmp(g->data, w->data, (size_t)w->nbytes) == 0;
        if (!ok) fprintf(stderr, "  tensor %s differs\n", w->name);
    }
    wt_st_close(want);
    wt_set_close(ws);
    return ok;
}

static int files_equal(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx, ny;
    kiln_err err;
    int eq = plat_read_file(a, 1 << 26, &x, &nx, &err) == KILN_OK &&
             plat_read_file(b, 1 << 26, &y, &ny, &err) == KILN_OK && nx == ny &&
             memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return eq;
}

static void test_stories260k_bf16_4bit_matches_emulated_mlx_lm(void)
{
    char in[512], ref[512], out[512], a[700], b[700];
    test_shared_path(in, sizeof in, "models/stories260K");
    test_shared_path(ref, sizeof ref, "vectors/mlx-quant/emulated/stories260K-mlx-bf16-4bit");
    if (!test_path_exists(in) || !test_path_exists(ref)) TEST_SKIP("fixtures absent");
    kiln_err err;
    tmp_path(out, sizeof out, "bf16-4bit");
    wt_quant_opts o = {.bits = 4, .group_size = 64, .dtype = WT_BF16, .dtype_set = true};
    ASSERT_OK(wt_quantize_snapshot_ex(in, out, &o, &err));
    snprintf(a, sizeof a, "%s/model.safetensors", ref);
    ASSERT_TRUE(same_tensors(out, a));
    snprintf(b, sizeof b, "%s/model.safetensors", out);
    ASSERT_TRUE(files_equal(a, b)); /* header included: byte for byte */
    snprintf(a, sizeof a, "%s/tokenizer.json", in);
    snprintf(b, sizeof b, "%s/tokenizer.json", out);
    ASSERT_TRUE(files_equal(a, b));
    snprintf(b, sizeof b, "%s/generation_config.json", out);
    ASSERT_TRUE(test_path_exists(b));
    wt_config c;
    ASSERT_OK(wt_config_load(out, &c, &err));
    ASSERT_EQ_I64(c.quant.mode, WT_QMODE_AFFINE);
    ASSERT_EQ_I64(c.quant.bits, 4);
    ASSERT_EQ_I64(c.quant.group_size, 64);
    ASSERT_EQ_I64(c.n_qover, 0);
    wt_config_free(&c);
    /* index metadata as mlx-lm counts it */
    snprintf(b, sizeof b, "%s/model.safetensors.index.json", out);
    char *text;
    size_t len;
    ASSERT_OK(plat_read_file(b, 1 << 20, &text, &len, &err));
    ASSERT_TRUE(strstr(text, "\"total_size\": 226400") != NULL);
    ASSERT_TRUE(strstr(text, "\"total_parameters\": 260032") != NULL);
    free(text);
    /* quantizing a quantized snapshot is refused */
    tmp_path(a, sizeof a, "again");
    ASSERT_CODE(wt_quantize_snapshot(out, a, 4, 64, &err), KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("already quantized");
}

static void test_stories260k_mixed_3_6_matches_emulated_mlx_lm(void)
{
    char in[512], ref[512], out[512], a[700];
    test_shared_path(in, sizeof in, "models/stories260K");
    test_shared_path(ref, sizeof ref,
                     "vectors/mlx-quant/emulated/stories260K-mlx-f16-mixed_3_6-g32");
    if (!test_path_exists(in) || !test_path_exists(ref)) TEST_SKIP("fixtures absent");
    kiln_err err;
    tmp_path(out, sizeof out, "mixed");
    wt_quant_opts o = {.group_size = 32, .dtype = WT_F16, .dtype_set = true, .recipe = "mixed_3_6"};
    ASSERT_OK(wt_quantize_snapshot_ex(in, out, &o, &err));
    snprintf(a, sizeof a, "%s/model.safetensors", ref);
    ASSERT_TRUE(same_tensors(out, a));
    wt_config c, r;
    ASSERT_OK(wt_config_load(out, &c, &err));
    ASSERT_OK(wt_config_load(ref, &r, &err));
    ASSERT_EQ_I64(c.quant.bits, r.quant.bits);
    ASSERT_EQ_I64(c.quant.group_size, r.quant.group_size);
    ASSERT_EQ_I64(c.n_qover, r.n_qover);
    for (int i = 0; i < r.n_qover && i < c.n_qover; i++) {
        ASSERT_STR_EQ(c.qover[i].path, r.qover[i].path);
        ASSERT_EQ_I64(c.qover[i].spec.bits, r.qover[i].spec.bits);
    }
    wt_qspec q = wt_config_quant_for(&c, "model.layers.2.self_attn.v_proj", true);
    ASSERT_EQ_I64(q.bits, 6);
    wt_config_free(&c);
    wt_config_free(&r);
}

/* Default dtype (config's torch_dtype = float32): F32 scales; every weight
 * dequantizes to within |scale| + 1e-6 of the original (MLX's own bound). */
static void test_default_quantization_reloads_and_dequantizes_close(void)
{
    char in[512], out[512];
    test_shared_path(in, sizeof in, "models/stories260K");
    if (!test_path_exists(in)) TEST_SKIP("fixture absent");
    static const int cases[][2] = {{4, 32}, {4, 64}, {8, 32}, {8, 64}};
    for (size_t k = 0; k < 4; k++) {
        kiln_err err;
        char name[64];
        snprintf(name, sizeof name, "q%d_g%d", cases[k][0], cases[k][1]);
        tmp_path(out, sizeof out, name);
        int bits = cases[k][0], gs = cases[k][1];
        ASSERT_OK(wt_quantize_snapshot(in, out, bits, gs, &err));
        wt_set *src, *q;
        ASSERT_OK(wt_set_open(in, &src, &err));
        ASSERT_OK(wt_set_open(out, &q, &err));
        ASSERT_TRUE(wt_set_find(q, "model.layers.0.mlp.down_proj.scales") == NULL); /* 172 */
        ASSERT_EQ_I64(wt_set_find(q, "model.layers.0.mlp.down_proj.weight")->dtype, WT_F32);
        ASSERT_EQ_I64(wt_set_find(q, "model.norm.weight")->dtype, WT_F32);
        ASSERT_TRUE(wt_set_find(q, "lm_head.weight") == NULL);
        const char *mods[] = {"model.embed_tokens", "model.layers.3.self_attn.q_proj",
                              "model.layers.4.mlp.up_proj"};
        for (int m = 0; m < 3; m++) {
            char nw[128], ns[128], nb[128];
            snprintf(nw, sizeof nw, "%s.weight", mods[m]);
            snprintf(ns, sizeof ns, "%s.scales", mods[m]);
            snprintf(nb, sizeof nb, "%s.biases", mods[m]);
            const wt_tensor *orig = wt_set_find(src, nw), *w = wt_set_find(q, nw),
                            *s = wt_set_find(q, ns), *b = wt_set_find(q, nb);
            ASSERT_TRUE(orig && w && s && b);
            ASSERT_EQ_I64(w->dtype, WT_U32);
            ASSERT_EQ_I64(s->dtype, WT_F32);
            int64_t rows = orig->shape[0], cols = orig->shape[1];
            ASSERT_EQ_I64(w->shape[1], cols * bits / 32);
            ASSERT_EQ_I64(s->shape[1], cols / gs);
            uint8_t *codes = malloc((size_t)cols);
            const float *of = orig->data, *sf = s->data, *bf = b->data;
            const uint32_t *pw = w->data;
            double worst = 0;
            for (int64_t r = 0; r < rows; r++) {
                wt_unpack_codes(pw + r * cols * bits / 32, cols, bits, codes);
                for (int64_t i = 0; i < cols; i++) {
                    float sc = sf[r * (cols / gs) + i / gs], bi = bf[r * (cols / gs) + i / gs];
                    double e =
                        fabs((double)(codes[i] * sc + bi) - of[r * cols + i]) - (fabs(sc) + 1e-6);
                    if (e > worst) worst = e;
                }
            }
            free(codes);
            if (worst > 0) TEST_FAIL_("%s %s: error over |scale| by %g", name, mods[m], worst);
        }
        wt_set_close(src);
        wt_set_close(q);
    }
}

static void test_snapshot_errors(void)
{
    char in[512], out[512];
    kiln_err err;
    test_shared_path(in, sizeof in, "models/stories260K");
    tmp_path(out, sizeof out, "err");
    ASSERT_CODE(wt_quantize_snapshot(in, out, 7, 64, &err), KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("7-bit");
    ASSERT_CODE(wt_quantize_snapshot(in, out, 4, 48, &err), KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("group_size 48");
    wt_quant_opts o = {.bits = 4, .group_size = 64, .recipe = "mixed_9_9"};
    ASSERT_CODE(wt_quantize_snapshot_ex(in, out, &o, &err), KILN_E_UNSUPPORTED);
    ASSERT_CODE(wt_quantize_snapshot("/nonexistent/kiln/in", out, 4, 64, &err), KILN_E_NOT_FOUND);
    ASSERT_MSG_HAS("/nonexistent/kiln/in");
    if (!test_path_exists(in)) TEST_SKIP("fixture absent");
    /* into itself: refused before anything is written (on a copy: shared is read-only) */
    char plain[512];
    tmp_path(plain, sizeof plain, "plain");
    mkdir(plain, 0700);
    static const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        char src[700], dst[700], *buf;
        size_t len;
        snprintf(src, sizeof src, "%s/%s", in, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", plain, files[i]);
        ASSERT_OK(plat_read_file(src, 1 << 26, &buf, &len, &err));
        ASSERT_OK(wt_write_file_atomic(dst, buf, len, &err));
        free(buf);
    }
    char same[600];
    snprintf(same, sizeof same, "%s/.", plain);
    ASSERT_CODE(wt_quantize_snapshot(plain, same, 4, 64, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("is the input folder");
}

static void cleanup(void)
{
    char cmd[300];
    if (!root[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
}

int main(void)
{
    RUN(test_writer_round_trips);
    RUN(test_writer_refuses_bad_input_and_leaves_no_file);
    RUN(test_stories260k_bf16_4bit_matches_emulated_mlx_lm);
    RUN(test_stories260k_mixed_3_6_matches_emulated_mlx_lm);
    RUN(test_default_quantization_reloads_and_dequantizes_close);
    RUN(test_snapshot_errors);
    cleanup();
    return TEST_DONE();
}
