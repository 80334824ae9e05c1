/*
 * test_eng_spec.c — speculative decoding (docs/speculative.md): the n-gram
 * drafter, the per-row draft length and the step cost rule; then on real
 * models, output identity: greedy and seeded sampling (temperatures, top_p,
 * top_k, min_p, penalties, logit_bias, stop strings, max_tokens, logprobs),
 * alone and as 8 mixed rows in one batch, with n-gram drafting are token for
 * token (and logprob for logprob) the output without it; on stories260K and
 * on a sliding-window Mistral and a mixed full/sliding Qwen2; KV pool counts
 * after a run equal a plain run's; a cancelled speculative request frees
 * everything.
 */
#include "engine/eng_engine.h"
#include "eng_collect.h"
#include "engine/eng_spec.h"
#include "grammar/gr.h"
#include "test_model.h"
#include "tokenizer/tok.h"

/* ---------------------------------------------------------------- pure parts */

static void test_ngram_draft_takes_longest_most_recent_match(void)
{
    int32_t out[8];
    /* ... 5 6 7 8 ... 9 6 7 1 2 ... 6 7: the suffix "6 7" last occurred before "1 2" */
    int32_t t[] = {5, 6, 7, 8, 4, 9, 6, 7, 1, 2, 3, 6, 7};
    int32_t n = (int32_t)(sizeof t / sizeof *t);
    ASSERT_EQ_I64(eng_spec_ngram_draft(t, n, 1, 3, 4, out), 4);
    ASSERT_EQ_I64(out[0], 1);
    ASSERT_EQ_I64(out[1], 2);
    ASSERT_EQ_I64(out[2], 3);
    ASSERT_EQ_I64(out[3], 6);
    /* longer suffix wins over a more recent shorter one: "9 6 7" occurs once */
    int32_t u[] = {9, 6, 7, 11, 12, 3, 7, 13, 9, 6, 7};
    ASSERT_EQ_I64(eng_spec_ngram_draft(u, 11, 1, 3, 2, out), 2);
    ASSERT_EQ_I64(out[0], 11);
    ASSERT_EQ_I64(out[1], 12);
    /* min 2: the last token alone (7 ... 7) is not enough */
    int32_t v[] = {1, 7, 2, 3, 7};
    ASSERT_EQ_I64(eng_spec_ngram_draft(v, 5, 2, 3, 4, out), 0);
    ASSERT_EQ_I64(eng_spec_ngram_draft(v, 5, 1, 3, 4, out), 3); /* 2 3 7 */
    ASSERT_EQ_I64(out[2], 7);
    /* continuation cut at the end of the text; k caps it; no match, 0 */
    int32_t w[] = {4, 4};
    ASSERT_EQ_I64(eng_spec_ngram_draft(w, 2, 1, 3, 4, out), 1);
    ASSERT_EQ_I64(eng_spec_ngram_draft(w, 1, 1, 3, 4, out), 0);
    int32_t x[] = {1, 2, 3};
    ASSERT_EQ_I64(eng_spec_ngram_draft(x, 3, 1, 3, 4, out), 0);
    ASSERT_EQ_I64(eng_spec_ngram_draft(t, n, 1, 3, 0, out), 0);
}

static void test_row_length_adapts_to_acceptance(void)
{
    eng_spec_opts o = eng_spec_opts_default();
    eng_spec_row r;
    eng_spec_row_init(&r, &o, 6);
    ASSERT_EQ_I64(r.k, 6);
    eng_spec_row_update(&r, 6, 6, 1); /* broke after 1: ask for 2 next */
    ASSERT_EQ_I64(r.k, 2);
    eng_spec_row_update(&r, 6, 2, 2); /* held: one more */
    ASSERT_EQ_I64(r.k, 3);
    eng_spec_row_update(&r, 6, 1, 1); /* a short draft held: the ask stays */
    ASSERT_EQ_I64(r.k, 3);
    double before = r.rate;
    eng_spec_row_update(&r, 6, 3, 0);
    ASSERT_EQ_I64(r.k, 1);
    ASSERT_TRUE(r.rate < before);
    for (int i = 0; i < 30; i++)
        eng_spec_row_update(&r, 6, 1, 0);
    ASSERT_TRUE(r.rate < 0.01);
    double low = r.rate;
    eng_spec_row_skipped(&r); /* declined rows drift back toward a retry */
    ASSERT_TRUE(r.rate > low && r.rate < 0.5);
}

