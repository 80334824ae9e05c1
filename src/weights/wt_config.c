/*
 * wt_config.c — config.json (+ generation_config.json) into one wt_config.
 *
 * Reading order, and where each field comes from:
 *   architecture   architectures[0]; only when that list is absent or empty,
 *                  model_type ("llama", "mistral", "qwen2", "qwen3")
 *   text keys      the top level, else "text_config" (per key: a multimodal
 *                  wrapper keeps hidden_size & co. in text_config)
 *   rope_scaling   null / absent / "default" -> WT_ROPE_NONE; "type" or
 *                  "rope_type" picks linear / llama3 / yarn / dynamic (newer
 *                  transformers: "rope_parameters", read the same way)
 *   family rules   Qwen2: q/k/v biases always (attention_bias = true, o_proj
 *                  has none); Qwen3: qk_norm; Mistral: sliding_window when
 *                  non-null; Qwen2/3: only when use_sliding_window is true, for
 *                  layers >= max_window_layers
 *   BOS/EOS/pad    config.json, each overridden by generation_config.json
 *   quantization   "quantization", else an MLX-looking "quantization_config"
 *                  (group_size/bits, no quant_method); a foreign quant_method
 *                  (gptq, awq, fp8, ...) is refused
 * Invariants on success (the model layer may rely on them):
 *   (1) hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, vocab > 0
 *       and each below the caps in cfg_caps (so products fit int64);
 *   (2) n_heads % n_kv_heads == 0; head_dim was explicit or hidden / n_heads exactly;
 *   (3) quant and every override spec are valid for their mode (affine: bits in
 *       {2,3,4,5,6,8}, group in {32,64,128}); qover is sorted by path.
 * Errors: KILN_E_INVALID for a malformed or inconsistent config,
 * KILN_E_UNSUPPORTED for an architecture, rope type or quantization we refuse;
 * every message starts with the file (label) it is about.
 * Ownership: wt_config.qover and its paths are OWNED (wt_config_free).
 */
#include "weights/wt_config.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/plat.h"
#include "weights/wt_config_int.h"

/* ------------------------------------------------------------- tables */

typedef struct {
    const char *arch_name;  /* architectures[0] */
    const char *model_type; /* fallback */
    int64_t default_max_pos;
} arch_info;

static const arch_info arch_table[WT_ARCH_COUNT] = {
    [WT_ARCH_LLAMA] = {"LlamaForCausalLM", "llama", 2048},
    [WT_ARCH_MISTRAL] = {"MistralForCausalLM", "mistral", 32768},
    [WT_ARCH_QWEN2] = {"Qwen2ForCausalLM", "qwen2", 32768},
    [WT_ARCH_QWEN3] = {"Qwen3ForCausalLM", "qwen3", 32768},
    [WT_ARCH_GEMMA3] = {"Gemma3ForCausalLM", "gemma3_text", 131072},
    [WT_ARCH_GEMMA3_MM] = {"Gemma3ForConditionalGeneration", "gemma3", 131072},
    [WT_ARCH_GEMMA4] = {"Gemma4ForConditionalGeneration", "gemma4", 131072},
    [WT_ARCH_GEMMA4_TEXT] = {"Gemma4ForCausalLM", "gemma4_text", 131072},
    [WT_ARCH_QWEN3_5] = {"Qwen3_5ForConditionalGeneration", "qwen3_5", 262144},
};

/* Other names of a supported architecture (architectures[0] or model_type). */
static const struct {
    const char *name;
    wt_arch arch;
} arch_alias[] = {
    {"Qwen3_5ForCausalLM", WT_ARCH_QWEN3_5},
    {"qwen3_5_text", WT_ARCH_QWEN3_5},
};

/* Upper bounds for sizes read from JSON: generous for real models, small
 * enough that products of a few of them cannot overflow int64. */
static const struct {
    const char *key;
    int64_t max;
} cfg_caps[] = {
    {"hidden_size", 1 << 20},
    {"intermediate_size", 1 << 22},
    {"num_hidden_layers", 1 << 12},
    {"num_attention_heads", 1 << 12},
    {"num_key_value_heads", 1 << 12},
    {"head_dim", 1 << 16},
    {"vocab_size", 1 << 26},
    {"max_position_embeddings", INT64_C(1) << 32},
    {"max_window_layers", 1 << 12},
    {"sliding_window", INT64_C(1) << 32},
    {"global_head_dim", 1 << 16},
    {"num_global_key_value_heads", 1 << 12},
    {"num_kv_shared_layers", 1 << 12},
    {"hidden_size_per_layer_input", 1 << 16},
    {"vocab_size_per_layer_input", 1 << 26},
    {"num_experts", 1 << 16},
    {"top_k_experts", 1 << 12},
    {"moe_intermediate_size", 1 << 22},
    {"sliding_window_pattern", 1 << 12},
    {"linear_num_key_heads", 1 << 12},
    {"linear_num_value_heads", 1 << 12},
    {"linear_key_head_dim", 1 << 14},
    {"linear_value_head_dim", 1 << 14},
    {"linear_conv_kernel_dim", 64},
    {"full_attention_interval", 1 << 12},
};

