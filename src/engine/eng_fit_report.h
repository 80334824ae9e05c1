/*
 * eng_fit_report.h — the memory plan as one JSON object: the body of
 * `kiln fit --json` and of GET /fit (one writer, so both say the same).
 *
 *   char *js = eng_fit_report_json(&fit, plan_or_NULL, 12.5);  // free(js)
 *
 * Keys: weights_bytes, kv_bytes_per_token, kv_pool_bytes, scratch_bytes,
 * logits_bytes, other_bytes, total_bytes, ctx, batch, threads, kv_blocks,
 * block_tokens, read_bytes_per_token, draft_bytes (a draft model's share of
 * total_bytes, 0 without), bandwidth_gb_s and predicted_decode_tok_s (null when
 * no bandwidth is known); adapter_bytes when the plan counts LoRA adapters (not
 * in total_bytes: the model's own); with a budget plan
 * also budget_bytes, max_safe_context, overhead_bytes, usable_bytes,
 * enforced_context_tokens (null when nothing is enforced), context_limit_source.
 */
#ifndef KILN_ENG_FIT_REPORT_H
#define KILN_ENG_FIT_REPORT_H

#include "engine/eng_admit.h"
#include "engine/eng_fit.h"

/* API */
/* A new NUL-terminated JSON object (OWNED by the caller: free), or NULL on OOM.
 * plan may be NULL (no budget); bandwidth_gb_s <= 0 writes nulls. */
char *eng_fit_report_json(const eng_fit *f, const eng_admit_plan *plan, double bandwidth_gb_s);

#endif
