/*
 * cli_lora.h — the adapters `kiln serve` loads at startup (docs/lora.md):
 * `--lora NAME=DIR` (repeatable) and every sub-folder of `--lora-dir DIR` that
 * holds an adapter_config.json (named after the folder).
 */
#ifndef KILN_CLI_LORA_H
#define KILN_CLI_LORA_H

#include "cli/cli_args.h"
#include "model/mdl_model.h"
#include "server/srv_lora.h"

typedef struct {
    srv_adapter *ads; /* OWNED [n]: names OWNED (char *), adapters OWNED (mdl_lora_free) */
    int n;
    uint64_t bytes; /* memory the adapters hold */
} cli_loras;

/* API */
/* Loads every adapter named by specs / found under dir (may be NULL) for m.
 * Errors name the adapter and its folder. *out is filled; cli_loras_free. */
kiln_code cli_loras_load(const mdl_model *m, const cli_list *specs, const char *dir, cli_loras *out,
                         kiln_err *err);
void cli_loras_free(cli_loras *l);
/* The memory the same adapters will hold once loaded (mdl_lora_dir_bytes of
 * each), read from their tensor files' headers: memory plans count adapters
 * before the model is open. */
kiln_code cli_loras_bytes(const cli_list *specs, const char *dir, uint64_t *bytes, kiln_err *err);

#endif
