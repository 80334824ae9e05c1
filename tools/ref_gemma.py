#!/usr/bin/python3
"""ref_gemma.py — float64 numpy reference forward pass of Gemma 3 and Gemma 4 text models,
written from shared/design/models/gemma4.md (and transformers' Gemma 3 semantics) for kiln's
tests; ref_forward.py hands Gemma snapshots to it (same command line, same checks).

Loads Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma4ForCausalLM and
Gemma4ForConditionalGeneration snapshots (text path; tensors under model., model.language_model.
or language_model.model.; experts fused (HF gate_up_proj) or split (mlx switch_glu); F32/F16/BF16
or MLX affine, dequantized at load as MLX does). Whole-sequence forward, every position.

  x = embed[ids] * sqrt(H)
  Gemma 4 with hidden_size_per_layer_input P > 0:
    pli = (RMSNorm_P((x · per_layer_model_projectionᵀ) · H^-1/2) * per_layer_projection_norm
           + embed_tokens_per_layer[ids] · sqrt(P)) · 2^-1/2            [n, L, P]
  layer i (kind = layer_types[i]: sliding -> head_dim, window W, sliding RoPE;
           full -> global_head_dim (Gemma 4), no window, full RoPE):
    h = N(x, input_layernorm);  q = N_d(h Wqᵀ, q_norm);  q = RoPE(q)
    K/V: donor layers: kr = h Wkᵀ;  vr = kr (Gemma 4 full layers with attention_k_eq_v) else h Wvᵀ;
         k = RoPE(N_d(kr, k_norm));  v = N_d(vr) without weight (Gemma 4) or vr (Gemma 3)
         KV-shared layers (the last num_kv_shared_layers): the K/V of the last earlier non-shared
         layer of the same kind
    scores = q·k * scale (Gemma 4: 1; Gemma 3: query_pre_attn_scalar^-1/2), optional attention
    soft-cap; causal; sliding: p_q - p_k < W; GQA head j reads KV head j // (nH / kv)
    x += N(attn Woᵀ, post_attention_layernorm)
    FFN: dense  f = down(gelu_tanh(gate u) * up u), u = N(x, pre_feedforward_layernorm)
         MoE    f = N(dense(u), post_feedforward_layernorm_1) + N(Σ_top-k w_e expert_e(N(x,
                pre_feedforward_layernorm_2)), post_feedforward_layernorm_2); router logits
                = (N(x) without weight · router.scale · H^-1/2) · router.projᵀ; w = softmax over
                the k largest (ties: lower id) · per_expert_scale
    x += N(f, post_feedforward_layernorm)
    Gemma 4 with P: x += N((gelu_tanh(x · per_layer_input_gateᵀ) * pli[:, i]) · per_layer_projectionᵀ,
                           post_per_layer_input_norm)
    x *= layer_scalar (when the tensor exists)
  logits = N(x, norm) · embedᵀ;  c · tanh(logits / c) when final_logit_softcapping = c
N(x, w) = x / sqrt(mean(x²) + eps) * (w + 1 for Gemma 3, w for Gemma 4).
RoPE: rotate-half pairs (j, j + d/2); default inv_freq_j = θ^(-2j/d); linear: / factor;
proportional (Gemma 4 full): the first floor(prf·d/2) pairs θ^(-2j/d) / factor, the rest 0.
"""
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_numpy as S  # noqa: E402

ARCHS = {"Gemma3ForCausalLM": 3, "Gemma3ForConditionalGeneration": 3,
         "Gemma4ForCausalLM": 4, "Gemma4ForConditionalGeneration": 4}

GEMMA3_DEFAULTS = {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                   "vocab_size": 262208, "query_pre_attn_scalar": 256, "rope_theta": 1e6,
                   "rope_local_base_freq": 1e4, "sliding_window_pattern": 6, "rms_norm_eps": 1e-6,
                   "sliding_window": 4096}


def gelu_tanh(u):
    return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