static void test_cost_rule_drafts_when_bandwidth_bound_only(void)
{
    eng_spec_cost c;
    memset(&c, 0, sizeof c);
    ASSERT_TRUE(eng_spec_cost_at(&c, 4, 0) < 0);
    ASSERT_TRUE(eng_spec_pays(&c, 0, 1, 1, 4, 0.1)); /* nothing measured: try it */
    /* bandwidth-bound: a step of 1..8 tokens costs about the same */
    eng_spec_cost_add(&c, 1, 0.010);
    eng_spec_cost_add(&c, 8, 0.011);
    ASSERT_NEAR_F32(eng_spec_cost_at(&c, 4, 0), 0.010 + 0.001 * 3 / 7, 1e-6);
    ASSERT_TRUE(eng_spec_pays(&c, 0, 1, 1, 4, 0.5));   /* half a token for 10% more time */
    ASSERT_TRUE(!eng_spec_pays(&c, 0, 1, 1, 4, 0.05)); /* 5% more tokens for 10%: no */
    /* a draft model's passes count: 2 tokens for 4 passes of 10 ms on top: no; of 1 ms: yes */
    ASSERT_TRUE(eng_spec_pays_with(&c, 0, 1, 1, 4, 2.0, 0.004));
    ASSERT_TRUE(!eng_spec_pays_with(&c, 0, 1, 1, 4, 2.0, 0.040));
    ASSERT_EQ_I64(eng_spec_pays_with(&c, 0, 1, 1, 4, 0.5, 0), eng_spec_pays(&c, 0, 1, 1, 4, 0.5));
    /* compute-bound: 8 rows decoding at 64 tokens' cost growing linearly */
    eng_spec_cost_add(&c, 64, 0.064);
    eng_spec_cost_add(&c, 96, 0.096);
    ASSERT_TRUE(!eng_spec_pays(&c, 0, 64, 64, 8, 4.0)); /* 6% more work for 12% more time */
    /* past the largest measured size: s_per_token extrapolates */
    ASSERT_NEAR_F32(eng_spec_cost_at(&c, 100, 0.001), 0.100, 1e-6);
    /* EWMA: a new measurement moves the estimate a fifth of the way */
    eng_spec_cost_add(&c, 1, 0.020);
    ASSERT_NEAR_F32(eng_spec_cost_at(&c, 1, 0), 0.012, 1e-6);
}

static void test_method_names_and_opts(void)
{
    kiln_err err;
    eng_spec_method m;
    ASSERT_OK(eng_spec_method_parse("ngram", &m, &err));
    ASSERT_EQ_I64(m, ENG_SPEC_NGRAM);
    ASSERT_OK(eng_spec_method_parse("off", &m, &err));
    ASSERT_EQ_I64(m, ENG_SPEC_OFF);
    ASSERT_OK(eng_spec_method_parse("draft", &m, &err));
    ASSERT_EQ_I64(m, ENG_SPEC_DRAFT);
    ASSERT_STR_EQ(eng_spec_method_name(ENG_SPEC_DRAFT), "draft");
    ASSERT_CODE(eng_spec_method_parse("medusa", &m, &err), KILN_E_INVALID);
    ASSERT_STR_EQ(eng_spec_method_name(ENG_SPEC_NGRAM), "ngram");
    eng_spec_opts o = eng_spec_opts_default();
    ASSERT_OK(eng_spec_opts_validate(&o, &err));
    o.max_draft = ENG_SPEC_MAX_DRAFT + 1;
    ASSERT_CODE(eng_spec_opts_validate(&o, &err), KILN_E_INVALID);
    o = eng_spec_opts_default();
    o.ngram_min = 3;
    o.ngram_max = 2;
    ASSERT_CODE(eng_spec_opts_validate(&o, &err), KILN_E_INVALID);
}

