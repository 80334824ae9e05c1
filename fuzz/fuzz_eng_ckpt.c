/*
 * fuzz_eng_ckpt.c — arbitrary bytes as a generation-checkpoint payload
 * (eng_ckpt_decode); a decoded one must re-encode to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eng_ckpt ck;
    kiln_err err;
    if (eng_ckpt_decode(data, size, &ck, &err) != KILN_OK) {
        if (ck.gen) __builtin_trap(); /* nothing left to free */
        return 0;
    }
    uint8_t *buf = NULL;
    size_t n = 0;
    if (eng_ckpt_encode(&ck, &buf, &n, &err) == KILN_OK && (n != size || memcmp(buf, data, n)))
        __builtin_trap();
    free(buf);
    eng_ckpt_clear(&ck);
    return 0;
}
