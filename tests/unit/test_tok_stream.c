/*
 * test_tok_stream.c — the streaming detokenizer: characters split across
 * byte-fallback and byte-level tokens are held until complete, ill-formed bytes
 * become U+FFFD, the SentencePiece leading space goes only at the start, special
 * tokens can be skipped, flush and reset; and UTF-8 helpers at the edges.
 */
#include "test.h"
#include "tokenizer/tok.h"
#include "util/kiln_err.h"

static const char *SP_JSON =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0xF0>\":3,\"<0x9F>\":4,\"<0xA6>\":5,\"<0x99>\":6,"
    "\"\\u2581\":7,\"h\":8,\"i\":9,\"\\u2581h\":10,\"\\u2581hi\":11,\"<0x20>\":12},"
    "\"merges\":[\"\\u2581 h\",\"\\u2581h i\"]}}";

/* Byte-level: id = byte value for the 256 byte chars. */
static char *bytelevel_json(void)
{
    size_t cap = 1 << 15, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    for (int b = 0; b < 256; b++) {
        int id = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        int cp = b;
        if (!id) {
            int k = 0;
            for (int i = 0; i < b; i++)
                if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) k++;
            cp = 256 + k;
        }
        n += (size_t)snprintf(s + n, cap - n, "%s\"\\u%04x\":%d", b ? "," : "", cp, b);
    }
    n += (size_t)snprintf(s + n, cap - n,
                          ",\"<|eot|>\":256},\"merges\":[]},\"added_tokens\":[{\"id\":256,\"content\":\"<|eot|>\","
                          "\"special\":true}],\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
                          "\"decoder\":{\"type\":\"ByteLevel\"}}");
    return s;
}

/* Pushes ids; writes each push's text joined by '|' into out. */
static void stream_pieces(tok_tokenizer *t, unsigned flags, const int32_t *ids, size_t n, char *out,
                          size_t cap)
{
    kiln_err err;
    tok_stream *s;
    out[0] = 0;
    if (tok_stream_create(t, flags, &s, &err) != KILN_OK) return;
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t l;
        if (i < n)
            tok_stream_push(s, ids[i], &p, &l, &err);
        else
            tok_stream_flush(s, &p, &l, &err);
        strncat(out, p, cap - strlen(out) - 1);
        if (i < n) strncat(out, "|", cap - strlen(out) - 1);
    }
    tok_stream_destroy(s);
}

static tok_tokenizer *load(const char *j)
{
    tok_tokenizer *t = NULL;
    kiln_err err;
    if (tok_load_json(j, strlen(j), NULL, 0, &t, &err) != KILN_OK) fprintf(stderr, "  %s\n", err.msg);
    return t;
}

static void test_byte_fallback_character_waits_until_complete(void)
{
    tok_tokenizer *t = load(SP_JSON);
    ASSERT_TRUE(t);
    char out[256];
    /* ▁hi then 🦙 (F0 9F A6 99) as four byte tokens, then ▁hi */
    int32_t ids[] = {11, 3, 4, 5, 6, 11};
    stream_pieces(t, 0, ids, 6, out, sizeof out);
    ASSERT_STR_EQ(out, "hi||||\xF0\x9F\xA6\x99| hi|");
    tok_destroy(t);
}

static void test_leading_space_only_at_start_and_skip_special(void)
{
    tok_tokenizer *t = load(SP_JSON);
    ASSERT_TRUE(t);
    char out[256];
    int32_t ids[] = {1, 11, 11, 2};
    stream_pieces(t, 0, ids, 4, out, sizeof out);
    ASSERT_STR_EQ(out, "<s>| hi| hi|</s>|");
    stream_pieces(t, TOK_SKIP_SPECIAL, ids, 4, out, sizeof out);
    ASSERT_STR_EQ(out, "|hi| hi||"); /* as decode(skip_special): "hi hi" */
    /* a leading byte-fallback space is the text's first character: stripped too */
    int32_t sp[] = {12, 11};
    stream_pieces(t, 0, sp, 2, out, sizeof out);
    ASSERT_STR_EQ(out, "| hi|");
    tok_destroy(t);
}

static void test_ill_formed_bytes_become_replacement_and_flush_ends_tail(void)
{
    tok_tokenizer *t = load(SP_JSON);
    ASSERT_TRUE(t);
    char out[256];
    int32_t bad[] = {3, 11};   /* F0 then " hi": the F0 can never complete */
    stream_pieces(t, 0, bad, 2, out, sizeof out);
    ASSERT_STR_EQ(out, "|\xEF\xBF\xBD hi|");
    int32_t tail[] = {11, 3, 4}; /* ends inside a character: flush gives U+FFFD */
    stream_pieces(t, 0, tail, 3, out, sizeof out);
    ASSERT_STR_EQ(out, "hi|||\xEF\xBF\xBD");
    kiln_err err;
    tok_stream *s;
    ASSERT_CODE(tok_stream_create(t, TOK_CLEANUP_SPACES, &s, &err), KILN_E_INVALID);
    ASSERT_OK(tok_stream_create(t, 0, &s, &err));
    const char *p;
    size_t l;
    ASSERT_CODE(tok_stream_push(s, 999, &p, &l, &err), KILN_E_INVALID);
    ASSERT_OK(tok_stream_push(s, 11, &p, &l, &err));
    ASSERT_STR_EQ(p, "hi");
    tok_stream_reset(s);
    ASSERT_OK(tok_stream_push(s, 11, &p, &l, &err)); /* a new text: leading space rule again */
    ASSERT_STR_EQ(p, "hi");
    tok_stream_destroy(s);
    tok_destroy(t);
}

static void test_bytelevel_emoji_split_across_tokens(void)
{
    char *j = bytelevel_json();
    tok_tokenizer *t = load(j);
    ASSERT_TRUE(t);
    char out[256];
    /* "é🦙" = C3 A9 F0 9F A6 99, one byte per token, then a special token */
    int32_t ids[] = {0xC3, 0xA9, 0xF0, 0x9F, 0xA6, 0x99, 256, 'x'};
    stream_pieces(t, 0, ids, 8, out, sizeof out);
    ASSERT_STR_EQ(out, "|\xC3\xA9||||\xF0\x9F\xA6\x99|<|eot|>|x|");
    stream_pieces(t, TOK_SKIP_SPECIAL, ids, 8, out, sizeof out);
    ASSERT_STR_EQ(out, "|\xC3\xA9||||\xF0\x9F\xA6\x99||x|");
    /* and the encoder splits nothing it should not */
    kiln_err err;
    int32_t *e;
    size_t n;
    ASSERT_OK(tok_encode(t, "\xC3\xA9<|eot|>", 9, TOK_PARSE_SPECIAL, &e, &n, &err));
    ASSERT_EQ_I64(n, 3);
    ASSERT_EQ_I64(e[2], 256);
    free(e);
    /* invalid input bytes are repaired to U+FFFD before anything else */
    ASSERT_OK(tok_encode(t, "a\xFF", 2, 0, &e, &n, &err));
    ASSERT_EQ_I64(n, 4);
    ASSERT_EQ_I64(e[1], 0xEF);
    free(e);
    tok_destroy(t);
    free(j);
}

int main(void)
{
    RUN(test_byte_fallback_character_waits_until_complete);
    RUN(test_leading_space_only_at_start_and_skip_special);
    RUN(test_ill_formed_bytes_become_replacement_and_flush_ends_tail);
    RUN(test_bytelevel_emoji_split_across_tokens);
    return TEST_DONE();
}
