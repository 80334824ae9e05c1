#!/usr/bin/env bash
# test_serve_spec.sh — speculative decoding through kiln serve with the openai
# client: a server drafting with n-grams (--spec ngram) answers exactly what a
# plain server answers (greedy, seeded sampling, stop strings, max_tokens,
# logprobs, streaming, 8 at once), reports accepted/rejected prediction
# tokens, /stats and /metrics count them, bad "speculative" values are 400s.
. "$(dirname "$0")/lib.sh"
e2e_need node
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
e2e_server SPEC --model "$STORIES" --ctx 512 --batch 8 --spec ngram --spec-max-draft 4 || exit 1
e2e_server PLAIN --model "$STORIES" --ctx 512 --batch 8 --spec-fixed || exit 1 # drafts only when a request asks, then always
run_node spec.test.mjs --spec "$SPEC_URL" --plain "$PLAIN_URL"
check "spec server: no block held after the runs" bash -c "curl -s $SPEC_URL/stats | grep -q '\"blocks_used\":0'"
e2e_done
