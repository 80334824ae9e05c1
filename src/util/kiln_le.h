/*
 * kiln_le.h — little-endian loads and stores of fixed-width integers, for
 * on-disk formats (safetensors header length, SSD entries, checkpoints) that
 * must read the same on every host, whatever its byte order or alignment.
 */
#ifndef KILN_LE_H
#define KILN_LE_H

#include <stdint.h>

static inline void kiln_put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kiln_put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t kiln_get_le32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t kiln_get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
