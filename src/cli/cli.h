/*
 * cli.h — the verbs of `kiln`; each parses its flags and calls the layers below.
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdint.h>

#include "util/kiln_err.h"

/* API */
int cli_generate(int argc, char **argv);
int cli_logits(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_fit(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_get(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_detokenize(int argc, char **argv);
int cli_template(int argc, char **argv);

/* Shared helpers (cli_common.c) */
/* Parses "1,2,3" into a new array (*out, caller frees). Returns 0 or prints and returns 2. */
int cli_parse_ids(const char *verb, const char *s, int32_t **out, int32_t *n);
/* Prints "kiln VERB: msg" to stderr and returns 1. */
int cli_fail(const char *verb, const kiln_err *err);

#endif
