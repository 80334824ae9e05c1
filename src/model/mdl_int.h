/*
 * mdl_int.h — struct layouts shared inside model/ only.
 */
#ifndef KILN_MDL_INT_H
#define KILN_MDL_INT_H

#include "kernels/kn_mat.h"
#include "model/mdl_model.h"
#include "weights/wt_set.h"

typedef struct {
    kn_mat wq, wk, wv, wo;        /* [nh*hd, hidden], [nkv*hd, hidden] x2, [hidden, nh*hd] */
    kn_mat w_gate, w_up, w_down;  /* [ffn, hidden] x2, [hidden, ffn] */
    float *attn_norm, *ffn_norm;  /* OWNED [hidden] f32 */
    float *q_norm, *k_norm;       /* OWNED [hd] f32, qk-norm families only */
    float *bq, *bk, *bv, *bo;     /* OWNED biases or NULL */
    float *b_gate, *b_up, *b_down;
    int32_t window;               /* 0 = full attention */
} mdl_layer;

typedef struct {
    int32_t rot;              /* rotated dims (even, <= head_dim) */
    double *inv_freq;         /* OWNED [rot/2] */
    float attn_factor;        /* yarn: multiplies cos and sin */
} mdl_rope;

struct mdl_model {
    wt_config cfg;            /* OWNED (wt_config_free) */
    wt_set *ws;               /* OWNED: the mapped tensors every kn_mat borrows from */
    kn_mat embed;             /* [vocab, hidden] */
    kn_mat lm_head;           /* [vocab, hidden]; == embed when tied */
    float *final_norm;        /* OWNED [hidden] */
    mdl_layer *layers;        /* OWNED [n_layers] */
    mdl_rope rope;
    float norm_offset;        /* 1 for (1 + w) norms */
    float embed_scale;        /* 1, or sqrt(hidden) for Gemma */
    uint64_t fingerprint;
    mdl_info info;
};

/* mdl_rope.c */
kiln_code mdl_rope_init(const wt_config *cfg, mdl_rope *out, kiln_err *err);
void mdl_rope_free(mdl_rope *r);
/* cos_sin[rot/2 cos, rot/2 sin] for position pos; seq_len feeds dynamic NTK. */
void mdl_rope_cos_sin(const mdl_rope *r, const wt_config *cfg, int64_t pos, int64_t seq_len,
                      float *cos_sin);

#endif
