/*
 * test_lora.c — LoRA adapters (src/model/mdl_lora.c) against the oracle nobody
 * here computes by hand: the adapter merged into the weights (W + s·B·A, written
 * by tools/make-test-lora as a plain f32 snapshot) run through kiln's normal path.
 *   - PEFT (rank 8, all seven targets; rsLoRA rank 16 on q/v with bf16 tensors),
 *     mlx-lm (rank 4, last layer only; on a 4-bit MLX-quantized base): every
 *     position's logits within 1e-4 of the merged model, and visibly not the base's;
 *   - two adapters stacked: within 1e-4 of both merged in;
 *   - one case against tools/ref_forward.py (float64 numpy) on the merged snapshot;
 *   - 8 sequences with 4 different adapter sets and 2 without in one step, chunked
 *     differently: each row's logits bitwise what it gets alone;
 *   - refusals: another base (shape, naming the tensor), DoRA, modules_to_save,
 *     a missing folder / tensor file, an adapter from another model in a step;
 *   - the server's adapter table: references across unload (hot load/unload).
 */
#include "test_model.h"
#include "server/srv_lora.h"

#include <sys/stat.h>

#define CTX 128

static char base[512], qbase[512], other[512];
static char peft8[512], merged_peft8[512], rs16[512], merged_rs16[512], mlx4[512], merged_mlx4[512],
    qmlx[512], merged_qmlx[512], stack2[512], merged_stack[512];

static int sh(const char *cmd)
{
    int rc = system(cmd);
    if (rc) fprintf(stderr, "failed (%d): %s\n", rc, cmd);
    return rc;
}

/* Makes (once per build folder) the base models, adapters and merged snapshots. */
static int make_fixtures(void)
{
    char root[400], cmd[4000], stamp[600];
    snprintf(root, sizeof root, "%s/test-models/lora", KILN_BINARY_DIR);
#define P(var, name) snprintf(var, sizeof var, "%s/%s", root, name)
    P(base, "base");
    P(qbase, "qbase");
    P(other, "other");
    P(peft8, "peft8");
    P(merged_peft8, "merged-peft8");
    P(rs16, "rs16");
    P(merged_rs16, "merged-rs16");
    P(mlx4, "mlx4");
    P(merged_mlx4, "merged-mlx4");
    P(qmlx, "qmlx");
    P(merged_qmlx, "merged-qmlx");
    P(stack2, "stack2");
    P(merged_stack, "merged-stack");
    P(stamp, "done-v2");
#undef P
    if (access(stamp, R_OK) == 0) return 0;
    const char *mm = "/usr/bin/python3 " KILN_SOURCE_DIR "/tools/make-test-model";
    const char *ml = "/usr/bin/python3 " KILN_SOURCE_DIR "/tools/make-test-lora";
    snprintf(cmd, sizeof cmd,
             "set -e; rm -rf '%s'; mkdir -p '%s'; cd '%s';"
             "%s --arch llama --dtype f32 --out base >/dev/null;"
             "%s --arch llama --dtype f32 --quantize-bits 4 --group-size 32 --out qbase >/dev/null;"
             "%s --arch qwen3 --dtype f32 --shape custom --ffn 160 --out other >/dev/null;"
             "%s --base base --format peft --rank 8 --alpha 16 --targets q,k,v,o,gate,up,down "
             "--out peft8 --merged merged-peft8;"
             "%s --base base --format peft --rank 16 --alpha 8 --rslora --dtype bf16 --targets q,v "
             "--seed 3 --out rs16 --merged merged-rs16;"
             "%s --base base --format mlx --rank 4 --scale 3 --layers 1 --targets "
             "q,k,v,o,gate,up,down --seed 5 --out mlx4 --merged merged-mlx4;"
             "%s --base qbase --format mlx --rank 8 --scale 2 --targets q,v,o,down --dtype f16 "
             "--seed 7 --out qmlx --merged merged-qmlx;"
             "%s --base merged-peft8 --format mlx --rank 4 --scale 1.5 --targets k,up --seed 9 "
             "--out stack2 --merged merged-stack;"
             "touch done-v2",
             root, root, root, mm, mm, mm, ml, ml, ml, ml, ml);
    return sh(cmd);
}

static const char *rt_matmul; /* NULL: the default mode */

