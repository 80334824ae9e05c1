/*
 * wt_writer.h — writes safetensors files (and other snapshot files) atomically:
 * everything goes to a temporary file in the same folder, which is fsync'd and
 * renamed over the target only when complete.
 *
 *   wt_write_tensor t[] = {{.name = "w", .dtype = WT_F32, .ndim = 1, .shape = {4}, .data = f}};
 *   const char *meta[] = {"format", "mlx"};
 *   if (wt_write_safetensors("out/model.safetensors", t, 1, meta, 1, NULL, NULL, &err)) ...
 *
 * The header is compact JSON with sorted keys, padded with spaces to a multiple
 * of 8 bytes; data is laid out in name order with no gaps, so wt_st_open reads
 * back exactly what was given. Tensor data is taken either from `data` or, when
 * that is NULL, produced by the `fill` callback one tensor at a time (memory
 * stays at one tensor however big the file).
 */
#ifndef KILN_WT_WRITER_H
#define KILN_WT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "util/kiln_err.h"
#include "weights/wt_safetensors.h"

typedef struct {
    const char *name; /* BORROWED */
    wt_dtype dtype;
    int ndim;
    int64_t shape[WT_MAX_DIMS];
    const void *data; /* BORROWED: numel * dtype size bytes (little-endian), or NULL: use fill */
} wt_write_tensor;

/* Produces tensor `index` (of the array given to wt_write_safetensors) into dst,
 * which holds exactly nbytes. */
typedef kiln_code (*wt_write_fill)(void *ctx, int index, void *dst, uint64_t nbytes, kiln_err *err);

/* API */
/* Writes n tensors and n_meta __metadata__ pairs (meta = key0, value0, key1, ...;
 * may be NULL when n_meta is 0). fill/ctx are used for tensors whose data is NULL.
 * Errors: KILN_E_INVALID (duplicate or empty name, bad shape, missing data),
 * KILN_E_IO (the temp file could not be written or renamed; it is removed). */
kiln_code wt_write_safetensors(const char *path,         /* target file */
                               const wt_write_tensor *t, /* [n] */
                               int n,                    /* tensor count */
                               const char *const *meta,  /* [2 * n_meta] or NULL */
                               int n_meta,               /* metadata pairs */
                               wt_write_fill fill,       /* NULL if every data is set */
                               void *ctx,                /* passed to fill */
                               kiln_err *err);
/* Writes len bytes to path atomically (temp file + fsync + rename). */
kiln_code wt_write_file_atomic(const char *path, const void *bytes, size_t len, kiln_err *err);
/* Bytes of a tensor of this dtype and shape; 0 on overflow or a negative dim
 * (check with *ok, which is set to 0 then). */
uint64_t wt_tensor_bytes(wt_dtype dt, int ndim, const int64_t *shape, int *ok);

#endif
