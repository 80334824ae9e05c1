/*
 * test_eng_draft.c — draft-model speculative decoding (eng_draft.h,
 * docs/speculative.md): the vocabulary check (same model: accepted; another
 * size or one token's bytes changed: refused naming the id); output identity
 * with a drafter that is the target itself (every greedy draft accepted) and
 * with a different model (the target's first two layers: some accepted,
 * many rejected) — 8 mixed rows (greedy, temperatures, top_p/top_k/min_p,
 * penalties, logit_bias, a stop string, max_tokens inside a draft, logprobs)
 * plus grammar rows and rows with drafting off, alone and together, equal
 * to drafting off token for token and logprob for logprob; pool counts of
 * the target after a run equal a plain run's and the drafter's pool holds
 * nothing active; 8-bit quantized KV in both pools keeps identity; so do
 * a long prompt's chunked catch-up and preemption in a small pool; a
 * cancelled drafting request frees both pools; a request for "draft"
 * without a draft model is refused;
 * --memory-budget planning counts the draft model.
 */
#include "engine/eng_admit.h"
#include "engine/eng_draft.h"
#include "engine/eng_engine.h"
#include "eng_collect.h"
#include "grammar/gr.h"
#include "test_model.h"
#include "tokenizer/tok.h"
#include "weights/wt_set.h"

#include <jansson.h>

static char target_dir[512], half_dir[512], bigvocab_dir[512], badtok_dir[512];

/* The target (4 layers), its first two layers (same seed: the same tensors),
 * one with a larger vocabulary, and a copy of the target whose tokenizer
 * swaps the ids of tokens 300 and 301. */
static int make_models(void)
{
    if (tm_make_model(target_dir, sizeof target_dir, "unit-draft-target", "--arch llama --dtype f32 --shape small") ||
        tm_make_model(half_dir, sizeof half_dir, "unit-draft-half",
                   "--arch llama --dtype f32 --shape small --layers 2") ||
        tm_make_model(bigvocab_dir, sizeof bigvocab_dir, "unit-draft-bigvocab",
                   "--arch llama --dtype f32 --shape tiny --vocab 1024"))
        return -1;
    snprintf(badtok_dir, sizeof badtok_dir, "%s/test-models/unit-draft-badtok", KILN_BINARY_DIR);
    char cmd[3000];
    snprintf(cmd, sizeof cmd,
             "test -f '%s/tokenizer.json' || (rm -rf '%s' && cp -r '%s' '%s' && /usr/bin/python3 -c "
             "\"import json,sys; p=sys.argv[1]+'/tokenizer.json'; t=json.load(open(p)); "
             "v=t['model']['vocab']; a=[k for k,i in v.items() if i==300][0]; "
             "b=[k for k,i in v.items() if i==301][0]; v[a]=301; v[b]=300; "
             "json.dump(t,open(p,'w'))\" '%s')",
             badtok_dir, badtok_dir, target_dir, badtok_dir, badtok_dir);
    return system(cmd);
}

/* ---------------------------------------------------------------- vocabulary */

static void test_vocab_check(void)
{
    ASSERT_TRUE(make_models() == 0);
    kiln_err err;
    tok_tokenizer *a, *b, *c, *d;
    ASSERT_OK(tok_load(target_dir, &a, &err));
    ASSERT_OK(tok_load(half_dir, &b, &err));
    ASSERT_OK(tok_load(bigvocab_dir, &c, &err));
    ASSERT_OK(tok_load(badtok_dir, &d, &err));
    int32_t n = tok_vocab_size(a);
    ASSERT_OK(eng_draft_check_vocab(a, n, b, n, &err));
    ASSERT_CODE(eng_draft_check_vocab(a, n, c, 1024, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "1024") != NULL);
    ASSERT_CODE(eng_draft_check_vocab(a, n, d, n, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "token id 300 ") != NULL);
    size_t l301 = 0;
    const char *p301 = tok_token_to_piece(a, 301, &l301);
    ASSERT_TRUE(p301 && l301 > 0 && strstr(err.msg, p301) != NULL); /* the piece it has there */
    /* opening refuses it too, before any request */
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 256;
    o.n_threads = 1;
    eng_runtime *rt;
    ASSERT_OK(eng_runtime_open(target_dir, &o, &rt, &err));
    eng_draft *dr = NULL;
    ASSERT_CODE(eng_draft_open(badtok_dir, rt, a, 0, &dr, &err), KILN_E_INVALID);
    ASSERT_TRUE(dr == NULL && strstr(err.msg, "token id 300 ") != NULL);
    ASSERT_CODE(eng_draft_open(bigvocab_dir, rt, a, 0, &dr, &err), KILN_E_INVALID);
    ASSERT_OK(eng_draft_open(half_dir, rt, a, 0, &dr, &err));
    eng_draft_info di = eng_draft_get_info(dr);
    ASSERT_EQ_I64(di.layers, 2);
    ASSERT_EQ_I64(di.kv.n_blocks, rt->o.n_blocks); /* one draft block per target block */
    eng_draft_close(dr);
    eng_runtime_close(rt);
    tok_destroy(a);
    tok_destroy(b);
    tok_destroy(c);
    tok_destroy(d);
}

/* ---------------------------------------------------------------- identity */

static eng_runtime *rt;
static tok_tokenizer *tok;
static eng_draft *draft;
static kv_quant_mode kvq = KV_QUANT_OFF; /* the target's KV format (the drafter follows it) */
static int32_t nblocks = 0;              /* the pools' size (0: batch x ctx) */

/* An engine on the target with drafter ddir (NULL: none). */
static eng_engine *start(const char *ddir, int adaptive)
{
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 512;
    o.max_seqs = 8;
    o.n_threads = 1;
    o.block_tokens = 8;
    o.max_step_tokens = 64;
    o.kv_quant = kvq;
    o.n_blocks = nblocks;
    if (eng_runtime_open(target_dir, &o, &rt, &err)) return NULL;
    if (tok_load(target_dir, &tok, &err)) return NULL;
    draft = NULL;
    if (ddir && eng_draft_open(ddir, rt, tok, 0, &draft, &err)) {
        fprintf(stderr, "draft: %s\n", err.msg);
        return NULL;
    }
    eng_engine_opts eo = eng_engine_opts_default();
    eo.max_queue = 64;
    eo.prefill_chunk = 16;
    eo.max_stall_s = 0;
    eo.spec.method = ENG_SPEC_OFF;
    eo.spec.max_draft = 5;
    eo.spec.adaptive = adaptive;
    eo.draft = draft;
    eng_engine *e;
    if (eng_engine_start(rt, tok, &eo, &e, &err)) return NULL;
    return e;
}

static void stop_all(eng_engine *e)
{
    eng_engine_stop(e);
    eng_draft_close(draft);
    eng_runtime_close(rt);
    tok_destroy(tok);
    rt = NULL;
    tok = NULL;
    draft = NULL;
}

static void run_all(eng_engine *e, eng_params *ps, int n, int together, collected *out)
{
    kiln_err err;
    eng_handle *hs[16];
    for (int i = 0; i < n; i++) {
        ASSERT_OK(eng_submit(e, &ps[i], &hs[i], &err));
        if (!together) {
            collect(hs[i], &out[i]);
            eng_handle_release(hs[i]);
        }
    }
    if (together)
        for (int i = 0; i < n; i++) {
            collect(hs[i], &out[i]);
            eng_handle_release(hs[i]);
        }
}

static int32_t prompt[48];

static void mixed_params(eng_params *ps, const eng_bias *bias, gr_grammar *g1, gr_grammar *g2)
{
    for (int32_t i = 0; i < 48; i++)
        prompt[i] = 3 + (i * 37) % 23;
    for (int i = 0; i < 10; i++) {
        ps[i] = eng_params_default();
        ps[i].prompt = prompt;
        ps[i].n_prompt = 40 + i % 8; /* shared prefixes: prefix-cache hits in the target */
        ps[i].max_tokens = 60;
        ps[i].ignore_eos = true;
        ps[i].want_logprobs = true;
        ps[i].sp.seed = 100 + (uint64_t)i;
    }
    ps[1].sp.temperature = 0.3f;
    ps[2].sp.temperature = 0.8f;
    ps[2].sp.top_p = 0.9f;
    ps[3].sp.temperature = 0.7f;
    ps[3].sp.top_k = 5;
    ps[3].sp.repetition_penalty = 1.2f;
    ps[4].sp.temperature = 1.2f;
    ps[4].sp.min_p = 0.1f;
    ps[5].sp.presence_penalty = 0.4f; /* greedy with penalties */
    ps[5].sp.frequency_penalty = 0.3f;
    ps[5].sp.top_logprobs = 3;
    ps[6].sp.logit_bias = bias;
    ps[6].sp.n_bias = 1;
    ps[6].stop[0] = "zz-never";
    ps[6].n_stop = 1;
    ps[7].max_tokens = 7; /* max_tokens inside a drafted run */
    ps[8].grammar = g1;   /* constrained, greedy */
    ps[8].ignore_eos = false;
    ps[9].grammar = g2; /* constrained, sampled */
    ps[9].sp.temperature = 0.7f;
    ps[9].ignore_eos = false;
}

/* Reference: all alone with drafting off. Then alone with drafting on (the
 * draft rows), then all 10 together with rows 3 and 6 not drafting. */
static void check_identity(eng_engine *e, eng_params *ps, int n, collected *alone)
{
    collected ref[16], together[16];
    for (int i = 0; i < n; i++)
        ps[i].spec = ENG_SPEC_OFF;
    run_all(e, ps, n, 0, ref);
    ASSERT_EQ_U64(eng_get_stats(e).spec.drafted, 0);
    for (int i = 0; i < n; i++)
        ps[i].spec = ENG_SPEC_DRAFT;
    run_all(e, ps, n, 0, alone);
    ps[3].spec = ENG_SPEC_OFF;
    ps[6].spec = ENG_SPEC_OFF;
    run_all(e, ps, n, 1, together);
    for (int i = 0; i < n; i++) {
        ASSERT_TRUE(ref[i].n_toks > 0);
        if (!same(&ref[i], &alone[i]) || !same(&ref[i], &together[i]))
            fprintf(stderr, "request %d differs: %d / %d / %d tokens\n", i, ref[i].n_toks,
                    alone[i].n_toks, together[i].n_toks);
        ASSERT_TRUE(same(&ref[i], &alone[i]));
        ASSERT_TRUE(same(&ref[i], &together[i]));
        ASSERT_EQ_I64(ref[i].accepted + ref[i].rejected, 0);
        if (i == 3 || i == 6) ASSERT_EQ_I64(together[i].accepted + together[i].rejected, 0);
        if (getenv("SPEC_DEBUG"))
            fprintf(stderr, "  row %d: %d toks acc %d rej %d / together acc %d rej %d\n", i,
                    alone[i].n_toks, alone[i].accepted, alone[i].rejected, together[i].accepted,
                    together[i].rejected);
    }
    eng_stats st = eng_get_stats(e);
    ASSERT_EQ_I64(st.kv.n_active, 0);
    ASSERT_TRUE(st.draft_on);
    ASSERT_EQ_I64(st.draft.kv.n_active, 0); /* every draft sequence freed */
    ASSERT_EQ_I64(kv_pool_check(eng_draft_runtime(draft)->kv), 0);
    ASSERT_EQ_U64(st.spec.emitted, st.spec.accepted + st.spec.rows);
    /* only draft-model rows drafted: the by-method counters are the totals */
    ASSERT_EQ_U64(st.spec_by[ENG_SPEC_DRAFT].accepted, st.spec.accepted);
    ASSERT_EQ_U64(st.spec_by[ENG_SPEC_DRAFT].drafted, st.spec.drafted);
    ASSERT_EQ_U64(st.spec_by[ENG_SPEC_NGRAM].drafted, 0);
    /* (with the adaptive rules a slow machine may decline every draft) */
    ASSERT_TRUE(st.draft.drafted >= st.spec.drafted);
    ASSERT_TRUE(st.spec.drafted == 0 || st.draft.forwards > 0);
    fprintf(stderr, "  drafted %llu accepted %llu rows %llu draft forwards %llu catch-up %llu\n",
            (unsigned long long)st.spec.drafted, (unsigned long long)st.spec.accepted,
            (unsigned long long)st.spec.rows, (unsigned long long)st.draft.forwards,
            (unsigned long long)st.draft.catchup_tokens);
}

static void grammars(gr_grammar **g1, gr_grammar **g2)
{
    kiln_err err;
    gr_options go = gr_options_default();
    const char *gbnf = "root ::= s \", \" s \", \" s \", \" s (\".\" | \"!\")\n"
                       "s ::= \"the cat sat on the \" (\"mat\" | \"red hat\")";
    ASSERT_OK(gr_compile_gbnf(gbnf, strlen(gbnf), &go, g1, &err));
    json_t *sch = json_loads("{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\","
                             "\"blue\"]},\"minItems\":1,\"maxItems\":6}",
                             0, NULL);
    go.json_ws_max = 2;
    ASSERT_OK(gr_compile_json_schema(sch, &go, g2, &err));
    json_decref(sch);
}

/* The target drafting for itself: the draft model's argmax is the target's
 * (same weights, batch-invariant kernels), so a greedy row never rejects. */
static void test_identity_self_draft(void)
{
    ASSERT_TRUE(make_models() == 0);
    for (int adaptive = 0; adaptive < 2; adaptive++) {
        eng_engine *e = start(target_dir, adaptive);
        ASSERT_TRUE(e != NULL);
        gr_grammar *g1, *g2;
        grammars(&g1, &g2);
        eng_bias bias = {40, 2.0f};
        eng_params ps[10];
        mixed_params(ps, &bias, g1, g2);
        collected alone[16];
        check_identity(e, ps, 10, alone);
        if (!adaptive) {
            ASSERT_TRUE(alone[0].accepted >= 40); /* greedy: everything but the last steps */
            ASSERT_EQ_I64(alone[0].rejected, 0);
            ASSERT_EQ_I64(alone[7].rejected, 0);
            /* the constrained greedy row drafts under its grammar's mask: the
             * target's own masked argmax, every time */
            ASSERT_TRUE(alone[8].accepted >= 30);
            ASSERT_EQ_I64(alone[8].rejected, 0);
            ASSERT_TRUE(alone[9].accepted + alone[9].rejected > 0); /* the JSON Schema row drafts */
        }
        gr_grammar_release(g1);
        gr_grammar_release(g2);
        stop_all(e);
    }
}

/* A different drafter (the target's first two layers): identity whatever it
 * proposes; some drafts are rejected. */
static void test_identity_other_draft(void)
{
    ASSERT_TRUE(make_models() == 0);
    eng_engine *e = start(half_dir, 0);
    ASSERT_TRUE(e != NULL);
    gr_grammar *g1, *g2;
    grammars(&g1, &g2);
    eng_bias bias = {40, 2.0f};
    eng_params ps[10];
    mixed_params(ps, &bias, g1, g2);
    collected alone[16];
    check_identity(e, ps, 10, alone);
    eng_stats st = eng_get_stats(e);
    ASSERT_TRUE(st.spec.drafted > st.spec.accepted); /* it does not know the target's answers */
    ASSERT_TRUE(alone[8].accepted > 0); /* under the grammar's mask it often agrees */
    gr_grammar_release(g1);
    gr_grammar_release(g2);
    stop_all(e);
}

/* Quantized KV (8-bit, both models): the drafter's pool is quantized too;
 * identity holds, and the self-drafter's greedy rows still reject nothing
 * (its KV is the target's, bit for bit). */
static void test_identity_quantized_kv(void)
{
    ASSERT_TRUE(make_models() == 0);
    kvq = KV_QUANT_8;
    eng_engine *e = start(target_dir, 0);
    kvq = KV_QUANT_OFF;
    ASSERT_TRUE(e != NULL);
    char desc[128];
    kv_format_describe(&eng_draft_runtime(draft)->kv_fmt, desc, sizeof desc);
    ASSERT_TRUE(strstr(desc, "q8") != NULL);
    eng_bias bias = {40, 2.0f};
    eng_params ps[10];
    mixed_params(ps, &bias, NULL, NULL);
    collected alone[16];
    check_identity(e, ps, 8, alone);
    ASSERT_TRUE(alone[0].accepted >= 40);
    ASSERT_EQ_I64(alone[0].rejected, 0);
    stop_all(e);
}

/* A prompt longer than the step's chunk (300 tokens, 64 a step): the draft
 * sequence catches up one chunk per step (deferred, no draft meanwhile), then
 * drafts; the output equals drafting off. */