/* ---------------------------------------------------------------- on a model */

static eng_runtime *rt;
static tok_tokenizer *tok;

static eng_engine *start(const char *dir, int max_seqs, eng_spec_method def, int adaptive)
{
    kiln_err err;
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = 512;
    o.max_seqs = max_seqs;
    o.n_threads = 1;
    o.block_tokens = 8;
    o.max_step_tokens = 64;
    if (eng_runtime_open(dir, &o, &rt, &err)) return NULL;
    if (tok_load(dir, &tok, &err)) return NULL;
    eng_engine_opts eo = eng_engine_opts_default();
    eo.max_queue = 64;
    eo.prefill_chunk = 16;
    eo.max_stall_s = 0;
    eo.spec = eng_spec_opts_default();
    eo.spec.method = def;
    eo.spec.max_draft = 5;
    eo.spec.adaptive = adaptive;
    eng_engine *e;
    if (eng_engine_start(rt, tok, &eo, &e, &err)) return NULL;
    return e;
}

static void stop_all(eng_engine *e)
{
    eng_engine_stop(e);
    eng_runtime_close(rt);
    tok_destroy(tok);
    rt = NULL;
    tok = NULL;
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

/* Runs the requests alone without drafting (the reference), alone with
 * n-gram drafting, and all together with it; every output must be the
 * reference's. *accepted: the draft tokens accepted. */
static int32_t row_accepted[16]; /* check_identity: accepted drafts per request (alone) */

static void check_identity(eng_engine *e, eng_params *ps, int n, uint64_t *accepted)
{
    collected ref[16], alone[16], together[16];
    for (int i = 0; i < n; i++)
        ps[i].spec = ENG_SPEC_OFF;
    run_all(e, ps, n, 0, ref);
    eng_stats before = eng_get_stats(e);
    ASSERT_EQ_U64(before.spec.drafted, 0);
    for (int i = 0; i < n; i++)
        ps[i].spec = ENG_SPEC_NGRAM;
    run_all(e, ps, n, 0, alone);
    run_all(e, ps, n, 1, together);
    int32_t acc = 0, rej = 0;
    for (int i = 0; i < n; i++) {
        ASSERT_TRUE(ref[i].n_toks > 0);
        if (!same(&ref[i], &alone[i]) || !same(&ref[i], &together[i]))
            fprintf(stderr, "request %d differs: %d / %d / %d tokens\n", i, ref[i].n_toks,
                    alone[i].n_toks, together[i].n_toks);
        ASSERT_TRUE(same(&ref[i], &alone[i]));
        ASSERT_TRUE(same(&ref[i], &together[i]));
        ASSERT_EQ_I64(ref[i].accepted + ref[i].rejected, 0);
        acc += alone[i].accepted + together[i].accepted;
        row_accepted[i] = alone[i].accepted;
        if (getenv("SPEC_DEBUG"))
            fprintf(stderr, "  row %d: %d toks acc %d rej %d: %.60s\n", i, alone[i].n_toks,
                    alone[i].accepted, alone[i].rejected, alone[i].text);
        rej += alone[i].rejected + together[i].rejected;
    }
    eng_stats st = eng_get_stats(e);
    ASSERT_EQ_I64(st.kv.n_active, 0);
    ASSERT_EQ_U64(st.spec.accepted, (uint64_t)acc);
    ASSERT_TRUE(st.spec.drafted >= st.spec.accepted + (uint64_t)rej);
    ASSERT_EQ_U64(st.spec.emitted, st.spec.accepted + st.spec.rows);
    fprintf(stderr, "  drafted %llu accepted %llu rows %llu\n", (unsigned long long)st.spec.drafted,
            (unsigned long long)st.spec.accepted, (unsigned long long)st.spec.rows);
    *accepted = st.spec.accepted;
}

static char dir[512];

static int skip_if_absent(void)
{
    test_shared_path(dir, sizeof dir, "models/stories260K");
    return !test_path_exists(dir);
}

/* The prompt quotes the model's own greedy continuation, so drafting from it
 * gets accepted (and sampled rows diverge from it: rejections). */
static void quoting_prompt(eng_engine *e, int32_t *p, int32_t cap, int32_t *out_n)
{
    static const int32_t seed_prompt[] = {1, 403, 407, 261, 378, 432};
    eng_params q = eng_params_default();
    q.prompt = seed_prompt;
    q.n_prompt = 6;
    q.max_tokens = 60;
    q.ignore_eos = true;
    collected c;
    run_all(e, &q, 1, 0, &c);
    int32_t n = 0;
    for (int r = 0; r < 2; r++) {
        for (int32_t i = 0; i < 6 && n < cap; i++)
            p[n++] = seed_prompt[i];
        for (int32_t i = 0; i < c.n_toks && n < cap && (r == 0 || i < 8); i++)
            p[n++] = c.toks[i];
    }
    *out_n = n;
}

static void mixed_params(eng_params *ps, const int32_t *prompt, int32_t n, const char *stop,
                         const eng_bias *bias)
{
    for (int i = 0; i < 8; i++) {
        ps[i] = eng_params_default();
        ps[i].prompt = prompt;
        ps[i].n_prompt = n;
        ps[i].max_tokens = 60;
        ps[i].want_logprobs = true;
        ps[i].sp.seed = 100 + (uint64_t)i;
    }
    ps[0].ignore_eos = true;     /* greedy, to the length */
    ps[1].sp.temperature = 0.3f; /* low temperature: mostly the quote */
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
    ps[6].sp.logit_bias = bias; /* greedy, biased, cut by a stop string */
    ps[6].sp.n_bias = 1;
    ps[6].stop[0] = stop;
    ps[6].n_stop = 1;
    ps[7].max_tokens = 7; /* max_tokens inside a drafted run */
    ps[7].ignore_eos = true;
}

static void test_identity_stories260k(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    /* adaptive off: every row drafts max_draft whenever the drafter has tokens */
    for (int adaptive = 0; adaptive < 2; adaptive++) {
        eng_engine *e = start(dir, 8, ENG_SPEC_OFF, adaptive);
        ASSERT_TRUE(e != NULL);
        int32_t prompt[200];
        int32_t n = 0;
        quoting_prompt(e, prompt, 200, &n);
        ASSERT_TRUE(n > 60);
        /* a stop string from the greedy output, some 30 bytes in */
        eng_params g = eng_params_default();
        g.prompt = prompt;
        g.n_prompt = n;
        g.max_tokens = 60;
        collected c;
        run_all(e, &g, 1, 0, &c);
        ASSERT_TRUE(c.text_len > 40);
        char stop[8];
        memcpy(stop, c.text + 30, 5);
        stop[5] = '\0';
        eng_bias bias = {c.toks[3], -3.0f};
        eng_params ps[8];
        mixed_params(ps, prompt, n, stop, &bias);
        uint64_t acc = 0;
        check_identity(e, ps, 8, &acc);
        /* drafting really happened and was accepted (the adaptive rules follow
         * measured step times, which a loaded machine moves: identity only) */
        ASSERT_TRUE(adaptive || acc > 20);
        stop_all(e);
    }
}

/* The pool after a run is the pool after a plain run: same free, cached and
 * active counts (rejected drafts' blocks went back; accepted ones were
 * published as plain decoding publishes them). */
static void test_pool_counts_equal_a_plain_run(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    kv_pool_stats kv[2];
    uint64_t accepted = 0;
    for (int on = 0; on < 2; on++) {
        eng_engine *e = start(dir, 8, on ? ENG_SPEC_NGRAM : ENG_SPEC_OFF, 0);
        ASSERT_TRUE(e != NULL);
        int32_t prompt[200];
        int32_t n = 0;
        quoting_prompt(e, prompt, 200, &n);
        eng_params ps[8];
        static const char *stop = "zz-never";
        eng_bias bias = {5, 0.5f};
        mixed_params(ps, prompt, n, stop, &bias);
        collected out[8];
        run_all(e, ps, 8, 1, out);
        eng_stats st = eng_get_stats(e);
        kv[on] = st.kv;
        accepted = st.spec.accepted;
        ASSERT_EQ_I64(kv_pool_check(rt->kv), 0);
        stop_all(e);
    }
    ASSERT_TRUE(accepted > 0);
    ASSERT_EQ_I64(kv[1].n_active, 0);
    ASSERT_EQ_I64(kv[0].n_free, kv[1].n_free);
    ASSERT_EQ_I64(kv[0].n_cached, kv[1].n_cached);
    ASSERT_EQ_I64(kv[0].n_active, kv[1].n_active);
}

static void test_cancel_during_speculation_frees_everything(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(dir, 4, ENG_SPEC_NGRAM, 0);
    ASSERT_TRUE(e != NULL);
    int32_t prompt[200];
    int32_t n = 0;
    quoting_prompt(e, prompt, 200, &n);
    kiln_err err;
    eng_params p = eng_params_default();
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = 400;
    p.ignore_eos = true;
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
        if (st.requests_finished == 2) break;
        usleep(10000);
    }
    ASSERT_EQ_I64(st.requests_cancelled, 1);
    ASSERT_TRUE(st.spec.drafted > 0);
    ASSERT_EQ_I64(st.kv.n_active, 0);
    ASSERT_EQ_I64(st.running, 0);
    stop_all(e);
}

