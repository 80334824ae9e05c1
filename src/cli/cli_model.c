/*
 * cli_model.c — verbs that run a model: generate, logits, bench, info.
 */
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "engine/eng_runtime.h"
#include "engine/eng_fit.h"
#include "kernels/kn_cpu.h"
#include "tokenizer/tok.h"
#include "util/plat.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNTIME_FLAGS(o, threads, ctx)                                                             \
    {"threads", CLI_INT, &threads, "N", "compute threads (default: all CPUs)", 0},                 \
        {"ctx", CLI_INT, &ctx, "N", "context length in tokens (default: min(model, 4096))", 0},    \
        CLI_KV_FLAGS(kvf)

static eng_runtime_opts runtime_opts(int64_t threads, int64_t ctx, int32_t max_seqs)
{
    eng_runtime_opts o = eng_runtime_opts_default();
    o.n_threads = (int)threads;
    o.ctx = (int32_t)ctx;
    o.max_seqs = max_seqs;
    o.isa = getenv("KILN_ISA");
    const char *fz = getenv("KILN_FUSED"); /* "0": the unfused step, for A/B timing */
    o.unfused = fz && strcmp(fz, "0") == 0;
    return o;
}

/* ---------------------------------------------------------------- generate */

typedef struct {
    int first;
    tok_stream *ts; /* NULL: print ids */
} gen_print;

static int print_token(void *user, int32_t tok, const eng_sample_out *so)
{
    gen_print *g = user;
    if (g->ts) {
        const char *t;
        size_t n;
        if (tok_stream_push(g->ts, tok, &t, &n, NULL) == KILN_OK) fwrite(t, 1, n, stdout);
    } else {
        printf(g->first ? "%d" : ",%d", (int)tok);
    }
    g->first = 0;
    fflush(stdout);
    return 0;
}

/* Encodes a text prompt with the model's tokenizer (BOS as the tokenizer adds it). */
static int encode_prompt(const tok_tokenizer *t, const char *prompt, int32_t **ids, int32_t *n)
{
    kiln_err err;
    size_t nn = 0;
    if (tok_encode(t, prompt, strlen(prompt), TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, ids, &nn, &err))
        return cli_fail("generate", &err);
    if (nn == 0) {
        fprintf(stderr, "kiln generate: the prompt encodes to no tokens\n");
        return 2;
    }
    *n = (int32_t)nn;
    return 0;
}