static void test_long_prompt_catch_up_is_chunked(void)
{
    ASSERT_TRUE(make_models() == 0);
    eng_engine *e = start(target_dir, 0);
    ASSERT_TRUE(e != NULL);
    static int32_t longp[300];
    for (int32_t i = 0; i < 300; i++)
        longp[i] = 3 + (i * 53) % 29;
    eng_params p = eng_params_default();
    p.prompt = longp;
    p.n_prompt = 300;
    p.max_tokens = 40;
    p.ignore_eos = true;
    p.want_logprobs = true;
    collected ref, got;
    p.spec = ENG_SPEC_OFF;
    run_all(e, &p, 1, 0, &ref);
    p.spec = ENG_SPEC_DRAFT;
    run_all(e, &p, 1, 0, &got);
    ASSERT_TRUE(same(&ref, &got));
    eng_stats st = eng_get_stats(e);
    ASSERT_EQ_U64(st.draft.deferred_rows, 4); /* 64 + 64 + 64 + 64 + the last 44 with a draft */
    ASSERT_TRUE(got.accepted >= 25 && got.rejected == 0);
    stop_all(e);
}

/* A pool too small for the batch (40 blocks of 8 for 8 rows of ~107
 * positions): rows are preempted and resumed, their draft sequences dropped
 * and caught up again, drafts that find no room in the draft pool skipped;
 * the output still equals drafting off, and nothing is held at the end. */
static void test_identity_under_preemption(void)
{
    ASSERT_TRUE(make_models() == 0);
    nblocks = 40;
    eng_engine *e = start(target_dir, 0);
    nblocks = 0;
    ASSERT_TRUE(e != NULL);
    eng_bias bias = {40, 2.0f};
    eng_params ps[10];
    mixed_params(ps, &bias, NULL, NULL);
    collected alone[16];
    check_identity(e, ps, 8, alone);
    eng_stats st = eng_get_stats(e);
    ASSERT_TRUE(st.preemptions > 0);
    ASSERT_TRUE(st.spec.accepted > 0);
    fprintf(stderr, "  preemptions %llu, draft rows dropped for room %llu\n",
            (unsigned long long)st.preemptions, (unsigned long long)st.draft.dropped_rows);
    stop_all(e);
}

/* A request cancelled while it drafts: its target and draft sequences go. */
static void test_cancel_while_drafting_frees_both_pools(void)
{
    ASSERT_TRUE(make_models() == 0);
    eng_engine *e = start(target_dir, 0);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    eng_params ps[10];
    mixed_params(ps, NULL, NULL, NULL); /* fills the prompt */
    eng_params p = eng_params_default();
    p.prompt = prompt;
    p.n_prompt = 40;
    p.max_tokens = 400;
    p.ignore_eos = true;
    p.spec = ENG_SPEC_DRAFT;
    eng_handle *h;
    ASSERT_OK(eng_submit(e, &p, &h, &err));
    eng_event ev;
    for (int i = 0; i < 20; i++) {
        ASSERT_EQ_I64(eng_handle_next(h, &ev, 60000), 0);
        eng_event_clear(&ev);
    }
    eng_handle_release(h); /* gone between two verifications */
    eng_stats st;
    for (int i = 0; i < 3000; i++) {
        st = eng_get_stats(e);
        if (st.requests_finished == 1) break;
        usleep(10000);
    }
    ASSERT_EQ_I64(st.requests_cancelled, 1);
    ASSERT_TRUE(st.spec.drafted > 0);
    ASSERT_EQ_I64(st.kv.n_active, 0);
    ASSERT_EQ_I64(st.draft.kv.n_active, 0);
    stop_all(e);
}

/* The target's pool after a run equals a plain run's (rejected drafts'
 * blocks back, the draft model's K/V never in it); the drafter's pool holds
 * nothing active and fits: no row was dropped for room. */
