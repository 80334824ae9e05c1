#!/usr/bin/env bash
# test_serve_ssd_scan_progress.sh — `kiln serve --ssd-cache DIR` shows the
# start-up scan's progress the way weight reading's is shown (plain lines when
# stderr is no terminal, KILN_PROGRESS=lines here), and only for a large folder
# (>= 10,000 entries) or a slow scan: 12,000 entry files (empty, so each is
# opened, found short and quarantined) give a final "100% (12000/12000" line;
# a restart on the emptied folder prints none.
. "$(dirname "$0")/lib.sh"
e2e_need
[ -d "$STORIES" ] || e2e_skip "no $STORIES"
DIR="$E2E_TMP/ssd"
mkdir -p "$DIR"
/usr/bin/python3 -c '
import os, sys
d = sys.argv[1]
for i in range(12000):
    open(os.path.join(d, "%016x.kv" % (0x1000 + i)), "wb").close()
open(os.path.join(d, "README"), "wb").close()  # no entry name: not counted
' "$DIR"
export KILN_PROGRESS=lines
e2e_server A --model "$STORIES" --ssd-cache "$DIR" || exit 1
check "a progress line for 12,000 entries" grep -q "indexing --ssd-cache: 100% (12000/12000" "$A_LOG"
grep "indexing --ssd-cache" "$A_LOG" | sed 's/^/  /'
q=$(curl -s "$A_URL/stats" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["ssd_cache"]["quarantined"])')
check "every entry was scanned (12,000 quarantined: $q)" [ "$q" = 12000 ]
check "SIGTERM exits 0" e2e_stop "$A_PID"
e2e_server B --model "$STORIES" --ssd-cache "$DIR" || exit 1
check "no progress line for a small folder" bash -c "! grep -q 'indexing --ssd-cache' '$B_LOG'"
check "SIGTERM exits 0 (second start)" e2e_stop "$B_PID"
e2e_done