int cli_generate(int argc, char **argv)
{
    const char *model = NULL, *tokens = NULL, *prompt = NULL;
    int64_t max_tokens = 64, top_k = 0, seed = 0, threads = 0, ctx = 0;
    double temp = 0.0, top_p = 1.0, min_p = 0.0, rep = 1.0;
    int ids = 0, ignore_eos = 0;
    cli_kv_flags kvf = {0};
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "model snapshot folder (required)", 0},
        {"prompt", CLI_STR, &prompt, "TEXT", "prompt text (tokenized with the model's tokenizer)", 0},
        {"tokens", CLI_STR, &tokens, "IDS", "prompt as token ids, e.g. 1,2,3", 0},
        {"max-tokens", CLI_INT, &max_tokens, "N", "tokens to generate (default 64)", 0},
        {"temperature", CLI_FLOAT, &temp, "T", "sampling temperature; 0 = greedy (default 0)", 0},
        {"top-p", CLI_FLOAT, &top_p, "P", "nucleus sampling mass (default 1)", 0},
        {"top-k", CLI_INT, &top_k, "K", "keep the K most likely tokens; 0 = off", 0},
        {"min-p", CLI_FLOAT, &min_p, "M", "drop tokens below M x the top probability", 0},
        {"repetition-penalty", CLI_FLOAT, &rep, "R", "penalty on recent tokens (1 = off)", 0},
        {"seed", CLI_INT, &seed, "S", "random seed (same seed, same tokens)", 0},
        {"ids", CLI_BOOL, &ids, NULL, "print token ids instead of text", 0},
        {"ignore-eos", CLI_BOOL, &ignore_eos, NULL, "do not stop at an EOS token", 0},
        RUNTIME_FLAGS(o, threads, ctx),
        {0},
    };
    int pr = cli_parse("generate", "Generate a continuation of a prompt.", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model || (!tokens && !prompt)) {
        fprintf(stderr, "kiln generate: --model and --prompt or --tokens are required\n");
        return 2;
    }
    kiln_err err;
    tok_tokenizer *tk = NULL;
    if ((prompt || !ids) && tok_load(model, &tk, &err)) {
        if (prompt) return cli_fail("generate", &err);
        ids = 1; /* no tokenizer: print ids */
    }
    int32_t *ids_in = NULL, n_in = 0;
    int perr = tokens ? cli_parse_ids("generate", tokens, &ids_in, &n_in)
                      : encode_prompt(tk, prompt, &ids_in, &n_in);
    if (perr) {
        tok_destroy(tk);
        return perr;
    }
    eng_runtime_opts o = runtime_opts(threads, ctx, 1);
    eng_runtime *rt;
    if (cli_kv_apply("generate", &kvf, &o)) {
        free(ids_in);
        tok_destroy(tk);
        return 2;
    }
    if (eng_runtime_open(model, &o, &rt, &err)) {
        free(ids_in);
        tok_destroy(tk);
        return cli_fail("generate", &err);
    }
    eng_sampling sp = eng_sampling_default();
    sp.temperature = (float)temp;
    sp.top_p = (float)top_p;
    sp.top_k = (int32_t)top_k;
    sp.min_p = (float)min_p;
    sp.repetition_penalty = (float)rep;
    sp.seed = (uint64_t)seed;
    gen_print g = {.first = 1};
    if (!ids && tok_stream_create(tk, TOK_SKIP_SPECIAL, &g.ts, &err)) {
        free(ids_in);
        tok_destroy(tk);
        eng_runtime_close(rt);
        return cli_fail("generate", &err);
    }
    if (g.ts && prompt) fputs(prompt, stdout);
    eng_gen_result res;
    kiln_code rc = eng_generate(rt, ids_in, n_in, &sp, (int32_t)max_tokens, ignore_eos,
                                print_token, &g, &res, &err);
    if (g.ts) {
        const char *t;
        size_t n;
        if (tok_stream_flush(g.ts, &t, &n, NULL) == KILN_OK) fwrite(t, 1, n, stdout);
        tok_stream_destroy(g.ts);
    }
    printf("\n");
    free(ids_in);
    tok_destroy(tk);
    eng_runtime_close(rt);
    return rc ? cli_fail("generate", &err) : 0;
}

/* ---------------------------------------------------------------- logits */

