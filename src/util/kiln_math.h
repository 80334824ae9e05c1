/*
 * kiln_math.h — checked arithmetic for sizes built from outside numbers.
 * Each returns 1 on overflow (and leaves *out unspecified), 0 on success.
 */
#ifndef KILN_MATH_H
#define KILN_MATH_H

#include <stddef.h>
#include <stdint.h>

static inline int kiln_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
static inline int kiln_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}
static inline int kiln_mul_size(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
static inline int kiln_add_size(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out);
}
static inline int kiln_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

#endif
