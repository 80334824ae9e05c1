/*
 * cli_progress.c — the progress bar and its plain-line form (see cli_progress.h).
 * Threads: one caller per cli_progress.
 */
#include "cli/cli_progress.h"
#include "util/plat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void human(char *out, size_t n, double v, int bytes)
{
    if (!bytes) snprintf(out, n, "%.0f", v);
    else if (v >= 1073741824.0) snprintf(out, n, "%.2f GiB", v / 1073741824.0);
    else if (v >= 1048576.0) snprintf(out, n, "%.1f MiB", v / 1048576.0);
    else snprintf(out, n, "%.0f KiB", v / 1024.0);
}

void cli_progress_begin(cli_progress *p, const char *label, uint64_t total, int bytes)
{
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->total = total;
    p->bytes = bytes;
    const char *env = getenv("KILN_PROGRESS");
    p->mode = env && !strcmp(env, "0") ? 0 : env && !strcmp(env, "lines") ? 2 : isatty(2) ? 1 : 2;
    p->t0 = p->t_last = plat_now();
}

void cli_progress_resume(cli_progress *p, uint64_t already)
{
    p->base = already;
}

static void draw(cli_progress *p, uint64_t done, int final)
{
    double t = plat_now(), dt = t - p->t0;
    double rate = dt > 0.05 && done > p->base ? (double)(done - p->base) / dt : 0;
    double frac = p->total ? (double)done / (double)p->total : 0;
    if (frac > 1) frac = 1;
    char d[32], tot[32], r[32], eta[32] = "";
    human(d, sizeof d, (double)done, p->bytes);
    human(tot, sizeof tot, (double)p->total, p->bytes);
    human(r, sizeof r, rate, p->bytes);
    if (p->total && rate > 0 && !final) {
        double left = (double)(p->total - (done < p->total ? done : p->total)) / rate;
        if (p->mode == 1) snprintf(eta, sizeof eta, "ETA %d:%02d", (int)(left / 60), (int)left % 60);
        else snprintf(eta, sizeof eta, "ETA %.0f s", left);
    } else if (final) {
        snprintf(eta, sizeof eta, "in %.1f s", dt);
    }
    if (p->mode == 1) {
        int w = 24, fill = (int)(frac * w + 0.5);
        char bar[32];
        for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '-';
        bar[w] = 0;
        if (p->total)
            fprintf(stderr, "\r%-28.28s [%s] %3d%%  %s/%s  %s/s  %s\033[K", p->label, bar,
                    (int)(frac * 100), d, tot, r, eta);
        else
            fprintf(stderr, "\r%-28.28s %s  %s/s\033[K", p->label, d, r);
        if (final) fputc('\n', stderr);
    } else if (p->total) {
        fprintf(stderr, "%s: %d%% (%s/%s, %s/s, %s)\n", p->label, (int)(frac * 100), d, tot, r, eta);
    } else {
        fprintf(stderr, "%s: %s (%s/s)\n", p->label, d, r);
    }
    fflush(stderr);
    p->t_last = t;
    p->drawn = 1;
}

void cli_progress_update(cli_progress *p, uint64_t done)
{
    if (!p->mode) return;
    double since = plat_now() - p->t_last;
    if ((p->mode == 1 && since >= 0.1) || (p->mode == 2 && since >= 5.0)) draw(p, done, 0);
}

void cli_progress_end(cli_progress *p, uint64_t done)
{
    if (p->mode) draw(p, done, 1);
}

void cli_progress_cb(void *user, uint64_t done, uint64_t total)
{
    cli_progress *p = user;
    if (total) p->total = total;
    cli_progress_update(p, done);
}
