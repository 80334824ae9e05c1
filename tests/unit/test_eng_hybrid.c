/*
 * test_eng_hybrid.c — hybrid models (gated DeltaNet + gated attention) in the
 * engine (docs/hybrid.md), on a synthetic Qwen3.5 (tools/make-test-model
 * --arch qwen3_5: 8 layers, full attention at 3 and 7, blocks of 8):
 * every logit bit for bit the same whole, in uneven chunks, in chunks of one;
 * alone and beside 7 other rows of other lengths; cold and after a prefix hit
 * from RAM (the repeated prompt, a shared prefix, the next turn of a chat),
 * from the SSD tier after a restart, after a preemption and after a rollback
 * (eng_seq_truncate: snapshot + replay); the recurrent state is accounted in
 * the pool (admission, fit = pool) and every state block comes back.
 */
#include "engine/eng_fit.h"
#include "engine/eng_seq.h"
#include "kv/kv_ssd.h"
#include "test_model.h"

#define BT 8
#define CHUNK 64 /* max_step_tokens */
#define CTX 512

static char dir_tiny[512];

static int make_model(char *dir, size_t n, const char *name, const char *args)
{
    snprintf(dir, n, "%s/test-models/unit-hybrid-%s", KILN_BINARY_DIR, name);
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

static eng_runtime *open_rt(int32_t max_seqs, int32_t state_every, int32_t state_blocks,
                            kiln_err *err)
{
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = CTX;
    o.max_seqs = max_seqs;
    o.n_threads = 2;
    o.block_tokens = BT;
    o.max_step_tokens = CHUNK;
    o.state_every = state_every;
    o.state_blocks = state_blocks;
    eng_runtime *rt = NULL;
    if (eng_runtime_open(dir_tiny, &o, &rt, err) != KILN_OK) return NULL;
    return rt;
}

static void fill_prompt(int32_t *p, int32_t n, uint32_t seed)
{
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = 3 + (int32_t)((seed >> 8) % 400u);
    }
}

/* One greedy run: its logits rows (every prompt position, then one per
 * generated token) and tokens. */
typedef struct {
    float *rows; /* OWNED [n_rows, vocab] */
    int32_t n_rows, hit;
    int32_t toks[256];
} run_out;

static void run_free(run_out *r)
{
    free(r->rows);
    memset(r, 0, sizeof *r);
}

/* A sequence being run: prompt in chunks of plan[] (cycled, 0-terminated),
 * then n_gen greedy tokens one per step. Stepped by the caller (batching). */
typedef struct {
    eng_seq *s;
    const int32_t *plan;
    int ci, n_prompt, n_gen, gen;
    run_out *out;
} runner;

static kiln_code runner_start(runner *r, eng_runtime *rt, const int32_t *prompt, int32_t n,
                              int32_t n_gen, const int32_t *plan, int attach, run_out *out,
                              kiln_err *err)
{
    memset(r, 0, sizeof *r);
    memset(out, 0, sizeof *out);
    out->rows = malloc(sizeof(float) * (size_t)mdl_vocab(rt->model) * (size_t)(n + n_gen));
    if (!out->rows) return kiln_fail(err, KILN_E_NOMEM, "test: out of memory");
    r->plan = plan;
    r->n_prompt = n;
    r->n_gen = n_gen;
    r->out = out;
    kiln_code rc = eng_seq_create(prompt, n, &r->s, err);
    if (rc) return rc;
    if (attach) out->hit = eng_seq_attach_prefix(r->s, rt->kv, rt->ns);
    out->n_rows = out->hit; /* rows before the hit are not computed: leave them 0 */
    memset(out->rows, 0, sizeof(float) * (size_t)mdl_vocab(rt->model) * (size_t)out->hit);
    return KILN_OK;
}

static int runner_done(const runner *r)
{
    return r->gen >= r->n_gen;
}

/* This step's item for r. */
static eng_step_item runner_item(runner *r)
{
    int32_t pend = eng_seq_pending(r->s);
    int32_t take = r->s->n_cached < r->n_prompt ? r->plan[r->ci] : 1;
    if (take > pend) take = pend;
    return (eng_step_item){.seq = r->s, .max_tokens = take, .all_logits = 1};
}

