#!/usr/bin/env bash
# check_layers.sh — fails when a layer includes a header from a layer above it.
# Order (low to high): util kernels weights tokenizer template grammar kv model engine server cli
# (tokenizer and template depend only on util; grammar only on util and tokenizer)
set -euo pipefail
cd "$(dirname "$0")/../src"
rank() { case "$1" in util) echo 0;; kernels) echo 1;; weights) echo 2;; tokenizer) echo 2;;
  template) echo 2;; grammar) echo 3;; kv) echo 3;; model) echo 4;; engine) echo 5;; server) echo 6;; cli) echo 7;; *) echo 99;; esac; }
bad=0
for dir in */; do
  layer=${dir%/}; r=$(rank "$layer")
  while IFS=: read -r file inc; do
    dep=$(sed -E 's/.*#include "([a-z]+)\/.*/\1/' <<<"$inc")
    d=$(rank "$dep")
    # tokenizer and template depend only on util
    if { [ "$layer" = tokenizer ] || [ "$layer" = template ]; } && [ "$dep" != util ] && [ "$dep" != "$layer" ]; then
      echo "layer violation: $file includes $dep/"; bad=1
    elif [ "$layer" = grammar ] && [ "$dep" != util ] && [ "$dep" != tokenizer ] && [ "$dep" != grammar ]; then
      echo "layer violation: $file includes $dep/"; bad=1
    elif [ "$d" -gt "$r" ]; then
      echo "layer violation: $file ($layer) includes $dep/"; bad=1
    fi
  done < <(grep -rHE '^#include "[a-z]+/' "$layer" || true)
done
[ $bad = 0 ] && echo "check_layers: ok"
exit $bad