/* Per request: a request may ask for drafting on a server that does not
 * draft by default (and the reverse), max_draft is range-checked. */
static void test_per_request_method_and_validation(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(dir, 2, ENG_SPEC_OFF, 0);
    ASSERT_TRUE(e != NULL);
    int32_t prompt[200];
    int32_t n = 0;
    quoting_prompt(e, prompt, 200, &n);
    eng_params p = eng_params_default();
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = 40;
    collected c;
    run_all(e, &p, 1, 0, &c); /* the server's default: off */
    ASSERT_EQ_I64(c.accepted + c.rejected, 0);
    p.spec = ENG_SPEC_NGRAM;
    p.spec_max_draft = 2;
    run_all(e, &p, 1, 0, &c);
    ASSERT_TRUE(c.accepted > 0);
    eng_stats st = eng_get_stats(e);
    ASSERT_TRUE(st.spec.drafted <= 2 * st.spec.rows);
    kiln_err err;
    eng_handle *h;
    p.spec_max_draft = ENG_SPEC_MAX_DRAFT + 1;
    ASSERT_CODE(eng_submit(e, &p, &h, &err), KILN_E_INVALID);
    ASSERT_TRUE(strstr(err.msg, "max_draft") != NULL);
    stop_all(e);
}

/* Constrained rows draft what their grammar allows and verify each position
 * under its own mask: a GBNF whose sentences repeat (so n-gram drafts get
 * accepted) and a JSON schema, greedy and sampled, alone and beside free
 * rows, equal drafting off; the drafts really were checked and accepted. */
