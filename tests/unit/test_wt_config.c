/*
 * test_wt_config.c — config.json parsing: every fixture config in ../shared,
 * the families' rules, rope_scaling, MLX quantization, and the bad-input table
 * (zero heads, head_dim not dividing, unsupported bits/group/architecture,
 * unreadable directory).
 */
#include <jansson.h>
#include <math.h>
#include <sys/stat.h>

#include "test.h"
#include "util/kiln_err.h"
#include "weights/wt_config.h"

#define ASSERT_MSG_HAS(s)                                                                          \
    do {                                                                                           \
        if (!strstr(err.msg, (s))) TEST_FAIL_("message \"%s\" lacks \"%s\"", err.msg, (s));        \
    } while (0)

static kiln_code parse(const char *json, const char *gen, wt_config *c, kiln_err *err)
{
    return wt_config_parse(json, strlen(json), gen, gen ? strlen(gen) : 0, "x/config.json", c, err);
}

/* A minimal valid Llama config with `extra` spliced in (",\"k\": v" pieces). */
static kiln_code parse_llama(const char *extra, wt_config *c, kiln_err *err)
{
    char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
             "\"intermediate_size\":128,\"num_hidden_layers\":2,\"vocab_size\":100%s%s}",
             strstr(extra, "num_attention_heads") ? "" : ",\"num_attention_heads\":4", extra);
    return parse(buf, NULL, c, err);
}

static kiln_code load_shared(const char *rel, wt_config *c, kiln_err *err, int *skip)
{
    char p[512];
    test_shared_path(p, sizeof p, rel);
    *skip = !test_path_exists(p);
    if (*skip) return KILN_OK;
    return wt_config_load(p, c, err);
}

#define LOAD_OR_SKIP(rel, c)                                                                       \
    do {                                                                                           \
        int skip_;                                                                                 \
        kiln_code r_ = load_shared(rel, c, &err, &skip_);                                          \
        if (skip_) TEST_SKIP("%s absent", rel);                                                    \
        if (r_ != KILN_OK) TEST_FAIL_("loading %s: %s", rel, err.msg);                             \
    } while (0)

/* ------------------------------------------------------ fixture configs */

static void test_oracle_llama_configs(void)
{
    kiln_err err;
    wt_config c;
    LOAD_OR_SKIP("oracle/llama_f32/hf", &c);
    ASSERT_EQ_I64(c.arch, WT_ARCH_LLAMA);
    ASSERT_STR_EQ(c.architecture, "LlamaForCausalLM");
    ASSERT_EQ_I64(c.hidden, 128);
    ASSERT_EQ_I64(c.intermediate, 352);
    ASSERT_EQ_I64(c.n_layers, 3);
    ASSERT_EQ_I64(c.n_heads, 4);
    ASSERT_EQ_I64(c.n_kv_heads, 2);
    ASSERT_EQ_I64(c.head_dim, 32);
    ASSERT_EQ_I64(c.vocab, 8256);
    ASSERT_EQ_I64(c.max_pos, 131072);
    ASSERT_NEAR_F32(c.rope_theta, 500000.0, 0);
    ASSERT_NEAR_F32(c.rms_eps, 1e-5, 0);
    ASSERT_EQ_I64(c.rope.type, WT_ROPE_NONE);
    ASSERT_TRUE(!c.tie_word_embeddings && !c.attention_bias && !c.mlp_bias && !c.qk_norm);
    ASSERT_EQ_I64(c.bos_id, 8000);
    ASSERT_EQ_I64(c.n_eos, 2); /* generation_config.json overrides config.json's 8001 */
    ASSERT_EQ_I64(c.eos_ids[0], 8001);
    ASSERT_EQ_I64(c.eos_ids[1], 8009);
    ASSERT_STR_EQ(c.torch_dtype, "float32");
    ASSERT_STR_EQ(c.hidden_act, "silu");
    ASSERT_EQ_I64(c.quant.mode, WT_QMODE_NONE);
    wt_config_free(&c);

    LOAD_OR_SKIP("oracle/llama31_rope_bf16/hf", &c);
    ASSERT_EQ_I64(c.rope.type, WT_ROPE_LLAMA3);
    ASSERT_NEAR_F32(c.rope.factor, 8.0, 0);
    ASSERT_NEAR_F32(c.rope.low_freq_factor, 1.0, 0);
    ASSERT_NEAR_F32(c.rope.high_freq_factor, 4.0, 0);
    ASSERT_EQ_I64(c.rope.original_max_pos, 8192);
    ASSERT_NEAR_F32(c.rope.partial_rotary_factor, 1.0, 0);
    ASSERT_TRUE(c.tie_word_embeddings);
    ASSERT_STR_EQ(c.torch_dtype, "bfloat16");
    ASSERT_EQ_I64(c.n_heads, 6);
    ASSERT_EQ_I64(c.head_dim, 32);
    wt_config_free(&c);
}

