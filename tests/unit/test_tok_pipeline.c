/*
 * test_tok_pipeline.c — the tokenizer's parts on small hand-written tokenizer.json
 * files: merges in both forms, byte fallback and fuse_unk, ignore_merges,
 * normalizers, Split behaviours and invert, Digits, Metaspace prepend schemes,
 * Punctuation, Whitespace, added tokens (special switch, lstrip, rstrip,
 * single_word, normalized), post-processors and add_bos/add_eos, decoders, chat
 * templates, refusals, and pathological inputs (1 MB, one character / no space).
 */
#include <pthread.h>

#include "test.h"
#include "tokenizer/tok.h"
#include "util/kiln_err.h"
#include "util/plat.h"

/* ---------------------------------------------------------------- helpers */

/* Byte-level vocab: the 256 byte chars (ids 0..255, in byte order) plus extra tokens. */
static char *bytelevel_json(const char *extra_vocab, const char *merges, const char *pre,
                            const char *extra)
{
    size_t cap = 1 << 16;
    char *s = malloc(cap);
    size_t n = (size_t)snprintf(s, cap, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    int id = 0;
    for (int b = 0; b < 256; b++) {
        /* GPT-2 bytes_to_unicode */
        int cp;
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
            cp = b;
        else {
            int k = 0;
            for (int i = 0; i < b; i++)
                if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) k++;
            cp = 256 + k;
        }
        if (cp == '"' || cp == '\\')
            n += (size_t)snprintf(s + n, cap - n, "%s\"\\%c\":%d", b ? "," : "", cp, id++);
        else
            n += (size_t)snprintf(s + n, cap - n, "%s\"\\u%04x\":%d", b ? "," : "", cp, id++);
    }
    n += (size_t)snprintf(s + n, cap - n, "%s}, \"merges\":[%s], \"ignore_merges\":false},"
                                          "\"pre_tokenizer\":%s,\"decoder\":{\"type\":\"ByteLevel\"}%s}",
                          extra_vocab, merges, pre, extra ? extra : "");
    return s;
}

static tok_tokenizer *load(const char *json, const char *cfg)
{
    tok_tokenizer *t = NULL;
    kiln_err err;
    if (tok_load_json(json, strlen(json), cfg, cfg ? strlen(cfg) : 0, &t, &err) != KILN_OK)
        fprintf(stderr, "  load: %s\n", err.msg);
    return t;
}

