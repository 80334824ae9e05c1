#!/usr/bin/env bash
# test_model_matrix.sh — kiln's logits at every position vs the float64 numpy
# reference (tools/ref_forward.py) on generated models covering what the
# shared oracles do not: every architecture × dtype, rope scaling linear /
# yarn / dynamic / llama3, sliding windows, sharded checkpoints, and
# `kiln quantize` output (bits 4 and 8 at g32 and g64; 3 and 6 at g32)
# re-loaded by kiln against the dequantized f32 computation; Gemma 3 / 4
# shapes (tools/ref_gemma.py) with other patterns, donors and expert counts;
# Qwen3.5 hybrids
# (gated DeltaNet + gated attention) in every layout, other layer patterns,
# head counts, conv kernels, untied heads, MLX-quantized checkpoints (uniform
# and with per-module overrides) and `kiln quantize` of a hybrid.
# 4-bit runs `--matmul exact` (the MLX semantics this compares at 1e-3;
# the int8 default is checked by tests/cli/test_matmul_int8.sh).
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
  if ! "$KILN" logits --model "$dir" --tokens "$TOKS" --all --threads 1 --chunk 7 --matmul exact --out "$T/$name.f32" 2>"$T/$name.err"; then
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
# Qwen3.5 hybrids (tools/ref_forward.py's Qwen35 matches shared/oracle-next to 6e-8)
h() { mk --arch qwen3_5 "$@"; }
h --dtype f32 --out "$T/q35-f32" && check "qwen3_5-f32-hf" "$T/q35-f32"
h --dtype bf16 --layout mlx --out "$T/q35-mlx" && check "qwen3_5-bf16-mlx-layout" "$T/q35-mlx"
h --dtype f16 --layout causal --no-tie --out "$T/q35-causal" && check "qwen3_5-f16-causal-untied" "$T/q35-causal"
h --dtype f32 --interval 2 --layers 6 --conv 3 --lin-k-heads 1 --lin-v-heads 3 --lin-k-dim 8 --lin-v-dim 24 \
  --heads 6 --kv-heads 3 --head-dim 16 --out "$T/q35-shape" && check "qwen3_5-interval2-conv3-heads" "$T/q35-shape"
h --dtype f32 --interval 3 --layers 5 --conv 2 --no-tie --out "$T/q35-i3" && check "qwen3_5-interval3-conv2" "$T/q35-i3"
h --dtype bf16 --quantize-bits 4 --group-size 32 --out "$T/q35-q4" && check "qwen3_5-mlx-q4-g32" "$T/q35-q4" 1e-3
# an mlx-community style override: one module at 8 bits g64, one kept in float
if h --dtype bf16 --quantize-bits 4 --group-size 32 --out "$T/q35-ovr" && $PY - "$T/q35-ovr" <<'PYEOF'
import json, os, sys
sys.path.insert(0, os.environ["KILN_SOURCE_DIR"] + "/tools")
import numpy as np, st_numpy as S
d = sys.argv[1]
snap = S.Snapshot(d)
names = list(snap.where)
out = {n: (snap.dtype(n), snap.raw(n)) for n in names}
def requant(mod, bits, gs):
    w = S.mlx_affine_dequantize(snap.raw(mod + ".weight"), S.to_float(snap.raw(mod + ".scales"), "BF16", np.float32),
                                S.to_float(snap.raw(mod + ".biases"), "BF16", np.float32), 4, 32, np.float32)
    stored, w = S.round_to_dtype(w.astype(np.float32), "BF16")
    del out[mod + ".scales"], out[mod + ".biases"]
    if bits is None:
        out[mod + ".weight"] = ("BF16", stored)
        return
    words, sc, bi = S.mlx_affine_quantize(w, bits, gs)[:3]
    out[mod + ".weight"] = ("U32", words)
    out[mod + ".scales"] = ("BF16", S.f32_to_bf16_bits(sc))
    out[mod + ".biases"] = ("BF16", S.f32_to_bf16_bits(bi))
a = "language_model.model.layers.0.linear_attn.in_proj_qkv"
b = "language_model.model.layers.3.self_attn.o_proj"
requant(a, 8, 64)
requant(b, None, None)
for f in os.listdir(d):
    if f.startswith("model") and f.endswith(".safetensors") or f.endswith(".index.json"):
        os.remove(os.path.join(d, f))
w = S.Writer(os.path.join(d, "model.safetensors"), {"format": "mlx"})
for n in sorted(out):
    w.add(n, out[n][0], out[n][1].shape)
w.begin()
for n in sorted(out):
    w.write(out[n][1])
w.end()
c = json.load(open(os.path.join(d, "config.json")))
for k in ("quantization", "quantization_config"):
    c[k][a] = {"group_size": 64, "bits": 8}
    c[k][b] = False
json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
PYEOF
then check "qwen3_5-mlx-q4-per-module-overrides" "$T/q35-ovr" 1e-3
else fail=$((fail+1)); echo "not ok qwen3_5 override model"; fi
"$KILN" quantize --model "$T/q35-mlx" --out "$T/q35-kq4" --bits 4 --group-size 32 >/dev/null 2>"$T/q.err" \
  && check "quantize-qwen3_5-b4" "$T/q35-kq4" 1e-3 || { fail=$((fail+1)); echo "not ok quantize qwen3_5: $(cat "$T/q.err")"; }
if $PY -c "import sys; sys.path.insert(0, '$SRC/tools'); import st_numpy as S; s = S.Snapshot('$T/q35-kq4'); sys.exit(s.dtype('language_model.model.layers.0.linear_attn.A_log') != 'F32')"; then
  pass=$((pass+1)); echo "ok quantize keeps A_log in F32"
else fail=$((fail+1)); echo "not ok quantize keeps A_log in F32"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
