#!/usr/bin/env python3
"""Evaluates an nshade model from docs/model-format.md alone (NumPy), as an independent check.

Usage: eval_model.py MODEL.json IN.f32 OUT.f32   (rows of little-endian float32)
MODEL.json may have a sidecar (grid tables); MODEL may also be the directory holding it.
The evaluator below is copied verbatim from docs/model-format.md (both of its Python
blocks, in order); a test keeps them equal.
"""
import sys

import json, math
import numpy as np

def evaluate(model, x):                        # x: list of input_dims floats
    P = np.zeros(model["param_count"], np.float32)
    for t in model["tensors"]:
        P[t["offset"]:t["offset"] + len(t["values"])] = t["values"]
    x = [v * s + o for v, s, o in zip(x, model["inputs"]["scale"], model["inputs"]["offset"])]
    return node(model["network"], np.array(x, np.float32), P)

def act(a, z):
    t = a["type"]
    return {"none": lambda: z, "relu": lambda: np.maximum(z, 0),
            "leaky_relu": lambda: np.where(z > 0, z, a.get("slope", 0.01) * z),
            "sigmoid": lambda: 1 / (1 + np.exp(-z)), "tanh": lambda: np.tanh(z), "exp": lambda: np.exp(z),
            "swish": lambda: z / (1 + np.exp(-z)), "sine": lambda: np.sin(a.get("w0", 1.0) * z),
            "softplus": lambda: np.where(z > 20, z, np.log1p(np.exp(z)))}[t]()

def node(n, x, P):
    t = n["type"]
    if t in ("hashgrid", "densegrid"): return grid(n, x, P)
    if t == "identity": return x
    if t == "freq":
        K = n["octaves"]; a = np.array([np.float32(2.0**k * math.pi) * xi for xi in x for k in range(K)], np.float32)
        return np.concatenate([np.sin(a), np.cos(a)])
    if t == "tri":
        K = n["octaves"]; u = np.array([2.0**(k - 1) * xi for xi in x for k in range(K)], np.float32)
        return 4 * np.abs(u - np.floor(u + 0.5)) - 1
    if t == "mlp":
        for L in n["layers"]:
            W = P[L["weight_offset"]:L["weight_offset"] + L["out"] * L["in"]].reshape(L["out"], L["in"])
            x = act(L["activation"], W @ x + P[L["bias_offset"]:L["bias_offset"] + L["out"]])
        return x
    if t == "chain":
        for s in n["stages"]: x = node(s, x, P)
        return x
    if t == "cat": return np.concatenate([node(c, x, P) for c in n["children"]])
    if t == "pick": return x[n["indices"]]
    if t == "oneblob":
        B, f = n["bins"], np.float32; lo, r = f(n["min"]), f(n["max"]) - f(n["min"])
        c = np.array([lo + (f(b) + f(0.5)) / f(B) * r for b in range(B)], np.float32)
        d = x[:, None] - c[None, :]                  # [input, bin]: input-major
        return np.exp(d * d * (f(-0.5 * B * B) / (r * r))).reshape(-1)
    if t == "sh":
        return np.array([sum(c * x[0]**a * x[1]**b * x[2]**e for c, (a, b, e) in SH[k])
                         for k in range((n["degree"] + 1)**2)], np.float32)