int cli_logits(int argc, char **argv)
{
    const char *model = NULL, *tokens = NULL, *outp = NULL;
    int all = 0;
    int64_t threads = 0, ctx = 0, chunk = 0;
    cli_kv_flags kvf = {0};
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "model snapshot folder (required)", 0},
        {"tokens", CLI_STR, &tokens, "IDS", "token ids, e.g. 1,2,3 (required)", 0},
        {"all", CLI_BOOL, &all, NULL, "write every position's logits [n_tokens x vocab]", 0},
        {"out", CLI_STR, &outp, "FILE", "output file: raw little-endian float32 (required)", 0},
        {"chunk", CLI_INT, &chunk, "N", "prefill chunk size in tokens (default 512)", 0},
        RUNTIME_FLAGS(o, threads, ctx),
        {0},
    };
    int pr = cli_parse("logits", "Write the logits of a token sequence as raw float32.", flags,
                       argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model || !tokens || !outp) {
        fprintf(stderr, "kiln logits: --model, --tokens and --out are required\n");
        return 2;
    }
    int32_t *ids, n;
    if (cli_parse_ids("logits", tokens, &ids, &n)) return 2;
    kiln_err err;
    eng_runtime_opts o = runtime_opts(threads, ctx, 1);
    if (cli_kv_apply("logits", &kvf, &o)) {
        free(ids);
        return 2;
    }
    if (chunk > 0) o.max_step_tokens = (int32_t)chunk;
    if (o.ctx < n) o.ctx = n; /* logits may run past max_position_embeddings (dynamic rope) */
    eng_runtime *rt = NULL;
    eng_seq *s = NULL;
    float *rows = NULL;
    int ret = 0;
    if (eng_runtime_open(model, &o, &rt, &err) || eng_seq_create(ids, n, &s, &err)) {
        ret = cli_fail("logits", &err);
        goto done;
    }
    int64_t vocab = mdl_vocab(rt->model);
    rows = malloc(sizeof(float) * (size_t)vocab * (size_t)n);
    if (!rows) {
        fprintf(stderr, "kiln logits: out of memory\n");
        ret = 1;
        goto done;
    }
    if (eng_prefill(rt, s, 1, rows, &err)) {
        ret = cli_fail("logits", &err);
        goto done;
    }
    FILE *f = fopen(outp, "wb");
    const float *from = all ? rows : rows + (size_t)(n - 1) * (size_t)vocab;
    size_t count = (size_t)vocab * (all ? (size_t)n : 1);
    if (!f || fwrite(from, sizeof(float), count, f) != count || fclose(f) != 0) {
        fprintf(stderr, "kiln logits: cannot write %s\n", outp);
        ret = 1;
    }
done:
    free(rows);
    free(ids);
    if (rt) eng_seq_free(s, rt->kv);
    eng_runtime_close(rt);
    return ret;
}

/* Pool jobs (barriers) between the first and the last decoded token. */
typedef struct {
    kn_pool *pool;
    uint64_t first, last;
    int n;
} bench_jobs;

static int count_jobs(void *user, int32_t tok, const eng_sample_out *so)
{
    (void)tok;
    (void)so;
    bench_jobs *b = user;
    b->last = kn_pool_jobs(b->pool);
    if (b->n++ == 0) b->first = b->last;
    return 0;
}

/* ---------------------------------------------------------------- bench */