class GemmaModel:
    def __init__(self, d):
        self.dir = d
        with open(os.path.join(d, "config.json")) as f:
            top = json.load(f)
        arch = (top.get("architectures") or [""])[0]
        self.gen = ARCHS[arch]
        c = dict(top.get("text_config") or top)
        for k, v in top.items():
            if k not in c and k != "text_config":
                c[k] = v
        if self.gen == 3:
            for k, v in GEMMA3_DEFAULTS.items():
                c.setdefault(k, v)
        self.cfg = c
        self.top = top
        self.H, self.L, self.V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
        self.nH = c["num_attention_heads"]
        self.kv = c["num_key_value_heads"]
        self.hd = c["head_dim"]
        self.ghd = c.get("global_head_dim") or 512 if self.gen == 4 else self.hd
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.add = 1.0 if self.gen == 3 else 0.0
        lt = c.get("layer_types")
        if lt is None:
            pat = c.get("sliding_window_pattern", 6)
            lt = ["sliding_attention" if (i + 1) % pat else "full_attention" for i in range(self.L)]
        self.types = lt
        self.W = c.get("sliding_window")
        self.k_eq_v = bool(c.get("attention_k_eq_v")) and self.gen == 4
        self.gkv = c.get("num_global_key_value_heads") or self.kv
        self.P = c.get("hidden_size_per_layer_input") or 0 if self.gen == 4 else 0
        self.shared = c.get("num_kv_shared_layers") or 0 if self.gen == 4 else 0
        self.double = bool(c.get("use_double_wide_mlp")) and self.gen == 4
        self.softcap = c.get("final_logit_softcapping")
        self.attn_cap = c.get("attn_logit_softcapping")
        self.scale = 1.0 if self.gen == 4 else c.get("query_pre_attn_scalar", self.hd) ** -0.5
        self.moe = bool(c.get("enable_moe_block")) and self.gen == 4
        self.ropes = self._ropes(c)
        self.q = top.get("quantization")
        self.st = S.Snapshot(d)
        for p in ("model.language_model.", "language_model.model.", "model."):
            if p + "embed_tokens.weight" in self.st:
                self.pre = p
                break
        else:
            raise SystemExit("%s: no embed_tokens.weight" % d)
        self.embed = self.matrix(self.pre + "embed_tokens")

    # ---- config
    def _ropes(self, c):
        rp = c.get("rope_parameters")
        out = {}
        if isinstance(rp, dict) and ("full_attention" in rp or "sliding_attention" in rp):
            for kind in ("sliding_attention", "full_attention"):
                r = dict(rp[kind])
                t = r.get("rope_type")
                if t is None:
                    t = "proportional" if kind == "full_attention" and r.get("partial_rotary_factor", 1) < 1 else "default"
                out[kind] = (t, r["rope_theta"], r.get("factor", 1.0), r.get("partial_rotary_factor", 1.0))
        else:
            rs = c.get("rope_scaling") or {}
            t = rs.get("rope_type") or rs.get("type") or "default"
            out["full_attention"] = (t, c.get("rope_theta", 1e6), rs.get("factor", 1.0), 1.0)
            out["sliding_attention"] = ("default", c.get("rope_local_base_freq", 1e4), 1.0, 1.0)
        return out

    def inv_freq(self, kind, d):
        t, theta, factor, prf = self.ropes[kind]
        j = np.arange(d // 2, dtype=np.float64)
        inv = 1.0 / theta ** (2.0 * j / d)
        if t == "linear":
            return inv / factor
        if t == "proportional":
            r = int(math.floor(prf * d / 2))
            return np.where(j < r, inv / factor, 0.0)
        if t == "default":
            return inv
        raise SystemExit("rope_type %r" % t)

    # ---- weights
    def qparams(self, path):
        q = self.q
        if not q:
            return None
        v = q.get(path)
        if v is False:
            return None
        if isinstance(v, dict):
            return v.get("bits", q["bits"]), v.get("group_size", q["group_size"])
        if v is True or path + ".scales" in self.st:
            return q["bits"], q["group_size"]
        return None

    def matrix(self, path, name=None):
        qp = self.qparams(path)
        if qp is None:
            return self.st.get_f64(name or path + ".weight")
        bits, gs = qp
        w = self.st.raw(path + ".weight")
        sc = S.to_float(self.st.raw(path + ".scales"), self.st.dtype(path + ".scales"), np.float32)
        bi = S.to_float(self.st.raw(path + ".biases"), self.st.dtype(path + ".biases"), np.float32)
        return S.mlx_affine_dequantize(w, sc, bi, bits, gs, np.float64)

    def vec(self, name):
        return self.st.get_f64(name) if name in self.st else None

    def norm(self, x, w=None):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return y if w is None else y * (w + self.add)

    def donor(self, i):
        first = self.L - self.shared
        if self.shared == 0 or i < first:
            return i
        for d in range(first - 1, -1, -1):
            if self.types[d] == self.types[i]:
                return d
        raise SystemExit("layer %d has no donor" % i)

    def experts(self, p, E, F):
        """[E, F, H] gate, [E, F, H] up, [E, H, F] down."""
        if p + "experts.gate_up_proj" in self.st or p + "experts.gate_up_proj.weight" in self.st:
            n = p + "experts.gate_up_proj"
            gu = self.st.get_f64(n if n in self.st else n + ".weight")
            n = p + "experts.down_proj"
            dn = self.st.get_f64(n if n in self.st else n + ".weight")
            return gu[:, :F], gu[:, F:], dn
        m = p + "experts.switch_glu."
        return (self.matrix(m + "gate_proj"), self.matrix(m + "up_proj"), self.matrix(m + "down_proj"))

    # ---- forward
    def rope(self, x, pos, inv):
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        cos = np.concatenate([np.cos(ang)] * 2, axis=1)[:, None, :]
        sin = np.concatenate([np.sin(ang)] * 2, axis=1)[:, None, :]
        h = x.shape[-1] // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
        return x * cos + rot * sin

    def forward(self, ids, cache=None):
        ids = np.asarray(ids, dtype=np.int64)
        n, H, pre = len(ids), self.H, self.pre
        pos = np.arange(n)
        x = self.embed[ids] * math.sqrt(H)
        pli = None
        if self.P:
            P = self.P
            pe = self.matrix(pre + "embed_tokens_per_layer")[ids].reshape(n, self.L, P) * math.sqrt(P)
            pr = (x @ self.matrix(pre + "per_layer_model_projection").T) * H ** -0.5
            pr = self.norm(pr.reshape(n, self.L, P), self.vec(pre + "per_layer_projection_norm.weight"))
            pli = (pr + pe) * 2 ** -0.5
        kvs = {}
        for i in range(self.L):
            p = "%slayers.%d." % (pre, i)
            full = self.types[i] == "full_attention"
            d = self.ghd if full else self.hd
            kvh = self.gkv if (full and self.k_eq_v) else self.kv
            inv = self.inv_freq(self.types[i], d)
            h = self.norm(x, self.vec(p + "input_layernorm.weight"))
            q = (h @ self.matrix(p + "self_attn.q_proj").T).reshape(n, self.nH, d)
            q = self.rope(self.norm(q, self.vec(p + "self_attn.q_norm.weight")), pos, inv)
            src = self.donor(i)
            if src == i:
                kr = (h @ self.matrix(p + "self_attn.k_proj").T).reshape(n, kvh, d)
                vr = kr if (full and self.k_eq_v) else (h @ self.matrix(p + "self_attn.v_proj").T).reshape(n, kvh, d)
                k = self.rope(self.norm(kr, self.vec(p + "self_attn.k_norm.weight")), pos, inv)
                v = self.norm(vr) if self.gen == 4 else vr
                kvs[i] = (k, v)
            k, v = kvs[src]
            grp = self.nH // k.shape[1]
            kk, vv = np.repeat(k, grp, axis=1), np.repeat(v, grp, axis=1)
            sc = np.einsum("nhd,thd->hnt", q, kk) * self.scale
            if self.attn_cap:
                sc = self.attn_cap * np.tanh(sc / self.attn_cap)
            mask = pos[None, :] <= pos[:, None]
            if not full:
                mask &= (pos[:, None] - pos[None, :]) < self.W
            sc = np.where(mask[None], sc, -np.inf)
            sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
            sc /= sc.sum(axis=-1, keepdims=True)
            o = np.einsum("hnt,thd->nhd", sc, vv).reshape(n, self.nH * d) @ self.matrix(p + "self_attn.o_proj").T
            x = x + self.norm(o, self.vec(p + "post_attention_layernorm.weight"))
            u = self.norm(x, self.vec(p + "pre_feedforward_layernorm.weight"))
            f = self.mlp(p + "mlp.", u)
            if self.moe:
                f = self.norm(f, self.vec(p + "post_feedforward_layernorm_1.weight"))
                f = f + self.norm(self.moe_block(p, x), self.vec(p + "post_feedforward_layernorm_2.weight"))
            x = x + self.norm(f, self.vec(p + "post_feedforward_layernorm.weight"))
            if self.P:
                g = gelu_tanh(x @ self.matrix(p + "per_layer_input_gate").T) * pli[:, i]
                g = g @ self.matrix(p + "per_layer_projection").T
                x = x + self.norm(g, self.vec(p + "post_per_layer_input_norm.weight"))
            s = self.vec(p + "layer_scalar")
            if s is not None:
                x = x * s[0]
        logits = self.norm(x, self.vec(pre + "norm.weight")) @ self.embed.T
        if self.softcap:
            logits = self.softcap * np.tanh(logits / self.softcap)
        return logits

    def mlp(self, p, u):
        g = u @ self.matrix(p + "gate_proj").T
        return (gelu_tanh(g) * (u @ self.matrix(p + "up_proj").T)) @ self.matrix(p + "down_proj").T

    def moe_block(self, p, x):
        c = self.cfg
        E, k, F = c["num_experts"], c["top_k_experts"], c["moe_intermediate_size"]
        r = self.norm(x) * self.vec(p + "router.scale") * self.H ** -0.5
        logits = r @ self.matrix(p + "router.proj").T
        pes = self.vec(p + "router.per_expert_scale")
        gate, up, down = self.experts(p, E, F)
        u = self.norm(x, self.vec(p + "pre_feedforward_layernorm_2.weight"))
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            order = sorted(range(E), key=lambda e: (-logits[t, e], e))[:k]
            z = np.array([logits[t, e] for e in order])
            w = np.exp(z - z.max())
            w /= w.sum()
            for e, we in zip(order, w):
                h = (gelu_tanh(gate[e] @ u[t]) * (up[e] @ u[t])) @ down[e].T
                out[t] += we * pes[e] * h
        return out

    def greedy(self, ids, steps, stop=()):
        seq = list(ids)
        out, margins = [], []
        for _ in range(steps):
            row = self.forward(seq)[-1]
            t = int(np.argmax(row))
            srt = np.sort(row)
            margins.append(float(srt[-1] - srt[-2]))
            out.append(t)
            if t in stop:
                break
            seq.append(t)
        return out, margins

    def new_cache(self):
        return None
