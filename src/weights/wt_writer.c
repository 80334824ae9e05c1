/*
 * wt_writer.c — safetensors files (and whole small files) written atomically.
 *
 * Steps of wt_write_safetensors, each failing cleanly:
 *   1. check the tensors (names non-empty and unique, shapes sane, sizes fit);
 *   2. order them by name and give each its [begin, end) in that order, no gaps;
 *   3. build the header with jansson (compact, sorted keys), pad it with spaces
 *      to a multiple of 8 so the data section starts aligned;
 *   4. write length + header + each tensor's bytes (from `data`, or `fill` into
 *      one reused buffer) to "<path>.tmp-<pid>", fsync, close, rename over path.
 * Invariant: the target path is either untouched or holds the complete new
 * file; the temporary file never survives an error return.
 * Errors: KILN_E_INVALID for bad input tensors, KILN_E_IO for the file system,
 * KILN_E_NOMEM; messages start with the target path.
 */
#include "weights/wt_writer.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/kiln_math.h"

/* ------------------------------------------------------------ temp files */

typedef struct {
    char tmp[4096];
    FILE *f;
} wt_tmp;

static kiln_code tmp_open(const char *path, wt_tmp *w, kiln_err *err)
{
    if (snprintf(w->tmp, sizeof w->tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof w->tmp)
        return kiln_fail(err, KILN_E_INVALID, "%s: path too long", path);
    w->f = fopen(w->tmp, "wb");
    if (!w->f) return kiln_fail(err, KILN_E_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
    return KILN_OK;
}

static kiln_code tmp_write(const char *path, wt_tmp *w, const void *p, size_t n, kiln_err *err)
{
    if (n && fwrite(p, 1, n, w->f) != n)
        return kiln_fail(err, KILN_E_IO, "%s: write failed: %s", path, strerror(errno));
    return KILN_OK;
}

/* Flushes, fsyncs and renames over path; on failure (or when c != OK on entry)
 * removes the temporary file. Returns the first error. */
static kiln_code tmp_finish(const char *path, wt_tmp *w, kiln_code c, kiln_err *err)
{
    if (!w->f) return c;
    if (!c && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
        c = kiln_fail(err, KILN_E_IO, "%s: flush failed: %s", path, strerror(errno));
    if (fclose(w->f) != 0 && !c)
        c = kiln_fail(err, KILN_E_IO, "%s: close failed: %s", path, strerror(errno));
    w->f = NULL;
    if (!c && rename(w->tmp, path) != 0)
        c = kiln_fail(err, KILN_E_IO, "%s: rename failed: %s", path, strerror(errno));
    if (c) unlink(w->tmp);
    return c;
}

kiln_code wt_write_file_atomic(const char *path, const void *bytes, size_t len, kiln_err *err)
{
    wt_tmp w = {0};
    kiln_code c = tmp_open(path, &w, err);
    if (c) return c;
    c = tmp_write(path, &w, bytes, len, err);
    return tmp_finish(path, &w, c, err);
}

/* --------------------------------------------------------------- checks */

uint64_t wt_tensor_bytes(wt_dtype dt, int ndim, const int64_t *shape, int *ok)
{
    uint64_t n = wt_dtype_size(dt);
    *ok = n != 0 && ndim >= 0 && ndim <= WT_MAX_DIMS;
    for (int d = 0; *ok && d < ndim; d++)
        if (shape[d] < 0 || kiln_mul_u64(n, (uint64_t)shape[d], &n)) *ok = 0;
    return *ok ? n : 0;
}

typedef struct {
    const wt_write_tensor *t;
    int index; /* position in the caller's array (for fill) */
    uint64_t begin, nbytes;
} wr_slot;

static int cmp_slot(const void *a, const void *b)
{
    return strcmp(((const wr_slot *)a)->t->name, ((const wr_slot *)b)->t->name);
}

/* Steps 1-2: validated slots in name order with offsets; *total = data bytes. */
static kiln_code plan(const char *path, const wt_write_tensor *t, int n, wt_write_fill fill,
                      wr_slot *s, uint64_t *total, kiln_err *err)
{
    for (int i = 0; i < n; i++) {
        int ok;
        if (!t[i].name || !t[i].name[0] || strcmp(t[i].name, "__metadata__") == 0)
            return kiln_fail(err, KILN_E_INVALID, "%s: tensor %d has no usable name", path, i);
        s[i] = (wr_slot){.t = &t[i], .index = i};
        s[i].nbytes = wt_tensor_bytes(t[i].dtype, t[i].ndim, t[i].shape, &ok);
        if (!ok)
            return kiln_fail(err, KILN_E_INVALID, "%s: tensor '%s': bad dtype or shape", path,
                             t[i].name);
        if (!t[i].data && !fill && s[i].nbytes)
            return kiln_fail(err, KILN_E_INVALID, "%s: tensor '%s': no data", path, t[i].name);
    }
    qsort(s, (size_t)n, sizeof *s, cmp_slot);
    *total = 0;
    for (int i = 0; i < n; i++) {
        if (i && strcmp(s[i - 1].t->name, s[i].t->name) == 0)
            return kiln_fail(err, KILN_E_INVALID, "%s: tensor '%s' given twice", path,
                             s[i].t->name);
        s[i].begin = *total;
        if (kiln_add_u64(*total, s[i].nbytes, total) || *total > (uint64_t)INT64_MAX)
            return kiln_fail(err, KILN_E_INVALID, "%s: file size overflows", path);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------- header */

static json_t *tensor_json(const wr_slot *s)
{
    json_t *shape = json_array();
    if (!shape) return NULL;
    for (int d = 0; d < s->t->ndim; d++)
        if (json_array_append_new(shape, json_integer(s->t->shape[d]))) {
            json_decref(shape);
            return NULL;
        }
    /* "o" steals shape, also when json_pack fails */
    return json_pack("{s:s, s:o, s:[I, I]}", "dtype", wt_dtype_name(s->t->dtype), "shape", shape,
                     "data_offsets", (json_int_t)s->begin, (json_int_t)(s->begin + s->nbytes));
}

/* Step 3: the padded header text (malloc'd) and its length. */
static kiln_code build_header(const char *path, const wr_slot *s, int n, const char *const *meta,
                              int n_meta, char **out, size_t *len, kiln_err *err)
{
    *out = NULL;
    json_t *root = json_object();
    kiln_code c = KILN_OK;
    if (!root) goto nomem;
    if (n_meta > 0) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m)) goto nomem;
        for (int i = 0; i < n_meta; i++)
            if (!meta[2 * i] || !meta[2 * i + 1] ||
                json_object_set_new(m, meta[2 * i], json_string(meta[2 * i + 1]))) {
                c = kiln_fail(err, KILN_E_INVALID, "%s: bad __metadata__ entry %d", path, i);
                goto done;
            }
    }
    for (int i = 0; i < n; i++)
        if (json_object_set_new(root, s[i].t->name, tensor_json(&s[i])))
            goto nomem; /* a NULL value or a bad (non-UTF-8) name */
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!text) goto nomem;
    size_t tl = strlen(text), padded = (tl + 7) & ~(size_t)7;
    *out = malloc(padded + 1);
    if (!*out) {
        free(text);
        goto nomem;
    }
    memcpy(*out, text, tl);
    memset(*out + tl, ' ', padded - tl);
    (*out)[padded] = '\0';
    *len = padded;
    free(text);
    goto done;
nomem:
    c = kiln_fail(err, KILN_E_NOMEM,
                  "%s: cannot build the header (out of memory or a "
                  "tensor name that is not UTF-8)",
                  path);
done:
    json_decref(root);
    return c;
}

/* ------------------------------------------------------------------ API */

/* Step 4's data part: every tensor, in slot order. */
static kiln_code write_data(const char *path, wt_tmp *w, const wr_slot *s, int n,
                            wt_write_fill fill, void *ctx, kiln_err *err)
{
    void *buf = NULL;
    uint64_t cap = 0;
    kiln_code c = KILN_OK;
    for (int i = 0; i < n && !c; i++) {
        const void *src = s[i].t->data;
        if (!src && s[i].nbytes) {
            if (s[i].nbytes > cap) {
                free(buf);
                cap = s[i].nbytes;
                buf = cap <= SIZE_MAX ? malloc((size_t)cap) : NULL;
                if (!buf) {
                    cap = 0;
                    c = kiln_fail(err, KILN_E_NOMEM,
                                  "%s: cannot allocate %" PRIu64 " bytes for '%s'", path,
                                  s[i].nbytes, s[i].t->name);
                    break;
                }
            }
            if ((c = fill(ctx, s[i].index, buf, s[i].nbytes, err))) break;
            src = buf;
        }
        c = tmp_write(path, w, src, (size_t)s[i].nbytes, err);
    }
    free(buf);
    return c;
}

kiln_code wt_write_safetensors(const char *path, const wt_write_tensor *t, int n,
                               const char *const *meta, int n_meta, wt_write_fill fill, void *ctx,
                               kiln_err *err)
{
    if (n < 0 || n_meta < 0) return kiln_fail(err, KILN_E_INVALID, "%s: negative count", path);
    wr_slot *s = calloc(n ? (size_t)n : 1, sizeof *s);
    if (!s) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", path);
    char *hdr = NULL;
    size_t hl = 0;
    uint64_t total;
    wt_tmp w = {0};
    kiln_code c = plan(path, t, n, fill, s, &total, err);
    if (!c) c = build_header(path, s, n, meta, n_meta, &hdr, &hl, err);
    if (!c) c = tmp_open(path, &w, err);
    if (!c) {
        uint8_t len8[8];
        for (int i = 0; i < 8; i++)
            len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
        c = tmp_write(path, &w, len8, 8, err);
    }
    if (!c) c = tmp_write(path, &w, hdr, hl, err);
    if (!c) c = write_data(path, &w, s, n, fill, ctx, err);
    c = tmp_finish(path, &w, c, err);
    free(hdr);
    free(s);
    return c;
}
