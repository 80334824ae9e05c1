/*
 * fuzz_kv_ssd_entry.c — arbitrary bytes as an SSD cache entry file: the header
 * parser, then the whole-entry check against the identity the header claims
 * (so the length and checksum paths run too). Nothing may read past `size`.
 */
#include <stdint.h>
#include <string.h>

#include "kv/kv_ssd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kv_ssd_header h;
    kiln_err err;
    if (kv_ssd_header_parse(data, size, &h, &err) != KILN_OK) return 0;
    if (h.version != KV_SSD_VERSION || h.payload_len > KV_SSD_MAX_PAYLOAD) __builtin_trap();
    const uint8_t *payload = NULL;
    size_t n = 0;
    if (kv_ssd_entry_check(data, size, &h.id, h.kind, h.key, &payload, &n, &err) != KILN_OK)
        return 0;
    if (payload != data + KV_SSD_HEADER_BYTES || n != h.payload_len ||
        KV_SSD_HEADER_BYTES + n + KV_SSD_TRAILER_BYTES != size)
        __builtin_trap();
    return 0;
}
