/*
 * gr_utf8.c — code point ranges as sequences of byte ranges (UTF-8).
 *
 * A range [lo, hi] of code points is split until each piece has one encoded
 * length and, at every byte position, a contiguous byte range: then the piece
 * is exactly the product of the per-position ranges (the construction RE2 and
 * Rust's utf8-ranges use). Surrogates (U+D800..U+DFFF) are never produced.
 */
#include "grammar/gr_int.h"

int gr_utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static int split(uint32_t lo, uint32_t hi, gr_utf8_emit emit, void *ctx)
{
    if (lo > hi) return 0;
    /* one encoded length per piece */
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i])
            return split(lo, bounds[i], emit, ctx) || split(bounds[i] + 1, hi, emit, ctx);
    if (hi < 0x80) {
        uint8_t a = (uint8_t)lo, z = (uint8_t)hi;
        return emit(ctx, &a, &z, 1);
    }
    /* contiguous per position: split where a lower 6k-bit block is partial */
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return split(lo, lo | m, emit, ctx) || split((lo | m) + 1, hi, emit, ctx);
            if ((hi & m) != m)
                return split(lo, (hi & ~m) - 1, emit, ctx) || split(hi & ~m, hi, emit, ctx);
        }
    }
    uint8_t a[4], z[4];
    int n = gr_utf8_encode(lo, a);
    gr_utf8_encode(hi, z);
    return emit(ctx, a, z, n);
}

int gr_utf8_ranges(uint32_t lo, uint32_t hi, gr_utf8_emit emit, void *ctx)
{
    if (hi > GR_MAX_CP) hi = GR_MAX_CP;
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800 && split(lo, 0xD7FF, emit, ctx)) return -1;
        return hi > 0xDFFF ? split(0xE000, hi, emit, ctx) : 0;
    }
    return split(lo, hi, emit, ctx);
}
