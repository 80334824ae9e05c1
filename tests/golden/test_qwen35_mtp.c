/*
 * test_qwen35_mtp.c — the Qwen3.5 multi-token-prediction head (mtp.*,
 * docs/hybrid.md, MTP) loaded by mdl_load_mtp, against the float64 reference
 * (tools/ref_forward.py --mtp) on a synthetic HF-layout Qwen3.5 whose head
 * tools/make-test-model writes: the target's final-normed hidden states come
 * from the hidden-state tap, the head runs at positions 0 .. n-2 on
 * (hidden at p, token p + 1) with its own paged K/V, and its logits at every
 * position are within 1e-3 of the reference — portable and AVX2 kernels;
 * bitwise the same in one step, in uneven chunks and beside another
 * sequence; the same with the snapshot 4-bit quantized by kiln quantize
 * (wt_quantize_snapshot keeps mtp.*, affine-quantizing the head's linears),
 * against the reference run on the quantized files. A snapshot without a
 * head (mlx layout) and other architectures are refused with their codes; a
 * step without hidden rows is refused. The drafter (eng_mtp.c) fed the same
 * hidden rows in two uneven feeds drafts first the head's own argmax at the
 * last position (the logits above), keeps only verified positions after
 * drafting, drafts the same again, and starts over after a gap.
 */
#include "engine/eng_mtp.h"
#include "test_model.h"
#include "weights/wt_quantize.h"

#define N 24
#define BT 8

static char dir_hf[512], dir_mlx[512], dir_llama[512], dir_q4[512];

static const int32_t IDS[N] = {3,  9,   14, 5,   11,  7,   300, 42, 17, 256, 99, 12,
                               64, 128, 5,  400, 401, 402, 7,   7,  7,  33,  21, 8};

/* The head with its own pool and step context, on the target's threads. */
typedef struct {
    mdl_model *m;
    kv_pool *kv;
    mdl_ctx *cx;
    kv_format fmt;
} head;

static kiln_code head_open(const char *dir, kn_pool *pool, head *h, kiln_err *err)
{
    memset(h, 0, sizeof *h);
    kiln_code rc = mdl_load_mtp(dir, &h->m, err);
    if (rc) return rc;
    kv_layout l;
    if ((rc = mdl_kv_layout(mdl_get_plan(h->m), 0, &l, err))) return rc;
    if ((rc = kv_format_init_dims(&h->fmt, KV_QUANT_OFF, 0, 0, l.n_layers, l.head_dim, err)))
        return rc;
    kv_pool_config kc = {.n_blocks = 32, .block_tokens = BT, .fmt = &h->fmt, .max_chunk = 64,
                         .layout = &l};
    if ((rc = kv_pool_create(&kc, &h->kv, err))) return rc;
    return mdl_ctx_create(h->m, pool, 64, 2, 128, &h->cx, err);
}

static void head_close(head *h)
{
    mdl_ctx_free(h->cx);
    kv_pool_destroy(h->kv);
    mdl_free(h->m);
}

/* The target's final-normed hidden states of IDS[0 .. N-1) ([N-1, H]). */
static float *target_hidden(eng_runtime *rt, kiln_err *err)
{
    int64_t H = mdl_config(rt->model)->hidden;
    float *rows = calloc((size_t)(N * H), sizeof *rows);
    eng_seq *s;
    if (!rows || eng_seq_create(IDS, N - 1, &s, err)) {
        free(rows);
        return NULL;
    }
    eng_step_item it = {.seq = s, .max_tokens = N - 1};
    mdl_ctx_set_hidden_out(rt->cx, rows, N);
    kiln_code rc = eng_step_run(rt->cx, rt->kv, &it, 1, 0, rt->logits, rt->logit_rows, err);
    mdl_ctx_set_hidden_out(rt->cx, NULL, 0);
    eng_seq_free(s, rt->kv);
    if (rc) {
        free(rows);
        return NULL;
    }
    return rows;
}

/* Runs the head over positions 0 .. N-2 of `copies` sequences in chunks
 * (chunks[] ends with 0; each sequence the same), logits of sequence 0 into
 * out [N-1, vocab]. */
