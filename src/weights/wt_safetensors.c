/*
 * wt_safetensors.c — one safetensors file: mapped, its JSON header parsed with
 * jansson, and every tensor checked against the file before wt_st_open returns.
 *
 * Layout: [u64 LE header length N][N bytes of JSON][data section]. The data
 * section is everything after the header; tensor offsets are relative to it.
 *
 * What wt_st_open / wt_st_open_mem guarantee on success (invariants):
 *   (1) every tensor has a known dtype, 0 <= ndim <= WT_MAX_DIMS, dims >= 0,
 *       numel = prod(shape) fits int64, nbytes = numel * dtype size fits u64;
 *   (2) its bytes [begin, end) lie inside the data section and end - begin ==
 *       nbytes, so t->data .. t->data + t->nbytes is always readable;
 *   (3) no two non-empty tensors share a byte (checked after sorting by begin);
 *   (4) names are unique (jansson JSON_REJECT_DUPLICATES, re-checked after the
 *       name sort) and the tensor array is sorted by name (wt_st_find bsearches);
 *   (5) __metadata__, when present, is an object of strings.
 * Gaps between tensors are allowed (only overlaps are refused).
 *
 * Ownership: names and metadata strings are OWNED copies (freed by wt_st_close);
 * wt_tensor.data is BORROWED into the mapping (or the caller's buffer for
 * wt_st_open_mem). Nothing is copied from the data section.
 * Threads: immutable after open; any number of readers.
 * Errors: KILN_E_CORRUPT for bytes that fail a check, KILN_E_UNSUPPORTED for a
 * dtype name we do not know, KILN_E_NOT_FOUND/KILN_E_IO from opening the file,
 * KILN_E_NOMEM. Every message starts with the file (or label) name.
 */
#include "weights/wt_safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "util/kiln_le.h"
#include "util/kiln_math.h"
#include "util/plat.h"

/* ------------------------------------------------------------------ types */

/* Header JSON larger than this is refused (the reference implementation's cap). */
#define WT_ST_MAX_HEADER ((uint64_t)100 * 1024 * 1024)

typedef struct {
    char *key, *value; /* OWNED */
} st_meta;

struct wt_st {
    char *path;          /* OWNED: path or label, for messages and wt_st_path */
    plat_map map;        /* OWNED mapping (empty for wt_st_open_mem) */
    const uint8_t *data; /* BORROWED: start of the data section */
    uint64_t data_len;   /* bytes in the data section */
    wt_tensor *tensors;  /* OWNED array [n], sorted by name; names OWNED */
    int n;
    st_meta *meta; /* OWNED array [n_meta] */
    int n_meta;
};

typedef struct {
    const char *name;
    size_t size;
} dtype_info;

static const dtype_info dtype_table[WT_DTYPE_COUNT] = {
    [WT_F32] = {"F32", 4},   [WT_F16] = {"F16", 2},         [WT_BF16] = {"BF16", 2},
    [WT_U32] = {"U32", 4},   [WT_I32] = {"I32", 4},         [WT_U8] = {"U8", 1},
    [WT_I8] = {"I8", 1},     [WT_U16] = {"U16", 2},         [WT_I16] = {"I16", 2},
    [WT_U64] = {"U64", 8},   [WT_I64] = {"I64", 8},         [WT_F64] = {"F64", 8},
    [WT_BOOL] = {"BOOL", 1}, [WT_F8_E4M3] = {"F8_E4M3", 1}, [WT_F8_E5M2] = {"F8_E5M2", 1},
};

/* ---------------------------------------------------------------- dtypes */

size_t wt_dtype_size(wt_dtype dt)
{
    return (unsigned)dt < WT_DTYPE_COUNT ? dtype_table[dt].size : 0;
}

const char *wt_dtype_name(wt_dtype dt)
{
    return (unsigned)dt < WT_DTYPE_COUNT ? dtype_table[dt].name : "?";
}

int wt_dtype_parse(const char *s, wt_dtype *out)
{
    for (int i = 0; s && i < WT_DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_table[i].name) == 0) {
            *out = (wt_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* --------------------------------------------------------------- helpers */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* "[2, 3, 4]" into buf (truncated if long); for messages. */
static void shape_str(const wt_tensor *t, char *buf, size_t n)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const wt_tensor *)a)->name, ((const wt_tensor *)b)->name);
}

typedef struct {
    uint64_t begin, end;
    int idx;
} st_range;

static int cmp_range(const void *a, const void *b)
{
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* A JSON integer >= 0, as uint64. */
static int json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v)) return -1;
    json_int_t i = json_integer_value(v);
    if (i < 0) return -1;
    *out = (uint64_t)i;
    return 0;
}

/* ------------------------------------------------------- header parsing */

