/*
 * srv_ssd.c — the SSD cache's HTTP surface: POST /admin/cache/flush and the
 * ssd_cache object of /stats. Reads the engine through eng_engine.h only.
 * Threads: any HTTP thread.
 */
#include "server/srv_int.h"

#define FLUSH_TIMEOUT_MS 30000

json_t *srv_ssd_stats_json(const eng_stats *st)
{
    const kv_ssd_stats *s = &st->ssd;
    json_t *j =
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:f}",
                  "entries", (json_int_t)s->entries, "bytes", (json_int_t)s->bytes, "hits",
                  (json_int_t)s->hits, "misses", (json_int_t)s->misses, "hit_tokens",
                  (json_int_t)(s->hits * (uint64_t)st->kv_block_tokens), "pending",
                  (json_int_t)s->pending, "dropped", (json_int_t)s->dropped, "failed",
                  (json_int_t)s->failed, "quarantined", (json_int_t)s->quarantined, "written",
                  (json_int_t)s->written, "evicted", (json_int_t)s->evicted, "checkpoints",
                  (json_int_t)s->ckpt_entries, "degraded", s->degraded, "scan_s", s->scan_s);
    if (j) { /* generation checkpoints queued / requests resumed from one */
        json_object_set_new(j, "checkpoints_saved", json_integer((json_int_t)st->ckpt_saved));
        json_object_set_new(j, "checkpoints_resumed", json_integer((json_int_t)st->ckpt_resumed));
        /* entries of this model under another KV format / adapters / block size */
        json_object_set_new(j, "skipped", json_integer((json_int_t)s->skipped));
        json_object_set_new(j, "skipped_bytes", json_integer((json_int_t)s->skipped_bytes));
        /* names that are no regular file of ours; checkpoints expired; writes resumed */
        json_object_set_new(j, "strange", json_integer((json_int_t)s->strange));
        json_object_set_new(j, "expired", json_integer((json_int_t)s->expired));
        json_object_set_new(j, "resumed", json_integer((json_int_t)s->resumed));
        /* the write queue: bytes of copies waiting for the disk, and its cap
         * (--ssd-queue-mib, counted in --memory-budget) */
        json_object_set_new(j, "queue_bytes", json_integer((json_int_t)s->pending_bytes));
        json_object_set_new(j, "queue_max_bytes", json_integer((json_int_t)s->queue_cap));
    }
    return j;
}

int srv_route_cache_flush(srv_server *s, json_t **body)
{
    eng_engine *e = atomic_load(&s->engine);
    srv_error er;
    if (!e) {
        er = srv_error_make(SRV_E_LOADING, NULL, "the model is still loading");
        *body = srv_error_json(&er);
        return srv_error_status(SRV_E_LOADING);
    }
    eng_flush_result r;
    kiln_err err;
    if (eng_cache_flush(e, FLUSH_TIMEOUT_MS, &r, &err) != KILN_OK) {
        er = srv_error_from(&err, NULL);
        *body = srv_error_json(&er);
        return srv_error_status(er.kind);
    }
    eng_stats st = eng_get_stats(e);
    *body = json_pack("{s:b, s:I, s:I, s:I, s:b, s:I, s:I}", "durable", r.durable, "flushed",
                      (json_int_t)r.flushed, "queued", (json_int_t)r.queued, "pending",
                      (json_int_t)r.pending, "degraded", r.degraded, "entries",
                      (json_int_t)st.ssd.entries, "bytes", (json_int_t)st.ssd.bytes);
    if (!*body) return 500;
    return r.durable ? 200 : 503;
}
