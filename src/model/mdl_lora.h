/*
 * mdl_lora.h — LoRA adapters over a loaded model, read as they are on disk,
 * applied per sequence inside the one batched step.
 *
 *   mdl_lora *a;  mdl_lora_load(model, "/adapters/sql", &a, &err);   // PEFT or mlx-lm folder
 *   mdl_lora_set set = {.n = 1, .a = {a}, .scale = {1.0f}};
 *   mdl_seq s = {..., .lora = &set};                                   // per sequence
 *   mdl_forward(cx, kv, &s, 1, logits, &err);
 *
 * Formats (docs/lora.md):
 *   PEFT    adapter_config.json (r, lora_alpha, use_rslora, target_modules, ...)
 *           + adapter_model.safetensors: <...>.layers.N.<module>.lora_A.weight [r, in],
 *           lora_B.weight [out, r]; scale lora_alpha / r (rsLoRA: / sqrt(r)).
 *   mlx-lm  adapter_config.json (fine_tune_type "lora", num_layers, lora_parameters
 *           {rank, scale, keys}) + adapters.safetensors: <...>.layers.N.<module>.lora_a
 *           [in, r], lora_b [r, out]; scale lora_parameters.scale.
 * Targets: q/k/v/o_proj and gate/up/down_proj of any layer, on float or
 * MLX-quantized bases (the base stays as stored; adapter weights are kept as
 * f32 copies, A as [r, in] and B as [out, r]). Every tensor's shape is checked
 * against the base model's plan; a mismatch names the tensor.
 *
 * Execution: after each base projection y = W·x (+b), every row whose sequence
 * carries a set adds Σ_i scale_i · s_i · B_i·(A_i·x) in the set's order. Rows
 * with equal sets run in tiles that share each read of A and B, but each row's
 * update is reduced in a fixed order from that row alone, so a row's logits
 * are bitwise the same whatever shares its step and however it is chunked.
 * An adapter is read-only after load: many contexts/threads may use it at once.
 */
#ifndef KILN_MDL_LORA_H
#define KILN_MDL_LORA_H

#include <stdint.h>

#include "util/kiln_err.h"

typedef struct mdl_model mdl_model;
typedef struct mdl_lora mdl_lora;

#define MDL_LORA_MAX_STACK 8 /* adapters one sequence may stack */
#define MDL_LORA_MAX_RANK 1024

/* The adapters one sequence runs with, applied in order. */
typedef struct {
    int32_t n;                             /* 0..MDL_LORA_MAX_STACK */
    const mdl_lora *a[MDL_LORA_MAX_STACK]; /* BORROWED: must outlive the steps that use it */
    float scale[MDL_LORA_MAX_STACK];       /* multiplies the adapter's own scale (1 = as trained) */
} mdl_lora_set;

typedef enum { MDL_LORA_PEFT, MDL_LORA_MLX } mdl_lora_format;

typedef struct {
    mdl_lora_format format;
    int32_t rank;         /* the largest rank of its modules */
    int32_t n_modules;    /* adapted (layer, projection) pairs */
    int32_t n_layers;     /* layers with at least one module */
    float scale;          /* the scale of its first module (α/r, α/√r, or mlx scale) */
    uint64_t bytes;       /* memory the adapter holds (f32 A and B) */
    char targets[96];     /* e.g. "q_proj,v_proj" */
    char base_model[160]; /* PEFT base_model_name_or_path, or "" */
} mdl_lora_info;

/* API */
/* Reads the adapter folder `dir` for model m (which must outlive it). *out is
 * new: mdl_lora_free. Errors: KILN_E_NOT_FOUND (no config or tensor file),
 * KILN_E_UNSUPPORTED (DoRA, modules_to_save, embedding/head adapters, another
 * fine-tune type), KILN_E_INVALID (bad config), KILN_E_CORRUPT (a tensor whose
 * shape does not fit the base: another base model). */
kiln_code mdl_lora_load(const mdl_model *m, const char *dir, mdl_lora **out, kiln_err *err);
/* Adapters are reference-counted (any thread): load gives one reference,
 * retain adds one, free drops one and the last frees the adapter. A server
 * that unloads an adapter drops its reference while requests that started on
 * it keep theirs (the engine retains a request's set until the request ends). */
void mdl_lora_retain(const mdl_lora *a); /* NULL is a no-op */
void mdl_lora_free(mdl_lora *a);         /* NULL is a no-op */
/* mdl_lora_retain / mdl_lora_free on every adapter of set (NULL: nothing). */
void mdl_lora_set_retain(const mdl_lora_set *set);
void mdl_lora_set_release(const mdl_lora_set *set);
/* The memory mdl_lora_load of folder dir will hold (f32 A and B: 4 bytes per
 * stored element), from its tensor file's header alone, so that memory plans
 * can count an adapter before the model is open. KILN_E_NOT_FOUND without a
 * tensor file; the header's own errors otherwise. */
kiln_code mdl_lora_dir_bytes(const char *dir, uint64_t *bytes, kiln_err *err);
mdl_lora_info mdl_lora_get_info(const mdl_lora *a);
/* 1 when a (non-NULL) was loaded for model m. */
int mdl_lora_for_model(const mdl_lora *a, const mdl_model *m);
/* A 64-bit identity of the adapter's contents (tensors and scales). */
uint64_t mdl_lora_fingerprint(const mdl_lora *a);
/* The prefix-cache namespace of a sequence running with `set` over a model
 * whose namespace is ns: ns itself for NULL or an empty set, else a mix of ns,
 * every adapter's fingerprint and scale in order (never 0 when ns is not 0). */
uint64_t mdl_lora_set_ns(const mdl_lora_set *set, uint64_t ns);

#endif
