/*
 * wt_config_gemma.c — the Gemma 3 and Gemma 4 keys of config.json into
 * wt_config.gemma / wt_config.moe (design/models/gemma4.md §2; docs/models.md).
 *
 * Gemma 3 (Gemma3ForCausalLM, Gemma3ForConditionalGeneration): google's
 * multimodal configs leave most text keys out and rely on transformers'
 * Gemma3TextConfig defaults, so those defaults are filled in first
 * (wt_gemma_defaults; mlx-lm's differ for vocab_size and sliding_window, and
 * transformers wrote these files). Layer kinds: "layer_types", else
 * sliding_window_pattern (every pattern-th layer full). RoPE: rope_theta with
 * rope_scaling on full layers, rope_local_base_freq on sliding layers (or the
 * per-kind "rope_parameters" of newer transformers). Score scale
 * query_pre_attn_scalar^-0.5.
 *
 * Gemma 4 (Gemma4ForConditionalGeneration, Gemma4ForCausalLM): every key
 * whose default differs between transformers and mlx-lm is required —
 * layer_types, rope_parameters, num_key_value_heads, num_kv_shared_layers,
 * hidden_size_per_layer_input, use_double_wide_mlp (when layers share KV),
 * final_logit_softcapping (present; null means none). Score scale 1.
 * global_head_dim defaults to 512 (both agree); num_global_key_value_heads
 * applies only with attention_k_eq_v.
 * Errors: KILN_E_INVALID (missing or contradictory keys), KILN_E_UNSUPPORTED
 * (layer kinds, RoPE types, activations kiln does not run).
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "weights/wt_config_int.h"

/* transformers Gemma3TextConfig defaults for keys google's configs omit
 * (hidden_size, intermediate_size and num_hidden_layers are always written). */
static kiln_code gemma3_fill(json_t *o, kiln_err *err)
{
    static const struct {
        const char *key;
        double v;
        int is_int;
    } d[] = {{"num_attention_heads", 8, 1},
             {"num_key_value_heads", 4, 1},
             {"head_dim", 256, 1},
             {"vocab_size", 262208, 1},
             {"query_pre_attn_scalar", 256, 1},
             {"rope_theta", 1e6, 0},
             {"rope_local_base_freq", 1e4, 0},
             {"sliding_window_pattern", 6, 1},
             {"rms_norm_eps", 1e-6, 0},
             {"max_position_embeddings", 131072, 1},
             {"sliding_window", 4096, 1}};
    for (size_t i = 0; i < sizeof d / sizeof *d; i++) {
        if (json_object_get(o, d[i].key)) continue;
        json_t *v = d[i].is_int ? json_integer((json_int_t)d[i].v) : json_real(d[i].v);
        if (!v || json_object_set_new(o, d[i].key, v))
            return kiln_fail(err, KILN_E_NOMEM, "config.json: out of memory");
    }
    return KILN_OK;
}

kiln_code wt_gemma_defaults(cfg_src *s, wt_config *c, json_t **owned, kiln_err *err)
{
    *owned = NULL;
    if (wt_config_gemma_gen(c) != 3) return KILN_OK;
    /* the object holding the text keys: text_config of a multimodal wrapper, else the root */
    const json_t *src = s->text ? s->text : s->root;
    json_t *copy = json_deep_copy(src);
    if (!copy) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", s->label);
    kiln_code r = gemma3_fill(copy, err);
    if (r) {
        json_decref(copy);
        return r;
    }
    if (s->text)
        s->text = copy;
    else
        s->root = copy;
    *owned = copy;
    return KILN_OK;
}

/* ---------------------------------------------------------------- helpers */

static kiln_code need_key(const cfg_src *s, const char *key, const char *why, kiln_err *err)
{
    if (wt_cfg_has(s, key)) return KILN_OK;
    return kiln_fail(err, KILN_E_INVALID,
                     "%s: Gemma 4 config lacks '%s' (%s; transformers and mlx-lm default it "
                     "differently, so kiln does not guess)",
                     s->label, key, why);
}

