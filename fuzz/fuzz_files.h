/*
 * fuzz_files.h — what the targets that fuzz folders (model_dir, lora_dir)
 * share: splitting an input at the separator "\n<KILN>\n" and writing or
 * removing one file of a private folder.
 */
#ifndef KILN_FUZZ_FILES_H
#define KILN_FUZZ_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_SEP "\n<KILN>\n"
#define FUZZ_SEP_LEN 8

/* The first separator in p[0..n), or NULL. */
static inline const uint8_t *fuzz_find_sep(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i + FUZZ_SEP_LEN <= n; i++)
        if (p[i] == '\n' && !memcmp(p + i, FUZZ_SEP, FUZZ_SEP_LEN)) return p + i;
    return NULL;
}

/* Writes dir/name with p[0..n) (best effort: a failed write is an absent file). */
static inline void fuzz_put(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static inline void fuzz_rm(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

#endif
