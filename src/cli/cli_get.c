/*
 * cli_get.c — `kiln get REPO_ID`: download a Hugging Face snapshot into the
 * local cache with libcurl (see cli_hf.h for the layout).
 *
 * Steps: GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true for the
 * commit sha and file list (with LFS sha256 and sizes); then each file from
 * {endpoint}/{repo}/resolve/{sha}/{file} into snapshots/{sha}/{file}.incomplete,
 * resumed with a Range request when a partial file is there, verified against
 * the LFS sha256 (or the X-Linked-Etag header) and renamed into place; last,
 * refs/{rev} gets the sha. Files kiln never reads (*.bin, *.pth, *.gguf, ...)
 * are skipped. The endpoint is $KILN_HF_ENDPOINT, else $HF_ENDPOINT, else
 * https://huggingface.co; $HF_TOKEN is sent as a bearer token.
 */
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "cli/cli_hf.h"
#include "cli/cli_hf_sha256.h"
#include "cli/cli_progress.h"
#include "util/plat.h"

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *p;
    size_t len;
} mem_buf;

typedef struct {
    FILE *f;
    char etag[80];   /* X-Linked-Etag / ETag without quotes */
    long status;
    const char *name;
    cli_progress *bar; /* BORROWED: the whole download's progress; NULL = quiet */
    uint64_t before;   /* bytes of the earlier files (and of this one's resumed part) */
} dl_state;

static const char *endpoint(void)
{
    const char *e = getenv("KILN_HF_ENDPOINT");
    if (!e || !*e) e = getenv("HF_ENDPOINT");
    return e && *e ? e : "https://huggingface.co";
}

static int mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static size_t mem_write(char *data, size_t sz, size_t n, void *user)
{
    mem_buf *b = user;
    size_t add = sz * n;
    if (b->len + add > (64u << 20)) return 0; /* an API answer is small */
    char *np = realloc(b->p, b->len + add + 1);
    if (!np) return 0;
    memcpy(np + b->len, data, add);
    b->p = np;
    b->len += add;
    b->p[b->len] = 0;
    return add;
}

static size_t file_write(char *data, size_t sz, size_t n, void *user)
{
    dl_state *d = user;
    if (d->status >= 400) return sz * n; /* error page: not written */
    return fwrite(data, sz, n, d->f) * sz;
}

static size_t on_header(char *h, size_t sz, size_t n, void *user)
{
    dl_state *d = user;
    size_t len = sz * n;
    if (len > 5 && !strncmp(h, "HTTP/", 5)) {
        const char *sp = memchr(h, ' ', len);
        if (sp) d->status = strtol(sp + 1, NULL, 10);
        return len;
    }
    if (len > 15 && !strncasecmp(h, "x-linked-etag:", 14)) {
        const char *v = h + 14;
        while (*v == ' ' || *v == '"' || *v == 'W' || *v == '/') v++;
        size_t k = 0;
        while (k + 1 < sizeof d->etag && v + k < h + len && v[k] != '"' && v[k] != '\r' && v[k] != '\n')
            k++;
        memcpy(d->etag, v, k);
        d->etag[k] = 0;
    }
    return len;
}

static int on_progress(void *user, curl_off_t total, curl_off_t now, curl_off_t ut, curl_off_t un)
{
    dl_state *d = user;
    if (d->bar) cli_progress_update(d->bar, d->before + (uint64_t)now);
    return 0;
}

static CURL *easy(const char *url, struct curl_slist **hdrs)
{
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "kiln/0.1");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 15L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    const char *tok = getenv("HF_TOKEN");
    if (tok && *tok) {
        char h[1024];
        snprintf(h, sizeof h, "Authorization: Bearer %s", tok);
        *hdrs = curl_slist_append(*hdrs, h);
    }
    if (*hdrs) curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    return c;
}

static kiln_code net_fail(kiln_err *err, const char *url, CURLcode cc)
{
    return kiln_fail(err, KILN_E_IO, "cannot download %s: %s (offline? point KILN_HF_ENDPOINT at a "
                     "mirror, or copy the snapshot into the cache)", url, curl_easy_strerror(cc));
}

