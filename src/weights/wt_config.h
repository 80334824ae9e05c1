/*
 * wt_config.h — config.json (+ generation_config.json) of a Hugging Face
 * snapshot, parsed into one plain struct.
 *
 *   wt_config cfg; kiln_err err;
 *   if (wt_config_load("/models/qwen3", &cfg, &err) != KILN_OK) die(err.msg);
 *   wt_qspec q = wt_config_quant_for(&cfg, "model.layers.0.mlp.down_proj", has_scales);
 *   wt_config_free(&cfg);
 *
 * Nested "text_config" (multimodal wrappers) is read when the top level lacks the
 * text keys. BOS/EOS come from config.json and are overridden by
 * generation_config.json when it has them (int or list). An unsupported
 * architecture is refused with a message listing the supported ones.
 *
 * Family notes for the model layer: attention_bias is Llama's flag (biases on
 * q/k/v/o projections); for Qwen2 it is forced true and there means q/k/v only
 * (Qwen2 has no o_proj bias: check for the tensor). qk_norm is true for Qwen3.
 * sliding_window > 0 only when enabled: Mistral on every layer
 * (max_window_layers 0), Qwen2/3 on layers >= max_window_layers.
 * Errors: KILN_E_INVALID (malformed/inconsistent config), KILN_E_UNSUPPORTED
 * (architecture, rope type, quantization), KILN_E_NOT_FOUND / KILN_E_IO (files).
 */
#ifndef KILN_WT_CONFIG_H
#define KILN_WT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

typedef enum {
    WT_ARCH_LLAMA,   /* LlamaForCausalLM */
    WT_ARCH_MISTRAL, /* MistralForCausalLM */
    WT_ARCH_QWEN2,   /* Qwen2ForCausalLM: q/k/v biases */
    WT_ARCH_QWEN3,   /* Qwen3ForCausalLM: per-head q_norm/k_norm */
    WT_ARCH_GEMMA3,      /* Gemma3ForCausalLM (gemma3_text) */
    WT_ARCH_GEMMA3_MM,   /* Gemma3ForConditionalGeneration (gemma3): the text path */
    WT_ARCH_GEMMA4,      /* Gemma4ForConditionalGeneration (gemma4): the text path */
    WT_ARCH_GEMMA4_TEXT, /* Gemma4ForCausalLM (gemma4_text) */
    WT_ARCH_QWEN3_5, /* Qwen3_5ForConditionalGeneration (text path) / Qwen3_5ForCausalLM:
                        hybrid gated DeltaNet + gated attention (wt_config_qwen35) */
    WT_ARCH_COUNT
} wt_arch;

typedef enum {
    WT_ROPE_NONE, /* plain RoPE with rope_theta */
    WT_ROPE_LINEAR,
    WT_ROPE_LLAMA3,
    WT_ROPE_YARN,
    WT_ROPE_DYNAMIC,
    WT_ROPE_PROPORTIONAL, /* Gemma 4 full layers: the first partial_rotary_factor share of the
                             head's pairs (j, j + d/2) rotate, exponent over the whole d */
} wt_rope_type;

typedef struct {
    wt_rope_type type;
    double factor;            /* linear / llama3 / yarn / dynamic */
    double low_freq_factor;   /* llama3 */
    double high_freq_factor;  /* llama3 */
    int64_t original_max_pos; /* llama3 / yarn / dynamic: original_max_position_embeddings */
    double beta_fast, beta_slow; /* yarn (defaults 32, 1) */
    double mscale, mscale_all_dim; /* yarn (deepseek style; 0 = absent) */
    double attention_factor;  /* yarn: explicit attention_factor, 0 = derive */
    double partial_rotary_factor; /* fraction of head_dim rotated (1.0 = all) */
} wt_rope;

typedef enum { WT_QMODE_NONE = 0, WT_QMODE_AFFINE, WT_QMODE_MXFP4, WT_QMODE_MXFP8, WT_QMODE_NVFP4 } wt_qmode;

typedef struct {
    wt_qmode mode; /* WT_QMODE_NONE: not quantized */
    int bits, group_size;
} wt_qspec;

typedef struct {
    char *path; /* OWNED: module path, e.g. "model.layers.0.mlp.down_proj" */
    wt_qspec spec; /* mode NONE for `false` */
    bool use_global; /* `true`: quantized with the global parameters */
} wt_qoverride;

#define WT_MAX_EOS 8

/* The two attention layer kinds of "layer_types" (Gemma 3/4). */
typedef enum { WT_LAYER_FULL = 0, WT_LAYER_SLIDING = 1 } wt_layer_type;

/* One layer kind's RoPE (Gemma: sliding and full layers differ). */
typedef struct {
    double theta;
    wt_rope rope; /* type (NONE = plain), factor, partial_rotary_factor */
} wt_kind_rope;