#define CFG_MAX_FILE ((size_t)64 * 1024 * 1024)

/* ------------------------------------------------------------- helpers */

const char *wt_arch_name(wt_arch a)
{
    return (unsigned)a < WT_ARCH_COUNT ? arch_table[a].arch_name : "?";
}

const char *wt_arch_supported_list(void)
{
    return "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
           "Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma4ForCausalLM, "
           "Gemma4ForConditionalGeneration, Qwen3_5ForConditionalGeneration (text), "
           "Qwen3_5ForCausalLM";
}

int wt_config_gemma_gen(const wt_config *c)
{
    switch (c->arch) {
    case WT_ARCH_GEMMA3:
    case WT_ARCH_GEMMA3_MM:
        return 3;
    case WT_ARCH_GEMMA4:
    case WT_ARCH_GEMMA4_TEXT:
        return 4;
    default:
        return 0;
    }
}

static void copy_str(char *dst, size_t cap, const char *s)
{
    snprintf(dst, cap, "%s", s ? s : "");
}

/* The value of key at the top level, else in text_config; NULL when absent or null. */
static const json_t *get(const cfg_src *s, const char *key)
{
    const json_t *v = json_object_get(s->root, key);
    if (!v && s->text) v = json_object_get(s->text, key);
    return json_is_null(v) ? NULL : v;
}

static int64_t cap_of(const char *key)
{
    for (size_t i = 0; i < sizeof cfg_caps / sizeof cfg_caps[0]; i++)
        if (strcmp(cfg_caps[i].key, key) == 0) return cfg_caps[i].max;
    return INT32_MAX;
}

/* Integer from an integer or an integral real; 0 on success. */
static int as_int(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d >= -9.2e18 && d <= 9.2e18 && d == floor(d)) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return -1;
}

/* Optional integer key in [lo, cap]; *present tells whether it was there. */
static kiln_code get_int(const cfg_src *s, const char *key, int64_t lo, int64_t *out, bool *present,
                         kiln_err *err)
{
    const json_t *v = get(s, key);
    *present = v != NULL;
    if (!v) return KILN_OK;
    int64_t x;
    if (as_int(v, &x) != 0)
        return kiln_fail(err, KILN_E_INVALID, "%s: '%s' is not an integer", s->label, key);
    if (x < lo)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: '%s' is %" PRId64 "; it must be at least %" PRId64, s->label, key, x,
                         lo);
    if (x > cap_of(key))
        return kiln_fail(err, KILN_E_INVALID, "%s: '%s' is %" PRId64 ", over the limit %" PRId64,
                         s->label, key, x, cap_of(key));
    *out = x;
    return KILN_OK;
}

/* Required integer >= 1. */
static kiln_code need_int(const cfg_src *s, const char *key, int64_t *out, kiln_err *err)
{
    bool present;
    kiln_code c = get_int(s, key, 1, out, &present, err);
    if (c) return c;
    if (!present) return kiln_fail(err, KILN_E_INVALID, "%s: missing '%s'", s->label, key);
    return KILN_OK;
}

/* Optional number; keeps *out (the default) when absent. */
static kiln_code get_num(const json_t *obj, const char *key, const char *label, double *out,
                         bool *present, kiln_err *err)
{
    const json_t *v = json_object_get(obj, key);
    if (present) *present = false;
    if (!v || json_is_null(v)) return KILN_OK;
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return kiln_fail(err, KILN_E_INVALID, "%s: '%s' is not a number", label, key);
    *out = json_number_value(v);
    if (present) *present = true;
    return KILN_OK;
}

static kiln_code get_bool(const cfg_src *s, const char *key, bool *out, kiln_err *err)
{
    const json_t *v = get(s, key);
    if (!v) return KILN_OK;
    if (!json_is_boolean(v))
        return kiln_fail(err, KILN_E_INVALID, "%s: '%s' is not true or false", s->label, key);
    *out = json_is_true(v);
    return KILN_OK;
}

