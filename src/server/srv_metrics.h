/*
 * srv_metrics.h — counters and latency histograms behind /metrics (Prometheus
 * text format 0.0.4): requests by route and status, tokens in/out, TTFT and
 * inter-token latency, plus the engine's gauges (queue, KV blocks, prefix cache).
 */
#ifndef KILN_SRV_METRICS_H
#define KILN_SRV_METRICS_H

#include <stdint.h>

#include "engine/eng_engine.h"
#include "server/srv_buf.h"

typedef struct srv_metrics srv_metrics;

/* API */
srv_metrics *srv_metrics_new(void); /* OWNED by the caller; NULL on OOM */
void srv_metrics_free(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, const char *route, int status);
void srv_metrics_tokens(srv_metrics *m, int64_t prompt, int64_t completion, int64_t cached);
void srv_metrics_ttft(srv_metrics *m, double seconds);
void srv_metrics_itl(srv_metrics *m, double seconds);
/* Appends the exposition text; st may be NULL (no model yet). */
int srv_metrics_render(srv_metrics *m, const eng_stats *st, double uptime_s, srv_buf *out);

#endif