static void test_oracle_mistral_qwen_configs(void)
{
    kiln_err err;
    wt_config c;
    LOAD_OR_SKIP("oracle/mistral_bf16/hf", &c);
    ASSERT_EQ_I64(c.arch, WT_ARCH_MISTRAL);
    ASSERT_EQ_I64(c.n_kv_heads, 1);
    ASSERT_EQ_I64(c.sliding_window, 0); /* null */
    ASSERT_EQ_I64(c.n_eos, 1);
    ASSERT_EQ_I64(c.eos_ids[0], 2);
    wt_config_free(&c);

    LOAD_OR_SKIP("oracle/qwen2_f32/hf", &c);
    ASSERT_EQ_I64(c.arch, WT_ARCH_QWEN2);
    ASSERT_TRUE(c.attention_bias); /* no key in the file: Qwen2 always has q/k/v biases */
    ASSERT_TRUE(!c.qk_norm);
    ASSERT_EQ_I64(c.head_dim, 32);      /* 128 / 4 */
    ASSERT_EQ_I64(c.sliding_window, 0); /* use_sliding_window false */
    ASSERT_EQ_I64(c.pad_id, 5000);
    ASSERT_EQ_I64(c.n_eos, 2);
    ASSERT_EQ_I64(c.eos_ids[0], 5002);
    ASSERT_EQ_I64(c.eos_ids[1], 5000);
    ASSERT_NEAR_F32(c.rms_eps, 1e-6, 0);
    wt_config_free(&c);

    LOAD_OR_SKIP("oracle/qwen3_bf16/hf", &c);
    ASSERT_EQ_I64(c.arch, WT_ARCH_QWEN3);
    ASSERT_TRUE(c.qk_norm);
    ASSERT_TRUE(!c.attention_bias);
    ASSERT_EQ_I64(c.head_dim, 32);
    ASSERT_EQ_I64(c.hidden, 64); /* head_dim * heads != hidden: explicit head_dim wins */
    ASSERT_TRUE(c.tie_word_embeddings);
    wt_config_free(&c);
}

static void test_gemma3_oracle_config(void)
{
    kiln_err err;
    wt_config c;
    LOAD_OR_SKIP("oracle/gemma3_f32/hf", &c);
    ASSERT_EQ_I64(c.arch, WT_ARCH_GEMMA3);
    ASSERT_EQ_I64(wt_config_gemma_gen(&c), 3);
    ASSERT_STR_EQ(c.hidden_act, "gelu_pytorch_tanh");
    ASSERT_EQ_I64(c.sliding_window, 16);
    for (int L = 0; L < 6; L++) /* sliding_window_pattern 6: layer 5 full */
        ASSERT_EQ_I64(c.gemma.layer_types[L], L == 5 ? WT_LAYER_FULL : WT_LAYER_SLIDING);
    ASSERT_NEAR_F32(c.gemma.attn_scale, 1.0 / sqrt(48.0), 1e-9);
    ASSERT_NEAR_F32(c.gemma.rope[WT_LAYER_SLIDING].theta, 10000.0, 0);
    ASSERT_NEAR_F32(c.gemma.rope[WT_LAYER_FULL].theta, 1e6, 0);
    ASSERT_EQ_I64(c.gemma.rope[WT_LAYER_FULL].rope.type, WT_ROPE_NONE);
    ASSERT_NEAR_F32(c.gemma.final_softcap, 0, 0);
    ASSERT_EQ_I64(c.gemma.global_head_dim, 32);
    ASSERT_TRUE(c.tie_word_embeddings);
    wt_config_free(&c);
}

/* google/gemma-3-4b-it writes only a few text keys; the rest are
 * transformers' Gemma3TextConfig defaults. */
