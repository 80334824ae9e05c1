/*
 * test_srv_reqmem.c — the request memory account (util/kiln_json.h) and the
 * Responses store's byte count (issue 20, items 3-5 and 4): jansson trees
 * parsed with the charge on are counted and uncharged when freed (on any
 * thread); past the cap a parse fails cleanly as a budget failure and says how
 * much it needed; reservations never pass the cap, even from many threads; the
 * store counts what its copy holds in memory, not its text.
 */
#include "server/srv_json.h"
#include "server/srv_rstore.h"
#include "test.h"
#include "util/kiln_json.h"

#include <jansson.h>
#include <pthread.h>

static json_t *load_charged(const char *text)
{
    json_error_t je;
    return srv_json_load_request(text, strlen(text), 0, &je);
}

static void *decref_thread(void *p)
{
    json_decref(p);
    return NULL;
}

static void test_charged_trees_are_counted_and_uncharged_on_any_thread(void)
{
    kiln_reqmem_set_cap(0);
    uint64_t u0 = kiln_reqmem_used();
    json_t *j = load_charged("[1,2,3,{\"a\":\"bcd\",\"e\":[true,null]}]");
    ASSERT_TRUE(j != NULL);
    uint64_t held = kiln_reqmem_used() - u0;
    ASSERT_TRUE(held >= 9 * 16); /* 9 values and the pair storage, each >= 16 bytes */
    json_t *plain = json_loads("[1,2,3]", 0, NULL); /* not charged */
    ASSERT_EQ_U64(kiln_reqmem_used() - u0, held);
    json_decref(plain);
    pthread_t t;
    ASSERT_EQ_I64(pthread_create(&t, NULL, decref_thread, j), 0); /* freed elsewhere */
    pthread_join(t, NULL);
    ASSERT_EQ_U64(kiln_reqmem_used(), u0);
}

static void test_a_parse_past_the_cap_fails_as_a_budget_failure(void)
{
    uint64_t u0 = kiln_reqmem_used();
    kiln_reqmem_set_cap(u0 + 64 * 1024);
    /* 120,000 empty messages: 3.4 MB of text, tens of MB of values */
    const char one[] = "{\"role\":\"user\",\"content\":\"\"},";
    size_t n = 120000, len = 2 + n * (sizeof one - 1);
    char *text = malloc(len + 1);
    ASSERT_TRUE(text != NULL);
    text[0] = '[';
    for (size_t i = 0; i < n; i++)
        memcpy(text + 1 + i * (sizeof one - 1), one, sizeof one - 1);
    text[len - 2] = ']'; /* over the last comma */
    text[len - 1] = 0;
    uint64_t f0 = kiln_json_failures(), b0 = kiln_json_budget_failures();
    json_t *j = load_charged(text);
    free(text);
    ASSERT_TRUE(j == NULL);
    ASSERT_TRUE(kiln_json_failures() > f0);
    ASSERT_TRUE(kiln_json_budget_failures() > b0);
    ASSERT_TRUE(kiln_json_budget_need() > 64 * 1024 - 4096); /* it held about the cap */
    ASSERT_EQ_U64(kiln_reqmem_used(), u0);                   /* and gave it all back */
    /* a small tree still fits */
    j = load_charged("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
    ASSERT_TRUE(j != NULL);
    json_decref(j);
    ASSERT_EQ_U64(kiln_reqmem_used(), u0);
    kiln_reqmem_set_cap(0);
}

#define RES_THREADS 8
static _Atomic int over_cap;

static void *reserve_thread(void *p)
{
    (void)p;
    for (int i = 0; i < 20000; i++) {
        uint64_t n = 1 + (uint64_t)(i * 7919) % 3000;
        if (kiln_reqmem_reserve(n)) {
            if (kiln_reqmem_used() > kiln_reqmem_cap()) over_cap = 1;
            kiln_reqmem_release(n);
        }
    }
    return NULL;
}

static void test_reservations_never_pass_the_cap(void)
{
    uint64_t u0 = kiln_reqmem_used();
    kiln_reqmem_set_cap(u0 + 10000);
    ASSERT_TRUE(kiln_reqmem_reserve(10000));
    ASSERT_TRUE(!kiln_reqmem_reserve(1));
    kiln_reqmem_release(10000);
    pthread_t t[RES_THREADS];
    for (int i = 0; i < RES_THREADS; i++)
        ASSERT_EQ_I64(pthread_create(&t[i], NULL, reserve_thread, NULL), 0);
    for (int i = 0; i < RES_THREADS; i++)
        pthread_join(t[i], NULL);
    ASSERT_TRUE(!over_cap);
    ASSERT_EQ_U64(kiln_reqmem_used(), u0);
    kiln_reqmem_set_cap(0);
}

static void test_store_counts_memory_not_text(void)
{
    srv_rstore *st;
    ASSERT_EQ_I64(srv_rstore_create(3600, (size_t)8 << 20, &st, NULL), KILN_OK);
    /* 300,000 zeros: 0.6 MB of text, well over 8 MiB of values */
    json_t *arr = json_array();
    for (int i = 0; i < 300000; i++)
        json_array_append_new(arr, json_integer(0));
    json_t *big = json_pack("[{s:s, s:o}]", "role", "tool", "content", arr);
    ASSERT_TRUE(big != NULL);
    srv_rstore_put(st, "big", big);
    json_decref(big);
    srv_rstore_stats s = srv_rstore_get_stats(st);
    ASSERT_EQ_I64(s.entries, 0);
    ASSERT_EQ_I64(s.refused, 1);
    ASSERT_TRUE(srv_rstore_get(st, "big") == NULL);
    /* a small entry: its bytes are its memory (more than its 36 bytes of text) */
    json_t *small = json_loads("[{\"role\":\"user\",\"content\":\"hello\"}]", 0, NULL);
    srv_rstore_put(st, "s", small);
    json_decref(small);
    s = srv_rstore_get_stats(st);
    ASSERT_EQ_I64(s.entries, 1);
    ASSERT_TRUE(s.bytes > 36 + 2 && s.bytes < 4096);
    srv_rstore_destroy(st);
}

int main(void)
{
    kiln_json_init(); /* as main() does */
    RUN(test_charged_trees_are_counted_and_uncharged_on_any_thread);
    RUN(test_a_parse_past_the_cap_fails_as_a_budget_failure);
    RUN(test_reservations_never_pass_the_cap);
    RUN(test_store_counts_memory_not_text);
    return TEST_DONE();
}
