/*
 * eng_kvq.h — how much a KV storage format changes a model's predictions,
 * measured against f32 KV: the quality report behind `kiln kvq-report` and the
 * golden test that guards it (docs/kv.md).
 *
 *   eng_runtime_opts base = eng_runtime_opts_default(), c[2] = {base, base};
 *   c[0].kv_quant = KV_QUANT_8;  c[1].kv_quant = KV_QUANT_4;
 *   eng_kvq_result r[2];
 *   eng_kvq_measure("/models/x", &base, c, 2, 256, r, &err);
 *   printf("KL mean %.2e  greedy %d/256\n", r[0].kl_mean, r[0].greedy_same);
 *
 * Method: with f32 KV, greedy-decode `positions` tokens from the BOS id (id 1
 * when the config has none) — the teacher sequence. For each candidate format:
 * (a) teacher-forced: logits of every position of the teacher sequence (chunked
 * prefill), KL(p_f32 || p_fmt) of the softmax per position (nats), and the
 * fraction of positions whose argmax matches; (b) free-running: greedy-decode
 * `positions` tokens with the candidate format (decode path) and count the
 * leading tokens equal to the f32 run. To tell a real loss from a near-tie,
 * it also reports the mean over rows of the largest |logit difference|, the
 * smallest f32 top-1 − top-2 margin along the teacher sequence, and at the
 * row where free-running greedy first differs, f32's margin between its own
 * token and the candidate's pick (how close a tie the format broke).
 */
#ifndef KILN_ENG_KVQ_H
#define KILN_ENG_KVQ_H

#include <stdint.h>

#include "engine/eng_runtime.h"

typedef struct {
    int32_t positions;           /* teacher-forced rows compared (positions + 1) */
    double kl_mean, kl_max;      /* nats */
    double top1_agree;           /* fraction of rows with the same argmax */
    int32_t greedy_same;         /* leading free-running greedy tokens equal to f32's */
    int32_t greedy_len;          /* tokens decoded (positions) */
    double logit_err;            /* mean over rows of max_i |logit_f32 - logit_fmt| */
    double margin_min;           /* smallest f32 top-1 - top-2 logit margin over the rows */
    double div_margin;           /* f32 logit(f32's token) - logit(format's token) at the
                                    first differing greedy step; -1 when none differs */
    uint64_t kv_bytes_per_token; /* the candidate's main-class bytes per token */
    char kv_format[128];
} eng_kvq_result;

/* API */
/* base: the reference options (its KV fields are forced to f32); cand[i]: the
 * formats to measure. Opens the model 1 + n_cand times. */
kiln_code eng_kvq_measure(const char *dir, const eng_runtime_opts *base,
                          const eng_runtime_opts *cand, int32_t n_cand, int32_t positions,
                          eng_kvq_result *out, kiln_err *err);

#endif