/* Encodes and compares against a -1 terminated id list. */
static int enc_is(tok_tokenizer *t, const char *text, unsigned flags, const int32_t *want)
{
    kiln_err err;
    int32_t *ids;
    size_t n, nw = 0;
    if (tok_encode(t, text, strlen(text), flags, &ids, &n, &err) != KILN_OK) return 0;
    while (want[nw] >= 0) nw++;
    int ok = n == nw && (!n || !memcmp(ids, want, n * sizeof *ids));
    if (!ok) {
        fprintf(stderr, "  \"%s\" ->", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    return ok;
}

static char *dec(tok_tokenizer *t, const int32_t *ids, size_t n, unsigned flags)
{
    kiln_err err;
    char *s = NULL;
    if (tok_decode(t, ids, n, flags, &s, NULL, &err) != KILN_OK) fprintf(stderr, "  decode: %s\n", err.msg);
    return s;
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__, -1})

/* SentencePiece-style: ▁ metaspace vocab with byte fallback. */
static const char *SP_JSON =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0xC3>\":3,\"<0xA9>\":4,\"<0xE2>\":5,\"<0x82>\":6,\"<0xAC>\":7,"
    "\"\\u2581\":8,\"h\":9,\"i\":10,\"\\u2581h\":11,\"\\u2581hi\":12,\"a\":13,\"b\":14,\"ab\":15,\"\\u2581a\":16},"
    "\"merges\":[\"\\u2581 h\",[\"\\u2581h\",\"i\"],\"a b\",\"\\u2581 a\"]}}";

/* ---------------------------------------------------------------- model */

static void test_merges_in_both_forms_and_sentencepiece_prepend(void)
{
    tok_tokenizer *t = load(SP_JSON, NULL);
    ASSERT_TRUE(t);
    ASSERT_TRUE(enc_is(t, "hi", 0, IDS(12)));
    ASSERT_TRUE(enc_is(t, "hi hi", TOK_ADD_SPECIAL, IDS(1, 12, 12)));
    /* "▁ab": "a b" (rank 2) beats "▁ a" (rank 3) */
    ASSERT_TRUE(enc_is(t, "ab", 0, IDS(8, 15)));
    /* each segment after an added token gets its own ▁ (HF legacy behaviour) */
    ASSERT_TRUE(enc_is(t, "hi</s>hi", TOK_PARSE_SPECIAL, IDS(12, 2, 12)));
    ASSERT_TRUE(enc_is(t, "hi</s>hi", 0, IDS(12, 0, 9, 10))); /* "</s>" as text: one fused unk */
    tok_destroy(t);
}

static void test_byte_fallback_and_fused_unk(void)
{
    tok_tokenizer *t = load(SP_JSON, NULL);
    ASSERT_TRUE(t);
    /* é = C3 A9 (bytes known), € = E2 82 AC (bytes known), x, y unknown -> one fused unk */
    ASSERT_TRUE(enc_is(t, "h\xC3\xA9\xE2\x82\xACxy", 0, IDS(11, 3, 4, 5, 6, 7, 0)));
    int32_t ids[] = {11, 3, 4, 5, 6, 7};
    char *s = dec(t, ids, 6, 0);
    ASSERT_STR_EQ(s, "h\xC3\xA9\xE2\x82\xAC");
    free(s);
    /* byte tokens that do not form UTF-8 decode to U+FFFD */
    int32_t bad[] = {12, 5, 12};
    s = dec(t, bad, 3, 0);
    ASSERT_STR_EQ(s, "hi\xEF\xBF\xBD hi");
    free(s);
    tok_destroy(t);
}

static void test_decode_strips_leading_space_and_skips_special(void)
{
    tok_tokenizer *t = load(SP_JSON, NULL);
    ASSERT_TRUE(t);
    int32_t ids[] = {1, 12, 12, 2};
    char *s = dec(t, ids, 4, 0);
    ASSERT_STR_EQ(s, "<s> hi hi</s>");
    free(s);
    s = dec(t, ids, 4, TOK_SKIP_SPECIAL);
    ASSERT_STR_EQ(s, "hi hi");
    free(s);
    kiln_err err;
    char *x;
    int32_t badid = 99;
    ASSERT_CODE(tok_decode(t, &badid, 1, 0, &x, NULL, &err), KILN_E_INVALID);
    tok_destroy(t);
}

static void test_ignore_merges_takes_whole_word(void)
{
    /* vocab has "abc" but no merge path to it */
    char *j = bytelevel_json(",\"ab\":256,\"abc\":257", "\"a b\"",
                             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}", NULL);
    char *p = strstr(j, "\"ignore_merges\":false");
    memcpy(p, "\"ignore_merges\":true ", 21);
    tok_tokenizer *t = load(j, NULL);
    ASSERT_TRUE(t);
    ASSERT_TRUE(enc_is(t, "abc", 0, IDS(257)));
    ASSERT_TRUE(enc_is(t, "abcab", 0, IDS(256, 'c', 256)));
    tok_destroy(t);
    free(j);
}

static void test_bytelevel_regex_splits_and_maps_bytes(void)
{
    char *j = bytelevel_json(",\"\\u0120w\":256", "\"\\u0120 w\"",
                             "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}", NULL);
    tok_tokenizer *t = load(j, NULL);
    ASSERT_TRUE(t);
    /* add_prefix_space: " w" -> Ġw; "'s" split by GPT-2's regex; newline is byte 10 -> id 'Ċ' */
    ASSERT_TRUE(enc_is(t, "w's", 0, IDS(256, '\'', 's')));
    int32_t ids[] = {256, '\'', 's'};
    char *s = dec(t, ids, 3, 0);
    ASSERT_STR_EQ(s, " w's");
    free(s);
    tok_destroy(t);
    free(j);
}

/* ---------------------------------------------------------------- pre-tokenizers */

/* Pre-tokenizes with a byte-level model with no merges, so ids are the bytes: the
 * pieces show as where the id stream restarts. We test boundaries via merges. */
static void test_split_behaviours(void)
{
    /* merge "-a" lets us see whether "-" and "a" share a piece */
    static const struct {
        const char *behavior;
        int32_t want[8];
    } cases[] = {
        {"Removed", {'a', 'a', -1}},
        {"Isolated", {'a', '-', 'a', -1}},
        {"MergedWithPrevious", {256, 'a', -1}},
        {"MergedWithNext", {'a', 257, -1}},
        {"Contiguous", {'a', 258, 'a', -1}},
    };
    for (size_t i = 0; i < 5; i++) {
        char pre[512];
        snprintf(pre, sizeof pre,
                 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},"
                 "\"behavior\":\"%s\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                 "\"use_regex\":false}]}",
                 cases[i].behavior);
        char *j = bytelevel_json(",\"a-\":256,\"-a\":257,\"--\":258", "\"a -\",\"- a\",\"- -\"", pre, NULL);
        tok_tokenizer *t = load(j, NULL);
        ASSERT_TRUE(t);
        const char *text = i == 4 ? "a--a" : "a-a";
        if (!enc_is(t, text, 0, cases[i].want)) {
            fprintf(stderr, "  behavior %s\n", cases[i].behavior);
            test_case_failed_ = 1;
        }
        tok_destroy(t);
        free(j);
    }
}

