/*
 * mdl_mtp.c — the multi-token-prediction head of Qwen3.5 checkpoints (mtp.*),
 * loaded as a model of its own (mdl_load_mtp; docs/hybrid.md, MTP).
 *
 * Per token j of a sequence (H = hidden; every norm a Qwen3_5RMSNorm, 1 + w in
 * the HF layout, the only layout that ships the head):
 *   x_j = fc · [ pre_fc_norm_embedding(embed(tokens[j])) ; pre_fc_norm_hidden(hidden_in[j]) ]
 *   then one gated-attention decoder layer (mtp.layers.0: the geometry of the
 *   model's full-attention layers, its own K/V), the final norm mtp.norm, and
 *   the model's lm_head (tied: the embeddings).
 * hidden_in[j] is the target's final-normed hidden state at position pos0 + j,
 * tokens[j] the token at pos0 + j + 1: the head's row at position p predicts
 * the token at p + 2. Sources: vLLM qwen3_5_mtp.py (Qwen3_5MultiTokenPredictor:
 * cat([embeds, hidden]) order, fc 2H → H without bias, residual layer, final
 * norm; names remapped mtp. → model.), the same for Qwen3-Next (qwen3_next_mtp.py);
 * SGLang qwen3_next_mtp.py (GemmaRMSNorm = 1 + w, cat((embeds, hidden))).
 * Plan: the model's plan cut to one layer, a copy of its first full-attention
 * layer's (mdl_mtp_plan), so the step, KV layout and scratch sizing are the
 * ordinary ones; the [T, 2H] concatenation uses the FFN scratch (max_ffn is
 * raised to 2H), which the layer's MLP overwrites only later.
 */
#include "kernels/kn_ops.h"
#include "model/mdl_int.h"

#include <string.h>

kiln_code mdl_mtp_plan(mdl_model *m, kiln_err *err)
{
    if (m->cfg.arch != WT_ARCH_QWEN3_5)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "multi-token prediction: only Qwen3.5 heads (mtp.*) are supported, "
                         "not %s",
                         m->cfg.architecture);
    if (!mdl_has_tensor(m, "mtp.fc.weight"))
        return kiln_fail(err, KILN_E_NOT_FOUND,
                         "no multi-token-prediction head: tensor 'mtp.fc.weight' is missing "
                         "(mlx-lm conversions drop mtp.*)");
    if (mdl_has_tensor(m, "mtp.layers.1.input_layernorm.weight"))
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "multi-token prediction: heads of more than one layer are not supported");
    int32_t F = 0;
    while (F < m->plan.n_layers && m->plan.layer[F].mixer != MDL_MIX_ATTN) F++;
    if (F == m->plan.n_layers)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "multi-token prediction: the model has no full-attention layer to take "
                         "the head's geometry from");
    m->plan.layer[0] = m->plan.layer[F];
    m->plan.layer[0].kv_src = 0;
    m->plan.n_layers = 1;
    m->cfg.n_layers = 1;
    if (m->cfg.layer_linear) m->cfg.layer_linear[0] = 0;
    if (m->plan.max_ffn < 2 * m->plan.hidden) m->plan.max_ffn = 2 * m->plan.hidden;
    m->mtp = 1;
    return KILN_OK;
}

kiln_code mdl_mtp_load(mdl_model *m, kiln_err *err)
{
    int64_t H = m->plan.hidden;
    kiln_code rc = mdl_load_mat(m, "mtp.fc", H, 2 * H, &m->mtp_fc, err);
    if (!rc)
        rc = mdl_load_vec(m, "mtp.pre_fc_norm_embedding.weight", H, 0, m->plan.norm_add,
                          &m->mtp_norm_e, err);
    if (!rc)
        rc = mdl_load_vec(m, "mtp.pre_fc_norm_hidden.weight", H, 0, m->plan.norm_add,
                          &m->mtp_norm_h, err);
    return rc;
}

uint64_t mdl_mtp_own_bytes(const mdl_model *m)
{
    uint64_t b = m->info.weights_bytes - kn_mat_bytes(&m->embed);
    if (!m->cfg.tie_word_embeddings) b -= kn_mat_bytes(&m->lm_head);
    return b;
}

/* The head's input rows: s->x holds the embeddings of the step's tokens; each
 * row and its hidden_in row are normed into [T, 2H] (FFN scratch s->g), and
 * fc maps them back into s->x. Row by row, so a row's bits do not depend on
 * the batch. */
void mdl_mtp_inputs(mdl_step *s)
{
    const mdl_model *m = s->m;
    int64_t H = m->plan.hidden, t = 0;
    float eps = (float)m->cfg.rms_eps;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const mdl_seq *sq = &s->seqs[i];
        for (int32_t j = 0; j < sq->n_tokens; j++, t++) {
            float *cat = s->g + t * 2 * H;
            kn_rmsnorm(cat, s->x + t * H, m->mtp_norm_e, H, eps, 0.0f);
            kn_rmsnorm(cat + H, sq->hidden_in + (int64_t)j * H, m->mtp_norm_h, H, eps, 0.0f);
        }
    }
    kn_matmul(s->pool, &m->mtp_fc, s->g, s->T, s->x);
}
