/*
 * srv_metrics.c — Prometheus counters and histograms (see srv_metrics.h).
 * Requests are counted per (route, status) in a small fixed table; latency
 * histograms have fixed bucket bounds in seconds.
 * Threads: every HTTP thread records; one mutex guards it all (a handful of
 * updates per token, far below the cost of a step).
 */
#include "server/srv_metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 14
static const double bounds[N_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                         1,     2.5,  5,     10,   30,  60,   120};

typedef struct {
    uint64_t count[N_BUCKETS + 1]; /* last: +Inf */
    uint64_t n;
    double sum;
} histo;

#define N_REQ 64
typedef struct {
    char route[32];
    int status;
    uint64_t n;
} req_row;

struct srv_metrics {
    pthread_mutex_t mu;
    req_row req[N_REQ];
    int n_req;
    uint64_t prompt, completion, cached;
    histo ttft, itl;
};

srv_metrics *srv_metrics_new(void)
{
    srv_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void srv_metrics_request(srv_metrics *m, const char *route, int status)
{
    pthread_mutex_lock(&m->mu);
    int i;
    for (i = 0; i < m->n_req; i++)
        if (m->req[i].status == status && !strcmp(m->req[i].route, route)) break;
    if (i == m->n_req && m->n_req < N_REQ) {
        snprintf(m->req[i].route, sizeof m->req[i].route, "%s", route);
        m->req[i].status = status;
        m->n_req++;
    }
    if (i < N_REQ) m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens(srv_metrics *m, int64_t prompt, int64_t completion, int64_t cached)
{
    pthread_mutex_lock(&m->mu);
    m->prompt += (uint64_t)prompt;
    m->completion += (uint64_t)completion;
    m->cached += (uint64_t)cached;
    pthread_mutex_unlock(&m->mu);
}

static void observe(histo *h, double s)
{
    int b = 0;
    while (b < N_BUCKETS && s > bounds[b]) b++;
    h->count[b]++;
    h->n++;
    h->sum += s;
}

void srv_metrics_ttft(srv_metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, seconds);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_itl(srv_metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    observe(&m->itl, seconds);
    pthread_mutex_unlock(&m->mu);
}

static int put(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(srv_buf *b, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    return srv_buf_add(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int put_histo(srv_buf *b, const char *name, const char *help, const histo *h)
{
    int rc = put(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < N_BUCKETS; i++) {
        cum += h->count[i];
        rc |= put(b, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, bounds[i], cum);
    }
    cum += h->count[N_BUCKETS];
    rc |= put(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n", name,
              cum, name, h->sum, name, h->n);
    return rc;
}

static int put_counter(srv_buf *b, const char *name, const char *help, uint64_t v)
{
    return put(b, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", name, help, name, name, v);
}

static int put_gauge(srv_buf *b, const char *name, const char *help, double v)
{
    return put(b, "# HELP %s %s\n# TYPE %s gauge\n%s %.17g\n", name, help, name, name, v);
}

int srv_metrics_render(srv_metrics *m, const eng_stats *st, double uptime_s, srv_buf *b)
{
    pthread_mutex_lock(&m->mu);
    int rc = put(b, "# HELP kiln_requests_total HTTP requests by route and status.\n"
                    "# TYPE kiln_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        rc |= put(b, "kiln_requests_total{route=\"%s\",status=\"%d\"} %" PRIu64 "\n",
                  m->req[i].route, m->req[i].status, m->req[i].n);
    rc |= put_counter(b, "kiln_prompt_tokens_total", "Prompt tokens of finished requests.", m->prompt);
    rc |= put_counter(b, "kiln_completion_tokens_total", "Generated tokens.", m->completion);
    rc |= put_counter(b, "kiln_cached_prompt_tokens_total", "Prompt tokens served from the prefix cache.", m->cached);
    rc |= put_histo(b, "kiln_time_to_first_token_seconds", "Time from request to first token.", &m->ttft);
    rc |= put_histo(b, "kiln_inter_token_latency_seconds", "Time between streamed tokens.", &m->itl);
    pthread_mutex_unlock(&m->mu);
    rc |= put_gauge(b, "kiln_uptime_seconds", "Seconds since the server started.", uptime_s);
    if (!st) return rc;
    rc |= put_gauge(b, "kiln_requests_running", "Sequences in the batch.", st->running);
    rc |= put_gauge(b, "kiln_requests_waiting", "Requests in the queue.", st->waiting);
    rc |= put_gauge(b, "kiln_kv_blocks_total", "KV pool blocks.", st->kv.n_blocks);
    rc |= put_gauge(b, "kiln_kv_blocks_used", "KV blocks held by sequences.", st->kv.n_active);
    rc |= put_gauge(b, "kiln_kv_blocks_cached", "KV blocks kept for the prefix cache.", st->kv.n_cached);
    rc |= put_gauge(b, "kiln_kv_usage_ratio", "Fraction of KV blocks held by sequences.",
                    st->kv.n_blocks ? (double)st->kv.n_active / st->kv.n_blocks : 0.0);
    uint64_t look = st->kv.hits + st->kv.misses;
    rc |= put_counter(b, "kiln_prefix_cache_hits_total", "Prefix-cache block hits.", st->kv.hits);
    rc |= put_counter(b, "kiln_prefix_cache_misses_total", "Prefix-cache block misses.", st->kv.misses);
    rc |= put_gauge(b, "kiln_prefix_cache_hit_ratio", "Block hits / lookups.",
                    look ? (double)st->kv.hits / (double)look : 0.0);
    rc |= put_counter(b, "kiln_engine_steps_total", "Batched steps run.", st->steps);
    rc |= put_counter(b, "kiln_preemptions_total", "Sequences preempted for KV room.", st->preemptions);
    /* speculative decoding (docs/speculative.md): one series per drafting method */
    const eng_spec_stats *sp = &st->spec;
    static const struct {
        const char *name, *help;
        size_t off;
    } series[] = {
        {"kiln_spec_draft_tokens_total", "Draft tokens verified.", offsetof(eng_spec_stats, drafted)},
        {"kiln_spec_accepted_tokens_total", "Draft tokens accepted (equal to the model's own sample).",
         offsetof(eng_spec_stats, accepted)},
        {"kiln_spec_emitted_tokens_total", "Tokens emitted by rows that verified drafts.",
         offsetof(eng_spec_stats, emitted)},
        {"kiln_spec_verifications_total", "Row verifications (a row with drafts in a step).",
         offsetof(eng_spec_stats, rows)},
    };
    static const eng_spec_method methods[] = {ENG_SPEC_NGRAM, ENG_SPEC_DRAFT, ENG_SPEC_MTP};
    for (size_t i = 0; i < sizeof series / sizeof *series; i++) {
        rc |= put(b, "# HELP %s %s\n# TYPE %s counter\n", series[i].name, series[i].help,
                  series[i].name);
        for (size_t m = 0; m < sizeof methods / sizeof *methods; m++) {
            uint64_t v;
            memcpy(&v, (const char *)&st->spec_by[methods[m]] + series[i].off, sizeof v);
            rc |= put(b, "%s{method=\"%s\"} %" PRIu64 "\n", series[i].name,
                      eng_spec_method_name(methods[m]), v);
        }
    }
    rc |= put_counter(b, "kiln_spec_declined_total", "Drafts the step cost rule declined.",
                      sp->skipped_cost);
    rc |= put_gauge(b, "kiln_spec_acceptance_ratio", "Accepted / drafted tokens.",
                    sp->drafted ? (double)sp->accepted / (double)sp->drafted : 0.0);
    rc |= put_gauge(b, "kiln_spec_mean_accepted_length", "Accepted draft tokens per verification.",
                    sp->rows ? (double)sp->accepted / (double)sp->rows : 0.0);
    if (st->ssd_on) { /* SSD tier (--ssd-cache) */
        const kv_ssd_stats *d = &st->ssd;
        rc |= put_gauge(b, "kiln_ssd_cache_entries", "Entries on disk.", (double)d->entries);
        rc |= put_gauge(b, "kiln_ssd_cache_bytes", "Bytes on disk.", (double)d->bytes);
        rc |= put_gauge(b, "kiln_ssd_cache_pending", "Entries queued for writing.", (double)d->pending);
        rc |= put_counter(b, "kiln_ssd_cache_hits_total", "Blocks loaded from disk.", d->hits);
        rc |= put_counter(b, "kiln_ssd_cache_misses_total", "Disk lookups that found nothing.", d->misses);
        rc |= put_counter(b, "kiln_ssd_cache_written_total", "Entries made durable.", d->written);
        rc |= put_counter(b, "kiln_ssd_cache_dropped_total", "Queued entries dropped (queue full).", d->dropped);
        rc |= put_counter(b, "kiln_ssd_cache_failed_total", "Failed writes.", d->failed);
        rc |= put_counter(b, "kiln_ssd_cache_quarantined_total", "Corrupt entries set aside.", d->quarantined);
        rc |= put_counter(b, "kiln_ssd_cache_evicted_total", "Entries evicted by the size cap.", d->evicted);
        rc |= put_gauge(b, "kiln_ssd_cache_skipped",
                        "Entries of another KV format/adapter/block size left on disk.",
                        (double)d->skipped);
        rc |= put_gauge(b, "kiln_ssd_cache_strange",
                        "Names of entries that are no regular file of ours, left alone.",
                        (double)d->strange);
        rc |= put_counter(b, "kiln_ssd_cache_expired_total", "Checkpoints expired.", d->expired);
        rc |= put_counter(b, "kiln_ssd_cache_resumed_total",
                          "Times writing resumed after failed writes.", d->resumed);
        rc |= put_gauge(b, "kiln_ssd_cache_degraded",
                        "1 from a failed write (a full disk) until a write succeeds again.",
                        d->degraded);
    }
    return rc;
}