static kiln_code head_run(head *h, const float *hidden, const int32_t *chunks, int copies,
                          float *out, kiln_err *err)
{
    int64_t H = mdl_get_plan(h->m)->hidden, V = mdl_vocab(h->m);
    eng_seq *s[2] = {NULL, NULL};
    kiln_code rc = KILN_OK;
    for (int c = 0; c < copies && !rc; c++)
        rc = eng_seq_create(IDS + 1, N - 1, &s[c], err);
    float *lg = malloc(sizeof(float) * (size_t)(2 * 64) * (size_t)V);
    if (!lg) rc = kiln_fail(err, KILN_E_NOMEM, "test: out of memory");
    int32_t at = 0;
    for (int k = 0; !rc && at < N - 1; k++) {
        int32_t n = chunks[k] ? chunks[k] : N - 1 - at;
        if (n > N - 1 - at) n = N - 1 - at;
        mdl_seq sq[2];
        for (int c = 0; c < copies && !rc; c++) {
            rc = eng_seq_reserve(s[c], h->kv, at + n, err);
            sq[c] = (mdl_seq){.tokens = IDS + 1 + at, .n_tokens = n, .pos0 = at, .n_logits = n,
                              .state = -1, .hidden_in = hidden + at * H};
            sq[c].blocks[0] = s[c]->blocks[0];
        }
        if (!rc) rc = mdl_forward(h->cx, h->kv, sq, copies, lg, err);
        if (!rc) memcpy(out + at * V, lg, sizeof(float) * (size_t)(n * V));
        at += n;
    }
    for (int c = 0; c < copies; c++)
        eng_seq_free(s[c], h->kv);
    free(lg);
    return rc;
}

static void check_against_reference(const char *dir, const char *isa)
{
    const char *dir_hf = dir; /* the snapshot under test */
    kiln_err err;
    /* exact: 4-bit is compared with float64 at 1e-3 (the MLX semantics) */
    eng_runtime *rt = tm_open_mode(dir_hf, 128, 2, 2, isa, "exact", &err);
    if (!rt) TEST_FAIL_("%s", err.msg);
    float *hidden = target_hidden(rt, &err);
    if (!hidden) TEST_FAIL_("%s", err.msg);
    head h;
    if (head_open(dir_hf, rt->pool, &h, &err)) TEST_FAIL_("%s", err.msg);
    ASSERT_TRUE(mdl_is_mtp(h.m));
    ASSERT_TRUE(!mdl_is_mtp(rt->model));
    int64_t V = mdl_vocab(h.m);
    size_t nf = (size_t)(N - 1) * (size_t)V;
    float *whole = malloc(sizeof(float) * nf), *other = malloc(sizeof(float) * nf);
    static const int32_t one[] = {0}, uneven[] = {5, 1, 11, 0};
    ASSERT_OK(head_run(&h, hidden, one, 1, whole, &err));
    ASSERT_OK(head_run(&h, hidden, uneven, 1, other, &err));
    ASSERT_TRUE(memcmp(whole, other, sizeof(float) * nf) == 0);
    ASSERT_OK(head_run(&h, hidden, uneven, 2, other, &err)); /* beside a second sequence */
    ASSERT_TRUE(memcmp(whole, other, sizeof(float) * nf) == 0);
    /* the float64 reference: target and head in double precision */
    char ref[700], ids[400], cmd[2000];
    snprintf(ref, sizeof ref, "%s/test-models/golden-mtp-ref-%d.f32", KILN_BINARY_DIR, (int)getpid());
    size_t o = 0;
    for (int i = 0; i < N; i++)
        o += (size_t)snprintf(ids + o, sizeof ids - o, "%s%d", i ? "," : "", (int)IDS[i]);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '%s/tools/ref_forward.py' --model '%s' --tokens %s --mtp --out '%s'",
             KILN_SOURCE_DIR, dir_hf, ids, ref);
    ASSERT_EQ_I64(system(cmd), 0);
    FILE *f = fopen(ref, "rb");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ_I64((int64_t)fread(other, sizeof(float), nf, f), (int64_t)nf);
    fclose(f);
    remove(ref);
    double worst = 0;
    int same_argmax = 1;
    for (int64_t p = 0; p < N - 1; p++) {
        int64_t a = 0, b = 0;
        for (int64_t v = 0; v < V; v++) {
            double d = fabs((double)whole[p * V + v] - (double)other[p * V + v]);
            if (d > worst) worst = d;
            if (whole[p * V + v] > whole[p * V + a]) a = v;
            if (other[p * V + v] > other[p * V + b]) b = v;
        }
        same_argmax &= a == b;
    }
    fprintf(stderr, "  %s: MTP logits vs float64, every position: max |diff| %.3g\n",
            isa ? isa : "auto", worst);
    ASSERT_TRUE(worst < 1e-3);
    ASSERT_TRUE(same_argmax);
    /* a step without the target's hidden rows is refused */
    eng_seq *s;
    ASSERT_OK(eng_seq_create(IDS + 1, 4, &s, &err));
    ASSERT_OK(eng_seq_reserve(s, h.kv, 4, &err));
    mdl_seq bad = {.tokens = IDS + 1, .n_tokens = 4, .n_logits = 1, .state = -1};
    bad.blocks[0] = s->blocks[0];
    ASSERT_CODE(mdl_forward(h.cx, h.kv, &bad, 1, whole, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "hidden") != NULL);
    eng_seq_free(s, h.kv);
    ASSERT_EQ_I64(kv_pool_get_stats(h.kv).n_active, 0);
    free(whole);
    free(other);
    free(hidden);
    head_close(&h);
    eng_runtime_close(rt);
}

