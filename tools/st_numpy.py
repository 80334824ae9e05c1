"""st_numpy.py — safetensors I/O, bf16 rounding and MLX affine quantization in numpy.

Shared by tools/make-test-model and tools/ref_forward.py (standard library + numpy only;
run with /usr/bin/python3, which has Debian's python3-numpy).

safetensors: 8-byte little-endian header length, a JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
(offsets relative to the end of the header), then the raw little-endian data.

MLX affine quantization follows ../shared/design/mlx-quant-format.md §3.3 (MLX CPU backend):
per group of gs values, in float32 with one correctly rounded operation per step,
  s = max((max - min) / n_bins, 1e-7); if |min| > |max|: edge = min else s = -s, edge = max;
  q0 = rint(edge / s); if q0 != 0: scale = edge / q0, bias = edge else scale = s, bias = 0;
  q = clip(rint((v - bias) / scale), 0, n_bins)   (rint = round half to even)
then scale/bias are cast to the model dtype (round to nearest even). Codes are packed as one
LSB-first bit stream per row into little-endian uint32 words (§3.2).
"""

import json
import os
import struct

import numpy as np

DTYPES = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # raw bits; use bf16_to_f32 to widen
    "F64": np.dtype("<f8"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I64": np.dtype("<i8"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
}


# ---------------------------------------------------------------- bf16


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bits, round to nearest even (no NaN inputs expected)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return r.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def round_to_dtype(x32, dtype):
    """Round float32 values to the model dtype ('F32', 'F16', 'BF16'); return (stored array, f32 view)."""
    if dtype == "F32":
        a = np.ascontiguousarray(x32, dtype=np.float32)
        return a, a
    if dtype == "F16":
        a = x32.astype(np.float16)
        return a, a.astype(np.float32)
    if dtype == "BF16":
        a = f32_to_bf16_bits(x32)
        return a, bf16_bits_to_f32(a)
    raise ValueError("unsupported float dtype " + dtype)


# ---------------------------------------------------------------- reading


