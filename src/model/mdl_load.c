/*
 * mdl_load.c — maps a snapshot's tensors onto the family's block layout.
 *
 * HF names (llama, mistral, qwen2, qwen3):
 *   model.embed_tokens, model.norm, lm_head (absent when tied)
 *   model.layers.L.{input_layernorm, post_attention_layernorm}
 *   model.layers.L.self_attn.{q,k,v,o}_proj (+ .bias), .{q,k}_norm (qwen3)
 *   model.layers.L.mlp.{gate,up,down}_proj
 * A linear module P is stored either as a float P.weight [out, in] (F32, F16,
 * BF16) or MLX-affine: P.weight U32 [out, in*bits/32] + P.scales/P.biases
 * [out, in/group] (wt_config_quant_for decides). Every shape is checked against
 * the config; nothing is copied but small norm/bias vectors (converted to f32).
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

static kiln_code fmt_of(const wt_tensor *t, kn_fmt *out, kiln_err *err)
{
    switch (t->dtype) {
    case WT_F32: *out = KN_F32; return KILN_OK;
    case WT_F16: *out = KN_F16; return KILN_OK;
    case WT_BF16: *out = KN_BF16; return KILN_OK;
    default:
        return kiln_fail(err, KILN_E_UNSUPPORTED, "tensor '%s': dtype %s is not a float weight",
                         t->name, wt_dtype_name(t->dtype));
    }
}

static kiln_code shape_err(const wt_tensor *t, int64_t a, int64_t b, kiln_err *err)
{
    char got[96] = "";
    for (int i = 0, o = 0; i < t->ndim && o < (int)sizeof got - 24; i++)
        o += snprintf(got + o, sizeof got - (size_t)o, i ? ", %" PRId64 : "%" PRId64, t->shape[i]);
    if (b >= 0)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "tensor '%s' has shape [%s], the config needs [%" PRId64 ", %" PRId64 "]",
                         t->name, got, a, b);
    return kiln_fail(err, KILN_E_CORRUPT, "tensor '%s' has shape [%s], the config needs [%" PRId64 "]",
                     t->name, got, a);
}

/* Finds module `path` (a linear or embedding) and fills a kn_mat [rows, cols]. */
static kiln_code load_mat(mdl_model *m, const char *path, int64_t rows, int64_t cols, kn_mat *out,
                          kiln_err *err)
{
    char name[256];
    snprintf(name, sizeof name, "%s.weight", path);
    const wt_tensor *w = wt_set_find(m->ws, name);
    if (!w) return kiln_fail(err, KILN_E_NOT_FOUND, "missing tensor '%s'", name);
    snprintf(name, sizeof name, "%s.scales", path);
    const wt_tensor *s = wt_set_find(m->ws, name);
    wt_qspec q = wt_config_quant_for(&m->cfg, path, s != NULL);
    memset(out, 0, sizeof *out);
    out->rows = rows;
    out->cols = cols;
    if (q.mode == WT_QMODE_NONE) {
        kiln_code rc = fmt_of(w, &out->fmt, err);
        if (rc) return rc;
        if (w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols)
            return shape_err(w, rows, cols, err);
        out->w = w->data;
        return KILN_OK;
    }
    if (q.mode != WT_QMODE_AFFINE)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "module '%s': only MLX affine quantization is supported", path);
    snprintf(name, sizeof name, "%s.biases", path);
    const wt_tensor *b = wt_set_find(m->ws, name);
    if (!s || !b)
        return kiln_fail(err, KILN_E_NOT_FOUND, "module '%s' is quantized but has no %s", path,
                         s ? "biases" : "scales");
    if (w->dtype != WT_U32)
        return kiln_fail(err, KILN_E_CORRUPT, "tensor '%s.weight': quantized weight must be U32, is %s",
                         path, wt_dtype_name(w->dtype));
    if (cols % q.group_size != 0 || (cols * q.bits) % 32 != 0)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "module '%s': %" PRId64 " columns do not split into groups of %d", path,
                         cols, q.group_size);
    if (w->ndim != 2 || w->shape[0] != rows || w->shape[1] != cols * q.bits / 32)
        return shape_err(w, rows, cols * q.bits / 32, err);
    if (s->ndim != 2 || s->shape[0] != rows || s->shape[1] != cols / q.group_size)
        return shape_err(s, rows, cols / q.group_size, err);
    if (b->ndim != 2 || b->shape[0] != rows || b->shape[1] != cols / q.group_size)
        return shape_err(b, rows, cols / q.group_size, err);
    if (s->dtype != b->dtype)
        return kiln_fail(err, KILN_E_CORRUPT, "module '%s': scales are %s but biases %s", path,
                         wt_dtype_name(s->dtype), wt_dtype_name(b->dtype));
    kiln_code rc = fmt_of(s, &out->sfmt, err);
    if (rc) return rc;
    out->fmt = KN_QAFFINE;
    out->w = w->data;
    out->scales = s->data;
    out->biases = b->data;
    out->bits = q.bits;
    out->group = q.group_size;
    return KILN_OK;
}

