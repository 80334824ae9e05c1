/*
 * mdl_int.h — struct layouts shared inside model/ only.
 *
 * A layer is a composition of kinds (mdl_plan.h): a mixer (mdl_attn today) and
 * a feed-forward block (mdl_mlp), wrapped by the norms its family uses. Each
 * kind has its own file with its forward stage (mdl_attn.c, mdl_mlp.c); the
 * step (mdl_forward.c) only sequences them. Norm weights are stored as the
 * multiplier the norm applies (a family's `1 + w` is added at load), so one
 * RMSNorm serves every family.
 */
#ifndef KILN_MDL_INT_H
#define KILN_MDL_INT_H

#include "kernels/kn_mat.h"
#include "model/mdl_lora.h"
#include "model/mdl_model.h"
#include "model/mdl_plan.h"
#include "util/arena.h"
#include "weights/wt_set.h"

/* Softmax attention (geometry and flags in the layer's mdl_layer_plan). */
typedef struct {
    kn_mat wq, wk, wv, wo;    /* [nh*hd, H], [nkv*hd, H] x2, [H, nh*hd] */
    float *q_norm, *k_norm;   /* OWNED [hd] or NULL */
    float *bq, *bk, *bv, *bo; /* OWNED biases or NULL */
} mdl_attn;

/* Gated DeltaNet (geometry in the layer's mdl_layer_plan; mdl_delta.c). */
typedef struct {
    kn_mat in_qkv, in_z, in_b, in_a; /* [C, H], [Hv*Dv, H], [Hv, H] x2 */
    kn_mat out;                      /* [H, Hv*Dv] */
    float *conv_w;                   /* OWNED [C, K]: tap j of channel c at c*K + j */
    float *a_neg;                    /* OWNED [Hv]: -exp(A_log) */
    float *dt_bias;                  /* OWNED [Hv] */
    float *norm;                     /* OWNED [Dv]: the gated RMSNorm's weight, as stored */
} mdl_delta;

/* Gated MLP: down(act(gate(x)) * up(x)). */
typedef struct {
    kn_mat gate, up, down;         /* [F, H] x2, [H, F] */
    float *b_gate, *b_up, *b_down; /* OWNED or NULL */
} mdl_mlp;

/* Routed experts (mdl_moe.c): a router, E expert MLPs, and (Gemma 4) the
 * norms of the dense branch that runs beside them (its MLP is mdl_layer.mlp). */
typedef struct {
    kn_mat router;            /* [E, H] */
    float *router_scale;      /* OWNED [H] or NULL: router.scale x hidden^-1/2 (ON_RESIDUAL) */
    float *expert_scale;      /* OWNED [E] or NULL: router.per_expert_scale */
    kn_mat *gate, *up, *down; /* OWNED arrays [E] of views into the expert tensors:
                                 [Fe, H], [Fe, H], [H, Fe] (the kn_mats borrow the mmap) */
    float *pre_norm_2;        /* OWNED [H]: before the experts (dense_branch) */
    float *post_norm_1;       /* OWNED [H]: on the dense MLP's output (dense_branch) */
    float *post_norm_2;       /* OWNED [H]: on the experts' sum (dense_branch) */
} mdl_moe;

/* Per-layer input gate (mdl_pli.c, Gemma 4 e2b/e4b). */
typedef struct {
    kn_mat gate;      /* [P, H] per_layer_input_gate */
    kn_mat proj;      /* [H, P] per_layer_projection */
    float *post_norm; /* OWNED [H] post_per_layer_input_norm */
} mdl_pli;

typedef struct {
    const mdl_layer_plan *p; /* BORROWED from mdl_model.plan */
    float *in_norm;          /* OWNED [H]: before the mixer */
    float *post_mix_norm;    /* OWNED [H] or NULL: on the mixer's output (Gemma) */
    float *pre_ffn_norm;     /* OWNED [H]: before the feed-forward block */
    float *post_ffn_norm;    /* OWNED [H] or NULL: on its output (Gemma) */
    mdl_attn attn;
    mdl_delta delta;
    mdl_mlp mlp;  /* the dense MLP (MoE layers: the dense branch, if any) */
    mdl_moe moe;  /* ffn == MDL_FFN_MOE */
    mdl_pli pli;  /* p->pli */
    float scalar; /* layer_scalar (1 when the layer has none) */
} mdl_layer;