static void test_head_matches_float64_ref_kernels(void)
{
    check_against_reference(dir_hf, "ref");
}

static void test_head_matches_float64_avx2(void)
{
    check_against_reference(dir_hf, NULL);
}

/* kiln quantize keeps the head (its linears 4-bit g32): it loads, and its
 * logits match the reference computed from the same quantized files. */
static void test_quantized_head_matches_float64(void)
{
    kiln_err err;
    snprintf(dir_q4, sizeof dir_q4, "%s/test-models/golden-mtp-q4", KILN_BINARY_DIR);
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir_q4);
    if (access(cfg, R_OK) != 0) ASSERT_OK(wt_quantize_snapshot(dir_hf, dir_q4, 4, 32, &err));
    mdl_model *m = NULL;
    ASSERT_OK(mdl_load_mtp(dir_q4, &m, &err));
    ASSERT_TRUE(strstr(mdl_get_info(m).quant_desc, "4-bit") != NULL);
    mdl_free(m);
    check_against_reference(dir_q4, NULL);
}

static int32_t argmax_row(const float *r, int64_t n)
{
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (r[i] > r[b]) b = (int32_t)i;
    return b;
}

static void test_drafter_follows_the_head(void)
{
    kiln_err err;
    eng_runtime *rt = tm_open(dir_hf, 128, 2, 2, NULL, &err);
    if (!rt) TEST_FAIL_("%s", err.msg);
    float *hidden = target_hidden(rt, &err);
    if (!hidden) TEST_FAIL_("%s", err.msg);
    head h;
    if (head_open(dir_hf, rt->pool, &h, &err)) TEST_FAIL_("%s", err.msg);
    int64_t V = mdl_vocab(h.m), H = mdl_get_plan(h.m)->hidden;
    float *whole = malloc(sizeof(float) * (size_t)(N - 1) * (size_t)V);
    static const int32_t one[] = {0};
    ASSERT_OK(head_run(&h, hidden, one, 1, whole, &err));
    int32_t want = argmax_row(whole + (size_t)(N - 2) * (size_t)V, V);
    eng_mtp *m;
    ASSERT_OK(eng_mtp_open(dir_hf, rt, &m, &err));
    eng_mtp_row row;
    memset(&row, 0, sizeof row);
    eng_mtp_feed_job jobs[1] = {{.row = &row, .toks = IDS, .n_toks = N, .p0 = 0, .n = 9,
                                 .hidden = hidden}};
    ASSERT_OK(eng_mtp_feed(m, jobs, 1, &err));
    ASSERT_EQ_I64(row.next, 9);
    ASSERT_EQ_I64(row.d1, argmax_row(whole + (size_t)8 * (size_t)V, V));
    jobs[0] = (eng_mtp_feed_job){.row = &row, .toks = IDS, .n_toks = N, .p0 = 9, .n = N - 1 - 9,
                                 .hidden = hidden + 9 * H};
    ASSERT_OK(eng_mtp_feed(m, jobs, 1, &err));
    ASSERT_EQ_I64(row.next, N - 1);
    ASSERT_EQ_I64(row.d1, want); /* fed in two pieces: the head's own prediction */
    int32_t d1 = row.d1;
    eng_mtp_row *rows[1] = {&row};
    int32_t at[1] = {N - 1}, k[1] = {3}, out[ENG_SEQ_MAX_DRAFT], out2[ENG_SEQ_MAX_DRAFT], n_out[1];
    ASSERT_OK(eng_mtp_draft(m, rows, at, k, out, n_out, 1, &err));
    ASSERT_EQ_I64(n_out[0], 3);
    ASSERT_EQ_I64(out[0], d1);
    ASSERT_EQ_I64(row.seq->n_tokens, N - 1); /* only verified positions stay */
    ASSERT_EQ_I64(row.seq->n_cached, N - 1);
    at[0] = N; /* the head is not where the target is: no draft */
    row.d1 = d1;
    ASSERT_OK(eng_mtp_draft(m, rows, at, k, out2, n_out, 1, &err));
    ASSERT_EQ_I64(n_out[0], 0);
    /* the same feed again from scratch drafts the same tokens */
    eng_mtp_row_free(m, &row);
    jobs[0] = (eng_mtp_feed_job){.row = &row, .toks = IDS, .n_toks = N, .p0 = 0, .n = N - 1,
                                 .hidden = hidden};
    ASSERT_OK(eng_mtp_feed(m, jobs, 1, &err));
    at[0] = N - 1;
    ASSERT_OK(eng_mtp_draft(m, rows, at, k, out2, n_out, 1, &err));
    ASSERT_EQ_I64(n_out[0], 3);
    ASSERT_TRUE(memcmp(out, out2, 3 * sizeof(int32_t)) == 0);
    /* a gap (positions the head has no hidden state for): it starts over there */
    jobs[0] = (eng_mtp_feed_job){.row = &row, .toks = IDS, .n_toks = N, .p0 = 20, .n = 2,
                                 .hidden = hidden + 20 * H};
    ASSERT_OK(eng_mtp_feed(m, jobs, 1, &err));
    ASSERT_EQ_I64(eng_mtp_get_info(m).restarts, 1);
    ASSERT_EQ_I64(row.start, 20);
    ASSERT_EQ_I64(row.next, 22);
    eng_mtp_row_free(m, &row);
    eng_mtp_close(m);
    free(whole);
    free(hidden);
    head_close(&h);
    eng_runtime_close(rt);
}

