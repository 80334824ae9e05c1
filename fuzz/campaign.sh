#!/usr/bin/env bash
# campaign.sh — a long fuzzing run of libFuzzer targets, one after the other
# (or -j 2 at a time), at the lowest CPU priority, with the limits CI uses.
#
#   fuzz/campaign.sh [-s SECONDS] [-b BUILD] [-o OUT] [-j JOBS] [NAME...]
#     -s  seconds per target (default 3600)
#     -b  a KILN_FUZZ=ON build folder (default build-fuzz)
#     -o  output folder (default fuzz-campaign): corpus/NAME (grows; seeded from
#         fuzz/corpus/NAME), artifacts/NAME/ (crash-*, timeout-*, oom-*),
#         logs/NAME.log, and summary.tsv: one line per run
#         (name, seconds, execs, exec/s, cov, ft, corpus units, findings, exit status)
#     NAME  targets without the fuzz_ prefix (default: every fuzz_* in BUILD)
# A finding leaves its input in artifacts/NAME/; fix it, then copy the input
# into fuzz/corpus/NAME/ so CTest (fuzz-replay.NAME) replays it forever.
# Long runs belong here, not in CI (scripts/test.sh runs each target ~10 s).
set -uo pipefail
cd "$(dirname "$0")/.."
SECS=3600 BUILD=build-fuzz OUT=fuzz-campaign JOBS=1
while getopts "s:b:o:j:" o; do
  case $o in
    s) SECS=$OPTARG ;; b) BUILD=$OPTARG ;; o) OUT=$OPTARG ;; j) JOBS=$OPTARG ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
names=("$@")
if [ ${#names[@]} = 0 ]; then
  for f in "$BUILD"/fuzz_*; do [ -x "$f" ] && names+=("${f##*/fuzz_}"); done
fi
mkdir -p "$OUT/logs"
[ -f "$OUT/summary.tsv" ] ||
  printf 'name\tseconds\texecs\texec_per_s\tcov\tft\tcorpus\tfindings\texit\n' > "$OUT/summary.tsv"

run_one() {
  local name=$1 bin="$BUILD/fuzz_$1"
  local corpus="$OUT/corpus/$name" art="$OUT/artifacts/$name" log="$OUT/logs/$name.log"
  [ -x "$bin" ] || { echo "campaign: no $bin" >&2; return 1; }
  mkdir -p "$corpus" "$art"
  [ -d "fuzz/corpus/$name" ] && cp -n "fuzz/corpus/$name"/* "$corpus/" 2>/dev/null
  local t0; t0=$(date +%s)
  nice -n 19 "$bin" -max_total_time="$SECS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$art/" "$corpus" > "$log" 2>&1
  local rc=$? t1; t1=$(date +%s)
  # the last status line ("#N DONE cov: X ft: Y corp: Z/..") and the final stats
  local last; last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  local cov ft corp execs eps
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  local findings; findings=$(find "$art" -type f | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$((t1 - t0))" "${execs:-?}" "${eps:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$findings" "$rc" >> "$OUT/summary.tsv"
  echo "campaign: $name ${SECS}s rc=$rc execs=${execs:-?} cov=${cov:-?} ft=${ft:-?} findings=$findings"
}

running=0
for n in "${names[@]}"; do
  run_one "$n" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait
