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
  (cd tests/e2e && { [ -d node_modules ] || npm install --no-audit --no-fund --loglevel=error; })
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
  echo "== fuzzers (libFuzzer + ASan/UBSan, ${KILN_FUZZ_SECONDS:-10} s each, from the committed corpus)"
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j "$JOBS" >/dev/null
  for f in build-fuzz/fuzz_*; do
    name=${f##*/fuzz_}
    work=$(mktemp -d)
    cp -r "fuzz/corpus/$name/." "$work/" 2>/dev/null || true
    "$f" -max_total_time="${KILN_FUZZ_SECONDS:-10}" -rss_limit_mb=2048 -print_final_stats=0 "$work" 2>&1 | tail -1
    rm -rf "$work"
  done
fi
echo "== all tests passed"
