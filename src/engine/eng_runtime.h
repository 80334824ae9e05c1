/*
 * eng_runtime.h — a loaded model with everything needed to run it: kernels,
 * compute pool, KV pool and step context. The CLI verbs and the server's
 * engine thread both start from one.
 *
 *   eng_runtime_opts o = eng_runtime_opts_default();  o.n_threads = 2;
 *   eng_runtime *rt;  eng_runtime_open("/models/x", &o, &rt, &err);
 *   eng_generate(rt, prompt, n, &sampling, 64, on_token, user, &res, &err);
 *   eng_runtime_close(rt);
 */
#ifndef KILN_ENG_RUNTIME_H
#define KILN_ENG_RUNTIME_H

#include <stdint.h>

#include "engine/eng_sample.h"
#include "engine/eng_seq.h"
#include "kernels/kn_pool.h"
#include "kv/kv_pool.h"
#include "model/mdl_model.h"

typedef struct {
    int n_threads;           /* compute threads incl. the caller; 0 = all CPUs */
    int32_t ctx;             /* max positions per sequence; 0 = min(model max, 4096) */
    int32_t block_tokens;    /* KV block size (tokens) */
    int32_t max_seqs;        /* sequences per step */
    int32_t max_step_tokens; /* tokens per step (prefill chunk) */
    int32_t n_blocks;        /* KV pool size; 0 = enough for max_seqs x ctx */
    const char *isa;         /* kernel variant: NULL/"auto", "ref", "avx2", ... */
    const char *matmul;      /* 4-bit weights: "exact" or "int8"; NULL = KN_MATMUL_DEFAULT */
    int unfused;             /* 1: one pool job per op (mdl_ctx_set_fused; same bits, for A/B) */
    int32_t logit_rows;      /* OUT (eng_runtime_resolve): rows of the logits buffer */
    /* KV storage (docs/kv.md) */
    kv_quant_mode kv_quant;  /* KV_QUANT_OFF (f32, default), F16, BF16, 8, 4, CONFIG */
    int32_t kv_group;        /* affine group along head_dim; 0 = 64 (clamped to head_dim) */
    int32_t kv_quant_start;  /* positions before it stay f32 (block-granular) */
    const kv_format *kv_fmt; /* BORROWED, optional: the resolved per-layer format (needed
                                for CONFIG in eng_fit_compute; eng_runtime_open sets it
                                to its own copy in rt->o) */
    int32_t n_blocks_full;   /* OUT (eng_runtime_resolve): blocks of the full-precision
                                class when kv_quant_start splits the pool */
    int kv_window_off;       /* 1: sliding layers keep every block (giving blocks back is
                                memory-only; tests compare against this) */
    int32_t kv_window;       /* OUT (eng_runtime_resolve): the window every sequence's blocks
                                are capped at when the pool is one sliding group
                                (eng_fit_kv_window); 0 = not (mixed models cap per group) */
    int32_t group_blocks[KV_MAX_GROUPS];      /* OUT: blocks of each KV group ([0] = n_blocks) */
    int32_t group_blocks_full[KV_MAX_GROUPS]; /* OUT: of them, full precision */
    /* recurrent state (hybrid models, docs/hybrid.md) */
    int32_t state_blocks; /* state blocks in the pool; 0 = eng_fit_state_blocks default */
    int32_t state_every;  /* snapshot cadence in blocks; 0 = auto (eng_fit_state_every),
                             -1 = none on a cadence (only the ones sequences keep) */
    kn_pool *pool;        /* BORROWED, optional: compute threads to share (a draft model runs
                             on the target's; n_threads then follows the pool) */
} eng_runtime_opts;

typedef struct {
    mdl_model *model; /* OWNED */
    kn_pool *pool;    /* OWNED, unless o.pool lent it */
    kv_pool *kv;      /* OWNED */
    mdl_ctx *cx;      /* OWNED */
    uint64_t ns;      /* prefix-cache namespace: model fingerprint ^ kv_format_hash */
    kv_format kv_fmt; /* the resolved KV format (rt->o.kv_fmt points here) */
    char kv_desc[128]; /* kv_format_describe: "f32", "q8g64", ... */
    eng_runtime_opts o;
    double load_s;
    float *logits;    /* OWNED [logit_rows, vocab] step output */
    int32_t logit_rows; /* o.logit_rows: rows one step may ask logits for */
    void *sample_scratch; /* OWNED eng_sample_scratch_bytes(vocab) */
} eng_runtime;

typedef struct {
    int32_t n_prompt, n_generated, n_prefix_hit;
    double prefill_s, decode_s; /* wall time of the prefill and of the decode steps */
    int stopped_eos;            /* 1 when an EOS id ended it */
} eng_gen_result;

/* Called once per generated token; return non-zero to stop. */
typedef int (*eng_token_fn)(void *user, int32_t token, const eng_sample_out *so);

/* API */
eng_runtime_opts eng_runtime_opts_default(void);
/* The KV format o asks for on a config (kv_config.json read from dir when
 * o->kv_quant is CONFIG; dir may be NULL otherwise). o->kv_fmt wins when set. */
kiln_code eng_runtime_kv_format(const char *dir, const wt_config *c, const eng_runtime_opts *o,
                                kv_format *out, kiln_err *err);
kiln_code eng_runtime_open(const char *dir, const eng_runtime_opts *o, eng_runtime **out,
                           kiln_err *err);
void eng_runtime_close(eng_runtime *rt);
/* Runs all pending tokens of s in chunks; with all_logits the rows for every
 * token go to out_rows (caller buffer [pending, vocab]), else the last row
 * goes to rt->logits[0]. */
kiln_code eng_prefill(eng_runtime *rt, eng_seq *s, int all_logits, float *out_rows,
                      kiln_err *err);
/* Single-sequence generation (prefix cache used): prompt → up to max_tokens
 * tokens; stops at an EOS id of the config unless ignore_eos. */
kiln_code eng_generate(eng_runtime *rt, const int32_t *prompt, int32_t n_prompt,
                       const eng_sampling *sp, int32_t max_tokens, int ignore_eos,
                       eng_token_fn on_token, void *user, eng_gen_result *res, kiln_err *err);

#endif