static const char *get_string(const cfg_src *s, const char *key)
{
    const json_t *v = get(s, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* --------------------------------------------------------- architecture */

static kiln_code parse_arch(const cfg_src *s, wt_config *c, kiln_err *err)
{
    const json_t *archs = json_object_get(s->root, "architectures");
    const char *name = NULL;
    if (json_is_array(archs) && json_array_size(archs) > 0) {
        name = json_string_value(json_array_get(archs, 0));
        if (!name)
            return kiln_fail(err, KILN_E_INVALID, "%s: architectures[0] is not a string", s->label);
    }
    const char *mt = get_string(s, "model_type");
    copy_str(c->model_type, sizeof c->model_type, mt);
    for (int a = 0; a < WT_ARCH_COUNT; a++) {
        if (name ? strcmp(name, arch_table[a].arch_name) == 0
                 : (mt && strcmp(mt, arch_table[a].model_type) == 0)) {
            c->arch = (wt_arch)a;
            copy_str(c->architecture, sizeof c->architecture, arch_table[a].arch_name);
            return KILN_OK;
        }
    }
    for (size_t i = 0; i < sizeof arch_alias / sizeof *arch_alias; i++) {
        if (strcmp(name ? name : (mt ? mt : ""), arch_alias[i].name) == 0) {
            c->arch = arch_alias[i].arch;
            copy_str(c->architecture, sizeof c->architecture, name ? name : arch_alias[i].name);
            return KILN_OK;
        }
    }
    return kiln_fail(err, KILN_E_UNSUPPORTED,
                     "%s: architecture '%s' is not supported (supported: %s)", s->label,
                     name ? name : (mt ? mt : "(none given)"), wt_arch_supported_list());
}

/* ---------------------------------------------------------------- sizes */

static kiln_code parse_sizes(const cfg_src *s, wt_config *c, kiln_err *err)
{
    kiln_code r;
    bool has;
    if ((r = need_int(s, "hidden_size", &c->hidden, err)) ||
        (r = need_int(s, "intermediate_size", &c->intermediate, err)) ||
        (r = need_int(s, "num_hidden_layers", &c->n_layers, err)) ||
        (r = need_int(s, "num_attention_heads", &c->n_heads, err)) ||
        (r = need_int(s, "vocab_size", &c->vocab, err)))
        return r;
    c->n_kv_heads = c->n_heads;
    if ((r = get_int(s, "num_key_value_heads", 1, &c->n_kv_heads, &has, err))) return r;
    if (c->n_heads % c->n_kv_heads != 0)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: num_attention_heads %" PRId64
                         " is not a multiple of num_key_value_heads %" PRId64,
                         s->label, c->n_heads, c->n_kv_heads);
    if ((r = get_int(s, "head_dim", 1, &c->head_dim, &has, err))) return r;
    if (!has) {
        if (c->hidden % c->n_heads != 0)
            return kiln_fail(err, KILN_E_INVALID,
                             "%s: hidden_size %" PRId64
                             " is not divisible by num_attention_heads %" PRId64
                             " and head_dim is not given",
                             s->label, c->hidden, c->n_heads);
        c->head_dim = c->hidden / c->n_heads;
    }
    c->max_pos = arch_table[c->arch].default_max_pos;
    if ((r = get_int(s, "max_position_embeddings", 1, &c->max_pos, &has, err))) return r;
    return KILN_OK;
}

static kiln_code parse_norm_and_flags(const cfg_src *s, wt_config *c, kiln_err *err)
{
    kiln_code r;
    c->rms_eps = 1e-6;
    const json_t *eps = get(s, "rms_norm_eps");
    if (eps) {
        if (!json_is_number(eps) || !(json_number_value(eps) > 0) ||
            !isfinite(json_number_value(eps)))
            return kiln_fail(err, KILN_E_INVALID, "%s: 'rms_norm_eps' must be a number > 0",
                             s->label);
        c->rms_eps = json_number_value(eps);
    }
    copy_str(c->hidden_act, sizeof c->hidden_act, "silu");
    const char *act = get_string(s, "hidden_act");
    if (!act) act = get_string(s, "hidden_activation");
    if (act) copy_str(c->hidden_act, sizeof c->hidden_act, act);
    const char *dt = get_string(s, "torch_dtype");
    if (!dt) dt = get_string(s, "dtype");
    copy_str(c->torch_dtype, sizeof c->torch_dtype, dt);
    if ((r = get_bool(s, "tie_word_embeddings", &c->tie_word_embeddings, err)) ||
        (r = get_bool(s, "attention_bias", &c->attention_bias, err)) ||
        (r = get_bool(s, "mlp_bias", &c->mlp_bias, err)))
        return r;
    if (c->arch == WT_ARCH_QWEN2) c->attention_bias = true; /* q/k/v biases, hard-wired in HF */
    if (c->arch == WT_ARCH_QWEN3 || c->arch == WT_ARCH_QWEN3_5) c->qk_norm = true;
    return KILN_OK;
}

static kiln_code parse_window(const cfg_src *s, wt_config *c, kiln_err *err)
{
    kiln_code r;
    bool has, use = false;
    int64_t w = 0;
    if ((r = get_int(s, "sliding_window", 0, &w, &has, err))) return r;
    if (c->arch == WT_ARCH_MISTRAL) {
        c->sliding_window = w;
        c->max_window_layers = 0;
    } else if (c->arch == WT_ARCH_QWEN2 || c->arch == WT_ARCH_QWEN3) {
        if ((r = get_bool(s, "use_sliding_window", &use, err))) return r;
        if (!use) return KILN_OK;
        if (w <= 0)
            return kiln_fail(err, KILN_E_INVALID,
                             "%s: use_sliding_window is true but sliding_window is not set",
                             s->label);
        c->sliding_window = w;
        c->max_window_layers = 28; /* transformers' Qwen2Config/Qwen3Config default */
        if ((r = get_int(s, "max_window_layers", 0, &c->max_window_layers, &has, err))) return r;
    }
    return KILN_OK;
}

/* ----------------------------------------------------------------- rope */

static kiln_code parse_rope_scaling(const cfg_src *s, const json_t *rs, wt_config *c, kiln_err *err)
{
    wt_rope *rp = &c->rope;
    const json_t *tv = json_object_get(rs, "rope_type");
    if (!tv || json_is_null(tv)) tv = json_object_get(rs, "type");
    const char *t = json_string_value(tv);
    if (!t)
        return kiln_fail(err, KILN_E_INVALID, "%s: rope_scaling has no 'type' or 'rope_type'",
                         s->label);
    static const struct {
        const char *name;
        wt_rope_type type;
    } kinds[] = {{"default", WT_ROPE_NONE},
                 {"linear", WT_ROPE_LINEAR},
                 {"llama3", WT_ROPE_LLAMA3},
                 {"yarn", WT_ROPE_YARN},
                 {"dynamic", WT_ROPE_DYNAMIC}};
    size_t k = 0;
    while (k < sizeof kinds / sizeof kinds[0] && strcmp(kinds[k].name, t) != 0)
        k++;
    if (k == sizeof kinds / sizeof kinds[0])
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "%s: rope_scaling type '%s' is not supported (supported: default, "
                         "linear, llama3, yarn, dynamic)",
                         s->label, t);
    rp->type = kinds[k].type;
    if (rp->type == WT_ROPE_NONE) return KILN_OK;
    double omax = (double)c->max_pos;
    bool has_factor;
    kiln_code r;
    if ((r = get_num(rs, "factor", s->label, &rp->factor, &has_factor, err)) ||
        (r = get_num(rs, "low_freq_factor", s->label, &rp->low_freq_factor, NULL, err)) ||
        (r = get_num(rs, "high_freq_factor", s->label, &rp->high_freq_factor, NULL, err)) ||
        (r = get_num(rs, "original_max_position_embeddings", s->label, &omax, NULL, err)) ||
        (r = get_num(rs, "beta_fast", s->label, &rp->beta_fast, NULL, err)) ||
        (r = get_num(rs, "beta_slow", s->label, &rp->beta_slow, NULL, err)) ||
        (r = get_num(rs, "mscale", s->label, &rp->mscale, NULL, err)) ||
        (r = get_num(rs, "mscale_all_dim", s->label, &rp->mscale_all_dim, NULL, err)) ||
        (r = get_num(rs, "attention_factor", s->label, &rp->attention_factor, NULL, err)))
        return r;
    if (!has_factor || !(rp->factor > 0))
        return kiln_fail(err, KILN_E_INVALID, "%s: rope_scaling '%s' needs a 'factor' > 0",
                         s->label, t);
    if (!(omax >= 1 && omax <= 4294967296.0))
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: rope_scaling original_max_position_embeddings out of range",
                         s->label);
    rp->original_max_pos = (int64_t)omax;
    if (rp->type == WT_ROPE_LLAMA3 && !(rp->high_freq_factor > rp->low_freq_factor))
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: rope_scaling llama3 needs high_freq_factor > low_freq_factor",
                         s->label);
    return KILN_OK;
}

