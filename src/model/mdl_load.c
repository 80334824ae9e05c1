/*
 * mdl_load.c — a snapshot mapped onto the model's plan (mdl_plan.h): config,
 * plan, tensors of every layer's kinds (mdl_attn_load, mdl_mlp_load), RoPE
 * tables, and the description `kiln info` prints.
 *
 * HF names (llama, mistral, qwen2, qwen3), after the language model's prefix
 * (find_prefix: "model." or a multimodal wrapper's):
 *   embed_tokens, norm; lm_head at the top level (absent when tied)
 *   layers.L.{input_layernorm, post_attention_layernorm}
 *   layers.L.self_attn.{q,k,v,o}_proj (+ .bias), .{q,k}_norm (qwen3)
 *   layers.L.mlp.{gate,up,down}_proj
 *   layers.L.linear_attn.* (hybrid models' gated DeltaNet layers, mdl_delta.c)
 * Every shape is checked against the plan (mdl_tensors.c).
 * Hybrid (Qwen3.5) layout rule (design/models/qwen3_5.md §1, as mlx-lm
 * decides): a conv1d.weight whose last dim is not 1 is an HF checkpoint,
 * whose input/post-attention/final/q/k norms store w - 1 (norm_add 1);
 * otherwise (mlx-lm layout: conv axis moved, +1 folded in) they are the
 * multiplier. With no DeltaNet layer to look at, the mlx-lm prefix
 * (language_model.model.) says mlx. Never keyed on model_type. The gated
 * norm is always used as stored. Vision tensors are never read; mtp.* only
 * by mdl_load_mtp (mdl_mtp.c), which loads the head as a model of its own.
 */
#include "model/mdl_int.h"
#include "util/half.h"
#include "util/kiln_log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

/* The language model's tensor prefix: the first candidate that has
 * `<prefix>embed_tokens.weight` (HF text-only "model.", HF multimodal
 * "model.language_model.", mlx-community multimodal "language_model.model."). */
static kiln_code find_prefix(mdl_model *m, kiln_err *err)
{
    static const char *const cand[] = {"model.", "model.language_model.", "language_model.model."};
    char n[160];
    for (size_t i = 0; i < sizeof cand / sizeof *cand; i++) {
        snprintf(n, sizeof n, "%sembed_tokens.weight", cand[i]);
        if (wt_set_find(m->ws, n)) {
            snprintf(m->prefix, sizeof m->prefix, "%s", cand[i]);
            return KILN_OK;
        }
    }
    return kiln_fail(err, KILN_E_NOT_FOUND,
                     "missing tensor 'model.embed_tokens.weight' (nor under "
                     "model.language_model. or language_model.model.)");
}

/* Hybrid models: the checkpoint layout decides the `1 + w` norms (header). */
static void detect_norm_layout(mdl_model *m)
{
    if (m->cfg.arch != WT_ARCH_QWEN3_5) return;
    for (int32_t L = 0; L < m->plan.n_layers; L++) {
        if (m->plan.layer[L].mixer != MDL_MIX_DELTANET) continue;
        char n[200];
        snprintf(n, sizeof n, "%slayers.%d.linear_attn.conv1d.weight", m->prefix, (int)L);
        const wt_tensor *t = wt_set_find(m->ws, n);
        if (!t) break;
        m->plan.norm_add = t->ndim == 3 && t->shape[2] != 1 ? 1.0f : 0.0f;
        return;
    }
    m->plan.norm_add = strcmp(m->prefix, "language_model.model.") == 0 ? 0.0f : 1.0f;
}

