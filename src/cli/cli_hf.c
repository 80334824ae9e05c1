/*
 * cli_hf.c — the local Hugging Face cache: hub folder, repo-id lookup, scan
 * for a loadable snapshot (see cli_hf.h). Downloads live in cli_get.c.
 */
#include "cli/cli_hf.h"
#include "util/plat.h"
#include "weights/wt_config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_hf_hub_dir(char *out, size_t n)
{
    const char *e = getenv("HF_HUB_CACHE");
    if (e && *e) {
        snprintf(out, n, "%s", e);
        return;
    }
    e = getenv("HF_HOME");
    if (e && *e) {
        snprintf(out, n, "%s/hub", e);
        return;
    }
    const char *home = getenv("HOME");
    snprintf(out, n, "%s/.cache/huggingface/hub", home && *home ? home : ".");
}

int cli_hf_is_repo_id(const char *s)
{
    const char *slash = strchr(s, '/');
    if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/')) return 0;
    if (s[0] == '.' || s[0] == '~') return 0;
    for (const char *p = s; *p; p++)
        if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') || ('0' <= *p && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.' || *p == '/'))
            return 0;
    return 1;
}

/* HUB/models--ORG--NAME for a repo id. */
static void repo_dir(const char *id, char *out, size_t n)
{
    char hub[2048], name[512];
    cli_hf_hub_dir(hub, sizeof hub);
    snprintf(name, sizeof name, "%s", id);
    for (char *p = name; *p; p++)
        if (*p == '/') *p = 0x01; /* placeholder for "--" */
    char flat[1024];
    size_t k = 0;
    for (const char *p = name; *p && k + 3 < sizeof flat; p++) {
        if (*p == 0x01) {
            flat[k++] = '-';
            flat[k++] = '-';
        } else {
            flat[k++] = *p;
        }
    }
    flat[k] = 0;
    snprintf(out, n, "%s/models--%s", hub, flat);
}

/* The snapshot refs/main points to, else any snapshot holding config.json. */
static int snapshot_of(const char *rdir, char *out, size_t n)
{
    char p[4096], *ref = NULL;
    size_t len = 0;
    snprintf(p, sizeof p, "%s/refs/main", rdir);
    if (plat_read_file(p, 256, &ref, &len, NULL) == KILN_OK) {
        while (len && (ref[len - 1] == '\n' || ref[len - 1] == ' ')) ref[--len] = 0;
        snprintf(out, n, "%s/snapshots/%s", rdir, ref);
        free(ref);
        snprintf(p, sizeof p, "%s/config.json", out);
        if (plat_is_file(p)) return 0;
    }
    snprintf(p, sizeof p, "%s/snapshots", rdir);
    DIR *d = opendir(p);
    if (!d) return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char cfg[4096];
        snprintf(cfg, sizeof cfg, "%s/%s/config.json", p, e->d_name);
        if (plat_is_file(cfg)) {
            snprintf(out, n, "%s/%s", p, e->d_name);
            found = 0;
            break;
        }
    }
    closedir(d);
    return found;
}

kiln_code cli_hf_resolve(const char *model, char *out, size_t n, kiln_err *err)
{
    if (plat_is_dir(model)) {
        snprintf(out, n, "%s", model);
        return KILN_OK;
    }
    if (!cli_hf_is_repo_id(model))
        return kiln_fail(err, KILN_E_NOT_FOUND, "'%s' is not a folder nor a Hugging Face repo id "
                         "(ORG/NAME)", model);
    char rdir[4096];
    repo_dir(model, rdir, sizeof rdir);
    if (snapshot_of(rdir, out, n) == 0) return KILN_OK;
    return kiln_fail(err, KILN_E_NOT_FOUND, "'%s' is not in the Hugging Face cache (%s); download "
                     "it with: kiln get %s", model, rdir, model);
}

static int loadable(const char *dir)
{
    wt_config c;
    if (wt_config_load(dir, &c, NULL) != KILN_OK) return 0;
    wt_config_free(&c);
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    return plat_is_file(p);
}

kiln_code cli_hf_find_cached(char *out, size_t n, char *id_out, size_t id_n, kiln_err *err)
{
    char hub[2048];
    cli_hf_hub_dir(hub, sizeof hub);
    if (cli_hf_resolve(CLI_HF_DEFAULT_MODEL, out, n, NULL) == KILN_OK && loadable(out)) {
        snprintf(id_out, id_n, "%s", CLI_HF_DEFAULT_MODEL);
        return KILN_OK;
    }
    DIR *d = opendir(hub);
    if (!d) return kiln_fail(err, KILN_E_NOT_FOUND, "no Hugging Face cache at %s", hub);
    struct dirent *e;
    kiln_code rc = KILN_E_NOT_FOUND;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "models--", 8) != 0) continue;
        char rdir[4096];
        snprintf(rdir, sizeof rdir, "%s/%s", hub, e->d_name);
        if (snapshot_of(rdir, out, n) || !loadable(out)) continue;
        /* models--ORG--NAME -> ORG/NAME */
        const char *s = e->d_name + 8, *sep = strstr(s, "--");
        if (sep) snprintf(id_out, id_n, "%.*s/%s", (int)(sep - s), s, sep + 2);
        else snprintf(id_out, id_n, "%s", s);
        rc = KILN_OK;
        break;
    }
    closedir(d);
    if (rc) return kiln_fail(err, rc, "no loadable model in the Hugging Face cache (%s)", hub);
    return KILN_OK;
}
