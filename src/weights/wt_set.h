/*
 * wt_set.h — all tensors of a snapshot folder, across shards.
 *
 *   wt_set *ws; wt_set_open("/models/llama", &ws, &err);
 *   const wt_tensor *t = wt_set_find(ws, "lm_head.weight");
 *   wt_set_close(ws);
 *
 * Shards come from model.safetensors.index.json ("weight_map": tensor -> file)
 * when present (every named file must exist, every mapped tensor must be found
 * in its file), else from the folder's model*.safetensors files, or when there
 * are none every *.safetensors file (sorted by name).
 * A tensor name present in two shards is an error (KILN_E_CORRUPT).
 * File names from the index are plain names inside the folder: a name with '/'
 * or ".." is refused (never read outside the snapshot).
 */
#ifndef KILN_WT_SET_H
#define KILN_WT_SET_H

#include "weights/wt_safetensors.h"

typedef struct wt_set wt_set;

/* API */
kiln_code wt_set_open(const char *dir, wt_set **out, kiln_err *err); /* free: wt_set_close */
void wt_set_close(wt_set *ws);
const wt_tensor *wt_set_find(const wt_set *ws, const char *name); /* NULL if absent */
int wt_set_count(const wt_set *ws);
const wt_tensor *wt_set_at(const wt_set *ws, int i);
uint64_t wt_set_bytes(const wt_set *ws); /* sum of tensor bytes (what is mapped) */
/* Which file a tensor came from (for messages). */
const char *wt_set_file_of(const wt_set *ws, const wt_tensor *t);
const char *wt_set_dir(const wt_set *ws);            /* the folder as given to wt_set_open */
int wt_set_file_count(const wt_set *ws);             /* shards opened */
const wt_st *wt_set_file_at(const wt_set *ws, int i); /* BORROWED; NULL if out of range */

#endif
