#!/usr/bin/env bash
# test_serve_draft.sh — draft-model speculative decoding through kiln serve
# with the openai client (docs/speculative.md): stories260K drafting for
# itself (--draft-model: the same model, every greedy draft accepted) and a
# random llama drafted by its own first two layers (few accepted) answer
# exactly what plain servers answer (greedy, seeded sampling, penalties,
# stop, max_tokens, logprobs, streaming, 8 at once); /stats shows the draft
# model; drafters whose vocabulary differs are refused at start with the
# first mismatching id named; --spec draft needs --draft-model. The drafting
# servers run --spec-fixed: the step cost rule would decline a drafter as
# costly as the target (stories260K drafting for itself), and the test wants
# drafts verified whatever the machine's load.
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
SMALL=$(e2e_small_model) || e2e_skip "cannot make the small test model"
HALF=$(e2e_small_drafter) || e2e_skip "cannot make the 2-layer drafter"

e2e_server SELF --model "$STORIES" --ctx 512 --batch 8 --draft-model "$STORIES" --spec-max-draft 4 --spec-fixed || exit 1
e2e_server PLAIN --model "$STORIES" --ctx 512 --batch 8 --spec-fixed || exit 1 # drafts only when a request asks, then always
run_node spec.test.mjs --spec "$SELF_URL" --plain "$PLAIN_URL" --method draft
e2e_stop "$SELF_PID"; e2e_stop "$PLAIN_PID"

e2e_server HALFD --model "$SMALL" --ctx 512 --batch 8 --draft-model "$HALF" --spec-fixed || exit 1
e2e_server SMALLP --model "$SMALL" --ctx 512 --batch 8 || exit 1
# identity only: a random model's greedy text need not repeat the truncated drafter's
out=$(cd "$E2E_DIR" && node spec.test.mjs --spec "$HALFD_URL" --plain "$SMALLP_URL" --method draft --identity-only 2>&1)
echo "$out" | head -30
check "2-layer drafter: 8 requests alone and together equal the plain server" \
  bash -c 'grep -q "^ok.*8 requests alone and together" <<<"$1"' _ "$out"
e2e_stop "$HALFD_PID"; e2e_stop "$SMALLP_PID"

# a drafter whose tokenizer swaps two ids: refused at start, the id named
BAD="$E2E_TMP/badtok"
cp -r "$STORIES" "$BAD" && /usr/bin/python3 - "$BAD/tokenizer.json" <<'PY'
import json, sys
p = sys.argv[1]; t = json.load(open(p)); v = t["model"]["vocab"]
a = [k for k, i in v.items() if i == 300][0]; b = [k for k, i in v.items() if i == 301][0]
v[a], v[b] = 301, 300
json.dump(t, open(p, "w"))
PY
out=$("$KILN_BIN" serve --model "$STORIES" --draft-model "$BAD" --port 0 --threads 1 2>&1 </dev/null)
check "a drafter with another vocabulary is refused, naming token id 300" \
  bash -c 'grep -q "token id 300 " <<<"$1" && grep -q "same\|share" <<<"$1"' _ "$out"
out=$("$KILN_BIN" serve --model "$STORIES" --draft-model "$SMALL" --port 0 --threads 1 2>&1 </dev/null)
check "a drafter with another vocabulary size is refused" bash -c 'grep -q "draft model: its" <<<"$1"' _ "$out"
out=$("$KILN_BIN" serve --model "$STORIES" --spec draft --port 0 2>&1 </dev/null); rc=$?
check "--spec draft without --draft-model exits 2" bash -c '[ "$1" = 2 ] && grep -q "needs --draft-model" <<<"$2"' _ "$rc" "$out"
e2e_done