static kiln_code parse_rope(const cfg_src *s, wt_config *c, kiln_err *err)
{
    wt_rope *rp = &c->rope;
    *rp = (wt_rope){.type = WT_ROPE_NONE,
                    .factor = 1.0,
                    .low_freq_factor = 1.0,
                    .high_freq_factor = 4.0,
                    .original_max_pos = 8192,
                    .beta_fast = 32.0,
                    .beta_slow = 1.0,
                    .partial_rotary_factor = 1.0};
    const json_t *params = get(s, "rope_parameters"); /* transformers >= 5 */
    c->rope_theta = 10000.0;
    const json_t *th = get(s, "rope_theta");
    if (!th && json_is_object(params)) th = json_object_get(params, "rope_theta");
    if (th && !json_is_null(th)) {
        if (!json_is_number(th) || !(json_number_value(th) > 0) || !isfinite(json_number_value(th)))
            return kiln_fail(err, KILN_E_INVALID, "%s: 'rope_theta' must be a number > 0",
                             s->label);
        c->rope_theta = json_number_value(th);
    }
    const json_t *prf = get(s, "partial_rotary_factor");
    if (prf) {
        if (!json_is_number(prf) || !(json_number_value(prf) > 0 && json_number_value(prf) <= 1))
            return kiln_fail(err, KILN_E_INVALID, "%s: 'partial_rotary_factor' must be in (0, 1]",
                             s->label);
        rp->partial_rotary_factor = json_number_value(prf);
    }
    const json_t *rs = get(s, "rope_scaling");
    if (!rs) rs = params;
    if (!rs) return KILN_OK;
    /* per layer kind ({"sliding_attention": {...}, "full_attention": {...}}):
     * the family parser reads it (wt_config_gemma.c) */
    if (json_is_object(rs) &&
        (json_object_get(rs, "sliding_attention") || json_object_get(rs, "full_attention")))
        return KILN_OK;
    if (!json_is_object(rs))
        return kiln_fail(err, KILN_E_INVALID, "%s: 'rope_scaling' is not an object or null",
                         s->label);
    return parse_rope_scaling(s, rs, c, err);
}

