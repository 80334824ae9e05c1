/*
 * fuzz_safetensors.c — arbitrary bytes into the safetensors header parser
 * (wt_st_open_mem); on success every tensor's bytes are read, which must stay
 * inside the input (ASan checks it).
 */
#include <stdint.h>
#include <string.h>

#include "weights/wt_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    wt_st *st = NULL;
    kiln_err err;
    if (wt_st_open_mem(data, size, "fuzz.safetensors", &st, &err) != KILN_OK) return 0;
    volatile uint8_t sink = 0;
    for (int i = 0; i < wt_st_count(st); i++) {
        const wt_tensor *t = wt_st_at(st, i);
        const uint8_t *p = t->data;
        for (uint64_t b = 0; b < t->nbytes; b++)
            sink ^= p[b];
        if (wt_st_find(st, t->name) != t) __builtin_trap();
        if (t->numel * (int64_t)wt_dtype_size(t->dtype) != (int64_t)t->nbytes) __builtin_trap();
    }
    (void)wt_st_meta(st, "format");
    (void)sink;
    wt_st_close(st);
    return 0;
}