static void test_split_invert_regex_digits_and_punctuation(void)
{
    /* invert: the regex matches are the pieces, the rest are delimiters (Isolated keeps them) */
    char *j = bytelevel_json(",\"ab\":256,\"b1\":257,\"12\":258", "\"a b\",\"b 1\",\"1 2\"",
                             "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
                             "{\"type\":\"Punctuation\"},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
                             NULL);
    tok_tokenizer *t = load(j, NULL);
    ASSERT_TRUE(t);
    ASSERT_TRUE(enc_is(t, "ab12", 0, IDS(256, '1', '2')));
    ASSERT_TRUE(enc_is(t, "ab!!", 0, IDS(256, '!', '!')));
    tok_destroy(t);
    free(j);
    j = bytelevel_json(",\"ab\":256,\"b1\":257,\"12\":258", "\"a b\",\"b 1\",\"1 2\"",
                       "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{L}+\"},"
                       "\"behavior\":\"Removed\",\"invert\":true},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
                       NULL);
    t = load(j, NULL);
    ASSERT_TRUE(t);
    /* invert + Removed: keep only the letter runs */
    ASSERT_TRUE(enc_is(t, "ab12ab", 0, IDS(256, 256)));
    tok_destroy(t);
    free(j);
    j = bytelevel_json(",\"12\":256", "\"1 2\"",
                       "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":false},"
                       "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
                       NULL);
    t = load(j, NULL);
    ASSERT_TRUE(t);
    ASSERT_TRUE(enc_is(t, "x12", 0, IDS('x', 256)));
    tok_destroy(t);
    free(j);
}

static void test_whitespace_pretokenizer_drops_spaces(void)
{
    char *j = bytelevel_json(",\"ab\":256", "\"a b\"",
                             "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Whitespace\"},"
                             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
                             NULL);
    tok_tokenizer *t = load(j, NULL);
    ASSERT_TRUE(t);
    ASSERT_TRUE(enc_is(t, "  ab \t ab!", 0, IDS(256, 256, '!')));
    tok_destroy(t);
    free(j);
}

