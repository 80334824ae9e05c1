/*
 * cli_args.h — table-driven flag parsing for `kiln <verb> [flags]`.
 *
 *   const char *model = NULL; int64_t n = 16;
 *   cli_flag flags[] = {
 *       {"model", CLI_STR, &model, "DIR", "model snapshot folder"},
 *       {"max-tokens", CLI_INT, &n, "N", "tokens to generate"},
 *       {0}};
 *   if (cli_parse("generate", "Generate text.", flags, argc, argv)) return 2;
 *
 * Accepts --name value and --name=value; CLI_BOOL flags take no value (or
 * =true/=false). --help prints every flag with its help text and exits 0.
 */
#ifndef KILN_CLI_ARGS_H
#define KILN_CLI_ARGS_H

#include <stdint.h>

typedef enum { CLI_STR, CLI_INT, CLI_FLOAT, CLI_BOOL, CLI_LIST } cli_type;

/* A repeatable string flag (CLI_LIST): every value in order. */
#define CLI_LIST_MAX 32
typedef struct {
    const char *v[CLI_LIST_MAX]; /* BORROWED from argv */
    int n;
} cli_list;

typedef struct {
    const char *name; /* without the leading -- ; NULL ends the table */
    cli_type type;
    void *dst;        /* const char **, int64_t *, double *, int *, cli_list * */
    const char *meta; /* "N", "DIR" ... */
    const char *help;
    int seen;         /* OUT: set when given */
} cli_flag;

/* API */
/* Returns 0 on success, 1 after printing help (caller exits 0), 2 on error
 * (message printed; caller exits 2). argv[0] is the verb. */
int cli_parse(const char *verb, const char *summary, cli_flag *flags, int argc, char **argv);
void cli_usage(const char *verb, const char *summary, const cli_flag *flags);
const cli_flag *cli_find(const cli_flag *flags, const char *name);

#endif