int cli_bench(int argc, char **argv)
{
    const char *model = NULL;
    int64_t pp = 512, tg = 128, threads = 0, ctx = 0;
    int json = 0, no_roofline = 0;
    cli_kv_flags kvf = {0};
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "model snapshot folder (required)", 0},
        {"prompt-tokens", CLI_INT, &pp, "N", "prefill length (default 512)", 0},
        {"gen-tokens", CLI_INT, &tg, "N", "decode length (default 128)", 0},
        {"json", CLI_BOOL, &json, NULL, "print one JSON object", 0},
        {"no-roofline", CLI_BOOL, &no_roofline, NULL,
         "skip the bandwidth probe (512 MiB read) and the roofline fraction", 0},
        RUNTIME_FLAGS(o, threads, ctx),
        {0},
    };
    int pr = cli_parse("bench", "Measure prefill and decode speed.", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model || pp < 1 || tg < 1) {
        fprintf(stderr, "kiln bench: --model is required; lengths must be >= 1\n");
        return 2;
    }
    kiln_err err;
    eng_runtime_opts o = runtime_opts(threads, ctx ? ctx : pp + tg + 1, 1);
    if (cli_kv_apply("bench", &kvf, &o)) return 2;
    eng_runtime *rt;
    if (eng_runtime_open(model, &o, &rt, &err)) return cli_fail("bench", &err);
    int64_t vocab = mdl_vocab(rt->model);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)pp);
    if (!prompt) return 1;
    uint64_t x = 12345; /* deterministic pseudo-random prompt, no prefix-cache hits */
    for (int64_t i = 0; i < pp; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((x >> 33) % (uint64_t)vocab);
    }
    eng_sampling sp = eng_sampling_default();
    eng_gen_result res;
    bench_jobs bj = {.pool = rt->pool};
    kiln_code rc =
        eng_generate(rt, prompt, (int32_t)pp, &sp, (int32_t)tg, 1, count_jobs, &bj, &res, &err);
    free(prompt);
    if (rc) {
        eng_runtime_close(rt);
        return cli_fail("bench", &err);
    }
    double pf = (double)pp / res.prefill_s;
    double jpt = bj.n > 1 ? (double)(bj.last - bj.first) / (bj.n - 1) : 0.0;
    double dec = res.n_generated > 1 ? (double)(res.n_generated - 1) / res.decode_s : 0.0;
    mdl_info info = mdl_get_info(rt->model);
    uint64_t rss = plat_peak_rss_bytes();
    /* the roofline: bytes one decoded token streams at the run's mean context
     * (kiln fit's model of it) over the measured read bandwidth */
    uint64_t bpt = 0;
    double bw = 0, roof = 0, frac = 0;
    if (!no_roofline) {
        eng_runtime_opts fo = o;
        fo.ctx = (int32_t)(2 * (pp + tg / 2));
        eng_fit fit;
        if (eng_fit_model(model, &fo, &fit, &err) == KILN_OK) bpt = fit.read_per_token;
        bw = eng_measure_bandwidth(rt->o.n_threads);
        if (bpt && bw > 0) {
            roof = bw * 1e9 / (double)bpt;
            frac = dec / roof;
        }
    }
    if (json) {
        /* the roofline fields are null when skipped or not measurable */
        char roofj[192] = "\"bytes_per_token\": null, \"bandwidth_gbs\": null, "
                          "\"roofline_tok_s\": null, \"roofline_fraction\": null";
        if (bpt && bw > 0)
            snprintf(roofj, sizeof roofj,
                     "\"bytes_per_token\": %" PRIu64 ", \"bandwidth_gbs\": %.2f, "
                     "\"roofline_tok_s\": %.2f, \"roofline_fraction\": %.3f",
                     bpt, bw, roof, frac);
        printf("{\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"load_s\": %.3f, "
               "\"rss_bytes\": %" PRIu64 ", \"weights_bytes\": %" PRIu64 ", \"threads\": %d, "
               "\"isa\": \"%s\", \"matmul\": \"%s\", \"prompt_tokens\": %" PRId64
               ", \"gen_tokens\": %d, \"quant\": \"%s\", \"kv_format\": \"%s\", "
               "\"pool_jobs_per_token\": %.1f, %s}\n",
               pf, dec, rt->load_s, rss, info.weights_bytes, rt->o.n_threads, kn_isa_name(),
               kn_matmul_mode(), pp, res.n_generated, info.quant_desc, rt->kv_desc, jpt, roofj);
    }
    else {
        printf("model=%s quant=\"%s\" kv=%s threads=%d isa=%s matmul=%s\nprefill: %" PRId64
               " tokens %.3f s "
               "%.2f tok/s\ndecode:  %d tokens %.3f s %.2f tok/s\npool:    %.1f jobs per decoded token\n"
               "load %.3f s, peak RSS %.1f MiB, weights %.1f MiB\n",
               model, info.quant_desc, rt->kv_desc, rt->o.n_threads, kn_isa_name(),
               kn_matmul_mode(), pp, res.prefill_s, pf, res.n_generated, res.decode_s, dec, jpt,
               rt->load_s, (double)rss / 1048576.0, (double)info.weights_bytes / 1048576.0);
        if (bpt && bw > 0)
            printf("roofline: %.1f MB read per token at context %" PRId64 ", bandwidth %.2f GB/s "
                   "-> %.2f tok/s; decode is %.2f of it\n",
                   (double)bpt / 1e6, pp + tg / 2, bw, roof, frac);
    }
    eng_runtime_close(rt);
    return 0;
}

