/*
 * cli_main.c — `kiln <verb> [flags]`: dispatches to the verbs.
 */
#include "cli/cli.h"
#include "cli/cli_models.h"
#include "util/kiln_log.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} verb;

static const verb verbs[] = {
    {"generate", cli_generate, "generate a continuation of a prompt"},
    {"logits", cli_logits, "write raw float32 logits for a token sequence"},
    {"bench", cli_bench, "measure prefill/decode speed, load time and RSS"},
    {"info", cli_info, "describe a model snapshot"},
    {"fit", cli_fit, "predict memory for a context and batch; max context for a budget"},
    {"quantize", cli_quantize, "write an MLX affine-quantized copy of a snapshot"},
    {"serve", cli_serve, "serve a model over an OpenAI-compatible HTTP API"},
    {"run", cli_run, "chat with a model in the terminal (downloads it when missing)"},
    {"get", cli_get, "download a Hugging Face model snapshot into the local cache"},
    {"ls", cli_ls, "list the models on this machine (cache, folders), their format and fit"},
    {"rm", cli_rm, "delete a model from the Hugging Face cache"},
    {"tokenize", cli_tokenize, "encode text with a model's tokenizer.json"},
    {"detokenize", cli_detokenize, "decode token ids to text"},
    {"template", cli_template, "render a model's chat template for a conversation"},
    {"kvq-report", cli_kvq_report, "KL divergence / greedy agreement of quantized KV vs f32 KV"},
};

static void usage(FILE *f)
{
    fprintf(f, "kiln — a local LLM inference server\n\nusage: kiln <verb> [flags]\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof *verbs; i++)
        fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].help);
    fprintf(f, "\n`kiln <verb> --help` lists a verb's flags.\n"
               "Environment: KILN_ISA=ref|avx2|auto picks the kernel variant; "
               "KILN_LOG=error|warn|info|debug sets the log level.\n");
}

int main(int argc, char **argv)
{
    kiln_log_init_from_env();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof *verbs; i++)
        if (!strcmp(argv[1], verbs[i].name)) return verbs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kiln: unknown verb '%s' (try kiln --help)\n", argv[1]);
    return 2;
}
