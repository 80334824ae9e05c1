/*
 * cli_main.c — `kiln <verb> [flags]`: dispatches to the verbs.
 */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("usage: kiln <verb> [flags]\n");
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "kiln: unknown verb '%s' (try kiln --help)\n", argv[1]);
    return 2;
}
