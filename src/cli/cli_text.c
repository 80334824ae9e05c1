/*
 * cli_text.c — verbs that need only the tokenizer/template files of a model:
 * tokenize, detokenize, template. No config.json or weights are read.
 */
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "template/tmpl.h"
#include "tokenizer/tok.h"
#include "util/plat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STDIN_MAX ((size_t)64 << 20)

/* Reads all of stdin (at most STDIN_MAX bytes) into a new buffer. */
static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            if (cap >= STDIN_MAX) {
                free(buf);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    *len = n;
    return buf;
}

int cli_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL;
    int no_special = 0, no_parse_special = 0;
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "folder with tokenizer.json (required)", 0},
        {"text", CLI_STR, &text, "T", "text to encode (default: read stdin)", 0},
        {"no-special", CLI_BOOL, &no_special, NULL, "do not add BOS/EOS (HF add_special_tokens=False)", 0},
        {"no-parse-special", CLI_BOOL, &no_parse_special, NULL,
         "treat special-token text in the input as plain text", 0},
        {0},
    };
    int pr = cli_parse("tokenize", "Encode text; prints {\"ids\": [...], \"tokens\": [...]}.",
                       flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model) {
        fprintf(stderr, "kiln tokenize: --model is required\n");
        return 2;
    }
    kiln_err err;
    tok_tokenizer *t;
    if (tok_load(model, &t, &err)) return cli_fail("tokenize", &err);
    char *in = NULL;
    size_t len;
    if (!text) {
        in = read_stdin(&len);
        if (!in) {
            tok_destroy(t);
            fprintf(stderr, "kiln tokenize: cannot read stdin (over 64 MiB?)\n");
            return 1;
        }
        text = in;
    } else {
        len = strlen(text);
    }
    unsigned fl = (no_special ? 0 : TOK_ADD_SPECIAL) | (no_parse_special ? 0 : TOK_PARSE_SPECIAL);
    int32_t *ids = NULL;
    size_t n = 0;
    int ret = 0;
    if (tok_encode(t, text, len, fl, &ids, &n, &err)) {
        ret = cli_fail("tokenize", &err);
    } else {
        json_t *o = json_object(), *ja = json_array(), *jt = json_array();
        for (size_t i = 0; i < n; i++) {
            size_t pl = 0;
            const char *p = tok_token_to_piece(t, ids[i], &pl);
            json_array_append_new(ja, json_integer(ids[i]));
            json_array_append_new(jt, p ? json_stringn(p, pl) : json_null());
        }
        json_object_set_new(o, "ids", ja);
        json_object_set_new(o, "tokens", jt);
        char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (s) printf("%s\n", s);
        free(s);
        json_decref(o);
    }
    free(ids);
    free(in);
    tok_destroy(t);
    return ret;
}

int cli_detokenize(int argc, char **argv)
{
    const char *model = NULL, *ids_s = NULL;
    int skip = 0;
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "folder with tokenizer.json (required)", 0},
        {"ids", CLI_STR, &ids_s, "IDS", "token ids, e.g. 1,2,3 (required)", 0},
        {"skip-special", CLI_BOOL, &skip, NULL, "drop special tokens", 0},
        {0},
    };
    int pr = cli_parse("detokenize", "Decode token ids to text.", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model || !ids_s) {
        fprintf(stderr, "kiln detokenize: --model and --ids are required\n");
        return 2;
    }
    int32_t *ids;
    int32_t n;
    if (cli_parse_ids("detokenize", ids_s, &ids, &n)) return 2;
    kiln_err err;
    tok_tokenizer *t;
    if (tok_load(model, &t, &err)) {
        free(ids);
        return cli_fail("detokenize", &err);
    }
    char *s = NULL;
    size_t len = 0;
    unsigned fl = (skip ? TOK_SKIP_SPECIAL : 0) | (tok_cleanup_default(t) ? TOK_CLEANUP_SPACES : 0);
    int ret = 0;
    if (tok_decode(t, ids, (size_t)n, fl, &s, &len, &err)) ret = cli_fail("detokenize", &err);
    else {
        fwrite(s, 1, len, stdout);
        printf("\n");
    }
    free(s);
    free(ids);
    tok_destroy(t);
    return ret;
}

int cli_template(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *ctx_path = NULL;
    cli_flag flags[] = {
        {"model", CLI_STR, &model, "DIR", "model folder: its chat template and special tokens", 0},
        {"template", CLI_STR, &file, "FILE", "a Jinja template file instead of --model", 0},
        {"context", CLI_STR, &ctx_path, "FILE.json",
         "messages, optional tools, add_generation_prompt and any other variables (required)", 0},
        {0},
    };
    int pr = cli_parse("template", "Render a chat template; errors exit 1 with the message.",
                       flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if ((!model && !file) || !ctx_path) {
        fprintf(stderr, "kiln template: --model or --template, and --context are required\n");
        return 2;
    }
    json_error_t je;
    json_t *ctx = json_load_file(ctx_path, 0, &je);
    if (!ctx || !json_is_object(ctx)) {
        fprintf(stderr, "kiln template: %s:%d: %s\n", ctx_path, je.line,
                ctx ? "the context must be a JSON object" : je.text);
        json_decref(ctx);
        return 1;
    }
    kiln_err err;
    tmpl_chat_files cf = {0};
    char *src = NULL, *out = NULL;
    size_t out_len = 0;
    int ret = 0;
    if (file && plat_read_file(file, (size_t)4 << 20, &src, NULL, &err)) {
        json_decref(ctx);
        return cli_fail("template", &err);
    }
    if (model) {
        json_t *tools = json_object_get(ctx, "tools");
        int has_tools = json_is_array(tools) && json_array_size(tools) > 0;
        if (tmpl_chat_load(model, has_tools, &cf, &err)) {
            ret = cli_fail("template", &err);
            goto done;
        }
    }
    if (tmpl_render_json(src ? src : cf.template_text, ctx, cf.special_tokens, &out, &out_len, &err))
        ret = cli_fail("template", &err);
    else fwrite(out, 1, out_len, stdout);
done:
    free(out);
    free(src);
    tmpl_chat_files_free(&cf);
    json_decref(ctx);
    return ret;
}