/* After the step: its logits rows; appends the greedy token when the sequence
 * is caught up. */
static kiln_code runner_after(runner *r, eng_runtime *rt, const eng_step_item *it,
                              const float *rows, kiln_err *err)
{
    int64_t vocab = mdl_vocab(rt->model);
    memcpy(r->out->rows + (size_t)r->out->n_rows * vocab, rows,
           sizeof(float) * (size_t)vocab * (size_t)it->n_logits);
    r->out->n_rows += it->n_logits;
    if (r->s->n_cached <= r->n_prompt && r->s->n_cached > 0 && it->n_run == r->plan[r->ci]) {
        r->ci++;
        if (!r->plan[r->ci]) r->ci = 0;
    }
    if (eng_seq_pending(r->s) > 0) return KILN_OK;
    int32_t t = tm_argmax(rows + (size_t)(it->n_logits - 1) * vocab, vocab);
    r->out->toks[r->gen++] = t;
    if (runner_done(r)) return KILN_OK;
    return eng_seq_append(r->s, t, err);
}

static kiln_code run_one(eng_runtime *rt, const int32_t *prompt, int32_t n, int32_t n_gen,
                         const int32_t *plan, int attach, run_out *out, kiln_err *err)
{
    runner r;
    kiln_code rc = runner_start(&r, rt, prompt, n, n_gen, plan, attach, out, err);
    while (!rc && !runner_done(&r)) {
        eng_step_item it = runner_item(&r);
        rc = eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns, rt->logits, rt->logit_rows, err);
        if (!rc) rc = runner_after(&r, rt, &it, rt->logits, err);
    }
    eng_seq_free(r.s, rt->kv);
    if (!rc && kv_pool_check(rt->kv) != 0)
        rc = kiln_fail(err, KILN_E_INTERNAL, "pool invariants broken");
    return rc;
}

/* Rows [from, a->n_rows) of a equal b's, bit for bit. */
static int same_from(const run_out *a, const run_out *b, int32_t from, int64_t vocab)
{
    return a->n_rows == b->n_rows && from <= a->n_rows &&
           memcmp(a->rows + (size_t)from * vocab, b->rows + (size_t)from * vocab,
                  sizeof(float) * (size_t)vocab * (size_t)(a->n_rows - from)) == 0 &&
           memcmp(a->toks, b->toks, sizeof a->toks) == 0;
}

static const int32_t WHOLE[] = {CHUNK, 0}, UNEVEN[] = {5, 11, 1, 20, 27, 0}, ONE[] = {1, 0},
                     SEVEN[] = {7, 0};

/* ---------------------------------------------------------------- chunking, batching */

static void test_chunking_is_bitwise(void)
{
    kiln_err err;
    eng_runtime *rt = open_rt(1, 1, 0, &err);
    ASSERT_TRUE(rt != NULL);
    int64_t vocab = mdl_vocab(rt->model);
    int32_t p[150];
    fill_prompt(p, 150, 1);
    const int32_t *plans[] = {UNEVEN, ONE, SEVEN};
    run_out a, b;
    ASSERT_OK(run_one(rt, p, 150, 40, WHOLE, 0, &a, &err));
    ASSERT_EQ_I64(a.n_rows, 189); /* every prompt position, then 39 decode steps */
    for (int k = 0; k < 3; k++) {
        ASSERT_OK(run_one(rt, p, 150, 40, plans[k], 0, &b, &err));
        int same = same_from(&a, &b, 0, vocab);
        run_free(&b);
        if (!same) TEST_FAIL_("plan %d differs from the whole prompt", k);
    }
    kv_pool_stats st = kv_pool_get_stats(rt->kv);
    ASSERT_EQ_I64(st.state.n_active, 0);
    ASSERT_EQ_I64(st.n_active, 0);
    run_free(&a);
    eng_runtime_close(rt);
}

