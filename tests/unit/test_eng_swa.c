/*
 * test_eng_swa.c — sliding-window models give KV blocks back (docs/kv.md,
 * Sliding-window layers): on small synthetic Mistral models (every layer
 * slides, windows 20 and 24, blocks of 8) generation far past the window is
 * bit for bit the run that keeps every block (kv_window_off), a sequence
 * holds a bounded number of blocks, a prefix hit longer than the window takes
 * only the window's blocks (from RAM or the SSD tier), batching and chunking
 * change nothing, truncation into given-back blocks recomputes, --kv-budget
 * projects the window, and `kiln fit` equals the pool. A mixed Qwen2 model
 * (one full layer, one sliding) keeps its full layer's blocks and gives back
 * its sliding group's: bit for bit the run that keeps everything.
 */
#include "engine/eng_admit.h"
#include "engine/eng_engine.h"
#include "engine/eng_fit.h"
#include "engine/eng_fit_report.h"
#include "kv/kv_ssd.h"
#include "test_model.h"
#include "tokenizer/tok.h"

#define BT 8
#define CHUNK 64 /* max_step_tokens */
#define CTX 512

/* Makes (once) a synthetic snapshot under the build folder; 0 on success. */
static int make_model(char *dir, size_t n, const char *name, const char *args)
{
    snprintf(dir, n, "%s/test-models/unit-swa-%s", KILN_BINARY_DIR, name);
    char cfg[700], cmd[3000];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (access(cfg, R_OK) == 0) return 0;
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/test-models' && rm -rf '%s.tmp%d' && /usr/bin/python3 "
             "'%s/tools/make-test-model' %s --out '%s.tmp%d' >/dev/null && rm -rf '%s' && mv "
             "'%s.tmp%d' '%s'",
             KILN_BINARY_DIR, dir, (int)getpid(), KILN_SOURCE_DIR, args, dir, (int)getpid(), dir,
             dir, (int)getpid(), dir);
    return system(cmd);
}

static char dir20[512], dir24[512], dir_mixed[512];

static eng_runtime *open_rt(const char *dir, int window_off, kv_quant_mode q, int32_t max_seqs,
                            kiln_err *err)
{
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = CTX;
    o.max_seqs = max_seqs;
    o.n_threads = 1;
    o.block_tokens = BT;
    o.max_step_tokens = CHUNK;
    o.kv_quant = q;
    o.kv_window_off = window_off;
    eng_runtime *rt = NULL;
    if (eng_runtime_open(dir, &o, &rt, err) != KILN_OK) return NULL;
    return rt;
}

static int32_t argmax(const float *x, int64_t n)
{
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

typedef struct {
    float *logits; /* OWNED [1 + n_gen][vocab]: after the prompt, then after each token */
    int32_t toks[1024];
    int32_t n_rows, hit, max_held, held_end, dropped_end;
    int32_t max_held_decode; /* held blocks once the prompt is in */
} run_out;

static void run_free(run_out *r)
{
    free(r->logits);
    memset(r, 0, sizeof *r);
}

/* Greedy: prompt in chunks of `chunk`, then n_gen tokens one per step (the
 * logits row after every step that yields one). attach: prefix cache first. */
static kiln_code run_greedy(eng_runtime *rt, const int32_t *prompt, int32_t n_prompt, int32_t n_gen,
                            int32_t chunk, int attach, run_out *r, kiln_err *err)
{
    memset(r, 0, sizeof *r);
    int64_t vocab = mdl_vocab(rt->model);
    r->logits = malloc(sizeof(float) * (size_t)vocab * (size_t)(n_gen + 1));
    if (!r->logits) return kiln_fail(err, KILN_E_NOMEM, "test: out of memory");
    eng_seq *s;
    kiln_code rc = eng_seq_create(prompt, n_prompt, &s, err);
    if (rc) return rc;
    if (attach) r->hit = eng_seq_attach_prefix(s, rt->kv, rt->ns);
    if (eng_seq_blocks_held(s) > r->max_held) r->max_held = eng_seq_blocks_held(s);
    for (int32_t g = 0; !rc && g <= n_gen; g++) {
        if (g > 0) {
            r->toks[g - 1] = argmax(r->logits + (size_t)(g - 1) * vocab, vocab);
            if (g == n_gen) break;
            if ((rc = eng_seq_append(s, r->toks[g - 1], err))) break;
        }
        while (!rc && eng_seq_pending(s) > 0) {
            eng_step_item it = {.seq = s, .max_tokens = g == 0 ? chunk : 1};
            rc = eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns, rt->logits, rt->logit_rows, err);
            int32_t held = eng_seq_blocks_held(s);
            if (held > r->max_held) r->max_held = held;
            if (g > 0 && held > r->max_held_decode) r->max_held_decode = held;
            if (!rc && it.n_logits == 1) {
                memcpy(r->logits + (size_t)g * vocab, rt->logits, sizeof(float) * (size_t)vocab);
                r->n_rows = g + 1;
            }
        }
        if (!rc && kv_pool_check(rt->kv) != 0)
            rc = kiln_fail(err, KILN_E_INTERNAL, "pool invariants broken");
    }
    r->held_end = eng_seq_blocks_held(s);
    r->dropped_end = s->n_dropped[0];
    eng_seq_free(s, rt->kv);
    return rc;
}

