/*
 * cli_models.c — which model a verb runs, `kiln ls`, `kiln rm`, and reading the
 * weights before serving (see cli_models.h).
 *
 * `kiln ls` looks in the Hugging Face cache (cli_hf.h), in each --models-dir
 * folder (every subfolder with a config.json, and the folder itself), and at the
 * default model. Per model: id, size on disk, format (mdl_get_info's description:
 * "f32", "bf16", "affine 4-bit g64 (bf16 scales)" ...), architecture, whether kiln
 * loads it (config + every tensor's shape checked; nothing is read but headers),
 * and whether it fits this machine's memory at the default context for one
 * sequence (eng_fit, what `kiln fit` prints).
 * `kiln rm ORG/NAME` deletes that repo's folder from the cache (blobs included),
 * after a confirmation on a terminal (--yes otherwise); never a folder outside it.
 */
#include "cli/cli_models.h"
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "cli/cli_hf.h"
#include "cli/cli_progress.h"
#include "engine/eng_fit.h"
#include "model/mdl_model.h"
#include "util/plat.h"
#include "weights/wt_config.h"
#include "weights/wt_set.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- which model */

static int has_config(const char *dir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    return plat_is_file(p);
}

int cli_default_model(char *out, size_t n)
{
    const char *env = getenv("KILN_DEFAULT_MODEL");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return has_config(out) ? 0 : -1;
    }
    char exe[4096];
    if (plat_exe_dir(exe, sizeof exe) == 0) {
        static const char *const rel[] = {"/../models/", "/models/", "/../share/kiln/models/"};
        for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
            snprintf(out, n, "%s%s%s", exe, rel[i], CLI_DEFAULT_MODEL_NAME);
            if (has_config(out)) return 0;
        }
    }
#ifdef KILN_SOURCE_DIR
    snprintf(out, n, "%s/models/%s", KILN_SOURCE_DIR, CLI_DEFAULT_MODEL_NAME);
    if (has_config(out)) return 0;
#endif
    return -1;
}

static int offline_env(void)
{
    const char *e = getenv("HF_HUB_OFFLINE");
    return e && (!strcmp(e, "1") || !strcasecmp(e, "true") || !strcasecmp(e, "yes"));
}

int cli_pick_model(const char *verb, const char *model, int offline, char *dir, size_t n, char *id,
                   size_t id_n)
{
    kiln_err err;
    if (!model) {
        if (cli_default_model(dir, n) != 0) {
            fprintf(stderr, "kiln %s: no --model given and the default model (models/%s) is not "
                            "next to this binary; give a folder or ORG/NAME with --model\n",
                    verb, CLI_DEFAULT_MODEL_NAME);
            return 1;
        }
        snprintf(id, id_n, "%s", CLI_DEFAULT_MODEL_NAME);
        fprintf(stderr, "kiln %s: no --model given; using the built-in %s (a 260K-parameter story "
                        "model; try --model %s for an assistant, kiln ls for what is here)\n",
                verb, CLI_DEFAULT_MODEL_NAME, CLI_HF_DEFAULT_MODEL);
        return 0;
    }
    const char *base = strrchr(model, '/');
    if (plat_is_dir(model)) {
        snprintf(dir, n, "%s", model);
        snprintf(id, id_n, "%s", base && base[1] ? base + 1 : model);
        return 0;
    }
    if (cli_hf_resolve(model, dir, n, &err) == KILN_OK) {
        snprintf(id, id_n, "%s", model);
        return 0;
    }
    if (!cli_hf_is_repo_id(model)) return cli_fail(verb, &err);
    if (offline || offline_env()) {
        fprintf(stderr, "kiln %s: %s is not in the Hugging Face cache and downloads are off (%s); "
                        "run kiln get %s when online\n",
                verb, model, offline ? "--offline" : "HF_HUB_OFFLINE", model);
        return 1;
    }
    fprintf(stderr, "kiln %s: %s is not cached; downloading it\n", verb, model);
    if (cli_hf_download(model, 0, dir, n, &err) != KILN_OK) return cli_fail(verb, &err);
    snprintf(id, id_n, "%s", model);
    return 0;
}

/* ---------------------------------------------------------------- warm the weights */

