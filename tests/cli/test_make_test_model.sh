#!/usr/bin/env bash
# test_make_test_model.sh — tools/make-test-model and tools/ref_forward.py.
#
# Makes a tiny model of every architecture and dtype, 4-bit ones, and RoPE-scaling /
# sliding-window variants into $KILN_BINARY_DIR/test-models/, checks their files and
# tensor layout, runs ref_forward.py on each, and checks ref_forward.py itself against the
# references in ../shared (oracle logits incl. Gemma 3/4 through ref_gemma.py, stories260K
# greedy, MLX emulated checkpoints).
# Env: KILN_SOURCE_DIR, KILN_BINARY_DIR, KILN_SHARED_DIR (set by CTest; defaults below).
set -u
SRC=${KILN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${KILN_BINARY_DIR:-$SRC/build}
SHARED=${KILN_SHARED_DIR:-$SRC/../shared}
PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
MK="$PY $SRC/tools/make-test-model"
REF="$PY $SRC/tools/ref_forward.py"
OUT=$BIN/test-models
pass=0
fail=0

ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { # check "description" command...
  local d=$1; shift
  local log
  if log=$("$@" 2>&1); then ok "$d"; else bad "$d"; echo "$log" | tail -20 | sed 's/^/     /'; fi
}

if ! $PY -c 'import numpy' 2>/dev/null; then
  echo "SKIP: /usr/bin/python3 has no numpy (apt-get install python3-numpy)"
  echo "0 passed, 0 failed"
  exit 0
fi
mkdir -p "$OUT"

check "make-test-model --self-test (MLX affine vectors bit-exact)" $MK --self-test

# Structure of a snapshot: files, config keys, tensor names/dtypes/shapes as HF (or mlx-lm) names them.
layout() { # layout DIR ARCH DTYPE BITS
  $PY - "$@" <<'EOF'
import json, os, sys
sys.path.insert(0, os.path.join(os.environ.get("SRC_TOOLS", ""), ""))
import st_numpy as S
d, arch, dt, bits = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
DT = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dt]
for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
    assert os.path.getsize(os.path.join(d, f)) > 0, f
c = json.load(open(os.path.join(d, "config.json")))
tok = json.load(open(os.path.join(d, "tokenizer.json")))
ntok = len(tok["model"]["vocab"]) + len(tok["added_tokens"])
assert c["vocab_size"] >= ntok
assert c["architectures"][0] == {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                                 "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]
for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
          "tie_word_embeddings", "bos_token_id", "eos_token_id", "torch_dtype"):
    assert k in c, k
st = S.SafeTensors(os.path.join(d, "model.safetensors"))
h, L, hd = c["hidden_size"], c["num_hidden_layers"], c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
nq, nkv, ffn, V = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd, c["intermediate_size"], c["vocab_size"]
want = {"model.embed_tokens": (V, h), "model.norm.weight": (h,)}
for i in range(L):
    p = "model.layers.%d." % i
    want.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                 p + "self_attn.q_proj": (nq, h), p + "self_attn.k_proj": (nkv, h), p + "self_attn.v_proj": (nkv, h),
                 p + "self_attn.o_proj": (h, nq), p + "mlp.gate_proj": (ffn, h), p + "mlp.up_proj": (ffn, h),
                 p + "mlp.down_proj": (h, ffn)})
    if arch == "qwen2":
        want.update({p + "self_attn.q_proj.bias": (nq,), p + "self_attn.k_proj.bias": (nkv,),
                     p + "self_attn.v_proj.bias": (nkv,)})
    if arch == "qwen3":
        want.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
if not c["tie_word_embeddings"]:
    want["lm_head"] = (V, h)