static eng_runtime *open_rt(const char *dir, int32_t max_seqs, int threads)
{
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.matmul = rt_matmul;
    o.ctx = CTX;
    o.max_seqs = max_seqs;
    o.n_threads = threads;
    o.block_tokens = 8;
    o.max_step_tokens = 256;
    eng_runtime *rt = NULL;
    if (eng_runtime_open(dir, &o, &rt, &err) != KILN_OK) {
        fprintf(stderr, "%s: %s\n", dir, err.msg);
        return NULL;
    }
    return rt;
}

static mdl_lora *load(eng_runtime *rt, const char *dir)
{
    kiln_err err;
    mdl_lora *a = NULL;
    if (mdl_lora_load(rt->model, dir, &a, &err) != KILN_OK)
        fprintf(stderr, "%s: %s\n", dir, err.msg);
    return a;
}

/* Every position's logits of ids through rt with `set`, fed in chunks. */
static kiln_code run_seq(eng_runtime *rt, const int32_t *ids, int32_t n, int32_t chunk,
                         const mdl_lora_set *set, float *rows, kiln_err *err)
{
    eng_seq *s;
    kiln_code rc = eng_seq_create(ids, n, &s, err);
    if (rc) return rc;
    int64_t vocab = mdl_vocab(rt->model);
    while (!rc && eng_seq_pending(s) > 0) {
        eng_step_item it = {.seq = s, .max_tokens = chunk, .all_logits = 1, .lora = set};
        rc = eng_step_run(rt->cx, rt->kv, &it, 1, 0, rt->logits, rt->logit_rows, err);
        if (!rc) {
            memcpy(rows, rt->logits, sizeof(float) * (size_t)vocab * (size_t)it.n_logits);
            rows += (size_t)vocab * (size_t)it.n_logits;
        }
    }
    eng_seq_free(s, rt->kv);
    return rc;
}

static const int32_t IDS[] = {1,   45,  310, 72, 9, 200, 17, 388, 5,  61,
                              444, 130, 27,  99, 3, 250, 11, 402, 77, 190};
#define NIDS ((int32_t)(sizeof IDS / sizeof *IDS))

/* base + adapters (set built from dirs/scales) vs the merged snapshot. */
static void check_oracle(const char *base_dir, const char **dirs, const float *scales, int n,
                         const char *merged, double tol)
{
    kiln_err err;
    rt_matmul = "exact"; /* against a float snapshot: the MLX semantics */
    eng_runtime *rt = open_rt(base_dir, 1, 2), *rm = open_rt(merged, 1, 2);
    rt_matmul = NULL;
    ASSERT_TRUE(rt && rm);
    mdl_lora_set set = {.n = n};
    for (int i = 0; i < n; i++) {
        set.a[i] = load(rt, dirs[i]);
        ASSERT_TRUE(set.a[i] != NULL);
        set.scale[i] = scales[i];
    }
    int64_t V = mdl_vocab(rt->model);
    size_t cnt = (size_t)V * NIDS;
    float *got = malloc(sizeof(float) * cnt), *want = malloc(sizeof(float) * cnt),
          *plain = malloc(sizeof(float) * cnt);
    ASSERT_OK(run_seq(rt, IDS, NIDS, 7, &set, got, &err));
    ASSERT_OK(run_seq(rm, IDS, NIDS, 7, NULL, want, &err));
    ASSERT_OK(run_seq(rt, IDS, NIDS, 7, NULL, plain, &err));
    double d = tm_max_abs_diff(got, want, cnt), off = tm_max_abs_diff(plain, want, cnt);
    fprintf(stderr, "  %s: max |base+adapter - merged| %.3g (base alone is %.3g off)\n",
            merged + strlen(merged) - strlen(strrchr(merged, '/')) + 1, d, off);
    for (int i = 0; i < n; i++)
        mdl_lora_free((mdl_lora *)set.a[i]);
    free(got), free(want), free(plain);
    eng_runtime_close(rt);
    eng_runtime_close(rm);
    ASSERT_TRUE(d <= tol);
    ASSERT_TRUE(off > 1e-2); /* the adapter changes the logits: the comparison means something */
}

/* One case against float64: tools/ref_forward.py (numpy, float64) on the merged
 * PEFT snapshot vs kiln's base + adapter, every position. */
