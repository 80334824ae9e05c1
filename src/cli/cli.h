/*
 * cli.h — the verbs of `kiln`; each parses its flags and calls the layers below.
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdint.h>

#include "engine/eng_runtime.h"
#include "util/kiln_err.h"

/* API */
int cli_generate(int argc, char **argv);
int cli_logits(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_fit(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_get(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_detokenize(int argc, char **argv);
int cli_template(int argc, char **argv);
int cli_kvq_report(int argc, char **argv);

/* Shared helpers (cli_common.c) */
/* Parses "1,2,3" into a new array (*out, caller frees). Returns 0 or prints and returns 2. */
int cli_parse_ids(const char *verb, const char *s, int32_t **out, int32_t *n);
/* Prints "kiln VERB: msg" to stderr and returns 1. */
int cli_fail(const char *verb, const kiln_err *err);

/* The KV-format flags every model verb takes (docs/kv.md), and the matmul
 * mode (docs/kernels.md), which rides along because every verb that opens a
 * runtime needs both. */
typedef struct {
    const char *quant;       /* --kv-quant */
    int64_t group;           /* --kv-group */
    int64_t start;           /* --quantized-kv-start */
    const char *matmul;      /* --matmul (else KILN_MATMUL) */
    const char *state_every; /* --state-every: auto | off | N (hybrid models) */
    int64_t state_blocks;    /* --state-blocks (hybrid models); 0 = default */
} cli_kv_flags;
#define CLI_KV_FLAGS(kvf)                                                                          \
    {"kv-quant",                                                                                   \
     CLI_STR,                                                                                      \
     &(kvf).quant,                                                                                 \
     "off|f16|bf16|8|4|config",                                                                    \
     "KV cache storage: f32 (off, default), f16, bf16, affine 8/4-bit, or kv_config.json",         \
     0},                                                                                           \
        {"kv-group",                                                                               \
         CLI_INT,                                                                                  \
         &(kvf).group,                                                                             \
         "N",                                                                                      \
         "affine KV group size along head_dim (default 64, clamped to head_dim)",                  \
         0},                                                                                       \
        {"quantized-kv-start",                                                                     \
         CLI_INT,                                                                                  \
         &(kvf).start,                                                                             \
         "N",                                                                                      \
         "positions before N keep f32 KV (block-granular; default 0)",                             \
         0},                                                                                       \
        {"matmul",                                                                                 \
         CLI_STR,                                                                                  \
         &(kvf).matmul,                                                                            \
         "exact|int8",                                                                             \
         "4-bit weights: int8 activations per 32 columns (default; llama.cpp's Q8_0 "              \
         "accuracy, ~2x prefill) or exact f32 activations (MLX semantics); env KILN_MATMUL",        \
         0},                                                                                       \
        {"state-every",                                                                            \
         CLI_STR,                                                                                  \
         &(kvf).state_every,                                                                       \
         "auto|off|N",                                                                             \
         "hybrid models: snapshot the recurrent state every N KV blocks for prefix hits "          \
         "(auto: from the state's size; off: only the snapshots sequences keep)",                  \
         0},                                                                                       \
    {                                                                                              \
        "state-blocks", CLI_INT, &(kvf).state_blocks, "N",                                         \
            "hybrid models: recurrent-state blocks in the pool (working states + snapshots; "      \
            "default: 2 per sequence + a quarter of the KV pool's bytes, docs/hybrid.md)",         \
            0                                                                                      \
    }
/* Applies the flags to o; prints and returns 2 on a bad value, else 0. */
int cli_kv_apply(const char *verb, const cli_kv_flags *kvf, eng_runtime_opts *o);

#endif