/* Eight sequences of lengths 3..200 stepped together (prefill chunks of
 * different sizes beside decodes) each give bitwise the logits they give alone. */
static void test_batched_beside_seven_rows(void)
{
    kiln_err err;
    enum { NS = 8, GEN = 24 };
    eng_runtime *rt = open_rt(NS, 1, 0, &err);
    ASSERT_TRUE(rt != NULL);
    int64_t vocab = mdl_vocab(rt->model);
    int32_t lens[NS] = {3, 200, 17, 64, 9, 120, 33, 71}, prompts[NS][200];
    const int32_t *plans[NS] = {ONE, WHOLE, SEVEN, UNEVEN, ONE, SEVEN, WHOLE, UNEVEN};
    run_out alone[NS], got[NS];
    for (int i = 0; i < NS; i++) {
        fill_prompt(prompts[i], lens[i], 50 + (uint32_t)i);
        ASSERT_OK(run_one(rt, prompts[i], lens[i], GEN, WHOLE, 0, &alone[i], &err));
    }
    runner r[NS];
    for (int i = 0; i < NS; i++)
        ASSERT_OK(runner_start(&r[i], rt, prompts[i], lens[i], GEN, plans[i], 0, &got[i], &err));
    for (int busy = 1; busy;) {
        eng_step_item it[NS];
        int idx[NS], n = 0;
        int32_t budget = rt->logit_rows - NS; /* every position's logits: keep under the rows */
        for (int i = 0; i < NS; i++)
            if (!runner_done(&r[i])) {
                idx[n] = i;
                it[n] = runner_item(&r[i]);
                if (it[n].max_tokens > 1 + budget) it[n].max_tokens = 1 + budget;
                budget -= it[n].max_tokens - 1;
                n++;
            }
        if (!(busy = n > 0)) break;
        ASSERT_OK(eng_step_run(rt->cx, rt->kv, it, n, rt->ns, rt->logits, rt->logit_rows, &err));
        const float *rows = rt->logits;
        for (int k = 0; k < n; k++) {
            ASSERT_OK(runner_after(&r[idx[k]], rt, &it[k], rows, &err));
            rows += (size_t)vocab * (size_t)it[k].n_logits;
        }
        ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
    }
    for (int i = 0; i < NS; i++) {
        eng_seq_free(r[i].s, rt->kv);
        int same = same_from(&alone[i], &got[i], 0, vocab);
        run_free(&alone[i]);
        run_free(&got[i]);
        if (!same) TEST_FAIL_("sequence %d (%d tokens) differs batched", i, (int)lens[i]);
    }
    ASSERT_EQ_I64(kv_pool_get_stats(rt->kv).state.n_active, 0);
    eng_runtime_close(rt);
}

/* ---------------------------------------------------------------- prefix cache */

/* A repeated prompt resumes at its last full block (snapshot at the prompt's
 * end), a prompt sharing a prefix at the deepest common boundary with a
 * snapshot, the next turn of a chat (prompt + the reply + more) at the reply's
 * last boundary; each run equals the cold one bit for bit from the first
 * position it computes. A 20-token prompt that repeats hits 16 tokens. */
