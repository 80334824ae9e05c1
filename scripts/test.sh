#!/usr/bin/env bash
# test.sh — the whole test suite: release build (every label) and an
# ASan+UBSan build (unit, golden, cli and fuzz-replay tests).
#   scripts/test.sh                   everything
#   KILN_TEST_QUICK=1 scripts/test.sh release build only
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
JOBS=$(nproc 2>/dev/null || echo 2)

if [ -f tests/e2e/package.json ]; then
  (cd tests/e2e && { [ -d node_modules/zod ] || npm install --no-audit --no-fund --loglevel=error; })
fi
# playwright-core (no browser download: it drives Debian's chromium) for the chat page's test
if [ -f tests/webui/package.json ]; then
  (cd tests/webui && { [ -d node_modules/playwright-core ] || npm install --no-audit --no-fund --loglevel=error; })
fi
# llama.cpp (node-llama-cpp, CPU binaries, ~83 MB) for the GGUF cross-check in cli.gguf_export;
# best effort: without it that test skips its llama.cpp part.
bench/peer/setup || echo "test.sh: bench/peer/setup failed: the llama.cpp cross-check will be skipped"

echo "== release build: all tests"
(cd build && ctest --output-on-failure -j "$JOBS")

if [ "${KILN_TEST_QUICK:-0}" != 1 ]; then
  echo "== sanitizer build (ASan + UBSan): unit, golden, cli, fuzz-replay"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=ON >/dev/null
  cmake --build build-asan -j "$JOBS"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j "$JOBS" -L 'unit|golden|cli|fuzz-replay')
fi
if [ "${KILN_TEST_QUICK:-0}" != 1 ] && command -v clang >/dev/null; then
  # Any finding (ASan, UBSan — the build aborts on UB —, a crash, a >10 s input,
  # an RSS over 2 GiB) fails the run; its input is kept in
  # build-fuzz/artifacts/NAME/ and the target's log in build-fuzz/logs/NAME.log.
  # Reproduce: build-fuzz/fuzz_NAME build-fuzz/artifacts/NAME/crash-...
  # Long runs: fuzz/campaign.sh (docs/testing.md).
  secs=${KILN_FUZZ_SECONDS:-10}
  echo "== fuzzers (libFuzzer + ASan/UBSan, $secs s each, from the committed corpus)"
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j "$JOBS" >/dev/null
  rm -rf build-fuzz/artifacts build-fuzz/logs
  mkdir -p build-fuzz/logs
  # the canary: a target with deliberate UB must fail and leave its input
  canary=$(mktemp -d)
  printf 'UB' > "$canary/seed"
  mkdir -p build-fuzz/artifacts/canary
  if build-fuzz/canary_ub -runs=100 -artifact_prefix=build-fuzz/artifacts/canary/ "$canary" \
       >build-fuzz/logs/canary.log 2>&1 ||
     ! ls build-fuzz/artifacts/canary | grep -q '^crash-'; then
    echo "== the fuzz build does not stop on undefined behaviour (or keeps no input):"
    tail -n 20 build-fuzz/logs/canary.log
    exit 1
  fi
  rm -rf "$canary" build-fuzz/artifacts/canary
  fuzz_failed=()
  for f in build-fuzz/fuzz_*; do
    name=${f##*/fuzz_}
    work=$(mktemp -d)
    mkdir -p "build-fuzz/artifacts/$name"
    cp -r "fuzz/corpus/$name/." "$work/" 2>/dev/null || true
    log="build-fuzz/logs/$name.log"
    if UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$f" -max_total_time="$secs" \
         -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
         -artifact_prefix="build-fuzz/artifacts/$name/" "$work" >"$log" 2>&1; then
      echo "fuzz $name: $(grep -E '^#[0-9]+' "$log" | tail -1)"
    else
      fuzz_failed+=("$name")
      echo "fuzz $name: FAILED; the log's end (whole log: $log):"
      tail -n 60 "$log"
      echo "fuzz $name: inputs kept in build-fuzz/artifacts/$name/: $(ls "build-fuzz/artifacts/$name" | tr '\n' ' ')"
    fi
    rm -rf "$work"
  done
  if [ ${#fuzz_failed[@]} -gt 0 ]; then
    echo "== fuzzers found problems in: ${fuzz_failed[*]}"
    exit 1
  fi
fi
echo "== all tests passed"