typedef struct {
    int32_t rot;               /* rotated dims (even, <= head_dim) */
    double *inv_freq;          /* OWNED [rot/2] */
    float attn_factor;         /* yarn: multiplies cos and sin */
    const mdl_rope_spec *spec; /* BORROWED from mdl_model.plan */
} mdl_rope;

struct mdl_model {
    wt_config cfg;                /* OWNED (wt_config_free) */
    mdl_plan plan;                /* OWNED (mdl_plan_free) */
    wt_set *ws;                   /* OWNED: the mapped tensors every kn_mat borrows from */
    char prefix[64];              /* the language model's tensor prefix, e.g. "model." */
    kn_mat embed;                 /* [vocab, hidden] */
    kn_mat lm_head;               /* [vocab, hidden]; == embed when tied */
    float *final_norm;            /* OWNED [hidden] */
    mdl_layer *layers;            /* OWNED [n_layers] */
    mdl_rope rope[MDL_MAX_ROPES]; /* plan.n_ropes of them */
    kn_mat pli_embed;             /* [pli_vocab, L*P] embed_tokens_per_layer (plan.pli_dim > 0) */
    kn_mat pli_proj;              /* [L*P, H] per_layer_model_projection */
    float *pli_norm;              /* OWNED [P] per_layer_projection_norm */
    uint64_t fingerprint;
    mdl_info info;
    /* an MTP head (mdl_load_mtp): layer 0 is mtp.layers.0, final_norm mtp.norm */
    int mtp;
    kn_mat mtp_fc;             /* [H, 2H]: fc over [norm_e(embed), norm_h(hidden)] */
    float *mtp_norm_e;         /* OWNED [H] pre_fc_norm_embedding (1 + w in HF layout) */
    float *mtp_norm_h;         /* OWNED [H] pre_fc_norm_hidden */
};

/* ---------------------------------------------------------------- mdl_tensors.c */
/* Finds module `path` (a linear or embedding) and fills a kn_mat [rows, cols]:
 * a float `path.weight`, or MLX-affine codes + scales + biases. Shapes checked. */
kiln_code mdl_load_mat(mdl_model *m, const char *path, int64_t rows, int64_t cols, kn_mat *out,
                       kiln_err *err);
/* A 1-D float tensor as a new f32 array plus `add` per element (*out OWNED by
 * the model). Absent and optional: *out = NULL. */
kiln_code mdl_load_vec(mdl_model *m, const char *name, int64_t n, int optional, float add,
                       float **out, kiln_err *err);
/* Views of E experts' matrices inside one 3-D tensor: rows [r0, r0 + rows) of
 * each expert's [R, cols] slice of `name` ([E, R, cols]: a float tensor, or
 * MLX-affine `path.weight` U32 + `.scales`/`.biases` [E, R, cols/group] when
 * `path` is quantized). path is the module; name the float tensor's full name
 * (HF's fused experts have no ".weight"). out[E] borrow the mmap. */
kiln_code mdl_load_experts(mdl_model *m, const char *path, const char *name, int64_t E, int64_t R,
                           int64_t r0, int64_t rows, int64_t cols, kn_mat *out, kiln_err *err);
/* 1 when tensor `name` exists. */
int mdl_has_tensor(const mdl_model *m, const char *name);

/* ---------------------------------------------------------------- mdl_rope.c */
kiln_code mdl_rope_init(const mdl_rope_spec *spec, mdl_rope *out, kiln_err *err);
void mdl_rope_free(mdl_rope *r);
/* cos_sin[rot/2 cos, rot/2 sin] for position pos; seq_len feeds dynamic NTK. */
void mdl_rope_cos_sin(const mdl_rope *r, int64_t pos, int64_t seq_len, float *cos_sin);