static void test_prefix_hits_from_ram(void)
{
    kiln_err err;
    eng_runtime *rt = open_rt(1, 1, 0, &err), *cold = open_rt(1, 1, 0, &err);
    ASSERT_TRUE(rt && cold);
    int64_t vocab = mdl_vocab(rt->model);
    int32_t p[45], q[60], chat[80];
    fill_prompt(p, 45, 7);
    memcpy(q, p, sizeof(int32_t) * 30);
    fill_prompt(q + 30, 30, 8);
    run_out a, b, ref;
    ASSERT_OK(run_one(rt, p, 45, 30, UNEVEN, 1, &a, &err));
    ASSERT_EQ_I64(a.hit, 0);
    /* the same prompt again: 40 tokens (5 blocks) from the prompt-end snapshot */
    ASSERT_OK(run_one(rt, p, 45, 30, WHOLE, 1, &b, &err));
    ASSERT_EQ_I64(b.hit, 40);
    ASSERT_TRUE(same_from(&a, &b, 40, vocab));
    run_free(&b);
    /* a shared 30-token prefix: the deepest common boundary is 24 */
    ASSERT_OK(run_one(rt, q, 60, 20, WHOLE, 1, &b, &err));
    ASSERT_OK(run_one(cold, q, 60, 20, WHOLE, 0, &ref, &err));
    ASSERT_EQ_I64(b.hit, 24);
    ASSERT_TRUE(same_from(&ref, &b, 24, vocab));
    run_free(&b);
    run_free(&ref);
    /* the next turn: p + the 30 generated tokens (the last not yet run) + 5 more;
     * the first run's final snapshot is at 72 = floor(74 / 8) * 8 */
    memcpy(chat, p, sizeof p);
    memcpy(chat + 45, a.toks, sizeof(int32_t) * 30);
    fill_prompt(chat + 75, 5, 9);
    ASSERT_OK(run_one(rt, chat, 80, 10, SEVEN, 1, &b, &err));
    ASSERT_OK(run_one(cold, chat, 80, 10, SEVEN, 0, &ref, &err));
    ASSERT_EQ_I64(b.hit, 72);
    ASSERT_TRUE(same_from(&ref, &b, 72, vocab));
    run_free(&b);
    run_free(&ref);
    /* a 20-token prompt that repeats */
    int32_t t[20];
    fill_prompt(t, 20, 10);
    ASSERT_OK(run_one(rt, t, 20, 5, WHOLE, 1, &ref, &err));
    ASSERT_OK(run_one(rt, t, 20, 5, WHOLE, 1, &b, &err));
    ASSERT_EQ_I64(b.hit, 16);
    ASSERT_TRUE(same_from(&ref, &b, 16, vocab));
    kv_pool_stats st = kv_pool_get_stats(rt->kv);
    ASSERT_EQ_I64(st.state.n_active, 0);
    ASSERT_TRUE(st.state.n_cached > 0);
    run_free(&a);
    run_free(&b);
    run_free(&ref);
    eng_runtime_close(rt);
    eng_runtime_close(cold);
}

/* Without the prefix cache's cadence (state_every -1) a shared prefix first
 * hits nothing, but attach sees KV past the deepest snapshot and the next
 * run snapshots that branch boundary: the third request hits there. */
static void test_branch_boundary_gets_a_snapshot(void)
{
    kiln_err err;
    eng_runtime *rt = open_rt(1, -1, 0, &err);
    ASSERT_TRUE(rt != NULL);
    int64_t vocab = mdl_vocab(rt->model);
    int32_t pa[50], pb[50], pc[50];
    fill_prompt(pa, 50, 20);
    memcpy(pb, pa, sizeof(int32_t) * 35);
    memcpy(pc, pa, sizeof(int32_t) * 35);
    fill_prompt(pb + 35, 15, 21);
    fill_prompt(pc + 35, 15, 22);
    run_out a, b, c, ref;
    ASSERT_OK(run_one(rt, pa, 50, 3, WHOLE, 1, &a, &err));
    ASSERT_OK(run_one(rt, pb, 50, 3, WHOLE, 1, &b, &err));
    ASSERT_EQ_I64(b.hit, 0); /* KV for 32 tokens, but no state there yet */
    ASSERT_OK(run_one(rt, pc, 50, 3, WHOLE, 1, &c, &err));
    ASSERT_EQ_I64(c.hit, 32);
    eng_runtime *cold = open_rt(1, -1, 0, &err);
    ASSERT_TRUE(cold != NULL);
    ASSERT_OK(run_one(cold, pc, 50, 3, WHOLE, 0, &ref, &err));
    ASSERT_TRUE(same_from(&ref, &c, 32, vocab));
    run_free(&a);
    run_free(&b);
    run_free(&c);
    run_free(&ref);
    eng_runtime_close(rt);
    eng_runtime_close(cold);
}

/* Every published block and snapshot written to the tier, the runtime and the
 * tier closed and opened again (a restart): the prompt hits 40 tokens from
 * disk (5 KV blocks + 1 state) and runs bit for bit as cold. */
