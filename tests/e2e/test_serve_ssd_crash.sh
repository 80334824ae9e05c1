#!/usr/bin/env bash
# test_serve_ssd_crash.sh — crashes and the SSD tier:
#   resume: kill -9 after 150 chunks of a 600-token generation (seeded, greedy,
#   unseeded, speculative with n-grams and with a draft model, constrained by a
#   grammar, two batched rows), retry the identical request: identical text
#   (seeded/greedy), usage.resumed_tokens > 0, checkpoint removed at the end;
#   crash loop: kill -9 during write-behind and checkpoint writes, N times;
#   afterwards nothing is quarantined (atomic writes), the cache still works,
#   and what a flush made durable survives a kill -9; then rounds of
#   flush, more work, kill -9 at a random moment: every entry the flush listed
#   is on disk, indexed and served at the next start.
. "$(dirname "$0")/lib.sh"
e2e_need
PY=/usr/bin/python3
REQ="$E2E_DIR/ssd_req.py"
KILL="$E2E_DIR/ssd_kill.py"
MODEL=$(e2e_small_model) || e2e_skip "cannot make the test model"
DIR="$E2E_TMP/ck"
j() { $PY -c "import json,sys; print(json.loads(sys.argv[1])$2)" "$1"; }
stat_ssd() { curl -s "$1/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['ssd_cache']['$2'])"; }
serve() { e2e_server "$1" --model "$MODEL" --ctx 4096 --ssd-cache "$DIR" --generation-checkpoint 10 "${@:2}" ${SERVE_EXTRA:-}; }
n_ckpt() { ls "$DIR" | grep -c '^ck-'; }

# resume NAME EXTRA_JSON COMPARE: reference run, killed run, retried run
resume() {
  local name=$1 extra=$2 compare=$3 refextra=${4:-$2} n=${RESUME_TOKENS:-600}
  serve S || return 1
  local ref=""
  if [ "$compare" = same ]; then ref=$($PY "$REQ" "$S_URL" -5 "$n" "$refextra"); fi
  # the kill waits (generation going on) until the checkpoint file is on disk:
  # on a loaded machine the writer may lag behind the 150th chunk. So that the
  # file it sees is this request's, the reference run's checkpoint (removed
  # when it completed, by the writer) must be gone first.
  curl -s -X POST "$S_URL/admin/cache/flush" >/dev/null
  for _ in $(seq 300); do [ "$(n_ckpt)" = 0 ] && break; sleep 0.1; done
  local killed; killed=$(KILN_KILL_SETTLE_CKPT=1 KILN_KILL_SETTLE_DIR="$DIR" $PY "$KILL" "$S_URL" "$S_PID" 150 5 "$n" "$extra")
  wait "$S_PID" 2>/dev/null
  local nk; nk=$(n_ckpt)
  check "$name: killed mid-generation ($(j "$killed" "['chunks']") chunks), a checkpoint is on disk ($nk)" [ "$nk" = 1 ]
  serve S || return 1
  if [ -n "${OTHER:-}" ]; then # the same prompt under another grammar: never resumes this one
    local other; other=$($PY "$REQ" "$S_URL" -5 "$n" "$OTHER")
    check "$name: another grammar does not resume it ($(j "$other" "['resumed']") tokens)" [ "$(j "$other" "['resumed']")" = 0 ]
    check "$name: ... and follows its own grammar" \
      $PY -c "import json,re,sys; sys.exit(0 if re.fullmatch(sys.argv[2], json.loads(sys.argv[1])['text']) else 1)" "$other" "$OTHER_RE"
  fi
  local again; again=$($PY "$REQ" "$S_URL" -5 "$n" "$extra")
  if [ -n "${CHECK_RE:-}" ]; then
    check "$name: the resumed output follows the grammar" \
      $PY -c "import json,re,sys; sys.exit(0 if re.fullmatch(sys.argv[2], json.loads(sys.argv[1])['text']) else 1)" "$again" "$CHECK_RE"
  fi
  check "$name: the retry resumed ($(j "$again" "['resumed']") tokens)" [ "$(j "$again" "['resumed']")" -gt 0 ]
  if [ "$compare" = same ]; then
    check "$name: identical to an uninterrupted run" [ "$(j "$ref" "['text']")" = "$(j "$again" "['text']")" ]
  fi
  check "$name: the whole output again (starts with what streamed before the kill)" \
    $PY -c "import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); sys.exit(0 if b['text'].startswith(a['text']) and len(b['text']) > len(a['text']) else 1)" "$killed" "$again"
  curl -s -X POST "$S_URL/admin/cache/flush" >/dev/null
  check "$name: the checkpoint is removed once the request completes" [ "$(n_ckpt)" = 0 ]
  e2e_stop "$S_PID"
}
resume seeded '{"temperature":0.8,"seed":42,"ignore_eos":true}' same
resume greedy '{"temperature":0,"ignore_eos":true}' same
# (2000 tokens: the server must still be generating when the client has read
# 150 chunks; at temperature 0.9 many tokens of the random model send no text)
RESUME_TOKENS=2000 resume unseeded '{"temperature":0.9,"ignore_eos":true}' prefix
# speculative decoding (docs/speculative.md): killed while drafting, the retry
# (drafting too) equals an uninterrupted run without drafting
resume speculative '{"temperature":0.8,"seed":43,"ignore_eos":true,"speculative":"ngram"}' same \
  '{"temperature":0.8,"seed":43,"ignore_eos":true,"speculative":"off"}'
