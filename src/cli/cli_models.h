/*
 * cli_models.h — the models on this machine: which one a verb serves (the
 * default carried in the repository, a folder, or a Hugging Face repo id that is
 * downloaded when missing), `kiln ls`, `kiln rm`, and reading a model's weights
 * with a progress bar before it is served.
 *
 *   char dir[4096], id[512];
 *   if (cli_pick_model("serve", f.model, f.offline, dir, sizeof dir, id, sizeof id)) return 1;
 */
#ifndef KILN_CLI_MODELS_H
#define KILN_CLI_MODELS_H

#include <stddef.h>
#include <stdint.h>

#define CLI_DEFAULT_MODEL_NAME "stories260K"

/* API */
/* The model kiln carries (models/stories260K): $KILN_DEFAULT_MODEL, else next to the
 * executable (../models or ../share/kiln/models), else the source tree it was built
 * from. 0 with the folder in out, -1 when none is there. */
int cli_default_model(char *out, size_t n);
/* model: a folder, ORG/NAME (cached, else downloaded unless offline or
 * $HF_HUB_OFFLINE=1), or NULL for the default. Prints what it does and any failure
 * as "kiln VERB: ..."; returns 0, or 1 on failure. */
int cli_pick_model(const char *verb, const char *model, int offline, char *dir, size_t n, char *id,
                   size_t id_n);
/* Reads the model's weight files once, with a progress bar ("loading ID"), so that
 * the first request does not pay for a cold disk; skipped when they would not fit
 * in half the machine's memory. progress(user, fraction) is called as it goes. */
void cli_warm_weights(const char *dir, const char *id, void (*progress)(void *, double), void *user);
int cli_ls(int argc, char **argv);
int cli_rm(int argc, char **argv);

#endif