static int same_rows(const run_out *a, const run_out *b, int32_t rows, int64_t vocab)
{
    return a->n_rows >= rows && b->n_rows >= rows &&
           memcmp(a->logits, b->logits, sizeof(float) * (size_t)vocab * (size_t)rows) == 0;
}

static void fill_prompt(int32_t *p, int32_t n, uint32_t seed)
{
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = 3 + (int32_t)((seed >> 8) % 400u);
    }
}

/* ---------------------------------------------------------------- helpers */

static void test_window_block_arithmetic(void)
{
    /* the query at p reads p - W + 1 .. p: W 20, blocks of 8 */
    ASSERT_EQ_I64(kv_window_first_block(20, 8, 0), 0);
    ASSERT_EQ_I64(kv_window_first_block(20, 8, 26), 0); /* reads 7..26: block 0 */
    ASSERT_EQ_I64(kv_window_first_block(20, 8, 27), 1); /* reads 8..27 */
    ASSERT_EQ_I64(kv_window_first_block(20, 8, 34), 1);
    ASSERT_EQ_I64(kv_window_first_block(20, 8, 35), 2);
    ASSERT_EQ_I64(kv_window_first_block(0, 8, 1000), 0); /* no window */
    ASSERT_EQ_I64(kv_window_first_block(1, 8, 16), 2);   /* reads itself only */
    /* at most ceil((W - 1 + chunk) / bt) + 1 */
    ASSERT_EQ_I64(kv_seq_max_blocks(20, 64, 8, 1000), 12);
    ASSERT_EQ_I64(kv_seq_max_blocks(20, 64, 8, 40), 5);
    ASSERT_EQ_I64(kv_seq_max_blocks(0, 64, 8, 1000), 125);
    ASSERT_EQ_I64(kv_seq_max_blocks(4096, 512, 16, 32768), 289); /* Mistral 7B v0.1 */
    /* the bound is tight: a chunk starting at every offset spans at most that */
    for (int32_t w = 1; w <= 40; w++)
        for (int32_t chunk = 1; chunk <= 20; chunk++)
            for (int64_t p = 0; p < 100; p++) {
                int64_t need = (p + chunk + 7) / 8 - kv_window_first_block(w, 8, p);
                if (need > kv_seq_max_blocks(w, chunk, 8, 1 << 20))
                    TEST_FAIL_("w %d chunk %d at %lld needs %lld", (int)w, (int)chunk, (long long)p,
                               (long long)need);
            }
}

/* ---------------------------------------------------------------- (a) (b) */

/* Far past the window, giving blocks back changes no bit of any logit, for
 * windows that do and do not divide the block, f32 and 8-bit KV; a sequence
 * holds at most kv_seq_max_blocks while prefilling and ceil(W / bt) + 1 while
 * decoding; the pool ends with nothing active. */
static void test_release_is_memory_only_far_past_the_window(void)
{
    const char *dirs[2] = {dir20, dir24};
    const int32_t wins[2] = {20, 24};
    kv_quant_mode qs[2] = {KV_QUANT_OFF, KV_QUANT_8};
    int32_t prompt[200];
    fill_prompt(prompt, 200, 7);
    for (int d = 0; d < 2; d++)
        for (int q = 0; q < 2; q++) {
            kiln_err err;
            eng_runtime *on = open_rt(dirs[d], 0, qs[q], 1, &err);
            eng_runtime *off = open_rt(dirs[d], 1, qs[q], 1, &err);
            ASSERT_TRUE(on && off);
            ASSERT_EQ_I64(on->o.kv_window, wins[d]);
            ASSERT_EQ_I64(kv_pool_group_window(on->kv, 0), wins[d]);
            ASSERT_EQ_I64(off->o.kv_window, 0);
            int64_t vocab = mdl_vocab(on->model);
            run_out a, b, c;
            ASSERT_OK(run_greedy(on, prompt, 150, 300, CHUNK, 0, &a, &err));
            ASSERT_OK(run_greedy(off, prompt, 150, 300, CHUNK, 0, &b, &err));
            /* prefill chunking that runs ahead (7 tokens a step) reads every position too */
            ASSERT_OK(run_greedy(on, prompt, 150, 40, 7, 0, &c, &err));
            ASSERT_EQ_I64(a.n_rows, 300);
            ASSERT_TRUE(same_rows(&a, &b, 300, vocab));
            ASSERT_TRUE(same_rows(&c, &b, 40, vocab));
            ASSERT_TRUE(memcmp(a.toks, b.toks, sizeof(int32_t) * 300) == 0);
            int32_t cap = (int32_t)kv_seq_max_blocks(wins[d], CHUNK, BT, CTX);
            ASSERT_TRUE(a.max_held <= cap);
            ASSERT_TRUE(a.max_held_decode <= (wins[d] + BT - 1) / BT + 1);
            ASSERT_TRUE(c.max_held <= (int32_t)kv_seq_max_blocks(wins[d], 7, BT, CTX));
            ASSERT_EQ_I64(b.max_held, (150 + 299 + BT - 1) / BT); /* every block kept */
            ASSERT_TRUE(a.dropped_end > 40);
            ASSERT_EQ_I64(kv_pool_get_stats(on->kv).n_active, 0);
            ASSERT_EQ_I64(kv_pool_check(on->kv), 0);
            run_free(&a);
            run_free(&b);
            run_free(&c);
            eng_runtime_close(on);
            eng_runtime_close(off);
        }
}

