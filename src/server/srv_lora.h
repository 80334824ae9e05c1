/*
 * srv_lora.h — the LoRA adapters a server offers (docs/lora.md): names given at
 * startup (`kiln serve --lora NAME=DIR`, `--lora-dir`), chosen per request by
 * the `model` field ("NAME" or "<base>:NAME") or an `adapters` list
 * [{name, scale}] (stacked in order), listed by /v1/models.
 * Requests name adapters; they never name paths. Threads: the table is fixed
 * after srv_attach and read by any HTTP thread.
 */
#ifndef KILN_SRV_LORA_H
#define KILN_SRV_LORA_H

#include <jansson.h>

#include "model/mdl_lora.h"
#include "server/srv_error.h"

typedef struct {
    const char *name;     /* BORROWED during srv_attach (copied) */
    const mdl_lora *lora; /* BORROWED: must outlive the server */
} srv_adapter;

typedef struct {
    char **names;           /* OWNED [n] */
    const mdl_lora **loras; /* OWNED array [n]; the adapters BORROWED */
    int n;
    int dflt; /* index of --lora-default, -1 = the base model */
} srv_lora_table;

/* API */
/* Copies the table (names must be unique, default < n). */
kiln_code srv_lora_table_init(srv_lora_table *t, const srv_adapter *a, int n, int dflt,
                              kiln_err *err);
void srv_lora_table_free(srv_lora_table *t);
/* The adapter set of a request: the `adapters` list when given (names/scales,
 * n_req >= 0), else from `model` (NULL, the served id, "NAME", "<id>:NAME"; an
 * unknown id that is not an adapter gets the default). A name that is not loaded
 * is a 404 model_not_found. *label (may be NULL) gets the id the reply reports
 * (BORROWED from the table or model; NULL = the served id). */
int srv_lora_resolve(const srv_lora_table *t, const char *model_id, const char *model,
                     char *const *names, const float *scales, int n_req, mdl_lora_set *out,
                     const char **label, srv_error *e);
/* Appends one /v1/models entry per adapter to data. */
void srv_lora_models(const srv_lora_table *t, const char *model_id, json_int_t created, int ctx,
                     json_t *data);

#endif
