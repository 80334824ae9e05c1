/*
 * kn_cpu.h — CPU features (CPUID + XGETBV: the OS must save the registers too)
 * and the choice of kernel variant, made once by kn_init() before any thread starts.
 *
 *   kn_init(getenv("KILN_ISA"), &err);   // NULL/"auto" = best available; "ref" = portable C
 *   printf("%s\n", kn_isa_name());
 */
#ifndef KILN_KN_CPU_H
#define KILN_KN_CPU_H

#include <stdbool.h>

#include "util/kiln_err.h"

typedef struct {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    bool avxvnni;
    bool amx_tile, amx_int8, amx_bf16, amx_granted;
    bool neon, dotprod, i8mm;
} kn_cpu;

/* API */
kn_cpu kn_cpu_detect(void);
/* Installs the kernel table. force: NULL, "" or "auto" = best the CPU has;
 * "ref" = portable C only; "avx2", "avx512" = at most that level (refused with
 * KILN_E_UNSUPPORTED if the CPU lacks it). KILN_ISA in the environment is read
 * by the CLI and passed here. Idempotent; call before creating pools. */
kiln_code kn_init(const char *force, kiln_err *err);
/* kn_init plus the matmul mode for MLX affine 4-bit weights: NULL, "" or
 * "exact" = activations kept at f32 precision (two int16 levels; matches the
 * reference to ~1e-5: the MLX semantics); "int8" = activations quantized to
 * int8 per 32 columns (kn_int.h), as llama.cpp's Q8_0 does: ~2× less kernel
 * time at prefill and batched decode (other bit widths stay exact), error
 * against the float64 reference no worse than llama.cpp's (docs/kernels.md).
 * KILN_E_INVALID for anything else. The runtime's default is
 * KN_MATMUL_DEFAULT (eng_runtime_open); KILN_MATMUL in the environment is
 * read by the CLI and passed here. */
#define KN_MATMUL_DEFAULT "int8"
kiln_code kn_init_mode(const char *force, const char *matmul, kiln_err *err);
const char *kn_matmul_mode(void); /* "exact" or "int8" */
const char *kn_isa_name(void);    /* the variant in use: "ref", "avx2", "avx512", ... */

#endif
