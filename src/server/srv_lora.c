/*
 * srv_lora.c — the server's adapter table: per-request resolution of the
 * `model` / `adapters` fields to an mdl_lora_set (with references), adapters
 * loaded and unloaded while serving, and the /v1/models and /v1/adapters
 * entries (srv_lora.h).
 */
#include "server/srv_lora.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(srv_lora_table *t)
{
    if (t->n < t->cap) return 0;
    int nc = t->cap ? 2 * t->cap : 8;
    char **nn = realloc(t->names, sizeof *nn * (size_t)nc);
    if (nn) t->names = nn;
    const mdl_lora **nl = realloc(t->loras, sizeof *nl * (size_t)nc);
    if (nl) t->loras = nl;
    uint8_t *nh = realloc(t->hot, (size_t)nc);
    if (nh) t->hot = nh;
    if (!nn || !nl || !nh) return -1;
    t->cap = nc;
    return 0;
}

kiln_code srv_lora_table_init(srv_lora_table *t, const srv_adapter *a, int n, int dflt,
                              kiln_err *err)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    if (n <= 0) return KILN_OK;
    if (dflt >= n) return kiln_fail(err, KILN_E_INVALID, "default adapter out of range");
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            if (strcmp(a[i].name, a[j].name) == 0) {
                srv_lora_table_free(t);
                return kiln_fail(err, KILN_E_INVALID, "adapter name '%s' is given twice",
                                 a[i].name);
            }
        char *nm = grow(t) ? NULL : strdup(a[i].name);
        if (!nm) {
            srv_lora_table_free(t);
            return kiln_fail(err, KILN_E_NOMEM, "out of memory");
        }
        mdl_lora_retain(a[i].lora);
        t->names[t->n] = nm;
        t->loras[t->n] = a[i].lora;
        t->hot[t->n++] = 0;
    }
    t->dflt = dflt >= 0 ? a[dflt].lora : NULL;
    return KILN_OK;
}

void srv_lora_table_free(srv_lora_table *t)
{
    for (int i = 0; i < t->n; i++) {
        free(t->names[i]);
        mdl_lora_free((mdl_lora *)t->loras[i]);
    }
    free(t->names);
    free(t->loras);
    free(t->hot);
    pthread_mutex_destroy(&t->mu);
    memset(t, 0, sizeof *t);
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

/* srv_lora_resolve under the lock, without references. */
static int resolve_locked(const srv_lora_table *t, const char *model_id, const char *model,
                          char *const *names, const float *scales, int n_req, mdl_lora_set *out,
                          const char **label, srv_error *e)
{
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
    const mdl_lora *a = k >= 0 ? t->loras[k] : t->dflt;
    if (a) {
        out->n = 1;
        out->a[0] = a;
        out->scale[0] = 1.0f;
    }
    return 0;
}

int srv_lora_resolve(srv_lora_table *t, const char *model_id, const char *model,
                     char *const *names, const float *scales, int n_req, mdl_lora_set *out,
                     const char **label, srv_error *e)
{
    memset(out, 0, sizeof *out);
    if (label) *label = NULL;
    pthread_mutex_lock(&t->mu);
    int rc = resolve_locked(t, model_id, model, names, scales, n_req, out, label, e);
    if (rc)
        memset(out, 0, sizeof *out);
    else
        mdl_lora_set_retain(out);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

static json_t *entry(const srv_lora_table *t, int i)
{
    mdl_lora_info in = mdl_lora_get_info(t->loras[i]);
    return json_pack("{s:s, s:i, s:f, s:s, s:b, s:I, s:b}", "format",
                     in.format == MDL_LORA_PEFT ? "peft" : "mlx-lm", "rank", (int)in.rank, "scale",
                     (double)in.scale, "targets", in.targets, "default", t->loras[i] == t->dflt,
                     "bytes", (json_int_t)in.bytes, "hot", (int)t->hot[i]);
}

void srv_lora_models(srv_lora_table *t, const char *model_id, json_int_t created, int ctx,
                     json_t *data)
{
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n; i++) {
        json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:i, s:o}", "id", t->names[i],
                              "object", "model", "created", created, "owned_by", "kiln", "parent",
                              model_id, "root", model_id, "max_model_len", ctx, "adapter",
                              entry(t, i));
        if (m) json_array_append_new(data, m);
    }
    pthread_mutex_unlock(&t->mu);
}

json_t *srv_lora_list(srv_lora_table *t)
{
    json_t *data = json_array(), *out = NULL;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; data && i < t->n; i++) {
        json_t *e = entry(t, i);
        if (!e || json_object_set_new(e, "name", json_string(t->names[i])) ||
            json_array_append_new(data, e)) {
            json_decref(data);
            data = NULL;
        }
    }
    uint64_t hot = t->hot_bytes;
    pthread_mutex_unlock(&t->mu);
    if (data)
        out = json_pack("{s:s, s:o, s:I}", "object", "list", "data", data, "hot_bytes",
                        (json_int_t)hot);
    return out;
}

int srv_lora_add(srv_lora_table *t, const char *name, mdl_lora *a, srv_error *e)
{
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    char *nm = NULL;
    if (find(t, name) >= 0) {
        *e = srv_error_make(SRV_E_CONFLICT, "name",
                            "An adapter named '%s' is already loaded (DELETE /v1/adapters/%s first)",
                            name, name);
        rc = -1;
    } else if (grow(t) || !(nm = strdup(name))) {
        *e = srv_error_make(KILN_E_NOMEM, NULL, "out of memory");
        rc = -1;
    } else {
        t->names[t->n] = nm;
        t->loras[t->n] = a;
        t->hot[t->n++] = 1;
        t->hot_bytes += mdl_lora_get_info(a).bytes;
    }
    pthread_mutex_unlock(&t->mu);
    if (rc) mdl_lora_free(a);
    return rc;
}

int srv_lora_remove(srv_lora_table *t, const char *name, srv_error *e)
{
    pthread_mutex_lock(&t->mu);
    int k = find(t, name);
    const mdl_lora *a = NULL;
    if (k < 0) {
        not_found(e, NULL, name);
    } else if (t->loras[k] == t->dflt) {
        *e = srv_error_make(SRV_E_CONFLICT, NULL,
                            "The adapter '%s' is the server's --lora-default: it cannot be unloaded",
                            name);
    } else {
        a = t->loras[k];
        if (t->hot[k]) t->hot_bytes -= mdl_lora_get_info(a).bytes;
        free(t->names[k]);
        memmove(t->names + k, t->names + k + 1, sizeof *t->names * (size_t)(t->n - k - 1));
        memmove(t->loras + k, t->loras + k + 1, sizeof *t->loras * (size_t)(t->n - k - 1));
        memmove(t->hot + k, t->hot + k + 1, (size_t)(t->n - k - 1));
        t->n--;
    }
    pthread_mutex_unlock(&t->mu);
    mdl_lora_free((mdl_lora *)a); /* requests on it hold their own references */
    return a ? 0 : -1;
}

int srv_lora_has(srv_lora_table *t, const char *name)
{
    pthread_mutex_lock(&t->mu);
    int k = find(t, name);
    pthread_mutex_unlock(&t->mu);
    return k >= 0;
}
