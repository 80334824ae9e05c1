#!/usr/bin/env bash
# make_reference.sh — regenerates tests/template/reference_renders.json: every
# conversation of conversations.json rendered by @huggingface/jinja@0.5.11 (through
# ../shared/tools/ref_tokenize.mjs) with the real chat templates of the tokenizers
# that ../shared/tools/fetch_tokenizers.sh pulls from npm. Needs node + npm.
#   tests/template/make_reference.sh [--work DIR] [--out FILE]
#     --work DIR  where npm packages and tokenizers go (default: $KILN_BINARY_DIR or ./build-tmpl)
#     --out FILE  default: tests/template/reference_renders.json
# Idempotent: packages and tokenizers already present are reused.
# Speed: ref_tokenize.mjs renders the chat from tokenizer_config.json (template and
# special tokens) alone, but also loads tokenizer.json (33 MB for gemma3, seconds per
# run). So each model is rendered from a folder holding its real tokenizer_config.json
# (and chat_template.jinja, if any) next to the small stories260K tokenizer.json.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SHARED=${KILN_SHARED_DIR:-$ROOT/../shared}
WORK=${KILN_BINARY_DIR:-$ROOT/build-tmpl}
OUT=$HERE/reference_renders.json
while [ $# -gt 0 ]; do
  case "$1" in
    --work) WORK=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "usage: $0 [--work DIR] [--out FILE]" >&2; exit 2 ;;
  esac
done
MODELS=(llama3 llama3_1 qwen3 gemma3 llama2)
# templates kept in the repo (no npm package ships them): tests/template/gemma4/<name>/
LOCAL=(gemma4 gemma4_interleaved gemma4_e2b gemma4_31b)
NODE_DIR=$WORK/tmpl-ref-node
TOK_DIR=$WORK/fetched-templates
mkdir -p "$NODE_DIR" "$TOK_DIR"
if [ ! -f "$NODE_DIR/node_modules/@huggingface/jinja/package.json" ] ||
   [ ! -f "$NODE_DIR/node_modules/@huggingface/tokenizers/package.json" ]; then
  (cd "$NODE_DIR" && { [ -f package.json ] || echo '{"private": true}' > package.json; } &&
   npm install --no-audit --no-fund --loglevel=error \
     @huggingface/jinja@0.5.11 @huggingface/tokenizers@0.2.0 >&2)
fi
bash "$SHARED/tools/fetch_tokenizers.sh" "$TOK_DIR" "${MODELS[@]}" >&2
LITE=$WORK/tmpl-ref-models
for m in "${MODELS[@]}"; do
  mkdir -p "$LITE/$m"
  cp "$TOK_DIR/$m/tokenizer_config.json" "$LITE/$m/tokenizer_config.json"
  if [ -f "$TOK_DIR/$m/chat_template.jinja" ]; then cp "$TOK_DIR/$m/chat_template.jinja" "$LITE/$m/"; fi
  cp "$SHARED/models/stories260K/tokenizer.json" "$LITE/$m/tokenizer.json"
done
for m in "${LOCAL[@]}"; do
  mkdir -p "$LITE/$m"
  cp "$HERE/gemma4/$m/tokenizer_config.json" "$HERE/gemma4/$m/chat_template.jinja" "$LITE/$m/"
  cp "$SHARED/models/stories260K/tokenizer.json" "$LITE/$m/tokenizer.json"
done
node "$HERE/make_reference.mjs" --tool "$SHARED/tools/ref_tokenize.mjs" --modules "$NODE_DIR" \
  --model-dir "$LITE" --conversations "$HERE/conversations.json" --out "$OUT" "${MODELS[@]}" "${LOCAL[@]}"
