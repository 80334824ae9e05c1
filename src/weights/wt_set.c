/*
 * wt_set.c — every tensor of a snapshot folder, across its safetensors shards.
 *
 * Which files are opened:
 *   - model.safetensors.index.json present: exactly the files its weight_map
 *     names (each a plain name inside the folder; '/', '\\' or ".." refused),
 *     and every tensor the map lists must be in the file it names;
 *   - otherwise the folder's model*.safetensors files, or when there are none
 *     every *.safetensors file, in name order (mlx-lm globs model*.safetensors;
 *     preferring them keeps e.g. a reference.safetensors next to the weights
 *     out of the model).
 * Invariants on success:
 *   (1) entries[] holds every tensor of every opened file once, sorted by name;
 *   (2) no name appears in two files (KILN_E_CORRUPT otherwise);
 *   (3) entries[i].t points into files[entries[i].file], which stays open (and
 *       mapped) until wt_set_close.
 * Ownership: the set OWNS its wt_st files, the file-name strings and the entry
 * array; wt_tensor pointers handed out are BORROWED from the files.
 * Errors: KILN_E_NOT_FOUND (no folder / no weights), KILN_E_IO (unreadable),
 * KILN_E_CORRUPT (index or shards disagree), plus whatever wt_st_open reports.
 */
#include "weights/wt_set.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/plat.h"

#define SET_MAX_INDEX ((size_t)64 * 1024 * 1024)
#define SET_INDEX_NAME "model.safetensors.index.json"

typedef struct {
    const wt_tensor *t; /* BORROWED from files[file] */
    int file;
} set_entry;

struct wt_set {
    char *dir;     /* OWNED */
    wt_st **files; /* OWNED [n_files] */
    int n_files;
    set_entry *entries; /* OWNED [n], sorted by name */
    int n;
    uint64_t bytes;
};

/* A growable list of OWNED strings. */
typedef struct {
    char **v;
    int n, cap;
} str_list;

/* ------------------------------------------------------------- helpers */

static int str_list_push(str_list *l, const char *s)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        char **nv = realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv) return -1;
        l->v = nv;
        l->cap = cap;
    }
    if (!(l->v[l->n] = strdup(s))) return -1;
    l->n++;
    return 0;
}

static void str_list_free(str_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (str_list){0};
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const set_entry *)a)->t->name, ((const set_entry *)b)->t->name);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A shard name from the index must be a plain file name inside the folder. */
static bool plain_name(const char *s)
{
    return s[0] && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..");
}

static const set_entry *find_entry(const wt_set *ws, const char *name)
{
    if (!ws || !name || ws->n == 0) return NULL;
    wt_tensor kt = {.name = name};
    set_entry key = {.t = &kt};
    return bsearch(&key, ws->entries, (size_t)ws->n, sizeof key, cmp_entry);
}

/* ------------------------------------------------------- choosing files */

/* Fills names with the shards listed by the index (deduplicated, sorted).
 * *root gets the parsed index (the caller decrefs) for the tensor check. */
static kiln_code names_from_index(const char *ipath, str_list *names, json_t **root, kiln_err *err)
{
    char *text;
    size_t len;
    kiln_code c = plat_read_file(ipath, SET_MAX_INDEX, &text, &len, err);
    if (c) return c;
    json_error_t jerr;
    *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!*root)
        return kiln_fail(err, KILN_E_CORRUPT, "%s: not valid JSON: %s (line %d)", ipath, jerr.text,
                         jerr.line);
    const json_t *map = json_object_get(*root, "weight_map");
    if (!json_is_object(map))
        return kiln_fail(err, KILN_E_CORRUPT, "%s: no \"weight_map\" object", ipath);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)map, key, v)
    {
        const char *f = json_string_value(v);
        if (!f)
            return kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s' maps to a non-string", ipath,
                             key);
        if (!plain_name(f))
            return kiln_fail(err, KILN_E_CORRUPT,
                             "%s: tensor '%s' maps to '%s', not a plain file name in the folder",
                             ipath, key, f);
        bool seen = false;
        for (int i = 0; i < names->n && !seen; i++)
            seen = strcmp(names->v[i], f) == 0;
        if (!seen && str_list_push(names, f))
            return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", ipath);
    }
    if (names->n == 0) return kiln_fail(err, KILN_E_CORRUPT, "%s: weight_map is empty", ipath);
    qsort(names->v, (size_t)names->n, sizeof *names->v, cmp_str);
    return KILN_OK;
}

/* Fills names with model*.safetensors, else every *.safetensors (sorted). */
static kiln_code names_from_listing(const char *dir, str_list *names, kiln_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return kiln_fail(err, errno == ENOENT ? KILN_E_NOT_FOUND : KILN_E_IO,
                         "%s: cannot list folder: %s", dir, strerror(errno));
    str_list all = {0}, model = {0};
    struct dirent *e;
    kiln_code c = KILN_OK;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !ends_with(e->d_name, ".safetensors")) continue;
        if (str_list_push(&all, e->d_name) ||
            (strncmp(e->d_name, "model", 5) == 0 && str_list_push(&model, e->d_name))) {
            c = kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", dir);
            break;
        }
    }
    closedir(d);
    if (!c && all.n == 0)
        c = kiln_fail(err, KILN_E_NOT_FOUND, "%s: no *.safetensors files and no %s", dir,
                      SET_INDEX_NAME);
    if (!c) {
        *names = model.n ? model : all;
        if (model.n)
            str_list_free(&all);
        else
            str_list_free(&model);
        qsort(names->v, (size_t)names->n, sizeof *names->v, cmp_str);
        return KILN_OK;
    }
    str_list_free(&all);
    str_list_free(&model);
    return c;
}

