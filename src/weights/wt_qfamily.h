/*
 * wt_qfamily.h — what `mlx_lm.convert -q` does per model family before and
 * while it quantizes (its sanitize and quant_predicate), for wt_qsnapshot.c:
 * which input tensors are dropped or renamed, which fused tensors are split,
 * and which modules keep their float weights or get other bits.
 */
#ifndef KILN_WT_QFAMILY_H
#define KILN_WT_QFAMILY_H

#include <stdbool.h>
#include <stdint.h>

#include "weights/wt_config.h"
#include "weights/wt_safetensors.h"

/* One output tensor made from an input tensor: rows [r0, r0 + rows) of each
 * [R, cols] slice of it (rows == 0: the whole tensor, as is). */
typedef struct {
    char name[1024];
    int ndim;
    int64_t shape[4];
    int64_t R, r0, rows;
} wt_qf_out;

/* API */
/* The outputs input tensor t becomes (0: dropped, 1, or 2 for a fused
 * gate_up expert tensor); out has room for 2. */
int wt_qf_map(const wt_config *c, const wt_tensor *t, wt_qf_out *out);
/* For a quantizable module `mod` (a float .weight, last dim divisible by the
 * group): false to keep it float; else *bits / *group (preset to the run's)
 * and *explicit (an entry in config.json's quantization map). */
bool wt_qf_quantize(const wt_config *c, const char *mod, int *bits, int *group, bool *explicit_);

#endif
