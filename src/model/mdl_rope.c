/*
 * mdl_rope.c — rotary embedding frequencies of one mdl_rope_spec, with the
 * rope_scaling variants of HF transformers' modeling_rope_utils: linear,
 * llama3, yarn, dynamic (NTK), and Gemma 4's proportional. A model has one per distinct parameter
 * set (mdl_plan.rope). Frequencies are computed in double; cos/sin are rounded to f32 once.
 */
#include "model/mdl_int.h"

#include <math.h>
#include <stdlib.h>

static double yarn_mscale(double scale, double m)
{
    return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* transformers _compute_yarn_parameters: blend of interpolated and extrapolated
 * frequencies over a ramp between the correction dims. */
static void yarn_freqs(const mdl_rope_spec *c, int32_t rot, double *inv, float *attn_factor)
{
    const wt_rope *r = &c->scaling;
    double base = c->theta, factor = r->factor > 0 ? r->factor : 1.0;
    double orig = r->original_max_pos > 0 ? (double)r->original_max_pos : (double)c->max_pos;
    double bf = r->beta_fast > 0 ? r->beta_fast : 32.0, bs = r->beta_slow > 0 ? r->beta_slow : 1.0;
    double dim = rot;
#define YARN_DIM(nrot) (dim * log(orig / ((nrot)*2.0 * M_PI)) / (2.0 * log(base)))
    double low = floor(YARN_DIM(bf)), high = ceil(YARN_DIM(bs));
#undef YARN_DIM
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001;
    for (int32_t i = 0; i < rot / 2; i++) {
        double pos_freq = pow(base, (2.0 * i) / dim);
        double extra = 1.0 / pos_freq, inter = 1.0 / (factor * pos_freq);
        double ramp = ((double)i - low) / (high - low);
        if (ramp < 0) ramp = 0;
        if (ramp > 1) ramp = 1;
        double extra_factor = 1.0 - ramp;
        inv[i] = inter * (1.0 - extra_factor) + extra * extra_factor;
    }
    if (r->attention_factor > 0)
        *attn_factor = (float)r->attention_factor;
    else if (r->mscale > 0 && r->mscale_all_dim > 0)
        *attn_factor =
            (float)(yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim));
    else
        *attn_factor = (float)yarn_mscale(factor, 1.0);
}

static void llama3_freqs(const mdl_rope_spec *c, int32_t rot, double *inv)
{
    const wt_rope *r = &c->scaling;
    double factor = r->factor, lf = r->low_freq_factor, hf = r->high_freq_factor;
    double old = (double)r->original_max_pos;
    double low_wl = old / lf, high_wl = old / hf;
    for (int32_t i = 0; i < rot / 2; i++) {
        double f = inv[i], wl = 2.0 * M_PI / f;
        if (wl < high_wl) continue;
        if (wl > low_wl) {
            inv[i] = f / factor;
        } else {
            double smooth = (old / wl - lf) / (hf - lf);
            inv[i] = (1.0 - smooth) * f / factor + smooth * f;
        }
    }
}

kiln_code mdl_rope_init(const mdl_rope_spec *c, mdl_rope *out, kiln_err *err)
{
    int32_t rot = c->rot;
    if (rot <= 0 || rot > c->head_dim || rot % 2)
        return kiln_fail(err, KILN_E_INVALID, "config.json: rotary dims %d for head_dim %d",
                         (int)rot, (int)c->head_dim);
    out->spec = c;
    out->rot = rot;
    out->attn_factor = 1.0f;
    out->inv_freq = malloc(sizeof(double) * (size_t)(rot / 2));
    if (!out->inv_freq) return kiln_fail(err, KILN_E_NOMEM, "rope: out of memory");
    for (int32_t i = 0; i < rot / 2; i++)
        out->inv_freq[i] = 1.0 / pow(c->theta, (2.0 * i) / (double)rot);
    switch (c->scaling.type) {
    case WT_ROPE_LINEAR:
        for (int32_t i = 0; i < rot / 2; i++)
            out->inv_freq[i] /= c->scaling.factor;
        break;
    case WT_ROPE_LLAMA3:
        llama3_freqs(c, rot, out->inv_freq);
        break;
    case WT_ROPE_YARN:
        yarn_freqs(c, rot, out->inv_freq, &out->attn_factor);
        break;
    case WT_ROPE_PROPORTIONAL: {
        /* Gemma 4 full layers (HF _compute_proportional_rope_parameters): the
         * first r pairs rotate with the exponent over the whole head, the rest
         * keep angle 0 (cos 1, sin 0: an exact identity) */
        int32_t r = (int32_t)floor(c->scaling.partial_rotary_factor * (double)rot / 2.0);
        for (int32_t i = 0; i < rot / 2; i++)
            out->inv_freq[i] = i < r ? out->inv_freq[i] / c->scaling.factor : 0.0;
        break;
    }
    case WT_ROPE_NONE:
    case WT_ROPE_DYNAMIC:
        break; /* dynamic: per sequence length, in mdl_rope_cos_sin */
    }
    return KILN_OK;
}

void mdl_rope_free(mdl_rope *r)
{
    free(r->inv_freq);
    r->inv_freq = NULL;
}

void mdl_rope_cos_sin(const mdl_rope *r, int64_t pos, int64_t seq_len, float *cs)
{
    const mdl_rope_spec *c = r->spec;
    int32_t half = r->rot / 2;
    double base_scale = 1.0;
    int dyn = c->scaling.type == WT_ROPE_DYNAMIC;
    double orig =
        c->scaling.original_max_pos > 0 ? (double)c->scaling.original_max_pos : (double)c->max_pos;
    if (dyn && (double)seq_len > orig) {
        /* transformers _compute_dynamic_ntk_parameters */
        double f = c->scaling.factor, d = r->rot;
        double base = c->theta * pow(f * (double)seq_len / orig - (f - 1.0), d / (d - 2.0));
        base_scale = base;
    }
    for (int32_t i = 0; i < half; i++) {
        double f = r->inv_freq[i];
        if (base_scale != 1.0) f = 1.0 / pow(base_scale, (2.0 * i) / (double)r->rot);
        double a = (double)pos * f;
        cs[i] = (float)cos(a) * r->attn_factor;
        cs[half + i] = (float)sin(a) * r->attn_factor;
    }
}