/* One kind's {"rope_type", "rope_theta", "partial_rotary_factor", "factor"}. */
static kiln_code parse_kind_rope(const cfg_src *s, const json_t *o, const char *kind, int full,
                                 wt_kind_rope *out, kiln_err *err)
{
    if (!json_is_object(o))
        return kiln_fail(err, KILN_E_INVALID, "%s: rope_parameters.%s is not an object", s->label,
                         kind);
    *out =
        (wt_kind_rope){.theta = 10000.0,
                       .rope = {.type = WT_ROPE_NONE, .factor = 1.0, .partial_rotary_factor = 1.0}};
    bool has_theta = false;
    kiln_code r;
    if ((r = wt_cfg_num(o, "rope_theta", s->label, &out->theta, &has_theta, err)) ||
        (r = wt_cfg_num(o, "factor", s->label, &out->rope.factor, NULL, err)) ||
        (r = wt_cfg_num(o, "partial_rotary_factor", s->label, &out->rope.partial_rotary_factor,
                        NULL, err)))
        return r;
    if (!has_theta || !(out->theta > 0))
        return kiln_fail(err, KILN_E_INVALID, "%s: rope_parameters.%s needs a rope_theta > 0",
                         s->label, kind);
    if (!(out->rope.factor > 0) || !(out->rope.partial_rotary_factor > 0) ||
        out->rope.partial_rotary_factor > 1)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: rope_parameters.%s: factor must be > 0 and partial_rotary_factor "
                         "in (0, 1]",
                         s->label, kind);
    const json_t *tv = json_object_get(o, "rope_type");
    const char *t = json_is_string(tv) ? json_string_value(tv) : NULL;
    /* no rope_type: what Gemma 4 ships for the kind (proportional on full layers) */
    if (!t) t = full && out->rope.partial_rotary_factor < 1 ? "proportional" : "default";
    if (strcmp(t, "default") == 0) {
        if (out->rope.partial_rotary_factor != 1)
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "%s: rope_parameters.%s: partial rotation needs rope_type "
                             "\"proportional\"",
                             s->label, kind);
        out->rope.type = out->rope.factor != 1 ? WT_ROPE_LINEAR : WT_ROPE_NONE;
    } else if (strcmp(t, "proportional") == 0) {
        out->rope.type = WT_ROPE_PROPORTIONAL;
    } else if (strcmp(t, "linear") == 0) {
        out->rope.type = WT_ROPE_LINEAR;
    } else {
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "%s: rope_parameters.%s: rope_type '%s' (Gemma: default, linear, "
                         "proportional)",
                         s->label, kind, t);
    }
    return KILN_OK;
}

/* "layer_types": one "sliding_attention" / "full_attention" per layer. */
static kiln_code parse_layer_types(const cfg_src *s, wt_config *c, kiln_err *err)
{
    const json_t *lt = wt_cfg_get(s, "layer_types");
    c->gemma.layer_types = calloc((size_t)c->n_layers, 1);
    if (!c->gemma.layer_types) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", s->label);
    if (!lt) {
        if (wt_config_gemma_gen(c) == 4) return need_key(s, "layer_types", "the layer kinds", err);
        int64_t pat = 6;
        bool has;
        kiln_code r = wt_cfg_int(s, "sliding_window_pattern", 1, &pat, &has, err);
        if (r) return r;
        for (int64_t L = 0; L < c->n_layers; L++) /* transformers Gemma3TextConfig */
            c->gemma.layer_types[L] = (L + 1) % pat ? WT_LAYER_SLIDING : WT_LAYER_FULL;
        return KILN_OK;
    }
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != c->n_layers)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: layer_types must list one kind per layer (%" PRId64 ")", s->label,
                         c->n_layers);
    for (int64_t L = 0; L < c->n_layers; L++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)L));
        if (t && strcmp(t, "sliding_attention") == 0)
            c->gemma.layer_types[L] = WT_LAYER_SLIDING;
        else if (t && strcmp(t, "full_attention") == 0)
            c->gemma.layer_types[L] = WT_LAYER_FULL;
        else
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "%s: layer_types[%" PRId64
                             "] is '%s' (kiln runs sliding_attention and full_attention)",
                             s->label, L, t ? t : "not a string");
    }
    return KILN_OK;
}

