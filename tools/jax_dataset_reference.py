#!/usr/bin/env python3
"""JAX reference for `nshade train --dataset`: cat(identity, freq(6)) | mlp(64x3, relu),
12000 steps at batch 4096, Adam lr 0.005 halving every 3000 steps, L2 loss, rows drawn
uniformly with replacement from the training split; validation PSNR (peak 1) over the
validation split. The bar nshade's defaults must reach (issue 5).

Usage: jax_dataset_reference.py DATASET_DIR [--steps 12000] [--batch 4096] [--seed 0]
"""
import argparse, json, math, os, time

import jax
import jax.numpy as jnp
import numpy as np
import optax


def rows(ds, split):
    info = json.load(open(os.path.join(ds, "dataset.json")))["splits"][split]
    return np.fromfile(os.path.join(ds, info["file"]), dtype="<f4").reshape(-1, 6), info


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--steps", type=int, default=12000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    train, _ = rows(a.dataset, "train")
    val, vinfo = rows(a.dataset, "validation")
    train = jnp.asarray(train)
    freqs = (2.0 ** jnp.arange(6)) * math.pi
    dims = [3 + 36, 64, 64, 64, 3]
    key = jax.random.PRNGKey(a.seed)
    params = []
    for i, o in zip(dims[:-1], dims[1:]):
        key, k = jax.random.split(key)
        lim = math.sqrt(6.0 / (i + o))
        params.append((jax.random.uniform(k, (i, o), minval=-lim, maxval=lim), jnp.zeros(o)))

    def forward(params, x):
        ang = (x[..., None] * freqs).reshape(x.shape[0], -1)
        h = jnp.concatenate([x, jnp.sin(ang), jnp.cos(ang)], -1)
        for li, (W, b) in enumerate(params):
            h = h @ W + b
            if li < len(params) - 1:
                h = jax.nn.relu(h)
        return h

    sched = optax.exponential_decay(0.005, transition_steps=3000, decay_rate=0.5, staircase=True)
    opt = optax.adam(sched)
    state = opt.init(params)

    @jax.jit
    def step(params, state, key):
        key, k = jax.random.split(key)
        idx = jax.random.randint(k, (a.batch,), 0, train.shape[0])
        batch = train[idx]
        loss, g = jax.value_and_grad(lambda p: jnp.mean((forward(p, batch[:, :3]) - batch[:, 3:]) ** 2))(params)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, key, loss

    t0 = time.perf_counter()
    for _ in range(a.steps):
        params, state, key, loss = step(params, state, key)
    loss.block_until_ready()
    secs = time.perf_counter() - t0
    pred = np.asarray(forward(params, jnp.asarray(val[:, :3])))
    mse = float(np.mean((pred - val[:, 3:]) ** 2))
    per = len(val) // len(vinfo["parameters"])
    slices = [-10 * math.log10(float(np.mean((pred[i * per:(i + 1) * per] - val[i * per:(i + 1) * per, 3:]) ** 2)))
              for i in range(len(vinfo["parameters"]))]
    print(json.dumps({"tool": "jax_dataset_reference", "steps": a.steps, "batch": a.batch, "seconds": secs,
                      "final_loss": float(loss), "validation_psnr": -10 * math.log10(mse), "slice_psnr": slices}))


if __name__ == "__main__":
    main()