static void test_float64_reference(void)
{
    char out[600], cmd[2400], ids[256];
    snprintf(out, sizeof out, "%s/test-models/lora/ref64-peft8.f32", KILN_BINARY_DIR);
    int o = 0;
    for (int32_t i = 0; i < NIDS; i++)
        o += snprintf(ids + o, sizeof ids - (size_t)o, "%s%d", i ? "," : "", (int)IDS[i]);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 " KILN_SOURCE_DIR "/tools/ref_forward.py --model '%s' --tokens %s "
             "--out '%s' >/dev/null",
             merged_peft8, ids, out);
    ASSERT_TRUE(sh(cmd) == 0);
    kiln_err err;
    eng_runtime *rt = open_rt(base, 1, 2);
    ASSERT_TRUE(rt != NULL);
    mdl_lora_set set = {.n = 1, .a = {load(rt, peft8)}, .scale = {1}};
    ASSERT_TRUE(set.a[0] != NULL);
    int64_t V = mdl_vocab(rt->model);
    size_t cnt = (size_t)V * NIDS;
    float *got = malloc(sizeof(float) * cnt), *want = malloc(sizeof(float) * cnt);
    ASSERT_TRUE(got && want);
    ASSERT_OK(run_seq(rt, IDS, NIDS, 7, &set, got, &err));
    FILE *f = fopen(out, "rb");
    ASSERT_TRUE(f && fread(want, sizeof(float), cnt, f) == cnt);
    fclose(f);
    double d = tm_max_abs_diff(got, want, cnt);
    fprintf(stderr, "  float64 reference (ref_forward.py on merged-peft8): max |diff| %.3g\n", d);
    mdl_lora_free((mdl_lora *)set.a[0]);
    free(got), free(want);
    eng_runtime_close(rt);
    ASSERT_TRUE(d <= 1e-4);
}

static void test_peft_rank8_all_targets(void)
{
    const char *d[] = {peft8};
    const float s[] = {1.0f};
    check_oracle(base, d, s, 1, merged_peft8, 1e-4);
}

static void test_peft_rslora_rank16_bf16(void)
{
    const char *d[] = {rs16};
    const float s[] = {1.0f};
    check_oracle(base, d, s, 1, merged_rs16, 1e-4);
}

static void test_mlx_rank4_last_layer(void)
{
    const char *d[] = {mlx4};
    const float s[] = {1.0f};
    check_oracle(base, d, s, 1, merged_mlx4, 1e-4);
}

static void test_mlx_on_quantized_base(void)
{
    const char *d[] = {qmlx};
    const float s[] = {1.0f};
    check_oracle(qbase, d, s, 1, merged_qmlx, 1e-4);
}

static void test_two_adapters_stacked(void)
{
    const char *d[] = {peft8, stack2};
    const float s[] = {1.0f, 1.0f};
    check_oracle(base, d, s, 2, merged_stack, 1e-4);
}

static void test_info(void)
{
    eng_runtime *rt = open_rt(base, 1, 1);
    ASSERT_TRUE(rt != NULL);
    mdl_lora *a = load(rt, peft8), *b = load(rt, mlx4), *c = load(rt, rs16);
    ASSERT_TRUE(a && b && c);
    mdl_lora_info i = mdl_lora_get_info(a);
    ASSERT_TRUE(i.format == MDL_LORA_PEFT);
    ASSERT_EQ_I64(i.rank, 8);
    ASSERT_EQ_I64(i.n_modules, 14);
    ASSERT_EQ_I64(i.n_layers, 2);
    ASSERT_NEAR_F32(i.scale, 2.0f, 0);
    ASSERT_STR_EQ(i.targets, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
    ASSERT_STR_EQ(i.base_model, "base");
    /* per layer: q 64x64, k/v 32x64, o 64x64, gate/up 192x64, down 64x192 */
    uint64_t per = 8 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 192) + (192 + 64));
    ASSERT_EQ_U64(i.bytes, 4 * 2 * per);
    i = mdl_lora_get_info(b);
    ASSERT_TRUE(i.format == MDL_LORA_MLX);
    ASSERT_EQ_I64(i.n_modules, 7);
    ASSERT_EQ_I64(i.n_layers, 1);
    ASSERT_NEAR_F32(i.scale, 3.0f, 0);
    i = mdl_lora_get_info(c);
    ASSERT_NEAR_F32(i.scale, 2.0f, 1e-6); /* 8 / sqrt(16) */
    ASSERT_STR_EQ(i.targets, "q_proj,v_proj");
    /* namespaces: per adapter set and scale, never the base's */
    uint64_t ns = 0x1234;
    mdl_lora_set s1 = {.n = 1, .a = {a}, .scale = {1}}, s2 = {.n = 1, .a = {a}, .scale = {0.5f}},
                 s3 = {.n = 1, .a = {b}, .scale = {1}}, s4 = {.n = 2, .a = {a, b}, .scale = {1, 1}},
                 s5 = {.n = 2, .a = {b, a}, .scale = {1, 1}}, s0 = {0};
    uint64_t v[] = {ns,
                    mdl_lora_set_ns(&s1, ns),
                    mdl_lora_set_ns(&s2, ns),
                    mdl_lora_set_ns(&s3, ns),
                    mdl_lora_set_ns(&s4, ns),
                    mdl_lora_set_ns(&s5, ns)};
    for (int x = 0; x < 6; x++)
        for (int y = x + 1; y < 6; y++)
            ASSERT_TRUE(v[x] != v[y]);
    ASSERT_EQ_U64(mdl_lora_set_ns(&s0, ns), ns);
    ASSERT_EQ_U64(mdl_lora_set_ns(NULL, ns), ns);
    ASSERT_EQ_U64(mdl_lora_set_ns(&s1, 0), 0);
    ASSERT_EQ_U64(mdl_lora_set_ns(&s1, ns), mdl_lora_set_ns(&s1, ns));
    mdl_lora_free(a), mdl_lora_free(b), mdl_lora_free(c);
    eng_runtime_close(rt);
}

