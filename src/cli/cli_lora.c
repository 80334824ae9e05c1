/*
 * cli_lora.c — `--lora NAME=DIR` / `--lora-dir DIR` into loaded adapters
 * (cli_lora.h). Only these startup paths are ever read: requests name adapters.
 */
#include "cli/cli_lora.h"
#include "util/kiln_log.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '-' || s[i] == '_' || s[i] == '.' || (s[i] >= '0' && s[i] <= '9') ||
              (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return s[0] != '.';
}

static kiln_code add(const mdl_model *m, const char *name, size_t nl, const char *dir, cli_loras *l,
                     kiln_err *err)
{
    if (!name_ok(name, nl))
        return kiln_fail(err, KILN_E_INVALID,
                         "adapter name '%.*s': use 1-64 letters, digits, '-', '_' or '.'", (int)nl,
                         name);
    for (int i = 0; i < l->n; i++)
        if (strlen(l->ads[i].name) == nl && strncmp(l->ads[i].name, name, nl) == 0)
            return kiln_fail(err, KILN_E_INVALID, "adapter name '%.*s' is given twice", (int)nl,
                             name);
    srv_adapter *na = realloc(l->ads, sizeof *na * (size_t)(l->n + 1));
    if (!na) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    l->ads = na;
    char *nm = strndup(name, nl);
    if (!nm) return kiln_fail(err, KILN_E_NOMEM, "out of memory");
    mdl_lora *a = NULL;
    kiln_code rc = mdl_lora_load(m, dir, &a, err);
    if (rc) {
        free(nm);
        return kiln_err_prefix(err, "adapter '%.*s' (%s): ", (int)nl, name, dir);
    }
    l->ads[l->n++] = (srv_adapter){.name = nm, .lora = a};
    mdl_lora_info in = mdl_lora_get_info(a);
    l->bytes += in.bytes;
    KLOG_INFO("lora",
              "adapter=%s dir=\"%s\" format=%s rank=%d scale=%g modules=%d targets=%s "
              "bytes=%llu",
              nm, dir, in.format == MDL_LORA_PEFT ? "peft" : "mlx-lm", (int)in.rank,
              (double)in.scale, (int)in.n_modules, in.targets, (unsigned long long)in.bytes);
    return KILN_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef kiln_code (*adapter_fn)(void *ctx, const char *name, size_t nl, const char *dir,
                                kiln_err *err);

/* Calls fn for every adapter of --lora specs, then of --lora-dir's sub-folders
 * (sorted by name). */
static kiln_code each_adapter(const cli_list *specs, const char *dir, adapter_fn fn, void *ctx,
                              kiln_err *err)
{
    kiln_code rc = KILN_OK;
    for (int i = 0; !rc && specs && i < specs->n; i++) {
        const char *eq = strchr(specs->v[i], '=');
        if (!eq || !eq[1])
            rc = kiln_fail(err, KILN_E_INVALID, "--lora %s: expected NAME=DIR", specs->v[i]);
        else
            rc = fn(ctx, specs->v[i], (size_t)(eq - specs->v[i]), eq + 1, err);
    }
    if (!rc && dir) {
        DIR *d = opendir(dir);
        if (!d) rc = kiln_fail(err, KILN_E_NOT_FOUND, "--lora-dir %s: cannot open the folder", dir);
        char *names[256];
        int n = 0;
        struct dirent *de;
        while (d && (de = readdir(d)) && n < 256) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s/adapter_config.json", dir, de->d_name);
            if (de->d_name[0] != '.' && access(p, R_OK) == 0 && (names[n] = strdup(de->d_name)))
                n++;
        }
        if (d) closedir(d);
        qsort(names, (size_t)n, sizeof *names, cmp_str); /* n may be 0: names is a real array */
        for (int i = 0; i < n; i++) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, names[i]);
            if (!rc) rc = fn(ctx, names[i], strlen(names[i]), p, err);
            free(names[i]);
        }
    }
    return rc;
}

typedef struct {
    const mdl_model *m;
    cli_loras *l;
} load_ctx;

static kiln_code load_one(void *ctx, const char *name, size_t nl, const char *dir, kiln_err *err)
{
    load_ctx *c = ctx;
    return add(c->m, name, nl, dir, c->l, err);
}

kiln_code cli_loras_load(const mdl_model *m, const cli_list *specs, const char *dir, cli_loras *out,
                         kiln_err *err)
{
    memset(out, 0, sizeof *out);
    load_ctx c = {.m = m, .l = out};
    kiln_code rc = each_adapter(specs, dir, load_one, &c, err);
    if (rc) cli_loras_free(out);
    return rc;
}

static kiln_code bytes_one(void *ctx, const char *name, size_t nl, const char *dir, kiln_err *err)
{
    uint64_t b;
    if (mdl_lora_dir_bytes(dir, &b, err))
        return kiln_err_prefix(err, "adapter '%.*s' (%s): ", (int)nl, name, dir);
    *(uint64_t *)ctx += b;
    return KILN_OK;
}

kiln_code cli_loras_bytes(const cli_list *specs, const char *dir, uint64_t *bytes, kiln_err *err)
{
    *bytes = 0;
    return each_adapter(specs, dir, bytes_one, bytes, err);
}

void cli_loras_free(cli_loras *l)
{
    for (int i = 0; i < l->n; i++) {
        free((char *)l->ads[i].name);
        mdl_lora_free((mdl_lora *)l->ads[i].lora);
    }
    free(l->ads);
    memset(l, 0, sizeof *l);
}
