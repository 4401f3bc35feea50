#!/usr/bin/env python3
"""Evaluates an nshade model from docs/model-format.md alone (NumPy), as an independent check.

Usage: eval_model.py MODEL.json IN.f32 OUT.f32   (rows of little-endian float32)
The evaluator below is copied verbatim from docs/model-format.md; a test keeps them equal.
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
        B = n["bins"]; c = np.array([(b + 0.5) / B for b in range(B)], np.float32)
        d = x[:, None] - c[None, :]                  # [input, bin]: input-major
        return np.exp(d * d * np.float32(-0.5 * B * B)).reshape(-1)
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


def main():
    model = json.load(open(sys.argv[1]))
    x = np.fromfile(sys.argv[2], dtype="<f4").reshape(-1, model["input_dims"])
    y = np.stack([evaluate(model, list(row)) for row in x]).astype("<f4")
    y.tofile(sys.argv[3])


if __name__ == "__main__":
    main()