/* The revision's commit sha and file list (OWNED json). */
static kiln_code fetch_info(const char *repo, const char *rev, json_t **info, kiln_err *err)
{
    char url[2048];
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", endpoint(), repo, rev);
    struct curl_slist *h = NULL;
    mem_buf b = {0};
    CURL *c = easy(url, &h);
    if (!c) return kiln_fail(err, KILN_E_NOMEM, "curl: out of memory");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    kiln_code rc = KILN_OK;
    if (cc != CURLE_OK) rc = net_fail(err, url, cc);
    else if (status == 401 || status == 403 || status == 404)
        rc = kiln_fail(err, KILN_E_NOT_FOUND, "%s: repository '%s' (revision %s) not found, or gated "
                       "(set HF_TOKEN)", url, repo, rev);
    else if (status != 200) rc = kiln_fail(err, KILN_E_IO, "%s: HTTP %ld", url, status);
    if (!rc) {
        json_error_t je;
        *info = json_loadb(b.p ? b.p : "", b.len, 0, &je);
        if (!json_is_object(*info) || !json_is_string(json_object_get(*info, "sha")) ||
            !json_is_array(json_object_get(*info, "siblings"))) {
            json_decref(*info);
            *info = NULL;
            rc = kiln_fail(err, KILN_E_CORRUPT, "%s: unexpected answer (no sha / siblings)", url);
        }
    }
    free(b.p);
    return rc;
}

static int wanted(const char *name)
{
    static const char *const skip[] = {".bin", ".pth", ".pt", ".gguf", ".onnx", ".h5", ".msgpack",
                                       ".ot", ".ckpt", ".tflite", ".mlmodel", ".npz"};
    if (!*name || name[0] == '/' || strstr(name, "..")) return 0; /* never leave the snapshot */
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof skip / sizeof *skip; i++) {
        size_t k = strlen(skip[i]);
        if (n > k && !strcmp(name + n - k, skip[i])) return 0;
    }
    return 1;
}

static long long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

/* Downloads one file into dest (resuming dest.incomplete), checks sha256. */
static kiln_code fetch_file(const char *repo, const char *sha, const char *name, const char *dest,
                            const char *want_sha, long long want_size, cli_progress *bar,
                            uint64_t before, kiln_err *err)
{
    if (file_size(dest) >= 0 && (want_size < 0 || file_size(dest) == want_size)) {
        char got[65];
        if (!want_sha || (cli_hf_sha256_file(dest, got) == 0 && !strcmp(got, want_sha))) return KILN_OK;
    }
    char url[4096], part[4200];
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", endpoint(), repo, sha, name);
    snprintf(part, sizeof part, "%s.incomplete", dest);
    long long have = file_size(part);
    if (have < 0 || (want_size >= 0 && have > want_size)) have = 0;
    dl_state d = {.name = name, .bar = bar, .before = before + (uint64_t)(have > 0 ? have : 0)};
    d.f = fopen(part, have > 0 ? "ab" : "wb");
    if (!d.f) return kiln_fail(err, KILN_E_IO, "cannot write %s: %s", part, strerror(errno));
    struct curl_slist *h = NULL;
    CURL *c = easy(url, &h);
    if (!c) {
        fclose(d.f);
        return kiln_fail(err, KILN_E_NOMEM, "curl: out of memory");
    }
    if (have > 0 && (want_size < 0 || have < want_size)) {
        curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)have);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, file_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &d);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &d);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &d);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    CURLcode cc = want_size == have && have > 0 ? CURLE_OK : curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    int wbad = fclose(d.f);
    if (cc != CURLE_OK) return net_fail(err, url, cc);
    if (status >= 400) return kiln_fail(err, KILN_E_IO, "%s: HTTP %ld", url, status);
    if (wbad) return kiln_fail(err, KILN_E_IO, "cannot write %s", part);
    if (!want_sha && strlen(d.etag) == 64) want_sha = d.etag; /* LFS: the etag is the sha256 */
    if (want_size >= 0 && file_size(part) != want_size)
        return kiln_fail(err, KILN_E_CORRUPT, "%s: got %lld bytes, expected %lld (run kiln get "
                         "again to resume)", name, file_size(part), want_size);
    if (want_sha) {
        char got[65];
        if (cli_hf_sha256_file(part, got)) return kiln_fail(err, KILN_E_IO, "cannot read %s", part);
        if (strcmp(got, want_sha) != 0) {
            unlink(part);
            return kiln_fail(err, KILN_E_CORRUPT, "%s: sha256 %s does not match the hub's %s "
                             "(deleted; run kiln get again)", name, got, want_sha);
        }
    }
    if (rename(part, dest)) return kiln_fail(err, KILN_E_IO, "cannot rename %s: %s", part, strerror(errno));
    return KILN_OK;
}

