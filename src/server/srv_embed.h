/*
 * srv_embed.h — POST /v1/embeddings: how the model pools (read once from its
 * sentence-transformers files), and the route itself.
 *
 *   srv_embed_cfg c;  srv_embed_load(model_dir, ENG_POOL_NONE, &c, &err);  // at attach
 *   ... srv_route_embeddings(s, body, len, alive, ctx, &text, &n) per request ...
 *   srv_embed_cfg_free(&c);
 *
 * A snapshot declares its pooling the sentence-transformers way: modules.json
 * lists the modules; the sentence_transformers.models.Pooling one names a folder
 * (usually 1_Pooling/) whose config.json sets one pooling_mode_* flag; a
 * sentence_transformers.models.Normalize module means L2 normalisation.
 * config_sentence_transformers.json may hold named prompts (Qwen3-Embedding's
 * "query": "Instruct: ...\nQuery:") and a default_prompt_name. A snapshot
 * without modules.json is a plain language model: last-token pooling (it is the
 * only position that has seen the whole input), not normalised. Modules kiln
 * does not run (Dense projections, weighted-mean or combined pooling) make the
 * route refuse with a clear 400 instead of answering wrong vectors.
 */
#ifndef KILN_SRV_EMBED_H
#define KILN_SRV_EMBED_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/eng_pool.h"
#include "util/kiln_err.h"

typedef struct {
    eng_pooling pooling;
    bool normalize;
    int64_t hidden;         /* embedding width (config.json hidden_size) */
    json_t *prompts;        /* OWNED object name -> prefix text, or NULL */
    char *default_prompt;   /* OWNED name or NULL */
    const char *source;     /* STATIC: "modules.json", "--pooling", "default (no modules.json)" */
    char unsupported[256];  /* non-empty: why /v1/embeddings refuses this model */
} srv_embed_cfg;

/* API */
/* Reads dir's sentence-transformers files. force (not ENG_POOL_NONE) overrides the
 * pooling mode (--pooling). Errors only for unreadable/malformed files. */
kiln_code srv_embed_load(const char *dir, eng_pooling force, srv_embed_cfg *out, kiln_err *err);
void srv_embed_cfg_free(srv_embed_cfg *c);

#endif