/* The norms around a layer's blocks, then each block's tensors. */
static kiln_code load_layer(mdl_model *m, int32_t L, kiln_err *err)
{
    mdl_layer *ly = &m->layers[L];
    int64_t H = m->plan.hidden;
    float add = m->plan.norm_add;
    char p[200], n[240];
    kiln_code rc;
    ly->p = &m->plan.layer[L];
    ly->scalar = 1.0f;
    snprintf(p, sizeof p, "%slayers.%d", m->mtp ? "mtp." : m->prefix, (int)L);
    snprintf(n, sizeof n, "%s.input_layernorm.weight", p);
    if ((rc = mdl_load_vec(m, n, H, 0, add, &ly->in_norm, err))) return rc;
    /* Llama's post_attention_layernorm is the pre-FFN norm; Gemma's sandwich
     * norms name it pre_feedforward_layernorm and norm the mixer's output */
    snprintf(n, sizeof n, "%s.post_attention_layernorm.weight", p);
    if ((rc = mdl_load_vec(m, n, H, 0, add,
                           m->plan.sandwich_norms ? &ly->post_mix_norm : &ly->pre_ffn_norm, err)))
        return rc;
    if (m->plan.sandwich_norms) {
        snprintf(n, sizeof n, "%s.pre_feedforward_layernorm.weight", p);
        if ((rc = mdl_load_vec(m, n, H, 0, add, &ly->pre_ffn_norm, err))) return rc;
        snprintf(n, sizeof n, "%s.post_feedforward_layernorm.weight", p);
        if ((rc = mdl_load_vec(m, n, H, 0, add, &ly->post_ffn_norm, err))) return rc;
    }
    if (ly->p->mixer == MDL_MIX_DELTANET) {
        snprintf(n, sizeof n, "%s.linear_attn", p);
        if ((rc = mdl_delta_load(m, L, n, err))) return rc;
    } else {
        snprintf(n, sizeof n, "%s.self_attn", p);
        if ((rc = mdl_attn_load(m, L, n, err))) return rc;
    }
    if (ly->p->ffn == MDL_FFN_MOE) {
        if ((rc = mdl_moe_load(m, L, p, err))) return rc;
    } else {
        snprintf(n, sizeof n, "%s.mlp", p);
        if ((rc = mdl_mlp_load(m, L, n, err))) return rc;
    }
    if (ly->p->pli && (rc = mdl_pli_load(m, L, p, err))) return rc;
    if (ly->p->layer_scalar) { /* a [1] buffer; absent means 1 */
        float *v = NULL;
        snprintf(n, sizeof n, "%s.layer_scalar", p);
        if ((rc = mdl_load_vec(m, n, 1, 1, 0.0f, &v, err))) return rc;
        if (v) ly->scalar = v[0];
        free(v);
    }
    return KILN_OK;
}

/* Multimodal checkpoints: the towers' tensors are left unmapped-in-use
 * (never read); say so once. */
static void note_skipped(const mdl_model *m)
{
    int n = 0;
    uint64_t bytes = 0;
    size_t pl = strlen(m->prefix);
    for (int i = 0; i < wt_set_count(m->ws); i++) {
        const wt_tensor *t = wt_set_at(m->ws, i);
        if (strncmp(t->name, m->prefix, pl) == 0 || strstr(t->name, "lm_head")) continue;
        n++;
        bytes += t->nbytes;
    }
    if (n > 0 || m->cfg.gemma.n_towers_skipped > 0)
        KLOG_INFO("model",
                  "arch=%s text path only: %d tensors outside the language model skipped "
                  "(vision/audio towers, %.1f MiB)",
                  m->cfg.architecture, n, (double)bytes / (1024.0 * 1024.0));
}

static void add_mat_info(mdl_info *in, const kn_mat *w)
{
    in->weights_bytes += kn_mat_bytes(w);
    in->n_params += (uint64_t)(w->rows * w->cols);
}

static void mat_desc(const kn_mat *w, char *buf, size_t n)
{
    static const char *const fn[] = {"f32", "f16", "bf16", "affine"};
    if (w->fmt == KN_QAFFINE)
        snprintf(buf, n, "MLX affine %d-bit g%d (%s scales)", w->bits, w->group, fn[w->sfmt]);
    else
        snprintf(buf, n, "%s", fn[w->fmt]);
}

#define N_MAT_GROUPS 12
/* Tensor group g of a layer; NULL when the layer's kind has none. */
static const kn_mat *layer_mat(const mdl_layer *ly, int g)
{
    const kn_mat *ms[N_MAT_GROUPS] = {&ly->attn.wq,    &ly->attn.wk,      &ly->attn.wv,
                                      &ly->attn.wo,    &ly->delta.in_qkv, &ly->delta.in_z,
                                      &ly->delta.in_b, &ly->delta.in_a,   &ly->delta.out,
                                      &ly->mlp.gate,   &ly->mlp.up,       &ly->mlp.down};
    return ms[g]->rows > 0 ? ms[g] : NULL;
}