static void test_prefix_hit_from_the_ssd_tier_after_restart(void)
{
    kiln_err err;
    char sdir[512], cmd[700];
    snprintf(sdir, sizeof sdir, "%s/unit_hybrid_ssd_%d", KILN_BINARY_DIR, (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", sdir);
    ASSERT_TRUE(system(cmd) == 0);
    int32_t p[45];
    fill_prompt(p, 45, 31);
    run_out a, b;
    uint64_t ns = 0;
    for (int round = 0; round < 2; round++) {
        eng_runtime *rt = open_rt(1, 1, 0, &err);
        ASSERT_TRUE(rt != NULL);
        kv_ssd_config sc = kv_ssd_config_default();
        sc.dir = sdir;
        sc.id = (kv_ssd_ident){.model_fp = rt->ns, .kv_format = 0, .tok_fp = 1, .block_tokens = BT};
        kv_ssd *ssd = NULL;
        ASSERT_OK(kv_ssd_open(&sc, &ssd, &err));
        kv_ssd_attach(ssd, rt->kv);
        if (round == 0) {
            ns = rt->ns;
            ASSERT_OK(run_one(rt, p, 45, 20, WHOLE, 1, &a, &err));
            int32_t cur = 0, n_state = 0;
            uint64_t key;
            kv_block_id blk;
            while ((blk = kv_pool_next_published(rt->kv, &cur, &key)) >= 0) {
                size_t n;
                const void *d = kv_pool_block_data(rt->kv, blk, &n);
                ASSERT_TRUE(kv_ssd_put(ssd, KV_SSD_BLOCK, key, d, n) >= 0);
                n_state += n == kv_pool_state_bytes(rt->kv);
            }
            ASSERT_TRUE(n_state >= 2);
            ASSERT_EQ_U64(kv_ssd_flush(ssd, 20000, NULL), 0);
        } else {
            ASSERT_EQ_U64(rt->ns, ns); /* the same model: the same namespace */
            uint64_t hits0 = kv_ssd_get_stats(ssd).hits;
            ASSERT_OK(run_one(rt, p, 45, 20, WHOLE, 1, &b, &err));
            ASSERT_EQ_I64(b.hit, 40);
            ASSERT_EQ_U64(kv_ssd_get_stats(ssd).hits - hits0, 5 * 1 + 1); /* 5 KV + 1 state */
            ASSERT_TRUE(same_from(&a, &b, 40, mdl_vocab(rt->model)));
        }
        kv_ssd_attach(NULL, rt->kv);
        kv_ssd_close(ssd, 5);
        eng_runtime_close(rt);
    }
    ASSERT_TRUE(system(cmd) == 0);
    run_free(&a);
    run_free(&b);
}

/* ---------------------------------------------------------------- preemption, rollback */

/* A sequence preempted mid-decode (eng_seq_drop_kv) re-attaches at its latest
 * snapshot and continues bit for bit. */
static void test_preempted_sequence_resumes(void)
{
    kiln_err err;
    eng_runtime *rt = open_rt(1, -1, 0, &err);
    ASSERT_TRUE(rt != NULL);
    int64_t vocab = mdl_vocab(rt->model);
    int32_t p[37];
    fill_prompt(p, 37, 41);
    run_out a;
    ASSERT_OK(run_one(rt, p, 37, 30, WHOLE, 0, &a, &err));
    eng_seq *s;
    ASSERT_OK(eng_seq_create(p, 37, &s, &err));
    for (int g = 0; g < 30; g++) {
        if (g == 17) { /* preempt: everything goes; published snapshots stay cached */
            eng_seq_drop_kv(s, rt->kv);
            ASSERT_EQ_I64(kv_pool_get_stats(rt->kv).state.n_active, 0);
            int32_t hit = eng_seq_attach_prefix(s, rt->kv, rt->ns);
            ASSERT_EQ_I64(hit, (37 + 16) / BT * BT); /* 48: the latest boundary */
        }
        while (eng_seq_pending(s) > 0) {
            eng_step_item it = {.seq = s, .max_tokens = CHUNK};
            ASSERT_OK(
                eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns, rt->logits, rt->logit_rows, &err));
        }
        ASSERT_TRUE(memcmp(rt->logits, a.rows + (size_t)(36 + g) * vocab, sizeof(float) * vocab) ==
                    0);
        ASSERT_OK(eng_seq_append(s, a.toks[g], &err));
    }
    eng_seq_free(s, rt->kv);
    ASSERT_EQ_I64(kv_pool_get_stats(rt->kv).state.n_active, 0);
    run_free(&a);
    eng_runtime_close(rt);
}

/* Rollback (eng_seq_truncate): back to the latest snapshot, to an older one
 * (published, found by hash) and to the start; replaying the same tokens
 * gives the same logits bit for bit, and different tokens a fresh branch. */
static void test_rollback_replays_from_a_snapshot(void)
{
    kiln_err err;
    eng_runtime *rt = open_rt(1, 2, 0, &err);
    ASSERT_TRUE(rt != NULL);
    int64_t vocab = mdl_vocab(rt->model);
    int32_t p[30];
    fill_prompt(p, 30, 51);
    run_out a;
    ASSERT_OK(run_one(rt, p, 30, 40, WHOLE, 0, &a, &err));
    static const int32_t targets[] = {65, 50, 33, 12, 3};
    for (size_t ti = 0; ti < sizeof targets / sizeof *targets; ti++) {
        eng_seq *s;
        ASSERT_OK(eng_seq_create(p, 30, &s, &err));
        for (int g = 0; g < 40; g++) { /* the run up to its 40th token */
            while (eng_seq_pending(s) > 0) {
                eng_step_item it = {.seq = s, .max_tokens = CHUNK};
                ASSERT_OK(eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns ^ 0x1, rt->logits,
                                       rt->logit_rows, &err));
            }
            if (g < 39) ASSERT_OK(eng_seq_append(s, a.toks[g], &err));
        }
        int32_t n = targets[ti];
        eng_seq_truncate(s, rt->kv, n);
        ASSERT_EQ_I64(s->n_tokens, n);
        ASSERT_TRUE(s->n_cached <= n && s->n_cached % BT == 0);
        /* replay to the same 69 tokens, every row as the first time */
        for (int32_t pos = n; pos < 69; pos++)
            ASSERT_OK(eng_seq_append(s, pos < 30 ? p[pos] : a.toks[pos - 30], &err));
        while (eng_seq_pending(s) > 0) {
            eng_step_item it = {.seq = s, .max_tokens = 5, .all_logits = 1};
            int32_t at = s->n_cached;
            ASSERT_OK(eng_step_run(rt->cx, rt->kv, &it, 1, rt->ns ^ 0x1, rt->logits, rt->logit_rows,
                                   &err));
            if (memcmp(rt->logits, a.rows + (size_t)at * vocab,
                       sizeof(float) * vocab * (size_t)it.n_logits) != 0)
                TEST_FAIL_("rollback to %d: rows from %d differ", (int)n, (int)at);
        }
        eng_seq_free(s, rt->kv);
        ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
    }
    ASSERT_EQ_I64(kv_pool_get_stats(rt->kv).state.n_active, 0);
    run_free(&a);
    eng_runtime_close(rt);
}