static void test_identity_with_grammars(void)
{
    if (skip_if_absent()) TEST_SKIP("stories260K absent");
    eng_engine *e = start(dir, 8, ENG_SPEC_OFF, 0);
    ASSERT_TRUE(e != NULL);
    kiln_err err;
    gr_options go = gr_options_default();
    const char *gbnf = "root ::= s \", \" s \", \" s \", \" s \", \" s (\".\" | \"!\")\n"
                       "s ::= \"the cat sat on the \" (\"mat\" | \"red hat\")";
    gr_grammar *g1 = NULL, *g2 = NULL;
    ASSERT_OK(gr_compile_gbnf(gbnf, strlen(gbnf), &go, &g1, &err));
    json_t *sch = json_loads("{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\","
                             "\"blue\"]},\"minItems\":1,\"maxItems\":12}",
                             0, NULL);
    go.json_ws_max = 2;
    ASSERT_OK(gr_compile_json_schema(sch, &go, &g2, &err));
    json_decref(sch);
    int32_t prompt[200];
    int32_t n = 0;
    quoting_prompt(e, prompt, 200, &n);
    eng_bias bias = {5, 0.5f};
    eng_params ps[8];
    mixed_params(ps, prompt, n, "zz-never", &bias);
    for (int i = 0; i < 7; i++) {
        ps[i].max_tokens = 80;
        ps[i].ignore_eos = false;
    }
    ps[0].grammar = g1; /* greedy */
    ps[1].grammar = g1; /* temperature 0.3 */
    ps[2].grammar = g2; /* 0.8, top_p */
    ps[3].grammar = g2; /* 0.7, top_k, penalty */
    ps[5].grammar = g1; /* greedy, penalties */
    ps[7].grammar = g1; /* max_tokens 7 inside a drafted run */
    uint64_t acc = 0;
    check_identity(e, ps, 8, &acc);
    ASSERT_TRUE(acc > 10);
    ASSERT_TRUE(row_accepted[0] > 5); /* the repeating sentence: drafts checked and accepted */
    ASSERT_TRUE(row_accepted[2] + row_accepted[3] > 0);
    gr_grammar_release(g1);
    gr_grammar_release(g2);
    stop_all(e);
}

