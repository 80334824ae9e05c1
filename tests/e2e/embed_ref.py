#!/usr/bin/python3
"""embed_ref.py — float64 numpy reference for /v1/embeddings (sentence-transformers semantics).

Usage: embed_ref.py --model DIR --ids '[[1,2,3],[4,5]]' [--dimensions N]
Prints a JSON list of embeddings (one per id list).

The model's final-normed hidden states come from tools/ref_forward.py (float64, written from
transformers' modeling code). Pooling and normalisation follow the snapshot's sentence-transformers
files, as sentence_transformers.models.Pooling / Normalize do:
  modules.json lists the modules; the Pooling module's folder holds config.json with
  pooling_mode_cls_token / pooling_mode_mean_tokens / pooling_mode_max_tokens /
  pooling_mode_mean_sqrt_len_tokens / pooling_mode_lasttoken; a
  sentence_transformers.models.Normalize module L2-normalises the result.
  mean = sum of token rows / n;  cls = row 0;  lasttoken = row n-1;  max = elementwise max;
  mean_sqrt_len = sum / sqrt(n).
--dimensions truncates (Matryoshka) before normalising, as sentence-transformers' truncate_dim
followed by normalize_embeddings does.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import ref_forward  # noqa: E402


def st_config(d):
    with open(os.path.join(d, "modules.json")) as f:
        mods = json.load(f)
    mode, normalize = None, False
    for m in mods:
        t = m.get("type", "")
        if t.endswith("models.Pooling"):
            with open(os.path.join(d, m["path"], "config.json")) as f:
                pc = json.load(f)
            for key, name in (("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
                              ("pooling_mode_max_tokens", "max"),
                              ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
                              ("pooling_mode_lasttoken", "last")):
                if pc.get(key):
                    mode = name
        elif t.endswith("models.Normalize"):
            normalize = True
    return mode, normalize


def pool(hs, mode):
    if mode == "mean":
        return hs.mean(axis=0)
    if mode == "cls":
        return hs[0]
    if mode == "last":
        return hs[-1]
    if mode == "max":
        return hs.max(axis=0)
    if mode == "mean_sqrt_len":
        return hs.sum(axis=0) / np.sqrt(hs.shape[0])
    raise SystemExit("unknown pooling %r" % mode)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--dimensions", type=int)
    a = ap.parse_args()
    mode, normalize = st_config(a.model)
    m = ref_forward.Model(a.model)
    out = []
    for ids in json.loads(a.ids):
        e = pool(m.forward(ids, hidden=True), mode)
        if a.dimensions:
            e = e[: a.dimensions]
        if normalize:
            e = e / max(np.linalg.norm(e), 1e-12)
        out.append([float(x) for x in e])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