void cli_warm_weights(const char *dir, const char *id, void (*progress)(void *, double), void *user)
{
    wt_set *ws;
    if (wt_set_open(dir, &ws, NULL) != KILN_OK) return; /* the load proper will say why */
    uint64_t total = 0;
    int nf = wt_set_file_count(ws);
    for (int i = 0; i < nf; i++) {
        struct stat st;
        if (stat(wt_st_path(wt_set_file_at(ws, i)), &st) == 0) total += (uint64_t)st.st_size;
    }
    uint64_t mem = plat_total_memory();
    if (total < (64u << 20) || (mem && total > mem / 2)) { /* tiny: instant; huge: let mmap page */
        wt_set_close(ws);
        return;
    }
    char label[128];
    snprintf(label, sizeof label, "loading %s", id);
    cli_progress p;
    cli_progress_begin(&p, label, total, 1);
    enum { CHUNK = 8 << 20 };
    char *buf = malloc(CHUNK);
    uint64_t done = 0;
    for (int i = 0; buf && i < nf; i++) {
        int fd = open(wt_st_path(wt_set_file_at(ws, i)), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t k;
        while ((k = read(fd, buf, CHUNK)) > 0) {
            done += (uint64_t)k;
            cli_progress_update(&p, done);
            if (progress) progress(user, (double)done / (double)total);
        }
        close(fd);
    }
    cli_progress_end(&p, done);
    free(buf);
    wt_set_close(ws);
}

/* ---------------------------------------------------------------- kiln ls */

typedef struct {
    char id[512], dir[4096], where[16];
} found;

typedef struct {
    found *v;
    size_t n, cap;
} found_list;

static void add(found_list *l, const char *id, const char *dir, const char *where)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].dir, dir)) return;
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 16;
        found *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) return;
        l->v = nv;
        l->cap = nc;
    }
    found *f = &l->v[l->n++];
    snprintf(f->id, sizeof f->id, "%s", id);
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    snprintf(f->where, sizeof f->where, "%s", where);
}

static int cmp_found(const void *a, const void *b)
{
    return strcmp(((const found *)a)->id, ((const found *)b)->id);
}

static void scan_hub(found_list *l)
{
    char hub[2048];
    cli_hf_hub_dir(hub, sizeof hub);
    DIR *d = opendir(hub);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "models--", 8) != 0) continue;
        const char *s = e->d_name + 8, *sep = strstr(s, "--");
        char id[512], dir[4096];
        if (sep) snprintf(id, sizeof id, "%.*s/%s", (int)(sep - s), s, sep + 2);
        else snprintf(id, sizeof id, "%s", s);
        if (cli_hf_resolve(id, dir, sizeof dir, NULL) == KILN_OK) add(l, id, dir, "hf-cache");
    }
    closedir(d);
}

static void scan_folder(found_list *l, const char *root)
{
    if (has_config(root)) {
        const char *b = strrchr(root, '/');
        add(l, b && b[1] ? b + 1 : root, root, "folder");
    }
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        if (plat_is_dir(dir) && has_config(dir)) add(l, e->d_name, dir, "folder");
    }
    closedir(d);
}

/* Bytes of the regular files under dir (links followed: the HF cache links into blobs/). */
static uint64_t dir_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    uint64_t sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0) continue;
        if (S_ISREG(st.st_mode)) sum += (uint64_t)st.st_size;
        else if (S_ISDIR(st.st_mode)) sum += dir_bytes(p);
    }
    closedir(d);
    return sum;
}

static void human_bytes(char *out, size_t n, uint64_t b)
{
    if (b >= 1000000000ull) snprintf(out, n, "%.1f GB", (double)b / 1e9);
    else if (b >= 1000000ull) snprintf(out, n, "%.1f MB", (double)b / 1e6);
    else snprintf(out, n, "%.0f KB", (double)b / 1e3);
}

/* One row: fills fmt/arch/ok/fits (what `kiln ls` prints). */
static json_t *describe(const found *f, uint64_t mem)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:I}", "id", f->id, "path", f->dir, "source", f->where,
                          "size_bytes", (json_int_t)dir_bytes(f->dir));
    if (!o) return NULL;
    kiln_err err;
    wt_config c;
    if (wt_config_load(f->dir, &c, &err) != KILN_OK) {
        json_object_set_new(o, "supported", json_false());
        json_object_set_new(o, "why", json_string(err.msg));
        return o;
    }
    json_object_set_new(o, "architecture", json_string(c.architecture));
    wt_config_free(&c);
    mdl_model *m;
    if (mdl_load(f->dir, &m, &err) != KILN_OK) {
        json_object_set_new(o, "supported", json_false());
        json_object_set_new(o, "why", json_string(err.msg));
        return o;
    }
    mdl_info info = mdl_get_info(m);
    mdl_free(m);
    json_object_set_new(o, "supported", json_true());
    json_object_set_new(o, "format", json_string(info.quant_desc));
    json_object_set_new(o, "parameters", json_integer((json_int_t)info.n_params));
    eng_runtime_opts ro = eng_runtime_opts_default();
    ro.max_seqs = 1;
    eng_fit fit;
    if (eng_fit_model(f->dir, &ro, &fit, &err) == KILN_OK) {
        json_object_set_new(o, "fit_bytes", json_integer((json_int_t)fit.total_bytes));
        json_object_set_new(o, "fit_ctx", json_integer(fit.o.ctx));
        if (mem) json_object_set_new(o, "fits", json_boolean(fit.total_bytes <= mem));
    }
    return o;
}

