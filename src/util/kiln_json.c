/*
 * kiln_json.c — see kiln_json.h. malloc/free underneath; each block gets one
 * byte more than asked, and its last usable byte (malloc_usable_size) marks
 * whether it is charged to the request memory account: a block freed by
 * jansson from any thread uncharges exactly its usable size.
 */
#define _GNU_SOURCE
#include "util/kiln_json.h"

#include <jansson.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "util/kiln_assert.h"

enum { MARK_FREE = 0x00, MARK_CHARGED = 0xc5 };

static _Thread_local uint64_t failures, budget_failures;
static _Thread_local int64_t net_bytes;
static _Thread_local uint64_t charged_here, budget_need; /* this thread's charged bytes held */
static _Thread_local bool charging;

static _Atomic uint64_t acct_cap, acct_used, acct_peak;

bool kiln_reqmem_reserve(uint64_t n)
{
    uint64_t cap = atomic_load(&acct_cap);
    uint64_t cur = atomic_load(&acct_used);
    for (;;) {
        if (n > UINT64_MAX - cur || (cap && cur + n > cap)) return false;
        if (atomic_compare_exchange_weak(&acct_used, &cur, cur + n)) break;
    }
    uint64_t now = cur + n, pk = atomic_load(&acct_peak);
    while (now > pk && !atomic_compare_exchange_weak(&acct_peak, &pk, now)) {
    }
    return true;
}

void kiln_reqmem_release(uint64_t n)
{
    uint64_t old = atomic_fetch_sub(&acct_used, n);
    KILN_ASSERT(old >= n); /* a release without its reserve */
}

void kiln_reqmem_set_cap(uint64_t cap)
{
    atomic_store(&acct_cap, cap);
}

uint64_t kiln_reqmem_cap(void)
{
    return atomic_load(&acct_cap);
}

uint64_t kiln_reqmem_used(void)
{
    return atomic_load(&acct_used);
}

uint64_t kiln_reqmem_peak(void)
{
    return atomic_load(&acct_peak);
}

static void *json_alloc(size_t n)
{
    if (n >= SIZE_MAX / 2) {
        failures++;
        return NULL;
    }
    bool charged = charging;
    /* reserve first (n + 1 is a lower bound of the usable size), then settle
     * the difference once the block's real size is known */
    if (charged && !kiln_reqmem_reserve(n + 1)) {
        failures++;
        budget_failures++;
        budget_need = charged_here + n + 1;
        return NULL;
    }
    unsigned char *p = malloc(n + 1);
    if (!p) {
        if (charged) kiln_reqmem_release(n + 1);
        failures++;
        return NULL;
    }
    size_t u = malloc_usable_size(p);
    if (charged && u > n + 1 && !kiln_reqmem_reserve(u - (n + 1))) {
        kiln_reqmem_release(n + 1);
        free(p);
        failures++;
        budget_failures++;
        budget_need = charged_here + u;
        return NULL;
    }
    if (charged) charged_here += u;
    p[u - 1] = charged ? MARK_CHARGED : MARK_FREE;
    net_bytes += (int64_t)u;
    return p;
}

static void json_free(void *ptr)
{
    if (!ptr) return;
    unsigned char *p = ptr;
    size_t u = malloc_usable_size(p);
    if (p[u - 1] == MARK_CHARGED) {
        kiln_reqmem_release(u);
        charged_here -= charged_here >= u ? u : charged_here; /* freed here or elsewhere */
    }
    net_bytes -= (int64_t)u;
    free(p);
}

void kiln_json_init(void)
{
    json_set_alloc_funcs(json_alloc, json_free);
}

uint64_t kiln_json_failures(void)
{
    return failures;
}

uint64_t kiln_json_budget_failures(void)
{
    return budget_failures;
}

uint64_t kiln_json_budget_need(void)
{
    return budget_need;
}

int64_t kiln_json_net_bytes(void)
{
    return net_bytes;
}

bool kiln_json_charge(bool on)
{
    bool was = charging;
    charging = on;
    return was;
}

/* ---------------------------------------------------------------- depth */

int kiln_json_text_depth(const char *s, size_t len, int limit)
{
    int d = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++; /* the escaped byte, a quote included, never ends the string */
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++d > max) max = d;
            if (max > limit) return limit + 1;
        } else if ((c == ']' || c == '}') && d > 0) {
            d--;
        }
    }
    return max;
}

static int value_depth(const json_t *j, int at, int limit)
{
    if (!json_is_array(j) && !json_is_object(j)) return at;
    if (++at > limit) return limit + 1;
    int max = at;
    if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j) && max <= limit; i++) {
            int d = value_depth(json_array_get(j, i), at, limit);
            if (d > max) max = d;
        }
    } else {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
        {
            int d = value_depth(v, at, limit);
            if (d > max) max = d;
            if (max > limit) break;
        }
    }
    return max;
}

int kiln_json_value_depth(const struct json_t *j, int limit)
{
    return j ? value_depth(j, 0, limit) : 0;
}