/* ---------------------------------------------------------------- (c) */

/* A prompt whose cached prefix is longer than the window: only the blocks its
 * first pending token reads are taken (3 of the 25 hit blocks at window 20),
 * even when the earlier ones were evicted; what follows is bit for bit a
 * fresh run. */
static void test_prefix_hit_longer_than_the_window(void)
{
    kiln_err err;
    eng_runtime *on = open_rt(dir20, 0, KV_QUANT_OFF, 1, &err);
    eng_runtime *off = open_rt(dir20, 1, KV_QUANT_OFF, 1, &err);
    ASSERT_TRUE(on && off);
    int64_t vocab = mdl_vocab(on->model);
    int32_t pa[200], pb[230];
    fill_prompt(pa, 200, 11);
    memcpy(pb, pa, sizeof pa);
    fill_prompt(pb + 200, 30, 12);
    run_out a, b, ref;
    ASSERT_OK(run_greedy(on, pa, 200, 20, CHUNK, 1, &a, &err));
    /* A published 27 full blocks; keep only the 6 released last (blocks 21..26) */
    kv_pool_set_cache_cap(on->kv, 6);
    kv_pool_stats st0 = kv_pool_get_stats(on->kv);
    ASSERT_EQ_I64(st0.n_cached, 6);
    eng_seq *s;
    ASSERT_OK(eng_seq_create(pb, 230, &s, &err));
    int32_t hit = eng_seq_attach_prefix(s, on->kv, on->ns);
    ASSERT_EQ_I64(hit, 200);                                            /* blocks 0..24 match */
    ASSERT_EQ_I64(s->n_dropped[0], kv_window_first_block(20, BT, 200)); /* 22 */
    ASSERT_EQ_I64(s->n_dropped[0], 22);
    ASSERT_EQ_I64(eng_seq_blocks_held(s), 3);
    ASSERT_EQ_I64(kv_pool_find(on->kv, 0, s->hashes[0]), 0); /* block 0 is gone */
    kv_pool_stats st1 = kv_pool_get_stats(on->kv);
    ASSERT_EQ_U64(st1.hits - st0.hits, 3); /* nothing before the window was looked up */
    ASSERT_EQ_U64(st1.misses - st0.misses, 0);
    eng_seq_free(s, on->kv);
    /* the whole run through attach equals a fresh run with every block kept */
    ASSERT_OK(run_greedy(on, pb, 230, 30, CHUNK, 1, &b, &err));
    ASSERT_EQ_I64(b.hit, 200);
    ASSERT_OK(run_greedy(off, pb, 230, 30, CHUNK, 0, &ref, &err));
    ASSERT_TRUE(same_rows(&b, &ref, 30, vocab));
    /* a hit on A's own history (prompt + generated), ending far past the window
     * (a fresh pool: the cap above evicted A's blocks) */
    eng_runtime_close(on);
    on = open_rt(dir20, 0, KV_QUANT_OFF, 1, &err);
    ASSERT_TRUE(on != NULL);
    run_free(&a);
    ASSERT_OK(run_greedy(on, pa, 200, 20, CHUNK, 1, &a, &err));
    int32_t pc[221];
    memcpy(pc, pa, sizeof pa);
    memcpy(pc + 200, a.toks, sizeof(int32_t) * 20);
    pc[220] = 5;
    run_out c, cref;
    ASSERT_OK(run_greedy(on, pc, 221, 10, CHUNK, 1, &c, &err));
    ASSERT_EQ_I64(c.hit, 216);
    ASSERT_OK(run_greedy(off, pc, 221, 10, CHUNK, 0, &cref, &err));
    ASSERT_TRUE(same_rows(&c, &cref, 10, vocab));
    ASSERT_EQ_I64(kv_pool_check(on->kv), 0);
    run_free(&a);
    run_free(&b);
    run_free(&c);
    run_free(&ref);
    run_free(&cref);
    eng_runtime_close(on);
    eng_runtime_close(off);
}

/* ---------------------------------------------------------------- (d) */

/* Three sequences of different lengths stepped together (prefill chunks
 * beside decodes, each giving blocks back at its own pace) produce each
 * sequence's logits bit for bit as it alone does. */