/* Mixture of experts (Gemma 4 26B-A4B's enable_moe_block, num_experts,
 * top_k_experts, moe_intermediate_size). n_experts 0: a dense model. */
typedef struct {
    int64_t n_experts, top_k, ffn;
} wt_moe;

/* Gemma 3 / Gemma 4 keys (wt_config_gemma.c reads them; docs/models.md). */
typedef struct {
    uint8_t *layer_types;       /* OWNED [n_layers] wt_layer_type; NULL for other families */
    int64_t global_head_dim;    /* head_dim of full layers (= head_dim for Gemma 3) */
    int64_t n_global_kv_heads;  /* KV heads of full layers when k_eq_v (Gemma 4) */
    bool k_eq_v;                /* attention_k_eq_v: full layers take V from the K projection */
    int64_t pli_dim, pli_vocab; /* hidden_size_per_layer_input (0 = off), its table's rows */
    int64_t n_kv_shared;        /* num_kv_shared_layers: trailing layers reading a donor's K/V */
    bool double_wide_mlp;       /* KV-shared layers' MLP is 2 x intermediate_size */
    double final_softcap;       /* final_logit_softcapping; 0 = null */
    double attn_softcap;        /* attn_logit_softcapping; 0 = null */
    double attn_scale;          /* score multiplier: query_pre_attn_scalar^-0.5 (3), 1 (4) */
    wt_kind_rope rope[2];       /* [wt_layer_type] */
    int n_towers_skipped;       /* vision/audio configs present (their tensors are ignored) */
} wt_gemma;

typedef struct {
    wt_arch arch;
    char architecture[64]; /* as written, e.g. "Qwen3ForCausalLM" */
    char model_type[64];
    char torch_dtype[16];  /* "bfloat16", "float32", ... or "" */
    char hidden_act[32];   /* "silu" */
    int64_t hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, vocab;
    int64_t max_pos;       /* max_position_embeddings */
    double rms_eps, rope_theta;
    wt_rope rope;
    bool tie_word_embeddings, attention_bias, mlp_bias, qk_norm;
    int64_t sliding_window;   /* 0 = none */
    int64_t max_window_layers; /* qwen2: layers >= this use the window (when enabled) */
    int32_t bos_id;           /* -1 = none */
    int32_t eos_ids[WT_MAX_EOS];
    int n_eos;
    int32_t pad_id;           /* -1 = none */
    wt_gemma gemma;           /* Gemma 3/4 only (wt_config_is_gemma) */
    wt_moe moe;               /* experts (n_experts 0: dense) */
    /* MLX quantization ("quantization" or "quantization_config") */
    wt_qspec quant;           /* global; mode NONE when the config has none */
    wt_qoverride *qover;      /* OWNED: per-module overrides; freed by wt_config_free */
    int n_qover;
    /* generation_config.json defaults (0 / -1 when absent) */
    double gen_temperature, gen_top_p, gen_min_p, gen_repetition_penalty;
    int64_t gen_top_k;
    bool has_gen_temperature, has_gen_top_p, has_gen_top_k, has_gen_min_p,
        has_gen_repetition_penalty;
    /* hybrid models (Qwen3.5, docs/hybrid.md): which layers are linear attention
     * (gated DeltaNet) and their geometry; full-attention layers use the fields above */
    int64_t full_attn_interval; /* layer i is full attention iff (i+1) % N == 0; 0 = not hybrid */
    uint8_t *layer_linear;      /* OWNED [n_layers] or NULL: 1 = gated-DeltaNet layer */
    int64_t lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim; /* Hk, Hv, Dk, Dv */
    int64_t lin_conv;                                       /* causal conv kernel K */
    bool attn_output_gate; /* q_proj emits [query, gate] per head */
    bool has_vision;       /* a vision_config (the vision tower is not run) */
} wt_config;

/* API */
/* Reads dir/config.json and, if present, dir/generation_config.json. */
kiln_code wt_config_load(const char *dir, wt_config *out, kiln_err *err);
/* Parses from memory (gen may be NULL); label names the source in messages. */
kiln_code wt_config_parse(const char *json, size_t len, const char *gen, size_t gen_len,
                          const char *label, wt_config *out, kiln_err *err);
void wt_config_free(wt_config *cfg);
/* Decides how module `path` is stored: the override for `path` if any, else the
 * global spec iff the checkpoint has `<path>.scales` (has_scales), else NONE. */
wt_qspec wt_config_quant_for(const wt_config *cfg, const char *path, bool has_scales);
const char *wt_arch_name(wt_arch a);
/* 3 or 4 for the Gemma 3 / Gemma 4 architectures, else 0. */
int wt_config_gemma_gen(const wt_config *cfg);
/* "LlamaForCausalLM, MistralForCausalLM, ..." for error messages. */
const char *wt_arch_supported_list(void);

#endif