SH = [  # real spherical harmonics Y_k, k = l*l + l + m: terms (c, (a, b, e)) = c·x^a·y^b·z^e
      [(0.2820948, (0, 0, 0))],
      [(-0.48860252, (0, 1, 0))],
      [(0.48860252, (0, 0, 1))],
      [(-0.48860252, (1, 0, 0))],
      [(1.0925485, (1, 1, 0))],
      [(-1.0925485, (0, 1, 1))],
      [(0.9461747, (0, 0, 2)), (-0.31539157, (0, 0, 0))],
      [(-1.0925485, (1, 0, 1))],
      [(0.54627424, (2, 0, 0)), (-0.54627424, (0, 2, 0))],
      [(-1.7701308, (2, 1, 0)), (0.5900436, (0, 3, 0))],
      [(2.8906114, (1, 1, 1))],
      [(-2.285229, (0, 1, 2)), (0.4570458, (0, 1, 0))],
      [(1.8658817, (0, 0, 3)), (-1.119529, (0, 0, 1))],
      [(-2.285229, (1, 0, 2)), (0.4570458, (1, 0, 0))],
      [(1.4453057, (2, 0, 1)), (-1.4453057, (0, 2, 1))],
      [(-0.5900436, (3, 0, 0)), (1.7701308, (1, 2, 0))],
      [(2.5033429, (3, 1, 0)), (-2.5033429, (1, 3, 0))],
      [(-5.3103924, (2, 1, 1)), (1.7701308, (0, 3, 1))],
      [(6.623223, (1, 1, 2)), (-0.9461747, (1, 1, 0))],
      [(-4.683326, (0, 1, 3)), (2.0071397, (0, 1, 1))],
      [(3.7024941, (0, 0, 4)), (-3.1735663, (0, 0, 2)), (0.31735665, (0, 0, 0))],
      [(-4.683326, (1, 0, 3)), (2.0071397, (1, 0, 1))],
      [(3.3116114, (2, 0, 2)), (-3.3116114, (0, 2, 2)), (-0.47308734, (2, 0, 0)), (0.47308734, (0, 2, 0))],
      [(-1.7701308, (3, 0, 1)), (5.3103924, (1, 2, 1))],
      [(0.6258357, (4, 0, 0)), (-3.7550144, (2, 2, 0)), (0.6258357, (0, 4, 0))],
]


import hashlib, os, struct

def load(path):                                # path: weights.json or the directory holding it
    if os.path.isdir(path): path = os.path.join(path, "weights.json")
    model = json.load(open(path))
    if "sidecar" not in model: return model
    sc = model["sidecar"]
    data = open(os.path.join(os.path.dirname(path), sc["file"]), "rb").read()
    assert sc["format"] == "safetensors" and len(data) == sc["bytes"], "sidecar length"
    assert hashlib.sha256(data).hexdigest() == sc["sha256"].lower(), "sidecar sha256"
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    for t in model["tensors"]:
        if "sidecar" not in t: continue
        h = header[t["name"]]
        begin, end = 8 + n + h["data_offsets"][0], 8 + n + h["data_offsets"][1]
        assert h["dtype"] == "F32" and h["shape"] == t["shape"], t["name"]
        assert (begin, end - begin) == (t["sidecar"]["byte_offset"], t["sidecar"]["byte_length"])
        t["values"] = np.frombuffer(data[begin:end], "<f4")
    return model

PRIMES = [1, 2654435761, 805459861, 3674653429]

def grid(n, x, P):                             # hashgrid / densegrid node, x: D float32 values
    D, F, f32 = n["in"], n["features"], np.float32
    lo = f32(n["min"]); inv = f32(1) / (f32(n["max"]) - lo)
    y = np.zeros(len(n["levels"]) * F, np.float32)
    for l, L in enumerate(n["levels"]):
        res, i, t = L["res"], [], []
        for d in range(D):
            p = min(max((f32(x[d]) - lo) * inv, f32(0)), f32(1)) * f32(res)
            i.append(min(int(np.floor(p)), res - 1)); t.append(p - f32(i[d]))
        out = np.zeros(F, np.float32)
        for k in range(1 << D):
            w, v = f32(1), [i[d] + ((k >> d) & 1) for d in range(D)]
            for d in range(D): w = w * (t[d] if (k >> d) & 1 else f32(1) - t[d])
            if L["hashed"]:
                h = 0
                for d in range(D): h ^= (v[d] * PRIMES[d]) & 0xFFFFFFFF
                e = h & (L["entries"] - 1)
            else:
                e = sum(v[d] * (res + 1) ** d for d in range(D))
            out = out + w * P[L["offset"] + e * F:L["offset"] + (e + 1) * F]
        y[l * F:(l + 1) * F] = out
    return y


def main():
    model = load(sys.argv[1])
    x = np.fromfile(sys.argv[2], dtype="<f4").reshape(-1, model["input_dims"])
    y = np.stack([evaluate(model, list(row)) for row in x]).astype("<f4")
    y.tofile(sys.argv[3])


if __name__ == "__main__":
    main()