/* ----------------------------------------------------------- token ids */

/* An id: integer in [0, INT32_MAX]; a negative id means "none" (returns 1). */
static kiln_code parse_id(const char *label, const char *key, const json_t *v, int32_t *out,
                          kiln_err *err)
{
    int64_t x;
    if (as_int(v, &x) != 0 || x > INT32_MAX)
        return kiln_fail(err, KILN_E_INVALID, "%s: '%s' holds something other than a token id",
                         label, key);
    *out = x < 0 ? -1 : (int32_t)x;
    return KILN_OK;
}

/* Reads bos/eos/pad from obj (config root, text_config or generation config),
 * overriding what is already in c. */
static kiln_code parse_ids(const json_t *obj, const char *label, wt_config *c, kiln_err *err)
{
    kiln_code r;
    const json_t *v;
    if ((v = json_object_get(obj, "bos_token_id")) && !json_is_null(v))
        if ((r = parse_id(label, "bos_token_id", v, &c->bos_id, err))) return r;
    if ((v = json_object_get(obj, "pad_token_id")) && !json_is_null(v))
        if ((r = parse_id(label, "pad_token_id", v, &c->pad_id, err))) return r;
    if (!(v = json_object_get(obj, "eos_token_id")) || json_is_null(v)) return KILN_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n > WT_MAX_EOS)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "%s: %zu eos_token_id values (at most %d)", label,
                         n, WT_MAX_EOS);
    c->n_eos = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = -1;
        if ((r = parse_id(label, "eos_token_id", json_is_array(v) ? json_array_get(v, i) : v, &id,
                          err)))
            return r;
        if (id >= 0) c->eos_ids[c->n_eos++] = id;
    }
    return KILN_OK;
}

/* ------------------------------------------------------ generation config */

static kiln_code parse_gen(const json_t *g, const char *label, wt_config *c, kiln_err *err)
{
    kiln_code r;
    if (!json_is_object(g)) return kiln_fail(err, KILN_E_INVALID, "%s: not a JSON object", label);
    if ((r = parse_ids(g, label, c, err))) return r;
    if ((r = get_num(g, "temperature", label, &c->gen_temperature, &c->has_gen_temperature, err)) ||
        (r = get_num(g, "top_p", label, &c->gen_top_p, &c->has_gen_top_p, err)) ||
        (r = get_num(g, "min_p", label, &c->gen_min_p, &c->has_gen_min_p, err)) ||
        (r = get_num(g, "repetition_penalty", label, &c->gen_repetition_penalty,
                     &c->has_gen_repetition_penalty, err)))
        return r;
    const json_t *k = json_object_get(g, "top_k");
    if (k && !json_is_null(k)) {
        if (as_int(k, &c->gen_top_k) != 0 || c->gen_top_k < 0 || c->gen_top_k > INT32_MAX)
            return kiln_fail(err, KILN_E_INVALID, "%s: 'top_k' is not an integer >= 0", label);
        c->has_gen_top_k = true;
    }
    return KILN_OK;
}

/* --------------------------------------------------------- quantization */

static const struct {
    const char *name;
    wt_qmode mode;
    int bits, group; /* defaults; fp modes allow only these */
} qmodes[] = {
    {"affine", WT_QMODE_AFFINE, 4, 64},
    {"mxfp4", WT_QMODE_MXFP4, 4, 32},
    {"mxfp8", WT_QMODE_MXFP8, 8, 32},
    {"nvfp4", WT_QMODE_NVFP4, 4, 16},
};

/* Parses {"group_size", "bits", "mode"} with the mode's own defaults and checks
 * the combination. `what` names the entry in messages ("quantization", a path). */