class SafeTensors:
    """One safetensors file, memory-mapped. get(name) returns a numpy view (BF16 as uint16 bits)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            self.header = json.loads(f.read(n))
        self.data_start = 8 + n
        self.meta = self.header.pop("__metadata__", None) or {}
        self._mm = np.memmap(path, dtype=np.uint8, mode="r")

    def names(self):
        return list(self.header.keys())

    def dtype(self, name):
        return self.header[name]["dtype"]

    def shape(self, name):
        return tuple(self.header[name]["shape"])

    def raw(self, name):
        h = self.header[name]
        b, e = h["data_offsets"]
        dt = DTYPES[h["dtype"]]
        buf = self._mm[self.data_start + b:self.data_start + e]
        return buf.view(dt).reshape(h["shape"])

    def get_f64(self, name):
        return to_float(self.raw(name), self.dtype(name), np.float64)

    def get_f32(self, name):
        return to_float(self.raw(name), self.dtype(name), np.float32)


def to_float(a, dtype, out=np.float64):
    if dtype == "BF16":
        return bf16_bits_to_f32(a).astype(out)
    return np.asarray(a).astype(out)


class Snapshot:
    """All tensors of a HF/MLX snapshot directory (model.safetensors, or shards via the index / glob)."""

    def __init__(self, d):
        files = []
        idx = os.path.join(d, "model.safetensors.index.json")
        if os.path.exists(idx):
            with open(idx) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        if not files:
            files = sorted(x for x in os.listdir(d) if x.startswith("model") and x.endswith(".safetensors"))
        if not files:
            raise SystemExit("%s: no model*.safetensors" % d)
        self.where = {}
        for fn in files:
            st = SafeTensors(os.path.join(d, fn))
            for n in st.names():
                self.where[n] = st

    def __contains__(self, name):
        return name in self.where

    def dtype(self, name):
        return self.where[name].dtype(name)

    def shape(self, name):
        return self.where[name].shape(name)

    def raw(self, name):
        return self.where[name].raw(name)

    def get_f64(self, name):
        if name not in self.where:
            raise SystemExit("missing tensor: " + name)
        return self.where[name].get_f64(name)


# ---------------------------------------------------------------- writing


class Writer:
    """Streams a safetensors file: declare all tensors first, then feed their bytes in order."""

    def __init__(self, path, metadata=None):
        self.path = path
        self.metadata = metadata
        self.tensors = []  # (name, dtype, shape, nbytes)

    def add(self, name, dtype, shape):
        n = int(np.prod(shape, dtype=np.int64)) * DTYPES[dtype].itemsize
        self.tensors.append((name, dtype, list(shape), n))

    def begin(self):
        hdr = {}
        if self.metadata is not None:
            hdr["__metadata__"] = self.metadata
        off = 0
        for name, dt, shape, n in self.tensors:
            hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
            off += n
        self.total = off
        h = json.dumps(hdr, separators=(",", ":")).encode()
        h += b" " * ((8 - len(h) % 8) % 8)
        self.f = open(self.path + ".tmp", "wb")
        self.f.write(struct.pack("<Q", len(h)))
        self.f.write(h)
        self.written = 0

    def write(self, arr):
        b = np.ascontiguousarray(arr)
        if b.dtype.byteorder == ">":
            b = b.byteswap().view(b.dtype.newbyteorder("<"))
        self.f.write(b.tobytes())
        self.written += b.nbytes

    def end(self):
        self.f.close()
        if self.written != self.total:
            raise RuntimeError("safetensors writer: wrote %d bytes, declared %d" % (self.written, self.total))
        os.replace(self.path + ".tmp", self.path)


# ---------------------------------------------------------------- MLX affine quantization


def mlx_affine_quantize(w32, bits, group_size):
    """w32: float32 [rows, in] (already rounded to the model dtype).
    Returns (packed uint32 [rows, in*bits/32], scale f32 [rows, in/gs], bias f32 [rows, in/gs], codes u8).
    scale/bias are the float32 values before casting to the model dtype."""
    w32 = np.ascontiguousarray(w32, dtype=np.float32)
    rows, n = w32.shape
    if n % group_size:
        raise ValueError("in %d not a multiple of group size %d" % (n, group_size))
    g = w32.reshape(rows, n // group_size, group_size)
    n_bins = np.float32((1 << bits) - 1)
    eps = np.float32(1e-7)
    w_max = g.max(axis=2)
    w_min = g.min(axis=2)
    mask = np.abs(w_min) > np.abs(w_max)
    s = np.maximum((w_max - w_min) / n_bins, eps)
    s = np.where(mask, s, -s).astype(np.float32)
    edge = np.where(mask, w_min, w_max).astype(np.float32)
    q0 = np.rint(edge / s).astype(np.float32)
    nz = q0 != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(nz, edge / np.where(nz, q0, np.float32(1)), s).astype(np.float32)
    bias = np.where(nz, edge, np.float32(0)).astype(np.float32)
    q = np.rint((g - bias[:, :, None]) / scale[:, :, None])
    q = np.clip(q, 0, n_bins).astype(np.uint8).reshape(rows, n)
    return pack_codes(q, bits), scale, bias, q


def pack_codes(q, bits):
    """codes u8 [rows, n] -> uint32 [rows, n*bits/32], LSB-first bit stream per row."""
    rows, n = q.shape
    if bits in (2, 4, 8):
        per = 32 // bits
        c = q.astype(np.uint32).reshape(rows, n // per, per)
        sh = (np.arange(per, dtype=np.uint32) * np.uint32(bits))[None, None, :]
        return np.bitwise_or.reduce(c << sh, axis=2).astype("<u4")
    bitsarr = ((q[:, :, None] >> np.arange(bits, dtype=np.uint8)[None, None, :]) & 1).astype(np.uint8)
    by = np.packbits(bitsarr.reshape(rows, n * bits), axis=1, bitorder="little")
    return np.ascontiguousarray(by).view("<u4").reshape(rows, n * bits // 32)


def unpack_codes(words, bits, n):
    """uint32 [..., n*bits/32] -> codes uint8 [..., n]."""
    words = np.ascontiguousarray(words, dtype="<u4")
    lead = words.shape[:-1]
    by = words.view(np.uint8).reshape(lead + (words.shape[-1] * 4,))
    bitsarr = np.unpackbits(by, axis=-1, bitorder="little")[..., : n * bits]
    bitsarr = bitsarr.reshape(lead + (n, bits)).astype(np.uint8)
    w = (1 << np.arange(bits, dtype=np.uint16)).astype(np.uint16)
    return (bitsarr.astype(np.uint16) * w).sum(axis=-1).astype(np.uint8)


def mlx_affine_dequantize(words, scales32, biases32, bits, group_size, out=np.float64):
    """Dequantize in float32 as MLX (q*s then +b, no FMA), returned as `out` dtype."""
    ng = scales32.shape[-1]
    n = ng * group_size
    q = unpack_codes(words, bits, n).astype(np.float32)
    lead = q.shape[:-1]
    q = q.reshape(lead + (ng, group_size))
    s = np.asarray(scales32, dtype=np.float32)[..., None]
    b = np.asarray(biases32, dtype=np.float32)[..., None]
    w = (q * s).astype(np.float32) + b
    return w.reshape(lead + (n,)).astype(out)