size_t mdl_describe_groups(const mdl_model *m, char *buf, size_t n)
{
    static const char *const names[N_MAT_GROUPS] = {"self_attn.q_proj",
                                                    "self_attn.k_proj",
                                                    "self_attn.v_proj",
                                                    "self_attn.o_proj",
                                                    "linear_attn.in_proj_qkv",
                                                    "linear_attn.in_proj_z",
                                                    "linear_attn.in_proj_b",
                                                    "linear_attn.in_proj_a",
                                                    "linear_attn.out_proj",
                                                    "mlp.gate_proj",
                                                    "mlp.up_proj",
                                                    "mlp.down_proj"};
    size_t o = 0;
    char d[96], d2[96];
#define EMIT(...)                                                                                  \
    do {                                                                                           \
        if (o < n) o += (size_t)snprintf(buf + o, n - o, __VA_ARGS__);                             \
    } while (0)
    mat_desc(&m->embed, d, sizeof d);
    EMIT("  %-26s %s\n", "embed_tokens", d);
    for (int g = 0; g < N_MAT_GROUPS; g++) {
        int64_t first = -1, differ = 0, have = 0;
        for (int64_t L = 0; L < m->cfg.n_layers; L++) {
            const kn_mat *w = layer_mat(&m->layers[L], g);
            if (!w) continue;
            have++;
            if (first < 0) {
                first = L;
                mat_desc(w, d, sizeof d);
                continue;
            }
            mat_desc(w, d2, sizeof d2);
            differ += strcmp(d, d2) != 0;
        }
        if (first < 0) continue; /* no layer of this kind */
        if (differ)
            EMIT("  %-26s %s in layer %lld; %lld of %lld layers differ\n", names[g], d,
                 (long long)first, (long long)differ, (long long)have);
        else if (have < m->cfg.n_layers)
            EMIT("  %-26s %s (%lld layers)\n", names[g], d, (long long)have);
        else
            EMIT("  %-26s %s\n", names[g], d);
    }
    for (int64_t L = 0; L < m->plan.n_layers; L++) {
        const mdl_layer *ly = &m->layers[L];
        if (ly->p->ffn != MDL_FFN_MOE) continue;
        mat_desc(&ly->moe.router, d, sizeof d);
        EMIT("  %-26s %s\n", "router.proj", d);
        mat_desc(&ly->moe.gate[0], d, sizeof d);
        EMIT("  %-26s %s (x %d experts)\n", "experts gate/up", d, (int)ly->p->moe.n_experts);
        mat_desc(&ly->moe.down[0], d, sizeof d);
        EMIT("  %-26s %s\n", "experts down", d);
        break;
    }
    if (m->plan.pli_dim > 0) {
        mat_desc(&m->pli_embed, d, sizeof d);
        EMIT("  %-26s %s\n", "embed_tokens_per_layer", d);
        mat_desc(&m->pli_proj, d, sizeof d);
        EMIT("  %-26s %s\n", "per_layer_model_projection", d);
        mat_desc(&m->layers[0].pli.gate, d, sizeof d);
        EMIT("  %-26s %s\n", "per_layer_input_gate", d);
    }
    if (m->cfg.tie_word_embeddings)
        EMIT("  %-26s tied to embed_tokens\n", "lm_head");
    else {
        mat_desc(&m->lm_head, d, sizeof d);
        EMIT("  %-26s %s\n", "lm_head", d);
    }
    EMIT("  %-26s f32 (converted at load)\n", "norms, biases");
#undef EMIT
    if (o >= n && n > 0) o = n - 1;
    return o;
}