/* ------------------------------------------------------- building the set */

static kiln_code open_files(wt_set *ws, const str_list *names, kiln_err *err)
{
    ws->files = calloc((size_t)names->n, sizeof *ws->files);
    if (!ws->files) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", ws->dir);
    int64_t total = 0;
    for (int i = 0; i < names->n; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", ws->dir, names->v[i]) >= (int)sizeof path)
            return kiln_fail(err, KILN_E_INVALID, "%s: path too long", ws->dir);
        kiln_code c = wt_st_open(path, &ws->files[i], err);
        if (c) return c;
        ws->n_files++;
        total += wt_st_count(ws->files[i]);
    }
    if (total > INT32_MAX)
        return kiln_fail(err, KILN_E_UNSUPPORTED, "%s: too many tensors", ws->dir);
    ws->entries = calloc(total ? (size_t)total : 1, sizeof *ws->entries);
    if (!ws->entries) return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", ws->dir);
    for (int f = 0; f < ws->n_files; f++)
        for (int i = 0; i < wt_st_count(ws->files[f]); i++) {
            set_entry *e = &ws->entries[ws->n++];
            e->t = wt_st_at(ws->files[f], i);
            e->file = f;
            ws->bytes += e->t->nbytes;
        }
    qsort(ws->entries, (size_t)ws->n, sizeof *ws->entries, cmp_entry);
    for (int i = 1; i < ws->n; i++)
        if (strcmp(ws->entries[i - 1].t->name, ws->entries[i].t->name) == 0)
            return kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s' is in both %s and %s", ws->dir,
                             ws->entries[i].t->name, names->v[ws->entries[i - 1].file],
                             names->v[ws->entries[i].file]);
    return KILN_OK;
}

/* Every weight_map entry must be found in the file it names. */
static kiln_code check_index(const wt_set *ws, const char *ipath, const json_t *root,
                             const str_list *names, kiln_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)json_object_get(root, "weight_map"), key, v)
    {
        const set_entry *e = find_entry(ws, key);
        if (!e || strcmp(names->v[e->file], json_string_value(v)) != 0)
            return kiln_fail(err, KILN_E_CORRUPT, "%s: tensor '%s' is not in %s", ipath, key,
                             json_string_value(v));
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ API */

kiln_code wt_set_open(const char *dir, wt_set **out, kiln_err *err)
{
    *out = NULL;
    if (!plat_is_dir(dir))
        return kiln_fail(err, KILN_E_NOT_FOUND, "%s: %s", dir,
                         access(dir, F_OK) == 0 ? "not a folder" : "no such folder");
    wt_set *ws = calloc(1, sizeof *ws);
    if (!ws || !(ws->dir = strdup(dir))) {
        free(ws);
        return kiln_fail(err, KILN_E_NOMEM, "%s: out of memory", dir);
    }
    char ipath[4096];
    str_list names = {0};
    json_t *index = NULL;
    kiln_code c;
    if (snprintf(ipath, sizeof ipath, "%s/%s", dir, SET_INDEX_NAME) >= (int)sizeof ipath)
        c = kiln_fail(err, KILN_E_INVALID, "%s: path too long", dir);
    else if (plat_is_file(ipath))
        c = names_from_index(ipath, &names, &index, err);
    else
        c = names_from_listing(dir, &names, err);
    if (!c) c = open_files(ws, &names, err);
    if (!c && index) c = check_index(ws, ipath, index, &names, err);
    json_decref(index);
    str_list_free(&names);
    if (c) {
        wt_set_close(ws);
        return c;
    }
    *out = ws;
    return KILN_OK;
}

void wt_set_close(wt_set *ws)
{
    if (!ws) return;
    for (int i = 0; i < ws->n_files; i++)
        wt_st_close(ws->files[i]);
    free(ws->files);
    free(ws->entries);
    free(ws->dir);
    free(ws);
}

const wt_tensor *wt_set_find(const wt_set *ws, const char *name)
{
    const set_entry *e = find_entry(ws, name);
    return e ? e->t : NULL;
}

int wt_set_count(const wt_set *ws)
{
    return ws ? ws->n : 0;
}

const wt_tensor *wt_set_at(const wt_set *ws, int i)
{
    return (ws && i >= 0 && i < ws->n) ? ws->entries[i].t : NULL;
}

uint64_t wt_set_bytes(const wt_set *ws)
{
    return ws ? ws->bytes : 0;
}

const char *wt_set_file_of(const wt_set *ws, const wt_tensor *t)
{
    const set_entry *e = t ? find_entry(ws, t->name) : NULL;
    return (e && e->t == t) ? wt_st_path(ws->files[e->file]) : NULL;
}

const char *wt_set_dir(const wt_set *ws)
{
    return ws ? ws->dir : NULL;
}

int wt_set_file_count(const wt_set *ws)
{
    return ws ? ws->n_files : 0;
}

const wt_st *wt_set_file_at(const wt_set *ws, int i)
{
    return (ws && i >= 0 && i < ws->n_files) ? ws->files[i] : NULL;
}
