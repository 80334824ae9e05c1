/*
 * canary_ub.c — a libFuzzer target with one deliberate undefined behaviour
 * (signed overflow on an input starting "UB"). scripts/test.sh runs it before
 * the real targets and requires it to fail and leave its input behind: proof
 * that the fuzz build stops on UBSan reports (-fno-sanitize-recover) and that
 * findings land in the artifact folder. Never part of kiln.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* read by nobody; extern so that no compiler calls it set-but-unused */
volatile int kiln_canary_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 2 && data[0] == 'U' && data[1] == 'B') {
        volatile int big = INT_MAX;
        kiln_canary_sink = big + (int)size; /* overflows: UBSan must abort here */
    }
    return 0;
}
