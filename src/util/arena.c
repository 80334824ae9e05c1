/*
 * arena.c — see arena.h.
 */
#include "util/arena.h"

#include <stdlib.h>

kiln_code arena_init(arena *a, size_t cap, kiln_err *err)
{
    a->cap = a->used = a->peak = 0;
    a->base = NULL;
    if (cap == 0) return KILN_OK;
    void *p = NULL;
    size_t rounded = (cap + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, rounded) != 0)
        return kiln_fail(err, KILN_E_NOMEM, "arena: cannot allocate %zu bytes", cap);
    a->base = p;
    a->cap = rounded;
    return KILN_OK;
}

void arena_free(arena *a)
{
    if (!a) return;
    free(a->base);
    a->base = NULL;
    a->cap = a->used = a->peak = 0;
}