static const char *META_FMT =
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u2581\":0,\"a\":1,\"b\":2,\"\\u2581a\":3,\"\\u2581b\":4,\"<x>\":5},"
    "\"merges\":[\"\\u2581 a\",\"\\u2581 b\"]},\"added_tokens\":[{\"id\":5,\"content\":\"<x>\",\"special\":true}],"
    "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"%s\",\"split\":true},"
    "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"%s\"}}";

static void test_metaspace_prepend_schemes(void)
{
    static const char *schemes[] = {"always", "first", "never"};
    static const int32_t want[3][8] = {{3, 4, 5, 3, -1}, {3, 4, 5, 1, -1}, {1, 4, 5, 1, -1}};
    for (int i = 0; i < 3; i++) {
        char j[2048];
        snprintf(j, sizeof j, META_FMT, schemes[i], schemes[i]);
        tok_tokenizer *t = load(j, NULL);
        ASSERT_TRUE(t);
        if (!enc_is(t, "a b<x>a", TOK_PARSE_SPECIAL, want[i])) {
            fprintf(stderr, "  scheme %s\n", schemes[i]);
            test_case_failed_ = 1;
        }
        int32_t ids[] = {3, 4};
        char *s = dec(t, ids, 2, 0);
        ASSERT_STR_EQ(s, i == 2 ? " a b" : "a b");
        free(s);
        tok_destroy(t);
    }
}

/* ---------------------------------------------------------------- normalizers */

static void test_normalizers_nfkc_lowercase_strip_replace(void)
{
    const char *j =
        "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"f\":0,\"i\":1,\"x\":2,\"\\u00e9\":3,\"e\":4,\"\\u0301\":5,\"y\":6},\"merges\":[]},"
        "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Lowercase\"},"
        "{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true},"
        "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"x+\"},\"content\":\"y\"}]}}";
    tok_tokenizer *t = load(j, NULL);
    ASSERT_TRUE(t);
    /* ﬁ -> fi (NFKC), É -> é (lower, composed), XXX -> y */
    ASSERT_TRUE(enc_is(t, "  \xEF\xAC\x81\xC3\x89XXX \t", 0, IDS(0, 1, 3, 6)));
    tok_destroy(t);
    const char *k = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"e\":0,\"\\u0301\":1,\"\\u00e9\":2},\"merges\":[]},"
                    "\"normalizer\":{\"type\":\"NFD\"}}";
    t = load(k, NULL);
    ASSERT_TRUE(t);
    ASSERT_TRUE(enc_is(t, "\xC3\xA9", 0, IDS(0, 1)));
    tok_destroy(t);
}

/* ---------------------------------------------------------------- added tokens */

static void test_added_tokens_strip_single_word_and_special_switch(void)
{
    char *j = bytelevel_json(",\"<m>\":256,\"<w>\":257,\"<n>\":258", "",
                             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}",
                             ",\"added_tokens\":[{\"id\":256,\"content\":\"<m>\",\"special\":true,\"lstrip\":true,\"rstrip\":true},"
                             "{\"id\":257,\"content\":\"<w>\",\"special\":false,\"single_word\":true,\"normalized\":false},"
                             "{\"id\":258,\"content\":\"<n>\",\"special\":false,\"normalized\":false}]");
    tok_tokenizer *t = load(j, NULL);
    ASSERT_TRUE(t);
    ASSERT_TRUE(enc_is(t, "a  <m>  b", TOK_PARSE_SPECIAL, IDS('a', 256, 'b')));
    /* parse_special off: the special token is text; non-special ones still match */
    ASSERT_TRUE(enc_is(t, "<m><n>", 0, IDS('<', 'm', '>', 258)));
    /* single_word: inside a word it is text */
    ASSERT_TRUE(enc_is(t, "x<w> <w>", 0, IDS('x', '<', 'w', '>', 220 - 188, 257)));
    ASSERT_TRUE(tok_is_special(t, 256));
    ASSERT_TRUE(!tok_is_special(t, 258));
    tok_destroy(t);
    free(j);
}

