#!/usr/bin/env python3
"""Write and read seed-002 datasets exactly as ShaderTraining.kt does — an independent check.

This follows `ShaderTraining.capture` of the seed (shared/seeds/shader-training-kt.txt)
literally, in plain Python (standard library only), so that nshade's Rust implementation
(`nshade capture`, `nshade_core::dataset`) can be tested against a second, separately
written one:

* ``java.util.Random`` is re-implemented bit for bit (48-bit LCG, ``next(bits)``,
  ``nextInt(bound)`` with its power-of-two shortcut and its rejection loop);
* every Kotlin ``Float`` operation is rounded to IEEE single precision (``f32`` below; for
  + − × ÷ of two singles, rounding the exact double result to single is the correctly
  rounded single result, since 53 ≥ 2·24 + 2);
* the loops, the checks (``require``/``check``), the row layout (ByteBuffer little-endian
  float32: x, y, t, r, g, b) and the manifest fields are the Kotlin's.

A Python function of (x, y, parameter) stands in for the shader: ``write`` renders it into
an RGBA float image per frame (row 0 at the top, pixel centres as a fragment shader sees
them: ``(x + 0.5, y + 0.5)`` in pixels) and samples it the Kotlin way.

Usage::

    seed_dataset.py write --out DIR [--image plasma|analytic|nan|transparent]
                          [--size 320x180] [--param-range -1..1] [--train-frames 48]
                          [--validation-frames 13] [--pixels-per-frame 2048] [--seed 4090]
    seed_dataset.py read DIR        # verify as a reader of the seed's format; JSON summary
    seed_dataset.py random SEED BOUND N   # N values of new Random(SEED).nextInt(BOUND)
    seed_dataset.py sha256 FILE           # sha256 of a file's bytes (sourceShaderDigest)

The ``analytic`` image is exactly representable in float32 and matches
``crates/cli/tests/data/analytic.wgsl`` (r = x/128, g = y/128 with x, y the integer pixel
column and row, b = parameter), so a capture of that shader and this script's ``write``
give byte-identical row files for the same settings.
"""

import argparse
import hashlib
import inspect
import json
import math
import os
import struct
import sys

# ---------------------------------------------------------------------------------------
# java.util.Random


def int32(v):
    """Java's (int) cast / 32-bit two's-complement wrap-around."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= (1 << 31) else v


class JavaRandom:
    """java.util.Random (Java SE API documentation of Random, all versions)."""

    MULTIPLIER = 0x5DEECE66D
    ADDEND = 0xB
    MASK = (1 << 48) - 1

    def __init__(self, seed):
        # private static long initialScramble(long seed) { return (seed ^ multiplier) & mask; }
        self.seed = (seed ^ self.MULTIPLIER) & self.MASK

    def next(self, bits):
        # nextseed = (oldseed * multiplier + addend) & mask; return (int)(nextseed >>> (48 - bits));
        self.seed = (self.seed * self.MULTIPLIER + self.ADDEND) & self.MASK
        return int32(self.seed >> (48 - bits))

    def next_int(self, bound=None):
        if bound is None:
            return self.next(32)
        if bound <= 0:
            raise ValueError("bound must be positive")
        r = self.next(31)
        m = bound - 1
        if (bound & m) == 0:  # power of two
            return int32((bound * r) >> 31)
        u = r
        while True:
            r = u % bound  # u >= 0, so Python's % equals Java's
            if int32(u - r + m) >= 0:
                return r
            u = self.next(31)


# ---------------------------------------------------------------------------------------
# float32 arithmetic and bytes


def f32(v):
    """Rounds a Python float to the nearest IEEE single (what a Kotlin Float holds)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def is_finite(v):
    return not (math.isnan(v) or math.isinf(v))


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------
# Stand-in "shaders": functions of the pixel centre (px, py in pixels, y down), the image
# size and the parameter, returning linear RGBA.