/* ---------------------------------------------------------------- the step (mdl_forward.c) */
/* Per-step view shared by the kinds' stages and the pool callbacks. */
typedef struct mdl_step mdl_step;
struct mdl_step {
    mdl_ctx *cx;
    kn_pool *pool; /* BORROWED: the compute pool (may be NULL) */
    const mdl_model *m;
    kv_pool *kv;
    const mdl_seq *seqs;
    int32_t n_seqs, T;
    int32_t layer; /* the layer being run */
    const mdl_layer *ly;
    float *x;                 /* [T, H] the residual stream */
    float *h;                 /* [T, H] normed input of a block, then its output */
    float *q, *k, *v, *att;   /* [T, max_q], [T, max_kv] x2, [T, max_q] */
    float *g, *u;             /* [T, max_ffn] x2 */
    float *mix;               /* [T, max_mix] mixer scratch (NULL when max_mix is 0) */
    int32_t *row0;            /* [n_seqs + 1]: sequence i's tokens are rows [row0[i], row0[i+1]) */
    float *cs[MDL_MAX_ROPES]; /* [T, rope.rot] cos/sin per rope */
    float *scratch;           /* [n_threads, attn_scratch] */
    int64_t attn_scratch;     /* floats per thread */
    int32_t *tok_seq, *tok_pos; /* [T] */
    void *aa;                   /* kn_attn_args [n_seqs] (mdl_attn.c) */
    void *moe;                  /* MoE scratch (mdl_moe.c); NULL without MoE layers */
    float *pli;                 /* [T, L*P] per-layer inputs (mdl_pli.c); NULL without */
    float *pli_tmp;             /* [n_threads, L*P] */
    float *pli_g;               /* [n_threads, MDL_PLI_FUSED_MAX_TOKENS * P] (fused gate) */
    const float *norm_w;        /* the weight norm_rows applies */
    int64_t grain;              /* pool grain over tokens */
    int any_lora;               /* some sequence carries a non-empty mdl_lora_set */
    int32_t *lora_rows;         /* [T] rows with adapters, grouped by stack (mdl_lora_plan) */
    int32_t *lora_tile0;        /* [n_lora_tiles + 1]: tile i is lora_rows[tile0[i], tile0[i+1]) */
    int32_t n_lora_tiles;
    /* Fused stages (mdl_attn.c, mdl_mlp.c): independent matmuls as one pool
     * job, element-wise steps inside the job that made their rows. Off with
     * LoRA (its update sits between a projection and the next step) and when
     * the context says (mdl_ctx_set_fused). Same bits either way. */
    int fused;
    int fold_residual; /* this stage adds its output into x itself (fused, no post-norm) */
    int h_ready;       /* fused: the previous layer's last row job left in_norm(x) in h */
};

/* y[t] += b for t < T (b NULL: nothing). */
void mdl_add_bias_rows(float *y, const float *b, int64_t T, int64_t n);
/* out = RMSNorm(in, w) for every token row (w NULL: no weight), through the pool. */
void mdl_norm_rows(mdl_step *s, float *out, const float *in, const float *w, int64_t n);

/* ---------------------------------------------------------------- LoRA (mdl_lora.c) */
/* The projections an adapter may target, in the order of their slots. */
enum { MDL_LT_Q, MDL_LT_K, MDL_LT_V, MDL_LT_O, MDL_LT_GATE, MDL_LT_UP, MDL_LT_DOWN, MDL_LT_COUNT };
#define MDL_LORA_TILE 8 /* rows of one adapter stack that share each read of A and B */
/* Groups the step's adapter rows by stack (sequences with equal stacks join,
 * in order of first appearance) into tiles of up to MDL_LORA_TILE rows, from
 * arena a; nothing without adapters. */
kiln_code mdl_lora_plan(mdl_step *s, arena *a, kiln_err *err);
/* out[t] += the low-rank updates of target tg (of layer s->layer) of the
 * adapters of row t's sequence; in [T, in_dim] is the projection's input. */
