/*
 * cli_args.c — see cli_args.h.
 */
#include "cli/cli_args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_usage(const char *verb, const char *summary, const cli_flag *flags)
{
    printf("usage: kiln %s [flags]\n\n%s\n\nflags:\n", verb, summary);
    for (const cli_flag *f = flags; f->name; f++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", f->name, f->meta ? " " : "", f->meta ? f->meta : "");
        printf("  %-26s %s\n", left, f->help);
    }
    printf("  %-26s %s\n", "--help", "show this help");
}

const cli_flag *cli_find(const cli_flag *flags, const char *name)
{
    for (const cli_flag *f = flags; f->name; f++)
        if (strcmp(f->name, name) == 0) return f;
    return NULL;
}

static int set_value(const char *verb, cli_flag *f, const char *v)
{
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case CLI_STR: *(const char **)f->dst = v; return 0;
    case CLI_LIST: {
        cli_list *l = f->dst;
        if (l->n >= CLI_LIST_MAX) {
            fprintf(stderr, "kiln %s: --%s: at most %d times\n", verb, f->name, CLI_LIST_MAX);
            return 2;
        }
        l->v[l->n++] = v;
        return 0;
    }
    case CLI_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || !*v || *end) break;
        *(int64_t *)f->dst = x;
        return 0;
    }
    case CLI_FLOAT: {
        double x = strtod(v, &end);
        if (errno || !*v || *end || !isfinite(x)) break;
        *(double *)f->dst = x;
        return 0;
    }
    case CLI_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1")) *(int *)f->dst = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "0")) *(int *)f->dst = 0;
        else break;
        return 0;
    }
    fprintf(stderr, "kiln %s: --%s: bad value '%s'\n", verb, f->name, v);
    return 2;
}

int cli_parse(const char *verb, const char *summary, cli_flag *flags, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_usage(verb, summary, flags);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "kiln %s: unexpected argument '%s' (see kiln %s --help)\n", verb, a,
                    verb);
            return 2;
        }
        char name[64];
        const char *eq = strchr(a + 2, '='), *val = NULL;
        size_t nl = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (nl >= sizeof name) nl = sizeof name - 1;
        memcpy(name, a + 2, nl);
        name[nl] = '\0';
        cli_flag *f = (cli_flag *)cli_find(flags, name);
        if (!f) {
            fprintf(stderr, "kiln %s: unknown flag --%s (see kiln %s --help)\n", verb, name, verb);
            return 2;
        }
        if (eq) val = eq + 1;
        else if (f->type == CLI_BOOL) val = "true";
        else if (i + 1 < argc) val = argv[++i];
        else {
            fprintf(stderr, "kiln %s: --%s needs a value\n", verb, name);
            return 2;
        }
        if (set_value(verb, f, val)) return 2;
        f->seen = 1;
    }
    return 0;
}
