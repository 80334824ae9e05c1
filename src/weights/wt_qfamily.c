/*
 * wt_qfamily.c — mlx-lm's per-family conversion rules (sanitize,
 * quant_predicate) that `kiln quantize` follows (wt_qfamily.h).
 *
 * Llama, Mistral, Qwen2, Qwen3: every tensor kept under its name; every
 * Linear and the embedding quantized.
 * Gemma 3 / Gemma 4 (mlx-lm gemma3.py / gemma4.py + gemma4_text.py):
 *   vision/audio towers and projectors dropped (the text path only);
 *   model.language_model.X -> language_model.model.X;
 *   rotary_emb buffers and the input/output clipping bounds dropped;
 *   experts.gate_up_proj [E, 2F, H] -> experts.switch_glu.gate_proj.weight
 *   (rows 0..F-1 of each expert) + up_proj.weight (rows F..2F-1);
 *   experts.down_proj -> experts.switch_glu.down_proj.weight;
 *   an expert tensor quantizes per expert (each [F, H] slice by rows, as a
 *   SwitchLinear does), router.proj at 8 bits (group 64, written in the
 *   quantization map), per_layer_model_projection left float (mlx-lm's
 *   ScaledLinear is not a Linear), embed_tokens_per_layer quantized (an
 *   Embedding).
 */
#include <stdio.h>
#include <string.h>

#include "weights/wt_qfamily.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void one(wt_qf_out *o, const char *name, const wt_tensor *t)
{
    snprintf(o->name, sizeof o->name, "%s", name);
    o->ndim = t->ndim;
    for (int i = 0; i < t->ndim && i < 4; i++)
        o->shape[i] = t->shape[i];
    o->R = o->r0 = o->rows = 0;
}

static int gemma_map(const wt_tensor *t, wt_qf_out *out)
{
    static const char *const towers[] = {"vision_tower", "multi_modal_projector", "audio_tower",
                                         "embed_audio", "embed_vision"};
    static const char *const dropped[] = {"self_attn.rotary_emb", "input_max", "input_min",
                                          "output_max", "output_min"};
    for (size_t i = 0; i < sizeof towers / sizeof *towers; i++)
        if (strstr(t->name, towers[i])) return 0;
    for (size_t i = 0; i < sizeof dropped / sizeof *dropped; i++)
        if (strstr(t->name, dropped[i])) return 0;
    char name[1024];
    const char *mm = "model.language_model.";
    if (strncmp(t->name, mm, strlen(mm)) == 0)
        snprintf(name, sizeof name, "language_model.model.%s", t->name + strlen(mm));
    else
        snprintf(name, sizeof name, "%s", t->name);
    char *gu = strstr(name, ".experts.gate_up_proj");
    if (gu && t->ndim == 3 && (ends_with(name, ".gate_up_proj") || ends_with(name, ".gate_up_proj.weight"))) {
        *gu = 0;
        int64_t F = t->shape[1] / 2;
        for (int k = 0; k < 2; k++) {
            one(&out[k], "", t);
            snprintf(out[k].name, sizeof out[k].name, "%s.experts.switch_glu.%s.weight", name,
                     k ? "up_proj" : "gate_proj");
            out[k].shape[1] = F;
            out[k].R = t->shape[1];
            out[k].r0 = k * F;
            out[k].rows = F;
        }
        return 2;
    }
    char *dn = strstr(name, ".experts.down_proj");
    if (dn && t->ndim == 3 && (ends_with(name, ".down_proj") || ends_with(name, ".down_proj.weight"))) {
        *dn = 0;
        one(out, "", t);
        snprintf(out->name, sizeof out->name, "%s.experts.switch_glu.down_proj.weight", name);
        return 1;
    }
    one(out, name, t);
    return 1;
}

int wt_qf_map(const wt_config *c, const wt_tensor *t, wt_qf_out *out)
{
    if (wt_config_gemma_gen(c)) return gemma_map(t, out);
    one(out, t->name, t);
    return 1;
}

bool wt_qf_quantize(const wt_config *c, const char *mod, int *bits, int *group, bool *explicit_)
{
    *explicit_ = false;
    if (wt_config_gemma_gen(c) == 4) {
        if (ends_with(mod, "per_layer_model_projection")) return false;
        if (ends_with(mod, "router.proj")) {
            *bits = 8;
            *group = 64;
            *explicit_ = true;
        }
    }
    return true;
}