static kiln_code parse_qspec(const json_t *o, const char *label, const char *what, wt_qspec *out,
                             kiln_err *err)
{
    const json_t *mv = json_object_get(o, "mode");
    const char *mode = json_is_null(mv) || !mv ? "affine" : json_string_value(mv);
    if (!mode) return kiln_fail(err, KILN_E_INVALID, "%s: %s: 'mode' is not a string", label, what);
    size_t m = 0;
    while (m < sizeof qmodes / sizeof qmodes[0] && strcmp(qmodes[m].name, mode) != 0)
        m++;
    if (m == sizeof qmodes / sizeof qmodes[0])
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "%s: %s: quantization mode '%s' is not supported (affine, mxfp4, "
                         "mxfp8, nvfp4)",
                         label, what, mode);
    int64_t bits = qmodes[m].bits, gs = qmodes[m].group;
    const json_t *b = json_object_get(o, "bits"), *g = json_object_get(o, "group_size");
    if ((b && !json_is_null(b) && as_int(b, &bits) != 0) ||
        (g && !json_is_null(g) && as_int(g, &gs) != 0))
        return kiln_fail(err, KILN_E_INVALID, "%s: %s: bits/group_size are not integers", label,
                         what);
    if (qmodes[m].mode == WT_QMODE_AFFINE) {
        if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8)
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "%s: %s: %" PRId64 "-bit quantization is not supported "
                             "(bits 2, 3, 4, 5, 6, 8)",
                             label, what, bits);
        if (gs != 32 && gs != 64 && gs != 128)
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "%s: %s: group_size %" PRId64 " is not supported (32, 64, 128)", label,
                             what, gs);
    } else if (bits != qmodes[m].bits || gs != qmodes[m].group) {
        return kiln_fail(err, KILN_E_UNSUPPORTED,
                         "%s: %s: mode %s needs bits %d and group_size %d, not %" PRId64
                         " and %" PRId64,
                         label, what, mode, qmodes[m].bits, qmodes[m].group, bits, gs);
    }
    *out = (wt_qspec){.mode = qmodes[m].mode, .bits = (int)bits, .group_size = (int)gs};
    return KILN_OK;
}

static int cmp_qover(const void *a, const void *b)
{
    return strcmp(((const wt_qoverride *)a)->path, ((const wt_qoverride *)b)->path);
}

static bool is_qspec_key(const char *k)
{
    static const char *keys[] = {"group_size", "bits", "mode", "quant_method",
                                 "quantize_activations"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(k, keys[i]) == 0) return true;
    return false;
}

static kiln_code parse_qoverrides(const json_t *q, const char *label, wt_config *c, kiln_err *err)
{
    size_t n = json_object_size(q);
    c->qover = calloc(n ? n : 1, sizeof *c->qover);
    if (!c->qover) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", label);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)q, key, v)
    {
        if (is_qspec_key(key) || !(json_is_object(v) || json_is_boolean(v))) continue;
        wt_qoverride *o = &c->qover[c->n_qover];
        if (json_is_object(v)) {
            kiln_code r = parse_qspec(v, label, key, &o->spec, err);
            if (r) return r;
        } else if (json_is_true(v)) {
            o->use_global = true;
            o->spec = c->quant;
        }
        o->path = strdup(key);
        if (!o->path) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", label);
        c->n_qover++;
    }
    qsort(c->qover, (size_t)c->n_qover, sizeof *c->qover, cmp_qover);
    return KILN_OK;
}

static kiln_code parse_quant(const cfg_src *s, wt_config *c, kiln_err *err)
{
    const json_t *q = json_object_get(s->root, "quantization");
    const char *which = "quantization";
    if (!q || json_is_null(q)) {
        q = get(s, "quantization_config");
        which = "quantization_config";
        if (!q) return KILN_OK;
        const json_t *qm = json_object_get(q, "quant_method");
        if (qm && !json_is_null(qm))
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "%s: quantization_config quant_method '%s' is not supported (only "
                             "MLX affine checkpoints)",
                             s->label, json_is_string(qm) ? json_string_value(qm) : "?");
        if (!json_object_get(q, "group_size") && !json_object_get(q, "bits"))
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "%s: quantization_config is not an MLX quantization", s->label);
    }
    if (!json_is_object(q))
        return kiln_fail(err, KILN_E_INVALID, "%s: '%s' is not an object", s->label, which);
    kiln_code r = parse_qspec(q, s->label, which, &c->quant, err);
    if (r) return r;
    return parse_qoverrides(q, s->label, c, err);
}

/* -------------------------------------------------------- Qwen3.5 hybrid */

/* Qwen3.5 (design/models/qwen3_5.md §2): the DeltaNet geometry, which layers
 * are linear attention, the attention output gate, partial RoPE. layer_types,
 * when given, must agree with full_attention_interval (default 4): mlx-lm
 * uses only the interval, transformers only layer_types, so a config where
 * they differ would run differently in each and is refused. */
