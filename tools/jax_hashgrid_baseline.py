"""JAX (XLA, jit) CPU baseline for a hash-grid texture fit, in the protocol of
../shared/bench/jax_cpu_baseline.py (same texture, random UVs, bilinear lookup, L2 loss,
Adam 5e-3, one jitted function per step, 30 timed steps after the compiling one).

The encoding is nshade's `hashgrid` (crates/core/src/module/grid.rs): per level
res = floor(base * scale^l), p = u * res, cell i = min(floor(p), res - 1), t = p - i,
bilinear over the 4 corners; a level whose (res + 1)^2 vertices fit in 2^log2_size entries
is indexed densely (v0 + v1 * (res + 1)), larger ones by Instant-NGP's hash
(v0 * 1 ^ v1 * 2654435761) mod 2^log2_size. Tables start uniform in +-1e-4. Then an MLP
with ReLU hidden layers and a linear output, Xavier-uniform weights.

Usage: python3 tools/jax_hashgrid_baseline.py [BATCH[,BATCH...]] [STEPS]
Prints one JSON line per (arch, batch) with samples/s, like the seed-network baseline.
Needs `pip install jax optax` and the baseline script (NSHADE_JAX_BASELINE, default
../shared/bench/jax_cpu_baseline.py) for its texture and bilinear lookup.
"""
import importlib.util
import json
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import optax

HERE = os.path.dirname(os.path.abspath(__file__))
BASELINE = os.environ.get(
    "NSHADE_JAX_BASELINE", os.path.join(HERE, "..", "..", "shared", "bench", "jax_cpu_baseline.py")
)
spec = importlib.util.spec_from_file_location("jax_cpu_baseline", BASELINE)
base = importlib.util.module_from_spec(spec)
spec.loader.exec_module(base)

# name: (levels, features, log2_size, base, scale, width, hidden layers)
ARCHS = {
    "hashgrid16_2_18_16_1.5_mlp64x2_relu": (16, 2, 18, 16, 1.5, 64, 2),
    "hashgrid12_2_16_8_1.5_mlp32x2_relu": (12, 2, 16, 8, 1.5, 32, 2),
}
PRIME = jnp.uint32(2654435761)


def levels_of(levels, log2_size, base_res, scale):
    out = []
    for l in range(levels):
        res = int(math.floor(base_res * scale**l))
        dense = (res + 1) ** 2 <= (1 << log2_size)
        out.append((res, dense, (res + 1) ** 2 if dense else 1 << log2_size))
    return out


def init(key, arch):
    levels, feats, log2_size, base_res, scale, width, hidden = arch
    tables = []
    for res, dense, entries in levels_of(levels, log2_size, base_res, scale):
        key, k = jax.random.split(key)
        tables.append(jax.random.uniform(k, (entries, feats), minval=-1e-4, maxval=1e-4))
    dims = [levels * feats] + [width] * hidden + [3]
    mlp = []
    for a, b in zip(dims[:-1], dims[1:]):
        key, k = jax.random.split(key)
        lim = math.sqrt(6 / (a + b))
        mlp.append((jax.random.uniform(k, (a, b), minval=-lim, maxval=lim), jnp.zeros(b)))
    return {"tables": tables, "mlp": mlp}


def make_step(arch, opt, tex, batch):
    levels, feats, log2_size, base_res, scale, width, hidden = arch
    info = levels_of(levels, log2_size, base_res, scale)

    def encode(tables, uv):
        outs = []
        for (res, dense, entries), table in zip(info, tables):
            p = jnp.clip(uv, 0.0, 1.0) * res
            i = jnp.minimum(jnp.floor(p), res - 1)
            t = p - i
            i = i.astype(jnp.uint32)
            acc = 0.0
            for c0 in (0, 1):
                for c1 in (0, 1):
                    v0 = i[:, 0] + c0
                    v1 = i[:, 1] + c1
                    if dense:
                        idx = v0 + v1 * (res + 1)
                    else:
                        idx = (v0 ^ (v1 * PRIME)) & jnp.uint32(entries - 1)
                    w = (t[:, 0] if c0 else 1 - t[:, 0]) * (t[:, 1] if c1 else 1 - t[:, 1])
                    acc = acc + w[:, None] * table[idx.astype(jnp.int32)]
            outs.append(acc)
        return jnp.concatenate(outs, -1)

    def forward(params, uv):
        x = encode(params["tables"], uv)
        for i, (w, b) in enumerate(params["mlp"]):
            x = x @ w + b
            if i < len(params["mlp"]) - 1:
                x = jax.nn.relu(x)
        return x

    def loss_fn(params, uv, target):
        return jnp.mean((forward(params, uv) - target) ** 2)

    @jax.jit
    def step(params, state, key):
        key, k = jax.random.split(key)
        uv = jax.random.uniform(k, (batch, 2))
        target = base.bilinear(tex, uv)
        loss, grads = jax.value_and_grad(loss_fn)(params, uv, target)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, key, loss

    return step


def main():
    batches = [int(b) for b in (sys.argv[1].split(",") if len(sys.argv) > 1 else ["65536"])]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    tex = base.make_texture()
    print(json.dumps({"jax": jax.__version__, "devices": str(jax.devices())}), flush=True)
    for name, arch in ARCHS.items():
        for batch in batches:
            opt = optax.adam(5e-3)
            params = init(jax.random.PRNGKey(0), arch)
            state = opt.init(params)
            step = make_step(arch, opt, tex, batch)
            key = jax.random.PRNGKey(1)
            t0 = time.perf_counter()
            params, state, key, loss = step(params, state, key)
            loss.block_until_ready()
            compile_s = time.perf_counter() - t0
            t = time.perf_counter()
            for _ in range(steps):
                params, state, key, loss = step(params, state, key)
            loss.block_until_ready()
            dt = time.perf_counter() - t
            n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
            print(json.dumps({"arch": name, "batch": batch, "steps": steps, "step_ms": 1000 * dt / steps,
                              "samples_per_s": batch * steps / dt, "compile_s": compile_s,
                              "params": int(n_params), "loss": float(loss)}), flush=True)


if __name__ == "__main__":
    main()
