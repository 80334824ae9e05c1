/*
 * eng_fit_report.c — see eng_fit_report.h. Plain snprintf: the engine layer
 * does not build JSON trees, and every value here is a number or a fixed word.
 */
#include "engine/eng_fit_report.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Appends to buf; *len counts what would have been written (overflow is
 * detected by the caller as *len >= cap). */
static int put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    *len += (size_t)n;
    return 0;
}

char *eng_fit_report_json(const eng_fit *f, const eng_admit_plan *plan, double bw)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    double tok_s = bw > 0 && f->read_per_token ? bw * 1e9 / (double)f->read_per_token : 0;
    char bws[32] = "null", toks[32] = "null";
    if (bw > 0) {
        snprintf(bws, sizeof bws, "%.2f", bw);
        snprintf(toks, sizeof toks, "%.2f", tok_s);
    }
    put(buf, cap, &len,
        "{\"weights_bytes\": %" PRIu64 ", \"kv_bytes_per_token\": %" PRIu64
        ", \"kv_pool_bytes\": %" PRIu64 ", \"scratch_bytes\": %" PRIu64
        ", \"logits_bytes\": %" PRIu64 ", \"other_bytes\": %" PRIu64 ", \"total_bytes\": %" PRIu64
        ", \"ctx\": %d, \"batch\": %d, \"threads\": %d, \"kv_blocks\": %d, \"block_tokens\": %d"
        ", \"read_bytes_per_token\": %" PRIu64
        ", \"bandwidth_gb_s\": %s, \"predicted_decode_tok_s\": %s",
        f->weights_bytes, f->kv_bytes_per_token, f->kv_pool_bytes, f->scratch_bytes,
        f->logits_bytes, f->other_bytes, f->total_bytes, (int)f->o.ctx, (int)f->o.max_seqs,
        f->o.n_threads, (int)f->o.n_blocks, (int)f->o.block_tokens, f->read_per_token, bws, toks);
    /* kv_format_describe writes plain ASCII (names, digits, spaces, commas) */
    put(buf, cap, &len,
        ", \"kv_format\": \"%s\", \"kv_bytes_per_token_full\": %" PRIu64 ", \"kv_blocks_full\": %d",
        f->kv_format, f->kv_bytes_per_token_full, (int)f->o.n_blocks_full);
    put(buf, cap, &len,
        ", \"kv_bytes_per_token_full_layers\": %" PRIu64
        ", \"kv_bytes_per_token_sliding_layers\": %" PRIu64
        ", \"sliding_window\": %d, \"sliding_layers\": %d, \"kv_window\": %d"
        ", \"kv_seq_max_blocks\": %" PRId64 ", \"kv_seq_bytes\": %" PRIu64,
        f->kv_bytes_per_token_full_layers, f->kv_bytes_per_token_sliding_layers,
        (int)f->sliding_window, (int)f->sliding_layers, (int)f->kv_window, f->kv_seq_max_blocks,
        f->kv_seq_bytes);
    put(buf, cap, &len,
        ", \"state_layers\": %d, \"state_bytes\": %" PRIu64 ", \"state_bytes_per_seq\": %" PRIu64
        ", \"state_blocks\": %d, \"state_pool_bytes\": %" PRIu64 ", \"state_every\": %d",
        (int)f->state_layers, f->state_bytes, f->state_seq_bytes, (int)f->state_blocks,
        f->state_pool_bytes, (int)f->state_every);
    put(buf, cap, &len, ", \"kv_layers\": %d, \"kv_groups\": [", (int)f->kv_layers);
    for (int g = 0; g < f->n_kv_groups; g++) {
        const eng_fit_group *fg = &f->kv_group[g];
        put(buf, cap, &len,
            "%s{\"window\": %d, \"attention_window\": %d, \"layers\": %d, \"bytes_per_token\": "
            "%" PRIu64 ", \"bytes_per_token_full\": %" PRIu64 ", \"seq_max_blocks\": %" PRId64
            ", \"blocks\": %d, \"blocks_full\": %d}",
            g ? ", " : "", (int)fg->window, (int)fg->attn_window, (int)fg->layers,
            fg->bytes_per_token, fg->bytes_per_token_full, fg->seq_max_blocks, (int)fg->n_blocks,
            (int)fg->n_blocks_full);
    }
    put(buf, cap, &len, "], \"draft_bytes\": %" PRIu64, f->draft_bytes);
    if (plan && plan->adapter_bytes)
        put(buf, cap, &len, ", \"adapter_bytes\": %" PRIu64, plan->adapter_bytes);
    if (plan && plan->budget_bytes) {
        char enf[16] = "null";
        if (plan->enforced_context) snprintf(enf, sizeof enf, "%d", (int)plan->enforced_context);
        put(buf, cap, &len,
            ", \"budget_bytes\": %" PRIu64
            ", \"max_safe_context\": %d, \"overhead_bytes\": %" PRIu64
            ", \"usable_bytes\": %" PRIu64
            ", \"enforced_context_tokens\": %s, \"context_limit_source\": \"%s\"",
            plan->budget_bytes, (int)plan->max_safe_context, plan->overhead_bytes,
            plan->usable_bytes, enf, eng_limit_source_name(plan->source));
    }
    put(buf, cap, &len, "}");
    if (len >= cap) { /* the fields above stay far below cap; never truncate silently */
        free(buf);
        return NULL;
    }
    return buf;
}