static kiln_code parse_qwen35(const cfg_src *s, wt_config *c, kiln_err *err)
{
    kiln_code r;
    bool has;
    c->lin_k_heads = 16, c->lin_v_heads = 32, c->lin_k_dim = 128, c->lin_v_dim = 128;
    c->lin_conv = 4;
    c->full_attn_interval = 4;
    if ((r = get_int(s, "linear_num_key_heads", 1, &c->lin_k_heads, &has, err)) ||
        (r = get_int(s, "linear_num_value_heads", 1, &c->lin_v_heads, &has, err)) ||
        (r = get_int(s, "linear_key_head_dim", 1, &c->lin_k_dim, &has, err)) ||
        (r = get_int(s, "linear_value_head_dim", 1, &c->lin_v_dim, &has, err)) ||
        (r = get_int(s, "linear_conv_kernel_dim", 1, &c->lin_conv, &has, err)))
        return r;
    bool has_interval;
    if ((r = get_int(s, "full_attention_interval", 1, &c->full_attn_interval, &has_interval, err)))
        return r;
    if (c->lin_v_heads % c->lin_k_heads != 0)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: linear_num_value_heads %" PRId64
                         " is not a multiple of linear_num_key_heads %" PRId64,
                         s->label, c->lin_v_heads, c->lin_k_heads);
    c->attn_output_gate = true;
    if ((r = get_bool(s, "attn_output_gate", &c->attn_output_gate, err))) return r;
    /* tied when either level says so (the text_config may carry it alone) */
    const json_t *t = s->text ? json_object_get(s->text, "tie_word_embeddings") : NULL;
    if (json_is_true(t)) c->tie_word_embeddings = true;
    c->has_vision = json_is_object(json_object_get(s->root, "vision_config"));
    /* partial_rotary_factor: rope_parameters' first, else the top-level key */
    const json_t *rp = get(s, "rope_parameters");
    const json_t *prf = json_is_object(rp) ? json_object_get(rp, "partial_rotary_factor") : NULL;
    if (prf && !json_is_null(prf)) {
        if (!json_is_number(prf) || !(json_number_value(prf) > 0 && json_number_value(prf) <= 1))
            return kiln_fail(err, KILN_E_INVALID,
                             "%s: rope_parameters.partial_rotary_factor must be in (0, 1]",
                             s->label);
        c->rope.partial_rotary_factor = json_number_value(prf);
    }
    c->layer_linear = calloc((size_t)c->n_layers, 1);
    if (!c->layer_linear) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", s->label);
    for (int64_t i = 0; i < c->n_layers; i++)
        c->layer_linear[i] = (i + 1) % c->full_attn_interval != 0;
    const json_t *lt = get(s, "layer_types");
    if (!lt) return KILN_OK;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != c->n_layers)
        return kiln_fail(err, KILN_E_INVALID,
                         "%s: layer_types must be a list of %" PRId64 " layer types", s->label,
                         c->n_layers);
    for (int64_t i = 0; i < c->n_layers; i++) {
        const char *k = json_string_value(json_array_get(lt, (size_t)i));
        int linear;
        if (k && strcmp(k, "linear_attention") == 0)
            linear = 1;
        else if (k && strcmp(k, "full_attention") == 0)
            linear = 0;
        else
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "%s: layer_types[%" PRId64 "] is '%s' (supported: linear_attention, "
                             "full_attention)",
                             s->label, i, k ? k : "?");
        if (linear != c->layer_linear[i])
            return kiln_fail(
                err, KILN_E_INVALID,
                "%s: layer_types[%" PRId64 "] is %s but full_attention_interval %" PRId64
                "%s makes layer %" PRId64 " %s; transformers follows layer_types and mlx-lm the "
                "interval, so this config is refused",
                s->label, i, k, c->full_attn_interval, has_interval ? "" : " (the default)", i,
                c->layer_linear[i] ? "linear_attention" : "full_attention");
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ API */

static kiln_code parse_all(const json_t *root, const json_t *gen, const char *label,
                           const char *gen_label, wt_config *c, kiln_err *err)
{
    if (!json_is_object(root))
        return kiln_fail(err, KILN_E_INVALID, "%s: not a JSON object", label);
    cfg_src s = {.root = root, .label = label};
    const json_t *tc = json_object_get(root, "text_config");
    s.text = json_is_object(tc) ? tc : NULL;
    kiln_code r;
    json_t *dflt = NULL; /* OWNED: a family's defaults filled into the text keys */
    if ((r = parse_arch(&s, c, err))) return r;
    if (wt_config_gemma_gen(c) && (r = wt_gemma_defaults(&s, c, &dflt, err))) return r;
    if ((r = parse_sizes(&s, c, err)) || (r = parse_norm_and_flags(&s, c, err)) ||
        (r = parse_window(&s, c, err)) || (r = parse_rope(&s, c, err)) ||
        (wt_config_gemma_gen(c) && (r = wt_gemma_parse(&s, c, err))))
        goto done;
    if (c->arch == WT_ARCH_QWEN3_5 && (r = parse_qwen35(&s, c, err))) goto done;
    if (s.text && (r = parse_ids(s.text, label, c, err))) goto done;
    if ((r = parse_ids(root, label, c, err))) goto done;
    if (gen && (r = parse_gen(gen, gen_label, c, err))) goto done;
    r = parse_quant(&s, c, err);
done:
    json_decref(dflt);
    return r;
}