static void test_gemma3_multimodal_defaults(void)
{
    kiln_err err;
    wt_config c;
    const char *j = "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"model_type\":"
                    "\"gemma3\",\"eos_token_id\":[1,106],\"text_config\":{\"hidden_size\":2560,"
                    "\"intermediate_size\":10240,\"model_type\":\"gemma3_text\","
                    "\"num_hidden_layers\":34,\"rope_scaling\":{\"factor\":8.0,\"rope_type\":"
                    "\"linear\"},\"sliding_window\":1024},\"vision_config\":{\"hidden_size\":1152}}";
    ASSERT_OK(parse(j, NULL, &c, &err));
    ASSERT_EQ_I64(c.arch, WT_ARCH_GEMMA3_MM);
    ASSERT_EQ_I64(c.n_heads, 8);
    ASSERT_EQ_I64(c.n_kv_heads, 4);
    ASSERT_EQ_I64(c.head_dim, 256);
    ASSERT_EQ_I64(c.vocab, 262208);
    ASSERT_EQ_I64(c.sliding_window, 1024);
    ASSERT_NEAR_F32(c.gemma.attn_scale, 1.0 / 16.0, 1e-9);
    ASSERT_EQ_I64(c.gemma.rope[WT_LAYER_FULL].rope.type, WT_ROPE_LINEAR);
    ASSERT_NEAR_F32(c.gemma.rope[WT_LAYER_FULL].rope.factor, 8.0, 0);
    ASSERT_NEAR_F32(c.gemma.rope[WT_LAYER_SLIDING].theta, 10000.0, 0);
    ASSERT_EQ_I64(c.gemma.rope[WT_LAYER_SLIDING].rope.type, WT_ROPE_NONE);
    ASSERT_EQ_I64(c.gemma.layer_types[5], WT_LAYER_FULL);
    ASSERT_EQ_I64(c.gemma.layer_types[33], WT_LAYER_SLIDING);
    ASSERT_EQ_I64(c.gemma.n_towers_skipped, 1);
    ASSERT_EQ_I64(c.n_eos, 2);
    wt_config_free(&c);
}

static void test_gemma4_oracle_configs(void)
{
    kiln_err err;
    wt_config c;
    LOAD_OR_SKIP("oracle-next/gemma4_e4b_like_f32/hf", &c);
    ASSERT_EQ_I64(c.arch, WT_ARCH_GEMMA4);
    ASSERT_EQ_I64(c.head_dim, 16);
    ASSERT_EQ_I64(c.gemma.global_head_dim, 32);
    ASSERT_EQ_I64(c.gemma.n_kv_shared, 3);
    ASSERT_EQ_I64(c.gemma.pli_dim, 16);
    ASSERT_EQ_I64(c.gemma.pli_vocab, 8272);
    ASSERT_TRUE(c.gemma.double_wide_mlp);
    ASSERT_TRUE(!c.gemma.k_eq_v);
    ASSERT_NEAR_F32(c.gemma.final_softcap, 2.0, 0);
    ASSERT_NEAR_F32(c.gemma.attn_scale, 1.0, 0);
    ASSERT_EQ_I64(c.gemma.rope[WT_LAYER_FULL].rope.type, WT_ROPE_PROPORTIONAL);
    ASSERT_NEAR_F32(c.gemma.rope[WT_LAYER_FULL].rope.partial_rotary_factor, 0.25, 0);
    ASSERT_NEAR_F32(c.gemma.rope[WT_LAYER_FULL].theta, 1e6, 0);
    ASSERT_EQ_I64(c.gemma.rope[WT_LAYER_SLIDING].rope.type, WT_ROPE_NONE);
    ASSERT_EQ_I64(c.gemma.layer_types[3], WT_LAYER_FULL);
    ASSERT_EQ_I64(c.gemma.layer_types[4], WT_LAYER_SLIDING);
    ASSERT_EQ_I64(c.moe.n_experts, 0);
    wt_config_free(&c);
    LOAD_OR_SKIP("oracle-next/gemma4_moe_like_bf16/hf", &c);
    ASSERT_TRUE(c.gemma.k_eq_v);
    ASSERT_EQ_I64(c.gemma.n_global_kv_heads, 1);
    ASSERT_EQ_I64(c.n_kv_heads, 2);
    ASSERT_EQ_I64(c.moe.n_experts, 8);
    ASSERT_EQ_I64(c.moe.top_k, 2);
    ASSERT_EQ_I64(c.moe.ffn, 32);
    ASSERT_EQ_I64(c.gemma.pli_dim, 0);
    wt_config_free(&c);
}

/* The e4b-like oracle config with text_config key `key` set to `val` (JSON;
 * NULL deletes the key), parsed. */
static kiln_code parse_gemma4_edit(const char *key, const char *val, wt_config *c, kiln_err *err,
                                   int *skip)
{
    char p[512];
    test_shared_path(p, sizeof p, "oracle-next/gemma4_e4b_like_f32/hf/config.json");
    *skip = !test_path_exists(p);
    if (*skip) return KILN_OK;
    json_t *root = json_load_file(p, 0, NULL), *tc = json_object_get(root, "text_config");
    if (val)
        json_object_set_new(tc, key, json_loads(val, JSON_DECODE_ANY, NULL));
    else
        json_object_del(tc, key);
    char *text = json_dumps(root, 0);
    kiln_code r = parse(text, NULL, c, err);
    free(text);
    json_decref(root);
    return r;
}

#define GEMMA4_EDIT(key, val, code, msg)                                                           \
    do {                                                                                           \
        int skip_;                                                                                 \
        kiln_code r_ = parse_gemma4_edit(key, val, &c, &err, &skip_);                              \
        if (skip_) TEST_SKIP("gemma4 oracle absent");                                              \
        ASSERT_CODE(r_, code);                                                                     \
        if (code != KILN_OK) ASSERT_MSG_HAS(msg);                                                  \
        wt_config_free(&c);                                                                        \
    } while (0)