static void test_snapshots_without_a_head_are_refused(void)
{
    kiln_err err;
    mdl_model *m = NULL;
    ASSERT_CODE(mdl_load_mtp(dir_mlx, &m, &err), KILN_E_NOT_FOUND); /* mlx-lm drops mtp.* */
    ASSERT_TRUE(strstr(err.msg, "mtp") != NULL && m == NULL);
    ASSERT_CODE(mdl_load_mtp(dir_llama, &m, &err), KILN_E_UNSUPPORTED);
    ASSERT_TRUE(m == NULL);
}

int main(void)
{
    if (tm_make_model(dir_hf, sizeof dir_hf, "golden-mtp-hf", "--arch qwen3_5 --dtype f32") ||
        tm_make_model(dir_mlx, sizeof dir_mlx, "golden-mtp-mlx", "--arch qwen3_5 --dtype f32 --layout mlx") ||
        tm_make_model(dir_llama, sizeof dir_llama, "golden-mtp-llama", "--arch llama --dtype f32")) {
        fprintf(stderr, "cannot make the test models (tools/make-test-model, python3-numpy)\n");
        return 1;
    }
    RUN(test_head_matches_float64_ref_kernels);
    RUN(test_head_matches_float64_avx2);
    RUN(test_quantized_head_matches_float64);
    RUN(test_drafter_follows_the_head);
    RUN(test_snapshots_without_a_head_are_refused);
    return TEST_DONE();
}
