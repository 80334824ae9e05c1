/*
 * cli_kvq.c — `kiln kvq-report`: KL divergence and greedy agreement of KV
 * storage formats against f32 KV (engine/eng_kvq.h has the method).
 */
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "engine/eng_kvq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_kvq_report(int argc, char **argv)
{
    const char *model = NULL, *formats = "f16,bf16,8,4";
    int64_t positions = 256, group = 0, threads = 1;
    int json = 0;
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "model snapshot folder (required)", 0},
        {"positions", CLI_INT, &positions, "N", "positions compared (default 256)", 0},
        {"formats", CLI_STR, &formats, "LIST", "KV formats to measure (default f16,bf16,8,4)", 0},
        {"kv-group", CLI_INT, &group, "N", "affine group size (default 64, clamped to head_dim)",
         0},
        {"threads", CLI_INT, &threads, "N", "compute threads (default 1)", 0},
        {"json", CLI_BOOL, &json, NULL, "print one JSON object per format", 0},
        {0},
    };
    int pr =
        cli_parse("kvq-report", "KL divergence and greedy agreement of quantized KV vs f32 KV.",
                  flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model || positions < 1 || positions > 65536 || group < 0 || group > 65536) {
        fprintf(stderr, "kiln kvq-report: --model is required; --positions in 1..65536\n");
        return 2;
    }
    eng_runtime_opts base = eng_runtime_opts_default();
    base.n_threads = (int)threads;
    base.isa = getenv("KILN_ISA");
    eng_runtime_opts cand[16];
    int32_t n = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", formats);
    kiln_err err;
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == 16) break;
        cand[n] = base;
        cand[n].kv_group = (int32_t)group;
        if (kv_quant_parse(t, &cand[n].kv_quant, &err)) {
            fprintf(stderr, "kiln kvq-report: %s\n", err.msg);
            return 2;
        }
        n++;
    }
    eng_kvq_result r[16];
    if (eng_kvq_measure(model, &base, cand, n, (int32_t)positions, r, &err))
        return cli_fail("kvq-report", &err);
    if (!json)
        printf("%-40s %-10s %9s %11s %11s %8s %9s %9s %9s %9s\n", "model", "kv", "bytes/tok",
               "KL mean", "KL max", "top1", "greedy", "logit err", "min marg", "div marg");
    for (int32_t i = 0; i < n; i++) {
        if (json)
            printf("{\"model\": \"%s\", \"kv_format\": \"%s\", \"kv_bytes_per_token\": %llu, "
                   "\"positions\": %d, \"kl_mean\": %.6e, \"kl_max\": %.6e, \"top1_agree\": %.6f, "
                   "\"greedy_same\": %d, \"greedy_len\": %d, \"logit_err\": %.6e, "
                   "\"margin_min\": %.6e, \"div_margin\": %.6e}\n",
                   model, r[i].kv_format, (unsigned long long)r[i].kv_bytes_per_token,
                   (int)r[i].positions, r[i].kl_mean, r[i].kl_max, r[i].top1_agree,
                   (int)r[i].greedy_same, (int)r[i].greedy_len, r[i].logit_err, r[i].margin_min,
                   r[i].div_margin);
        else
            printf("%-40s %-10s %9llu %11.3e %11.3e %7.2f%% %4d/%-4d %9.3g %9.3g %9.3g\n", model,
                   r[i].kv_format, (unsigned long long)r[i].kv_bytes_per_token, r[i].kl_mean,
                   r[i].kl_max, 100.0 * r[i].top1_agree, (int)r[i].greedy_same,
                   (int)r[i].greedy_len, r[i].logit_err, r[i].margin_min, r[i].div_margin);
    }
    return 0;
}
