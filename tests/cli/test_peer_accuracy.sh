#!/usr/bin/env bash
# test_peer_accuracy.sh — bench/peer/accuracy on stories260K (the real trained
# model), the measurement that chose the default matmul mode (docs/kernels.md):
# against the float64 forward of kiln's own 4-bit weights, `--matmul exact`
# is float-exact (KL < 1e-9, max |Δ| < 1e-4) and the int8 default is not
# (KL > 1e-6) but small (KL mean < 1e-3, top-1 ≥ 60/64); with node-llama-cpp
# installed (bench/peer/setup), int8's KL mean is within 1.25× of llama.cpp
# Q4_0's on the same float weights (measured 2.15e-4 vs 2.07e-4) and 8-bit
# exact is closer to the float model than Q8_0. Without it those print SKIP.
set -u
KILN=${KILN_BIN:?}
SRC=${KILN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
M=${KILN_SHARED_DIR:?}/models/stories260K
PY=/usr/bin/python3
[ -d "$M" ] || { echo "skip: $M absent"; exit 0; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"$PY" "$SRC/bench/peer/accuracy" --model "$M" --kiln "$KILN" --work "$T/w" --prompt greedy \
  --tokens 64 --json "$T/a.json" > "$T/out" 2>&1
rc=$?
cat "$T/out"
[ $rc = 0 ] || [ $rc = 77 ] || { echo "not ok accuracy_ran: exit $rc"; exit 1; }
"$PY" - "$T/a.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))["rows"]
fails = 0
def check(name, ok, what):
    global fails
    print("%s %s: %s" % ("ok" if ok else "not ok", name, what))
    fails += not ok
ex = r["kiln MLX 4-bit g64, `--matmul exact`"]["vs_own_weights"]
i8 = r["kiln MLX 4-bit g64, `--matmul int8`"]["vs_own_weights"]
check("exact_is_float_exact", ex["kl_mean"] < 1e-9 and ex["max_abs"] < 1e-4, ex)
check("int8_small", 1e-6 < i8["kl_mean"] < 1e-3 and i8["top1"] >= 60, i8)
if "llama.cpp Q4_0" in r:
    ll = r["llama.cpp Q4_0"]["vs_own_weights"]
    check("int8_vs_llama_q4_0", i8["kl_mean"] <= 1.25 * ll["kl_mean"],
          "KL %.3g vs llama.cpp %.3g" % (i8["kl_mean"], ll["kl_mean"]))
    k8 = r["kiln MLX 8-bit g64, `--matmul exact`"]["vs_float"]
    q8 = r["llama.cpp Q8_0"]["vs_float"]
    check("q8_vs_llama_q8_0", k8["kl_mean"] <= q8["kl_mean"],
          "KL %.3g vs llama.cpp %.3g" % (k8["kl_mean"], q8["kl_mean"]))
else:
    print("SKIP llama.cpp comparisons: node-llama-cpp is not installed")
sys.exit(1 if fails else 0)
PYEOF