/* ---------------------------------------------------------------- sliding windows */

/* Generation far past the window: blocks given back while drafting, rolled
 * back across block and window edges; output identical. The random model's
 * greedy text loops, so drafts get accepted. */
static void test_identity_sliding_window(void)
{
    static char dsw[512], dmix[512];
    if (tm_make_model(dsw, sizeof dsw, "unit-spec-w20", "--arch mistral --dtype f32 --sliding-window 20") ||
        tm_make_model(dmix, sizeof dmix, "unit-spec-qwen2-mixed",
                   "--arch qwen2 --dtype f32 --sliding-window 20 --max-window-layers 1")) {
        ASSERT_TRUE(!"cannot make the test models (tools/make-test-model, python3-numpy)");
    }
    const char *dirs[2] = {dsw, dmix};
    for (int k = 0; k < 2; k++) {
        eng_engine *e = start(dirs[k], 8, ENG_SPEC_OFF, 0);
        ASSERT_TRUE(e != NULL);
        int32_t prompt[40];
        for (int32_t i = 0; i < 40; i++)
            prompt[i] = 3 + (i * 37) % 11; /* a repeating pattern */
        eng_bias bias = {7, -1.0f};
        eng_params ps[8];
        mixed_params(ps, prompt, 40, "zz-never", &bias);
        for (int i = 0; i < 8; i++) {
            ps[i].max_tokens = i == 7 ? 7 : 120;
            ps[i].ignore_eos = true;
        }
        uint64_t acc = 0;
        check_identity(e, ps, 8, &acc);
        ASSERT_TRUE(acc > 0);
        stop_all(e);
    }
}

int main(void)
{
    RUN(test_ngram_draft_takes_longest_most_recent_match);
    RUN(test_row_length_adapts_to_acceptance);
    RUN(test_cost_rule_drafts_when_bandwidth_bound_only);
    RUN(test_method_names_and_opts);
    RUN(test_identity_stories260k);
    RUN(test_pool_counts_equal_a_plain_run);
    RUN(test_cancel_during_speculation_frees_everything);
    RUN(test_per_request_method_and_validation);
    RUN(test_identity_with_grammars);
    RUN(test_identity_sliding_window);
    return TEST_DONE();
}