static kiln_code parse_meta(wt_st *st, const json_t *obj, kiln_err *err)
{
    if (!json_is_object(obj))
        return kiln_fail(err, KILN_E_CORRUPT, "%s: __metadata__ is not a JSON object", st->path);
    size_t n = json_object_size(obj);
    st->meta = calloc(n ? n : 1, sizeof *st->meta);
    if (!st->meta) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", st->path);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        if (!json_is_string(v))
            return kiln_fail(err, KILN_E_CORRUPT, "%s: __metadata__ value '%s' is not a string",
                             st->path, key);
        st_meta *m = &st->meta[st->n_meta];
        m->key = dup_str(key);
        m->value = dup_str(json_string_value(v));
        st->n_meta++;
        if (!m->key || !m->value)
            return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", st->path);
    }
    return KILN_OK;
}

static kiln_code parse_shape(wt_st *st, const char *name, const json_t *shape, wt_tensor *t,
                             kiln_err *err)
{
    if (!json_is_array(shape))
        return kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s': shape is not an array", st->path,
                         name);
    size_t nd = json_array_size(shape);
    if (nd > WT_MAX_DIMS)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "%s: tensor '%s': %zu dimensions (max %d)",
                         st->path, name, nd, WT_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t d = 0; d < nd; d++) {
        uint64_t dim;
        if (json_u64(json_array_get(shape, d), &dim) != 0)
            return kiln_fail(err, KILN_E_CORRUPT,
                             "%s: tensor '%s': shape dimension %zu is not an integer >= 0",
                             st->path, name, d);
        t->shape[d] = (int64_t)dim;
        if (kiln_mul_u64(numel, dim, &numel) || numel > (uint64_t)INT64_MAX)
            return kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s': element count overflows",
                             st->path, name);
    }
    t->numel = (int64_t)numel;
    return KILN_OK;
}

/* Checks invariant (2) for one tensor whose dtype/shape are already parsed. */
static kiln_code check_range(wt_st *st, const wt_tensor *t, uint64_t begin, uint64_t end,
                             kiln_err *err)
{
    uint64_t nbytes;
    char shp[96];
    if (end < begin)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "%s: tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         ") end before they begin",
                         st->path, t->name, begin, end);
    if (end > st->data_len)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "%s: tensor '%s': bytes [%" PRIu64 ", %" PRIu64 ") do not fit %" PRIu64
                         "-byte data section",
                         st->path, t->name, begin, end, st->data_len);
    shape_str(t, shp, sizeof shp);
    if (kiln_mul_u64((uint64_t)t->numel, wt_dtype_size(t->dtype), &nbytes))
        return kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s': shape %s x %s overflows", st->path,
                         t->name, shp, wt_dtype_name(t->dtype));
    if (end - begin != nbytes)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "%s: tensor '%s': shape %s x %s is %" PRIu64
                         " bytes but data_offsets [%" PRIu64 ", %" PRIu64 ") hold %" PRIu64,
                         st->path, t->name, shp, wt_dtype_name(t->dtype), nbytes, begin, end,
                         end - begin);
    return KILN_OK;
}

static kiln_code parse_tensor(wt_st *st, const char *name, const json_t *v, wt_tensor *t,
                              st_range *r, kiln_err *err)
{
    if (!json_is_object(v))
        return kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s': entry is not a JSON object",
                         st->path, name);
    const json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s': dtype missing or not a string",
                         st->path, name);
    if (wt_dtype_parse(json_string_value(jd), &t->dtype) != 0)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "%s: tensor '%s': unknown dtype '%s'", st->path,
                         name, json_string_value(jd));
    kiln_code c = parse_shape(st, name, json_object_get(v, "shape"), t, err);
    if (c) return c;
    const json_t *off = json_object_get(v, "data_offsets");
    uint64_t begin, end;
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        json_u64(json_array_get(off, 0), &begin) || json_u64(json_array_get(off, 1), &end))
        return kiln_fail(err, KILN_E_CORRUPT,
                         "%s: tensor '%s': data_offsets is not [begin, end] with integers >= 0",
                         st->path, name);
    t->name = dup_str(name);
    if (!t->name) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", st->path);
    if ((c = check_range(st, t, begin, end, err))) return c;
    t->nbytes = end - begin;
    t->data = st->data + begin;
    r->begin = begin;
    r->end = end;
    return KILN_OK;
}

/* Invariant (3): sorted by begin, each non-empty range starts at or after the
 * furthest end seen so far. */
static kiln_code check_overlaps(wt_st *st, st_range *r, kiln_err *err)
{
    qsort(r, (size_t)st->n, sizeof *r, cmp_range);
    int far = -1; /* index into r of the non-empty range reaching furthest */
    for (int i = 0; i < st->n; i++) {
        if (r[i].begin == r[i].end) continue;
        if (far >= 0 && r[i].begin < r[far].end) {
            const wt_tensor *a = &st->tensors[r[far].idx], *b = &st->tensors[r[i].idx];
            return kiln_fail(err, KILN_E_CORRUPT,
                             "%s: tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64
                             ", %" PRIu64 ") overlap",
                             st->path, a->name, r[far].begin, r[far].end, b->name, r[i].begin,
                             r[i].end);
        }
        if (far < 0 || r[i].end > r[far].end) far = i;
    }
    return KILN_OK;
}