def image_plasma(px, py, w, h, t):
    """The smooth example (examples/shaders/plasma.wgsl), in double precision."""
    x = px / w * 2 - 1
    y = py / h * 2 - 1
    v = (
        math.sin(3 * x + 2 * t)
        + math.sin(2.5 * y - 1.5 * t)
        + math.sin(2 * (x + y) + t)
        + math.sin(3 * math.hypot(x, y) - 2 * t)
    )
    return (0.5 + 0.5 * math.sin(v), 0.5 + 0.5 * math.sin(v + 2.094), 0.5 + 0.5 * math.sin(v + 4.189), 1.0)


def image_analytic(px, py, w, h, t):
    """Exact in float32 on any GPU: r = column/128, g = row/128, b = parameter."""
    return ((px - 0.5) / 128.0, (py - 0.5) / 128.0, t, 1.0)


def image_nan(px, py, w, h, t):
    """NaN for parameters above 0.5 (tests the finiteness check)."""
    return (float("nan") if t > 0.5 else 0.5, 0.5, 0.5, 1.0)


def image_transparent(px, py, w, h, t):
    """Alpha 0.5 (tests the opacity check)."""
    return (0.5, 0.5, 0.5, 0.5)


IMAGES = {
    "plasma": image_plasma,
    "analytic": image_analytic,
    "nan": image_nan,
    "transparent": image_transparent,
}


class CaptureError(Exception):
    pass


def require(condition, message="Failed requirement."):
    if not condition:
        raise CaptureError(message)


def render(image_fn, width, height, parameter):
    """One frame as a flat RGBA float32 list, row 0 at the top (ReconstructionCapture.read)."""
    out = []
    for y in range(height):
        for x in range(width):
            out.extend(f32(c) for c in image_fn(x + 0.5, y + 0.5, width, height, parameter))
    return out


# ---------------------------------------------------------------------------------------
# ShaderTraining.capture, literally


def capture(
    image_fn,
    directory,
    width,
    height,
    parameter_range=(-1.0, 1.0),
    training_frames=48,
    validation_frames=13,
    pixels_per_frame=2048,
    seed=4090,
    fixed_state="Fixed camera, geometry, textures and all other uniforms",
):
    start, end = f32(parameter_range[0]), f32(parameter_range[1])
    require(is_finite(start) and is_finite(end) and start < end)
    require(2 <= training_frames <= 512 and 2 <= validation_frames <= 128 and 1 <= pixels_per_frame <= 65536)
    require(width > 0 and height > 0, "Capture needs a non-empty target")
    require(
        not os.path.exists(directory) or not os.listdir(directory),
        "Choose a new dataset directory: %s" % directory,
    )
    os.makedirs(directory, exist_ok=True)
    # The "module" here is the Python function: its source stands in for the shader code.
    source = inspect.getsource(image_fn).encode("utf-8")
    digest = hashlib.sha256()
    digest.update(image_fn.__name__.encode("utf-8"))
    digest.update(source)
    hash_ = digest.hexdigest()
    with open(os.path.join(directory, "source-0.py"), "wb") as f:
        f.write(source)
    random = JavaRandom(seed)
    files = {}
    for split, count in (("train", training_frames), ("validation", validation_frames)):
        times = []
        path = os.path.join(directory, split + ".f32")
        with open(path, "wb") as output:
            for frame in range(count):
                if split == "train":
                    fraction = f32(f32(frame) / f32(count - 1))
                else:
                    fraction = f32(f32(f32(frame) + f32(0.381966)) / f32(count))
                normalized = f32(f32(fraction * 2) - 1)
                parameter = f32(start + f32(fraction * f32(end - start)))
                times.append(parameter)
                image = render(image_fn, width, height, parameter)
                if not all(is_finite(v) for v in image):
                    raise CaptureError("Source produced NaN/Inf at parameter %r" % parameter)
                if not all(abs(f32(image[i * 4 + 3] - 1)) < f32(0.001) for i in range(width * height)):
                    raise CaptureError("The learned RGB model requires opaque output; handle coverage separately")
                out = bytearray()
                for _ in range(pixels_per_frame):
                    x = random.next_int(width)
                    y = random.next_int(height)
                    index = (y * width + x) * 4
                    out += struct.pack("<f", f32(f32(f32(f32(x + 0.5) / width) * 2) - 1))
                    out += struct.pack("<f", f32(f32(f32(f32(y + 0.5) / height) * 2) - 1))
                    out += struct.pack("<f", normalized)
                    for c in range(3):
                        out += struct.pack("<f", image[index + c])
                output.write(bytes(out))
        with open(path, "rb") as f:
            sha = sha256_hex(f.read())
        files[split] = {
            "file": os.path.basename(path),
            "rows": count * pixels_per_frame,
            "parameters": times,
            "sha256": sha,
        }
    manifest = {
        "schema": 1,
        "sourceKind": "captured-module",
        "sourceShaderDigest": hash_,
        "fixedState": fixed_state,
        "resolution": [width, height],
        "parameterRange": [start, end],
        "rowFormat": "little-endian float32: x,y,t,r,g,b",
        "coordinates": "pixel centers; x right, y down; x,y,t normalized to [-1,1]",
        "color": "linear RGB, unclamped, opaque",
        "seed": seed,
        "splits": files,
    }
    with open(os.path.join(directory, "dataset.json"), "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")
    return directory