static kiln_code parse_ropes(const cfg_src *s, wt_config *c, kiln_err *err)
{
    wt_gemma *g = &c->gemma;
    const json_t *rp = wt_cfg_get(s, "rope_parameters");
    if (json_is_object(rp) &&
        (json_object_get(rp, "sliding_attention") || json_object_get(rp, "full_attention"))) {
        kiln_code r;
        if ((r = parse_kind_rope(s, json_object_get(rp, "full_attention"), "full_attention", 1,
                                 &g->rope[WT_LAYER_FULL], err)) ||
            (r = parse_kind_rope(s, json_object_get(rp, "sliding_attention"), "sliding_attention",
                                 0, &g->rope[WT_LAYER_SLIDING], err)))
            return r;
        return KILN_OK;
    }
    if (wt_config_gemma_gen(c) == 4)
        return need_key(s, "rope_parameters", "sliding_attention and full_attention RoPE", err);
    /* Gemma 3, transformers 4: rope_theta + rope_scaling on full layers,
     * rope_local_base_freq plain on sliding layers */
    g->rope[WT_LAYER_FULL] = (wt_kind_rope){.theta = c->rope_theta, .rope = c->rope};
    double local = 10000.0;
    kiln_code r = wt_cfg_num(s->text ? s->text : s->root, "rope_local_base_freq", s->label, &local,
                             NULL, err);
    if (r) return r;
    if (!(local > 0))
        return kiln_fail(err, KILN_E_INVALID, "%s: rope_local_base_freq must be > 0", s->label);
    g->rope[WT_LAYER_SLIDING] =
        (wt_kind_rope){.theta = local,
                       .rope = {.type = WT_ROPE_NONE, .factor = 1.0, .partial_rotary_factor = 1.0}};
    if (c->rope.type != WT_ROPE_NONE && c->rope.type != WT_ROPE_LINEAR)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "%s: Gemma 3 rope_scaling must be linear or absent", s->label);
    return KILN_OK;
}

/* A number key that may be null (0 = null); *present tells whether it was written. */
static kiln_code nullable_num(const cfg_src *s, const char *key, double *out, bool *present,
                              kiln_err *err)
{
    *present = wt_cfg_has(s, key);
    *out = 0;
    const json_t *v = wt_cfg_get(s, key);
    if (!v) return KILN_OK;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return kiln_fail(err, KILN_E_INVALID, "%s: '%s' must be a number >= 0 or null", s->label,
                         key);
    *out = json_number_value(v);
    return KILN_OK;
}

static kiln_code parse_moe(const cfg_src *s, wt_config *c, kiln_err *err)
{
    bool moe = false, has;
    kiln_code r = wt_cfg_bool(s, "enable_moe_block", &moe, err);
    if (r || !moe) return r;
    wt_moe *m = &c->moe;
    if ((r = wt_cfg_int(s, "num_experts", 1, &m->n_experts, &has, err))) return r;
    if (!has)
        return kiln_fail(err, KILN_E_INVALID, "%s: enable_moe_block needs num_experts", s->label);
    if ((r = wt_cfg_int(s, "top_k_experts", 1, &m->top_k, &has, err))) return r;
    if (!has)
        return kiln_fail(err, KILN_E_INVALID, "%s: enable_moe_block needs top_k_experts", s->label);
    if ((r = wt_cfg_int(s, "moe_intermediate_size", 1, &m->ffn, &has, err))) return r;
    if (!has)
        return kiln_fail(err, KILN_E_INVALID, "%s: enable_moe_block needs moe_intermediate_size",
                         s->label);
    if (m->top_k > m->n_experts)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: top_k_experts %" PRId64 " is more than num_experts %" PRId64,
                         s->label, m->top_k, m->n_experts);
    return KILN_OK;
}

