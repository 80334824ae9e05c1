/*
 * test_tok_golden.c — tokenizers against references nobody here wrote:
 *   - llama.cpp's vectors (../shared/vectors/tokenizer/llamacpp): llama-bpe <-> llama3,
 *     qwen2 <-> qwen3; no BOS, special tokens not parsed;
 *   - @huggingface/tokenizers@0.2.0 (ref_<name>.json written by ref_tokenize.mjs
 *     over a generated corpus): ids with and without special tokens, decode;
 *   - for every tokenizer: decode round-trips, the stream equals decode, and
 *     invalid UTF-8 encodes as its U+FFFD repair.
 * Inputs: $KILN_TOK_CACHE (default $KILN_BINARY_DIR/tok-cache), filled by
 * tests/cli/test_tokenizer_golden.sh (fetch_tokenizers.sh + node). A case skips
 * only when its files are absent; the shell test makes them present in CI.
 * stories260K and the oracle tokenizers live in ../shared and always run.
 */
#include <jansson.h>
#include <utf8proc.h>

#include "test.h"
#include "tokenizer/tok.h"
#include "util/kiln_err.h"
#include "util/plat.h"

static char cache_dir[2048];

static const char *cache_path(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", cache_dir, rel);
    return buf;
}

/* ---------------------------------------------------------------- helpers */

static int ids_equal(const int32_t *a, size_t na, const json_t *want)
{
    if (!json_is_array(want) || json_array_size(want) != na) return 0;
    for (size_t i = 0; i < na; i++)
        if (json_integer_value(json_array_get(want, i)) != a[i]) return 0;
    return 1;
}