# a draft model (its first two layers, always drafting): the checkpoint's key
# leaves the drafter out, the retry's draft sequence catches up from scratch
HALF=$(e2e_small_drafter) || e2e_skip "cannot make the 2-layer drafter"
SERVE_EXTRA="--draft-model $HALF --spec-fixed" resume draft-model \
  '{"temperature":0.8,"seed":44,"ignore_eos":true,"speculative":"draft"}' same \
  '{"temperature":0.8,"seed":44,"ignore_eos":true,"speculative":"off"}'

# constrained (docs/structured-output.md): the retry rebuilds the parse state by
# replaying the checkpoint's tokens through the grammar and goes on under it,
# identical to an uninterrupted run; the checkpoint key holds the grammar's
# fingerprint, so the same prompt under another grammar starts afresh
CHECK_RE='[a-z ,.]+' OTHER='{"temperature":0.8,"seed":44,"ignore_eos":true,"grammar":"root ::= [0-9 ]+"}' \
  OTHER_RE='[0-9 ]+' \
  resume constrained '{"temperature":0.8,"seed":44,"ignore_eos":true,"grammar":"root ::= [a-z ,.]+"}' same

# two batched rows, both killed, both resumed independently: B is long (3000
# tokens) and running before A starts, so it is mid-generation when A's kill
# comes, whatever the machine's speed; the kill waits until both rows'
# checkpoints are on disk (KILN_KILL_SETTLE_CKPT: ck- files in DIR), since the writer may lag;
# A is 1500 tokens so that it is still generating when the client has read 150 chunks
serve S || exit 1
A='{"temperature":0.8,"seed":1,"ignore_eos":true}'
B='{"temperature":0.8,"seed":2,"ignore_eos":true}'
refA=$($PY "$REQ" "$S_URL" -5 1500 "$A"); refB=$($PY "$REQ" "$S_URL" -5 3000 "$B")
($PY "$REQ" "$S_URL" -5 3000 "$B" >/dev/null 2>&1 &)
for _ in $(seq 600); do
  [ "$(curl -s "$S_URL/stats" | $PY -c "import json,sys; print(json.load(sys.stdin)['batch']['active'])")" = 1 ] && break
  sleep 0.05
done
KILN_KILL_SETTLE_CKPT=2 KILN_KILL_SETTLE_DIR="$DIR" $PY "$KILL" "$S_URL" "$S_PID" 150 5 1500 "$A" >/dev/null
wait "$S_PID" 2>/dev/null
check "batched: two checkpoints on disk" [ "$(n_ckpt)" = 2 ]
serve S || exit 1
$PY "$REQ" "$S_URL" -5 3000 "$B" > "$E2E_TMP/b.json" &
bp=$!
againA=$($PY "$REQ" "$S_URL" -5 1500 "$A")
wait $bp
againB=$(cat "$E2E_TMP/b.json")
check "batched: row A resumed ($(j "$againA" "['resumed']")) and identical" \
  bash -c "[ $(j "$againA" "['resumed']") -gt 0 ] && [ '$(j "$againA" "['text']" | md5sum)' = '$(j "$refA" "['text']" | md5sum)' ]"
check "batched: row B resumed ($(j "$againB" "['resumed']")) and identical" \
  bash -c "[ $(j "$againB" "['resumed']") -gt 0 ] && [ '$(j "$againB" "['text']" | md5sum)' = '$(j "$refB" "['text']" | md5sum)' ]"
e2e_stop "$S_PID"

