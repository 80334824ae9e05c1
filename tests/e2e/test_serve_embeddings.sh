#!/usr/bin/env bash
# test_serve_embeddings.sh — /v1/embeddings on a generated Qwen3 model dressed as a
# sentence-transformers snapshot three ways (last-token + Normalize with a named
# query prompt, as Qwen3-Embedding; mean without Normalize; CLS + Normalize), each
# checked against a float64 numpy reference and through the openai SDK
# (embeddings.test.mjs); a Dense module is refused with a clear 400.
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null || e2e_skip "python3-numpy is not installed"
BASE=$(e2e_chat_model) || exit 1

# st_model NAME MODE NORMALIZE(0|1) [EXTRA_MODULE_TYPE]: a snapshot sharing BASE's files
st_model() {
  local d="$E2E_TMP/$1" mode=$2 norm=$3 extra=${4:-}
  mkdir -p "$d/1_Pooling"
  for f in "$BASE"/*; do ln -s "$f" "$d/"; done
  /usr/bin/python3 - "$d" "$mode" "$norm" "$extra" <<'PY'
import json, sys
d, mode, norm, extra = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
if extra:
    mods.append({"idx": 2, "name": "2", "path": "2_Dense", "type": extra})
if norm:
    mods.append({"idx": len(mods), "name": str(len(mods)), "path": "3_Normalize",
                 "type": "sentence_transformers.models.Normalize"})
json.dump(mods, open(d + "/modules.json", "w"), indent=2)
flags = {k: False for k in ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                            "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                            "pooling_mode_lasttoken")}
flags[{"last": "pooling_mode_lasttoken", "mean": "pooling_mode_mean_tokens",
       "cls": "pooling_mode_cls_token"}[mode]] = True
cfg = json.load(open(d + "/config.json"))
flags["word_embedding_dimension"] = cfg["hidden_size"]
flags["include_prompt"] = True
json.dump(flags, open(d + "/1_Pooling/config.json", "w"), indent=2)
if mode == "last":
    json.dump({"prompts": {"query": "Instruct: find the story\nQuery:", "document": ""},
               "default_prompt_name": None, "similarity_fn_name": "cosine"},
              open(d + "/config_sentence_transformers.json", "w"))
PY
  echo "$d"
}

for spec in "last 1" "mean 0" "cls 1"; do
  set -- $spec
  M=$(st_model "emb-$1" "$1" "$2")
  e2e_server E --model "$M" --ctx 2048 --batch 4 --max-queue 4 || exit 1
  extra=()
  [ "$1" = last ] && extra=(--prompt "$(printf 'Instruct: find the story\nQuery:')")
  run_node embeddings.test.mjs --url "$E_URL" --model "$M" --pool "$1" "${extra[@]}"
  check "$1: SIGTERM exits 0" e2e_stop "$E_PID"
done

M=$(st_model emb-dense mean 1 sentence_transformers.models.Dense)
e2e_server D --model "$M" --ctx 512 || exit 1
out=$(vcurl -s -w '\n%{http_code}' "$D_URL/v1/embeddings" -H 'content-type: application/json' -d '{"input":"hi"}')
check "a Dense module is refused: 400" [ "$(tail -n1 <<<"$out")" = 400 ]
check "... saying why" grep -q "Dense module, which kiln does not run" <<<"$out"
check "chat still works on that model" bash -c "vcurl -sf '$D_URL/v1/completions' -H 'content-type: application/json' -d '{\"prompt\":\"hi\",\"max_tokens\":2}' >/dev/null"
e2e_stop "$D_PID"
e2e_done