static void describe(mdl_model *m)
{
    const wt_config *c = &m->cfg;
    mdl_info *in = &m->info;
    memset(in, 0, sizeof *in);
    add_mat_info(in, &m->embed);
    if (!c->tie_word_embeddings) add_mat_info(in, &m->lm_head);
    if (m->mtp) add_mat_info(in, &m->mtp_fc);
    const kn_mat *e = NULL; /* the first layer's first linear names the quantization */
    for (int64_t L = 0; L < c->n_layers; L++)
        for (int g = 0; g < N_MAT_GROUPS; g++) {
            const kn_mat *w = layer_mat(&m->layers[L], g);
            if (!w) continue;
            add_mat_info(in, w);
            if (!e) e = w;
        }
    for (int64_t L = 0; L < c->n_layers; L++) {
        const mdl_layer *ly = &m->layers[L];
        if (ly->p->ffn == MDL_FFN_MOE) {
            add_mat_info(in, &ly->moe.router);
            for (int32_t e = 0; e < ly->p->moe.n_experts; e++) {
                add_mat_info(in, &ly->moe.gate[e]);
                add_mat_info(in, &ly->moe.up[e]);
                add_mat_info(in, &ly->moe.down[e]);
            }
        }
        if (ly->p->pli) {
            add_mat_info(in, &ly->pli.gate);
            add_mat_info(in, &ly->pli.proj);
        }
    }
    if (m->plan.pli_dim > 0) {
        add_mat_info(in, &m->pli_embed);
        add_mat_info(in, &m->pli_proj);
    }
    if (!e) e = &m->embed;
    for (int32_t L = 0; L < m->plan.n_layers; L++) {
        if (mdl_plan_stores_kv(&m->plan, L)) {
            in->kv_bytes_per_token +=
                2 * (uint64_t)m->plan.layer[L].n_kv_heads * (uint64_t)m->plan.layer[L].head_dim * 4;
            in->kv_layers++;
        }
        int64_t sf = mdl_plan_state_floats(&m->plan.layer[L]);
        in->state_bytes += (uint64_t)sf * 4;
        in->state_layers += sf > 0;
    }
    if (c->arch == WT_ARCH_QWEN3_5)
        snprintf(in->layout, sizeof in->layout, "%s",
                 m->plan.norm_add != 0 ? "HF (norms stored as w - 1)" : "mlx-lm (norms as stored)");
    static const char *const fn[] = {"f32", "f16", "bf16", "affine"};
    if (e->fmt == KN_QAFFINE)
        snprintf(in->quant_desc, sizeof in->quant_desc, "MLX affine %d-bit g%d (%s scales)",
                 e->bits, e->group, fn[e->sfmt]);
    else
        snprintf(in->quant_desc, sizeof in->quant_desc, "%s", fn[e->fmt]);
    /* fingerprint: config essentials + every tensor's name, dtype, shape */
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, c->architecture, strlen(c->architecture));
    int64_t dims[] = {c->hidden,     c->intermediate, c->n_layers, c->n_heads,
                      c->n_kv_heads, c->head_dim,     c->vocab};
    XXH3_64bits_update(&st, dims, sizeof dims);
    for (int i = 0; i < wt_set_count(m->ws); i++) {
        const wt_tensor *t = wt_set_at(m->ws, i);
        XXH3_64bits_update(&st, t->name, strlen(t->name));
        XXH3_64bits_update(&st, &t->dtype, sizeof t->dtype);
        XXH3_64bits_update(&st, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    }
    m->fingerprint = XXH3_64bits_digest(&st);
}

static kiln_code load(const char *dir, int mtp, mdl_model **out, kiln_err *err);

kiln_code mdl_load(const char *dir, mdl_model **out, kiln_err *err)
{
    return load(dir, 0, out, err);
}

kiln_code mdl_load_mtp(const char *dir, mdl_model **out, kiln_err *err)
{
    return load(dir, 1, out, err);
}

int mdl_is_mtp(const mdl_model *m)
{
    return m->mtp;
}

