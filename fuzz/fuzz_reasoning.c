/*
 * fuzz_reasoning.c — generated text into the reasoning splitter
 * (server/srv_reasoning.c: <think>…</think> → reasoning, the rest → content),
 * fed in arbitrary chunks as streaming does, and the same bytes as a
 * rendered prompt into srv_think_prompt_open.
 *
 * Input: byte 0 bit 0 = splitting enabled, bit 1 = the prompt left a <think>
 * open; byte 1 seeds the chunk sizes; the rest is the text.
 * Checks, beyond no crash, no leak, no UB: the split (content, reasoning) is
 * the same whether the text is pushed whole or in chunks; with splitting off
 * the content is the text itself; nothing is invented (content + reasoning is
 * never longer than the text).
 */
#include <stdint.h>
#include <string.h>

#include "server/srv_reasoning.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run(bool enabled, bool inside, const char *s, size_t n, uint8_t seed, srv_buf *content,
               srv_buf *reasoning)
{
    srv_think t;
    srv_think_init(&t, enabled, inside);
    uint32_t x = seed;
    for (size_t at = 0; at < n;) {
        size_t k = n - at;
        if (seed) {
            x = x * 1103515245u + 12345u;
            size_t c = 1 + (x >> 16) % 9;
            if (c < k) k = c;
        }
        if (srv_think_push(&t, s + at, k, content, reasoning)) return 1;
        at += k;
    }
    return srv_think_flush(&t, content, reasoning) ? 1 : 0;
}

static int same(const srv_buf *a, const srv_buf *b)
{
    return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    bool enabled = data[0] & 1, inside = data[0] & 2;
    const char *s = (const char *)data + 2;
    size_t n = size - 2;
    (void)srv_think_prompt_open(s, n);
    srv_buf c1 = {0}, r1 = {0}, c2 = {0}, r2 = {0};
    int a = run(enabled, inside, s, n, 0, &c1, &r1);
    int b = run(enabled, inside, s, n, data[1] ? data[1] : 1, &c2, &r2);
    if (!a && !b) {
        if (!same(&c1, &c2) || !same(&r1, &r2)) __builtin_trap(); /* streaming != whole */
        if (c1.len + r1.len > n) __builtin_trap();
        if (!enabled && (r1.len || c1.len != n || (n && memcmp(c1.p, s, n)))) __builtin_trap();
    }
    srv_buf_free(&c1);
    srv_buf_free(&r1);
    srv_buf_free(&c2);
    srv_buf_free(&r2);
    return 0;
}