# ---------------------------------------------------------------------------------------
# Reading, as a consumer of the seed's format expects it


class DatasetError(Exception):
    pass


REQUIRED_FIELDS = (
    "schema",
    "sourceShaderDigest",
    "resolution",
    "parameterRange",
    "rowFormat",
    "coordinates",
    "color",
    "seed",
    "splits",
)


def read(directory):
    """Verifies a dataset directory; returns a summary dict or raises DatasetError."""
    mpath = os.path.join(directory, "dataset.json")
    try:
        with open(mpath) as f:
            manifest = json.load(f)
    except OSError as e:
        raise DatasetError("%s: cannot read (%s)" % (mpath, e))
    except ValueError as e:
        raise DatasetError("%s: not valid JSON (%s)" % (mpath, e))
    for field in REQUIRED_FIELDS:
        if field not in manifest:
            raise DatasetError("%s: missing field '%s'" % (mpath, field))
    if manifest["schema"] != 1:
        raise DatasetError("%s: schema %r is not 1" % (mpath, manifest["schema"]))
    if manifest["rowFormat"] != "little-endian float32: x,y,t,r,g,b":
        raise DatasetError("%s: unexpected rowFormat %r" % (mpath, manifest["rowFormat"]))
    width, height = manifest["resolution"]
    if not (isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0):
        raise DatasetError("%s: bad resolution %r" % (mpath, manifest["resolution"]))
    start, end = (f32(v) for v in manifest["parameterRange"])
    if not (is_finite(start) and is_finite(end) and start < end):
        raise DatasetError("%s: bad parameterRange %r" % (mpath, manifest["parameterRange"]))
    summary = {"resolution": [width, height], "seed": manifest["seed"]}
    for split in ("train", "validation"):
        info = manifest["splits"].get(split)
        if info is None:
            raise DatasetError("%s: missing split '%s'" % (mpath, split))
        for key in ("file", "rows", "parameters", "sha256"):
            if key not in info:
                raise DatasetError("%s: split '%s' lacks '%s'" % (mpath, split, key))
        path = os.path.join(directory, info["file"])
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise DatasetError("%s: cannot read (%s)" % (path, e))
        rows = info["rows"]
        if len(data) != rows * 24:
            raise DatasetError("%s: size mismatch: %d bytes for %d rows" % (path, len(data), rows))
        if sha256_hex(data) != info["sha256"].lower():
            raise DatasetError("%s: sha256 mismatch" % path)
        frames = len(info["parameters"])
        if frames < 2 or rows % frames:
            raise DatasetError("%s: %d rows do not divide into %d frames" % (path, rows, frames))
        per = rows // frames
        # The seed's frame placement, in float32: the parameters and each frame's t.
        for frame, p in enumerate(info["parameters"]):
            if split == "train":
                fraction = f32(f32(frame) / f32(frames - 1))
            else:
                fraction = f32(f32(f32(frame) + f32(0.381966)) / f32(frames))
            expect = f32(start + f32(fraction * f32(end - start)))
            if f32(p) != expect:
                raise DatasetError("%s: parameter %d is %r, the seed's placement gives %r" % (path, frame, p, expect))
        values = [v[0] for v in struct.iter_unpack("<f", data)]
        for i, v in enumerate(values):
            if not is_finite(v):
                raise DatasetError("%s: row %d column %d is not finite" % (path, i // 6, i % 6))
        xs = {f32(f32(f32(f32(x + 0.5) / width) * 2) - 1) for x in range(width)}
        ys = {f32(f32(f32(f32(y + 0.5) / height) * 2) - 1) for y in range(height)}
        for row in range(rows):
            x, y, t = values[row * 6 : row * 6 + 3]
            frame = row // per
            if split == "train":
                fraction = f32(f32(frame) / f32(frames - 1))
            else:
                fraction = f32(f32(f32(frame) + f32(0.381966)) / f32(frames))
            if x not in xs or y not in ys:
                raise DatasetError("%s: row %d (%r, %r) is not a pixel centre" % (path, row, x, y))
            if t != f32(f32(fraction * 2) - 1):
                raise DatasetError("%s: row %d has t %r, frame %d should have %r" % (path, row, t, frame, f32(fraction * 2 - 1)))
        summary[split] = {"rows": rows, "frames": frames, "sha256": info["sha256"]}
    return summary


# ---------------------------------------------------------------------------------------


def parse_size(s):
    w, _, h = s.lower().partition("x")
    return int(w), int(h)


def parse_range(s):
    # "-1..1", "0..2.5"
    a, sep, b = s.partition("..")
    if not sep:
        raise argparse.ArgumentTypeError("expected A..B")
    return float(a), float(b)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write a dataset from a synthetic image the Kotlin way")
    w.add_argument("--out", required=True)
    w.add_argument("--image", choices=sorted(IMAGES), default="plasma")
    w.add_argument("--size", type=parse_size, default=(320, 180))
    w.add_argument("--param-range", type=parse_range, default=(-1.0, 1.0))
    w.add_argument("--train-frames", type=int, default=48)
    w.add_argument("--validation-frames", type=int, default=13)
    w.add_argument("--pixels-per-frame", type=int, default=2048)
    w.add_argument("--seed", type=int, default=4090)
    r = sub.add_parser("read", help="verify a dataset directory; prints a JSON summary")
    r.add_argument("dir")
    h = sub.add_parser("sha256", help="print the sha256 of a file (sourceShaderDigest of a shader)")
    h.add_argument("file")
    q = sub.add_parser("random", help="print new Random(SEED).nextInt(BOUND) N times")
    q.add_argument("seed", type=int)
    q.add_argument("bound", type=int)
    q.add_argument("n", type=int)
    args = ap.parse_args(argv)
    try:
        if args.command == "write":
            capture(
                IMAGES[args.image],
                args.out,
                args.size[0],
                args.size[1],
                args.param_range,
                args.train_frames,
                args.validation_frames,
                args.pixels_per_frame,
                args.seed,
            )
            print(args.out)
        elif args.command == "sha256":
            with open(args.file, "rb") as f:
                print(sha256_hex(f.read()))
        elif args.command == "read":
            print(json.dumps(read(args.dir)))
        else:
            rnd = JavaRandom(args.seed)
            print(" ".join(str(rnd.next_int(args.bound)) for _ in range(args.n)))
    except (CaptureError, DatasetError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
