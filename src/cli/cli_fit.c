/*
 * cli_fit.c — `kiln fit`: the memory a model needs for a context and batch,
 * from config.json and the safetensors headers alone, and the largest context
 * a budget allows.
 */
#include "cli/cli.h"
#include "cli/cli_lora.h"
#include "cli/cli_args.h"
#include "engine/eng_admit.h"
#include "engine/eng_fit.h"
#include "engine/eng_draft.h"
#include "engine/eng_fit_report.h"
#include "server/srv.h"
#include "weights/wt_set.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* The server memory a default `kiln serve` keeps: the responses store
 * (--responses-store-mib 64) and the request memory (--request-memory, 4 x the
 * default --max-body of 4 MiB). */
#define CLI_FIT_SERVER_BYTES (((uint64_t)64 << 20) + srv_request_memory_default((size_t)4 << 20))

static double gib(uint64_t b)
{
    return (double)b / 1073741824.0;
}

int cli_fit(int argc, char **argv)
{
    const char *model = NULL, *draft = NULL;
    int64_t ctx = 0, batch = 1, threads = 0;
    double budget = 0, bandwidth = 0;
    int json = 0;
    cli_kv_flags kvf = {0};
    cli_list lora = {0};
    const char *lora_dir = NULL;
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "model snapshot folder (required)", 0},
        {"ctx", CLI_INT, &ctx, "N", "context tokens per sequence (default: min(model, 4096))", 0},
        {"batch", CLI_INT, &batch, "B", "sequences decoded together (default 1)", 0},
        {"threads", CLI_INT, &threads, "N", "compute threads (attention scratch per thread)", 0},
        {"budget", CLI_FLOAT, &budget, "GB",
         "memory budget (decimal GB): plan the KV pool and the max safe context inside it, as kiln "
         "serve --memory-budget does",
         0},
        {"bandwidth", CLI_FLOAT, &bandwidth, "GBS",
         "memory bandwidth for the decode prediction (default: measured, 512 MiB read)", 0},
        {"json", CLI_BOOL, &json, NULL, "print one JSON object", 0},
        {"lora", CLI_LIST, &lora, "NAME=DIR", "count a LoRA adapter kiln serve would load (repeatable)",
         0},
        {"lora-dir", CLI_STR, &lora_dir, "DIR", "count every adapter folder in DIR", 0},
        {"draft-model", CLI_STR, &draft, "DIR",
         "count a draft model too (kiln serve --draft-model): its weights, transients and a KV "
         "pool of one block per block",
         0},
        CLI_KV_FLAGS(kvf),
        {0},
    };
    int pr = cli_parse(
        "fit",
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
    eng_draft_cost dc = {0};
    if (draft) { /* sized for the largest context, as kiln serve does */
        eng_runtime_opts r = eng_runtime_resolve(&c, &o);
        if (eng_draft_cost_of(draft, &r, &dc, &err)) {
            wt_set_close(ws);
            wt_config_free(&c);
            return cli_fail("fit: --draft-model", &err);
        }
    }
    eng_fit f;
    eng_admit_plan plan;
    int have_plan = 0;
    uint64_t adapter_bytes = 0;
    if (cli_loras_bytes(&lora, lora_dir, &adapter_bytes, &err)) {
        wt_set_close(ws);
        wt_config_free(&c);
        return cli_fail("fit", &err);
    }
    if (budget > 0 || adapter_bytes) {
        /* the plan `kiln serve --memory-budget` makes with default server options */
        eng_admit_in in = eng_admit_in_default();
        in.budget_bytes = (uint64_t)(budget * 1e9);
        in.adapter_bytes = adapter_bytes;
        in.ctx_explicit = ctx > 0;
        eng_runtime_opts r = eng_runtime_resolve(&c, &o);
        in.overhead_bytes = eng_admit_overhead_for_dir(model, CLI_FIT_SERVER_BYTES, r.max_seqs);
        in.draft_fixed_bytes = dc.fixed_bytes;
        in.draft_block_bytes = dc.block_bytes;
        if (eng_admit_compute(&c, mdl_weights_used_bytes(&c, ws), &o, &in, &plan, &err)) {
            wt_set_close(ws);
            wt_config_free(&c);
            return cli_fail("fit", &err);
        }
        f = plan.fit;
        have_plan = 1;
    } else {
        eng_fit_compute(&c, mdl_weights_used_bytes(&c, ws), &o, &f);
        if (draft) {
            f.draft_bytes = dc.fixed_bytes + (uint64_t)f.o.n_blocks * dc.block_bytes;
            f.total_bytes += f.draft_bytes;
        }
    }
    if (bandwidth <= 0) bandwidth = eng_measure_bandwidth(f.o.n_threads);
    double tok_s = bandwidth > 0 ? bandwidth * 1e9 / (double)f.read_per_token : 0;
    if (json) {
        char *js = eng_fit_report_json(&f, have_plan ? &plan : NULL, bandwidth);
        if (!js) {
            wt_set_close(ws);
            wt_config_free(&c);
            fprintf(stderr, "kiln fit: out of memory\n");
            return 1;
        }
        printf("%s\n", js);
        free(js);
    } else {
        printf("model:            %s (%s)\n", model, c.architecture);
        printf("weights:          %8.3f GiB (as mapped)\n", gib(f.weights_bytes));
        printf("kv per token:     %8" PRIu64 " bytes (%s K+V incl. scale/bias, %d of %" PRId64
               " layers store K/V)\n",
               f.kv_bytes_per_token, f.kv_format, (int)f.kv_layers, c.n_layers);
        if (f.sliding_layers > 0)
            printf("kv by layer kind: %8" PRIu64 " bytes per token full-attention layers, %" PRIu64
                   " sliding (%d layers, window %d)\n",
                   f.kv_bytes_per_token_full_layers, f.kv_bytes_per_token_sliding_layers,
                   (int)f.sliding_layers, (int)f.sliding_window);
        for (int g = 0; g < f.n_kv_groups; g++) {
            const eng_fit_group *fg = &f.kv_group[g];
            char how[96];
            if (fg->window)
                snprintf(how, sizeof how, "window %d: at most %" PRId64 " blocks a sequence",
                         (int)fg->window, fg->seq_max_blocks);
            else
                snprintf(how, sizeof how, "%s: every position kept",
                         fg->attn_window ? "sliding, not capped" : "full attention");
            printf("kv group %d:       %8" PRIu64 " bytes per token, %d layers, %s; %d blocks\n", g,
                   fg->bytes_per_token, (int)fg->layers, how, (int)fg->n_blocks);
        }
        printf("kv per sequence:  %8.3f GiB at ctx %d (at most %" PRId64 " blocks held%s)\n",
               gib(f.kv_seq_bytes), (int)f.o.ctx, f.kv_seq_max_blocks,
               f.kv_window ? ", window-capped" : "");
        if (f.o.n_blocks_full > 0)
            printf("kv before start:  %8" PRIu64 " bytes per token (f32; %d of the blocks)\n",
                   f.kv_bytes_per_token_full, (int)f.o.n_blocks_full);
        if (f.n_kv_groups > 1)
            printf("kv pool:          %8.3f GiB (%d groups of %d-token blocks: batch %d x ctx %d, "
                   "sliding groups window-capped)\n",
                   gib(f.kv_pool_bytes), f.n_kv_groups, (int)f.o.block_tokens, (int)f.o.max_seqs,
                   (int)f.o.ctx);
        else if (f.kv_window)
            printf("kv pool:          %8.3f GiB (%d blocks x %d tokens: batch %d x (%" PRId64
                   " + 1) blocks, window-capped)\n",
                   gib(f.kv_pool_bytes), (int)f.o.n_blocks, (int)f.o.block_tokens,
                   (int)f.o.max_seqs, f.kv_seq_max_blocks);
        else
            printf("kv pool:          %8.3f GiB (%d blocks x %d tokens: ctx %d x batch %d)\n",
                   gib(f.kv_pool_bytes), (int)f.o.n_blocks, (int)f.o.block_tokens, (int)f.o.ctx,
                   (int)f.o.max_seqs);
        if (f.state_layers > 0) {
            printf("state per seq:    %8.3f MiB per state (%d recurrent layers, f32, any context); "
                   "a sequence holds %.3f MiB (working state + latest snapshot)\n",
                   (double)f.state_bytes / 1048576.0, (int)f.state_layers,
                   (double)f.state_seq_bytes / 1048576.0);
            printf("state pool:       %8.3f GiB (%d states; snapshots every %d blocks%s)\n",
                   gib(f.state_pool_bytes), (int)f.state_blocks, (int)f.state_every,
                   f.state_every ? "" : ": off, only the ones sequences keep");
        }
        printf("prefill scratch:  %8.3f GiB (chunk of %d tokens, %d threads)\n", gib(f.scratch_bytes),
               (int)f.o.max_step_tokens, f.o.n_threads);
        printf("logits:           %8.3f GiB (%d rows)\n", gib(f.logits_bytes), (int)f.o.logit_rows);
        printf("other:            %8.3f GiB\n", gib(f.other_bytes));
        if (draft)
            printf("draft model:      %8.3f GiB (%s: weights %.3f GiB, transients %.3f GiB, KV "
                   "%d blocks x %" PRIu64 " bytes)\n",
                   gib(f.draft_bytes), draft, gib(dc.weights_bytes),
                   gib(dc.fixed_bytes - dc.weights_bytes), (int)f.o.n_blocks, dc.block_bytes);
        printf("total:            %8.3f GiB (%.2f GB)\n", gib(f.total_bytes), (double)f.total_bytes / 1e9);
        if (adapter_bytes)
            printf("lora adapters:    %8.3f GiB (f32 A and B, outside total; counted by the plan)\n",
                   gib(adapter_bytes));
        if (have_plan && budget > 0) {
            printf("process overhead: %8.3f GiB (binary, libraries, tokenizer, server buffers)\n",
                   gib(plan.overhead_bytes));
            printf(
                "max safe context: %d tokens for one sequence within %.3f GB (the shared KV pool "
                "holds %d blocks = %.1f sequences of that length; limit: %s)\n",
                (int)plan.max_safe_context, budget, (int)f.o.n_blocks,
                (double)f.o.n_blocks * f.o.block_tokens / (double)plan.max_safe_context,
                eng_limit_source_name(plan.source));
        }
        printf("decode estimate:  %.1f tok/s (%.2f GB read per token at %.1f GB/s)\n", tok_s,
               (double)f.read_per_token / 1e9, bandwidth);
    }
    wt_set_close(ws);
    wt_config_free(&c);
    return 0;
}