/* Keys whose defaults differ between transformers and mlx-lm are required. */
static void test_gemma4_requires_keys_sources_disagree_on(void)
{
    kiln_err err;
    wt_config c;
    GEMMA4_EDIT("layer_types", NULL, KILN_E_INVALID, "lacks 'layer_types'");
    GEMMA4_EDIT("final_logit_softcapping", NULL, KILN_E_INVALID, "final_logit_softcapping");
    GEMMA4_EDIT("final_logit_softcapping", "null", KILN_OK, "");
    GEMMA4_EDIT("num_kv_shared_layers", NULL, KILN_E_INVALID, "num_kv_shared_layers");
    GEMMA4_EDIT("use_double_wide_mlp", NULL, KILN_E_INVALID, "use_double_wide_mlp");
    GEMMA4_EDIT("hidden_size_per_layer_input", NULL, KILN_E_INVALID, "hidden_size_per_layer_input");
    GEMMA4_EDIT("rope_parameters", NULL, KILN_E_INVALID, "rope_parameters");
    GEMMA4_EDIT("num_key_value_heads", NULL, KILN_E_INVALID, "num_key_value_heads");
    GEMMA4_EDIT("num_kv_shared_layers", "8", KILN_E_INVALID, "leaves no layer");
    GEMMA4_EDIT("layer_types", "[\"sliding_attention\"]", KILN_E_INVALID, "one kind per layer");
    GEMMA4_EDIT("layer_types",
                "[\"chunked_attention\",\"sliding_attention\",\"sliding_attention\","
                "\"full_attention\",\"sliding_attention\",\"sliding_attention\","
                "\"sliding_attention\",\"full_attention\"]",
                KILN_E_UNSUPPORTED, "chunked_attention");
    GEMMA4_EDIT("rope_parameters",
                "{\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000},"
                "\"full_attention\":{\"rope_type\":\"yarn\",\"rope_theta\":1e6}}",
                KILN_E_UNSUPPORTED, "yarn");
    GEMMA4_EDIT("hidden_activation", "\"silu\"", KILN_E_UNSUPPORTED, "silu");
    GEMMA4_EDIT("enable_moe_block", "true", KILN_E_INVALID, "num_experts");
    GEMMA4_EDIT("use_bidirectional_attention", "\"all\"", KILN_E_UNSUPPORTED, "non-causal");
}

static void test_stories260k_config(void)
{
    kiln_err err;
    wt_config c;
    LOAD_OR_SKIP("models/stories260K", &c);
    ASSERT_EQ_I64(c.hidden, 64);
    ASSERT_EQ_I64(c.intermediate, 172);
    ASSERT_EQ_I64(c.n_layers, 5);
    ASSERT_EQ_I64(c.n_heads, 8);
    ASSERT_EQ_I64(c.n_kv_heads, 4);
    ASSERT_EQ_I64(c.head_dim, 8);
    ASSERT_EQ_I64(c.vocab, 512);
    ASSERT_NEAR_F32(c.rope_theta, 10000.0, 0);
    ASSERT_EQ_I64(c.bos_id, 1);
    ASSERT_EQ_I64(c.n_eos, 2);
    ASSERT_EQ_I64(c.eos_ids[0], 1);
    ASSERT_EQ_I64(c.eos_ids[1], 2);
    ASSERT_TRUE(c.tie_word_embeddings);
    wt_config_free(&c);
}

static void test_emulated_mlx_configs(void)
{
    kiln_err err;
    wt_config c;
    LOAD_OR_SKIP("vectors/mlx-quant/emulated/stories260K-mlx-bf16-4bit", &c);
    ASSERT_EQ_I64(c.quant.mode, WT_QMODE_AFFINE);
    ASSERT_EQ_I64(c.quant.bits, 4);
    ASSERT_EQ_I64(c.quant.group_size, 64);
    ASSERT_EQ_I64(c.n_qover, 0);
    wt_qspec q = wt_config_quant_for(&c, "model.layers.0.self_attn.q_proj", true);
    ASSERT_EQ_I64(q.mode, WT_QMODE_AFFINE);
    ASSERT_EQ_I64(q.bits, 4);
    q = wt_config_quant_for(&c, "model.layers.0.mlp.down_proj", false);
    ASSERT_EQ_I64(q.mode, WT_QMODE_NONE);
    ASSERT_EQ_I64(c.n_eos, 2);
    wt_config_free(&c);

    LOAD_OR_SKIP("vectors/mlx-quant/emulated/stories260K-mlx-f16-mixed_3_6-g32", &c);
    ASSERT_EQ_I64(c.quant.bits, 4);
    ASSERT_EQ_I64(c.quant.group_size, 32);
    ASSERT_EQ_I64(c.n_qover, 31); /* embed + 5 layers x 6 modules (down_proj skipped) */
    q = wt_config_quant_for(&c, "model.layers.2.self_attn.v_proj", true);
    ASSERT_EQ_I64(q.mode, WT_QMODE_AFFINE);
    ASSERT_EQ_I64(q.bits, 6);
    ASSERT_EQ_I64(q.group_size, 32);
    q = wt_config_quant_for(&c, "model.layers.0.self_attn.q_proj", true);
    ASSERT_EQ_I64(q.bits, 3);
    q = wt_config_quant_for(&c, "model.embed_tokens", true);
    ASSERT_EQ_I64(q.bits, 3);
    q = wt_config_quant_for(&c, "model.layers.2.mlp.down_proj", false);
    ASSERT_EQ_I64(q.mode, WT_QMODE_NONE);
    ASSERT_EQ_I64(c.n_eos, 2);
    ASSERT_EQ_I64(c.eos_ids[0], 1);
    ASSERT_EQ_I64(c.eos_ids[1], 2);
    wt_config_free(&c);
}

