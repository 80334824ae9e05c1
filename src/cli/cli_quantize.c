/*
 * cli_quantize.c — `kiln quantize`: an MLX affine-quantized copy of a snapshot.
 */
#include "cli/cli.h"
#include "cli/cli_args.h"
#include "cli/cli_progress.h"
#include "weights/wt_quantize.h"

#include <stdio.h>

int cli_quantize(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    int64_t bits = 4, group = 64;
    cli_flag flags[] = {
        {"model", CLI_STR, &in, "DIR", "input snapshot (f32/f16/bf16) (required)", 0},
        {"out", CLI_STR, &out, "DIR", "output folder (required)", 0},
        {"bits", CLI_INT, &bits, "B", "bits per weight: 2, 3, 4, 5, 6 or 8 (default 4)", 0},
        {"group-size", CLI_INT, &group, "G", "group size: 32, 64 or 128 (default 64)", 0},
        {0},
    };
    int pr = cli_parse("quantize",
                       "Write an MLX affine-quantized snapshot (the layout mlx_lm.convert -q writes).",
                       flags, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!in || !out) {
        fprintf(stderr, "kiln quantize: --model and --out are required\n");
        return 2;
    }
    kiln_err err;
    cli_progress bar;
    char label[80];
    snprintf(label, sizeof label, "quantizing to %d-bit", (int)bits);
    cli_progress_begin(&bar, label, 0, 1);
    wt_quant_opts o = {.bits = (int)bits, .group_size = (int)group, .progress = cli_progress_cb,
                       .progress_user = &bar};
    /* 0 means "default" only inside the library: the plain call refuses it with the reason */
    kiln_code rc = bits == 0 || group == 0 ? wt_quantize_snapshot(in, out, (int)bits, (int)group, &err)
                                           : wt_quantize_snapshot_ex(in, out, &o, &err);
    if (!rc) cli_progress_end(&bar, bar.total);
    if (rc) return cli_fail("quantize", &err);
    printf("wrote %s (%d-bit, group %d)\n", out, (int)bits, (int)group);
    return 0;
}
