/*
 * wt_config_int.h — what wt_config.c shares with the family parsers of
 * config.json (wt_config_gemma.c): the parse context and its typed getters.
 * Nothing outside weights/ includes it.
 */
#ifndef KILN_WT_CONFIG_INT_H
#define KILN_WT_CONFIG_INT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/kiln_err.h"
#include "weights/wt_config.h"

/* Parse context: the root object, text_config, and the label for messages. */
typedef struct {
    const json_t *root, *text; /* BORROWED */
    const char *label;
} cfg_src;

/* The value of key at the top level, else in text_config; NULL when absent or null. */
const json_t *wt_cfg_get(const cfg_src *s, const char *key);
/* 1 when key is written at the top level or in text_config, null included. */
int wt_cfg_has(const cfg_src *s, const char *key);
/* Optional integer key >= lo (below its cap); *present tells whether it was there. */
kiln_code wt_cfg_int(const cfg_src *s, const char *key, int64_t lo, int64_t *out, bool *present,
                     kiln_err *err);
/* Optional number in object obj; keeps *out when absent. */
kiln_code wt_cfg_num(const json_t *obj, const char *key, const char *label, double *out,
                     bool *present, kiln_err *err);
/* Optional boolean; keeps *out when absent. */
kiln_code wt_cfg_bool(const cfg_src *s, const char *key, bool *out, kiln_err *err);

/* ---------------------------------------------------------------- wt_config_gemma.c */
/* Gemma 3's transformers defaults for the keys google's multimodal configs
 * leave out, filled into a copy of the object holding the text keys: *owned
 * is that copy (json_decref it after parsing) and s now reads from it. */
kiln_code wt_gemma_defaults(cfg_src *s, wt_config *c, json_t **owned, kiln_err *err);
/* The Gemma 3/4 keys into c->gemma and c->moe (sizes are already parsed). */
kiln_code wt_gemma_parse(const cfg_src *s, wt_config *c, kiln_err *err);

#endif
