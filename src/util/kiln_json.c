/*
 * kiln_json.c — see kiln_json.h. malloc/free underneath, so values made
 * before kiln_json_init (with jansson's defaults) free the same way.
 */
#include "util/kiln_json.h"

#include <jansson.h>
#include <stdlib.h>

static _Thread_local uint64_t failures;

static void *json_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p) failures++;
    return p;
}

void kiln_json_init(void)
{
    json_set_alloc_funcs(json_alloc, free);
}

uint64_t kiln_json_failures(void)
{
    return failures;
}