static kiln_code load_json(const char *text, size_t len, const char *label, json_t **out,
                           kiln_err *err)
{
    json_error_t jerr;
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!*out)
        return kiln_fail(err, KILN_E_INVALID, "%s: not valid JSON: %s (line %d, column %d)", label,
                         jerr.text, jerr.line, jerr.column);
    return KILN_OK;
}

static kiln_code config_parse2(const char *json, size_t len, const char *gen, size_t gen_len,
                               const char *label, const char *gen_label, wt_config *out,
                               kiln_err *err)
{
    memset(out, 0, sizeof *out);
    out->bos_id = -1;
    out->pad_id = -1;
    json_t *root = NULL, *groot = NULL;
    kiln_code r = load_json(json, len, label, &root, err);
    if (!r && gen) r = load_json(gen, gen_len, gen_label, &groot, err);
    if (!r) r = parse_all(root, groot, label, gen_label, out, err);
    json_decref(root);
    json_decref(groot);
    if (r) {
        wt_config_free(out);
        out->bos_id = out->pad_id = -1;
    }
    return r;
}

kiln_code wt_config_parse(const char *json, size_t len, const char *gen, size_t gen_len,
                          const char *label, wt_config *out, kiln_err *err)
{
    return config_parse2(json, len, gen, gen_len, label ? label : "config.json",
                         "generation_config.json", out, err);
}

kiln_code wt_config_load(const char *dir, wt_config *out, kiln_err *err)
{
    memset(out, 0, sizeof *out);
    out->bos_id = out->pad_id = -1;
    char path[4096], gpath[4096];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path ||
        snprintf(gpath, sizeof gpath, "%s/generation_config.json", dir) >= (int)sizeof gpath)
        return kiln_fail(err, KILN_E_INVALID, "%s: path too long", dir);
    if (!plat_is_dir(dir))
        return kiln_fail(err, KILN_E_NOT_FOUND, "%s: %s", dir,
                         access(dir, F_OK) == 0 ? "not a folder" : "no such folder");
    char *text = NULL, *gtext = NULL;
    size_t len = 0, glen = 0;
    kiln_code r = plat_read_file(path, CFG_MAX_FILE, &text, &len, err);
    if (r) return r;
    r = plat_read_file(gpath, CFG_MAX_FILE, &gtext, &glen, err);
    if (r == KILN_E_NOT_FOUND) {
        kiln_err_clear(err);
        r = KILN_OK;
    }
    if (!r) r = config_parse2(text, len, gtext, glen, path, gpath, out, err);
    free(text);
    free(gtext);
    return r;
}

void wt_config_free(wt_config *cfg)
{
    if (!cfg) return;
    free(cfg->gemma.layer_types);
    cfg->gemma.layer_types = NULL;
    free(cfg->layer_linear);
    cfg->layer_linear = NULL;
    for (int i = 0; i < cfg->n_qover; i++)
        free(cfg->qover[i].path);
    free(cfg->qover);
    cfg->qover = NULL;
    cfg->n_qover = 0;
}

wt_qspec wt_config_quant_for(const wt_config *cfg, const char *path, bool has_scales)
{
    wt_qspec none = {.mode = WT_QMODE_NONE};
    if (!cfg || !path) return none;
    if (cfg->n_qover > 0) {
        wt_qoverride key = {.path = (char *)path};
        const wt_qoverride *o =
            bsearch(&key, cfg->qover, (size_t)cfg->n_qover, sizeof key, cmp_qover);
        if (o) return o->use_global ? cfg->quant : o->spec;
    }
    return has_scales ? cfg->quant : none;
}

/* ------------------------------------------------- for family parsers */

const json_t *wt_cfg_get(const cfg_src *s, const char *key)
{
    return get(s, key);
}

int wt_cfg_has(const cfg_src *s, const char *key)
{
    return json_object_get(s->root, key) != NULL ||
           (s->text && json_object_get(s->text, key) != NULL);
}

kiln_code wt_cfg_int(const cfg_src *s, const char *key, int64_t lo, int64_t *out, bool *present,
                     kiln_err *err)
{
    return get_int(s, key, lo, out, present, err);
}

kiln_code wt_cfg_num(const json_t *obj, const char *key, const char *label, double *out,
                     bool *present, kiln_err *err)
{
    return get_num(obj, key, label, out, present, err);
}

kiln_code wt_cfg_bool(const cfg_src *s, const char *key, bool *out, kiln_err *err)
{
    return get_bool(s, key, out, err);
}