static void test_config_bos_eos_templates_and_special_texts(void)
{
    const char *cfg =
        "{\"add_bos_token\":true,\"add_eos_token\":true,\"bos_token\":{\"content\":\"<s>\",\"__type\":\"AddedToken\"},"
        "\"eos_token\":\"</s>\",\"unk_token\":\"<unk>\",\"model_max_length\":1000000000000000019884624838656,"
        "\"chat_template\":[{\"name\":\"default\",\"template\":\"D\"},{\"name\":\"tool_use\",\"template\":\"T\"}]}";
    tok_tokenizer *t = load(SP_JSON, cfg);
    ASSERT_TRUE(t);
    ASSERT_EQ_I64(tok_bos_id(t), 1);
    ASSERT_EQ_I64(tok_eos_id(t), 2);
    ASSERT_TRUE(tok_adds_bos(t));
    ASSERT_TRUE(enc_is(t, "hi", TOK_ADD_SPECIAL, IDS(1, 12, 2)));
    ASSERT_STR_EQ(tok_chat_template(t, "default"), "D");
    ASSERT_STR_EQ(tok_chat_template(t, "tool_use"), "T");
    ASSERT_TRUE(tok_chat_template(t, "nope") == NULL);
    ASSERT_STR_EQ(tok_special_text(t, TOK_SP_BOS), "<s>");
    ASSERT_STR_EQ(tok_special_text(t, TOK_SP_UNK), "<unk>");
    ASSERT_TRUE(tok_special_text(t, TOK_SP_PAD) == NULL);
    size_t l;
    ASSERT_STR_EQ(tok_token_to_piece(t, 12, &l), "\xE2\x96\x81hi");
    ASSERT_EQ_I64(tok_piece_to_id(t, "\xE2\x96\x81hi", l), 12);
    ASSERT_EQ_I64(tok_piece_to_id(t, "zz", 2), -1);
    ASSERT_EQ_I64(tok_vocab_size(t), 17);
    tok_destroy(t);
    t = load(SP_JSON, "{\"chat_template\":\"S\",\"add_bos_token\":false}");
    ASSERT_TRUE(t);
    ASSERT_STR_EQ(tok_chat_template(t, "default"), "S");
    ASSERT_TRUE(!tok_adds_bos(t));
    ASSERT_TRUE(enc_is(t, "hi", TOK_ADD_SPECIAL, IDS(12)));
    tok_destroy(t);
}

static void test_template_files_in_folder_win(void)
{
    char dir[] = "/tmp/kiln_tok_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    char p[256];
    FILE *f;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    f = fopen(p, "w");
    fputs(SP_JSON, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    f = fopen(p, "w");
    fputs("{\"chat_template\":\"cfg\"}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/chat_template.json", dir);
    f = fopen(p, "w");
    fputs("{\"chat_template\":[{\"name\":\"default\",\"template\":\"json\"},{\"name\":\"rag\",\"template\":\"R\"}]}", f);
    fclose(f);
    snprintf(p, sizeof p, "%s/chat_template.jinja", dir);
    f = fopen(p, "w");
    fputs("{{ jinja }}", f);
    fclose(f);
    kiln_err err;
    tok_tokenizer *t;
    ASSERT_OK(tok_load(dir, &t, &err));
    ASSERT_STR_EQ(tok_chat_template(t, "default"), "{{ jinja }}");
    ASSERT_STR_EQ(tok_chat_template(t, "rag"), "R");
    tok_destroy(t);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ASSERT_EQ_I64(system(cmd), 0);
    ASSERT_CODE(tok_load("/nonexistent/kiln", &t, &err), KILN_E_NOT_FOUND);
}

/* ---------------------------------------------------------------- refusals */

static void test_wordpiece_unigram_and_junk_are_refused(void)
{
    kiln_err err;
    tok_tokenizer *t;
    const char *wp = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}";
    ASSERT_CODE(tok_load_json(wp, strlen(wp), NULL, 0, &t, &err), KILN_E_UNSUPPORTED);
    ASSERT_TRUE(strstr(err.msg, "WordPiece") != NULL);
    ASSERT_TRUE(t == NULL);
    const char *ug = "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}}";
    ASSERT_CODE(tok_load_json(ug, strlen(ug), NULL, 0, &t, &err), KILN_E_UNSUPPORTED);
    const char *bad = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}";
    ASSERT_CODE(tok_load_json(bad, strlen(bad), NULL, 0, &t, &err), KILN_E_CORRUPT);
    ASSERT_CODE(tok_load_json("{", 1, NULL, 0, &t, &err), KILN_E_CORRUPT);
    const char *norm = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"Precompiled\"}}";
    ASSERT_CODE(tok_load_json(norm, strlen(norm), NULL, 0, &t, &err), KILN_E_UNSUPPORTED);
    const char *re = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
                     "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}}";
    ASSERT_CODE(tok_load_json(re, strlen(re), NULL, 0, &t, &err), KILN_E_UNSUPPORTED);
}

