#!/usr/bin/python3
"""ref_forward.py — float64 numpy reference forward pass for kiln's tests.

Loads a Hugging Face snapshot of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or
Qwen3ForCausalLM (Gemma 3 / Gemma 4: tools/ref_gemma.py, through the same command line) (F32/F16/BF16 weights, one file or sharded, or an mlx-lm affine-quantized
snapshot, dequantized at load) and computes logits for every position of a token sequence.
All arithmetic is float64 on the stored weights widened exactly (bf16/f16 -> f64; MLX affine
weights dequantized in float32 as MLX does, w = q*scale + bias, then widened). Every weight is
expanded to float64 in memory: meant for small test models, not the 1B-shaped one.

Usage (run with /usr/bin/python3, which has Debian's numpy):
  ref_forward.py --model DIR --tokens 1,2,3 [--out FILE] [--last]      logits, raw LE float32
                                                                      [n, vocab] (or [1, vocab])
                 [--compare GOLD.f32 [--tol 1e-4]]                    max |ours - gold|
                 [--greedy N [--stop]]                                greedy continuation (ids)
  ref_forward.py --check-oracle DIR [--tol 1e-4]       DIR = shared/oracle/<model> (oracle.json, hf/)
  ref_forward.py --check-stories DIR [--tol 1e-4]      DIR holds reference.greedy.json (stories260K)
  ref_forward.py --check-emulated DIR [--tol 1e-4]     DIR holds reference.json + reference.safetensors
                                                       (shared/vectors/mlx-quant/emulated/*)
Checks print one line each and exit 1 on failure.

Model (HF transformers modeling_llama / mistral / qwen2 / qwen3, eager attention):
  h = embed[ids]
  per layer: a = RMSNorm(h) * w_in;  q,k,v = a·Wqᵀ(+bq), a·Wkᵀ(+bk), a·Wvᵀ(+bv)   (bias iff the
    tensor exists: qwen2 always, llama with attention_bias);  qwen3: q,k = RMSNorm over head_dim
    per head * q_norm / k_norm (before RoPE);  RoPE (below) on q,k;  GQA: query head j uses kv
    head j // (heads/kv_heads);  scores = q·kᵀ / sqrt(head_dim), causal mask, sliding-window
    mask where enabled, softmax;  h += (attn·V)·Woᵀ;  h += Wdown·(silu(Wgate·x) * Wup·x) with
    x = RMSNorm(h) * w_post.
  logits = RMSNorm(h) * w_final · Wlmᵀ, Wlm = embed when tie_word_embeddings (or lm_head absent).
  RMSNorm(x) = x / sqrt(mean(x²) + rms_norm_eps).
  Sliding window W (a query at position p sees keys p-W+1 .. p): mistral when sliding_window is
    set (all layers); qwen2/qwen3 when use_sliding_window and sliding_window are set, for layers
    i >= max_window_layers (or per config "layer_types" == "sliding_attention" when present).

RoPE ("rotate half" layout, HF modeling_rope_utils.py), dim = head_dim (partial_rotary_factor
honoured), base = rope_theta, i = 0 .. dim/2-1:
  default:  inv_freq[i] = base^(-2i/dim), attention_factor = 1.
  cos/sin(pos, i) = cos/sin(pos * inv_freq[i]) * attention_factor, duplicated to dim;
  x' = x*cos + rotate_half(x)*sin, rotate_half(x) = (-x[dim/2:], x[:dim/2]).
  linear (_compute_linear_scaling_rope_parameters):  inv_freq = default / factor.
  llama3 (_compute_llama3_parameters): L = original_max_position_embeddings,
    low_wl = L / low_freq_factor, high_wl = L / high_freq_factor, wl = 2π / inv_freq;
    wl > low_wl: inv_freq / factor;  wl < high_wl: inv_freq;  otherwise
    s = (L / wl - low_freq_factor) / (high_freq_factor - low_freq_factor),
    (1 - s) * inv_freq / factor + s * inv_freq.
  yarn (_compute_yarn_parameters, transformers >= 4.56 semantics):
    factor = rope_scaling.factor (if absent: max_position_embeddings / original);
    L = rope_scaling.original_max_position_embeddings, else max_position_embeddings;
    attention_factor = rope_scaling.attention_factor, else
      mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set, else mscale(factor),
      mscale(s, m=1) = 1 if s <= 1 else 0.1*m*ln(s) + 1   (i.e. 0.1*ln(factor) + 1 by default);
    beta_fast = 32, beta_slow = 1 unless set;
    corr_dim(r) = dim * ln(L / (2π r)) / (2 ln base);
    low = corr_dim(beta_fast), high = corr_dim(beta_slow), floored / ceiled unless
      rope_scaling.truncate is false, then low = max(low, 0), high = min(high, dim - 1);
    ramp[i] = clip((i - low) / (high - low), 0, 1) (high += 0.001 if equal);
    extrap = 1 - ramp;  inv_freq = base^(-2i/dim) / factor * (1 - extrap) + base^(-2i/dim) * extrap.
    (transformers 4.45–4.55 replaced factor by max_position_embeddings / original when the latter
    was given; make-test-model writes max_position_embeddings = factor * original so both agree.)
  dynamic (_compute_dynamic_ntk_parameters): per forward call, seq_len = max(last position + 1,
    max_position_embeddings); base' = base * (factor * seq_len / max_position_embeddings -
    (factor - 1))^(dim / (dim - 2)); inv_freq = base'^(-2i/dim).  Keys already in the cache keep the
    rotation they were computed with (as HF's cache does); a whole-sequence forward uses the
    sequence length.

Qwen3.5 hybrid (Qwen3_5ForConditionalGeneration text path, Qwen3_5ForCausalLM; transformers
modeling_qwen3_5.py, shared/design/models/qwen3_5.md): layer i is full attention iff
(i+1) % full_attention_interval == 0, else gated DeltaNet. Layout: HF iff some conv1d.weight has
last dim != 1 (then input/post-attention/final/q/k norms multiply by 1 + w); tensor prefix
model.language_model. (HF), language_model.model. (mlx-lm) or model. (CausalLM).
  full attention: q_proj rows per head = d query rows then d gate rows; q,k = RMSNorm per head;
    RoPE on the first head_dim * partial_rotary_factor dims (rotate half, exponent over that
    width); causal softmax, GQA; o = attn * sigmoid(gate); o_proj.
  DeltaNet: qkv = a·W_qkvᵀ, z, b, a' projections; causal depthwise conv (kernel K, zero history,
    tap K-1 on the current token) then silu; split q [Hk,Dk], k [Hk,Dk], v [Hv,Dv];
    q <- q / sqrt(Σq² + 1e-6) / sqrt(Dk), k <- k / sqrt(Σk² + 1e-6); value head j uses key head
    j // (Hv/Hk); β = sigmoid(b), g = exp(-exp(A_log) * softplus(a' + dt_bias)); per token
    S <- g S; u = β (v - Sᵀk); S <- S + k uᵀ; o = Sᵀq; y = RMSNorm(o) * norm.weight * silu(z);
    out_proj.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_numpy as S  # noqa: E402
import ref_gemma  # noqa: E402

SUPPORTED = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
HYBRID = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")


def load_config(d):
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    if "text_config" in c and isinstance(c["text_config"], dict):
        tc = dict(c["text_config"])
        for k, v in c.items():
            if k != "text_config" and k not in tc:
                tc[k] = v
        c = tc
    return c


class Model:
    def __new__(cls, d):
        """Gemma 3/4 snapshots go to ref_gemma.GemmaModel (same interface)."""
        arch = (load_config(d).get("architectures") or [""])[0]
        if arch in ref_gemma.ARCHS:
            return ref_gemma.GemmaModel(d)
        return super().__new__(cls)

    def __init__(self, d):
        self.dir = d
        c = self.cfg = load_config(d)
        arch = (c.get("architectures") or [""])[0]
        if arch not in SUPPORTED and not (arch in HYBRID and isinstance(self, Qwen35)):
            raise SystemExit("%s: unsupported architecture %r (supported: %s)" % (d, arch, ", ".join(SUPPORTED)))
        self.arch = arch
        self.mt = c.get("model_type", "")
        self.hidden = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.vocab = c["vocab_size"]
        self.theta = c.get("rope_theta", 10000.0)
        self.rs = c.get("rope_scaling") or c.get("rope_parameters")
        if self.rs and (self.rs.get("rope_type") or self.rs.get("type")) in (None, "default"):
            self.rs = None
        self.max_pos = c.get("max_position_embeddings", 2048)
        self.tie = bool(c.get("tie_word_embeddings", False))
        prf = (c.get("rope_parameters") or {}).get("partial_rotary_factor") or c.get("partial_rotary_factor", 1.0)
        self.rot_dim = int(self.head_dim * prf)
        if (c.get("rope_parameters") or {}).get("rope_theta") is not None and "rope_theta" not in c:
            self.theta = c["rope_parameters"]["rope_theta"]
        self.q = c.get("quantization")
        if self.q is None:
            qc = c.get("quantization_config")
            if isinstance(qc, dict) and "quant_method" not in qc:
                self.q = qc
        self.st = S.Snapshot(d)
        self.window = [None] * self.layers
        sw = c.get("sliding_window")
        if "layer_types" in c and sw:
            self.window = [sw if t == "sliding_attention" else None for t in c["layer_types"]]
        elif arch == "MistralForCausalLM" and sw:
            self.window = [sw] * self.layers
        elif arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM") and c.get("use_sliding_window") and sw:
            mwl = c.get("max_window_layers", self.layers)
            self.window = [sw if i >= mwl else None for i in range(self.layers)]
        self._load()

    # ---- weights

    def qparams(self, path):
        """(bits, group_size) if module `path` is quantized, else None (spec §2.4)."""
        q = self.q
        if q is None:
            return None
        if path in q:
            v = q[path]
            if v is False:
                return None
            if isinstance(v, dict):
                mode = v.get("mode", q.get("mode", "affine"))
                if mode != "affine":
                    raise SystemExit("%s: mode %s not supported" % (path, mode))
                return v.get("bits", q["bits"]), v.get("group_size", q["group_size"])
            return q["bits"], q["group_size"]
        if path + ".scales" in self.st:
            if q.get("mode", "affine") != "affine":
                raise SystemExit("%s: mode %s not supported" % (path, q.get("mode")))
            return q["bits"], q["group_size"]
        return None

    def matrix(self, path):
        """Float64 [out, in] weight of module `path` (dequantized when quantized)."""
        qp = self.qparams(path)
        if qp is None:
            return self.st.get_f64(path + ".weight")
        bits, gs = qp
        w = self.st.raw(path + ".weight")
        sc = S.to_float(self.st.raw(path + ".scales"), self.st.dtype(path + ".scales"), np.float32)
        bi = S.to_float(self.st.raw(path + ".biases"), self.st.dtype(path + ".biases"), np.float32)
        if w.shape[-1] * 32 != sc.shape[-1] * gs * bits:
            raise SystemExit("%s: packed width %d does not match scales %s for bits %d group %d"
                             % (path, w.shape[-1], sc.shape, bits, gs))
        return S.mlx_affine_dequantize(w, sc, bi, bits, gs, np.float64)

    def vec(self, name):
        return self.st.get_f64(name) if name in self.st else None

    def _load(self):
        self.embed = self.matrix("model.embed_tokens")
        if self.embed.shape != (self.vocab, self.hidden):
            raise SystemExit("embed_tokens shape %s != (%d, %d)" % (self.embed.shape, self.vocab, self.hidden))
        self.L = []
        for i in range(self.layers):
            p = "model.layers.%d." % i
            L = {
                "in_norm": self.vec(p + "input_layernorm.weight"),
                "post_norm": self.vec(p + "post_attention_layernorm.weight"),
            }
            for m in ("q", "k", "v", "o"):
                L[m] = self.matrix(p + "self_attn.%s_proj" % m)
                L[m + "_b"] = self.vec(p + "self_attn.%s_proj.bias" % m)
            for m in ("gate", "up", "down"):
                L[m] = self.matrix(p + "mlp.%s_proj" % m)
                L[m + "_b"] = self.vec(p + "mlp.%s_proj.bias" % m)
            L["q_norm"] = self.vec(p + "self_attn.q_norm.weight")
            L["k_norm"] = self.vec(p + "self_attn.k_norm.weight")
            if self.arch == "Qwen3ForCausalLM" and (L["q_norm"] is None or L["k_norm"] is None):
                raise SystemExit("qwen3: missing q_norm/k_norm in layer %d" % i)
            self.L.append(L)
        self.norm = self.vec("model.norm.weight")
        if self.tie or ("lm_head.weight" not in self.st):
            if not self.tie:
                sys.stderr.write("note: lm_head.weight absent, using the embedding as output head\n")
            self.head = self.embed
        else:
            self.head = self.matrix("lm_head")

    # ---- rope

    def inv_freq(self, seq_len):
        dim, base = self.rot_dim, float(self.theta)
        i2 = np.arange(0, dim, 2, dtype=np.float64) / dim
        inv = 1.0 / base ** i2
        att = 1.0
        rs = self.rs
        if not rs:
            return inv, att
        kind = rs.get("rope_type") or rs.get("type")
        if kind == "linear":
            return inv / rs["factor"], att
        if kind == "llama3":
            factor = rs["factor"]
            lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
            L = rs["original_max_position_embeddings"]
            low_wl, high_wl = L / lo, L / hi
            wl = 2 * math.pi / inv
            out = np.where(wl > low_wl, inv / factor, inv)
            s = (L / wl - lo) / (hi - lo)
            smooth = (1 - s) * out / factor + s * out
            medium = ~(wl < high_wl) & ~(wl > low_wl)
            return np.where(medium, smooth, out), att
        if kind == "yarn":
            L = rs.get("original_max_position_embeddings") or self.max_pos
            factor = rs.get("factor")
            if factor is None:
                factor = self.max_pos / L
            att = rs.get("attention_factor")
            if att is None:
                def ms(s, m=1.0):
                    return 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
                if rs.get("mscale") and rs.get("mscale_all_dim"):
                    att = ms(factor, rs["mscale"]) / ms(factor, rs["mscale_all_dim"])
                else:
                    att = ms(factor)
            bf = rs.get("beta_fast") or 32
            bs = rs.get("beta_slow") or 1

            def cdim(r):
                return dim * math.log(L / (r * 2 * math.pi)) / (2 * math.log(base))
            low, high = cdim(bf), cdim(bs)
            if rs.get("truncate", True):
                low, high = math.floor(low), math.ceil(high)
            low, high = max(low, 0), min(high, dim - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
            extra = 1 - ramp
            pos_freqs = base ** i2
            return (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra, float(att)
        if kind == "dynamic":
            factor = rs["factor"]
            mp = self.max_pos
            sl = max(seq_len, mp)
            b2 = base * ((factor * sl / mp) - (factor - 1)) ** (dim / (dim - 2))
            return 1.0 / b2 ** i2, att
        raise SystemExit("rope_scaling type %r not supported" % kind)

    def rope(self, x, pos, inv, att):
        """x: [n, heads, head_dim]; rotate the first rot_dim dims, rotate-half layout."""
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=1)[:, None, :] * att
        sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=1)[:, None, :] * att
        d = self.rot_dim
        xr = x[..., :d]
        half = d // 2
        rot = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
        out = xr * cos + rot * sin
        if d < x.shape[-1]:
            out = np.concatenate([out, x[..., d:]], axis=-1)
        return out

    # ---- forward

    def rms(self, x, w):
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return y * w if w is not None else y

    def new_cache(self):
        return {"pos": 0, "k": [None] * self.layers, "v": [None] * self.layers}

    def forward(self, ids, cache=None, hidden=False):
        """Logits [n, vocab] for ids fed at positions cache.pos .. cache.pos+n-1; with hidden,
        the final-normed hidden states [n, hidden] instead (what embeddings pool)."""
        if cache is None:
            cache = self.new_cache()
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            raise SystemExit("token id out of range [0, %d)" % self.vocab)
        n = len(ids)
        p0 = cache["pos"]
        pos = np.arange(p0, p0 + n)
        inv, att = self.inv_freq(p0 + n)
        H, KV, D = self.heads, self.kv_heads, self.head_dim
        grp = H // KV
        h = self.embed[ids]
        for li, L in enumerate(self.L):
            a = self.rms(h, L["in_norm"])
            q = a @ L["q"].T
            k = a @ L["k"].T
            v = a @ L["v"].T
            if L["q_b"] is not None:
                q = q + L["q_b"]
            if L["k_b"] is not None:
                k = k + L["k_b"]
            if L["v_b"] is not None:
                v = v + L["v_b"]
            q = q.reshape(n, H, D)
            k = k.reshape(n, KV, D)
            v = v.reshape(n, KV, D)
            if L["q_norm"] is not None:
                q = self.rms(q, L["q_norm"])
                k = self.rms(k, L["k_norm"])
            q = self.rope(q, pos, inv, att)
            k = self.rope(k, pos, inv, att)
            if cache["k"][li] is not None:
                k = np.concatenate([cache["k"][li], k], axis=0)
                v = np.concatenate([cache["v"][li], v], axis=0)
            cache["k"][li], cache["v"][li] = k, v
            T = k.shape[0]
            kpos = np.arange(T)
            mask = kpos[None, :] <= pos[:, None]
            if self.window[li]:
                mask &= (pos[:, None] - kpos[None, :]) < self.window[li]
            kk = np.repeat(k, grp, axis=1)  # [T, H, D]
            vv = np.repeat(v, grp, axis=1)
            sc = np.einsum("nhd,thd->hnt", q, kk) / math.sqrt(D)
            sc = np.where(mask[None, :, :], sc, -np.inf)
            sc = sc - sc.max(axis=-1, keepdims=True)
            pr = np.exp(sc)
            pr /= pr.sum(axis=-1, keepdims=True)
            o = np.einsum("hnt,thd->nhd", pr, vv).reshape(n, H * D)
            o = o @ L["o"].T
            if L["o_b"] is not None:
                o = o + L["o_b"]
            h = h + o
            x = self.rms(h, L["post_norm"])
            g = x @ L["gate"].T
            u = x @ L["up"].T
            if L["gate_b"] is not None:
                g = g + L["gate_b"]
            if L["up_b"] is not None:
                u = u + L["up_b"]
            m = (g / (1.0 + np.exp(-g))) * u
            m = m @ L["down"].T
            if L["down_b"] is not None:
                m = m + L["down_b"]
            h = h + m
        cache["pos"] = p0 + n
        hs = self.rms(h, self.norm)
        return hs if hidden else hs @ self.head.T

    def greedy(self, ids, steps, stop=()):
        cache = self.new_cache()
        logits = self.forward(ids, cache)[-1]
        out, margins = [], []
        for _ in range(steps):
            t = int(np.argmax(logits))  # lowest id on ties
            srt = np.sort(logits)
            margins.append(float(srt[-1] - srt[-2]))
            out.append(t)
            if t in stop:
                break
            logits = self.forward([t], cache)[-1]
        return out, margins


class Qwen35(Model):
    """The Qwen3.5 hybrid (see the module docstring)."""

    NORM1 = (".input_layernorm.weight", ".post_attention_layernorm.weight", "norm.weight",
             ".q_norm.weight", ".k_norm.weight")

    def _load(self):
        c = self.cfg
        names = list(self.st.where)
        for pre in ("model.language_model.", "language_model.model.", "model."):
            if pre + "embed_tokens.weight" in self.st or pre + "embed_tokens.scales" in self.st:
                self.pre = pre
                break
        else:
            raise SystemExit("qwen3_5: no embed_tokens under a known prefix")
        convs = [n for n in names if n.endswith("linear_attn.conv1d.weight")]
        self.hf = any(self.st.shape(n)[-1] != 1 for n in convs)
        self.interval = c.get("full_attention_interval", 4)
        self.full = [(i + 1) % self.interval == 0 for i in range(self.layers)]
        lt = c.get("layer_types")
        if lt and [t == "full_attention" for t in lt] != self.full:
            raise SystemExit("qwen3_5: layer_types disagree with full_attention_interval")
        self.Hk, self.Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.Dk, self.Dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.K = c["linear_conv_kernel_dim"]
        P = self.pre
        self.embed = self.matrix(P + "embed_tokens")
        self.L = []
        for i in range(self.layers):
            p = P + "layers.%d." % i
            L = {"in_norm": self.norm_vec(p + "input_layernorm.weight"),
                 "post_norm": self.norm_vec(p + "post_attention_layernorm.weight")}
            for m in ("gate", "up", "down"):
                L[m] = self.matrix(p + "mlp.%s_proj" % m)
            if self.full[i]:
                for m in ("q", "k", "v", "o"):
                    L[m] = self.matrix(p + "self_attn.%s_proj" % m)
                L["q_norm"] = self.norm_vec(p + "self_attn.q_norm.weight")
                L["k_norm"] = self.norm_vec(p + "self_attn.k_norm.weight")
            else:
                la = p + "linear_attn."
                for m in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"):
                    L[m] = self.matrix(la + m)
                w = self.st.get_f64(la + "conv1d.weight")
                L["conv"] = w[:, 0, :] if self.hf else w[:, :, 0]  # [C, K]
                L["A_log"] = self.st.get_f64(la + "A_log")
                L["dt_bias"] = self.st.get_f64(la + "dt_bias")
                L["gnorm"] = self.st.get_f64(la + "norm.weight")  # used as is in both layouts
            self.L.append(L)
        self.norm = self.norm_vec(P + "norm.weight")
        head = "lm_head" if P != "language_model.model." else "language_model.lm_head"
        if self.tie or (head + ".weight") not in self.st:
            self.head = self.embed
        else:
            self.head = self.matrix(head)
        self.mtp = None  # loaded by mtp_forward (some snapshots carry only part of a head)

    def _load_mtp(self):
        """The multi-token-prediction head (docs/hybrid.md, MTP): fc [H, 2H], the two pre-fc
        norms, one gated-attention decoder layer mtp.layers.0, its final norm; every norm is a
        Qwen3_5RMSNorm (1 + w in the HF layout). Embeddings and head are the model's."""
        p = "mtp.layers.0."
        L = {"in_norm": self.norm_vec(p + "input_layernorm.weight"),
             "post_norm": self.norm_vec(p + "post_attention_layernorm.weight"),
             "q_norm": self.norm_vec(p + "self_attn.q_norm.weight"),
             "k_norm": self.norm_vec(p + "self_attn.k_norm.weight")}
        for m in ("q", "k", "v", "o"):
            L[m] = self.matrix(p + "self_attn.%s_proj" % m)
        for m in ("gate", "up", "down"):
            L[m] = self.matrix(p + "mlp.%s_proj" % m)
        return {"fc": self.matrix("mtp.fc"), "layer": L,
                "norm_e": self.norm_vec("mtp.pre_fc_norm_embedding.weight"),
                "norm_h": self.norm_vec("mtp.pre_fc_norm_hidden.weight"),
                "norm": self.norm_vec("mtp.norm.weight")}

    def mtp_forward(self, hidden, next_ids, p0=0):
        """MTP logits [n, vocab]: row i reads the model's final-normed hidden state at position
        p0 + i (hidden[i]) and the token after it (next_ids[i]), attends over the head's own K/V
        of positions p0 .. p0 + i, and predicts the token after next_ids[i]."""
        if self.mtp is None:
            if "mtp.pre_fc_norm_hidden.weight" not in self.st:
                raise SystemExit("qwen3_5: no mtp.* head in this snapshot")
            self.mtp = self._load_mtp()
        t = self.mtp
        n = len(next_ids)
        e = self.embed[np.asarray(next_ids, dtype=np.int64)]
        x = np.concatenate([self.rms(e, t["norm_e"]), self.rms(hidden, t["norm_h"])], axis=-1)
        h = x @ t["fc"].T
        pos = np.arange(p0, p0 + n)
        inv, att = self.inv_freq(p0 + n)
        L = t["layer"]
        cache = {"k": [None], "v": [None]}
        h = h + self.attention(0, L, self.rms(h, L["in_norm"]), cache, pos, inv, att)
        a = self.rms(h, L["post_norm"])
        g = a @ L["gate"].T
        h = h + ((g / (1.0 + np.exp(-g))) * (a @ L["up"].T)) @ L["down"].T
        return self.rms(h, t["norm"]) @ self.head.T

    def norm_vec(self, name):
        w = self.st.get_f64(name)
        return w + 1.0 if self.hf else w

    def new_cache(self):
        C = 2 * self.Hk * self.Dk + self.Hv * self.Dv
        return {"pos": 0, "k": [None] * self.layers, "v": [None] * self.layers,
                "conv": [np.zeros((self.K - 1, C)) for _ in range(self.layers)],
                "S": [np.zeros((self.Hv, self.Dk, self.Dv)) for _ in range(self.layers)]}

    def attention(self, li, L, a, cache, pos, inv, att):
        n, H, KV, D = a.shape[0], self.heads, self.kv_heads, self.head_dim
        qg = (a @ L["q"].T).reshape(n, H, 2 * D)
        q, gate = qg[..., :D], qg[..., D:].reshape(n, H * D)
        k = (a @ L["k"].T).reshape(n, KV, D)
        v = (a @ L["v"].T).reshape(n, KV, D)
        q = self.rope(self.rms(q, L["q_norm"]), pos, inv, att)
        k = self.rope(self.rms(k, L["k_norm"]), pos, inv, att)
        if cache["k"][li] is not None:
            k = np.concatenate([cache["k"][li], k], axis=0)
            v = np.concatenate([cache["v"][li], v], axis=0)
        cache["k"][li], cache["v"][li] = k, v
        mask = np.arange(k.shape[0])[None, :] <= pos[:, None]
        kk, vv = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)
        sc = np.einsum("nhd,thd->hnt", q, kk) / math.sqrt(D)
        sc = np.where(mask[None, :, :], sc, -np.inf)
        pr = np.exp(sc - sc.max(axis=-1, keepdims=True))
        pr /= pr.sum(axis=-1, keepdims=True)
        o = np.einsum("hnt,thd->nhd", pr, vv).reshape(n, H * D)
        return (o / (1.0 + np.exp(-gate))) @ L["o"].T

    def deltanet(self, li, L, a, cache):
        n, Hk, Hv, Dk, Dv, K = a.shape[0], self.Hk, self.Hv, self.Dk, self.Dv, self.K
        qkv = a @ L["in_proj_qkv"].T
        z = (a @ L["in_proj_z"].T).reshape(n, Hv, Dv)
        b = a @ L["in_proj_b"].T
        ga = a @ L["in_proj_a"].T
        x = np.concatenate([cache["conv"][li], qkv], axis=0)  # K-1 rows of history first
        cache["conv"][li] = x[-(K - 1):] if K > 1 else x[:0]
        conv = np.stack([np.sum(x[t:t + K] * L["conv"].T, axis=0) for t in range(n)])
        conv = conv / (1.0 + np.exp(-conv))
        q = conv[:, :Hk * Dk].reshape(n, Hk, Dk)
        k = conv[:, Hk * Dk:2 * Hk * Dk].reshape(n, Hk, Dk)
        v = conv[:, 2 * Hk * Dk:].reshape(n, Hv, Dv)
        q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6) / math.sqrt(Dk)
        k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
        rep = Hv // Hk
        q, k = np.repeat(q, rep, axis=1), np.repeat(k, rep, axis=1)
        beta = 1.0 / (1.0 + np.exp(-b))
        sp = np.logaddexp(0.0, ga + L["dt_bias"])
        g = np.exp(-np.exp(L["A_log"]) * sp)  # [n, Hv]
        S = cache["S"][li]
        o = np.empty((n, Hv, Dv))
        for t in range(n):
            S = S * g[t][:, None, None]
            kS = np.einsum("hk,hkv->hv", k[t], S)
            u = beta[t][:, None] * (v[t] - kS)
            S = S + np.einsum("hk,hv->hkv", k[t], u)
            o[t] = np.einsum("hk,hkv->hv", q[t], S)
        cache["S"][li] = S
        y = self.rms(o, L["gnorm"]) * (z / (1.0 + np.exp(-z)))
        return y.reshape(n, Hv * Dv) @ L["out_proj"].T

    def forward(self, ids, cache=None, hidden=False):
        if cache is None:
            cache = self.new_cache()
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            raise SystemExit("token id out of range [0, %d)" % self.vocab)
        n, p0 = len(ids), cache["pos"]
        pos = np.arange(p0, p0 + n)
        inv, att = self.inv_freq(p0 + n)
        h = self.embed[ids]
        for li, L in enumerate(self.L):
            a = self.rms(h, L["in_norm"])
            if self.full[li]:
                h = h + self.attention(li, L, a, cache, pos, inv, att)
            else:
                h = h + self.deltanet(li, L, a, cache)
            x = self.rms(h, L["post_norm"])
            g = x @ L["gate"].T
            h = h + ((g / (1.0 + np.exp(-g))) * (x @ L["up"].T)) @ L["down"].T
        cache["pos"] = p0 + n
        hs = self.rms(h, self.norm)
        return hs if hidden else hs @ self.head.T


