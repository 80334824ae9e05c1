/*
 * cli_fit.c — `kiln fit`: the memory a model needs for a context and batch,
 * from config.json and the safetensors headers alone, and the largest context
 * a budget allows.
 */
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "engine/eng_fit.h"
#include "weights/wt_set.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static double gib(uint64_t b)
{
    return (double)b / 1073741824.0;
}

int cli_fit(int argc, char **argv)
{
    const char *model = NULL;
    int64_t ctx = 0, batch = 1, threads = 0;
    double budget = 0, bandwidth = 0;
    int json = 0;
    cli_kv_flags kvf = {0};
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "model snapshot folder (required)", 0},
        {"ctx", CLI_INT, &ctx, "N", "context tokens per sequence (default: min(model, 4096))", 0},
        {"batch", CLI_INT, &batch, "B", "sequences decoded together (default 1)", 0},
        {"threads", CLI_INT, &threads, "N", "compute threads (attention scratch per thread)", 0},
        {"budget", CLI_FLOAT, &budget, "GB", "memory budget (decimal GB): report the max context",
         0},
        {"bandwidth", CLI_FLOAT, &bandwidth, "GBS",
         "memory bandwidth for the decode prediction (default: measured, 512 MiB read)", 0},
        {"json", CLI_BOOL, &json, NULL, "print one JSON object", 0},
        CLI_KV_FLAGS(kvf),
        {0},
    };
    int pr = cli_parse("fit",
                       "Predict memory (weights + KV + transients) from headers and config; no weights are read.",
                       flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model || batch < 1 || ctx < 0 || budget < 0) {
        fprintf(stderr, "kiln fit: --model is required; --batch >= 1, --ctx and --budget >= 0\n");
        return 2;
    }
    kiln_err err;
    wt_config c;
    if (wt_config_load(model, &c, &err)) return cli_fail("fit", &err);
    wt_set *ws;
    if (wt_set_open(model, &ws, &err)) {
        wt_config_free(&c);
        return cli_fail("fit", &err);
    }
    eng_runtime_opts o = eng_runtime_opts_default();
    o.ctx = (int32_t)ctx;
    o.max_seqs = (int32_t)batch;
    o.n_threads = (int)threads;
    kv_format kf;
    int bad = cli_kv_apply("fit", &kvf, &o);
    if (!bad && eng_runtime_kv_format(model, &c, &o, &kf, &err)) bad = cli_fail("fit", &err) + 1;
    if (bad) {
        wt_set_close(ws);
        wt_config_free(&c);
        return 2;
    }
    o.kv_fmt = &kf; /* the same format eng_runtime_open resolves */
    eng_fit f;
    eng_fit_compute(&c, wt_set_bytes(ws), &o, &f);
    int32_t max_ctx = budget > 0 ? eng_fit_max_ctx(&c, f.weights_bytes, &f.o, (uint64_t)(budget * 1e9)) : -1;
    if (bandwidth <= 0) bandwidth = eng_measure_bandwidth(f.o.n_threads);
    double tok_s = bandwidth > 0 ? bandwidth * 1e9 / (double)f.read_per_token : 0;
    if (json) {
        printf("{\"weights_bytes\": %" PRIu64 ", \"kv_bytes_per_token\": %" PRIu64
               ", \"kv_pool_bytes\": %" PRIu64 ", \"scratch_bytes\": %" PRIu64
               ", \"logits_bytes\": %" PRIu64 ", \"other_bytes\": %" PRIu64
               ", \"total_bytes\": %" PRIu64 ", \"ctx\": %d, \"batch\": %d, \"threads\": %d"
               ", \"kv_blocks\": %d, \"block_tokens\": %d, \"read_bytes_per_token\": %" PRIu64
               ", \"bandwidth_gb_s\": %.2f, \"predicted_decode_tok_s\": %.2f"
               ", \"kv_format\": \"%s\", \"kv_bytes_per_token_full\": %" PRIu64
               ", \"kv_blocks_full\": %d",
               f.weights_bytes, f.kv_bytes_per_token, f.kv_pool_bytes, f.scratch_bytes,
               f.logits_bytes, f.other_bytes, f.total_bytes, (int)f.o.ctx, (int)f.o.max_seqs,
               f.o.n_threads, (int)f.o.n_blocks, (int)f.o.block_tokens, f.read_per_token, bandwidth,
               tok_s, f.kv_format, f.kv_bytes_per_token_full, (int)f.o.n_blocks_full);
        if (max_ctx >= 0) printf(", \"budget_bytes\": %.0f, \"max_safe_context\": %d", budget * 1e9, (int)max_ctx);
        printf("}\n");
    } else {
        printf("model:            %s (%s)\n", model, c.architecture);
        printf("weights:          %8.3f GiB (as mapped)\n", gib(f.weights_bytes));
        printf("kv per token:     %8" PRIu64 " bytes (%s K+V incl. scale/bias, %" PRId64
               " layers)\n",
               f.kv_bytes_per_token, f.kv_format, c.n_layers);
        if (f.o.n_blocks_full > 0)
            printf("kv before start:  %8" PRIu64 " bytes per token (f32; %d of the blocks)\n",
                   f.kv_bytes_per_token_full, (int)f.o.n_blocks_full);
        printf("kv pool:          %8.3f GiB (%d blocks x %d tokens: ctx %d x batch %d)\n",
               gib(f.kv_pool_bytes), (int)f.o.n_blocks, (int)f.o.block_tokens, (int)f.o.ctx,
               (int)f.o.max_seqs);
        printf("prefill scratch:  %8.3f GiB (chunk of %d tokens, %d threads)\n", gib(f.scratch_bytes),
               (int)f.o.max_step_tokens, f.o.n_threads);
        printf("logits:           %8.3f GiB (%d rows)\n", gib(f.logits_bytes), (int)f.o.logit_rows);
        printf("other:            %8.3f GiB\n", gib(f.other_bytes));
        printf("total:            %8.3f GiB (%.2f GB)\n", gib(f.total_bytes), (double)f.total_bytes / 1e9);
        if (max_ctx >= 0)
            printf("max safe context: %d tokens x batch %d within %.2f GB\n", (int)max_ctx,
                   (int)f.o.max_seqs, budget);
        printf("decode estimate:  %.1f tok/s (%.2f GB read per token at %.1f GB/s)\n", tok_s,
               (double)f.read_per_token / 1e9, bandwidth);
    }
    wt_set_close(ws);
    wt_config_free(&c);
    return 0;
}
