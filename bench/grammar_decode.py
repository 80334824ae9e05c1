#!/usr/bin/python3
"""grammar_decode.py — end-to-end decode speed, constrained vs free, through the
real server (docs/structured-output.md, Coverage and speed).

  bench/grammar_decode.py --model DIR [--kiln build/kiln] [--threads 2]
                          [--gen-tokens 128] [--runs 3] [--port 18431]

Starts `kiln serve` on the model, then alternates, --runs times each, one
streamed /v1/completions request without a constraint and one under a JSON
Schema (an array of at least 200 objects, so the output is still open when
max_tokens ends it), both with ignore_eos and the same prompt and seed. Decode
speed = (completion tokens - 1) / (time of the last chunk - time of the first
chunk): prefill is left out. Because the machine may be shared, each request
also reports the server process's CPU time (utime + stime) per generated
token, which load does not inflate the way it does wall time (both requests
have the same prompt and length). Prints the medians, the ratios, the server's
/stats engine.grammar (mask time, the engine's wait for masks) and the load
average before and after. Not a timed test: CI never runs it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

SCHEMA = {"type": "array", "minItems": 200,
          "items": {"type": "object", "properties": {"id": {"type": "integer"},
                                                     "name": {"type": "string", "maxLength": 24},
                                                     "ok": {"type": "boolean"}},
                    "required": ["id", "name", "ok"], "additionalProperties": False}}


def load():
    return open("/proc/loadavg").read().split()[:3]


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read().decode())


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def run(url, n, constrained, seed, pid):
    c0 = cpu_s(pid)
    body = {"prompt": "The list of records follows.", "max_tokens": n, "temperature": 0.8,
            "seed": seed, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if constrained:
        body["json_schema"] = SCHEMA
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t_first = t_last = None
    usage = {}
    with urllib.request.urlopen(req, timeout=1800) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            if ev.get("choices"):
                t = time.time()
                t_first = t_first or t
                t_last = t
    toks = usage.get("completion_tokens", 0)
    tps = (toks - 1) / (t_last - t_first) if toks > 1 and t_last > t_first else 0.0
    return toks, tps, 1e3 * (cpu_s(pid) - c0) / max(toks, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--kiln", default=os.path.join(os.path.dirname(__file__), "..", "build", "kiln"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--port", type=int, default=18431)
    a = ap.parse_args()
    url = f"http://127.0.0.1:{a.port}"
    before = load()
    srv = subprocess.Popen([a.kiln, "serve", "--model", a.model, "--port", str(a.port), "--threads",
                            str(a.threads), "--batch", "1", "--ctx", "2048"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if get(url + "/health").get("status") == "ok":
                    break
            except Exception:
                pass
            time.sleep(0.5)
        run(url, 8, True, 1, srv.pid)  # warm: the vocabulary's trie and leaf sets are built once
        free, cons = [], []
        for i in range(a.runs):
            free.append(run(url, a.gen_tokens, False, 10 + i, srv.pid))
            cons.append(run(url, a.gen_tokens, True, 10 + i, srv.pid))
        g = get(url + "/stats")["engine"]["grammar"]
    finally:
        srv.terminate()
        srv.wait(timeout=60)
    mf = statistics.median(r[1] for r in free)
    mc = statistics.median(r[1] for r in cons)
    print(f"model={a.model} threads={a.threads} gen_tokens={a.gen_tokens} runs={a.runs}")
    print(f"free decode tok/s: median {mf:.2f}  runs {[round(r[1], 2) for r in free]}")
    print(f"constrained decode tok/s: median {mc:.2f}  runs {[round(r[1], 2) for r in cons]}")
    print(f"constrained / free: {mc / mf:.3f}" if mf > 0 else "no free figure")
    cf = statistics.median(r[2] for r in free)
    cc = statistics.median(r[2] for r in cons)
    print(f"server CPU ms per token: free {cf:.1f} {[round(r[2], 1) for r in free]}, "
          f"constrained {cc:.1f} {[round(r[2], 1) for r in cons]}, constrained / free {cc / cf:.3f}")
    print(f"engine.grammar: masks={g['masks']} mask_s={g['mask_s']:.3f} "
          f"(mean {1e6 * g['mask_s'] / max(g['masks'], 1):.0f} us) wait_s={g['wait_s']:.3f}")
    print(f"load average before {before}, after {load()}")
    return 0 if mf > 0 and mc > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