static void test_batch_invariance_with_blocks_given_back(void)
{
    kiln_err err;
    eng_runtime *rt = open_rt(dir20, 0, KV_QUANT_OFF, 3, &err);
    ASSERT_TRUE(rt != NULL);
    int64_t vocab = mdl_vocab(rt->model);
    enum { NS = 3, GEN = 90 };
    int32_t lens[NS] = {30, 75, 130}, prompts[NS][130];
    run_out alone[NS];
    for (int i = 0; i < NS; i++) {
        fill_prompt(prompts[i], lens[i], 100 + (uint32_t)i);
        ASSERT_OK(run_greedy(rt, prompts[i], lens[i], GEN, 16, 0, &alone[i], &err));
    }
    eng_seq *s[NS];
    float *rows[NS];
    int32_t got[NS] = {0};
    for (int i = 0; i < NS; i++) {
        ASSERT_OK(eng_seq_create(prompts[i], lens[i], &s[i], &err));
        rows[i] = malloc(sizeof(float) * (size_t)vocab * GEN);
        ASSERT_TRUE(rows[i] != NULL);
    }
    for (int guard = 0; guard < 1000; guard++) {
        eng_step_item it[NS];
        eng_seq *who[NS];
        int n = 0;
        for (int i = 0; i < NS; i++) {
            if (got[i] == GEN) continue;
            if (eng_seq_pending(s[i]) == 0) {
                int32_t tok = argmax(rows[i] + (size_t)(got[i] - 1) * vocab, vocab);
                ASSERT_OK(eng_seq_append(s[i], tok, &err));
            }
            who[n] = s[i];
            it[n++] = (eng_step_item){.seq = s[i], .max_tokens = 16};
        }
        if (n == 0) break;
        ASSERT_OK(eng_step_run(rt->cx, rt->kv, it, n, rt->ns, rt->logits, rt->logit_rows, &err));
        int row = 0;
        for (int k = 0; k < n; k++) {
            int i = 0;
            while (s[i] != who[k])
                i++;
            if (it[k].n_logits == 1) {
                memcpy(rows[i] + (size_t)got[i] * vocab, rt->logits + (size_t)row * vocab,
                       sizeof(float) * (size_t)vocab);
                got[i]++;
                row++;
            }
            ASSERT_TRUE(eng_seq_blocks_held(s[i]) <= (int32_t)kv_seq_max_blocks(20, 16, BT, CTX));
        }
    }
    for (int i = 0; i < NS; i++) {
        ASSERT_EQ_I64(got[i], GEN);
        ASSERT_TRUE(s[i]->n_dropped[0] > 0);
        if (memcmp(rows[i], alone[i].logits, sizeof(float) * (size_t)vocab * GEN) != 0)
            TEST_FAIL_("sequence %d: batched logits differ from alone", i);
        eng_seq_free(s[i], rt->kv);
        free(rows[i]);
        run_free(&alone[i]);
    }
    ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
    eng_runtime_close(rt);
}

/* ---------------------------------------------------------------- truncation */

/* Truncating back to where the window reads blocks already given back takes
 * them back from the prefix cache; when they were evicted, all K/V is
 * forgotten and recomputed. Either way the logits are the fresh run's. */
static void test_truncate_into_given_back_blocks_recomputes(void)
{
    kiln_err err;
    eng_runtime *on = open_rt(dir20, 0, KV_QUANT_OFF, 1, &err);
    eng_runtime *off = open_rt(dir20, 1, KV_QUANT_OFF, 1, &err);
    ASSERT_TRUE(on && off);
    int64_t vocab = mdl_vocab(on->model);
    int32_t p[120];
    fill_prompt(p, 120, 33);
    eng_seq *s;
    ASSERT_OK(eng_seq_create(p, 120, &s, &err));
    ASSERT_OK(eng_prefill(on, s, 0, NULL, &err));
    ASSERT_EQ_I64(s->n_cached, 120);
    ASSERT_EQ_I64(s->n_dropped[0], 12); /* the query at 120 reads 101.. */
    /* 111: block 13 (104..111) is published, so recompute from 104, whose
     * window starts in block 10: blocks 10, 11 come back from the cache */
    uint64_t hits0 = kv_pool_get_stats(on->kv).hits;
    eng_seq_truncate(s, on->kv, 111);
    ASSERT_EQ_I64(s->n_cached, 104);
    ASSERT_EQ_I64(s->n_dropped[0], 10);
    ASSERT_EQ_I64(eng_seq_blocks_held(s), 3);
    ASSERT_EQ_U64(kv_pool_get_stats(on->kv).hits - hits0, 2);
    ASSERT_OK(eng_prefill(on, s, 0, NULL, &err));
    float *l1 = malloc(sizeof(float) * (size_t)vocab);
    memcpy(l1, on->logits, sizeof(float) * (size_t)vocab);
    /* far back with the cache emptied: everything goes and is recomputed */
    kv_pool_set_cache_cap(on->kv, 0);
    eng_seq_truncate(s, on->kv, 60);
    kv_pool_set_cache_cap(on->kv, kv_pool_get_stats(on->kv).n_blocks);
    ASSERT_EQ_I64(s->n_cached, 0);
    ASSERT_EQ_I64(eng_seq_blocks_held(s), 0);
    ASSERT_OK(eng_prefill(on, s, 0, NULL, &err));
    run_out r60, r111;
    ASSERT_OK(run_greedy(off, p, 60, 1, CHUNK, 0, &r60, &err));
    ASSERT_OK(run_greedy(off, p, 111, 1, CHUNK, 0, &r111, &err));
    ASSERT_TRUE(memcmp(on->logits, r60.logits, sizeof(float) * (size_t)vocab) == 0);
    ASSERT_TRUE(memcmp(l1, r111.logits, sizeof(float) * (size_t)vocab) == 0);
    eng_seq_free(s, on->kv);
    ASSERT_EQ_I64(kv_pool_check(on->kv), 0);
    free(l1);
    run_free(&r60);
    run_free(&r111);
    eng_runtime_close(on);
    eng_runtime_close(off);
}

