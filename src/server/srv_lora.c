/*
 * srv_lora.c — the server's adapter table: per-request resolution of the
 * `model` / `adapters` fields to an mdl_lora_set, and the /v1/models entries
 * (srv_lora.h).
 */
#include "server/srv_lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_code srv_lora_table_init(srv_lora_table *t, const srv_adapter *a, int n, int dflt,
                              kiln_err *err)
{
    memset(t, 0, sizeof *t);
    t->dflt = -1;
    if (n <= 0) return KILN_OK;
    if (dflt >= n) return kiln_fail(err, KILN_E_INVALID, "default adapter out of range");
    t->names = calloc((size_t)n, sizeof *t->names);
    t->loras = calloc((size_t)n, sizeof *t->loras);
    if (!t->names || !t->loras) {
        srv_lora_table_free(t);
        return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            if (strcmp(a[i].name, a[j].name) == 0) {
                srv_lora_table_free(t);
                return kiln_fail(err, KILN_E_INVALID, "adapter name '%s' is given twice",
                                 a[i].name);
            }
        t->names[i] = strdup(a[i].name);
        t->loras[i] = a[i].lora;
        t->n = i + 1;
        if (!t->names[i]) {
            srv_lora_table_free(t);
            return kiln_fail(err, KILN_E_NOMEM, "out of memory");
        }
    }
    t->dflt = dflt;
    return KILN_OK;
}

void srv_lora_table_free(srv_lora_table *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->names[i]);
    free(t->names);
    free(t->loras);
    memset(t, 0, sizeof *t);
    t->dflt = -1;
}

static int find(const srv_lora_table *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0) return i;
    return -1;
}

static int not_found(srv_error *e, const char *param, const char *name)
{
    *e = srv_error_make(KILN_E_NOT_FOUND, param,
                        "The adapter '%s' does not exist (GET /v1/models "
                        "lists the ones this server has)",
                        name);
    return -1;
}

int srv_lora_resolve(const srv_lora_table *t, const char *model_id, const char *model,
                     char *const *names, const float *scales, int n_req, mdl_lora_set *out,
                     const char **label, srv_error *e)
{
    memset(out, 0, sizeof *out);
    if (label) *label = NULL;
    if (n_req > 0) {
        for (int i = 0; i < n_req; i++) {
            int k = find(t, names[i]);
            if (k < 0) return not_found(e, "adapters", names[i]);
            out->a[i] = t->loras[k];
            out->scale[i] = scales[i];
        }
        out->n = n_req;
        return 0;
    }
    if (n_req == 0 && names) return 0; /* "adapters": [] = the base model */
    int k = -1;
    if (model && strcmp(model, model_id) != 0) {
        size_t ml = strlen(model_id);
        const char *colon = strrchr(model, ':');
        if ((k = find(t, model)) < 0 && colon) {
            if ((size_t)(colon - model) == ml && strncmp(model, model_id, ml) == 0) {
                if ((k = find(t, colon + 1)) < 0) return not_found(e, "model", colon + 1);
            } else {
                k = find(t, colon + 1);
            }
        }
        if (k >= 0 && label) *label = model;
    }
    if (k < 0) k = t->dflt;
    if (k >= 0) {
        out->n = 1;
        out->a[0] = t->loras[k];
        out->scale[0] = 1.0f;
    }
    return 0;
}

void srv_lora_models(const srv_lora_table *t, const char *model_id, json_int_t created, int ctx,
                     json_t *data)
{
    for (int i = 0; i < t->n; i++) {
        mdl_lora_info in = mdl_lora_get_info(t->loras[i]);
        json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:i, s:{s:s, s:i, s:f, s:s, s:b}}",
                              "id", t->names[i], "object", "model", "created", created, "owned_by",
                              "kiln", "parent", model_id, "root", model_id, "max_model_len", ctx,
                              "adapter", "format", in.format == MDL_LORA_PEFT ? "peft" : "mlx-lm",
                              "rank", (int)in.rank, "scale", (double)in.scale, "targets",
                              in.targets, "default", i == t->dflt);
        if (m) json_array_append_new(data, m);
    }
}