static void test_pool_counts_equal_a_plain_run(void)
{
    ASSERT_TRUE(make_models() == 0);
    kv_pool_stats kv[2];
    for (int on = 0; on < 2; on++) {
        eng_engine *e = start(on ? half_dir : NULL, 0);
        ASSERT_TRUE(e != NULL);
        eng_bias bias = {40, 2.0f};
        eng_params ps[10];
        mixed_params(ps, &bias, NULL, NULL);
        for (int i = 0; i < 8; i++)
            ps[i].spec = on ? ENG_SPEC_DRAFT : ENG_SPEC_OFF;
        collected out[8];
        run_all(e, ps, 8, 1, out);
        eng_stats st = eng_get_stats(e);
        kv[on] = st.kv;
        ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
        if (on) {
            ASSERT_TRUE(st.spec.drafted > 0);
            ASSERT_EQ_I64(st.draft.kv.n_active, 0);
            ASSERT_EQ_U64(st.draft.dropped_rows, 0);
        } else {
            kiln_err err;
            eng_handle *h;
            ps[0].spec = ENG_SPEC_DRAFT; /* no draft model on this engine */
            ASSERT_CODE(eng_submit(e, &ps[0], &h, &err), KILN_E_INVALID);
            ASSERT_TRUE(strstr(err.msg, "draft model") != NULL);
        }
        stop_all(e);
    }
    ASSERT_EQ_I64(kv[0].n_free, kv[1].n_free);
    ASSERT_EQ_I64(kv[0].n_cached, kv[1].n_cached);
    ASSERT_EQ_I64(kv[1].n_active, 0);
}

/* --memory-budget: the draft model's weights and transients come off the
 * budget first and each KV block costs its draft block too, so the pool is
 * smaller, and the plan's total (draft included) stays inside the budget. */
static void test_budget_counts_the_draft_model(void)
{
    ASSERT_TRUE(make_models() == 0);
    kiln_err err;
    wt_config c;
    ASSERT_OK(wt_config_load(target_dir, &c, &err));
    wt_set *ws;
    ASSERT_OK(wt_set_open(target_dir, &ws, &err));
    uint64_t w = mdl_weights_used_bytes(&c, ws);
    wt_set_close(ws);
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 1024;
    o.n_threads = 2;
    o.max_seqs = 4;
    eng_runtime_opts r = eng_runtime_resolve(&c, &o);
    eng_draft_cost dc;
    ASSERT_OK(eng_draft_cost_of(half_dir, &r, &dc, &err));
    wt_config hc;
    ASSERT_OK(wt_config_load(half_dir, &hc, &err));
    ASSERT_OK(wt_set_open(half_dir, &ws, &err));
    ASSERT_EQ_U64(dc.weights_bytes, mdl_weights_used_bytes(&hc, ws));
    wt_set_close(ws);
    wt_config_free(&hc);
    ASSERT_TRUE(dc.fixed_bytes > dc.weights_bytes && dc.block_bytes > 0);
    eng_admit_in in = eng_admit_in_default();
    eng_admit_plan p0, p1;
    ASSERT_OK(eng_admit_compute(&c, w, &o, &in, &p0, &err)); /* no budget: batch x ctx */
    /* the plain plan with room to spare for the draft model's fixed part and 50 blocks */
    in.budget_bytes = p0.fit.total_bytes + dc.fixed_bytes + 50 * dc.block_bytes;
    ASSERT_OK(eng_admit_compute(&c, w, &o, &in, &p0, &err));
    in.draft_fixed_bytes = dc.fixed_bytes;
    in.draft_block_bytes = dc.block_bytes;
    ASSERT_OK(eng_admit_compute(&c, w, &o, &in, &p1, &err));
    ASSERT_EQ_U64(p0.fit.draft_bytes, 0);
    ASSERT_EQ_U64(p1.fit.draft_bytes,
                  dc.fixed_bytes + (uint64_t)p1.n_blocks * dc.block_bytes);
    ASSERT_TRUE(p1.n_blocks < p0.n_blocks || p1.ctx < p0.ctx);
    ASSERT_TRUE(p1.fit.total_bytes <= in.budget_bytes);
    /* a budget the draft model alone eats is refused */
    in.budget_bytes = dc.fixed_bytes;
    ASSERT_CODE(eng_admit_compute(&c, w, &o, &in, &p1, &err), KILN_E_BUDGET);
    wt_config_free(&c);
}

int main(void)
{
    RUN(test_vocab_check);
    RUN(test_identity_self_draft);
    RUN(test_identity_other_draft);
    RUN(test_identity_quantized_kv);
    RUN(test_long_prompt_catch_up_is_chunked);
    RUN(test_identity_under_preemption);
    RUN(test_cancel_while_drafting_frees_both_pools);
    RUN(test_pool_counts_equal_a_plain_run);
    RUN(test_budget_counts_the_draft_model);
    return TEST_DONE();
}