/* ---------------------------------------------------------------- SSD tier */

/* Every cached block of a 200-token run spilled to the SSD tier, then a
 * 230-token prompt sharing those 200: the hit loads exactly want_loads blocks
 * from disk, and the run equals a fresh uncached one without the window cap. */
static void ssd_tier_case(const char *model, kv_quant_mode kq, uint64_t kv_format, const char *tag,
                          uint32_t seed, uint64_t want_loads)
{
    kiln_err err;
    char sdir[512], cmd[700];
    snprintf(sdir, sizeof sdir, "%s/unit_swa_%s_%d", KILN_BINARY_DIR, tag, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sdir);
    ASSERT_TRUE(system(cmd) == 0);
    eng_runtime *on = open_rt(model, 0, kq, 1, &err);
    eng_runtime *off = open_rt(model, 1, kq, 1, &err);
    ASSERT_TRUE(on && off);
    int64_t vocab = mdl_vocab(on->model);
    kv_ssd_config sc = kv_ssd_config_default();
    sc.dir = sdir;
    sc.id =
        (kv_ssd_ident){.model_fp = on->ns, .kv_format = kv_format, .tok_fp = 1, .block_tokens = BT};
    kv_ssd *ssd = NULL;
    ASSERT_OK(kv_ssd_open(&sc, &ssd, &err));
    kv_ssd_attach(ssd, on->kv);
    int32_t pa[200], pb[230];
    fill_prompt(pa, 200, seed);
    memcpy(pb, pa, sizeof pa);
    fill_prompt(pb + 200, 30, seed + 1);
    run_out a, b, ref;
    ASSERT_OK(run_greedy(on, pa, 200, 5, CHUNK, 1, &a, &err));
    kv_pool_set_cache_cap(on->kv, 0); /* every cached block spilled to the tier */
    ASSERT_EQ_I64(kv_pool_get_stats(on->kv).n_cached, 0);
    ASSERT_EQ_U64(kv_ssd_flush(ssd, 10000, NULL), 0);
    kv_pool_set_cache_cap(on->kv, kv_pool_get_stats(on->kv).n_blocks);
    uint64_t hits0 = kv_ssd_get_stats(ssd).hits;
    ASSERT_OK(run_greedy(on, pb, 230, 20, CHUNK, 1, &b, &err));
    ASSERT_EQ_I64(b.hit, 200);
    ASSERT_EQ_U64(kv_ssd_get_stats(ssd).hits - hits0, want_loads);
    ASSERT_OK(run_greedy(off, pb, 230, 20, CHUNK, 0, &ref, &err));
    ASSERT_TRUE(same_rows(&b, &ref, 20, vocab));
    ASSERT_EQ_I64(kv_pool_check(on->kv), 0);
    kv_ssd_attach(NULL, on->kv);
    kv_ssd_close(ssd, 5);
    ASSERT_TRUE(system(cmd) == 0);
    run_free(&a);
    run_free(&b);
    run_free(&ref);
    eng_runtime_close(on);
    eng_runtime_close(off);
}

/* 8-bit KV, all-sliding model: a hit longer than the window loads only the
 * window's 3 blocks from disk. */
static void test_ssd_tier_hit_loads_only_the_window(void)
{
    ssd_tier_case(dir20, KV_QUANT_8, 8, "ssd", 21, 3);
}

/* The mixed model: the full group's 25 blocks and the sliding group's 3, each
 * group under its own key. */
static void test_ssd_tier_mixed_groups(void)
{
    ssd_tier_case(dir_mixed, KV_QUANT_OFF, 0, "ssd_mixed", 31, 25 + 3);
}

/* ---------------------------------------------------------------- (e) */

static int collect_done(eng_handle *h, int32_t *completion)
{
    eng_event ev;
    int rc;
    while ((rc = eng_handle_next(h, &ev, 60000)) == 0) {
        int last = ev.kind != ENG_EV_TOKEN;
        if (last) *completion = ev.kind == ENG_EV_DONE ? ev.completion_tokens : -1;
        eng_event_clear(&ev);
        if (last) return 0;
    }
    return -1;
}

/* --kv-budget projects prompt + max_tokens window-capped: a request of
 * 40 + 400 positions is admitted under a budget that holds only the window
 * (12 blocks of 8 at window 20 with 64-token steps) and runs to its length;
 * with every block kept the same request is over the budget. */