# crash loop: kill -9 while prefixes are written behind and checkpoints are written
ITER=${SSD_CRASH_ITER:-6}
for i in $(seq 1 "$ITER"); do
  serve L || exit 1
  ($PY "$REQ" "$L_URL" "$((10 + i))" 1 >/dev/null 2>&1; $PY "$REQ" "$L_URL" -$((20 + i)) 200 '{"ignore_eos":true}' >/dev/null 2>&1) &
  sleep "$($PY -c "import random; print(round(random.uniform(0.3, 2.0), 2))")"
  kill -KILL "$L_PID"; wait "$L_PID" 2>/dev/null
done
serve L || exit 1
check "after $ITER kill -9s nothing is corrupt (quarantined $(stat_ssd "$L_URL" quarantined))" [ "$(stat_ssd "$L_URL" quarantined)" = 0 ]
check "no temp file survives a restart" bash -c "! ls -a '$DIR' | grep -q '^\.tmp-'"
cold=$($PY "$REQ" "$L_URL" 1 8)
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$L_URL/admin/cache/flush")
check "flush after the crash loop: 200" [ "$code" = 200 ]
kill -KILL "$L_PID"; wait "$L_PID" 2>/dev/null
serve L || exit 1
warm=$($PY "$REQ" "$L_URL" 1 8)
check "what flush made durable survives kill -9 (cached $(j "$warm" "['cached']") of $(j "$warm" "['prompt']"))" \
  [ "$(j "$warm" "['cached']")" -ge $(( $(j "$warm" "['prompt']") - 16 )) ]
check "and serves the same text" [ "$(j "$cold" "['text']")" = "$(j "$warm" "['text']")" ]
check "still nothing quarantined" [ "$(stat_ssd "$L_URL" quarantined)" = 0 ]
e2e_stop "$L_PID"

# durability, round after round: a flush reports a prefix durable, more work
# (write-behind, checkpoints being replaced and removed) runs, kill -9 lands at
# a random moment; at the next start every entry that flush listed is still
# there, indexed (nothing quarantined) and serves its prefix from disk
D2="$E2E_TMP/durable"
block_names() { ls "$D2" 2>/dev/null | grep -E '^[0-9a-f]{16}\.kv$' | sort; }
: > "$E2E_TMP/durable.txt"
last=""
for i in $(seq 1 "${SSD_DURABLE_ITER:-4}"); do
  serve_d() { e2e_server K --model "$MODEL" --ctx 4096 --ssd-cache "$D2" --generation-checkpoint 10; }
  serve_d || exit 1
  if [ -n "$last" ]; then
    n=$(wc -l < "$E2E_TMP/durable.txt")
    missing=$(comm -23 "$E2E_TMP/durable.txt" <(block_names) | wc -l)
    check "round $i: all $n entries flushed before the kill -9 are on disk ($missing missing)" [ "$missing" = 0 ]
    check "round $i: nothing quarantined" [ "$(stat_ssd "$K_URL" quarantined)" = 0 ]
    check "round $i: all indexed ($(stat_ssd "$K_URL" entries) >= $n)" [ "$(stat_ssd "$K_URL" entries)" -ge "$n" ]
    again=$($PY "$REQ" "$K_URL" "$last" 1)
    check "round $i: the durable prefix is served from disk (cached $(j "$again" "['cached']"))" \
      [ "$(j "$again" "['cached']")" -ge $(( $(j "$again" "['prompt']") - 16 )) ]
  fi
  last=$((40 + i))
  $PY "$REQ" "$K_URL" "$last" 1 >/dev/null
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$K_URL/admin/cache/flush")
  check "round $i: flush 200" [ "$code" = 200 ]
  block_names > "$E2E_TMP/durable.txt"
  ($PY "$REQ" "$K_URL" $((60 + i)) 1 >/dev/null 2>&1; $PY "$REQ" "$K_URL" -$((70 + i)) 200 '{"ignore_eos":true}' >/dev/null 2>&1) &
  sleep "$($PY -c "import random; print(round(random.uniform(0.2, 1.5), 2))")"
  kill -KILL "$K_PID"; wait "$K_PID" 2>/dev/null
done
serve_d || exit 1
missing=$(comm -23 "$E2E_TMP/durable.txt" <(block_names) | wc -l)
check "last round: all flushed entries survived ($missing missing)" [ "$missing" = 0 ]
check "last round: nothing quarantined" [ "$(stat_ssd "$K_URL" quarantined)" = 0 ]
e2e_stop "$K_PID"
e2e_done