def open_model(d):
    """The reference model of snapshot d (Model, or Qwen35 for the hybrids)."""
    arch = (load_config(d).get("architectures") or [""])[0]
    return Qwen35(d) if arch in HYBRID else Model(d)


# ------------------------------------------------------------------ checks


def report(ok, msg):
    print("%s: %s" % ("PASS" if ok else "FAIL", msg))
    return ok


def check_oracle(d, tol):
    with open(os.path.join(d, "oracle.json")) as f:
        o = json.load(f)
    m = open_model(os.path.join(d, o.get("hf_dir", "hf")))
    ok = True
    for i, s in enumerate(o["sequences"]):
        gold = np.fromfile(os.path.join(d, s["logits_file"]), "<f4").reshape(s["shape"])
        ours = m.forward(s["ids"])
        diff = float(np.max(np.abs(ours - gold)))
        ok &= report(diff <= tol, "%s seq %d (%d tokens) max|diff| %.3g (tol %g)"
                     % (os.path.basename(d.rstrip("/")), i, len(s["ids"]), diff, tol))
    g = o.get("greedy")
    if g:
        ids = o["sequences"][g["from_sequence"]]["ids"]
        got, _ = m.greedy(ids, g["steps"])
        ok &= report(got == g["ids"], "%s greedy %d steps: %s" % (
            os.path.basename(d.rstrip("/")), g["steps"], "identical" if got == g["ids"] else "%s vs %s" % (got, g["ids"])))
    return ok