void mdl_lora_apply(mdl_step *s, int tg, const float *in, int64_t in_dim, float *out,
                    int64_t out_dim);

/* ---------------------------------------------------------------- kinds */
/* mdl_attn.c: reads s->h (normed input), writes the block output into s->h. */
kiln_code mdl_attn_alloc(mdl_step *s, arena *a, kiln_err *err);
void mdl_attn_forward(mdl_step *s);
kiln_code mdl_attn_load(mdl_model *m, int32_t L, const char *prefix, kiln_err *err);
void mdl_attn_free(mdl_attn *a);
/* mdl_delta.c: the gated DeltaNet mixer, the same contract; each sequence's
 * state lives in its state block (mdl_seq.state), snapshots as it asks. */
void mdl_delta_forward(mdl_step *s);
/* ---------------------------------------------------------------- mdl_mtp.c */
/* Cuts the plan to the MTP head's one layer (a copy of the first full-attention
 * layer's); checks the head is there. */
kiln_code mdl_mtp_plan(mdl_model *m, kiln_err *err);
kiln_code mdl_mtp_load(mdl_model *m, kiln_err *err); /* fc and the two pre-fc norms */
void mdl_mtp_inputs(mdl_step *s); /* s->x: embeddings in, the layer's input rows out */
kiln_code mdl_delta_load(mdl_model *m, int32_t L, const char *prefix, kiln_err *err);
void mdl_delta_free(mdl_delta *d);
/* mdl_mlp.c: the same contract. */
void mdl_mlp_forward(mdl_step *s);
kiln_code mdl_mlp_load(mdl_model *m, int32_t L, const char *prefix, kiln_err *err);
void mdl_mlp_free(mdl_mlp *f);
/* mdl_moe.c: the same contract; also reads s->x (the residual: router and
 * expert inputs of Gemma 4). prefix is the layer's ("model.layers.3"). */
size_t mdl_moe_scratch_bytes(const mdl_plan *p, int64_t T);
kiln_code mdl_moe_alloc(mdl_step *s, arena *a, kiln_err *err);
void mdl_moe_forward(mdl_step *s);
/* The fused step (s->fused): the block's per-token input (u, and the router's
 * input when it reads the residual) from row t of s->x and s->h, before
 * mdl_moe_forward; and after it, row t of the output into s->h (the experts'
 * weighted sum, the dense branch and their norms). mdl_moe_forward then leaves
 * s->h for mdl_moe_out_row to finish. */
void mdl_moe_in_row(mdl_step *s, int64_t t);
void mdl_moe_out_row(mdl_step *s, int64_t t);
kiln_code mdl_moe_load(mdl_model *m, int32_t L, const char *prefix, kiln_err *err);
void mdl_moe_free(mdl_moe *e);
/* mdl_pli.c: per-layer inputs. mdl_pli_inputs fills s->pli from the step's
 * token ids and scaled embeddings (s->x) once per step; mdl_pli_forward adds
 * layer s->layer's gate to the residual s->x. */
size_t mdl_pli_scratch_bytes(const mdl_plan *p, int n_threads, int64_t T);
kiln_code mdl_pli_alloc(mdl_step *s, arena *a, kiln_err *err);
void mdl_pli_inputs(mdl_step *s);
void mdl_pli_forward(mdl_step *s);
/* The fused step's half of mdl_pli_forward: s->h = the gate's projection,
 * before post_per_layer_input_norm and the residual add (the caller's row
 * job does those). At most MDL_PLI_FUSED_MAX_TOKENS tokens: one pool job in
 * which every chunk computes the whole (small) gate itself, then its rows of
 * the projection; more tokens: the unfused jobs. */
#define MDL_PLI_FUSED_MAX_TOKENS 16
void mdl_pli_project(mdl_step *s);
kiln_code mdl_pli_load_model(mdl_model *m, kiln_err *err);
kiln_code mdl_pli_load(mdl_model *m, int32_t L, const char *prefix, kiln_err *err);
void mdl_pli_free(mdl_pli *g);

#endif
