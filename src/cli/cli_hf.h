/*
 * cli_hf.h — the local Hugging Face cache: where snapshots live, how a repo id
 * maps to a folder, and downloading one into it (cli_get.c).
 *
 *   char dir[4096]; kiln_err err;
 *   if (cli_hf_resolve("mlx-community/Qwen3-0.6B-4bit", dir, sizeof dir, &err)) ...;
 *
 * Layout (as huggingface_hub writes it): HUB/models--ORG--NAME/refs/main holds
 * a commit hash; HUB/models--ORG--NAME/snapshots/HASH/ holds the files (there
 * as links into blobs/, here as plain files: both read the same).
 * HUB is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub.
 */
#ifndef KILN_CLI_HF_H
#define KILN_CLI_HF_H

#include <stddef.h>

#include "util/kiln_err.h"

#define CLI_HF_DEFAULT_MODEL "mlx-community/Qwen3-0.6B-4bit"

/* API */
/* HUB folder into out. */
void cli_hf_hub_dir(char *out, size_t n);
/* Does s look like ORG/NAME (and not like an existing path)? */
int cli_hf_is_repo_id(const char *s);
/* A local folder as is; else a repo id's cached snapshot. KILN_E_NOT_FOUND
 * with advice when it is neither. */
kiln_code cli_hf_resolve(const char *model, char *out, size_t n, kiln_err *err);
/* The first cached snapshot kiln can load (the default starter first); its
 * repo id into id_out. KILN_E_NOT_FOUND when there is none. */
kiln_code cli_hf_find_cached(char *out, size_t n, char *id_out, size_t id_n, kiln_err *err);
/* Downloads repo_id (revision "main") into the cache; *out gets the snapshot
 * folder. quiet: no progress bar. (cli_get.c) */
kiln_code cli_hf_download(const char *repo_id, int quiet, char *out, size_t n, kiln_err *err);

#endif