/* ------------------------------------------------------ in-memory rules */

static void test_zero_heads_layers_hidden_are_invalid(void)
{
    kiln_err err;
    wt_config c;
    ASSERT_CODE(parse_llama(",\"num_attention_heads\":0", &c, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("x/config.json: 'num_attention_heads' is 0");
    ASSERT_CODE(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                      "\"intermediate_size\":128,\"num_hidden_layers\":0,\"vocab_size\":100,"
                      "\"num_attention_heads\":4}",
                      NULL, &c, &err),
                KILN_E_INVALID);
    ASSERT_MSG_HAS("num_hidden_layers");
    ASSERT_CODE(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":0,"
                      "\"intermediate_size\":128,\"num_hidden_layers\":2,\"vocab_size\":100,"
                      "\"num_attention_heads\":4}",
                      NULL, &c, &err),
                KILN_E_INVALID);
    ASSERT_MSG_HAS("x/config.json: 'hidden_size'");
    ASSERT_CODE(parse_llama(",\"num_key_value_heads\":0", &c, &err), KILN_E_INVALID);
    ASSERT_CODE(
        parse("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
              "\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4}",
              NULL, &c, &err),
        KILN_E_INVALID);
    ASSERT_MSG_HAS("missing 'vocab_size'");
    ASSERT_CODE(parse_llama(",\"head_dim\":\"x\"", &c, &err), KILN_E_INVALID);
    ASSERT_CODE(parse_llama(",\"rms_norm_eps\":-1", &c, &err), KILN_E_INVALID);
    ASSERT_CODE(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":99999999999,"
                      "\"intermediate_size\":128,\"num_hidden_layers\":2,\"vocab_size\":100,"
                      "\"num_attention_heads\":4}",
                      NULL, &c, &err),
                KILN_E_INVALID);
    ASSERT_MSG_HAS("over the limit");
}