static kiln_code parse_tensors(wt_st *st, json_t *root, kiln_err *err)
{
    size_t n = json_object_size(root);
    st->tensors = calloc(n ? n : 1, sizeof *st->tensors);
    st_range *r = calloc(n ? n : 1, sizeof *r);
    kiln_code c = KILN_OK;
    if (!st->tensors || !r) {
        c = kiln_fail(err, KILN_E_NOMEM, "%s: out of memory for %zu tensors", st->path, n);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if ((c = parse_meta(st, v, err))) goto done;
            continue;
        }
        wt_tensor *t = &st->tensors[st->n];
        r[st->n].idx = st->n;
        c = parse_tensor(st, key, v, t, &r[st->n], err);
        if (t->name) st->n++; /* counted once its name is owned, so close() frees it */
        if (c) goto done;
    }
    if ((c = check_overlaps(st, r, err))) goto done;
    qsort(st->tensors, (size_t)st->n, sizeof *st->tensors, cmp_name);
    for (int i = 1; i < st->n; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0) {
            c = kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s' appears twice", st->path,
                          st->tensors[i].name);
            goto done;
        }
done:
    free(r);
    return c;
}

/* Parses the header of bytes [0, size) into st (st->path already set). */
static kiln_code st_parse(wt_st *st, const uint8_t *bytes, size_t size, kiln_err *err)
{
    if (size < 8)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "%s: truncated: %zu bytes, too short for the 8-byte header length",
                         st->path, size);
    uint64_t hlen = kiln_get_le64(bytes);
    if (hlen > (uint64_t)size - 8)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "%s: header length %" PRIu64 " runs past the end of the %zu-byte file",
                         st->path, hlen, size);
    if (hlen > WT_ST_MAX_HEADER)
        return kiln_fail(err, KILN_E_CORRUPT,
                         "%s: header length %" PRIu64 " is over the %" PRIu64 "-byte limit",
                         st->path, hlen, WT_ST_MAX_HEADER);
    st->data = bytes + 8 + hlen;
    st->data_len = (uint64_t)size - 8 - hlen;
    json_error_t jerr;
    json_t *root = json_loadb((const char *)bytes + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return kiln_fail(err, KILN_E_CORRUPT, "%s: header is not valid JSON: %s (byte %d)",
                         st->path, jerr.text, jerr.position);
    kiln_code c;
    if (!json_is_object(root))
        c = kiln_fail(err, KILN_E_CORRUPT, "%s: header is not a JSON object", st->path);
    else
        c = parse_tensors(st, root, err);
    json_decref(root);
    return c;
}

static kiln_code st_new(const char *label, wt_st **out, kiln_err *err)
{
    wt_st *st = calloc(1, sizeof *st);
    if (st) st->path = dup_str(label ? label : "<memory>");
    if (!st || !st->path) {
        free(st);
        return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", label ? label : "<memory>");
    }
    *out = st;
    return KILN_OK;
}

/* ------------------------------------------------------------------- API */

kiln_code wt_st_open_mem(const uint8_t *data, size_t size, const char *label, wt_st **out,
                         kiln_err *err)
{
    *out = NULL;
    wt_st *st;
    kiln_code c = st_new(label, &st, err);
    if (c) return c;
    if ((c = st_parse(st, data, size, err))) {
        wt_st_close(st);
        return c;
    }
    *out = st;
    return KILN_OK;
}

kiln_code wt_st_open(const char *path, wt_st **out, kiln_err *err)
{
    *out = NULL;
    wt_st *st;
    kiln_code c = st_new(path, &st, err);
    if (c) return c;
    if ((c = plat_map_file(path, &st->map, err)) ||
        (c = st_parse(st, st->map.data, st->map.size, err))) {
        wt_st_close(st);
        return c;
    }
    *out = st;
    return KILN_OK;
}

void wt_st_close(wt_st *st)
{
    if (!st) return;
    for (int i = 0; i < st->n; i++)
        free((char *)st->tensors[i].name);
    free(st->tensors);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->meta);
    plat_unmap(&st->map);
    free(st->path);
    free(st);
}

int wt_st_count(const wt_st *st)
{
    return st ? st->n : 0;
}

const wt_tensor *wt_st_at(const wt_st *st, int i)
{
    return (st && i >= 0 && i < st->n) ? &st->tensors[i] : NULL;
}

const wt_tensor *wt_st_find(const wt_st *st, const char *name)
{
    if (!st || !name || st->n == 0) return NULL;
    wt_tensor key = {.name = name};
    return bsearch(&key, st->tensors, (size_t)st->n, sizeof key, cmp_name);
}

const char *wt_st_meta(const wt_st *st, const char *key)
{
    for (int i = 0; st && key && i < st->n_meta; i++)
        if (strcmp(st->meta[i].key, key) == 0) return st->meta[i].value;
    return NULL;
}

const char *wt_st_path(const wt_st *st)
{
    return st ? st->path : NULL;
}

uint64_t wt_st_data_bytes(const wt_st *st)
{
    return st ? st->data_len : 0;
}