/* ---------------------------------------------------------------- info */

int cli_info(int argc, char **argv)
{
    const char *model = NULL;
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "model snapshot folder (required)", 0},
        {0},
    };
    int pr = cli_parse("info", "Describe a model snapshot.", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model) {
        fprintf(stderr, "kiln info: --model is required\n");
        return 2;
    }
    kiln_err err;
    mdl_model *m;
    if (mdl_load(model, &m, &err)) return cli_fail("info", &err);
    const wt_config *c = mdl_config(m);
    mdl_info in = mdl_get_info(m);
    printf("architecture:   %s (model_type %s)\n", c->architecture, c->model_type);
    printf("parameters:     %" PRIu64 " (%.2f M)\n", in.n_params, (double)in.n_params / 1e6);
    printf("weights:        %s, %" PRIu64 " bytes (%.1f MiB)\n", in.quant_desc, in.weights_bytes,
           (double)in.weights_bytes / 1048576.0);
    printf("layers:         %" PRId64 ", hidden %" PRId64 ", ffn %" PRId64 "\n", c->n_layers,
           c->hidden, c->intermediate);
    printf("heads:          %" PRId64 " query / %" PRId64 " kv, head_dim %" PRId64 "\n", c->n_heads,
           c->n_kv_heads, c->head_dim);
    printf("vocab:          %" PRId64 ", tied embeddings: %s\n", c->vocab,
           c->tie_word_embeddings ? "yes" : "no");
    printf("context:        %" PRId64 " (max_position_embeddings), rope_theta %g\n", c->max_pos,
           c->rope_theta);
    const char *mm = getenv("KILN_MATMUL");
    printf("matmul:         %s (4-bit weights; int8 = activations quantized per 32 columns, "
           "exact = f32 precision: --matmul / KILN_MATMUL)\n",
           mm && *mm ? mm : KN_MATMUL_DEFAULT);
    const mdl_plan *pl = mdl_get_plan(m);
    int32_t stores = 0;
    for (int32_t L = 0; L < pl->n_layers; L++)
        stores += mdl_plan_stores_kv(pl, L);
    printf("kv per token:   %" PRIu64 " bytes (f32, the %d of %d layers that store K/V)\n",
           in.kv_bytes_per_token, (int)stores, (int)pl->n_layers);
    if (c->layer_linear) {
        const mdl_plan *p = mdl_get_plan(m);
        int32_t rot = 0;
        for (int32_t L = 0; L < p->n_layers && !rot; L++)
            if (p->layer[L].mixer == MDL_MIX_ATTN && p->layer[L].rope >= 0)
                rot = p->rope[p->layer[L].rope].rot;
        printf(
            "hybrid:         %d gated DeltaNet + %d gated attention layers (full attention every "
            "%" PRId64 "); RoPE on %d of %" PRId64 " dims\n",
            (int)in.state_layers, (int)in.kv_layers, c->full_attn_interval, (int)rot, c->head_dim);
        printf("deltanet:       %" PRId64 " key heads x %" PRId64 ", %" PRId64
               " value heads x %" PRId64 ", conv kernel %" PRId64 "\n",
               c->lin_k_heads, c->lin_k_dim, c->lin_v_heads, c->lin_v_dim, c->lin_conv);
        printf("state per seq:  %" PRIu64 " bytes (%.2f MiB, f32, any context length)\n",
               in.state_bytes, (double)in.state_bytes / 1048576.0);
        printf("layout:         %s%s\n", in.layout, c->has_vision ? "; vision tower not run" : "");
    }
    char plan[4096];
    mdl_describe_plan(m, plan, sizeof plan);
    printf("layer plan:\n%s", plan);
    char groups[2048];
    mdl_describe_groups(m, groups, sizeof groups);
    printf("tensor groups:\n%s", groups);
    mdl_free(m);
    return 0;
}