/* A 1-D float tensor converted to a new f32 array (*out, OWNED by the model).
 * Absent and optional: *out = NULL. */
static kiln_code load_vec(mdl_model *m, const char *name, int64_t n, int optional, float **out,
                          kiln_err *err)
{
    *out = NULL;
    const wt_tensor *t = wt_set_find(m->ws, name);
    if (!t) {
        if (optional) return KILN_OK;
        return kiln_fail(err, KILN_E_NOT_FOUND, "missing tensor '%s'", name);
    }
    if (t->ndim != 1 || t->shape[0] != n) return shape_err(t, n, -1, err);
    float *v = malloc(sizeof(float) * (size_t)n);
    if (!v) return kiln_fail(err, KILN_E_NOMEM, "tensor '%s': out of memory", name);
    const uint8_t *p = t->data;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->dtype) {
        case WT_F32: memcpy(&v[i], p + 4 * i, 4); break;
        case WT_F16: memcpy(&h, p + 2 * i, 2); v[i] = kiln_f16_to_f32(h); break;
        case WT_BF16: memcpy(&h, p + 2 * i, 2); v[i] = kiln_bf16_to_f32(h); break;
        default:
            free(v);
            return kiln_fail(err, KILN_E_UNSUPPORTED, "tensor '%s': dtype %s is not a float vector",
                             name, wt_dtype_name(t->dtype));
        }
    }
    *out = v;
    return KILN_OK;
}

static kiln_code load_layer(mdl_model *m, int64_t L, kiln_err *err)
{
    const wt_config *c = &m->cfg;
    mdl_layer *ly = &m->layers[L];
    int64_t H = c->hidden, qd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    int64_t F = c->intermediate;
    char p[160], n[200];
    kiln_code rc;
#define MAT(field, sub, r, cc)                                                                     \
    snprintf(p, sizeof p, "model.layers.%" PRId64 ".%s", L, sub);                                 \
    if ((rc = load_mat(m, p, r, cc, &ly->field, err))) return rc
#define VEC(field, sub, len, opt)                                                                  \
    snprintf(n, sizeof n, "model.layers.%" PRId64 ".%s", L, sub);                                 \
    if ((rc = load_vec(m, n, len, opt, &ly->field, err))) return rc
    MAT(wq, "self_attn.q_proj", qd, H);
    MAT(wk, "self_attn.k_proj", kd, H);
    MAT(wv, "self_attn.v_proj", kd, H);
    MAT(wo, "self_attn.o_proj", H, qd);
    MAT(w_gate, "mlp.gate_proj", F, H);
    MAT(w_up, "mlp.up_proj", F, H);
    MAT(w_down, "mlp.down_proj", H, F);
    VEC(attn_norm, "input_layernorm.weight", H, 0);
    VEC(ffn_norm, "post_attention_layernorm.weight", H, 0);
    int bias = c->attention_bias;
    VEC(bq, "self_attn.q_proj.bias", qd, !bias);
    VEC(bk, "self_attn.k_proj.bias", kd, !bias);
    VEC(bv, "self_attn.v_proj.bias", kd, !bias);
    VEC(bo, "self_attn.o_proj.bias", H, 1); /* qwen2 has q/k/v biases only */
    VEC(b_gate, "mlp.gate_proj.bias", F, !c->mlp_bias);
    VEC(b_up, "mlp.up_proj.bias", F, !c->mlp_bias);
    VEC(b_down, "mlp.down_proj.bias", H, !c->mlp_bias);
    if (c->qk_norm) {
        VEC(q_norm, "self_attn.q_norm.weight", c->head_dim, 0);
        VEC(k_norm, "self_attn.k_norm.weight", c->head_dim, 0);
    }
#undef MAT
#undef VEC
    ly->window = 0;
    if (c->sliding_window > 0 && (c->max_window_layers <= 0 || L >= c->max_window_layers))
        ly->window = (int32_t)c->sliding_window;
    return KILN_OK;
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
    else snprintf(buf, n, "%s", fn[w->fmt]);
}

