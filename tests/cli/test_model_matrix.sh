#!/usr/bin/env bash
# test_model_matrix.sh — kiln's logits at every position vs the float64 numpy
# reference (tools/ref_forward.py) on generated models covering what the
# shared oracles do not: every architecture × dtype, rope scaling linear /
# yarn / dynamic / llama3, sliding windows, sharded checkpoints, and
# `kiln quantize` output (bits 4 and 8 at g32 and g64; 3 and 6 at g32)
# re-loaded by kiln against the dequantized f32 computation.
set -u
KILN=${KILN_BIN:?}
SRC=${KILN_SOURCE_DIR:?}
PY=/usr/bin/python3
if ! $PY -c 'import numpy' 2>/dev/null; then echo "SKIP: /usr/bin/python3 has no numpy"; echo "0 passed, 0 failed"; exit 0; fi
T=${KILN_BINARY_DIR:-/tmp}/model-matrix
rm -rf "$T"; mkdir -p "$T"
pass=0; fail=0
TOKS=$($PY -c 'print(",".join(str((i*37+11)%470) for i in range(40)))')

check() { # NAME DIR [TOL]
  local name=$1 dir=$2 tol=${3:-1e-4}
  if ! "$KILN" logits --model "$dir" --tokens "$TOKS" --all --threads 1 --chunk 7 --out "$T/$name.f32" 2>"$T/$name.err"; then
    fail=$((fail+1)); echo "not ok $name: $(cat "$T/$name.err")"; return
  fi
  if out=$($PY "$SRC/tools/ref_forward.py" --model "$dir" --tokens "$TOKS" --compare "$T/$name.f32" --tol "$tol" 2>&1); then
    pass=$((pass+1)); echo "ok $name ($(tail -1 <<<"$out"))"
  else
    fail=$((fail+1)); echo "not ok $name: $out"
  fi
}
mk() { "$SRC/tools/make-test-model" --shape tiny "$@" >/dev/null; }

for arch in llama mistral qwen2 qwen3; do
  for dt in f32 bf16 f16; do
    mk --arch $arch --dtype $dt --out "$T/$arch-$dt" && check "$arch-$dt" "$T/$arch-$dt"
  done
done
for rs in linear yarn dynamic llama3; do
  mk --arch llama --dtype f32 --rope-scaling $rs --out "$T/rope-$rs" && check "rope-$rs" "$T/rope-$rs"
done
mk --arch mistral --dtype f32 --sliding-window 8 --out "$T/swa" && check "sliding-window-8" "$T/swa"
mk --arch qwen2 --dtype f32 --sliding-window 8 --max-window-layers 1 --out "$T/swa-qwen2" && check "qwen2-window-layers" "$T/swa-qwen2"
mk --arch llama --dtype bf16 --no-tie --shards 3 --out "$T/sharded" && check "sharded-untied" "$T/sharded"
for q in "4 32" "4 64" "8 32" "8 64" "3 32" "6 32"; do
  set -- $q
  "$KILN" quantize --model "$T/llama-f32" --out "$T/q$1-g$2" --bits $1 --group-size $2 >/dev/null 2>"$T/q.err" \
    && check "quantize-b$1-g$2" "$T/q$1-g$2" 1e-3 || { fail=$((fail+1)); echo "not ok quantize $1 $2: $(cat "$T/q.err")"; }
done
"$KILN" quantize --model "$T/qwen3-bf16" --out "$T/qwen3-q4" --bits 4 --group-size 32 >/dev/null 2>&1 && check "quantize-qwen3-bf16-b4" "$T/qwen3-q4" 1e-3

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