static void test_kv_budget_projects_the_window(void)
{
    kiln_err err;
    for (int off = 0; off < 2; off++) {
        eng_runtime *rt = open_rt(dir20, off, KV_QUANT_OFF, 2, &err);
        ASSERT_TRUE(rt != NULL);
        tok_tokenizer *tok;
        ASSERT_OK(tok_load(dir20, &tok, &err));
        eng_fit f;
        eng_runtime_opts o = rt->o;
        o.kv_fmt = NULL;
        ASSERT_OK(eng_fit_model(dir20, &o, &f, &err));
        ASSERT_EQ_I64(f.kv_window, off ? 0 : 20);
        int64_t held = eng_admit_seq_positions(&rt->o, 440);
        ASSERT_EQ_I64(held, off ? 440 : 12 * BT);
        eng_engine_opts eo = eng_engine_opts_default();
        eo.kv_bytes_per_token = f.kv_bytes_per_token;
        eo.kv_budget_bytes = f.kv_bytes_per_token * 12 * BT; /* the window's blocks */
        eng_engine *e;
        ASSERT_OK(eng_engine_start(rt, tok, &eo, &e, &err));
        eng_stats st = eng_get_stats(e);
        ASSERT_EQ_I64(st.kv_window, off ? 0 : 20);
        ASSERT_EQ_I64(st.kv_seq_max_blocks, off ? CTX / BT : 12);
        ASSERT_EQ_I64(st.kv_sliding_window, 20);
        ASSERT_EQ_I64(st.kv_sliding_layers, 2);
        ASSERT_EQ_U64(st.kv_bytes_per_token_sliding_layers, st.kv_bytes_per_token);
        ASSERT_EQ_U64(st.kv_bytes_per_token_full_layers, 0);
        int32_t prompt[40];
        fill_prompt(prompt, 40, 5);
        eng_params p = eng_params_default();
        p.prompt = prompt;
        p.n_prompt = 40;
        p.max_tokens = 400;
        p.ignore_eos = true;
        eng_handle *h = NULL;
        kiln_code rc = eng_submit(e, &p, &h, &err);
        if (off) {
            ASSERT_EQ_I64(rc, KILN_E_BUDGET);
        } else {
            ASSERT_OK(rc);
            int32_t done = 0;
            ASSERT_EQ_I64(collect_done(h, &done), 0);
            ASSERT_EQ_I64(done, 400);
            eng_handle_release(h);
            st = eng_get_stats(e);
            ASSERT_EQ_I64(st.kv.n_active, 0);
        }
        eng_engine_stop(e);
        tok_destroy(tok);
        eng_runtime_close(rt);
    }
}

/* ---------------------------------------------------------------- (f) */

/* `kiln fit` is the pool: bytes, blocks, the window cap, the per-sequence
 * bound, per layer kind; the default pool is max_seqs x (cap + 1) blocks with
 * a window and max_seqs x (ctx / bt + 1) without. */
