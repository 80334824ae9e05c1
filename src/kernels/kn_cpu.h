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
const char *kn_isa_name(void); /* the variant in use: "ref", "avx2", "avx512", ... */

#endif