static void test_head_dim_must_divide(void)
{
    kiln_err err;
    wt_config c;
    ASSERT_CODE(parse_llama(",\"num_attention_heads\":5", &c, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("x/config.json: hidden_size 64 is not divisible by num_attention_heads 5");
    /* an explicit head_dim makes it fine */
    ASSERT_OK(parse_llama(",\"num_attention_heads\":5,\"head_dim\":16", &c, &err));
    ASSERT_EQ_I64(c.head_dim, 16);
    wt_config_free(&c);
    /* derived */
    ASSERT_OK(parse_llama("", &c, &err));
    ASSERT_EQ_I64(c.head_dim, 16);
    ASSERT_EQ_I64(c.n_kv_heads, 4); /* defaults to n_heads */
    ASSERT_EQ_I64(c.bos_id, -1);
    ASSERT_EQ_I64(c.n_eos, 0);
    wt_config_free(&c);
    ASSERT_CODE(parse_llama(",\"num_key_value_heads\":3", &c, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("num_attention_heads 4 is not a multiple of num_key_value_heads 3");
}

static void test_architecture_choice(void)
{
    kiln_err err;
    wt_config c;
    const char *base = "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                       "\"vocab_size\":100,\"num_attention_heads\":4";
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"architectures\":[\"PhiForCausalLM\"],%s}", base);
    ASSERT_CODE(parse(buf, NULL, &c, &err), KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("x/config.json: architecture 'PhiForCausalLM' is not supported");
    ASSERT_MSG_HAS("LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM");
    snprintf(buf, sizeof buf, "{\"model_type\":\"qwen2\",%s}", base);
    ASSERT_OK(parse(buf, NULL, &c, &err));
    ASSERT_EQ_I64(c.arch, WT_ARCH_QWEN2);
    ASSERT_STR_EQ(c.architecture, "Qwen2ForCausalLM");
    wt_config_free(&c);
    snprintf(buf, sizeof buf, "{%s}", base);
    ASSERT_CODE(parse(buf, NULL, &c, &err), KILN_E_UNSUPPORTED);
    ASSERT_STR_EQ(wt_arch_name(WT_ARCH_QWEN3), "Qwen3ForCausalLM");
    /* nested text_config */
    snprintf(buf, sizeof buf,
             "{\"architectures\":[\"MistralForCausalLM\"],\"text_config\":{%s,"
             "\"eos_token_id\":[7,8],\"sliding_window\":4096}}",
             base);
    ASSERT_OK(parse(buf, NULL, &c, &err));
    ASSERT_EQ_I64(c.hidden, 64);
    ASSERT_EQ_I64(c.sliding_window, 4096);
    ASSERT_EQ_I64(c.max_window_layers, 0);
    ASSERT_EQ_I64(c.n_eos, 2);
    wt_config_free(&c);
    ASSERT_CODE(parse("[1]", NULL, &c, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("x/config.json");
    ASSERT_CODE(parse("{\"a\":", NULL, &c, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("x/config.json: not valid JSON");
}

static void test_sliding_window_only_when_enabled(void)
{
    kiln_err err;
    wt_config c;
    const char *base = "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":4,"
                       "\"vocab_size\":100,\"num_attention_heads\":4,\"sliding_window\":32";
    char buf[1024];
    snprintf(buf, sizeof buf, "{\"architectures\":[\"Qwen2ForCausalLM\"],%s}", base);
    ASSERT_OK(parse(buf, NULL, &c, &err));
    ASSERT_EQ_I64(c.sliding_window, 0);
    snprintf(buf, sizeof buf,
             "{\"architectures\":[\"Qwen2ForCausalLM\"],%s,\"use_sliding_window\":true,"
             "\"max_window_layers\":2}",
             base);
    ASSERT_OK(parse(buf, NULL, &c, &err));
    ASSERT_EQ_I64(c.sliding_window, 32);
    ASSERT_EQ_I64(c.max_window_layers, 2);
    snprintf(buf, sizeof buf, "{\"architectures\":[\"LlamaForCausalLM\"],%s}", base);
    ASSERT_OK(parse(buf, NULL, &c, &err));
    ASSERT_EQ_I64(c.sliding_window, 0);
    snprintf(buf, sizeof buf, "{\"architectures\":[\"MistralForCausalLM\"],%s}", base);
    ASSERT_OK(parse(buf, NULL, &c, &err));
    ASSERT_EQ_I64(c.sliding_window, 32);
}

static void test_rope_scaling_variants(void)
{
    kiln_err err;
    wt_config c;
    ASSERT_OK(parse_llama(",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2}", &c, &err));
    ASSERT_EQ_I64(c.rope.type, WT_ROPE_LINEAR);
    ASSERT_NEAR_F32(c.rope.factor, 2.0, 0);
    ASSERT_OK(parse_llama(",\"max_position_embeddings\":4096,\"rope_scaling\":{\"rope_type\":"
                          "\"yarn\",\"factor\":4,\"original_max_position_embeddings\":1024}",
                          &c, &err));
    ASSERT_EQ_I64(c.rope.type, WT_ROPE_YARN);
    ASSERT_NEAR_F32(c.rope.beta_fast, 32.0, 0);
    ASSERT_NEAR_F32(c.rope.beta_slow, 1.0, 0);
    ASSERT_EQ_I64(c.rope.original_max_pos, 1024);
    ASSERT_NEAR_F32(c.rope.attention_factor, 0.0, 0);
    ASSERT_OK(parse_llama(",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,\"beta_fast\":16,"
                          "\"beta_slow\":2,\"mscale\":0.7,\"attention_factor\":1.5}",
                          &c, &err));
    ASSERT_NEAR_F32(c.rope.beta_fast, 16.0, 0);
    ASSERT_NEAR_F32(c.rope.mscale, 0.7, 0);
    ASSERT_NEAR_F32(c.rope.attention_factor, 1.5, 0);
    ASSERT_OK(parse_llama(",\"max_position_embeddings\":4096,"
                          "\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}",
                          &c, &err));
    ASSERT_EQ_I64(c.rope.type, WT_ROPE_DYNAMIC);
    ASSERT_EQ_I64(c.rope.original_max_pos, 4096);
    ASSERT_OK(parse_llama(",\"rope_scaling\":{\"rope_type\":\"default\"}", &c, &err));
    ASSERT_EQ_I64(c.rope.type, WT_ROPE_NONE);
    ASSERT_OK(parse_llama(",\"rope_scaling\":null,\"partial_rotary_factor\":0.5", &c, &err));
    ASSERT_EQ_I64(c.rope.type, WT_ROPE_NONE);
    ASSERT_NEAR_F32(c.rope.partial_rotary_factor, 0.5, 0);
    ASSERT_CODE(parse_llama(",\"rope_scaling\":{\"type\":\"longrope\",\"factor\":2}", &c, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("x/config.json: rope_scaling type 'longrope' is not supported");
    ASSERT_CODE(parse_llama(",\"rope_scaling\":{\"type\":\"linear\"}", &c, &err), KILN_E_INVALID);
    ASSERT_CODE(parse_llama(",\"rope_scaling\":{\"factor\":2}", &c, &err), KILN_E_INVALID);
    ASSERT_CODE(parse_llama(",\"rope_scaling\":5", &c, &err), KILN_E_INVALID);
}

static void test_generation_config_merges(void)
{
    kiln_err err;
    wt_config c;
    const char *cfg = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                      "\"intermediate_size\":128,\"num_hidden_layers\":2,\"vocab_size\":100,"
                      "\"num_attention_heads\":4,\"bos_token_id\":1,\"eos_token_id\":2}";
    ASSERT_OK(parse(cfg,
                    "{\"eos_token_id\":[3,4,5],\"temperature\":0.6,\"top_p\":0.9,"
                    "\"top_k\":20,\"min_p\":0.05,\"repetition_penalty\":1.1}",
                    &c, &err));
    ASSERT_EQ_I64(c.bos_id, 1);
    ASSERT_EQ_I64(c.n_eos, 3);
    ASSERT_EQ_I64(c.eos_ids[2], 5);
    ASSERT_TRUE(c.has_gen_temperature && c.has_gen_top_p && c.has_gen_top_k && c.has_gen_min_p &&
                c.has_gen_repetition_penalty);
    ASSERT_NEAR_F32(c.gen_temperature, 0.6, 0);
    ASSERT_NEAR_F32(c.gen_top_p, 0.9, 0);
    ASSERT_EQ_I64(c.gen_top_k, 20);
    ASSERT_NEAR_F32(c.gen_min_p, 0.05, 0);
    ASSERT_NEAR_F32(c.gen_repetition_penalty, 1.1, 0);
    ASSERT_OK(parse(cfg, "{}", &c, &err));
    ASSERT_EQ_I64(c.n_eos, 1);
    ASSERT_EQ_I64(c.eos_ids[0], 2);
    ASSERT_TRUE(!c.has_gen_temperature && !c.has_gen_top_k);
    ASSERT_CODE(parse(cfg, "{\"eos_token_id\":\"x\"}", &c, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("generation_config.json");
    ASSERT_CODE(parse(cfg, "{\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", &c, &err), KILN_E_UNSUPPORTED);
    ASSERT_CODE(parse(cfg, "nope", &c, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS("generation_config.json: not valid JSON");
}

static void test_quantization_specs_and_overrides(void)
{
    kiln_err err;
    wt_config c;
    ASSERT_OK(parse_llama(",\"quantization\":{\"group_size\":32,\"bits\":3,"
                          "\"a.q\":{\"bits\":8},\"a.k\":false,\"a.v\":true,"
                          "\"a.m\":{\"mode\":\"mxfp4\"},\"quantize_activations\":false}",
                          &c, &err));
    ASSERT_EQ_I64(c.quant.mode, WT_QMODE_AFFINE); /* mode absent = affine */
    ASSERT_EQ_I64(c.quant.bits, 3);
    ASSERT_EQ_I64(c.quant.group_size, 32);
    ASSERT_EQ_I64(c.n_qover, 4);
    wt_qspec q = wt_config_quant_for(&c, "a.q", false);
    ASSERT_EQ_I64(q.mode, WT_QMODE_AFFINE);
    ASSERT_EQ_I64(q.bits, 8);
    ASSERT_EQ_I64(q.group_size, 64); /* the dict's own mode default, not the global 32 */
    q = wt_config_quant_for(&c, "a.k", true);
    ASSERT_EQ_I64(q.mode, WT_QMODE_NONE);
    q = wt_config_quant_for(&c, "a.v", false);
    ASSERT_EQ_I64(q.bits, 3);
    ASSERT_EQ_I64(q.group_size, 32);
    q = wt_config_quant_for(&c, "a.m", true);
    ASSERT_EQ_I64(q.mode, WT_QMODE_MXFP4);
    ASSERT_EQ_I64(q.group_size, 32);
    q = wt_config_quant_for(&c, "other", true);
    ASSERT_EQ_I64(q.bits, 3);
    q = wt_config_quant_for(&c, "other", false);
    ASSERT_EQ_I64(q.mode, WT_QMODE_NONE);
    wt_config_free(&c);
    wt_config_free(&c); /* twice is harmless */
    /* quantization_config when it looks like MLX */
    ASSERT_OK(parse_llama(",\"quantization_config\":{\"group_size\":128,\"bits\":8}", &c, &err));
    ASSERT_EQ_I64(c.quant.bits, 8);
    ASSERT_EQ_I64(c.quant.group_size, 128);
    wt_config_free(&c);
    ASSERT_CODE(
        parse_llama(",\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4}", &c, &err),
        KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("gptq");
    /* without quantization, scales alone do not quantize */
    ASSERT_OK(parse_llama("", &c, &err));
    q = wt_config_quant_for(&c, "x", true);
    ASSERT_EQ_I64(q.mode, WT_QMODE_NONE);
}

static void test_unsupported_quantization_is_named(void)
{
    kiln_err err;
    wt_config c;
    ASSERT_CODE(parse_llama(",\"quantization\":{\"group_size\":64,\"bits\":7}", &c, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("x/config.json: quantization: 7-bit quantization is not supported");
    ASSERT_CODE(parse_llama(",\"quantization\":{\"group_size\":16,\"bits\":4}", &c, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("x/config.json: quantization: group_size 16 is not supported");
    ASSERT_CODE(parse_llama(",\"quantization\":{\"group_size\":64,\"bits\":4,"
                            "\"model.layers.0.mlp.up_proj\":{\"bits\":1}}",
                            &c, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("model.layers.0.mlp.up_proj: 1-bit");
    ASSERT_CODE(parse_llama(",\"quantization\":{\"mode\":\"nvfp4\",\"group_size\":32}", &c, &err),
                KILN_E_UNSUPPORTED);
    ASSERT_CODE(parse_llama(",\"quantization\":{\"mode\":\"int3\"}", &c, &err), KILN_E_UNSUPPORTED);
    ASSERT_MSG_HAS("'int3'");
    ASSERT_CODE(parse_llama(",\"quantization\":{\"bits\":\"four\"}", &c, &err), KILN_E_INVALID);
}

/* ----------------------------------------------------------- load errors */

static void test_unreadable_directory_is_an_error(void)
{
    kiln_err err;
    wt_config c;
    ASSERT_CODE(wt_config_load("/nonexistent/kiln/model", &c, &err), KILN_E_NOT_FOUND);
    ASSERT_MSG_HAS("/nonexistent/kiln/model");
    char dir[] = "/tmp/kiln_test_wt_cfg_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    ASSERT_CODE(wt_config_load(dir, &c, &err), KILN_E_NOT_FOUND); /* no config.json */
    ASSERT_MSG_HAS("config.json");
    ASSERT_MSG_HAS(dir);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    ASSERT_TRUE(mkdir(p, 0700) == 0); /* config.json is a folder */
    ASSERT_CODE(wt_config_load(dir, &c, &err), KILN_E_IO);
    ASSERT_MSG_HAS(p);
    ASSERT_CODE(wt_config_load(p, &c, &err), KILN_E_NOT_FOUND);
    rmdir(p);
    FILE *f = fopen(p, "w");
    fputs("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":"
          "128,\"num_hidden_layers\":2,\"vocab_size\":100,\"num_attention_heads\":4}",
          f);
    fclose(f);
    ASSERT_CODE(wt_config_load(p, &c, &err), KILN_E_NOT_FOUND); /* a file, not a folder */
    ASSERT_OK(wt_config_load(dir, &c, &err));
    char g[512];
    snprintf(g, sizeof g, "%s/generation_config.json", dir);
    f = fopen(g, "w");
    fputs("{\"top_k\": -3}", f);
    fclose(f);
    ASSERT_CODE(wt_config_load(dir, &c, &err), KILN_E_INVALID);
    ASSERT_MSG_HAS(g);
    if (geteuid() != 0) { /* root reads through permissions */
        chmod(dir, 0);
        ASSERT_CODE(wt_config_load(dir, &c, &err), KILN_E_IO);
        ASSERT_MSG_HAS(dir);
        chmod(dir, 0700);
    }
    unlink(g);
    unlink(p);
    rmdir(dir);
}

int main(void)
{
    RUN(test_oracle_llama_configs);
    RUN(test_oracle_mistral_qwen_configs);
    RUN(test_gemma3_oracle_config);
    RUN(test_gemma3_multimodal_defaults);
    RUN(test_gemma4_oracle_configs);
    RUN(test_gemma4_requires_keys_sources_disagree_on);
    RUN(test_stories260k_config);
    RUN(test_emulated_mlx_configs);
    RUN(test_zero_heads_layers_hidden_are_invalid);
    RUN(test_head_dim_must_divide);
    RUN(test_architecture_choice);
    RUN(test_sliding_window_only_when_enabled);
    RUN(test_rope_scaling_variants);
    RUN(test_generation_config_merges);
    RUN(test_quantization_specs_and_overrides);
    RUN(test_unsupported_quantization_is_named);
    RUN(test_unreadable_directory_is_an_error);
    return TEST_DONE();
}
