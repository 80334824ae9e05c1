#!/usr/bin/env bash
# soak.sh — starts a real `kiln serve` (the ChatML e2e test model, batch 8,
# prefix cache, SSD tier in a temporary folder) and runs soak.mjs against it:
#   tests/soak/soak.sh [--clients 64] [--duration 600] [--warmup 20] [--disconnect 0.3]
#                      [--rss-tolerance 0.10] [--seed 1]
# Defaults are the long run (64 clients, 10 minutes); CI runs a short one
# (tests/e2e/test_serve_soak.sh). Extra server flags: SOAK_SERVER_FLAGS.
# Exit status: soak.mjs's (0 = every check held), or 1 when the server
# crashed or did not exit 0 on SIGTERM afterwards.
. "$(dirname "$0")/../e2e/lib.sh"
e2e_need node
MODEL=$(e2e_chat_model) || exit 1
# the SSD tier's write queue holds copies of blocks until the disk takes them
# (default cap 2 GiB); 32 MiB keeps a slow disk from holding the soak's
# figures hostage, and drops past it are counted (ssd_dropped)
export KILN_SSD_SPILL_QUEUE_GB=${KILN_SSD_SPILL_QUEUE_GB:-0.03125}
# capped (16 MiB, ~2,000 entries): the tier's index grows with what is on
# disk (~100 B an entry), by design; the cap keeps it at a steady state that
# the warm-up reaches, so growth past the baseline means a leak
SSD=(--ssd-cache "$E2E_TMP/ssd" --ssd-cache-max 0.015625)
[ "${SOAK_SSD:-1}" = 0 ] && SSD=()  # SOAK_SSD=0: without the SSD tier
# shellcheck disable=SC2086 # SOAK_SERVER_FLAGS is a list of flags
e2e_server SOAK --model "$MODEL" --ctx 512 --batch 8 --max-queue 128 "${SSD[@]}" ${SOAK_SERVER_FLAGS:-} || exit 1
echo "server pid $SOAK_PID at $SOAK_URL (log $SOAK_LOG)"
(cd "$E2E_DIR" && node ../soak/soak.mjs --url "$SOAK_URL" --pid "$SOAK_PID" "$@"); rc=$?
if ! kill -0 "$SOAK_PID" 2>/dev/null; then
  echo "FAIL the server exited during the soak:"; tail -n 30 "$SOAK_LOG"; exit 1
fi
e2e_stop "$SOAK_PID" || { echo "FAIL the server did not exit 0 on SIGTERM"; tail -n 30 "$SOAK_LOG"; rc=1; }
exit $rc
