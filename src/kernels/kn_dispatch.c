/*
 * kn_dispatch.c — the kernel table, the one mutable global in kiln (written only
 * here, by kn_init(), before any thread starts; read through `kn` afterwards).
 *
 * Order of installation: ref (every entry valid) -> avx2 (+fma +f16c) -> ...
 * Each ISA install overwrites only the entries it implements, so a variant can
 * land one kernel at a time. `force` caps the level ("ref", "avx2", "avx512").
 */
#include <stdbool.h>
#include <string.h>

#include "kernels/kn_cpu.h"
#include "kernels/kn_int.h"

static kn_ops table;
const kn_ops *kn = &table;

static void install_ref(kn_ops *t)
{
    memset(t, 0, sizeof *t);
    t->isa = "ref";
    kn_ref_install_mat(t);
    kn_ref_install_ops(t);
    kn_ref_install_attn(t);
    kn_ref_install_delta(t);
}

/* Level caps: 0 = ref, 1 = avx2, 2 = avx512. */
static kiln_code parse_force(const char *force, const kn_cpu *cpu, int *cap, kiln_err *err)
{
    bool has_avx2 = cpu->avx2 && cpu->fma && cpu->f16c;
    bool has_avx512 = has_avx2 && cpu->avx512f && cpu->avx512bw && cpu->avx512vl;
    if (!force || !*force || strcmp(force, "auto") == 0) {
        *cap = 2;
        return KILN_OK;
    }
    if (strcmp(force, "ref") == 0) {
        *cap = 0;
        return KILN_OK;
    }
    if (strcmp(force, "avx2") == 0) {
        *cap = 1;
        if (!has_avx2)
            return kiln_fail(err, KILN_E_UNSUPPORTED,
                             "KILN_ISA=avx2: this CPU lacks AVX2/FMA/F16C");
        return KILN_OK;
    }
    if (strcmp(force, "avx512") == 0) {
        *cap = 2;
        if (!has_avx512)
            return kiln_fail(err, KILN_E_UNSUPPORTED, "KILN_ISA=avx512: this CPU lacks AVX-512");
        return KILN_OK;
    }
    return kiln_fail(err, KILN_E_INVALID, "KILN_ISA='%s': expected auto, ref, avx2 or avx512",
                     force);
}

kiln_code kn_init_mode(const char *force, const char *matmul, kiln_err *err)
{
    kn_cpu cpu = kn_cpu_detect();
    int cap = 0;
    kiln_code rc = parse_force(force, &cpu, &cap, err);
    if (rc != KILN_OK) return rc;
    bool int8 = false;
    if (matmul && *matmul && strcmp(matmul, "exact") != 0) {
        if (strcmp(matmul, "int8") != 0)
            return kiln_fail(err, KILN_E_INVALID, "matmul mode '%s': expected exact or int8",
                             matmul);
        int8 = true;
    }
    install_ref(&table);
    bool avx2 = false;
#if defined(__x86_64__)
    if (cap >= 1 && cpu.avx2 && cpu.fma && cpu.f16c) {
        kn_avx2_install_mat(&table);
        kn_avx2_install_ops(&table);
        kn_avx2_install_attn(&table);
        kn_avx2_install_delta(&table);
        table.isa = "avx2";
        avx2 = true;
    }
#endif
    memcpy(table.mm_q_base, table.mm_q, sizeof table.mm_q);
    table.mm_mode = "exact";
    if (int8) {
        kn_ref_install_mat_i8(&table);
#if defined(__x86_64__)
        if (avx2) kn_avx2_install_mat_i8(&table);
        /* the same integers with one vpdpbusd per 32 byte products (KILN_ISA=avx2 keeps AVX2) */
        if (avx2 && cap >= 2 && cpu.avx512vnni && cpu.avx512f && cpu.avx512bw && cpu.avx512vl) {
            kn_avx512vnni_install_mat_i8(&table);
            table.isa = "avx2+avx512vnni";
        }
#endif
        table.mm_mode = "int8";
    }
    (void)avx2;
    return KILN_OK;
}

kiln_code kn_init(const char *force, kiln_err *err)
{
    return kn_init_mode(force, NULL, err);
}

const char *kn_matmul_mode(void)
{
    return table.mm_mode ? table.mm_mode : "exact";
}

const char *kn_isa_name(void)
{
    return table.isa ? table.isa : "uninitialized";
}
