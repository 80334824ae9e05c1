#!/usr/bin/env bash
# test_model_matrix.sh — kiln's logits at every position vs the float64 numpy
# reference (tools/ref_forward.py) on generated models covering what the
# shared oracles do not: every architecture × dtype, rope scaling linear /
# yarn / dynamic / llama3, sliding windows, sharded checkpoints, and
# `kiln quantize` output (bits 4 and 8 at g32 and g64; 3 and 6 at g32)
# re-loaded by kiln against the dequantized f32 computation; Gemma 3 / 4
# shapes (tools/ref_gemma.py) with other patterns, donors and expert counts.
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

# Gemma 3 / Gemma 4 shapes the shared oracles do not have (reference: tools/ref_gemma.py):
# other layer patterns, windows, head counts, donors, per-layer input widths, expert counts.
mk --arch gemma3 --dtype f32 --out "$T/g3" && check "gemma3-f32" "$T/g3"
mk --arch gemma3 --dtype bf16 --layers 7 --layer-pattern 3 --sliding-window 5 --kv-heads 2 --out "$T/g3b" && check "gemma3-pattern3-w5" "$T/g3b"
mk --arch gemma4 --dtype f32 --per-layer-input 16 --kv-shared 3 --double-wide --layers 9 --layer-pattern 3 \
  --sliding-window 6 --out "$T/g4e" && check "gemma4-pli-shared3-w6" "$T/g4e"
mk --arch gemma4 --dtype f32 --per-layer-input 8 --kv-shared 4 --layers 7 --layer-pattern 3 --sliding-window 3 \
  --heads 8 --kv-heads 1 --softcap 0 --out "$T/g4s" && check "gemma4-shared4-mqa-nocap" "$T/g4s"
mk --arch gemma4 --dtype bf16 --experts 6 --top-k 3 --moe-ffn 32 --k-eq-v --global-kv-heads 1 --layers 4 \
  --layer-pattern 2 --out "$T/g4m" && check "gemma4-moe6-top3-keqv" "$T/g4m"
mk --arch gemma4 --dtype bf16 --experts 6 --top-k 3 --moe-ffn 32 --k-eq-v --global-kv-heads 1 --layers 4 \
  --layer-pattern 2 --layout mlx --out "$T/g4m-mlx" && check "gemma4-moe-switch_glu-layout" "$T/g4m-mlx"
# the fused (HF) and split (mlx) expert layouts of one seed hold the same weights: same logits, bit for bit
if cmp -s "$T/gemma4-moe6-top3-keqv.f32" "$T/gemma4-moe-switch_glu-layout.f32"; then pass=$((pass+1)); echo "ok gemma4 hf = mlx expert layout (bitwise)"
else fail=$((fail+1)); echo "not ok gemma4 hf vs mlx expert layout logits differ"; fi
"$KILN" quantize --model "$T/g4m" --out "$T/g4m-q4" --bits 4 --group-size 32 >/dev/null 2>&1 && check "quantize-gemma4-moe-b4" "$T/g4m-q4" 1e-3
mk --arch gemma4 --dtype f16 --per-layer-input 32 --kv-shared 2 --layers 6 --layer-pattern 3 --quantize-bits 4 \
  --group-size 32 --out "$T/g4e-q4" && check "gemma4-pli-mlx-4bit" "$T/g4e-q4"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
