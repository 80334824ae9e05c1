/*
 * fuzz_gr_util.h — for the grammar fuzz targets: a small byte-level BPE
 * tokenizer made in memory (every byte, plus a few multi-byte tokens that span
 * JSON punctuation), and a bounded walk that checks every mask against
 * accept_token for the tokens it tries.
 */
#ifndef KILN_FUZZ_GR_UTIL_H
#define KILN_FUZZ_GR_UTIL_H

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr.h"
#include "tokenizer/tok.h"

/* GPT-2's byte -> character map, as UTF-8. */
static void fz_byte_char(int b, char out[4])
{
    int n = 0;
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        for (int x = 0; x < 256; x++) {
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) {
                if (x == b) break;
                n++;
            }
        }
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
    }
}

static gr_vocab *fz_vocab(void)
{
    static gr_vocab *v;
    if (v) return v;
    static const char *multi[] = {"{\"",           "\":",     "\",",  "\"}", "ab", "12", "true",
                                  "null",          " {",      "\n  ", "-1",  "0.", "e+", "[]",
                                  "\u00e9t\u00e9", "\xe2\x82"};
    json_t *vocab = json_object();
    int id = 0;
    for (int b = 0; b < 256; b++) {
        char ch[4];
        fz_byte_char(b, ch);
        json_object_set_new(vocab, ch, json_integer(id++));
    }
    for (size_t i = 0; i < sizeof multi / sizeof *multi; i++) {
        char piece[64] = {0};
        for (const unsigned char *p = (const unsigned char *)multi[i]; *p; p++) {
            char ch[4];
            fz_byte_char(*p, ch);
            strcat(piece, ch);
        }
        if (!json_object_get(vocab, piece)) json_object_set_new(vocab, piece, json_integer(id++));
    }
    json_t *tj = json_pack(
        "{s:s, s:[{s:i, s:s, s:b}], s:n, s:{s:s, s:b}, s:n, s:{s:s}, s:{s:s, s:o, s:[]}}",
        "version", "1.0", "added_tokens", "id", id, "content", "<eos>", "special", 1, "normalizer",
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "post_processor", "decoder",
        "type", "ByteLevel", "model", "type", "BPE", "vocab", vocab, "merges");
    char *text = json_dumps(tj, 0);
    json_decref(tj);
    tok_tokenizer *t = NULL;
    kiln_err err;
    if (!text || tok_load_json(text, strlen(text), NULL, 0, &t, &err) ||
        gr_vocab_create(t, &v, &err))
        abort();
    free(text);
    tok_destroy(t); /* the vocabulary keeps its own copy of every token's bytes */
    return v;
}

/* Walks up to 24 tokens chosen by seed bytes, checking masks. */
static void fz_walk(gr_grammar *g, const uint8_t *seed, size_t n)
{
    gr_vocab *v = fz_vocab();
    kiln_err err;
    gr_matcher *m;
    if (gr_matcher_create(g, v, &m, &err)) return;
    uint64_t *bits = calloc(gr_vocab_words(v), 8);
    int32_t nt = gr_vocab_size(v);
    for (int step = 0; step < 24 && bits; step++) {
        if (gr_matcher_mask(m, bits, &err)) break;
        int32_t count = 0;
        for (int32_t t = 0; t < nt; t++)
            count += (int32_t)(bits[t >> 6] >> (t & 63) & 1);
        /* a token outside the mask must be refused */
        int32_t probe = n ? seed[step % n] : 0;
        if (!(bits[probe >> 6] >> (probe & 63) & 1) &&
            gr_matcher_accept_token(m, probe, &err) == KILN_OK)
            abort();
        if (!count) {
            if (!gr_matcher_accepting(m) && gr_matcher_distance(m) > 0) abort(); /* a dead end */
            break;
        }
        int32_t k = (int32_t)((n ? seed[(step * 7 + 3) % n] : 0) % (uint32_t)count);
        int32_t pick = -1;
        for (int32_t t = 0; t < nt && pick < 0; t++)
            if ((bits[t >> 6] >> (t & 63) & 1) && k-- == 0) pick = t;
        if (gr_matcher_accept_token(m, pick, &err) != KILN_OK) abort(); /* the mask allowed it */
    }
    free(bits);
    gr_matcher_destroy(m);
}

static gr_options fz_options(void)
{
    gr_options o = gr_options_default();
    o.max_nfa_states = 20000;
    o.max_dfa_states = 4000;
    o.max_ms = 2000;
    return o;
}

#endif