/* 8 sequences, 4 adapter sets (two rows each for two of them) + 2 without, one step at a time together, with
 * ragged chunks: each sequence's logits bitwise what it gets alone in one chunk. */
static void test_mixed_batch_is_bitwise_each_alone(void)
{
    kiln_err err;
    for (int threads = 1; threads <= 2; threads++) {
        eng_runtime *rt = open_rt(base, 8, threads);
        ASSERT_TRUE(rt != NULL);
        mdl_lora *a = load(rt, peft8), *b = load(rt, rs16), *c = load(rt, mlx4),
                 *d = load(rt, stack2);
        ASSERT_TRUE(a && b && c && d);
        /* sets[4] is sets[0] by value, not by pointer: rows 0 and 6 form one group
         * whose tiles (mdl_lora_plan) span sequences; rows 3 and 7 share sets[2] */
        mdl_lora_set sets[5] = {{.n = 1, .a = {a}, .scale = {1}},
                                {.n = 1, .a = {b}, .scale = {0.7f}},
                                {.n = 1, .a = {c}, .scale = {1}},
                                {.n = 2, .a = {a, d}, .scale = {1, 0.5f}},
                                {.n = 1, .a = {a}, .scale = {1}}};
        const mdl_lora_set *use[8] = {&sets[0], NULL, &sets[1], &sets[2],
                                      &sets[3], NULL, &sets[4], &sets[2]};
        int64_t V = mdl_vocab(rt->model);
        int32_t lens[8] = {20, 13, 17, 9, 20, 5, 11, 16};
        float *alone = malloc(sizeof(float) * (size_t)V * 8),
              *rows = malloc(sizeof(float) * (size_t)V * NIDS);
        for (int i = 0; i < 8; i++) {
            ASSERT_OK(run_seq(rt, IDS + (NIDS - lens[i]), lens[i], 256, use[i], rows, &err));
            memcpy(alone + (size_t)i * V, rows + (size_t)(lens[i] - 1) * V,
                   sizeof(float) * (size_t)V);
        }
        eng_seq *s[8];
        for (int i = 0; i < 8; i++)
            ASSERT_OK(eng_seq_create(IDS + (NIDS - lens[i]), lens[i], &s[i], &err));
        int done[8] = {0}, left = 8, step = 0;
        while (left > 0) {
            eng_step_item it[8];
            int idx[8], n = 0;
            for (int i = 0; i < 8; i++)
                if (!done[i])
                    it[n] = (eng_step_item){.seq = s[i],
                                            .max_tokens = 1 + (i + step) % 6,
                                            .lora = use[i]},
                    idx[n++] = i;
            ASSERT_OK(eng_step_run(rt->cx, rt->kv, it, n, 0, rt->logits, rt->logit_rows, &err));
            int64_t row = 0;
            for (int k = 0; k < n; k++) {
                if (it[k].n_logits) {
                    ASSERT_TRUE(memcmp(rt->logits + row * V, alone + (size_t)idx[k] * V,
                                       sizeof(float) * (size_t)V) == 0);
                    done[idx[k]] = 1;
                    left--;
                }
                row += it[k].n_logits;
            }
            step++;
        }
        for (int i = 0; i < 8; i++)
            eng_seq_free(s[i], rt->kv);
        /* a row without adapters is the base model's, bitwise */
        free(alone), free(rows);
        mdl_lora_free(a), mdl_lora_free(b), mdl_lora_free(c), mdl_lora_free(d);
        eng_runtime_close(rt);
    }
}