static const kn_mat *layer_mat(const mdl_layer *ly, int g)
{
    const kn_mat *ms[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
    return ms[g];
}

size_t mdl_describe_groups(const mdl_model *m, char *buf, size_t n)
{
    static const char *const names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                        "mlp.down_proj"};
    size_t o = 0;
    char d[96], d2[96];
#define EMIT(...)                                                                                  \
    do {                                                                                           \
        if (o < n) o += (size_t)snprintf(buf + o, n - o, __VA_ARGS__);                             \
    } while (0)
    mat_desc(&m->embed, d, sizeof d);
    EMIT("  %-18s %s\n", "embed_tokens", d);
    for (int g = 0; g < 7; g++) {
        const kn_mat *first = layer_mat(&m->layers[0], g);
        mat_desc(first, d, sizeof d);
        int64_t differ = 0;
        for (int64_t L = 1; L < m->cfg.n_layers; L++) {
            mat_desc(layer_mat(&m->layers[L], g), d2, sizeof d2);
            differ += strcmp(d, d2) != 0;
        }
        if (differ) EMIT("  %-18s %s in layer 0; %lld of %lld layers differ\n", names[g], d,
                         (long long)differ, (long long)m->cfg.n_layers);
        else EMIT("  %-18s %s\n", names[g], d);
    }
    if (m->cfg.tie_word_embeddings) EMIT("  %-18s tied to embed_tokens\n", "lm_head");
    else {
        mat_desc(&m->lm_head, d, sizeof d);
        EMIT("  %-18s %s\n", "lm_head", d);
    }
    EMIT("  %-18s f32 (converted at load)\n", "norms, biases");
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
    for (int64_t L = 0; L < c->n_layers; L++) {
        const mdl_layer *ly = &m->layers[L];
        const kn_mat *ms[] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
        for (size_t i = 0; i < sizeof ms / sizeof *ms; i++) add_mat_info(in, ms[i]);
    }
    in->kv_bytes_per_token =
        (uint64_t)c->n_layers * 2 * (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim * 4;
    const kn_mat *e = &m->layers[0].wq;
    static const char *const fn[] = {"f32", "f16", "bf16", "affine"};
    if (e->fmt == KN_QAFFINE)
        snprintf(in->quant_desc, sizeof in->quant_desc, "MLX affine %d-bit g%d (%s scales)",
                 e->bits, e->group, fn[e->sfmt]);
    else snprintf(in->quant_desc, sizeof in->quant_desc, "%s", fn[e->fmt]);
    /* fingerprint: config essentials + every tensor's name, dtype, shape */
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, c->architecture, strlen(c->architecture));
    int64_t dims[] = {c->hidden, c->intermediate, c->n_layers, c->n_heads, c->n_kv_heads,
                      c->head_dim, c->vocab};
    XXH3_64bits_update(&st, dims, sizeof dims);
    for (int i = 0; i < wt_set_count(m->ws); i++) {
        const wt_tensor *t = wt_set_at(m->ws, i);
        XXH3_64bits_update(&st, t->name, strlen(t->name));
        XXH3_64bits_update(&st, &t->dtype, sizeof t->dtype);
        XXH3_64bits_update(&st, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    }
    m->fingerprint = XXH3_64bits_digest(&st);
}

kiln_code mdl_load(const char *dir, mdl_model **out, kiln_err *err)
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
    if ((rc = wt_set_open(dir, &m->ws, err))) goto fail;
    m->norm_offset = 0.0f;
    m->embed_scale = 1.0f;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) {
        rc = kiln_fail(err, KILN_E_NOMEM, "model: out of memory");
        goto fail;
    }
    if ((rc = load_mat(m, "model.embed_tokens", c->vocab, c->hidden, &m->embed, err))) goto fail;
    if (c->tie_word_embeddings || !wt_set_find(m->ws, "lm_head.weight")) {
        if (!c->tie_word_embeddings) {
            rc = kiln_fail(err, KILN_E_NOT_FOUND,
                           "missing tensor 'lm_head.weight' (tie_word_embeddings is false)");
            goto fail;
        }
        m->lm_head = m->embed;
    } else if ((rc = load_mat(m, "lm_head", c->vocab, c->hidden, &m->lm_head, err))) {
        goto fail;
    }
    if ((rc = load_vec(m, "model.norm.weight", c->hidden, 0, &m->final_norm, err))) goto fail;
    for (int64_t L = 0; L < c->n_layers; L++)
        if ((rc = load_layer(m, L, err))) goto fail;
    if ((rc = mdl_rope_init(c, &m->rope, err))) goto fail;
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
        for (int64_t L = 0; L < m->cfg.n_layers; L++) {
            mdl_layer *ly = &m->layers[L];
            float *vs[] = {ly->attn_norm, ly->ffn_norm, ly->q_norm, ly->k_norm, ly->bq, ly->bk,
                           ly->bv, ly->bo, ly->b_gate, ly->b_up, ly->b_down};
            for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) free(vs[i]);
        }
        free(m->layers);
    }
    free(m->final_norm);
    mdl_rope_free(&m->rope);
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

kv_pool_config mdl_kv_shape(const mdl_model *m, int32_t n_blocks, int32_t block_tokens)
{
    kv_pool_config k = {
        .n_blocks = n_blocks,
        .block_tokens = block_tokens,
        .n_layers = (int32_t)m->cfg.n_layers,
        .n_kv_heads = (int32_t)m->cfg.n_kv_heads,
        .head_dim = (int32_t)m->cfg.head_dim,
    };
    return k;
}