/* Gemma 4's attention and per-layer keys. */
static kiln_code parse_gemma4(const cfg_src *s, wt_config *c, kiln_err *err)
{
    wt_gemma *g = &c->gemma;
    kiln_code r;
    bool has;
    if ((r = need_key(s, "num_key_value_heads", "KV heads of sliding layers", err)) ||
        (r = need_key(s, "num_kv_shared_layers", "KV-shared layers", err)) ||
        (r = need_key(s, "hidden_size_per_layer_input", "per-layer inputs", err)) ||
        (r = need_key(s, "final_logit_softcapping", "null when there is none", err)))
        return r;
    g->global_head_dim = 512;
    if ((r = wt_cfg_int(s, "global_head_dim", 1, &g->global_head_dim, &has, err)) ||
        (r = wt_cfg_bool(s, "attention_k_eq_v", &g->k_eq_v, err)))
        return r;
    g->n_global_kv_heads = c->n_kv_heads;
    if (g->k_eq_v &&
        (r = wt_cfg_int(s, "num_global_key_value_heads", 1, &g->n_global_kv_heads, &has, err)))
        return r;
    if (c->n_heads % g->n_global_kv_heads != 0)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: num_attention_heads %" PRId64
                         " is not a multiple of num_global_key_value_heads %" PRId64,
                         s->label, c->n_heads, g->n_global_kv_heads);
    if ((r = wt_cfg_int(s, "hidden_size_per_layer_input", 0, &g->pli_dim, &has, err))) return r;
    g->pli_vocab = c->vocab;
    if ((r = wt_cfg_int(s, "vocab_size_per_layer_input", 1, &g->pli_vocab, &has, err))) return r;
    if ((r = wt_cfg_int(s, "num_kv_shared_layers", 0, &g->n_kv_shared, &has, err))) return r;
    if (g->n_kv_shared >= c->n_layers)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: num_kv_shared_layers %" PRId64
                         " leaves no layer to share from (%" PRId64 " layers)",
                         s->label, g->n_kv_shared, c->n_layers);
    if (g->n_kv_shared > 0 &&
        ((r = need_key(s, "use_double_wide_mlp", "MLP width of KV-shared layers", err)) ||
         (r = wt_cfg_bool(s, "use_double_wide_mlp", &g->double_wide_mlp, err))))
        return r;
    const json_t *bi = wt_cfg_get(s, "use_bidirectional_attention");
    if (json_is_string(bi) && strcmp(json_string_value(bi), "all") == 0)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "%s: use_bidirectional_attention \"all\" (a non-causal encoder)",
                         s->label);
    g->attn_scale = 1.0;
    return parse_moe(s, c, err);
}

kiln_code wt_gemma_parse(const cfg_src *s, wt_config *c, kiln_err *err)
{
    wt_gemma *g = &c->gemma;
    kiln_code r;
    bool has;
    const char *act = c->hidden_act;
    if (strcmp(act, "silu") == 0 && !wt_cfg_has(s, "hidden_act") &&
        !wt_cfg_has(s, "hidden_activation"))
        act = "gelu_pytorch_tanh"; /* wt_config's default is Llama's */
    if (strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_tanh") && strcmp(act, "gelu_new") &&
        strcmp(act, "gelu"))
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "%s: Gemma hidden_activation '%s' (kiln runs gelu_pytorch_tanh)", s->label,
                         act);
    snprintf(c->hidden_act, sizeof c->hidden_act, "gelu_pytorch_tanh");
    if ((r = parse_layer_types(s, c, err))) return r;
    int any_sliding = 0;
    for (int64_t L = 0; L < c->n_layers; L++)
        any_sliding |= c->gemma.layer_types[L] == WT_LAYER_SLIDING;
    if (wt_config_gemma_gen(c) == 4 && any_sliding &&
        (r = need_key(s, "sliding_window", "window of sliding layers", err)))
        return r;
    if ((r = wt_cfg_int(s, "sliding_window", 1, &c->sliding_window, &has, err))) return r;
    if (any_sliding && (!has || c->sliding_window < 1))
        return kiln_fail(err, KILN_E_INVALID, "%s: sliding layers need a sliding_window", s->label);
    c->max_window_layers = 0;
    if ((r = parse_ropes(s, c, err))) return r;
    if ((r = nullable_num(s, "final_logit_softcapping", &g->final_softcap, &has, err)) ||
        (r = nullable_num(s, "attn_logit_softcapping", &g->attn_softcap, &has, err)))
        return r;
    c->tie_word_embeddings = true; /* the head is always the embedding (TS, HF) */
    if (json_object_get(s->root, "vision_config") &&
        !json_is_null(json_object_get(s->root, "vision_config")))
        g->n_towers_skipped++;
    if (json_object_get(s->root, "audio_config") &&
        !json_is_null(json_object_get(s->root, "audio_config")))
        g->n_towers_skipped++;
    if (wt_config_gemma_gen(c) == 3) {
        g->global_head_dim = c->head_dim;
        g->n_global_kv_heads = c->n_kv_heads;
        double qpas = (double)c->head_dim;
        const json_t *v = wt_cfg_get(s, "query_pre_attn_scalar");
        if (v) {
            if (!json_is_number(v) || !(json_number_value(v) > 0))
                return kiln_fail(err, KILN_E_INVALID, "%s: query_pre_attn_scalar must be > 0",
                                 s->label);
            qpas = json_number_value(v);
        }
        g->attn_scale = 1.0 / sqrt(qpas);
        return KILN_OK;
    }
    if (g->attn_softcap > 0)
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "%s: attn_logit_softcapping on Gemma 4 (no source applies it)", s->label);
    return parse_gemma4(s, c, err);
}