/* ---------------------------------------------------------------- pathological */

static void test_one_megabyte_without_spaces_stays_fast(void)
{
    /* merges "a a" -> aa, "aa aa" -> aaaa: a 1 MB run of one character is one
     * word; heap merging keeps it O(n log n) */
    char *j = bytelevel_json(",\"aa\":256,\"aaaa\":257,\"ab\":258", "\"a a\",\"aa aa\",\"a b\"",
                             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}", NULL);
    tok_tokenizer *t = load(j, NULL);
    ASSERT_TRUE(t);
    size_t n = 1 << 20;
    char *s = malloc(n + 1);
    memset(s, 'a', n);
    s[n] = 0;
    kiln_err err;
    int32_t *ids;
    size_t k;
    double t0 = plat_now();
    ASSERT_OK(tok_encode(t, s, n, 0, &ids, &k, &err));
    double dt = plat_now() - t0;
    ASSERT_EQ_I64(k, n / 4);
    ASSERT_EQ_I64(ids[0], 257);
    free(ids);
    for (size_t i = 0; i < n; i++) s[i] = "ab"[i % 2];
    t0 = plat_now();
    ASSERT_OK(tok_encode(t, s, n, 0, &ids, &k, &err));
    dt += plat_now() - t0;
    ASSERT_EQ_I64(k, n / 2);
    free(ids);
    fprintf(stderr, "  2 MB pathological input in %.2fs\n", dt);
    ASSERT_TRUE(dt < 30); /* quadratic would take hours */
    free(s);
    tok_destroy(t);
    free(j);
}

/* A brute-force BPE (leftmost lowest-rank pair, merged until none) as the
 * reference for the scan (<= 64 symbols) and heap (longer) merge paths. */
static const char *PAIRS[][2] = {{"a", "a"}, {"a", "b"}, {"b", "a"}, {"aa", "b"}, {"ab", "a"},
                                 {"b", "b"}, {"aa", "aa"}, {"ba", "b"}, {"c", "a"}, {"ab", "ab"},
                                 {"bb", "c"}, {"aab", "c"}};

static size_t ref_bpe(const char *w, char out[][16])
{
    size_t n = strlen(w);
    for (size_t i = 0; i < n; i++) {
        out[i][0] = w[i];
        out[i][1] = 0;
    }
    for (;;) {
        size_t best_rank = 99, at = 0;
        for (size_t i = 0; i + 1 < n; i++)
            for (size_t r = 0; r < sizeof PAIRS / sizeof PAIRS[0] && r < best_rank; r++)
                if (!strcmp(out[i], PAIRS[r][0]) && !strcmp(out[i + 1], PAIRS[r][1])) {
                    best_rank = r;
                    at = i;
                }
        if (best_rank == 99) return n;
        size_t la = strlen(out[at]), lb = strlen(out[at + 1]);
        memcpy(out[at] + la, out[at + 1], lb + 1);
        memmove(out + at + 1, out + at + 2, (n - at - 2) * sizeof out[0]);
        n--;
    }
}