/* The server's table (srv_lora.c) with references: an adapter unloaded while a
 * request's set holds it stays usable until the set is released, and the last
 * release frees it (ASan+LSan in the sanitizer build see a use after free or a
 * leak); add/remove answer 409/404; the default adapter cannot be removed. */
static void test_server_table_references(void)
{
    eng_runtime *rt = open_rt(base, 1, 1);
    ASSERT_TRUE(rt != NULL);
    mdl_lora *a = load(rt, peft8), *b = load(rt, mlx4), *c = load(rt, rs16);
    ASSERT_TRUE(a && b && c);
    kiln_err err;
    srv_lora_table t;
    srv_adapter ads[2] = {{.name = "a", .lora = a}, {.name = "b", .lora = b}};
    ASSERT_OK(srv_lora_table_init(&t, ads, 2, 1, &err));
    mdl_lora_free(a); /* the table holds its own references now */
    mdl_lora_free(b);
    srv_error e;
    ASSERT_TRUE(srv_lora_add(&t, "c", c, &e) == 0);
    mdl_lora *c2 = load(rt, rs16);
    ASSERT_TRUE(srv_lora_add(&t, "a", c2, &e) == -1 && srv_error_status(e.kind) == 409);
    mdl_lora_set set;
    char *names[1] = {"c"};
    float sc[1] = {0.5f};
    ASSERT_TRUE(srv_lora_resolve(&t, "base", NULL, names, sc, 1, &set, NULL, &e) == 0);
    ASSERT_TRUE(set.n == 1 && set.a[0] == c);
    ASSERT_TRUE(srv_lora_remove(&t, "c", &e) == 0);
    ASSERT_TRUE(!srv_lora_has(&t, "c"));
    ASSERT_TRUE(srv_lora_resolve(&t, "base", NULL, names, sc, 1, &(mdl_lora_set){0}, NULL, &e) ==
                    -1 &&
                srv_error_status(e.kind) == 404);
    /* the set still holds c: it is whole (its info and namespace are readable) */
    ASSERT_TRUE(mdl_lora_get_info(set.a[0]).rank == 16 && mdl_lora_set_ns(&set, 7) != 7);
    mdl_lora_set_release(&set); /* the last reference: c is freed here */
    ASSERT_TRUE(srv_lora_remove(&t, "b", &e) == -1 && srv_error_status(e.kind) == 409); /* default */
    ASSERT_TRUE(srv_lora_remove(&t, "zz", &e) == -1 && srv_error_status(e.kind) == 404);
    /* no model field: the default adapter, retained */
    ASSERT_TRUE(srv_lora_resolve(&t, "base", NULL, NULL, NULL, -1, &set, NULL, &e) == 0);
    ASSERT_TRUE(set.n == 1 && set.a[0] == b);
    srv_lora_table_free(&t); /* b lives on in set */
    ASSERT_TRUE(mdl_lora_get_info(set.a[0]).rank == 4);
    mdl_lora_set_release(&set);
    eng_runtime_close(rt);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void test_refusals(void)
{
    kiln_err err;
    char dir[700], path[800], cmd[2000];
    eng_runtime *rt = open_rt(base, 1, 1), *ro = open_rt(other, 1, 1);
    ASSERT_TRUE(rt && ro);
    mdl_lora *a = NULL;
    /* another base model: the first tensor whose shape does not fit is named */
    ASSERT_CODE(mdl_lora_load(ro->model, peft8, &a, &err), KILN_E_CORRUPT);
    fprintf(stderr, "  other base: %s\n", err.msg);
    ASSERT_TRUE(strstr(err.msg, "base_model.model.model.layers.") &&
                strstr(err.msg, "another base"));
    ASSERT_CODE(mdl_lora_load(ro->model, mlx4, &a, &err), KILN_E_CORRUPT);
    ASSERT_TRUE(strstr(err.msg, ".lora_a'") != NULL);
    /* missing folder, missing tensor file */
    snprintf(dir, sizeof dir, "%s/test-models/lora/nope", KILN_BINARY_DIR);
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_NOT_FOUND);
    snprintf(dir, sizeof dir, "%s/test-models/lora/bad", KILN_BINARY_DIR);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s/adapter_config.json' '%s/'",
             dir, dir, peft8, dir);
    ASSERT_TRUE(sh(cmd) == 0);
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_NOT_FOUND);
    ASSERT_TRUE(strstr(err.msg, "adapter_model.safetensors") != NULL);
    snprintf(cmd, sizeof cmd, "ln -s '%s/adapter_model.safetensors' '%s/'", peft8, dir);
    ASSERT_TRUE(sh(cmd) == 0);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    /* DoRA, modules_to_save, another PEFT method, mlx dora */
    write_file(path, "{\"peft_type\":\"LORA\",\"r\":8,\"lora_alpha\":16,\"use_dora\":true}");
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_UNSUPPORTED);
    ASSERT_TRUE(strstr(err.msg, "DoRA") != NULL);
    write_file(path, "{\"peft_type\":\"LORA\",\"r\":8,\"lora_alpha\":16,"
                     "\"modules_to_save\":[\"lm_head\"]}");
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_UNSUPPORTED);
    ASSERT_TRUE(strstr(err.msg, "modules_to_save") != NULL);
    write_file(path, "{\"peft_type\":\"IA3\",\"r\":8}");
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_UNSUPPORTED);
    write_file(path, "{\"fine_tune_type\":\"dora\",\"num_layers\":2,"
                     "\"lora_parameters\":{\"rank\":8,\"scale\":2}}");
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_UNSUPPORTED);
    ASSERT_TRUE(strstr(err.msg, "dora") != NULL);
    write_file(path, "{\"peft_type\":\"LORA\",\"r\":\"eight\"}");
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_INVALID);
    write_file(path, "not json");
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_INVALID);
    /* the PEFT config over mlx tensors: not LoRA A/B of the PEFT layout */
    snprintf(cmd, sizeof cmd,
             "rm '%s/adapter_model.safetensors' && ln -s '%s/adapters.safetensors' "
             "'%s/adapter_model.safetensors'",
             dir, mlx4, dir);
    ASSERT_TRUE(sh(cmd) == 0);
    write_file(path, "{\"peft_type\":\"LORA\",\"r\":4,\"lora_alpha\":8}");
    ASSERT_CODE(mdl_lora_load(rt->model, dir, &a, &err), KILN_E_UNSUPPORTED);
    ASSERT_TRUE(strstr(err.msg, "lora_a") != NULL);
    /* an adapter loaded for one model is refused in another model's step */
    mdl_lora *pa = load(rt, peft8);
    ASSERT_TRUE(pa != NULL);
    mdl_lora_set set = {.n = 1, .a = {pa}, .scale = {1}};
    eng_seq *s;
    ASSERT_OK(eng_seq_create(IDS, 4, &s, &err));
    eng_step_item it = {.seq = s, .max_tokens = 4, .lora = &set};
    ASSERT_CODE(eng_step_run(ro->cx, ro->kv, &it, 1, 0, ro->logits, ro->logit_rows, &err),
                KILN_E_INVALID);
    eng_seq_free(s, ro->kv);
    mdl_lora_free(pa);
    eng_runtime_close(rt);
    eng_runtime_close(ro);
}

int main(void)
{
    if (make_fixtures()) {
        fprintf(stderr, "cannot make the LoRA fixtures (tools/make-test-model, make-test-lora)\n");
        return 1;
    }
    RUN(test_peft_rank8_all_targets);
    RUN(test_float64_reference);
    RUN(test_peft_rslora_rank16_bf16);
    RUN(test_mlx_rank4_last_layer);
    RUN(test_mlx_on_quantized_base);
    RUN(test_two_adapters_stacked);
    RUN(test_info);
    RUN(test_mixed_batch_is_bitwise_each_alone);
    RUN(test_refusals);
    RUN(test_server_table_references);
    return TEST_DONE();
}