static void test_fit_equals_the_pool(void)
{
    struct {
        const char *dir;
        int off;
        kv_quant_mode q;
        int32_t window, sliding, per_seq;
    } cases[] = {
        {dir20, 0, KV_QUANT_OFF, 20, 2, 12 + 1}, /* ceil((20 - 1 + 64) / 8) + 1 = 12 */
        {dir20, 0, KV_QUANT_8, 20, 2, 12 + 1},
        {dir24, 0, KV_QUANT_4, 24, 2, 12 + 1}, /* ceil((24 - 1 + 64) / 8) + 1 = 12 */
        {dir20, 1, KV_QUANT_OFF, 0, 2, CTX / BT + 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_err err;
        eng_runtime *rt = open_rt(cases[i].dir, cases[i].off, cases[i].q, 3, &err);
        ASSERT_TRUE(rt != NULL);
        eng_runtime_opts o = eng_runtime_opts_default();
        o.ctx = CTX;
        o.max_seqs = 3;
        o.n_threads = 1;
        o.block_tokens = BT;
        o.max_step_tokens = CHUNK;
        o.kv_quant = cases[i].q;
        o.kv_window_off = cases[i].off;
        eng_fit f;
        ASSERT_OK(eng_fit_model(cases[i].dir, &o, &f, &err));
        kv_pool_stats st = kv_pool_get_stats(rt->kv);
        ASSERT_EQ_U64(f.kv_pool_bytes, st.bytes);
        ASSERT_EQ_I64(f.o.n_blocks, st.n_blocks);
        ASSERT_EQ_I64(st.n_blocks, 3 * cases[i].per_seq);
        ASSERT_EQ_I64(f.kv_window, cases[i].window);
        ASSERT_EQ_I64(kv_pool_group_window(rt->kv, 0), cases[i].window);
        ASSERT_EQ_I64(f.kv_seq_max_blocks, cases[i].per_seq - 1);
        ASSERT_EQ_I64(f.sliding_layers, cases[i].sliding);
        ASSERT_EQ_I64(f.sliding_window, 20 + (cases[i].dir == dir24) * 4);
        ASSERT_EQ_U64(f.kv_bytes_per_token,
                      f.kv_bytes_per_token_full_layers + f.kv_bytes_per_token_sliding_layers);
        ASSERT_EQ_U64(f.kv_bytes_per_token * BT, st.block_bytes);
        /* the model's layers agree with fit's rule */
        int32_t n = 0;
        for (int64_t L = 0; L < mdl_config(rt->model)->n_layers; L++)
            n += eng_fit_layer_sliding(mdl_config(rt->model), L);
        ASSERT_EQ_I64(n, cases[i].sliding);
        /* one sequence's bytes: the cap's positions, or the whole context */
        uint64_t pos = cases[i].window ? (uint64_t)(cases[i].per_seq - 1) * BT : CTX;
        ASSERT_EQ_U64(f.kv_seq_bytes, pos * f.kv_bytes_per_token);
        char *js = eng_fit_report_json(&f, NULL, 0);
        ASSERT_TRUE(js != NULL);
        char want[96];
        snprintf(want, sizeof want, "\"kv_window\": %d", (int)cases[i].window);
        ASSERT_TRUE(strstr(js, want) != NULL);
        free(js);
        eng_runtime_close(rt);
    }
}

/* A mixed model (layer 0 full, layer 1 sliding, window 20): two KV groups. The
 * full group keeps every block, the sliding group gives back what left the
 * window: the same logits, bit for bit, as the run that keeps everything
 * (f32 and 8-bit KV); `kiln fit` is the pool per group; a prefix hit longer
 * than the window takes the full group's whole chain and the sliding group's
 * window only. */
static void test_mixed_model_caps_its_sliding_group(void)
{
    kv_quant_mode qs[2] = {KV_QUANT_OFF, KV_QUANT_8};
    for (int q = 0; q < 2; q++) {
        kiln_err err;
        eng_runtime *on = open_rt(dir_mixed, 0, qs[q], 1, &err);
        eng_runtime *off = open_rt(dir_mixed, 1, qs[q], 1, &err);
        ASSERT_TRUE(on && off);
        ASSERT_EQ_I64(on->o.kv_window, 0); /* not one capped group */
        ASSERT_EQ_I64(kv_pool_n_groups(on->kv), 2);
        ASSERT_EQ_I64(kv_pool_group_window(on->kv, 0), 0);
        ASSERT_EQ_I64(kv_pool_group_window(on->kv, 1), 20);
        ASSERT_EQ_I64(kv_pool_layer_group(on->kv, 0), 0);
        ASSERT_EQ_I64(kv_pool_layer_group(on->kv, 1), 1);
        ASSERT_EQ_I64(kv_pool_group_window(off->kv, 1), 0);
        int64_t vocab = mdl_vocab(on->model);
        int32_t p[100];
        fill_prompt(p, 100, 9);
        run_out a, b;
        ASSERT_OK(run_greedy(on, p, 100, 160, CHUNK, 0, &a, &err));
        ASSERT_OK(run_greedy(off, p, 100, 160, CHUNK, 0, &b, &err));
        ASSERT_TRUE(same_rows(&a, &b, 160, vocab));
        ASSERT_EQ_I64(a.dropped_end, 0); /* the full group gives nothing back */
        /* at 259 positions: the full group's 33 blocks + the window's (first block 30) */
        int32_t nb = (100 + 159 + BT - 1) / BT;
        ASSERT_EQ_I64(a.held_end, nb + nb - kv_window_first_block(20, BT, 100 + 159));
        ASSERT_EQ_I64(b.held_end, 2 * nb);
        ASSERT_EQ_I64(kv_pool_get_stats(on->kv).n_active, 0);
        ASSERT_EQ_I64(kv_pool_check(on->kv), 0);
        /* a hit at 256 positions: group 0 blocks 0..31, group 1 only the window's */
        int32_t pb[300];
        memcpy(pb, p, sizeof p);
        for (int32_t i = 0; i < 160; i++)
            pb[100 + i] = a.toks[i];
        eng_seq *s;
        ASSERT_OK(eng_seq_create(pb, 260, &s, &err));
        ASSERT_EQ_I64(eng_seq_attach_prefix(s, on->kv, on->ns), 256);
        ASSERT_EQ_I64(s->n_dropped[0], 0);
        ASSERT_EQ_I64(s->n_dropped[1], kv_window_first_block(20, BT, 256));
        eng_seq_free(s, on->kv);
        /* fit = the pool, group by group; one sequence = all of the full layer's
         * positions + the window's blocks of the sliding one */
        eng_runtime_opts o = on->o;
        o.kv_fmt = NULL;
        eng_fit f;
        ASSERT_OK(eng_fit_model(dir_mixed, &o, &f, &err));
        kv_pool_stats st = kv_pool_get_stats(on->kv);
        ASSERT_EQ_I64(f.n_kv_groups, 2);
        ASSERT_EQ_U64(f.kv_pool_bytes, st.bytes);
        ASSERT_EQ_I64(f.kv_group[0].n_blocks, st.group[0].n_blocks);
        ASSERT_EQ_I64(f.kv_group[1].n_blocks, st.group[1].n_blocks);
        ASSERT_EQ_I64(st.group[0].n_blocks, CTX / BT + 1);
        ASSERT_EQ_I64(st.group[1].n_blocks, 12 + 1); /* ceil((20 - 1 + 64) / 8) + 1 */
        ASSERT_EQ_U64(f.kv_bytes_per_token * BT, st.block_bytes);
        ASSERT_EQ_U64(f.kv_group[0].bytes_per_token, f.kv_group[1].bytes_per_token);
        ASSERT_EQ_U64(f.kv_seq_bytes, f.kv_group[0].bytes_per_token * CTX +
                                          f.kv_group[1].bytes_per_token * 12 * BT);
        run_free(&a);
        run_free(&b);
        eng_runtime_close(on);
        eng_runtime_close(off);
    }
}

/* The numbers docs/kv.md quotes: Mistral 7B v0.1 (32 layers, 8 KV heads of
 * 128, window 4096) at 32k context, blocks of 16, 512-token steps. */
static void test_mistral_7b_shape_numbers(void)
{
    wt_config c;
    memset(&c, 0, sizeof c);
    c.n_layers = 32;
    c.n_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = 128;
    c.hidden = 4096;
    c.intermediate = 14336;
    c.vocab = 32000;
    c.max_pos = 32768;
    c.sliding_window = 4096;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 32768;
    o.max_seqs = 1;
    o.n_threads = 1;
    const kv_quant_mode qs[2] = {KV_QUANT_OFF, KV_QUANT_F16};
    const uint64_t bpt[2] = {262144, 131072};
    for (int q = 0; q < 2; q++) {
        o.kv_quant = qs[q];
        eng_fit on, off;
        o.kv_window_off = 0;
        eng_fit_compute(&c, 0, &o, &on);
        o.kv_window_off = 1;
        eng_fit_compute(&c, 0, &o, &off);
        ASSERT_EQ_U64(on.kv_bytes_per_token, bpt[q]);
        ASSERT_EQ_I64(on.kv_seq_max_blocks, 289);
        ASSERT_EQ_I64(off.kv_seq_max_blocks, 2048);
        ASSERT_EQ_U64(on.kv_seq_bytes, bpt[q] * 289 * 16);
        ASSERT_EQ_U64(off.kv_seq_bytes, bpt[q] * 32768);
        ASSERT_EQ_U64(on.kv_pool_bytes, bpt[q] * 290 * 16);
        ASSERT_EQ_U64(off.kv_pool_bytes, bpt[q] * 2049 * 16);
        fprintf(stderr,
                "  mistral-7b shape %s: kv per sequence at 32k %.3f GiB -> %.3f GiB, "
                "pool %.3f -> %.3f GiB\n",
                on.kv_format, (double)off.kv_seq_bytes / 1073741824.0,
                (double)on.kv_seq_bytes / 1073741824.0, (double)off.kv_pool_bytes / 1073741824.0,
                (double)on.kv_pool_bytes / 1073741824.0);
    }
    /* a mixed Qwen2-style config: 28 layers, the last 7 sliding: those 7 capped */
    c.n_layers = 28;
    c.max_window_layers = 21;
    o.kv_quant = KV_QUANT_OFF;
    o.kv_window_off = 0;
    eng_fit m;
    eng_fit_compute(&c, 0, &o, &m);
    ASSERT_EQ_I64(m.sliding_layers, 7);
    ASSERT_EQ_I64(m.kv_window, 0);
    ASSERT_EQ_U64(m.kv_bytes_per_token_sliding_layers, 7 * 8192);
    ASSERT_EQ_U64(m.kv_bytes_per_token_full_layers, 21 * 8192);
    ASSERT_EQ_I64(m.n_kv_groups, 2);
    ASSERT_EQ_U64(m.kv_seq_bytes, 21 * 8192 * (uint64_t)32768 + 7 * 8192 * (uint64_t)289 * 16);
}

int main(void)
{
    if (make_model(dir20, sizeof dir20, "w20", "--arch mistral --dtype f32 --sliding-window 20") ||
        make_model(dir24, sizeof dir24, "w24", "--arch mistral --dtype f32 --sliding-window 24") ||
        make_model(dir_mixed, sizeof dir_mixed, "qwen2-mixed",
                   "--arch qwen2 --dtype f32 --sliding-window 20 --max-window-layers 1")) {
        fprintf(stderr, "cannot make the test models (tools/make-test-model, python3-numpy)\n");
        return 1;
    }
    RUN(test_window_block_arithmetic);
    RUN(test_release_is_memory_only_far_past_the_window);
    RUN(test_prefix_hit_longer_than_the_window);
    RUN(test_batch_invariance_with_blocks_given_back);
    RUN(test_truncate_into_given_back_blocks_recomputes);
    RUN(test_ssd_tier_hit_loads_only_the_window);
    RUN(test_ssd_tier_mixed_groups);
    RUN(test_kv_budget_projects_the_window);
    RUN(test_fit_equals_the_pool);
    RUN(test_mixed_model_caps_its_sliding_group);
    RUN(test_mistral_7b_shape_numbers);
    return TEST_DONE();
}
