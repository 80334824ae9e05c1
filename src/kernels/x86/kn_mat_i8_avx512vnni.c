/*
 * kn_mat_i8_avx512vnni.c — the int8 matmul mode's 4-bit kernel with vpdpbusd
 * (AVX512-VNNI on 256-bit vectors, AVX512VL): kn_mat_i8_avx2.c compiled again
 * with one instruction per 32 byte products instead of vpmaddubsw + vpaddw +
 * vpmaddwd. The lane sums are the same integers (see there), so the results
 * are the AVX2 variant's, bit for bit (unit.kn_mat checks both against ref).
 */
#if defined(__x86_64__)
#include <immintrin.h>

#define I8_DOT(lo, hi, q)                                                                          \
    _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), lo, _mm256_load_si256(q)), hi, \
                        _mm256_load_si256((q) + 1))
#define I8_INSTALL kn_avx512vnni_install_mat_i8

#include "kernels/x86/kn_mat_i8_avx2.c"
#endif
