/*
 * fuzz_lora_dir.c — a LoRA adapter folder into mdl_lora_load (PEFT and mlx-lm
 * adapter_config.json parsing, the tensor file's header, name → (layer,
 * projection) mapping, shape checks against the base, dtype conversion) and
 * mdl_lora_dir_bytes, against a fixed 2-layer llama base written once at start.
 *
 * Input: adapter_config.json, the 8 bytes "\n<KILN>\n", then the tensor file
 * (written as both adapter_model.safetensors and adapters.safetensors: the
 * config's format picks one). Files go to a private folder (/dev/shm when
 * there is one) that is emptied after every input.
 * Checks, beyond no crash, no leak, no UB: a failure says why; a loaded
 * adapter's bytes are what mdl_lora_dir_bytes predicted from the header, and
 * its info is sane (rank 1..MDL_LORA_MAX_RANK, modules > 0).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_files.h"

#include "model/mdl_lora.h"
#include "model/mdl_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static char root_[256], base_[300], ad_[300];
static mdl_model *model_;



static void cleanup(void)
{
    mdl_free(model_);
    fuzz_rm(base_, "config.json");
    fuzz_rm(base_, "model.safetensors");
    rmdir(base_);
    rmdir(ad_);
    rmdir(root_);
}

/* The base: hidden 8, 2 heads of 4 (1 KV head), ffn 16, vocab 32, 2 layers, f32 zeros. */
static int make_base(void)
{
    static const char cfg[] =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": "
        "8, \"intermediate_size\": 16, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
        "\"head_dim\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 32, \"rms_norm_eps\": 1e-5, "
        "\"rope_theta\": 10000.0, \"tie_word_embeddings\": true, \"max_position_embeddings\": 64}";
    static const struct {
        const char *name;
        int r, c;
    } T[] = {{"input_layernorm", 8, 0},         {"self_attn.q_proj", 8, 8},
             {"self_attn.k_proj", 4, 8},        {"self_attn.v_proj", 4, 8},
             {"self_attn.o_proj", 8, 8},        {"post_attention_layernorm", 8, 0},
             {"mlp.gate_proj", 16, 8},          {"mlp.up_proj", 16, 8},
             {"mlp.down_proj", 8, 16}};
    char hdr[4096];
    size_t off = 0, n = 0;
    n += (size_t)snprintf(hdr + n, sizeof hdr - n,
                          "{\"model.embed_tokens.weight\": {\"dtype\": \"F32\", \"shape\": [32, 8], "
                          "\"data_offsets\": [0, %zu]}",
                          (size_t)(32 * 8 * 4));
    off = 32 * 8 * 4;
    for (int L = 0; L < 2; L++)
        for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
            size_t b = (size_t)T[i].r * (size_t)(T[i].c ? T[i].c : 1) * 4;
            if (T[i].c)
                n += (size_t)snprintf(hdr + n, sizeof hdr - n,
                                      ", \"model.layers.%d.%s.weight\": {\"dtype\": \"F32\", "
                                      "\"shape\": [%d, %d], \"data_offsets\": [%zu, %zu]}",
                                      L, T[i].name, T[i].r, T[i].c, off, off + b);
            else
                n += (size_t)snprintf(hdr + n, sizeof hdr - n,
                                      ", \"model.layers.%d.%s.weight\": {\"dtype\": \"F32\", "
                                      "\"shape\": [%d], \"data_offsets\": [%zu, %zu]}",
                                      L, T[i].name, T[i].r, off, off + b);
            off += b;
        }
    n += (size_t)snprintf(hdr + n, sizeof hdr - n,
                          ", \"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [8], "
                          "\"data_offsets\": [%zu, %zu]}}",
                          off, off + 32);
    off += 32;
    while (n % 8) hdr[n++] = ' ';
    size_t total = 8 + n + off;
    uint8_t *file = calloc(1, total);
    if (!file) return -1;
    uint64_t hl = n;
    memcpy(file, &hl, 8); /* little-endian hosts only, like the loader's own tests */
    memcpy(file + 8, hdr, n);
    fuzz_put(base_, "config.json", cfg, sizeof cfg - 1);
    fuzz_put(base_, "model.safetensors", file, total);
    free(file);
    kiln_err err;
    return mdl_load(base_, &model_, &err) == KILN_OK ? 0 : -1;
}

static int init(void)
{
    if (model_) return 0;
    const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(root_, sizeof root_, "%s/kiln-fuzz-lora-%d-XXXXXX", tmp, (int)getpid());
    if (!mkdtemp(root_)) return -1;
    snprintf(base_, sizeof base_, "%s/base", root_);
    snprintf(ad_, sizeof ad_, "%s/ad", root_);
    if (mkdir(base_, 0700) || mkdir(ad_, 0700)) return -1;
    atexit(cleanup);
    if (make_base()) {
        fprintf(stderr, "fuzz_lora_dir: the base model does not load\n");
        abort();
    }
    return 0;
}


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (init()) return 0;
    const uint8_t *sep = fuzz_find_sep(data, size);
    size_t cl = sep ? (size_t)(sep - data) : size;
    fuzz_put(ad_, "adapter_config.json", data, cl);
    if (sep) {
        const uint8_t *t = sep + FUZZ_SEP_LEN;
        size_t tl = size - cl - FUZZ_SEP_LEN;
        fuzz_put(ad_, "adapter_model.safetensors", t, tl);
        fuzz_put(ad_, "adapters.safetensors", t, tl);
    }
    kiln_err err;
    err.code = KILN_OK;
    err.msg[0] = 0;
    uint64_t predicted = 0;
    int have_pred = mdl_lora_dir_bytes(ad_, &predicted, &err) == KILN_OK;
    mdl_lora *a = NULL;
    err.code = KILN_OK;
    err.msg[0] = 0;
    if (mdl_lora_load(model_, ad_, &a, &err) == KILN_OK) {
        mdl_lora_info in = mdl_lora_get_info(a);
        if (in.rank < 1 || in.rank > MDL_LORA_MAX_RANK || in.n_modules < 1) __builtin_trap();
        if (!have_pred || in.bytes != predicted) __builtin_trap(); /* the plan counts what loads */
        mdl_lora_set set = {.n = 1, .a = {a}, .scale = {1.0f}};
        (void)mdl_lora_set_ns(&set, 1);
        mdl_lora_free(a);
    } else if (err.code == KILN_OK || !err.msg[0]) {
        __builtin_trap(); /* a failure must say why */
    } else if (getenv("KILN_FUZZ_VERBOSE")) {
        fprintf(stderr, "refused: %s\n", err.msg);
    }
    fuzz_rm(ad_, "adapter_config.json");
    fuzz_rm(ad_, "adapter_model.safetensors");
    fuzz_rm(ad_, "adapters.safetensors");
    return 0;
}