names = set(st.names())
seen = set()
for n, shp in want.items():
    if n.endswith(".weight") or n.endswith(".bias"):
        assert st.dtype(n) == DT and st.shape(n) == shp, (n, st.dtype(n), st.shape(n))
        seen.add(n)
        continue
    if bits and shp[1] % c["quantization"]["group_size"] == 0:
        gs = c["quantization"]["group_size"]
        assert st.dtype(n + ".weight") == "U32" and st.shape(n + ".weight") == (shp[0], shp[1] * bits // 32), n
        assert st.dtype(n + ".scales") == DT and st.shape(n + ".scales") == (shp[0], shp[1] // gs), n
        assert st.dtype(n + ".biases") == DT and st.shape(n + ".biases") == (shp[0], shp[1] // gs), n
        seen |= {n + ".weight", n + ".scales", n + ".biases"}
    else:
        assert st.dtype(n + ".weight") == DT and st.shape(n + ".weight") == shp, n
        seen.add(n + ".weight")
assert names == seen, sorted(names ^ seen)
if bits:
    assert c["quantization"] == c["quantization_config"] and c["quantization"]["bits"] == bits
    assert c["quantization"]["mode"] == "affine" and st.meta.get("format") == "mlx"
    assert os.path.exists(os.path.join(d, "model.safetensors.index.json"))
EOF
}
export SRC_TOOLS=$SRC/tools

# A fixed 64-token sequence of ids valid in every tiny model's tokenizer.
TOKS=$(seq -s, 10 7 451)   # 64 ids
NTOK=64

logits_ok() { # logits_ok DIR FILE — ref_forward writes [64, vocab] finite float32
  $PY - "$@" <<'EOF'
import json, os, sys
import numpy as np
d, f = sys.argv[1], sys.argv[2]
V = json.load(open(os.path.join(d, "config.json")))["vocab_size"]
x = np.fromfile(f, "<f4")
assert x.size == 64 * V, (x.size, V)
assert np.all(np.isfinite(x)) and x.std() > 0.05, x.std()
EOF
}

for arch in llama mistral qwen2 qwen3; do
  for dt in f32 f16 bf16; do
    d=$OUT/tiny-$arch-$dt
    check "make tiny $arch $dt" $MK --arch $arch --dtype $dt --out "$d"
    check "layout tiny $arch $dt" layout "$d" $arch $dt 0
    check "ref_forward tiny $arch $dt" $REF --model "$d" --tokens "$TOKS" --out "$d/ref_logits.f32"
    check "logits tiny $arch $dt" logits_ok "$d" "$d/ref_logits.f32"
  done
done

# Untied head, and determinism: the same arguments give the same bytes.
check "make tiny llama bf16 untied" $MK --arch llama --dtype bf16 --no-tie --out "$OUT/tiny-llama-bf16-untied"
check "layout untied" layout "$OUT/tiny-llama-bf16-untied" llama bf16 0
check "make tiny llama bf16 again (determinism)" $MK --arch llama --dtype bf16 --out "$OUT/tiny-llama-bf16-again"
check "same seed, same bytes" cmp "$OUT/tiny-llama-bf16/model.safetensors" "$OUT/tiny-llama-bf16-again/model.safetensors"
check "other seed differs" bash -c "$MK --arch llama --dtype bf16 --seed 7 --out '$OUT/tiny-llama-bf16-seed7' >/dev/null &&
  ! cmp -s '$OUT/tiny-llama-bf16/model.safetensors' '$OUT/tiny-llama-bf16-seed7/model.safetensors'"
check "sharded (--shards 3) = one file" bash -c "$MK --arch qwen3 --dtype bf16 --shards 3 --out '$OUT/tiny-qwen3-bf16-shards3' >/dev/null &&
  test -f '$OUT/tiny-qwen3-bf16-shards3/model-00003-of-00003.safetensors' &&
  test -f '$OUT/tiny-qwen3-bf16-shards3/model.safetensors.index.json' &&
  $REF --model '$OUT/tiny-qwen3-bf16-shards3' --tokens '$TOKS' --out '$OUT/tiny-qwen3-bf16-shards3/ref_logits.f32' &&
  cmp '$OUT/tiny-qwen3-bf16-shards3/ref_logits.f32' '$OUT/tiny-qwen3-bf16/ref_logits.f32'"

# MLX-quantized snapshots: layout; every quantized tensor dequantizes to the float model's tensor
# of the same seed within MLX's bound (|w - w_deq| <= |scale|, plus the scale/bias rounding to the
# model dtype); every other tensor is byte-identical; the logits stay correlated.
quant_close() { # quant_close FLOATDIR QDIR
  $PY - "$@" <<'EOF2'
import json, os, sys
import numpy as np
sys.path.insert(0, os.environ["SRC_TOOLS"])
import st_numpy as S
fd, qd = sys.argv[1], sys.argv[2]
F = S.SafeTensors(fd + "/model.safetensors"); Q = S.SafeTensors(qd + "/model.safetensors")
q = json.load(open(qd + "/config.json"))["quantization"]
bits, gs = q["bits"], q["group_size"]
nq = 0
for n in Q.names():
    if n.endswith(".scales") or n.endswith(".biases"):
        continue
    base = n[: -len(".weight")] if n.endswith(".weight") else None
    if base and base + ".scales" in Q.header:
        s = Q.get_f32(base + ".scales"); b = Q.get_f32(base + ".biases")
        deq = S.mlx_affine_dequantize(Q.raw(n), s, b, bits, gs, np.float32)
        w = F.get_f32(n)
        err = np.abs(w - deq).reshape(w.shape[0], -1, gs).max(axis=2)
        lim = 1.05 * np.abs(s) + np.abs(b) / 256 + 1e-6
        assert np.all(err <= lim), (n, float((err / lim).max()))
        nq += 1
    else:
        assert F.raw(n).tobytes() == Q.raw(n).tobytes(), n
assert nq > 0
a = np.fromfile(fd + "/ref_logits.f32", "<f4"); c = np.fromfile(qd + "/ref_logits.f32", "<f4")
r = np.corrcoef(a, c)[0, 1]
print("%d quantized tensors within bound; logits correlation %.4f, max|diff| %.3f" % (nq, r, np.abs(a - c).max()))
assert r > 0.5, r
EOF2
}
for spec in "llama bf16 4 64 tied" "qwen3 f16 4 32 untied" "qwen2 f32 8 64 tied" "mistral bf16 3 32 untied"; do
  set -- $spec
  arch=$1 dt=$2 bits=$3 gs=$4 tie=$5
  tflag=--tie; [ "$tie" = untied ] && tflag=--no-tie
  f=$OUT/tiny-$arch-$dt-$tie-float q=$OUT/tiny-$arch-$dt-q${bits}g$gs-$tie
  check "make $arch $dt $tie float" $MK --arch $arch --dtype $dt $tflag --out "$f"
  check "make $arch $dt $bits-bit g$gs $tie" $MK --arch $arch --dtype $dt $tflag --quantize-bits $bits --group-size $gs --out "$q"
  check "layout $arch $bits-bit g$gs" layout "$q" $arch $dt $bits
  check "ref_forward float $arch $dt $tie" $REF --model "$f" --tokens "$TOKS" --out "$f/ref_logits.f32"
  check "ref_forward $arch $bits-bit g$gs" $REF --model "$q" --tokens "$TOKS" --out "$q/ref_logits.f32"
  check "$arch $bits-bit g$gs = quantized float model" quant_close "$f" "$q"
done

# RoPE scaling and sliding-window variants: each must change the logits of a 64-token sequence.
differs() { # differs BASE VARIANT
  $PY - "$@" <<'EOF'
import sys
import numpy as np
a = np.fromfile(sys.argv[1] + "/ref_logits.f32", "<f4"); b = np.fromfile(sys.argv[2] + "/ref_logits.f32", "<f4")
d = np.abs(a - b).reshape(64, -1).max(axis=1)
print("max|diff| pos 0: %.3g, last: %.3g" % (d[0], d[-1]))
assert d[-1] > 1e-3, d[-1]
EOF
}
base=$OUT/tiny-llama-f32
for rs in linear llama3 yarn dynamic; do
  d=$OUT/tiny-llama-f32-rope-$rs
  check "make llama rope $rs" $MK --arch llama --dtype f32 --rope-scaling $rs --out "$d"
  check "ref_forward llama rope $rs" $REF --model "$d" --tokens "$TOKS" --out "$d/ref_logits.f32"
  check "rope $rs changes logits" differs "$base" "$d"
done
for arch in mistral qwen2 qwen3; do
  d=$OUT/tiny-$arch-f32-swa8
  check "make $arch sliding window 8" $MK --arch $arch --dtype f32 --sliding-window 8 --out "$d"
  check "ref_forward $arch sliding window" $REF --model "$d" --tokens "$TOKS" --out "$d/ref_logits.f32"
  check "$arch sliding window changes logits" differs "$OUT/tiny-$arch-f32" "$d"
done

# ref_forward.py against references nobody here wrote.
if [ -d "$SHARED/oracle" ]; then
  for m in llama_f32 llama31_rope_bf16 qwen2_f32 qwen3_bf16 mistral_bf16 gemma3_f32; do
    check "ref_forward vs oracle/$m (1e-4, greedy ids)" $REF --check-oracle "$SHARED/oracle/$m" --tol 1e-4
  done
  # ref_gemma.py (through ref_forward.py) against the Gemma 4 goldens
  for m in gemma4_e4b_like_f32 gemma4_moe_like_bf16; do
    [ -d "$SHARED/oracle-next/$m" ] &&
      check "ref_forward vs oracle-next/$m (1e-6, greedy ids)" $REF --check-oracle "$SHARED/oracle-next/$m" --tol 1e-6
  done
  check "ref_forward --compare on oracle/llama_f32 seq 1" $REF --model "$SHARED/oracle/llama_f32/hf" \
    --tokens "$($PY -c "import json;print(','.join(map(str,json.load(open('$SHARED/oracle/llama_f32/oracle.json'))['sequences'][1]['ids'])))")" \
    --compare "$SHARED/oracle/llama_f32/logits_1.f32" --tol 1e-4
else
  echo "skip: $SHARED/oracle absent"
fi
if [ -f "$SHARED/models/stories260K/reference.greedy.json" ]; then
  check "ref_forward vs stories260K reference.greedy.json" $REF --check-stories "$SHARED/models/stories260K"
fi
if [ -d "$SHARED/vectors/mlx-quant/emulated" ]; then
  for d in "$SHARED"/vectors/mlx-quant/emulated/*/; do
    check "ref_forward vs emulated $(basename "$d")" $REF --check-emulated "$d"
  done
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
