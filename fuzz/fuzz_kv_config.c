/*
 * fuzz_kv_config.c — arbitrary bytes into the kv_config.json parser
 * (kv/kv_format.c), for a few model shapes. On success every layer's format
 * must satisfy the invariants the pool and the kernels rely on, and encoding a
 * row in it must stay inside kn_kv_rec_bytes.
 */
#include <stdint.h>
#include <string.h>

#include "kv/kv_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int32_t shapes[][2] = {{5, 8}, {16, 64}, {3, 128}, {2, 96}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        kv_format f;
        kiln_err err;
        int32_t nl = shapes[s][0], hd = shapes[s][1];
        if (kv_format_parse_config((const char *)data, size, "fuzz/kv_config.json", 0, 0, nl, hd,
                                   &f, &err) != KILN_OK)
            continue;
        for (int32_t l = 0; l < nl; l++) {
            kn_kv_fmt k = f.layer[l];
            if (k.dtype < 0 || k.dtype >= KN_KV_DTYPE_COUNT) __builtin_trap();
            int affine = k.dtype == KN_KV_Q8 || k.dtype == KN_KV_Q4;
            if (affine && (k.group < 2 || k.group % 2 || k.group > 512 || hd % k.group))
                __builtin_trap();
            if (!affine && k.group != 0) __builtin_trap();
            float x[128];
            uint8_t rec[1024 + 64];
            for (int32_t i = 0; i < hd; i++)
                x[i] = (float)(i * 7 % 13) - 6.0f;
            size_t n = kn_kv_rec_bytes(k, hd);
            if (n > 1024) __builtin_trap();
            memset(rec, 0xa5, sizeof rec);
            kn_kv_store(k, x, hd, rec);
            for (size_t i = n; i < sizeof rec; i++)
                if (rec[i] != 0xa5) __builtin_trap(); /* wrote past the record */
        }
        char d[64];
        kv_format_describe(&f, d, sizeof d);
        if (strlen(d) >= sizeof d) __builtin_trap();
        (void)kv_format_hash(&f);
    }
    return 0;
}
