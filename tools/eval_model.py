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


def main():
    model = json.load(open(sys.argv[1]))
    x = np.fromfile(sys.argv[2], dtype="<f4").reshape(-1, model["input_dims"])
    y = np.stack([evaluate(model, list(row)) for row in x]).astype("<f4")
    y.tofile(sys.argv[3])


if __name__ == "__main__":
    main()
