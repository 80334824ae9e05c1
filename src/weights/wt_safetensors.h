/*
 * wt_safetensors.h — safetensors files, mmap'd and validated; tensors used in place.
 *
 *   wt_st *st; kiln_err err;
 *   if (wt_st_open("model.safetensors", &st, &err) != KILN_OK) die(err.msg);
 *   const wt_tensor *t = wt_st_find(st, "model.norm.weight");   // t->data points into the mmap
 *   wt_st_close(st);
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
 * then the data section. wt_st_open checks every dtype, shape and offset against
 * the file size (shape x dtype size == end - begin, end <= data size, no
 * overlaps) before returning, so callers may trust every wt_tensor.
 */
#ifndef KILN_WT_SAFETENSORS_H
#define KILN_WT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"

typedef enum {
    WT_F32,
    WT_F16,
    WT_BF16,
    WT_U32,
    WT_I32,
    WT_U8,
    WT_I8,
    WT_U16,
    WT_I16,
    WT_U64,
    WT_I64,
    WT_F64,
    WT_BOOL,
    WT_F8_E4M3,
    WT_F8_E5M2,
    WT_DTYPE_COUNT
} wt_dtype;

#define WT_MAX_DIMS 8

typedef struct {
    const char *name; /* BORROWED: owned by the wt_st */
    wt_dtype dtype;
    int ndim;
    int64_t shape[WT_MAX_DIMS];
    int64_t numel;
    const void *data; /* BORROWED: points into the mapping; lives as long as the wt_st */
    uint64_t nbytes;
} wt_tensor;

typedef struct wt_st wt_st; /* one safetensors file (opaque) */

/* API */
/* Maps and validates a file. On success *out is new: free it with wt_st_close(). */
kiln_code wt_st_open(const char *path, wt_st **out, kiln_err *err);
/* Same over caller memory (BORROWED: must outlive the wt_st); used by the fuzzer. */
kiln_code wt_st_open_mem(const uint8_t *data, size_t size, const char *label, wt_st **out,
                         kiln_err *err);
void wt_st_close(wt_st *st); /* NULL is a no-op */
int wt_st_count(const wt_st *st);
const wt_tensor *wt_st_at(const wt_st *st, int i);
const wt_tensor *wt_st_find(const wt_st *st, const char *name); /* NULL if absent */
const char *wt_st_meta(const wt_st *st, const char *key);       /* __metadata__ value or NULL */
const char *wt_st_path(const wt_st *st);
uint64_t wt_st_data_bytes(const wt_st *st); /* size of the data section (after the header) */
size_t wt_dtype_size(wt_dtype dt);       /* bytes per element (BOOL/F8: 1) */
const char *wt_dtype_name(wt_dtype dt);  /* "BF16" ... */
int wt_dtype_parse(const char *s, wt_dtype *out); /* 0 on success */

#endif