static kiln_code load(const char *dir, int mtp, mdl_model **out, kiln_err *err)
{
    *out = NULL;
    mdl_model *m = calloc(1, sizeof *m);
    if (!m) return kiln_fail(err, KILN_E_NOMEM, "model: out of memory");
    kiln_code rc = wt_config_load(dir, &m->cfg, err);
    if (rc) {
        free(m);
        return rc;
    }
    const wt_config *c = &m->cfg;
    char name[200];
    if ((rc = mdl_plan_build(c, &m->plan, err))) goto fail;
    if ((rc = wt_set_open(dir, &m->ws, err))) goto fail;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) {
        rc = kiln_fail(err, KILN_E_NOMEM, "model: out of memory");
        goto fail;
    }
    if ((rc = find_prefix(m, err))) goto fail;
    detect_norm_layout(m);
    if (mtp && (rc = mdl_mtp_plan(m, err))) goto fail; /* one layer from here on */
    if (c->has_vision || strcmp(m->prefix, "model.language_model.") == 0 ||
        strcmp(m->prefix, "language_model.model.") == 0)
        KLOG_INFO("model", "multimodal checkpoint: running the text model only (vision tower "
                           "skipped)");
    snprintf(name, sizeof name, "%sembed_tokens", m->prefix);
    if ((rc = mdl_load_mat(m, name, c->vocab, c->hidden, &m->embed, err))) goto fail;
    /* the head: lm_head at the top level (or under the mlx wrapper), else tied */
    const char *head = wt_set_find(m->ws, "lm_head.weight") ? "lm_head"
                       : wt_set_find(m->ws, "language_model.lm_head.weight")
                           ? "language_model.lm_head"
                           : NULL;
    if (c->tie_word_embeddings || !head) {
        if (!c->tie_word_embeddings) {
            rc = kiln_fail(err, KILN_E_NOT_FOUND,
                           "missing tensor 'lm_head.weight' (tie_word_embeddings is false)");
            goto fail;
        }
        m->lm_head = m->embed;
    } else if ((rc = mdl_load_mat(m, head, c->vocab, c->hidden, &m->lm_head, err))) {
        goto fail;
    }
    snprintf(name, sizeof name, "%snorm.weight", m->mtp ? "mtp." : m->prefix);
    if ((rc = mdl_load_vec(m, name, c->hidden, 0, m->plan.norm_add, &m->final_norm, err)))
        goto fail;
    if (m->mtp && (rc = mdl_mtp_load(m, err))) goto fail;
    if ((rc = mdl_pli_load_model(m, err))) goto fail;
    for (int32_t L = 0; L < m->plan.n_layers; L++)
        if ((rc = load_layer(m, L, err))) goto fail;
    note_skipped(m);
    for (int32_t r = 0; r < m->plan.n_ropes; r++)
        if ((rc = mdl_rope_init(&m->plan.rope[r], &m->rope[r], err))) goto fail;
    describe(m);
    *out = m;
    return KILN_OK;
fail:
    kiln_err_prefix(err, "%s: ", dir);
    mdl_free(m);
    return rc;
}

void mdl_free(mdl_model *m)
{
    if (!m) return;
    if (m->layers) {
        for (int32_t L = 0; L < m->plan.n_layers; L++) {
            mdl_layer *ly = &m->layers[L];
            free(ly->in_norm);
            free(ly->post_mix_norm);
            free(ly->pre_ffn_norm);
            free(ly->post_ffn_norm);
            mdl_attn_free(&ly->attn);
            mdl_delta_free(&ly->delta);
            mdl_mlp_free(&ly->mlp);
            mdl_moe_free(&ly->moe);
            mdl_pli_free(&ly->pli);
        }
        free(m->layers);
    }
    free(m->final_norm);
    free(m->pli_norm);
    free(m->mtp_norm_e);
    free(m->mtp_norm_h);
    for (int r = 0; r < MDL_MAX_ROPES; r++)
        mdl_rope_free(&m->rope[r]);
    mdl_plan_free(&m->plan);
    wt_set_close(m->ws);
    wt_config_free(&m->cfg);
    free(m);
}

const wt_config *mdl_config(const mdl_model *m)
{
    return &m->cfg;
}

int64_t mdl_vocab(const mdl_model *m)
{
    return m->cfg.vocab;
}

mdl_info mdl_get_info(const mdl_model *m)
{
    return m->info;
}

uint64_t mdl_fingerprint(const mdl_model *m)
{
    return m->fingerprint;
}

const mdl_plan *mdl_get_plan(const mdl_model *m)
{
    return &m->plan;
}
