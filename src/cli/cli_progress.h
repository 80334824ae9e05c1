/*
 * cli_progress.h — progress for long work (downloads, model load, quantize):
 * a redrawn bar on a terminal, plain periodic lines otherwise (logs, CI).
 *
 *   cli_progress p;  cli_progress_begin(&p, "loading Qwen3-8B", total_bytes, 1);
 *   for (...) cli_progress_update(&p, done);
 *   cli_progress_end(&p, done);
 *
 * On a TTY (stderr): "label [#######-------]  42%  1.2/2.9 GiB  85 MiB/s  ETA 0:21",
 * redrawn at most 10 times a second. Otherwise one line every 5 s (and at the end):
 * "label: 42% (1.2/2.9 GiB, 85 MiB/s, ETA 21 s)". KILN_PROGRESS=0 silences both;
 * KILN_PROGRESS=lines forces the plain lines (tests).
 */
#ifndef KILN_CLI_PROGRESS_H
#define KILN_CLI_PROGRESS_H

#include <stdint.h>

typedef struct {
    char label[96];
    uint64_t total;  /* 0 = unknown */
    int bytes;       /* units are bytes (else items) */
    int mode;        /* 0 off, 1 bar, 2 lines */
    double t0, t_last;
    uint64_t base;   /* done at begin (resumed downloads): not counted in the rate */
    int drawn;
} cli_progress;

/* API */
void cli_progress_begin(cli_progress *p, const char *label, uint64_t total, int bytes);
/* Resumed work: `already` of total was done before begin (kept out of the rate). */
void cli_progress_resume(cli_progress *p, uint64_t already);
void cli_progress_update(cli_progress *p, uint64_t done);
void cli_progress_end(cli_progress *p, uint64_t done);
/* The progress callback lower layers take (util-free): user is a cli_progress *. */
void cli_progress_cb(void *user, uint64_t done, uint64_t total);

#endif