def check_stories(d, tol):
    with open(os.path.join(d, "reference.greedy.json")) as f:
        r = json.load(f)
    m = Model(d)
    ok = True
    first = np.asarray(r["first_logits"])
    ours = m.forward(r["prompt_ids"])[-1][: len(first)]
    diff = float(np.max(np.abs(ours - first)))
    ok &= report(diff <= tol, "stories260K first logits max|diff| %.3g (tol %g)" % (diff, tol))
    got, _ = m.greedy(r["prompt_ids"], len(r["tokens"]), stop=set(r.get("stop", [])))
    want = r["tokens"]
    same = got == want
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    ok &= report(same, "stories260K greedy %d tokens from %s: %s" % (
        len(want), r["prompt_ids"], "identical" if same else "first difference at %d" % k))
    return ok


def check_emulated(d, tol):
    with open(os.path.join(d, "reference.json")) as f:
        r = json.load(f)
    st = S.SafeTensors(os.path.join(d, "reference.safetensors"))
    toks = [int(t) for t in st.raw("teacher_forced_tokens")]
    gold = st.get_f64("teacher_forced_logits")
    m = Model(d)
    ours = m.forward(toks)
    diff = float(np.max(np.abs(ours - gold)))
    name = os.path.basename(d.rstrip("/"))
    ok = report(diff <= tol, "%s teacher-forced %d tokens max|diff| %.3g (tol %g)" % (name, len(toks), diff, tol))
    got, _ = m.greedy(r["prompt_ids"], len(r["greedy_tokens"]), stop=set(r.get("stop", [])))
    ok &= report(got == r["greedy_tokens"], "%s greedy %d tokens: %s" % (
        name, len(r["greedy_tokens"]), "identical" if got == r["greedy_tokens"] else "differ"))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model")
    ap.add_argument("--tokens", help="comma-separated token ids")
    ap.add_argument("--out", help="write raw little-endian float32 logits here")
    ap.add_argument("--last", action="store_true", help="only the last position")
    ap.add_argument("--compare", help="golden raw float32 logits to compare with")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--greedy", type=int, help="continue greedily this many steps, print the ids")
    ap.add_argument("--stop", action="store_true", help="with --greedy: stop at an eos id")
    ap.add_argument("--mtp", action="store_true",
                    help="qwen3_5: the MTP head's logits at positions 0 .. n-2 instead")
    ap.add_argument("--check-oracle", nargs="+", metavar="DIR")
    ap.add_argument("--check-stories", metavar="DIR")
    ap.add_argument("--check-emulated", nargs="+", metavar="DIR")
    a = ap.parse_args()

    if a.check_oracle or a.check_stories or a.check_emulated:
        ok = True
        for d in a.check_oracle or []:
            ok &= check_oracle(d, a.tol)
        if a.check_stories:
            ok &= check_stories(a.check_stories, a.tol)
        for d in a.check_emulated or []:
            ok &= check_emulated(d, a.tol)
        return 0 if ok else 1

    if not a.model or not a.tokens:
        ap.error("--model and --tokens are required")
    ids = [int(t) for t in a.tokens.replace(" ", "").split(",") if t != ""]
    m = open_model(a.model)
    if a.greedy:
        stop = set()
        if a.stop:
            e = m.cfg.get("eos_token_id")
            stop = set(e if isinstance(e, list) else [e])
            gp = os.path.join(a.model, "generation_config.json")
            if os.path.exists(gp):
                with open(gp) as f:
                    e = json.load(f).get("eos_token_id")
                if e is not None:
                    stop |= set(e if isinstance(e, list) else [e])
        got, margins = m.greedy(ids, a.greedy, stop)
        print(json.dumps({"ids": got, "min_top2_margin": min(margins) if margins else None}))
        return 0
    if a.mtp:  # the MTP head's logits at positions 0 .. n-2 (hidden at p, token p + 1)
        if len(ids) < 2:
            ap.error("--mtp needs at least two tokens")
        logits = m.mtp_forward(m.forward(ids[:-1], hidden=True), ids[1:])
    else:
        logits = m.forward(ids)
    if a.last:
        logits = logits[-1:]
    if a.out:
        logits.astype("<f4").tofile(a.out)
    rc = 0
    if a.compare:
        gold = np.fromfile(a.compare, "<f4")
        if gold.size != logits.size:
            print("FAIL: %s has %d values, expected %d" % (a.compare, gold.size, logits.size))
            return 1
        diff = float(np.max(np.abs(logits.astype(np.float64).ravel() - gold)))
        ok = diff <= a.tol
        print("%s: max|diff| %.3g vs %s (tol %g)" % ("PASS" if ok else "FAIL", diff, a.compare, a.tol))
        rc = 0 if ok else 1
    if not a.out and not a.compare:
        for t in range(logits.shape[0]):
            row = logits[t]
            print("pos %d: argmax %d (%.6f) first %s" % (
                t if not a.last else len(ids) - 1, int(np.argmax(row)), float(row.max()),
                " ".join("%.6f" % v for v in row[:4])))
    return rc


if __name__ == "__main__":
    sys.exit(main())