static void print_ids(const char *tag, const int32_t *ids, size_t n)
{
    fprintf(stderr, "    %s:", tag);
    for (size_t i = 0; i < n && i < 60; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Streams ids one by one; returns the concatenated text (caller frees). */
static char *stream_all(const tok_tokenizer *t, const int32_t *ids, size_t n, unsigned flags)
{
    kiln_err err;
    tok_stream *s;
    if (tok_stream_create(t, flags, &s, &err) != KILN_OK) return NULL;
    size_t cap = 64, len = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t pl;
        kiln_code rc = i < n ? tok_stream_push(s, ids[i], &piece, &pl, &err)
                             : tok_stream_flush(s, &piece, &pl, &err);
        if (rc != KILN_OK) {
            free(out);
            tok_stream_destroy(s);
            return NULL;
        }
        /* never half a character: every piece is valid UTF-8 on its own */
        if (utf8proc_decompose((const utf8proc_uint8_t *)piece, (utf8proc_ssize_t)pl, NULL, 0, 0) < 0) {
            fprintf(stderr, "    stream piece is not valid UTF-8\n");
            free(out);
            tok_stream_destroy(s);
            return NULL;
        }
        while (len + pl + 1 > cap) cap *= 2;
        out = realloc(out, cap);
        memcpy(out + len, piece, pl);
        len += pl;
    }
    out[len] = 0;
    tok_stream_destroy(s);
    return out;
}

/* Checks decode round trip and stream == decode for one encoding. Returns 1 ok. */
static int check_decode(const tok_tokenizer *t, const char *text, size_t len, const int32_t *ids,
                        size_t n, int nfc)
{
    kiln_err err;
    char *dec;
    size_t dl;
    if (tok_decode(t, ids, n, 0, &dec, &dl, &err) != KILN_OK) return 0;
    int ok = 1;
    /* round trip: exact, or equal after NFC when the tokenizer normalizes. With a
     * special token inside, SentencePiece's per-segment "▁" makes HF itself not
     * round-trip; the caller then checks against HF's decode instead. */
    int has_special = 0;
    for (size_t i = 0; i < n; i++) has_special |= tok_is_special(t, ids[i]);
    /* literal "▁" in the input decodes to a space with SentencePiece decoders (HF too) */
    int32_t probe = tok_piece_to_id(t, "\xE2\x96\x81", 3);
    if (strstr(text, "\xE2\x96\x81") && probe >= 0) has_special = 1;
    if (!has_special && (dl != len || memcmp(dec, text, len) != 0)) {
        ok = 0;
        if (nfc) {
            char *a = (char *)utf8proc_NFC((const utf8proc_uint8_t *)dec);
            char *b = (char *)utf8proc_NFC((const utf8proc_uint8_t *)text);
            ok = a && b && !strcmp(a, b);
            free(a);
            free(b);
        }
        if (!ok) fprintf(stderr, "    round trip: got \"%s\" want \"%s\"\n", dec, text);
    }
    char *st = stream_all(t, ids, n, 0);
    if (!st || strcmp(st, dec) != 0) {
        fprintf(stderr, "    stream \"%s\" != decode \"%s\"\n", st ? st : "(error)", dec);
        ok = 0;
    }
    free(st);
    /* skip_special stream equals skip_special decode too */
    char *d2;
    if (tok_decode(t, ids, n, TOK_SKIP_SPECIAL, &d2, NULL, &err) == KILN_OK) {
        char *s2 = stream_all(t, ids, n, TOK_SKIP_SPECIAL);
        if (!s2 || strcmp(s2, d2) != 0) {
            fprintf(stderr, "    skip-special stream \"%s\" != decode \"%s\"\n", s2 ? s2 : "(error)", d2);
            ok = 0;
        }
        free(s2);
        free(d2);
    }
    free(dec);
    return ok;
}

/* ---------------------------------------------------------------- llama.cpp */

static void run_llamacpp(const char *tok_name, const char *vec_name)
{
    char p1[4096], p2[4096], p3[4096];
    snprintf(p3, sizeof p3, "vectors/tokenizer/llamacpp/ggml-vocab-%s.gguf.inp", vec_name);
    test_shared_path(p1, sizeof p1, p3);
    snprintf(p3, sizeof p3, "vectors/tokenizer/llamacpp/ggml-vocab-%s.gguf.out", vec_name);
    test_shared_path(p2, sizeof p2, p3);
    cache_path(p3, sizeof p3, tok_name);
    if (!test_path_exists(p1) || !test_path_exists(p2)) TEST_SKIP("%s absent", p1);
    if (!test_path_exists(p3)) TEST_SKIP("%s absent (run tests/cli/test_tokenizer_golden.sh)", p3);
    kiln_err err;
    tok_tokenizer *t;
    ASSERT_OK(tok_load(p3, &t, &err));
    char *inp, *out;
    size_t inl, outl;
    ASSERT_OK(plat_read_file(p1, 1 << 24, &inp, &inl, &err));
    ASSERT_OK(plat_read_file(p2, 1 << 24, &out, &outl, &err));
    const char *sep = "\n__ggml_vocab_test__\n";
    char *ip = inp, *op = out;
    int total = 0, pass = 0;
    for (;;) {
        char *e = strstr(ip, sep);
        if (!e) break;
        char *ol = strchr(op, '\n');
        if (!ol) break;
        *ol = 0;
        int32_t *ids;
        size_t n;
        ASSERT_OK(tok_encode(t, ip, (size_t)(e - ip), 0, &ids, &n, &err));
        int32_t want[4096];
        size_t nw = 0;
        for (char *q = op; *q && nw < 4096;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            want[nw++] = (int32_t)v;
            q = end;
        }
        int ok = n == nw && (n == 0 || !memcmp(ids, want, n * sizeof *ids));
        if (!ok) {
            fprintf(stderr, "  %s mismatch on \"%.*s\"\n", vec_name, (int)(e - ip), ip);
            print_ids("got ", ids, n);
            print_ids("want", want, nw);
        } else {
            ok = check_decode(t, ip, (size_t)(e - ip), ids, n, !strcmp(tok_name, "qwen3"));
        }
        pass += ok;
        total++;
        free(ids);
        ip = e + strlen(sep);
        op = ol + 1;
    }
    fprintf(stderr, "  llama.cpp %s vs %s: %d/%d pass\n", vec_name, tok_name, pass, total);
    free(inp);
    free(out);
    tok_destroy(t);
    ASSERT_TRUE(total > 0);
    ASSERT_EQ_I64(pass, total);
}

static void test_llamacpp_llama_bpe_matches_llama3(void)
{
    run_llamacpp("llama3", "llama-bpe");
}

static void test_llamacpp_qwen2_matches_qwen3(void)
{
    run_llamacpp("qwen3", "qwen2");
}

/* ---------------------------------------------------------------- HF reference */

/* Replaces each U+FFFD in s by an ill-formed byte sequence (cycling through a few). */
static char *inject_invalid(const char *s, size_t *len)
{
    static const char *bad[] = {"\xFF", "\xC3", "\xE2\x82", "\xED\xA0\x80", "\xF0\x9F\x98", "\x80"};
    size_t n = strlen(s), k = 0;
    char *o = malloc(n * 2 + 8);
    size_t j = 0;
    for (size_t i = 0; i < n;) {
        if (!memcmp(s + i, "\xEF\xBF\xBD", 3) && i + 3 <= n) {
            const char *b = bad[k++ % 6];
            /* "\xED\xA0\x80" is 3 subparts (3 U+FFFD); use it only when three follow */
            if (!strcmp(b, "\xED\xA0\x80")) {
                if (i + 9 <= n && !memcmp(s + i + 3, "\xEF\xBF\xBD\xEF\xBF\xBD", 6)) {
                    memcpy(o + j, b, 3);
                    j += 3;
                    i += 9;
                    continue;
                }
                b = "\xFF";
            }
            memcpy(o + j, b, strlen(b));
            j += strlen(b);
            i += 3;
            /* a truncated sequence followed by a continuation byte would join it */
            if (strlen(b) > 1 && i < n && ((unsigned char)s[i] & 0xC0) == 0x80) {
                free(o);
                return NULL;
            }
        } else {
            o[j++] = s[i++];
        }
    }
    o[j] = 0;
    *len = j;
    return o;
}

static int run_reference(const char *name, const char *dir)
{
    char p[4096], rel[256];
    snprintf(rel, sizeof rel, "ref_%s.json", name);
    cache_path(p, sizeof p, rel);
    if (!test_path_exists(p) || !test_path_exists(dir)) {
        fprintf(stderr, "  SKIP: %s or %s absent (run tests/cli/test_tokenizer_golden.sh)\n", p, dir);
        test_skipped_++;
        return -1;
    }
    kiln_err err;
    tok_tokenizer *t;
    if (tok_load(dir, &t, &err) != KILN_OK) {
        fprintf(stderr, "  load %s: %s\n", dir, err.msg);
        return 0;
    }
    json_error_t je;
    json_t *ref = json_load_file(p, 0, &je);
    json_t *enc = json_object_get(ref, "encode");
    int total = 0, pass = 0, invalid = 0;
    for (size_t i = 0; i < json_array_size(enc); i++) {
        json_t *c = json_array_get(enc, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t tl = json_string_length(json_object_get(c, "text"));
        int32_t *ids = NULL, *ids2 = NULL;
        size_t n = 0, n2 = 0;
        int ok = tok_encode(t, text, tl, TOK_PARSE_SPECIAL, &ids, &n, &err) == KILN_OK &&
                 tok_encode(t, text, tl, TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL, &ids2, &n2, &err) == KILN_OK;
        if (ok && !ids_equal(ids, n, json_object_get(c, "ids"))) {
            ok = 0;
            fprintf(stderr, "  %s: ids differ on \"%s\"\n", name, text);
            print_ids("got", ids, n);
        }
        if (ok && !ids_equal(ids2, n2, json_object_get(c, "ids_with_special"))) {
            ok = 0;
            fprintf(stderr, "  %s: ids_with_special differ on \"%s\"\n", name, text);
        }
        if (ok && n) { /* HF decode (with the config's clean-up) */
            char *d;
            unsigned fl = tok_cleanup_default(t) ? TOK_CLEANUP_SPACES : 0;
            const char *want = json_string_value(json_object_get(c, "decoded"));
            if (tok_decode(t, ids, n, fl, &d, NULL, &err) != KILN_OK || !want || strcmp(d, want)) {
                fprintf(stderr, "  %s: decode \"%s\" != HF \"%s\"\n", name, d, want ? want : "?");
                ok = 0;
            }
            free(d);
        }
        if (ok) ok = check_decode(t, text, tl, ids, n, 1);
        if (ok && strstr(text, "\xEF\xBF\xBD")) { /* the same ids from invalid bytes */
            size_t bl;
            char *bad = inject_invalid(text, &bl);
            if (bad) {
                int32_t *ib;
                size_t nb;
                invalid++;
                if (tok_encode(t, bad, bl, TOK_PARSE_SPECIAL, &ib, &nb, &err) != KILN_OK ||
                    nb != n || memcmp(ib, ids, n * sizeof *ids)) {
                    fprintf(stderr, "  %s: invalid UTF-8 variant of \"%s\" differs\n", name, text);
                    ok = 0;
                }
                if (ok) free(ib);
                free(bad);
            }
        }
        pass += ok;
        total++;
        free(ids);
        free(ids2);
    }
    fprintf(stderr, "  HF reference %s: %d/%d pass (%d with invalid UTF-8)\n", name, pass, total, invalid);
    json_decref(ref);
    tok_destroy(t);
    return total >= 200 && pass == total;
}

#define REF_CASE(fn, name, direxpr)                                                                \
    static void fn(void)                                                                           \
    {                                                                                              \
        char d_[4096];                                                                             \
        int r_ = run_reference(name, direxpr);                                                     \
        if (r_ < 0) return;                                                                        \
        ASSERT_TRUE(r_ == 1);                                                                      \
    }

REF_CASE(test_reference_llama3, "llama3", cache_path(d_, sizeof d_, "llama3"))
REF_CASE(test_reference_qwen3, "qwen3", cache_path(d_, sizeof d_, "qwen3"))
REF_CASE(test_reference_gemma3, "gemma3", cache_path(d_, sizeof d_, "gemma3"))
REF_CASE(test_reference_llama2_mistral, "llama2", cache_path(d_, sizeof d_, "llama2"))
REF_CASE(test_reference_stories260k, "stories260K", test_shared_path(d_, sizeof d_, "models/stories260K"))
REF_CASE(test_reference_oracle_llama, "oracle_llama_f32", test_shared_path(d_, sizeof d_, "oracle/llama_f32/hf"))
REF_CASE(test_reference_oracle_llama31, "oracle_llama31_rope_bf16", test_shared_path(d_, sizeof d_, "oracle/llama31_rope_bf16/hf"))
REF_CASE(test_reference_oracle_qwen2, "oracle_qwen2_f32", test_shared_path(d_, sizeof d_, "oracle/qwen2_f32/hf"))
REF_CASE(test_reference_oracle_qwen3, "oracle_qwen3_bf16", test_shared_path(d_, sizeof d_, "oracle/qwen3_bf16/hf"))
REF_CASE(test_reference_oracle_mistral, "oracle_mistral_bf16", test_shared_path(d_, sizeof d_, "oracle/mistral_bf16/hf"))
REF_CASE(test_reference_oracle_gemma3, "oracle_gemma3_f32", test_shared_path(d_, sizeof d_, "oracle/gemma3_f32/hf"))

/* Always runs (../shared only): stories260K round-trips and streams, and its
 * special ids come from the config. */
static void test_stories260k_round_trips_and_streams(void)
{
    char d[4096];
    test_shared_path(d, sizeof d, "models/stories260K");
    if (!test_path_exists(d)) TEST_SKIP("%s absent", d);
    kiln_err err;
    tok_tokenizer *t;
    ASSERT_OK(tok_load(d, &t, &err));
    ASSERT_EQ_I64(tok_vocab_size(t), 512);
    ASSERT_EQ_I64(tok_bos_id(t), 1);
    ASSERT_EQ_I64(tok_eos_id(t), 2);
    ASSERT_TRUE(tok_adds_bos(t));
    static const char *texts[] = {"Once upon a time, there was a little girl named Lily.",
                                  " She liked to play\toutside\n\nin the sun!",
                                  "Emoji \xF0\x9F\xA6\x99 and caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87", "  two  spaces  "};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids;
        size_t n;
        ASSERT_OK(tok_encode(t, texts[i], strlen(texts[i]), TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL, &ids, &n, &err));
        ASSERT_TRUE(n > 1 && ids[0] == 1);
        ASSERT_TRUE(check_decode(t, texts[i], strlen(texts[i]), ids + 1, n - 1, 0));
        free(ids);
    }
    tok_destroy(t);
}

int main(void)
{
    const char *c = getenv("KILN_TOK_CACHE");
    snprintf(cache_dir, sizeof cache_dir, "%s", c ? c : KILN_BINARY_DIR "/tok-cache");
    char ready[4096];
    if (!test_path_exists(cache_path(ready, sizeof ready, "READY"))) {
        /* not filled yet (tests/cli/test_tokenizer_golden.sh fills it, then runs
         * this binary): every fetched-tokenizer case skips, ../shared ones run */
        fprintf(stderr, "tok-cache %s not ready: fetched-tokenizer cases skip\n", cache_dir);
        snprintf(cache_dir, sizeof cache_dir, "%s", "/nonexistent/kiln-tok-cache");
    }
    RUN(test_stories260k_round_trips_and_streams);
    RUN(test_llamacpp_llama_bpe_matches_llama3);
    RUN(test_llamacpp_qwen2_matches_qwen3);
    RUN(test_reference_llama3);
    RUN(test_reference_qwen3);
    RUN(test_reference_gemma3);
    RUN(test_reference_llama2_mistral);
    RUN(test_reference_stories260k);
    RUN(test_reference_oracle_llama);
    RUN(test_reference_oracle_llama31);
    RUN(test_reference_oracle_qwen2);
    RUN(test_reference_oracle_qwen3);
    RUN(test_reference_oracle_mistral);
    RUN(test_reference_oracle_gemma3);
    return TEST_DONE();
}
