/*
 * kn_cpu.c — CPU feature detection, decoded once into named bits.
 *
 * x86-64: CPUID says what the core implements; XGETBV says whether the OS saves
 * the wider registers (YMM for AVX2, opmask/ZMM for AVX-512, tile state for AMX).
 * A feature counts only when both agree. AMX additionally needs a per-process
 * permission on Linux (arch_prctl ARCH_REQ_XCOMP_PERM); `amx_granted` records
 * whether the kernel gave it. arm64: NEON is architectural; dotprod/i8mm are
 * left false until an arm kernel needs them.
 * Threads: call before any pool starts (kn_init does).
 */
#include "kernels/kn_cpu.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static bool amx_request_permission(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    /* ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return false;
#endif
}

static void detect_x86(kn_cpu *c)
{
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return;
    bool osxsave = (cx >> 27) & 1, avx = (cx >> 28) & 1;
    bool fma = (cx >> 12) & 1, f16c = (cx >> 29) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm_ok = osxsave && avx && (xcr0 & 0x6) == 0x6;
    bool zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;
    bool tile_ok = (xcr0 & 0x60000) == 0x60000;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return;
    unsigned a7, b7, c7, d7;
    __cpuid_count(7, 0, a7, b7, c7, d7);
    c->fma = ymm_ok && fma;
    c->f16c = ymm_ok && f16c;
    c->avx2 = ymm_ok && ((b7 >> 5) & 1);
    c->avx512f = zmm_ok && ((b7 >> 16) & 1);
    c->avx512dq = zmm_ok && ((b7 >> 17) & 1);
    c->avx512bw = zmm_ok && ((b7 >> 30) & 1);
    c->avx512vl = zmm_ok && ((b7 >> 31) & 1);
    c->avx512vnni = zmm_ok && ((c7 >> 11) & 1);
    c->amx_bf16 = tile_ok && ((d7 >> 22) & 1);
    c->amx_tile = tile_ok && ((d7 >> 24) & 1);
    c->amx_int8 = tile_ok && ((d7 >> 25) & 1);
    if (a7 >= 1) {
        unsigned a71, b71, c71, d71;
        __cpuid_count(7, 1, a71, b71, c71, d71);
        c->avxvnni = ymm_ok && ((a71 >> 4) & 1);
        c->avx512bf16 = zmm_ok && ((a71 >> 5) & 1);
    }
    if (c->amx_tile) c->amx_granted = amx_request_permission();
}
#endif

kn_cpu kn_cpu_detect(void)
{
    kn_cpu c;
    memset(&c, 0, sizeof c);
#if defined(__x86_64__)
    detect_x86(&c);
#elif defined(__aarch64__)
    c.neon = true;
#endif
    return c;
}
