/*
 * fuzz_config.c — arbitrary bytes into the config.json parser. The input is
 * split at the first NUL byte: before it config.json, after it (if any)
 * generation_config.json. On success the quantization lookup is exercised.
 */
#include <stdint.h>
#include <string.h>

#include "weights/wt_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *cfg = (const char *)data, *gen = NULL;
    size_t len = size, glen = 0;
    const uint8_t *nul = memchr(data, 0, size);
    if (nul) {
        len = (size_t)(nul - data);
        gen = (const char *)nul + 1;
        glen = size - len - 1;
    }
    wt_config c;
    kiln_err err;
    if (wt_config_parse(cfg, len, gen, glen, "fuzz/config.json", &c, &err) != KILN_OK) {
        if (c.qover != NULL || c.n_qover != 0) __builtin_trap(); /* nothing left to free */
        return 0;
    }
    if (c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.n_heads % c.n_kv_heads)
        __builtin_trap();
    for (int i = 0; i < c.n_qover; i++) {
        wt_qspec q = wt_config_quant_for(&c, c.qover[i].path, true);
        if (q.mode != c.qover[i].spec.mode) __builtin_trap();
    }
    (void)wt_config_quant_for(&c, "model.layers.0.mlp.down_proj", true);
    wt_config_free(&c);
    return 0;
}