kiln_code cli_hf_download(const char *repo, int quiet, char *out, size_t n, kiln_err *err)
{
    if (!cli_hf_is_repo_id(repo))
        return kiln_fail(err, KILN_E_INVALID, "'%s' is not a Hugging Face repo id (ORG/NAME)", repo);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    json_t *info = NULL;
    kiln_code rc = fetch_info(repo, "main", &info, err);
    if (rc) return rc;
    const char *sha = json_string_value(json_object_get(info, "sha"));
    char hub[2048], rdir[4096], snap[4200], p[8192];
    cli_hf_hub_dir(hub, sizeof hub);
    const char *slash = strchr(repo, '/');
    snprintf(rdir, sizeof rdir, "%s/models--%.*s--%s", hub, (int)(slash - repo), repo, slash + 1);
    snprintf(snap, sizeof snap, "%s/snapshots/%s", rdir, sha);
    if (strchr(sha, '/') || strstr(sha, "..") || mkdirs(snap)) {
        json_decref(info);
        return kiln_fail(err, KILN_E_IO, "cannot create %s", snap);
    }
    size_t i;
    json_t *sib;
    int n_files = 0;
    uint64_t total = 0, done = 0; /* bytes of the files kiln keeps, for one progress bar */
    json_array_foreach(json_object_get(info, "siblings"), i, sib) {
        const char *name = json_string_value(json_object_get(sib, "rfilename"));
        json_t *sz = json_object_get(json_object_get(sib, "lfs"), "size");
        if (!sz) sz = json_object_get(sib, "size");
        if (name && wanted(name) && json_is_integer(sz)) total += (uint64_t)json_integer_value(sz);
    }
    cli_progress bar;
    cli_progress_begin(&bar, repo, total, 1);
    json_array_foreach(json_object_get(info, "siblings"), i, sib) {
        const char *name = json_string_value(json_object_get(sib, "rfilename"));
        if (!name || !wanted(name)) continue;
        json_t *lfs = json_object_get(sib, "lfs");
        const char *want_sha = json_string_value(json_object_get(lfs, "sha256"));
        json_t *sz = json_object_get(lfs, "size");
        if (!sz) sz = json_object_get(sib, "size");
        long long want_size = json_is_integer(sz) ? (long long)json_integer_value(sz) : -1;
        snprintf(p, sizeof p, "%s/%s", snap, name);
        char *dirsep = strrchr(p, '/');
        *dirsep = 0;
        if (mkdirs(p)) {
            rc = kiln_fail(err, KILN_E_IO, "cannot create %s", p);
            break;
        }
        *dirsep = '/';
        if ((rc = fetch_file(repo, sha, name, p, want_sha, want_size, quiet ? NULL : &bar, done, err)))
            break;
        done += want_size > 0 ? (uint64_t)want_size : 0;
        n_files++;
    }
    if (!quiet) cli_progress_end(&bar, done);
    if (!rc) {
        snprintf(p, sizeof p, "%s/refs", rdir);
        mkdirs(p);
        snprintf(p, sizeof p, "%s/refs/main", rdir);
        FILE *f = fopen(p, "w");
        if (!f || fputs(sha, f) < 0 || fclose(f)) rc = kiln_fail(err, KILN_E_IO, "cannot write %s", p);
        else snprintf(out, n, "%s", snap);
        if (!rc && !quiet) fprintf(stderr, "kiln get: %s: %d files in %s\n", repo, n_files, snap);
    }
    json_decref(info);
    return rc;
}

int cli_get(int argc, char **argv)
{
    int quiet = 0;
    cli_flag flags[] = {
        {"quiet", CLI_BOOL, &quiet, NULL, "no progress output", 0},
        {0},
    };
    const char *repo = argc > 1 && strncmp(argv[1], "--", 2) != 0 ? argv[1] : NULL;
    if (repo) {
        argv[1] = argv[0];
        argc--;
        argv++;
    }
    int pr = cli_parse("get", "Download a Hugging Face model snapshot into the local cache: "
                              "kiln get ORG/NAME", flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!repo) {
        fprintf(stderr, "kiln get: usage: kiln get ORG/NAME (e.g. %s)\n", CLI_HF_DEFAULT_MODEL);
        return 2;
    }
    char dir[4096];
    kiln_err err;
    if (cli_hf_download(repo, quiet, dir, sizeof dir, &err)) return cli_fail("get", &err);
    printf("%s\n", dir);
    return 0;
}
