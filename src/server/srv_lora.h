/*
 * srv_lora.h — the LoRA adapters a server offers (docs/lora.md): names given at
 * startup (`kiln serve --lora NAME=DIR`, `--lora-dir`) or loaded and unloaded
 * while serving (POST/DELETE /v1/adapters), chosen per request by the `model`
 * field ("NAME" or "<base>:NAME") or an `adapters` list [{name, scale}]
 * (stacked in order), listed by /v1/models and /v1/adapters.
 * Requests name adapters; they never name paths. Threads: every function takes
 * the table's lock; a resolved set holds references (mdl_lora_retain), so an
 * adapter unloaded meanwhile lives until the last request on it ends.
 */
#ifndef KILN_SRV_LORA_H
#define KILN_SRV_LORA_H

#include <jansson.h>
#include <pthread.h>

#include "model/mdl_lora.h"
#include "server/srv_error.h"

typedef struct {
    const char *name;     /* BORROWED during srv_attach (copied) */
    const mdl_lora *lora; /* BORROWED: the table takes its own reference */
} srv_adapter;

typedef struct {
    pthread_mutex_t mu;
    char **names;           /* OWNED [cap] */
    const mdl_lora **loras; /* OWNED array [cap], one reference on each adapter */
    uint8_t *hot;           /* OWNED [cap]: 1 = loaded while serving */
    int n, cap;
    const mdl_lora *dflt;    /* the --lora-default adapter (one of loras), NULL = the base model */
    uint64_t hot_bytes;      /* memory of the adapters loaded while serving */
} srv_lora_table;

/* API */
/* Copies the table (names must be unique, default < n) and retains each adapter. */
kiln_code srv_lora_table_init(srv_lora_table *t, const srv_adapter *a, int n, int dflt,
                              kiln_err *err);
void srv_lora_table_free(srv_lora_table *t); /* drops the table's references */
/* The adapter set of a request: the `adapters` list when given (names/scales,
 * n_req >= 0), else from `model` (NULL, the served id, "NAME", "<id>:NAME"; an
 * unknown id that is not an adapter gets the default). A name that is not loaded
 * is a 404 model_not_found. On success every adapter of *out is retained: the
 * caller ends with mdl_lora_set_release(out). *label (may be NULL) gets the id
 * the reply reports (BORROWED from model; NULL = the served id). */
int srv_lora_resolve(srv_lora_table *t, const char *model_id, const char *model,
                     char *const *names, const float *scales, int n_req, mdl_lora_set *out,
                     const char **label, srv_error *e);
/* Appends one /v1/models entry per adapter to data. */
void srv_lora_models(srv_lora_table *t, const char *model_id, json_int_t created, int ctx,
                     json_t *data);
/* GET /v1/adapters: a new {"object": "list", "data": [...]} (OWNED), NULL on OOM. */
json_t *srv_lora_list(srv_lora_table *t);
/* Adds a (its reference moves to the table) under name, loaded while serving.
 * -1 with *e (409 when the name is taken: a is then freed); 0 on success. */
int srv_lora_add(srv_lora_table *t, const char *name, mdl_lora *a, srv_error *e);
/* Unloads name: requests that hold it finish on it. -1 with *e: 404 unknown,
 * 409 the default adapter. */
int srv_lora_remove(srv_lora_table *t, const char *name, srv_error *e);
/* 1 when name is a loaded adapter. */
int srv_lora_has(srv_lora_table *t, const char *name);

#endif
