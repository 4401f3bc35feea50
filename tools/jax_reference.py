#!/usr/bin/env python3
"""Quality-parity reference: the same texture-fit training as `nshade fit`, written plainly
in JAX, to check that nshade's training reaches the same quality.

Same architecture family (optional frequency encoding, MLP), Xavier-uniform init, zero
biases, batch of uniform random UVs with bilinear clamp-to-edge lookup at pixel centres
((x + 0.5) / W), relative L2 loss with a stop-gradient denominator (p^2 + 0.01), Adam
(0.9, 0.999, 1e-8), constant learning rate. PSNR (peak 1) over all pixel centres.

Usage:
  jax_reference.py IMAGE.png --octaves 3 --width 32 --hidden 3 --act leaky_relu --out-act sigmoid \
                   --steps 1500 --batch 16384 --lr 0.005 [--seed 0]
Prints one JSON line with the final PSNR.
"""
import argparse, json, math, time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from PIL import Image


def load(path):
    img = np.asarray(Image.open(path).convert("RGB"), dtype=np.float32) / 255.0
    return jnp.asarray(img)


def bilinear(tex, uv):
    h, w, _ = tex.shape
    fx = uv[:, 0] * w - 0.5
    fy = uv[:, 1] * h - 0.5
    x0 = jnp.floor(fx); y0 = jnp.floor(fy)
    tx = (fx - x0)[:, None]; ty = (fy - y0)[:, None]
    cx = lambda i: jnp.clip(i, 0, w - 1).astype(jnp.int32)
    cy = lambda i: jnp.clip(i, 0, h - 1).astype(jnp.int32)
    a = tex[cy(y0), cx(x0)]; b = tex[cy(y0), cx(x0 + 1)]
    c = tex[cy(y0 + 1), cx(x0)]; d = tex[cy(y0 + 1), cx(x0 + 1)]
    top = a + (b - a) * tx
    bottom = c + (d - c) * tx
    return top + (bottom - top) * ty


ACTS = {
    "none": lambda z: z,
    "relu": jax.nn.relu,
    "leaky_relu": lambda z: jnp.where(z > 0, z, 0.01 * z),
    "sigmoid": jax.nn.sigmoid,
    "tanh": jnp.tanh,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--octaves", type=int, default=0)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=3)
    ap.add_argument("--act", default="relu")
    ap.add_argument("--out-act", default="none")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    tex = load(a.image)
    h, w, _ = tex.shape
    K = a.octaves
    freqs = (2.0 ** jnp.arange(K)) * math.pi
    dims = [4 * K if K else 2] + [a.width] * a.hidden + [3]
    key = jax.random.PRNGKey(a.seed)
    params = []
    for i, o in zip(dims[:-1], dims[1:]):
        key, k = jax.random.split(key)
        lim = math.sqrt(6.0 / (i + o))
        params.append((jax.random.uniform(k, (i, o), minval=-lim, maxval=lim), jnp.zeros(o)))
    act, out_act = ACTS[a.act], ACTS[a.out_act]

    def forward(params, uv):
        x = uv
        if K:
            ang = (uv[..., None] * freqs).reshape(uv.shape[0], -1)  # input-major, octave-minor
            x = jnp.concatenate([jnp.sin(ang), jnp.cos(ang)], -1)    # all sines, then cosines
        for li, (W, b) in enumerate(params):
            x = x @ W + b
            x = act(x) if li < len(params) - 1 else out_act(x)
        return x

    def loss_fn(params, uv, target):
        p = forward(params, uv)
        return jnp.mean((p - target) ** 2 / (jax.lax.stop_gradient(p) ** 2 + 0.01))

    opt = optax.adam(a.lr, b1=0.9, b2=0.999, eps=1e-8)
    state = opt.init(params)

    @jax.jit
    def step(params, state, key):
        key, k = jax.random.split(key)
        uv = jax.random.uniform(k, (a.batch, 2))
        loss, g = jax.value_and_grad(loss_fn)(params, uv, bilinear(tex, uv))
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, key, loss

    t0 = time.perf_counter()
    for _ in range(a.steps):
        params, state, key, loss = step(params, state, key)
    loss.block_until_ready()
    secs = time.perf_counter() - t0
    ys, xs = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
    uv = jnp.asarray(np.stack([xs.ravel(), ys.ravel()], -1), dtype=jnp.float32)
    pred = forward(params, uv)
    mse = float(jnp.mean((pred - tex.reshape(-1, 3)) ** 2))
    print(json.dumps({"tool": "jax_reference", "octaves": K, "width": a.width, "hidden": a.hidden, "act": a.act,
                      "out_act": a.out_act, "steps": a.steps, "batch": a.batch, "lr": a.lr, "seed": a.seed,
                      "final_loss": float(loss), "psnr": -10 * math.log10(mse), "seconds": secs}))


if __name__ == "__main__":
    main()
