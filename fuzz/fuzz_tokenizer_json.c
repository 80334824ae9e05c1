/*
 * fuzz_tokenizer_json.c — arbitrary bytes as tokenizer.json: parse, then encode a
 * fixed multilingual string (with and without special tokens), decode the ids,
 * and stream them. Must stay inside the input and never crash or leak.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok.h"

static const char TEXT[] = "Hello  world! <s>hi</s> <|im_start|>x\n\t3.14 caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 "
                           "\xF0\x9F\x98\x80 \xE2\x96\x81y \xFF end";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tok_tokenizer *t = NULL;
    kiln_err err;
    if (tok_load_json((const char *)data, size, NULL, 0, &t, &err) != KILN_OK) return 0;
    for (unsigned flags = 0; flags < 4; flags++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(t, TEXT, sizeof TEXT - 1, flags, &ids, &n, &err) != KILN_OK) continue;
        char *s = NULL;
        if (tok_decode(t, ids, n, flags & 1 ? TOK_SKIP_SPECIAL : TOK_CLEANUP_SPACES, &s, NULL, &err) == KILN_OK)
            free(s);
        tok_stream *st = NULL;
        if (tok_stream_create(t, flags & 1 ? TOK_SKIP_SPECIAL : 0, &st, &err) == KILN_OK) {
            const char *p;
            size_t l;
            for (size_t i = 0; i < n; i++) (void)tok_stream_push(st, ids[i], &p, &l, &err);
            (void)tok_stream_flush(st, &p, &l, &err);
            tok_stream_destroy(st);
        }
        for (size_t i = 0; i < n; i++) (void)tok_token_to_piece(t, ids[i], NULL);
        free(ids);
    }
    (void)tok_chat_template(t, "default");
    tok_destroy(t);
    return 0;
}