int cli_ls(int argc, char **argv)
{
    const char *dirs = NULL;
    int json = 0;
    cli_flag flags[] = {
        {"models-dir", CLI_STR, &dirs, "DIR[,DIR]", "also list the model folders in DIR", 0},
        {"json", CLI_BOOL, &json, NULL, "print one JSON array", 0},
        {0},
    };
    int pr = cli_parse("ls", "List the models on this machine: the Hugging Face cache, --models-dir "
                             "folders and the built-in default.", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    found_list l = {0};
    char def[4096];
    if (cli_default_model(def, sizeof def) == 0) add(&l, CLI_DEFAULT_MODEL_NAME, def, "built-in");
    scan_hub(&l);
    if (dirs) {
        char *copy = strdup(dirs), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t; t = strtok_r(NULL, ",", &save)) {
            if (!plat_is_dir(t)) {
                fprintf(stderr, "kiln ls: --models-dir %s is not a folder\n", t);
                free(copy);
                free(l.v);
                return 2;
            }
            scan_folder(&l, t);
        }
        free(copy);
    }
    if (l.n > 1) qsort(l.v + 1, l.n - 1, sizeof *l.v, cmp_found); /* the built-in stays first */
    uint64_t mem = plat_total_memory();
    json_t *arr = json_array();
    for (size_t i = 0; i < l.n && arr; i++) json_array_append_new(arr, describe(&l.v[i], mem));
    free(l.v);
    if (!arr) return cli_fail("ls", &(kiln_err){KILN_E_NOMEM, "out of memory"});
    if (json) {
        char *s = json_dumps(arr, JSON_INDENT(2));
        printf("%s\n", s ? s : "[]");
        free(s);
        json_decref(arr);
        return 0;
    }
    char memh[32];
    human_bytes(memh, sizeof memh, mem);
    printf("%-44s %9s  %-30s %-22s %-9s %s\n", "ID", "SIZE", "FORMAT", "ARCHITECTURE", "SUPPORTED",
           "FITS (1 seq, default ctx)");
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        char size[32], need[32], fits[80] = "-";
        human_bytes(size, sizeof size, (uint64_t)json_integer_value(json_object_get(o, "size_bytes")));
        json_t *fb = json_object_get(o, "fit_bytes");
        if (fb) {
            human_bytes(need, sizeof need, (uint64_t)json_integer_value(fb));
            snprintf(fits, sizeof fits, "%s (%s at ctx %d of %s)",
                     json_is_true(json_object_get(o, "fits")) ? "yes" : "no", need,
                     (int)json_integer_value(json_object_get(o, "fit_ctx")), memh);
        }
        const char *arch = json_string_value(json_object_get(o, "architecture"));
        const char *fmt = json_string_value(json_object_get(o, "format"));
        int ok = json_is_true(json_object_get(o, "supported"));
        printf("%-44s %9s  %-30.30s %-22.22s %-9s %s\n", json_string_value(json_object_get(o, "id")),
               size, fmt ? fmt : "-", arch ? arch : "-", ok ? "yes" : "no", fits);
        if (!ok) printf("    %s\n", json_string_value(json_object_get(o, "why")));
    }
    if (!json_array_size(arr)) printf("(no models; kiln get ORG/NAME downloads one)\n");
    json_decref(arr);
    return 0;
}

/* ---------------------------------------------------------------- kiln rm */

/* Deletes path and everything under it; links are removed, never followed (lstat). */
static int rm_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (rm_tree(p) != 0) rc = -1;
    }
    closedir(d);
    return rmdir(path) != 0 ? -1 : rc;
}

int cli_rm(int argc, char **argv)
{
    int yes = 0;
    cli_flag flags[] = {
        {"yes", CLI_BOOL, &yes, NULL, "do not ask for confirmation", 0},
        {0},
    };
    const char *id = argc > 1 && strncmp(argv[1], "--", 2) != 0 ? argv[1] : NULL;
    if (id) {
        argv[1] = argv[0];
        argc--;
        argv++;
    }
    int pr = cli_parse("rm", "Delete a model from the Hugging Face cache: kiln rm ORG/NAME", flags,
                       argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!id || !cli_hf_is_repo_id(id)) {
        fprintf(stderr, "kiln rm: usage: kiln rm ORG/NAME [--yes] (a model of the Hugging Face cache; "
                        "see kiln ls)\n");
        return 2;
    }
    char hub[2048], rdir[4096];
    cli_hf_hub_dir(hub, sizeof hub);
    const char *slash = strchr(id, '/');
    snprintf(rdir, sizeof rdir, "%s/models--%.*s--%s", hub, (int)(slash - id), id, slash + 1);
    struct stat st;
    if (lstat(rdir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "kiln rm: %s is not in the Hugging Face cache (%s)\n", id, hub);
        return 1;
    }
    char size[32];
    human_bytes(size, sizeof size, dir_bytes(rdir));
    if (!yes) {
        if (!isatty(0)) {
            fprintf(stderr, "kiln rm: would delete %s (%s, %s); add --yes to confirm\n", id, size, rdir);
            return 2;
        }
        fprintf(stderr, "Delete %s (%s, %s)? [y/N] ", id, size, rdir);
        char line[16];
        if (!fgets(line, sizeof line, stdin) || (line[0] != 'y' && line[0] != 'Y')) {
            fprintf(stderr, "kiln rm: nothing deleted\n");
            return 1;
        }
    }
    if (rm_tree(rdir) != 0) {
        fprintf(stderr, "kiln rm: cannot delete all of %s: %s\n", rdir, strerror(errno));
        return 1;
    }
    printf("deleted %s (%s)\n", id, size);
    return 0;
}