static void test_scan_and_heap_merges_match_brute_force(void)
{
    char extra[1024] = "", merges[1024] = "";
    size_t ne = 0, nm = 0;
    for (size_t r = 0; r < sizeof PAIRS / sizeof PAIRS[0]; r++) {
        ne += (size_t)snprintf(extra + ne, sizeof extra - ne, ",\"%s%s\":%zu", PAIRS[r][0], PAIRS[r][1], 256 + r);
        nm += (size_t)snprintf(merges + nm, sizeof merges - nm, "%s\"%s %s\"", r ? "," : "", PAIRS[r][0], PAIRS[r][1]);
    }
    char *j = bytelevel_json(extra, merges, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}", NULL);
    tok_tokenizer *t = load(j, NULL);
    free(j);
    ASSERT_TRUE(t);
    uint32_t seed = 7;
    static char want[400][16];
    char w[401];
    for (int iter = 0; iter < 300; iter++) {
        size_t n = 1 + (size_t)(iter * 7 % 400);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            w[i] = "aabbc"[(seed >> 16) % 5];
        }
        w[n] = 0;
        size_t k = ref_bpe(w, want);
        kiln_err err;
        int32_t *ids;
        size_t got;
        ASSERT_OK(tok_encode(t, w, n, 0, &ids, &got, &err));
        int ok = got == k;
        for (size_t i = 0; ok && i < k; i++) ok = ids[i] == tok_piece_to_id(t, want[i], strlen(want[i]));
        free(ids);
        if (!ok) {
            tok_destroy(t);
            TEST_FAIL_("merge result differs from brute force on \"%s\"", w);
        }
    }
    tok_destroy(t);
}

/* ---------------------------------------------------------------- threads */

typedef struct {
    tok_tokenizer *t;
    int ok;
} thread_arg;

static void *encode_many(void *p)
{
    thread_arg *a = p;
    kiln_err err;
    a->ok = 1;
    for (int i = 0; i < 2000 && a->ok; i++) {
        int32_t *ids;
        size_t n;
        const char *text = (i & 1) ? "hi hi</s>h\xC3\xA9" : "hi";
        if (tok_encode(a->t, text, strlen(text), TOK_PARSE_SPECIAL, &ids, &n, &err) != KILN_OK) a->ok = 0;
        else if (n != ((i & 1) ? 6u : 1u) || ids[0] != 12) a->ok = 0;
        if (a->ok) free(ids);
    }
    return NULL;
}

static void test_one_tokenizer_serves_many_threads(void)
{
    tok_tokenizer *t = load(SP_JSON, NULL);
    ASSERT_TRUE(t);
    pthread_t th[4];
    thread_arg a[4];
    for (int i = 0; i < 4; i++) {
        a[i].t = t;
        pthread_create(&th[i], NULL, encode_many, &a[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) ASSERT_TRUE(a[i].ok);
    tok_destroy(t);
}

int main(void)
{
    RUN(test_merges_in_both_forms_and_sentencepiece_prepend);
    RUN(test_byte_fallback_and_fused_unk);
    RUN(test_decode_strips_leading_space_and_skips_special);
    RUN(test_ignore_merges_takes_whole_word);
    RUN(test_bytelevel_regex_splits_and_maps_bytes);
    RUN(test_split_behaviours);
    RUN(test_split_invert_regex_digits_and_punctuation);
    RUN(test_whitespace_pretokenizer_drops_spaces);
    RUN(test_metaspace_prepend_schemes);
    RUN(test_normalizers_nfkc_lowercase_strip_replace);
    RUN(test_added_tokens_strip_single_word_and_special_switch);
    RUN(test_config_bos_eos_templates_and_special_texts);
    RUN(test_template_files_in_folder_win);
    RUN(test_wordpiece_unigram_and_junk_are_refused);
    RUN(test_one_megabyte_without_spaces_stays_fast);
    RUN(test_one_tokenizer_serves_many_threads);
    RUN(test_scan_and_heap_merges_match_brute_force);
    return TEST_DONE();
}
