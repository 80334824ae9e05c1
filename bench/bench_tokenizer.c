/*
 * bench_tokenizer.c — tokenizer speed on one core: encode MB/s of English prose
 * (generated from a fixed set of sentences with a seeded shuffle), decode MB/s,
 * and two pathological inputs (1 MB of one character, 1 MB without a space).
 *   bench_tokenizer [TOKENIZER_DIR] [MB]
 * Default dir: $KILN_TOK_CACHE/llama3, else <build>/tok-cache/llama3 (filled by
 * tests/cli/test_tokenizer_golden.sh), else ../shared/models/stories260K.
 * Prints key=value lines; never pass/fail on time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tokenizer/tok.h"
#include "util/plat.h"

static const char *SENTENCES[] = {
    "The old lighthouse keeper climbed the spiral stairs every evening, counting each step as if it might have changed.",
    "Nobody in the village remembered when the road to the harbour had last been repaired.",
    "She opened the letter slowly, because she already knew what it would say.",
    "In the morning the fog lifted, and the fishing boats returned with less than they had hoped for.",
    "Engineers measured the bridge twice a year; the numbers were always a little worse than before.",
    "\"We could leave tomorrow,\" he said, \"but I don't think we will.\"",
    "The library closed at six, yet the lights in the reading room stayed on until well past midnight.",
    "A small committee was formed to decide what should be done about the orchard, which had not produced fruit in years.",
    "Prices rose by 3.5 percent in March, the third increase since the beginning of 2023.",
    "The children raced along the beach, shouting at the gulls and laughing when the waves caught their feet.",
    "It's not that the plan was wrong, exactly; it's that nobody had asked the people who would live with it.",
    "By the time the train reached the coast, the sky had turned the colour of wet slate.",
    "He kept a notebook of questions he intended to ask his grandmother, though he rarely asked any of them.",
    "The report, published on Tuesday, recommended closing two of the four schools in the district.",
    "Most of the furniture had been sold, but the piano remained, too heavy to move and too beautiful to burn.",
    "When the storm finally arrived, it was quieter than anyone had expected, and it left almost as quickly.",
    "They argued about the map for an hour before admitting that neither of them could read it.",
    "The museum's newest exhibit featured tools from the nineteenth century, including a brass telescope and several clocks.",
    "Every spring the river rose, flooding the lower fields and leaving behind a layer of dark, fertile mud.",
    "Her answer was short: she would stay, she would work, and she would not apologise for either.",
};

static char *make_prose(size_t bytes)
{
    char *s = malloc(bytes + 256);
    size_t n = 0;
    uint32_t seed = 12345;
    size_t k = sizeof SENTENCES / sizeof SENTENCES[0];
    while (n < bytes) {
        seed = seed * 1103515245u + 12345u;
        const char *x = SENTENCES[(seed >> 16) % k];
        size_t l = strlen(x);
        if (n + l + 2 > bytes + 200) break;
        memcpy(s + n, x, l);
        n += l;
        s[n++] = ((seed >> 8) % 7 == 0) ? '\n' : ' ';
    }
    s[n] = 0;
    return s;
}

static double encode_mbps(tok_tokenizer *t, const char *s, size_t n, size_t *ntok)
{
    kiln_err err;
    int32_t *ids;
    double t0 = plat_now();
    if (tok_encode(t, s, n, 0, &ids, ntok, &err) != KILN_OK) {
        fprintf(stderr, "encode: %s\n", err.msg);
        return 0;
    }
    double dt = plat_now() - t0;
    free(ids);
    return (double)n / 1e6 / dt;
}

int main(int argc, char **argv)
{
    char dir[4096], buf[4200];
    const char *cache = getenv("KILN_TOK_CACHE");
    if (argc > 1)
        snprintf(dir, sizeof dir, "%s", argv[1]);
    else if (cache)
        snprintf(dir, sizeof dir, "%s/llama3", cache);
    else
        snprintf(dir, sizeof dir, "%s", "tok-cache/llama3");
    snprintf(buf, sizeof buf, "%s/tokenizer.json", dir);
    if (!test_path_exists(buf)) test_shared_path(dir, sizeof dir, "models/stories260K");
    double mb = argc > 2 ? atof(argv[2]) : 8.0;
    kiln_err err;
    tok_tokenizer *t;
    double t0 = plat_now();
    if (tok_load(dir, &t, &err) != KILN_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return 1;
    }
    double load_s = plat_now() - t0;
    size_t n = (size_t)(mb * 1e6);
    char *prose = make_prose(n);
    n = strlen(prose);
    size_t ntok = 0;
    double enc = encode_mbps(t, prose, n, &ntok);
    /* decode the same ids */
    int32_t *ids;
    size_t k;
    tok_encode(t, prose, n, 0, &ids, &k, &err);
    char *text;
    size_t tl;
    t0 = plat_now();
    tok_decode(t, ids, k, 0, &text, &tl, &err);
    double dec = (double)tl / 1e6 / (plat_now() - t0);
    printf("bench=tokenizer tokenizer=%s load_s=%.2f input_mb=%.1f tokens=%zu encode_mbps=%.1f "
           "decode_mbps=%.1f roundtrip=%s\n",
           dir, load_s, n / 1e6, ntok, enc, dec, (tl == n && !memcmp(text, prose, n)) ? "ok" : "DIFF");
    free(text);
    free(ids);
    /* pathological: 1 MB of one character, 1 MB of letters without a space */
    size_t m = 1 << 20;
    char *p = malloc(m + 1);
    memset(p, 'a', m);
    p[m] = 0;
    double one = encode_mbps(t, p, m, &ntok);
    for (size_t i = 0; i < m; i++) p[i] = "abcdefghijklmnopqrstuvwxyz"[(i * 7 + i / 26) % 26];
    double nospace = encode_mbps(t, p, m, &ntok);
    memset(p, ' ', m);
    double spaces = encode_mbps(t, p, m, &ntok);
    printf("bench=tokenizer_pathological one_char_mbps=%.1f no_space_mbps=%.1f spaces_mbps=%.1f\n", one,
           nospace, spaces);
    free(p);
    free(prose);
    tok_destroy(t);
    return 0;
}