/* ---------------------------------------------------------------- accounting */

/* The state is one pool class: kiln fit predicts it (and the KV apart),
 * admission needs a working state and a snapshot's room, a full state
 * class refuses a new sequence with KILN_E_BUDGET, and --kv-quant leaves the
 * state f32 at its size. */
static void test_state_is_accounted(void)
{
    kiln_err err;
    eng_runtime *rt = open_rt(4, 1, 0, &err);
    ASSERT_TRUE(rt != NULL);
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = CTX;
    o.max_seqs = 4;
    o.n_threads = 2;
    o.block_tokens = BT;
    o.max_step_tokens = CHUNK;
    o.state_every = 1;
    eng_fit f;
    ASSERT_OK(eng_fit_model(dir_tiny, &o, &f, &err));
    kv_pool_stats st = kv_pool_get_stats(rt->kv);
    /* 6 DeltaNet layers x ((4-1) x (2*2*16 + 4*16) + 4*16*16) floats */
    ASSERT_EQ_U64(f.state_bytes, 6u * (3u * 128u + 1024u) * 4u);
    ASSERT_EQ_U64(st.state.block_bytes, f.state_bytes);
    ASSERT_EQ_I64(st.state.n_blocks, f.state_blocks);
    ASSERT_EQ_U64(f.state_pool_bytes, f.state_bytes * (uint64_t)st.state.n_blocks);
    ASSERT_EQ_U64(st.bytes, f.kv_pool_bytes);
    ASSERT_EQ_U64(f.state_seq_bytes, 2 * f.state_bytes);
    ASSERT_EQ_I64(f.state_layers, 6);
    ASSERT_EQ_I64(f.state_every, 1);
    ASSERT_EQ_U64(f.kv_bytes_per_token, 2u * 2u * 2u * 32u * 4u); /* 2 full layers */
    ASSERT_TRUE(f.total_bytes >= f.weights_bytes + f.kv_pool_bytes + f.state_pool_bytes);
    eng_runtime_close(rt);
    /* 3 state blocks: one sequence runs (working + a snapshot), a second waits */
    rt = open_rt(2, 1, 3, &err);
    ASSERT_TRUE(rt != NULL);
    ASSERT_TRUE(kv_pool_can_hold(rt->kv, 4));
    int32_t p[20];
    fill_prompt(p, 20, 61);
    eng_seq *a, *b, *c;
    ASSERT_OK(eng_seq_create(p, 20, &a, &err));
    ASSERT_OK(eng_seq_create(p, 20, &b, &err));
    ASSERT_OK(eng_seq_create(p, 20, &c, &err));
    eng_step_item it = {.seq = a, .max_tokens = CHUNK};
    ASSERT_OK(eng_step_run(rt->cx, rt->kv, &it, 1, 0, rt->logits, rt->logit_rows, &err));
    ASSERT_EQ_I64(kv_pool_get_stats(rt->kv).state.n_active, 2); /* working + latest */
    ASSERT_TRUE(!kv_pool_can_hold(rt->kv, 4));
    ASSERT_OK(eng_seq_reserve(b, rt->kv, 20, &err)); /* the last state block */
    ASSERT_CODE(eng_seq_reserve(c, rt->kv, 20, &err), KILN_E_BUDGET);
    ASSERT_EQ_I64(c->n_blocks, 0); /* nothing half-taken */
    eng_seq_free(a, rt->kv);
    eng_seq_free(b, rt->kv);
    eng_seq_free(c, rt->kv);
    ASSERT_EQ_I64(kv_pool_get_stats(rt->kv).state.n_active, 0);
    eng_runtime_close(rt);
    /* 8-bit KV: attention layers' records shrink, the state does not */
    o.kv_quant = KV_QUANT_8;
    eng_fit f8;
    ASSERT_OK(eng_fit_model(dir_tiny, &o, &f8, &err));
    ASSERT_EQ_U64(f8.state_bytes, f.state_bytes);
    ASSERT_TRUE(f8.kv_bytes_per_token < f.kv_bytes_per_token);
}

int main(void)
{
    if (make_model(dir_tiny, sizeof dir_tiny, "tiny", "--arch qwen3_5 --dtype f32")) {
        fprintf(stderr, "cannot make the test model\n");
        return 1;
    }
    RUN(test_chunking_is_bitwise);
    RUN(test_batched_beside_seven_rows);
    RUN(test_prefix_hits_from_ram);
    RUN(test_branch_boundary_gets_a_snapshot);
    RUN(test_prefix_hit_from_the_ssd_tier_after_restart);
    RUN(test_preempted_sequence_resumes);
    RUN(test_rollback_replays_from_a_snapshot);
    RUN(test_state_is_accounted);
    return TEST_DONE();
}
