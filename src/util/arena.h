/*
 * arena.h — bump allocator for per-step and per-request temporaries.
 *
 *   arena a; arena_init(&a, 1 << 20, &err);
 *   float *x = ARENA_ARRAY(&a, float, n);   // NULL when full: an error, never a malloc
 *   arena_reset(&a); arena_free(&a);
 */
#ifndef KILN_ARENA_H
#define KILN_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

typedef struct {
    uint8_t *base; /* OWNED; freed by arena_free() */
    size_t cap, used, peak;
} arena;

/* API */
kiln_code arena_init(arena *a, size_t cap, kiln_err *err);
void arena_free(arena *a);

static inline void arena_reset(arena *a)
{
    a->used = 0;
}

/* align must be a power of two. Returns NULL when the arena is full. */
static inline void *arena_alloc(arena *a, size_t n, size_t align)
{
    size_t at = (a->used + align - 1) & ~(align - 1);
    if (at < a->used || at > a->cap || n > a->cap - at) return NULL;
    a->used = at + n;
    if (a->used > a->peak) a->peak = a->used;
    return a->base + at;
}

#define ARENA_ARRAY(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n), 64))

#endif
