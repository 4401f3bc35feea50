//! The fused cooperative-matrix step kernel in GLSL (`GL_KHR_cooperative_matrix`),
//! compiled by the glslang built into nshade and loaded as SPIR-V: the same algorithm,
//! bindings, partial-sum layout and fixed summation orders as the WGSL fused kernel
//! (`fused.rs`), for the networks the issue's table trains — texture data, an optional
//! `freq` or 2-D grid stage on the raw input, one fusable MLP — with one difference that WGSL
//! cannot express: GLSL reaches the elements of an accumulator (`c[e]`, `c.length()`)
//! and converts accumulators between component types, so a hidden layer's tile epilogue
//! (activation, f16 rounding, padding rows) and the input gradient's (the derivative of
//! the layer below, read as an f16 accumulator of the same tile, the f16 range check)
//! run in registers and store the tile straight into `xh`/`gh` — no scratch tile, no
//! subgroup barrier, no per-invocation loads and stores (docs/gpu-training.md, "The
//! GLSL step kernel"). Grids keep each (level, sample) item's corner indices and
//! weights in registers from the forward to the table gradients, which go into packed
//! 32-bit lanes where they apply (`grid.rs`, [`Packing`]). Layers wider than 64 leave
//! their weight gradients to the dW kernel (`glsl_dw.rs`): the kernel stores their f16
//! inputs and output gradients instead of accumulating dW. Pure: network in, source text
//! out.

use super::glsl_dw::{DwSplit, split_layers};
use super::glsl_grid::{gacc_decls, gacc_packed_decls, grid_forward, grid_tables};
use super::wgsl::lit;
use super::{DataKind, Pad, PadLayer};
use crate::train::grid::{FIXED_RANGE, Packing};
use nshade_core::Activation;
use nshade_core::loss::Loss;
use nshade_core::module::{Grid, Linear, Module};
use nshade_core::network::Network;
use nshade_shader::syntax::{self, CSyntax};
use std::fmt::Write;

/// The invocation counts the GLSL step kernel takes (subgroups of 32).
fn threads_ok(t: usize) -> bool {
    matches!(t, 64 | 128 | 256 | 512)
}

/// Invocations per workgroup asked for by `NSHADE_GPU_THREADS` (one of [`threads_ok`];
/// for measurements), instead of [`glsl_samples`]' choice.
fn threads_override() -> Option<usize> {
    std::env::var("NSHADE_GPU_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&t| threads_ok(t))
}

/// Workgroup memory a multiprocessor shares among its resident workgroups, for the
/// launch's residency: `max` (the per-workgroup limit) unless `NSHADE_GPU_SMEM` says
/// otherwise (measurements). A conservative figure: on an H100 (driver 580.159.04) a
/// multiprocessor held three workgroups of 16 KiB but not three of 17 KiB nor two of
/// 26 KiB, so its budget lies between 52 224 and 55 295 bytes with NVIDIA's 1 KiB a
/// resident block (`examples/residency_probe.rs`, docs/PERFORMANCE.md); B's 128-invocation
/// layout (27 568 bytes) does not fit twice, C and D gained nothing worth taking from
/// the difference (thirty-second session).
fn sm_budget(max: usize) -> usize {
    std::env::var("NSHADE_GPU_SMEM")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(max)
}

/// Invocations a multiprocessor holds at once, for the launch's residency (their
/// registers): `default` unless `NSHADE_GPU_SMTHREADS` says otherwise (measurements).
fn sm_threads(default: usize) -> usize {
    std::env::var("NSHADE_GPU_SMTHREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(default)
}

/// Invocations per workgroup by default; no layer of the kernel's family is wider (bias
/// rows are summed by at most one invocation each).
const DEFAULT_THREADS: usize = 256;

/// How the GLSL step kernel's work is cut ([`glsl_samples`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlslShape {
    /// Invocations per workgroup (subgroups of 32).
    pub threads: u32,
    /// Samples per chunk and the rows' skew.
    pub samples: u32,
    pub skew: u32,
    /// Workgroups resident on one multiprocessor (their workgroup memory fits the limit
    /// that many times): the launch takes that many per multiprocessor.
    pub per_mp: u32,
    /// The compact layout ([`compact_shape`]): the inputs of the layers whose weight
    /// gradients go through the dW kernel stay in workgroup memory only from the forward
    /// phase that writes them to the one that reads them (their relu masks for the
    /// backward kept in registers), every tensor of the chunk placed by its lifetime, and
    /// the tiles of a phase dealt to the subgroups by row block.
    pub compact: bool,
    /// In the compact layout: this many of the layers (from the output layer down,
    /// layers ≥ 1 whose weight gradients stay in the kernel) store their input gradient
    /// dz_{i−1} into their input X_i's region, a workgroup barrier after the phase's last
    /// read of X_i ([`inplace_layers`]); 0 elsewhere.
    pub inplace: u32,
}

/// The encoding in front of the MLP.
#[derive(Clone, Copy)]
pub(super) enum Enc<'a> {
    /// None: the sampling writes the MLP's input rows u, v.
    Raw,
    /// `freq` with this many octaves.
    Freq(usize),
    /// A 2-D `hashgrid` / `densegrid`.
    Grid(&'a Grid),
}

/// The part of a network the GLSL step kernel trains: an optional `freq` or grid stage
/// on the raw input, then one MLP.
pub(super) struct Shape<'a> {
    pub(super) enc: Enc<'a>,
    pub(super) layers: &'a [Linear],
}

impl Shape<'_> {
    /// Rows of the MLP's input X_0 that the sampling or the encoding writes.
    fn x0_rows(&self) -> usize {
        match self.enc {
            Enc::Raw => 2,
            Enc::Freq(o) => 4 * o,
            Enc::Grid(g) => g.levels.len() * g.features,
        }
    }
}

/// Most grid levels the kernel takes (each invocation keeps its (level, sample) items'
/// corner indices and weights in registers from the forward to the table gradients).
const MAX_GRID_LEVELS: usize = 32;

/// `Some` when `net` is a fusable MLP, alone or after one `freq` or 2-D grid stage, on a
/// texture (`in_dims` 2).
pub(super) fn shape(net: &Network) -> Option<Shape<'_>> {
    let (enc, mlp) = match &net.root {
        Module::Mlp(m) => (Enc::Raw, m),
        Module::Chain(c) => match c.stages.as_slice() {
            [Module::Frequency(f), Module::Mlp(m)] if f.octaves > 0 => (Enc::Freq(f.octaves), m),
            [Module::Grid(g), Module::Mlp(m)]
                if g.in_dims == 2
                    && g.features <= 8
                    && !g.levels.is_empty()
                    && g.levels.len() <= MAX_GRID_LEVELS =>
            {
                (Enc::Grid(g), m)
            }
            _ => return None,
        },
        _ => return None,
    };
    let hidden_ok = mlp.layers[..mlp.layers.len() - 1]
        .iter()
        .all(|l| !super::wgsl::needs_z(l.act));
    let out_ok = !super::wgsl::needs_z(mlp.layers.last()?.act);
    // bias rows are summed by at most one invocation each
    let narrow = mlp.layers.iter().all(|l| l.out_dims <= DEFAULT_THREADS);
    (hidden_ok && out_ok && narrow && net.in_dims == 2).then_some(Shape {
        enc,
        layers: &mlp.layers,
    })
}

/// Whether the GLSL step kernel can train `net` on `data`.
pub fn glsl_fits(net: &Network, data: DataKind) -> bool {
    matches!(data, DataKind::Texture { .. }) && shape(net).is_some()
}

/// The GLSL kernel's sizes for `samples` per chunk.
struct Layout {
    sx: usize,
    /// Offset of every layer's input X_i in `xh`.
    xo: Vec<usize>,
    /// Offset of X_0's second buffer in `xh` (the next chunk's, [`GlslLaunch::ahead`];
    /// `xh` without one).
    x0alt: usize,
    xh: usize,
    gh: usize,
    /// Offset of every layer's output gradient dz_i in `ga`.
    gofs: Vec<usize>,
    /// The array of the output gradients: `gh`, or `xh` in the compact layout.
    ga: &'static str,
    maxp: usize,
    /// f32 elements of `sh`: u, v, then the targets (see [`layout`]).
    sh: usize,
    /// The row stride of `sh`.
    r: usize,
    /// With the output epilogue in registers: the offset of the targets in `sh` and
    /// their stride (floats a sample).
    tg: usize,
    ts: usize,
    zc: usize,
    bs: usize,
    /// f16 biases for the f16 accumulators ([`acc16_for`]; 0 without them).
    bh: usize,
    /// Bias-gradient accumulators: (rows, blocks) per layer, last layer first.
    accs: Vec<(usize, usize)>,
    /// Per layer: the offset of its rows' 0/1 mask in `bs`, where it has one
    /// ([`mask_layers`]).
    mask_off: Vec<Option<usize>>,
}

/// A hidden layer whose padding rows need masking: its activation is not 0 at 0.
pub(super) fn needs_mask(l: &PadLayer, act: Activation) -> bool {
    l.out_dims < l.out_p && matches!(act, Activation::Sigmoid | Activation::Exp)
}

/// The layout for `s` samples per chunk, rows of `xh`/`gh` padded by `skew`. Rows of
/// `sh`: u and v, then — with the output epilogue in registers — the samples' validity
/// (1 or 0), S + 4 floats long (matrix loads need 16-byte-aligned rows), and the targets
/// sample by sample (`ts`, the outputs rounded up to 4, floats a sample), read as
/// column-major tiles of stride `ts` whose rows past the outputs reach into the next
/// samples' (rows the loss masks; the last sample's tile ends out_p floats after its
/// start); else the targets and then the outputs, a row each, S + 1 floats long; `wg`
/// invocations; with X_0 in two buffers where `ahead`.
/// `compact`: the split layers of the compact layout ([`GlslShape::compact`],
/// [`compact_regions`]); else every X_i has its own region of `xh` and the output
/// gradients alternate between two of `gh`.
#[allow(clippy::too_many_arguments)]
fn layout(
    pad: &Pad,
    s: usize,
    skew: usize,
    masked: &[bool],
    outreg: bool,
    wg: usize,
    acc16: bool,
    ahead: bool,
    compact: Option<(&[bool], usize)>,
) -> Layout {
    debug_assert_eq!(masked.len(), pad.layers.len());
    let out_p = pad.layers.last().map_or(16, |l| l.out_p);
    let od = pad.layers.last().map_or(1, |l| l.out_dims);
    let sx = s + skew;
    let maxp = pad.layers.iter().map(|l| l.out_p).max().unwrap_or(16);
    let n = pad.layers.len();
    // (X_i offsets, dz_i offsets, X_0's second buffer, `xh`'s and `gh`'s lengths, the
    // array of the output gradients)
    let (xo, gofs, x0alt, off, gh, ga) = match compact {
        Some((split, inplace)) => {
            let (xr, gr, rows) = compact_regions(pad, split, inplace);
            let scale = |v: Vec<usize>| v.iter().map(|r| r * sx).collect::<Vec<_>>();
            (scale(xr), scale(gr), rows * sx, rows * sx, 0, "xh")
        }
        None => {
            // every X_i in turn, X_0's second buffer after them where `ahead`; dz_i of
            // the last layer at 0 of `gh`, then alternating (phase i reads dz_i and
            // writes dz_{i-1})
            let mut xo = Vec::new();
            let mut off = 0;
            for l in &pad.layers {
                xo.push(off);
                off += l.in_p * sx;
            }
            let x0alt = off;
            if ahead {
                off += pad.layers.first().map_or(0, |l| l.in_p) * sx;
            }
            let gofs = (0..n)
                .map(|i| {
                    if (n - 1 - i).is_multiple_of(2) {
                        0
                    } else {
                        maxp * sx
                    }
                })
                .collect();
            (xo, gofs, x0alt, off, 2 * maxp * sx, "gh")
        }
    };
    let accs: Vec<(usize, usize)> = pad
        .layers
        .iter()
        .rev()
        .map(|l| (l.out_dims, bias_blocks(l.out_dims, s, wg)))
        .collect();
    let st_n = s / 16;
    let out_tiles = (out_p / 16) * st_n;
    let scr = out_tiles.min(wg / 32);
    // the folds at the end: one accumulator at a time, then the loss's blocks
    let folds = wg + wg / 16;
    let r = if outreg { s + 4 } else { s + 1 };
    let ts = od.next_multiple_of(4);
    let sum_out: usize = pad.layers.iter().map(|l| l.out_p).sum();
    // the masks after the biases, for the layers that have one
    let mut mask_off = Vec::new();
    let mut bs = sum_out;
    for (l, &m) in pad.layers.iter().zip(masked) {
        mask_off.push(m.then_some(bs));
        if m {
            bs += l.out_p;
        }
    }
    Layout {
        sx,
        xo,
        x0alt,
        xh: off,
        gh,
        gofs,
        ga,
        maxp,
        sh: if outreg {
            3 * r + (s - 1) * ts + out_p
        } else {
            (2 + 2 * od) * r
        },
        r,
        tg: 3 * r,
        ts,
        // the scratch tiles only where the output epilogue goes through them
        zc: if outreg {
            folds
        } else {
            (scr * 256).max(folds)
        },
        // biases, then the 0/1 row masks of the layers that need them
        bs,
        bh: if acc16 { sum_out } else { 0 },
        mask_off,
        accs,
    }
}

/// The rows of the compact layout ([`GlslShape::compact`]) for the MLP `pad` whose
/// layers `split` go through the dW kernel: the first row of each X_i and of each dz_i
/// in one array, and its rows. X_0 comes first and lives through the chunk; every other
/// tensor lives from the phase that writes it to the last that reads it (the forward's
/// phase i writes X_{i+1}, the output layer's dz; the backward's phase i, at time
/// 2n − 1 − i, reads dz_i and writes dz_{i−1}; a split layer's input is last read by the
/// forward, its relu mask kept in registers, any other's by its backward phase), and
/// tensors whose lifetimes do not meet share a region: the widest first, each into the
/// first region at least as wide that is free for its whole lifetime, else a new one.
/// The `inplace` layers of [`inplace_layers`] write dz_{i−1} into X_i's region (which
/// then lives until dz_{i−1}'s reader).
pub fn compact_regions(
    pad: &Pad,
    split: &[bool],
    inplace: usize,
) -> (Vec<usize>, Vec<usize>, usize) {
    let n = pad.layers.len();
    let inpl = inplace_layers(split, inplace);
    // (rows, first phase, last phase, X (else dz), layer)
    let mut items = Vec::new();
    for (i, (l, &sp)) in pad.layers.iter().zip(split).enumerate().skip(1) {
        let last = match (sp, inpl[i]) {
            (true, _) => i,
            (false, false) => 2 * n - 1 - i,
            (false, true) => 2 * n - i,
        };
        items.push((l.in_p, i - 1, last, true, i));
    }
    items.push((pad.layers[n - 1].out_p, n - 1, n, false, n - 1));
    for i in (0..n - 1).filter(|&i| !inpl[i + 1]) {
        items.push((pad.layers[i].out_p, 2 * n - 2 - i, 2 * n - 1 - i, false, i));
    }
    items.sort_by_key(|it| (std::cmp::Reverse(it.0), it.1));
    // regions: (rows, lifetimes)
    let mut regions: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    let mut at = Vec::new();
    for &(rows, w, r, _, _) in &items {
        let free = |life: &[(usize, usize)]| life.iter().all(|&(a, b)| r < a || b < w);
        let k = match regions
            .iter()
            .position(|(rr, life)| *rr >= rows && free(life))
        {
            Some(k) => k,
            None => {
                regions.push((rows, Vec::new()));
                regions.len() - 1
            }
        };
        regions[k].1.push((w, r));
        at.push(k);
    }
    let mut start = vec![0; regions.len()];
    let mut row = pad.layers[0].in_p;
    for (k, (rows, _)) in regions.iter().enumerate() {
        start[k] = row;
        row += rows;
    }
    let (mut xo, mut go) = (vec![0; n], vec![0; n]);
    for (&(_, _, _, x, i), &k) in items.iter().zip(&at) {
        if x {
            xo[i] = start[k];
        } else {
            go[i] = start[k];
        }
    }
    for i in (1..n).filter(|&i| inpl[i]) {
        go[i - 1] = xo[i];
    }
    (xo, go, row)
}

/// Per layer: whether its backward stores its input gradient dz_{i−1} into its input
/// X_i's region ([`GlslShape::inplace`]): the first `count` layers i ≥ 1 from the output
/// layer down whose weight gradients stay in the kernel (a split layer's X_i leaves
/// workgroup memory after the forward already).
pub fn inplace_layers(split: &[bool], count: usize) -> Vec<bool> {
    let mut inpl = vec![false; split.len()];
    for i in (1..split.len()).rev().filter(|&i| !split[i]).take(count) {
        inpl[i] = true;
    }
    inpl
}

/// Invocations per bias row (a power of two ≤ 16 dividing S, B·rows ≤ WG), as the WGSL
/// kernel's `fused_bias_sums` (rows are at most WG: [`shape`]).
pub(super) fn bias_blocks(rows: usize, s: usize, wg: usize) -> usize {
    let mut nb = 1;
    while nb < 16 && nb * 2 * rows <= wg && nb * 2 <= s && s.is_multiple_of(nb * 2) {
        nb *= 2;
    }
    nb
}

/// Adds to register `acc` the values `value(e)` of row `o = lid / nb` of a tile of S
/// samples (rows < `rows`), invocation `lid` taking samples `lid % nb`, `+ nb`, … in
/// that order, or with `contiguous` the S / nb samples from `(lid % nb) · S / nb` on, in
/// order (neighbouring elements, which a compiler may load as one vector); `value` turns
/// the element expression `e` (row `o`, sample `bl + …`, relative to the tile's start)
/// into the value to add.
pub(super) fn row_sums(
    acc: &str,
    rows: usize,
    nb: usize,
    s: usize,
    contiguous: bool,
    value: &dyn Fn(&str) -> String,
) -> String {
    let mut sum = String::new();
    let per = s / nb;
    for kk in 0..per {
        let e = if contiguous {
            format!("o * SX + bl * {per}u + {kk}u")
        } else {
            format!("o * SX + bl + {}u", kk * nb)
        };
        let _ = write!(sum, " {acc} += {};", value(&e));
    }
    format!("    {{ uint o = lid / {nb}u; uint bl = lid % {nb}u; if (o < {rows}u) {{{sum} }} }}\n")
}

/// The fold of the per-invocation [`row_sums`] in `acc` (rows of `nb` invocations)
/// in a fixed order, into `partial[pbase + off + row]`; `check` flags a non-finite sum.
/// With `shuffle`, through subgroup shuffles: a row's `nb` invocations are neighbouring lanes
/// of one subgroup (`nb` a power of two at most 16), and its first lane adds the others'
/// values in lane order, the order of the fold through `zc` (`shuffle` false: a barrier,
/// every value into `zc`, a barrier, one invocation a row adds them), so the same sums
/// without a workgroup barrier.
fn fold_rows(
    k: &mut String,
    acc: &str,
    rows: usize,
    nb: usize,
    off: usize,
    check: bool,
    shuffle: bool,
) {
    let check = if check {
        " if (nsh_ls_bits(t) != 0u) { atomicOr(lsbad, 1u); }"
    } else {
        ""
    };
    if shuffle {
        let fold = shuffle_sum(acc, nb);
        let _ = writeln!(
            k,
            "    {{ {fold} if (lid % {nb}u == 0u && lid / {nb}u < {rows}u) {{ partial[pbase + {off}u + lid / {nb}u] = t;{check} }} }}"
        );
        return;
    }
    let mut fold = format!("float t = zc[lid * {nb}u];");
    for b in 1..nb {
        let _ = write!(fold, " t += zc[lid * {nb}u + {b}u];");
    }
    k.push_str(BAR);
    let _ = writeln!(k, "    zc[lid] = {acc};");
    k.push_str(BAR);
    let _ = writeln!(
        k,
        "    if (lid < {rows}u) {{ {fold} partial[pbase + {off}u + lid] = t;{check} }}"
    );
}

/// `float t` = the sum of `acc` over this lane and the next `nb − 1`, in lane order.
fn shuffle_sum(acc: &str, nb: usize) -> String {
    let mut fold = format!("float t = {acc};");
    for b in 1..nb {
        let _ = write!(fold, " t += subgroupShuffleDown({acc}, {b}u);");
    }
    fold
}

/// Chunks a workgroup has at most for [`early_stores`].
const EARLY_CHUNKS: u32 = 8;

/// The step kernel stores its dW partials in the last chunk, each layer's right after
/// its last dW products, so that the stores drain while the layers below run their
/// backward, where a workgroup has at most [`EARLY_CHUNKS`] chunks; else after the chunk
/// loop. The same values either way. On an H100 the stores after the loop took B's
/// kernel about 7 µs a step whatever the batch (`NSHADE_GPU_EXP=noend`); in the last
/// chunk B trained 1.09x as fast at 8 448 samples and 1.03x at 2^16 (8 chunks), but
/// 0.98x at 2^18 and 0.97x at 2^20 (the branch in every chunk costs more than the stores
/// there), seed #3 1.02x / 0.97x / 0.96x at 2^16 / 2^18 / 2^20. `NSHADE_GPU_EARLY=0|1`:
/// never or always, for measurements.
pub fn early_stores(chunks: u32) -> bool {
    match std::env::var("NSHADE_GPU_EARLY").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => chunks <= EARLY_CHUNKS,
    }
}

impl Layout {
    fn bytes(&self) -> usize {
        // `lsbad` and 12 bytes to spare
        (self.xh + self.gh + self.bh) * 2 + (self.sh + self.zc + self.bs) * 4 + 16
    }
}

/// Workgroup memory of the layout of `s` samples, `skew`, `wg` invocations, with or
/// without the f16 bias copy and X_0's second buffer.
#[allow(clippy::too_many_arguments)]
fn layout_bytes(
    net: &Network,
    pad: &Pad,
    s: usize,
    skew: usize,
    wg: usize,
    acc16: bool,
    ahead: bool,
    compact: Option<(&[bool], usize)>,
) -> usize {
    let outreg = out_registers(wg);
    let masked = mask_layers(net, pad, outreg);
    layout(pad, s, skew, &masked, outreg, wg, acc16, ahead, compact).bytes()
}

/// The split layers of `shape`'s compact layout (`None` where it is not compact).
fn compact_layers(net: &Network, shape: &GlslShape) -> Option<Vec<bool>> {
    shape
        .compact
        .then(|| split_layers(&Pad::of(net), &super::glsl_dw::split_mode()))
}

/// The compact layout ([`GlslShape::compact`]) for `net` whose layers `split` go through
/// the dW kernel (none, or some), where it gives more samples a multiprocessor than
/// [`glsl_samples`]' `shape` in `max` bytes of workgroup memory and the widest layer's
/// phase gives each subgroup one or two tiles more than one (a subgroup's tiles then
/// share their row block's weight tiles, held in registers where every layer's row
/// blocks divide the subgroups or fit them at once, which it requires): 256 invocations,
/// else 128 (or `NSHADE_GPU_THREADS`); 64 or 32 samples with rows padded by 8, else 32
/// without (`NSHADE_GPU_SAMPLES` asks for a count, 48 among them, for measurements); as
/// many workgroups a multiprocessor as fit with their f16 bias copies and 1 KiB each to
/// spare, at most 256 invocations; the fewest layers storing their input gradient in
/// place ([`GlslShape::inplace`]) that reach it — by default only where no layer splits,
/// `every`: `Some(true)` every layer that can, `Some(false)` none. Not for grids, nor
/// where the split tensors are copied from workgroup memory (`NSHADE_GPU_DWSTORE=copy`).
/// The trainer takes it (`NSHADE_GPU_COMPACT=0`: never) for networks without a split
/// layer and for those whose split it keeps.
pub fn compact_shape(
    net: &Network,
    split: &[bool],
    shape: &GlslShape,
    max: usize,
    every: Option<bool>,
) -> Option<GlslShape> {
    let shp = self::shape(net)?;
    let pad = Pad::of(net);
    let n = pad.layers.len();
    if matches!(shp.enc, Enc::Grid(_)) || !direct_stores() || split.len() != n {
        return None;
    }
    // workgroups of 256 invocations, else of 128 (two a multiprocessor where they fit);
    // an override narrower than a layer is ignored, as in `glsl_samples`
    // (and never narrower than a layer: bias rows take one invocation each)
    let narrow_enough = |t: &usize| pad.layers.iter().all(|l| l.out_dims <= *t);
    let wgs: Vec<usize> = match threads_override().filter(narrow_enough) {
        Some(t) => vec![t],
        None => [DEFAULT_THREADS, DEFAULT_THREADS / 2]
            .into_iter()
            .filter(narrow_enough)
            .collect(),
    };
    // rows padded first (unpadded rows put a tile's 16 rows into the same banks), then
    // the most samples; `NSHADE_GPU_SAMPLES` asks for a count, for measurements
    let asked = std::env::var("NSHADE_GPU_SAMPLES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    // input gradients stored in place ([`GlslShape::inplace`]), each a barrier more: as
    // few as fit, by default only where no layer splits; `every` (or
    // `NSHADE_GPU_INPLACE=all`): every layer that can, `Some(false)` (or `=0`): none;
    // `NSHADE_GPU_INPLACE=1`: as few as fit where layers split too
    let knob = std::env::var("NSHADE_GPU_INPLACE").unwrap_or_default();
    let eligible = inplace_layers(split, n).iter().filter(|&&b| b).count();
    let (min_inplace, max_inplace) = match (every, knob.as_str()) {
        (Some(false), _) | (None, "0") => (0, 0),
        (Some(true), _) | (None, "all") => (eligible, eligible),
        (None, "1") => (0, eligible),
        _ if split.contains(&true) => (0, 0),
        _ => (0, eligible),
    };
    let rows = pad.layers.iter().map(|l| l.out_p / 16).max().unwrap_or(1);
    let acc16 = acc16_fits(net);
    for wg in wgs {
        // only where the widest layer's phase has more tiles than subgroups (a subgroup's
        // tiles then share their row block's weight tiles), at most twice as many (D in
        // 64-sample chunks, four tiles a subgroup, trained 0.59-0.67x as fast as in 32 on
        // an H100; B in 64, two tiles, 1.09-1.15x its 32-sample shape)
        let nsg = wg / 32;
        let more = |s: usize| rows * (s / 16) > nsg && rows * (s / 16) <= 2 * nsg;
        // every phase's weight tiles held as in the other shapes: a phase of more tiles
        // than subgroups needs row blocks that divide the subgroups (a 96-wide layer's six
        // do not)
        let held = |s: usize| {
            pad.layers.iter().all(|l| {
                [l.out_p / 16, l.in_p / 16]
                    .iter()
                    .all(|&rb| rb * (s / 16) <= nsg || nsg.is_multiple_of(rb))
            })
        };
        // (64 samples in unpadded rows put a tile's rows into the same banks: D 0.31x, seed
        // #3 0.28-0.46x on an H100)
        let candidates = [(64, 8), (32, 8), (48, 8), (32, 0), (48, 0)]
            .into_iter()
            .filter(|&(s, _)| {
                s <= wg
                    && more(s)
                    && held(s)
                    // 48 only where asked: three sample blocks were slower than two (D
                    // 0.87x, B 0.86-0.90x on the H200)
                    && asked.map_or(s != 48, |a| a == s)
            });
        // as many resident workgroups as fit `max` with their f16 bias copies (where
        // `acc16_fits`) and 1 KiB each to spare (NVIDIA keeps 1 KiB of shared memory per
        // resident block), at most 256 invocations a multiprocessor (their registers)
        let resident = |bytes: usize| match sm_budget(max) / (bytes + 1024) {
            _ if bytes > max => 0,
            0 => 1,
            k => k.min((sm_threads(DEFAULT_THREADS) / wg).max(1)),
        };
        for (s, skew) in candidates {
            // the fewest layers storing their input gradient in place that give more
            // samples a multiprocessor than `shape`
            let Some((ip, per_mp)) = (min_inplace..=max_inplace)
                .map(|ip| {
                    let b = layout_bytes(net, &pad, s, skew, wg, acc16, false, Some((split, ip)));
                    (ip, resident(b))
                })
                .find(|&(_, k)| s * k > (shape.samples * shape.per_mp) as usize)
            else {
                continue;
            };
            return Some(GlslShape {
                threads: wg as u32,
                samples: s as u32,
                skew: skew as u32,
                per_mp: per_mp as u32,
                compact: true,
                inplace: ip as u32,
            });
        }
    }
    None
}

/// The split layers' X and dz are stored from the epilogues' registers where they can be
/// (`NSHADE_GPU_DWSTORE=copy`: every tile copied from workgroup memory in the backward,
/// for measurements).
fn direct_stores() -> bool {
    std::env::var("NSHADE_GPU_DWSTORE").map_or(true, |v| v != "copy")
}

/// Invocations, samples per chunk and row skew for the GLSL kernel: two workgroups of 128
/// invocations and 32 samples per multiprocessor where both fit `max` bytes of workgroup
/// memory (networks no wider than 128 whose 64-sample layout fits too); else 256
/// invocations and 64 samples (32 for grids), halved until the workgroup memory fits `max` bytes, with rows padded by 8 f16 where that fits (the
/// padded stride moves the 16 rows a matrix load reads into different banks), else
/// unpadded; `None` when not even 16 samples fit.
pub fn glsl_samples(net: &Network, max: usize) -> Option<GlslShape> {
    let pad = Pad::of(net);
    // (without the f16 bias copy: `acc16_for` takes it where it still fits)
    let bytes =
        |s: usize, skew: usize, wg: usize| layout_bytes(net, &pad, s, skew, wg, false, false, None);
    let asked = std::env::var("NSHADE_GPU_SAMPLES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|s| s.is_power_of_two() && *s >= 16);
    let grid = matches!(shape(net).map(|shp| shp.enc), Some(Enc::Grid(_)));
    // grids: 32 (C trained 4-13% faster than with 64 on the H200)
    let mut s = asked.unwrap_or(if grid { 32 } else { 64 });
    // (an override narrower than a layer is ignored: bias rows take one invocation each)
    let threads = threads_override().filter(|&t| pad.layers.iter().all(|l| l.out_dims <= t));
    // Several small workgroups per multiprocessor where their layouts fit the workgroup
    // memory that many times (the resident workgroups of one share it): each one's
    // barriers then overlap the others' products. (widest layer, invocations, samples,
    // workgroups per multiprocessor), the first that fits. Seed #3 on the H200, G samples/s
    // at 2^16 / 2^18 / 2^20: four of 64 x 16 1.88 / 3.11 / 3.85, two of 128 x 32
    // 1.84 / 2.98 / 3.63 (one call); one of 256 x 64 1.73 / 2.79 / 3.39 (another).
    const SMALL: [(usize, u32, u32, u32); 2] = [(32, 64, 16, 4), (128, 128, 32, 2)];
    if threads.is_none() && asked.is_none() && !grid && bytes(s, 8, DEFAULT_THREADS) <= max {
        let widest = pad.layers.iter().map(|l| l.out_dims).max().unwrap_or(0);
        for (limit, wg, samples, per_mp) in SMALL {
            if widest <= limit
                && per_mp as usize * bytes(samples as usize, 8, wg as usize) <= sm_budget(max)
            {
                return Some(GlslShape {
                    threads: wg,
                    samples,
                    skew: 8,
                    per_mp,
                    compact: false,
                    inplace: 0,
                });
            }
        }
    }
    let wg = threads.unwrap_or(DEFAULT_THREADS);
    // the sampling takes one invocation per sample
    s = s.min(wg);
    loop {
        for skew in [8, 0] {
            let b = bytes(s, skew, wg);
            if b <= max {
                // one a multiprocessor unless the knobs say more fit
                let per_mp = (sm_budget(max) / (b + 1024)).clamp(1, (sm_threads(wg) / wg).max(1));
                return Some(GlslShape {
                    threads: wg as u32,
                    samples: s as u32,
                    skew: skew as u32,
                    per_mp: per_mp as u32,
                    compact: false,
                    inplace: 0,
                });
            }
        }
        if s <= 16 {
            return None;
        }
        s /= 2;
    }
}

/// Weight tiles held in matrix registers (the forward's and the input gradient's
/// single-tile phases), at most 40 tiles: by default both (`NSHADE_GPU_HOIST`: 0 none,
/// 1 forward only, 2 both). Unlike the WGSL kernel, whose registers spilled with them
/// for `freq(8) | mlp(128x4, relu)`, the GLSL kernel holds them for every width (that
/// network trained 1.15-1.19x faster with them on the H200).
fn hoist_level() -> u32 {
    std::env::var("NSHADE_GPU_HOIST")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(2)
}

/// Per layer of `net`: its padding rows need a mask (a hidden layer's activation not 0
/// at 0, or the output layer's loss with its epilogue in registers).
fn mask_layers(net: &Network, pad: &Pad, outreg: bool) -> Vec<bool> {
    let Some(shp) = shape(net) else {
        return vec![false; pad.layers.len()];
    };
    let n = shp.layers.len();
    (0..n)
        .map(|i| {
            let l = &pad.layers[i];
            if i + 1 < n {
                needs_mask(l, shp.layers[i].act)
            } else {
                outreg && l.out_dims < l.out_p
            }
        })
        .collect()
}

/// The output layer's epilogue (loss, dy) runs on the accumulator's elements, with the
/// targets, the rows' mask and the samples' validity loaded as matrices of the same
/// tile; in workgroups of 64 invocations (the small networks' four per multiprocessor)
/// through the subgroup's scratch tile instead, one element per invocation and round,
/// as the WGSL kernel: there one tile's few real rows (3 of 16) are all the epilogue
/// has, and 32 invocations share them in two rounds where the accumulator's layout
/// gives them to 12 (seed #3 on an H100 1.01-1.05x; B, with 256 invocations,
/// 0.89-0.94x, D 0.97-1.00x that way). `NSHADE_GPU_OUTREG=0|1`: either for every
/// shape, for measurements.
fn out_registers(wg: usize) -> bool {
    match std::env::var("NSHADE_GPU_OUTREG").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => wg != 64,
    }
}

/// The step kernel can accumulate the hidden layers' products and the input gradients
/// under them in f16 ([`GlslLaunch::acc16`]): networks without a grid whose hidden
/// activations are relu, leaky_relu or none (their values and derivatives on f16
/// elements).
pub fn acc16_fits(net: &Network) -> bool {
    shape(net).is_some_and(|shp| {
        !matches!(shp.enc, Enc::Grid(_))
            && shp.layers[..shp.layers.len() - 1].iter().all(|l| {
                matches!(
                    l.act,
                    Activation::Relu | Activation::LeakyRelu { .. } | Activation::None
                )
            })
    })
}

/// `shape`'s workgroups, with or without the f16 bias copy and X_0's second buffer,
/// fit into `max` bytes of workgroup memory.
fn shape_fits(net: &Network, shape: &GlslShape, acc16: bool, ahead: bool, max: usize) -> bool {
    let bytes = layout_bytes(
        net,
        &Pad::of(net),
        shape.samples as usize,
        shape.skew as usize,
        shape.threads as usize,
        acc16,
        ahead,
        compact_layers(net, shape)
            .as_deref()
            .map(|sp| (sp, shape.inplace as usize)),
    );
    bytes <= max && shape.per_mp as usize * bytes <= sm_budget(max)
}

/// f16 accumulators by default where they fit (`NSHADE_GPU_ACC16=0`: never, for
/// measurements). On an H100: B 1.05-1.06x, seed #3 1.00-1.04x, `freq(8) |
/// mlp(128x4, relu)` with its 128x128 layers split 1.02-1.05x (with every layer split
/// 0.98-1.00x); PSNR after 1000 steps within 0.2 dB of f32 in the mean over six seeds
/// for every seed network, B and that network (docs/PERFORMANCE.md). Only where the
/// f16 bias copy still fits `shape`'s workgroups into `max` bytes (shapes are chosen
/// without it, so a network whose layout fills the memory keeps f32 rather than losing
/// the kernel).
pub fn acc16_for(net: &Network, shape: &GlslShape, max: usize) -> bool {
    std::env::var("NSHADE_GPU_ACC16").map_or(true, |v| v != "0")
        && acc16_fits(net)
        && shape_fits(net, shape, true, false, max)
}

/// The step kernel can sample the next chunk during this one's backward
/// ([`GlslLaunch::ahead`]): networks without a grid (whose forward keeps per-chunk items
/// in registers) of at least three layers (the sampling goes into the output layer's
/// backward phase, the frequency encoding into layer 1's, a barrier apart).
pub fn ahead_fits(net: &Network) -> bool {
    shape(net).is_some_and(|shp| !matches!(shp.enc, Enc::Grid(_)) && shp.layers.len() >= 3)
}

/// The next chunk sampled ahead where it fits: as `asked`, else as `NSHADE_GPU_AHEAD`
/// says (0 or 1, for measurements), else by default for shapes of one workgroup per
/// multiprocessor (where no other workgroup's products fill its barriers: B 1.00-1.03x
/// on an H100; seed #3's four workgroups of 64 0.98-1.01x, D before its compact layout
/// 0.95x) — where [`ahead_fits`] holds, the layout is not compact and X_0's second
/// buffer still fits `shape`'s workgroups (with the f16 bias copy where `acc16`) into
/// `max` bytes.
pub fn ahead_for(
    net: &Network,
    shape: &GlslShape,
    acc16: bool,
    max: usize,
    asked: Option<bool>,
) -> bool {
    !shape.compact
        && asked.unwrap_or_else(|| {
            std::env::var("NSHADE_GPU_AHEAD").map_or(shape.per_mp == 1, |v| v != "0")
        })
        && ahead_fits(net)
        && shape_fits(net, shape, acc16, true, max)
}

/// `act` on an f16 value `z` (relu, leaky_relu, none: [`acc16_for`]).
fn act16(a: Activation, z: &str) -> String {
    match a {
        Activation::Relu => format!("max({z}, float16_t(0.0))"),
        Activation::LeakyRelu { slope } => format!("max({z}, float16_t({}) * {z})", lit(slope)),
        _ => z.to_string(),
    }
}

/// The products of a subgroup's `nj` tiles side by side into accumulators `c0` …: k
/// step by k step (`kn`), each step's B tiles (`b_at(j, kk)`'s `coopMatLoad` arguments)
/// and A tiles (the held `held[kk]`, else loaded with `a_at(j, kk)`, once for every tile
/// where they `share` their row block) loaded before the step's products.
fn interleaved_products(
    k: &mut String,
    nj: usize,
    kn: usize,
    share: bool,
    held: Option<&[String]>,
    a_at: &dyn Fn(usize, usize) -> String,
    b_at: &dyn Fn(usize, usize) -> String,
) {
    for kk in 0..kn {
        let held = held.map(|w| w[kk].clone());
        for j in 0..nj {
            let _ = write!(
                k,
                "    {MB} b{j}_{kk}; coopMatLoad(b{j}_{kk}, {});",
                b_at(j, kk)
            );
            if held.is_none() && (j == 0 || !share) {
                let _ = write!(
                    k,
                    " {MA} a{j}_{kk}; coopMatLoad(a{j}_{kk}, {});",
                    a_at(j, kk)
                );
            }
            k.push('\n');
        }
        for j in 0..nj {
            let a = held
                .clone()
                .unwrap_or_else(|| format!("a{}_{kk}", if share { 0 } else { j }));
            let _ = writeln!(k, "    c{j} = coopMatMulAdd({a}, b{j}_{kk}, c{j});");
        }
    }
}

/// One k step of a tile product, `c = coopMatMulAdd(A, B, c)`: A the held tile `held`,
/// else loaded with the `coopMatLoad` arguments `a_load`; B loaded with `b_load`.
fn mul_add(k: &mut String, held: Option<&str>, a_load: &str, b_load: &str) {
    let _ = match held {
        Some(w) => writeln!(
            k,
            "        {{ {MB} b; coopMatLoad(b, {b_load}); c = coopMatMulAdd({w}, b, c); }}"
        ),
        None => writeln!(
            k,
            "        {{ {MA} a; coopMatLoad(a, {a_load}); {MB} b; coopMatLoad(b, {b_load}); c = coopMatMulAdd(a, b, c); }}"
        ),
    };
}

/// The four texels around the sample at (`u`, `v`) of a `w`×`h` texture (lines of a
/// block at 8 spaces): `fx`, `fy`, their floors `x0f`, `y0f` and the clamped corners
/// `x0`, `x1`, `y0`, `y1`, as the CPU's bilinear lookup.
pub(super) fn texel_corners(u: &str, v: &str, w: u32, h: u32) -> String {
    format!(
        "        float fx = {u} * {w}.0 - 0.5; float fy = {v} * {h}.0 - 0.5;
        float x0f = floor(fx); float y0f = floor(fy);
        uint x0 = min(uint(max(x0f, 0.0)), {wm}u); uint x1 = min(uint(max(x0f + 1.0, 0.0)), {wm}u);
        uint y0 = min(uint(max(y0f, 0.0)), {hm}u); uint y1 = min(uint(max(y0f + 1.0, 0.0)), {hm}u);
",
        wm = w - 1,
        hm = h - 1
    )
}

/// `freq`'s sin and cos of input value `xv` at octave `o` (< `octaves`) into `vs`, `vc`:
/// the factor 2^o·π computed, not picked by a switch (which diverges where a subgroup's
/// items span two octaves); π·2^o is exact, the shared emitter's literal
/// (`syntax::frequency_scale`), so the same values.
pub(super) fn freq_sin_cos(octaves: usize) -> String {
    debug_assert!(
        (0..octaves)
            .all(|o| syntax::frequency_scale(o) == std::f32::consts::PI * (1u32 << o) as f32)
    );
    format!(
        "float sc = {} * float(1u << o); float vs = sin(xv * sc); float vc = cos(xv * sc);",
        lit(std::f32::consts::PI)
    )
}

/// The copy of layer `l`'s biases into `bs` at `boff` (element `e`, zero in padding rows).
pub(super) fn bias_copy(boff: usize, l: &PadLayer) -> String {
    format!(
        "bs[{boff}u + e] = e < {od}u ? params[{b}u + min(e, {odm}u)] : 0.0;",
        od = l.out_dims,
        odm = l.out_dims - 1,
        b = l.bias
    )
}

/// ` * f'(z)` of the output activation `a` at `zz` with output `p` (empty for none).
fn output_derivative(a: Activation) -> String {
    if a == Activation::None {
        String::new()
    } else {
        format!(" * {}", syntax::activation_derivative(&a, "zz", "p"))
    }
}

/// One output element's loss and gradient in a branch over real elements (`cond`), with
/// the element's pre-activation `z` and target `t`: `dyv` (0 elsewhere) is the loss
/// gradient times the output activation's derivative, `scale` and the dynamic loss scale
/// `lsc`; `loss_acc` gains the loss. Lines after the first are indented by `ind`.
pub(super) fn loss_branch(
    out: Activation,
    loss: Loss,
    scale: f32,
    (cond, z, t): (&str, &str, &str),
    ind: &str,
) -> String {
    format!(
        "float dyv = 0.0;
{ind}if ({cond}) {{
{ind}    float zz = {z}; float p = {a}; float tt = {t};
{ind}    loss_acc += {lv};
{ind}    dyv = ({lg}) * {sc} * lsc{deriv};
{ind}}}",
        a = act(out, "zz"),
        lv = super::wgsl::loss_value(loss, "p", "tt"),
        lg = super::wgsl::loss_gradient(loss, "p", "tt"),
        sc = lit(scale),
        deriv = output_derivative(out),
    )
}

/// The input gradient `d` of `v` under a layer whose activation `below` gave `y` (f32;
/// none under the first layer): leaky_relu as a select instead of the shared emitter's
/// exact arithmetic form (the same values, v·1 and v·slope, three instructions fewer;
/// `NSHADE_GPU_OFF=leaky` in `off`: the shared form).
pub(super) fn input_gradient(below: Option<Activation>, off: &str) -> String {
    match below {
        Some(Activation::None) | None => "v".to_string(),
        Some(Activation::LeakyRelu { slope }) if !exp_has(off, "leaky") => {
            format!("(y > 0.0 ? v : v * {})", lit(slope))
        }
        Some(b) => format!("v * {}", syntax::activation_derivative(&b, "y", "y")),
    }
}

/// `NSHADE_GPU_EXP` (timing only, wrong results) holds `name` among its comma-separated
/// parts: `fwd` (no backward), `nodw` (no dW products), `noepi` (no tile epilogues),
/// `noatom` (no table atomics), `half` (feature 0's table atomics alone), `nosample` (no
/// texel loads), `nofreq` (no sin / cos), `empty` (returns at once), `noend` (returns
/// after the chunk loop), `nobar` (the chunk loop's workgroup barriers as subgroup
/// barriers).
pub(super) fn exp_has(exp: &str, name: &str) -> bool {
    exp.split(',').any(|p| p == name)
}

/// y = f(z) in GLSL.
pub(super) fn act(a: Activation, z: &str) -> String {
    syntax::activation(&CSyntax, &a, z)
}

pub(super) const HEAD: &str = "#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
";

pub(super) const FUNCS: &str = "uint nsh_pcg_hash(uint v) {
    uint state = v * 747796405u + 2891336453u;
    uint word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}
float nsh_unit(uint h) { return float(h >> 8u) * (1.0 / 16777216.0); }
float nsh_sign(float d) { return d > 0.0 ? 1.0 : (d < 0.0 ? -1.0 : 0.0); }
// 1 when v is not finite or |v| > lim (a bit test: no reliance on NaN comparisons)
uint nsh_ls_over(float v, float lim) {
    return ((floatBitsToUint(v) & 0x7f800000u) == 0x7f800000u || abs(v) > lim) ? 1u : 0u;
}
uint nsh_ls_bits(float v) { return (floatBitsToUint(v) & 0x7f800000u) == 0x7f800000u ? 1u : 0u; }
";

/// The step kernels' bindings (the WGSL step kernel's, as the host binds them): the step
/// record, parameters, data, partial sums, loss partials, the f16 weight copy, the loss
/// scale state and the per-group overflow flags.
pub(super) const STEP_BINDINGS: &str = "layout(set = 0, binding = 0) uniform Step { uint step; uint slot; float step_lr; float inv_c2; uint mode; float poison; uint seed_h; } st;
layout(set = 0, binding = 1) readonly buffer Params { float params[]; };
layout(set = 0, binding = 2) readonly buffer Data { float data[]; };
layout(set = 0, binding = 3) buffer Partial { float partial[]; };
layout(set = 0, binding = 4) buffer LossPartial { float loss_partial[]; };
layout(set = 0, binding = 5) readonly buffer W16 { float16_t w16[]; };
layout(set = 0, binding = 7) readonly buffer Ls { uint ls[]; };
layout(set = 0, binding = 8) buffer LsFlags { uint lsflags[]; };
";

/// The start of the step kernels' `main`: invocation, workgroup, subgroup and lane; the
/// step's sampling hash; the dynamic loss scale (plus the injected poison); the overflow
/// flag and the running max of |v|'s bits (`f16_check`).
pub(super) const STEP_PROLOGUE: &str = "    uint lid = gl_LocalInvocationIndex;
    uint wid = gl_WorkGroupID.x;
    uint sgid = lid / 32u;
    uint lane = lid % 32u;
    uint step_h = nsh_pcg_hash(st.step ^ st.seed_h);
    float lsc = uintBitsToFloat(ls[(st.step & 1u) * 4u]) + st.poison;
    uint lsf = 0u;
    uint lsm = 0u;
";

pub(super) const ACC: &str = "coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>";
pub(super) const ACC16: &str =
    "coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>";
pub(super) const MA: &str = "coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>";
pub(super) const MB: &str = "coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>";
pub(super) const ROW: &str = "gl_CooperativeMatrixLayoutRowMajor";
pub(super) const COL: &str = "gl_CooperativeMatrixLayoutColumnMajor";
const BAR: &str = "    memoryBarrierShared(); barrier();\n";

/// The f16 range check of `v` (dynamic loss scaling) in the invocation's flags: the
/// largest |v| as bits (`lsm`; for non-negative floats the bits order as the values, and
/// ∞ and NaN order above every finite value, so one comparison at the end says whether
/// some |v| exceeded f16's largest value or was not finite: the same flag as
/// `nsh_ls_over(v, 65504.0)` per value, in two instructions instead of five;
/// `NSHADE_GPU_OFF=lsmax` keeps the check per value, for measurements).
fn f16_check(v: &str, off: &str) -> String {
    if exp_has(off, "lsmax") {
        format!("lsf |= nsh_ls_over({v}, 65504.0);")
    } else {
        format!("lsm = max(lsm, floatBitsToUint({v}) & 0x7fffffffu);")
    }
}

/// The tile `hh` of the tile loop's slot `j` kept in registers `{name}_{j}` (one of
/// `slots`), as statements.
fn keep_slot(name: &str, slots: usize) -> String {
    (0..slots)
        .map(|j| format!(" if (j == {j}u) {{ {name}_{j} = hh; }}"))
        .collect()
}

/// An f16 accumulator `var` declared as the register of slot `j` that [`keep_slot`] kept
/// under `name`.
fn pick_slot(var: &str, name: &str, slots: usize) -> String {
    let mut y = format!("{ACC16} {var} = {name}_0;");
    for j in 1..slots {
        let _ = write!(y, " if (j == {j}u) {{ {var} = {name}_{j}; }}");
    }
    y
}

/// The input gradient's epilogue on the accumulator `c` of a tile (lines at 8 spaces):
/// times the derivative of the layer `below` (none under layer 0: a grid's output
/// gradient, only range-checked) from its f16 output `y`, declared by `yh` (statements
/// that declare `yh`); on f16 elements where `d16`; with the dynamic loss scale's range
/// checks. Nothing for the `noepi` measurement (`exp`).
fn dx_epilogue(
    yh: &str,
    below: Option<Activation>,
    d16: bool,
    off: &str,
    exp: &str,
    packed: bool,
) -> String {
    if below.is_none() {
        // the table accumulators' range bounds every contribution w·dy (w ≤ 1); packed
        // lanes check their sums after the step, so only f16's here
        return format!(
            "        for (int e = 0; e < c.length(); e++) {{ lsf |= nsh_ls_over(c[e], {}); }}\n",
            lit(if packed { 65504.0 } else { FIXED_RANGE })
        );
    }
    if exp_has(exp, "noepi") {
        return String::new();
    }
    if d16 {
        // on f16 elements: y (the layer below's f16 output, the same matrix type, so the
        // same element order) picks v or v·slope; the range check on pairs of f16 bits
        // (|h| ≥ 0x7c00, ∞ or NaN, carries into the pair's top bit: `lsh`)
        let d = match below {
            Some(Activation::Relu) => "(y > float16_t(0.0) ? v : v * float16_t(0.0))".into(),
            Some(Activation::LeakyRelu { slope }) => {
                format!("(y > float16_t(0.0) ? v : v * float16_t({}))", lit(slope))
            }
            _ => "v".to_string(),
        };
        format!(
            "        {yh}
        for (int e = 0; e < c.length(); e++) {{ float16_t v = c[e]; float16_t y = yh[e]; c[e] = {d}; }}
        for (int e = 0; e + 1 < c.length(); e += 2) {{ lsh |= (packFloat2x16(f16vec2(c[e], c[e + 1])) & 0x7fff7fffu) + 0x04000400u; }}
        if ((c.length() & 1) == 1) {{ lsh |= (packFloat2x16(f16vec2(c[c.length() - 1], float16_t(0.0))) & 0x7fff7fffu) + 0x04000400u; }}\n"
        )
    } else {
        format!(
            "        {yh} {ACC} yf = {ACC}(yh);
        for (int e = 0; e < c.length(); e++) {{ float v = c[e]; float y = yf[e]; float d = {d}; {chk} c[e] = d; }}\n",
            d = input_gradient(below, off),
            chk = f16_check("d", off),
        )
    }
}

/// The 16×16 f32 tiles of workgroup memory free after the chunk loop (`sh`, `zc` and
/// `bs`, as array and offset): the merged output layer's dW sums go through them.
fn scratch_tiles(lay: &Layout) -> Vec<(&'static str, usize)> {
    let mut t = Vec::new();
    for (arr, len) in [("sh", lay.sh), ("zc", lay.zc), ("bs", lay.bs)] {
        for j in 0..len / 256 {
            t.push((arr, j * 256));
        }
    }
    t
}

/// Marks a GLSL step kernel whose output layer runs in one phase
/// ([`GlslLaunch::merged_output`]).
pub const MERGED_OUTPUT_MARK: &str = "// the output layer in one phase";

/// The extension a GLSL step kernel with its folds through subgroup shuffles enables
/// ([`GlslLaunch::shuffle_folds`]); no other form of the kernel uses it.
pub const SHUFFLE_FOLDS_EXT: &str =
    "#extension GL_KHR_shader_subgroup_shuffle_relative : require\n";

/// Whether [`glsl_step_kernel`] merges the output layer's phases for this launch (with
/// [`GlslLaunch::merged_output`] on; elsewhere it writes them apart).
pub fn merged_output_fits(
    net: &Network,
    loss: Loss,
    data: DataKind,
    batch: u32,
    launch: &GlslLaunch,
) -> bool {
    let launch = GlslLaunch {
        merged_output: true,
        ..launch.clone()
    };
    glsl_step_kernel(net, loss, data, batch, launch).is_some_and(|k| k.contains(MERGED_OUTPUT_MARK))
}

/// How a GLSL step kernel runs.
#[derive(Clone, Debug)]
pub struct GlslLaunch {
    /// Invocations, samples per chunk and the rows' skew (from [`glsl_samples`]).
    pub shape: GlslShape,
    /// Chunks per workgroup.
    pub chunks: u32,
    /// Floats of partial sums per workgroup.
    pub partial_len: usize,
    /// Grid table gradients as one 64-bit atomic each (the device has 64-bit integer
    /// atomics), else as carry-propagating pairs of 32-bit atomics (`grid.rs`).
    pub atomic64: bool,
    /// Grid table gradients in packed lanes ([`Packing`]; needs `atomic64` and a grid
    /// of an even number of features): `partial_len` then includes the grid outputs'
    /// |dy| sums after the dense partials.
    pub packed: bool,
    /// The hidden layers' products, and the input gradients under them, accumulate in
    /// f16 with their activations and derivatives on f16 elements, as tiny-cuda-nn's
    /// fully fused MLP (and the biases they start from: an f16 copy); the output layer,
    /// the loss and the weight gradients stay f32. Refused where [`acc16_fits`] does not
    /// hold.
    pub acc16: bool,
    /// Layers whose weight gradients the kernel leaves to the dW kernel
    /// ([`glsl_dw_kernel`](super::glsl_dw_kernel)): it stores their X and dz tiles into
    /// bindings 9 and 10 instead ([`DwSplit`]).
    pub split: Option<DwSplit>,
    /// The next chunk's samples are drawn in the output layer's backward phase and
    /// encoded in layer 1's, into a second X_0 buffer, instead of in two phases of their
    /// own at the start of each chunk: two workgroup barriers fewer a chunk, the same
    /// values. Refused where [`ahead_fits`] does not hold.
    pub ahead: bool,
    /// Which phases write a subgroup's tiles side by side ([`Interleave`]).
    pub interleave: Interleave,
    /// The dW partials are stored in the last chunk, each layer's right after its last
    /// dW products, instead of after the chunk loop ([`early_stores`]).
    pub early: bool,
    /// The output layer's forward, loss, weight gradient and input gradient in one phase
    /// (NVIDIA's conversions turn dy into the A and B matrices in registers), where
    /// [`merged_output_fits`] holds: one workgroup barrier fewer a chunk (two where one
    /// subgroup holds a sample block's every row). Each subgroup then sums its own sample
    /// block's dW tiles of that layer, and the blocks' sums are added in block order
    /// after the chunk loop: a fixed order, so runs stay bit-reproducible (other bits
    /// than the unmerged phases'). Needs a device with the conversions.
    pub merged_output: bool,
    /// The bias and loss folds after the chunk loop through subgroup shuffles instead of
    /// `zc` and two workgroup barriers each: a row's invocations are neighbouring lanes,
    /// and its first lane adds the others' values in lane order, the same sums in the same
    /// order ([`fold_rows`]). The trainer's default where the device has subgroup
    /// operations (the GLSL kernel's devices have 32-lane subgroups); on an H100 it
    /// measured 1.00-1.02x for seed #3 and D, the same for B (`NSHADE_GPU_SHFOLD=0`: off).
    pub shuffle_folds: bool,
}

/// Phases whose tiles (when a subgroup has more than one) are written side by side:
/// every tile's products first, k step by k step with each step's tiles loaded before
/// its products, then each tile's epilogue, instead of a loop over the tiles. The loop
/// stores a tile into workgroup memory before the next tile's loads, which the compiler
/// cannot move across it (the same array), so the subgroup's product chains ran one
/// after the other. The products and their order are the same either way: the same
/// bits. On an H100 the forward's side by side trained seed #3 1.02–1.06x, B 1.02–1.04x,
/// C and D 1.00x as fast; the input gradients' as well, B 0.99x, D 1.01x (the default
/// leaves them in the loop). In `examples/coopmat_probe.rs` two tiles a subgroup side
/// by side ran 1.02–1.03x the loop's rate, four 1.17–1.26x, eight 1.6x
/// (docs/PERFORMANCE.md, twenty-sixth session).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interleave {
    /// The hidden layers' forward phases.
    pub forward: bool,
    /// The input gradients' phases.
    pub input_gradients: bool,
}

impl Interleave {
    /// Every phase in a loop over its tiles.
    pub const NONE: Interleave = Interleave {
        forward: false,
        input_gradients: false,
    };
    /// Every phase of both kinds side by side.
    pub const ALL: Interleave = Interleave {
        forward: true,
        input_gradients: true,
    };

    /// The default (the forward's phases side by side), or as `NSHADE_GPU_INTERLEAVE`
    /// asks: `0` none, `1` all (for measurements).
    pub fn from_env() -> Interleave {
        match std::env::var("NSHADE_GPU_INTERLEAVE").as_deref() {
            Ok("0") => Interleave::NONE,
            Ok("1") => Interleave::ALL,
            _ => Interleave::default(),
        }
    }
}

impl Default for Interleave {
    fn default() -> Interleave {
        Interleave {
            forward: true,
            input_gradients: false,
        }
    }
}

/// The GLSL step kernel for `net` (see [`glsl_fits`]) trained with `loss` on a texture,
/// in `shape` (from [`glsl_samples`]), `chunks` per workgroup,
/// `partial_len` floats of partial sums per workgroup, dynamic loss scaling on (see
/// [`GlslLaunch`]). `None` when the network or data is not of the kernel's family.
pub fn glsl_step_kernel(
    net: &Network,
    loss: Loss,
    data: DataKind,
    batch: u32,
    launch: GlslLaunch,
) -> Option<String> {
    let GlslLaunch {
        shape:
            GlslShape {
                threads,
                samples,
                skew,
                compact,
                inplace,
                ..
            },
        chunks,
        partial_len,
        atomic64,
        packed,
        split,
        acc16,
        ahead,
        interleave,
        early,
        merged_output,
        shuffle_folds,
    } = launch;
    let shp = shape(net)?;
    // the sampling takes one invocation per sample, the bias sums one per row
    if !threads_ok(threads as usize)
        || samples > threads
        || shp.layers.iter().any(|l| l.out_dims > threads as usize)
    {
        return None;
    }
    let DataKind::Texture { width, height } = data else {
        return None;
    };
    let pad = Pad::of(net);
    let od = net.out_dims;
    let s = samples as usize;
    let outreg = out_registers(threads as usize);
    if (acc16 && !acc16_fits(net)) || (ahead && !ahead_fits(net)) {
        return None;
    }
    // the compact layout: its split layers (it needs a split, and leaves no room for a
    // second X_0)
    let no_split = vec![false; shp.layers.len()];
    let compact = match (compact, &split) {
        (false, _) => None,
        _ if ahead || matches!(shp.enc, Enc::Grid(_)) => return None,
        (true, Some(sp)) => Some(&sp.layers[..]),
        (true, None) => Some(&no_split[..]),
    };
    // the layers whose backward stores dz_{i−1} in place, a barrier after its last read
    // of X_i (the compact layout's `inplace`)
    let inpl = match compact {
        Some(sp) => inplace_layers(sp, inplace as usize),
        None if inplace == 0 => no_split.clone(),
        None => return None,
    };
    let lay = layout(
        &pad,
        s,
        skew as usize,
        &mask_layers(net, &pad, outreg),
        outreg,
        threads as usize,
        acc16,
        ahead,
        compact.map(|sp| (sp, inplace as usize)),
    );
    let wg = threads as usize;
    let nsg = wg / 32;
    let st_n = s / 16;
    let sx = lay.sx;
    let r = lay.r;
    let n_l = shp.layers.len();
    let level = hoist_level();
    let exp = std::env::var("NSHADE_GPU_EXP").unwrap_or_default();
    // (timing only: a kernel without the backward has no phase to sample in)
    let ahead = ahead && !exp_has(&exp, "fwd");
    // (a kernel without the backward stores its dW tiles, zeros, after the loop)
    let early = early && !exp_has(&exp, "fwd");
    // forms of the epilogues turned off, for measurements (comma-separated: `lsmax`,
    // `lossbr`, `leaky`, `fswitch`, the same values either way; `dbmma`, the bias sums;
    // `dbcont`, their contiguous samples, in the order before)
    let off = std::env::var("NSHADE_GPU_OFF").unwrap_or_default();
    // the bias row sums over contiguous samples per invocation ([`row_sums`]): on an H100
    // 1.01-1.02x for seed #3, up to 1.02x for B, 1.00-1.01x for the hash grid's and D's
    // (three rounds each) against every invocation's samples nb apart
    let dbcont = !exp_has(&off, "dbcont");
    // the output layer in one phase (`merged_output`): where its output is one row block
    // of its own (no split, in the compact layout, the epilogue in registers; its input
    // gradient in place, or into a region the phase does not read), the subgroups divide into the sample blocks (`mp` a block) and the
    // input row blocks among a block's subgroups, the dz region is not written by the next
    // phase (which sums its rows) and a scratch tile of f32 workgroup memory exists for
    // the dW sums after the loop
    let last = n_l - 1;
    let mp = nsg / st_n.max(1);
    let scratch = scratch_tiles(&lay);
    let merge = merged_output
        && compact.is_some()
        && outreg
        && !ahead
        && !exp_has(&exp, "fwd")
        && !matches!(shp.enc, Enc::Grid(_))
        && wg != 64
        && n_l >= 2
        && pad.layers[last].out_p == 16
        && (inpl[last]
            || (lay.gofs[last - 1] != lay.xo[last] && lay.gofs[last - 1] != lay.gofs[last]))
        && !split.as_ref().is_some_and(|sp| sp.layers[last])
        && nsg.is_multiple_of(st_n)
        && (pad.layers[last].in_p / 16).is_multiple_of(mp)
        && (n_l < 3 || lay.gofs[n_l - 3] != lay.gofs[last])
        && !scratch.is_empty();
    // the row blocks of the output layer's input each of its subgroups takes
    let rpb = if merge {
        pad.layers[last].in_p / 16 / mp
    } else {
        0
    };
    // f16 dW tiles for layers wider than 64, as the WGSL kernel (`NSHADE_GPU_DW16`)
    let dw16 = std::env::var("NSHADE_GPU_DW16").ok();
    let half: Vec<bool> = pad
        .layers
        .iter()
        .map(|l| match dw16.as_deref() {
            Some("0") => false,
            Some("2") => true,
            _ => l.out_p > 64 || l.in_p > 64,
        })
        .collect();
    let is_split = |i: usize| split.as_ref().is_some_and(|sp| sp.layers[i]);
    let mut k = String::from(HEAD);
    if shuffle_folds {
        k.push_str(SHUFFLE_FOLDS_EXT);
    }
    if merge {
        k.push_str("#extension GL_NV_cooperative_matrix2 : require\n");
    }
    let Interleave {
        forward: interleave,
        input_gradients: interleave_x,
    } = interleave;
    let grid = match shp.enc {
        Enc::Grid(g) => Some(g),
        _ => None,
    };
    if grid.is_some() && atomic64 {
        k.push_str(
            "#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n#extension GL_EXT_shader_atomic_int64 : require\n",
        );
    }
    let pack = packed
        .then(|| Packing::of(net, Pad::of(net).partial_len(net.dense_count)))
        .flatten();
    if packed && (pack.is_none() || !atomic64) {
        return None;
    }
    if let Some(g) = grid {
        k.push_str(&gacc_decls(net.dense_count, atomic64, &exp));
        if let Some(pk) = &pack {
            k.push_str(&gacc_packed_decls(pk));
        }
        let _ = writeln!(k, "const uint GRID_LEVELS = {}u;", g.levels.len());
    }
    let _ = write!(
        k,
        "layout(local_size_x = {wg}) in;
{STEP_BINDINGS}{gxz}const uint S = {s}u;
const uint R = {r}u;
const uint SX = {sx}u;
const uint WG = {wg}u;
const uint NSG = {nsg}u;
const uint CHUNKS = {chunks}u;
const uint BATCH = {batch}u;
const uint P = {partial_len}u;
shared float sh[{sh}];
shared float16_t xh[{xh}];
{gh}shared float zc[{zc}];
shared float bs[{bs}];
{bh}shared uint lsbad;
{FUNCS}
void main() {{
{STEP_PROLOGUE}    uint lsh = 0u;
    float loss_acc = 0.0;
",
        sh = lay.sh,
        xh = lay.xh.max(1),
        gh = if lay.gh > 0 {
            format!("shared float16_t gh[{}];\n", lay.gh)
        } else {
            String::new()
        },
        zc = lay.zc,
        bs = lay.bs,
        bh = if acc16 {
            format!("shared float16_t bh[{}];\n", lay.bh)
        } else {
            String::new()
        },
        gxz = match &split {
            Some(_) =>
                "layout(set = 0, binding = 9) writeonly buffer GX { float16_t gx[]; };
layout(set = 0, binding = 10) writeonly buffer GZ { float16_t gz[]; };
",
            None => "",
        },
    );
    if exp_has(&exp, "empty") {
        // timing only: the kernel's launch with its resources and nothing done
        k.push_str("    if (st.step != 0xffffffffu) { return; }\n");
    }
    // texels of chunk 0, loaded one chunk ahead from then on
    let (w, h) = (width, height);
    let fetch = |k: &mut String, idx: &str| {
        let _ = writeln!(
            k,
            "    if (lid < S) {{
        uint h = nsh_pcg_hash(({idx}) ^ step_h);
        pu = nsh_unit(h); pv = nsh_unit(nsh_pcg_hash(h));
{}",
            texel_corners("pu", "pv", w, h).trim_end()
        );
        if exp_has(&exp, "nosample") {
            // timing only: no texel loads
            for c in 0..4 * od {
                let _ = writeln!(
                    k,
                    "        pt[{c}] = 0.25 * float({c} & 3) + float(x0 & y1 & 1u);"
                );
            }
        }
        for c in (0..od).filter(|_| !exp_has(&exp, "nosample")) {
            let _ = writeln!(
                k,
                "        pt[{a}] = data[(y0 * {w}u + x0) * {od}u + {c}u]; pt[{b}] = data[(y0 * {w}u + x1) * {od}u + {c}u];
        pt[{cc}] = data[(y1 * {w}u + x0) * {od}u + {c}u]; pt[{d}] = data[(y1 * {w}u + x1) * {od}u + {c}u];",
                a = 4 * c,
                b = 4 * c + 1,
                cc = 4 * c + 2,
                d = 4 * c + 3
            );
        }
        k.push_str("    }\n");
    };
    let _ = writeln!(
        k,
        "    float pu = 0.0; float pv = 0.0; float pt[{}];",
        4 * od
    );
    fetch(&mut k, "wid * CHUNKS * S + lid");
    k.push_str("    if (lid == 0u) { lsbad = 0u; }\n");
    // X_0's padding rows (zero once; the sampling or freq phase writes the rest), the
    // biases (f32, zero in padding rows) for the accumulators' start
    let p0 = pad.layers[0];
    let x0_rows = shp.x0_rows();
    for x0 in [lay.xo[0], lay.x0alt]
        .into_iter()
        .take(1 + usize::from(ahead))
    {
        let _ = writeln!(
            k,
            "    for (uint e = lid; e < {n}u; e += WG) {{ xh[{o}u + e] = float16_t(0.0); }}",
            n = (p0.in_p - x0_rows) * sx,
            o = x0 + x0_rows * sx
        );
    }
    let mut boffs = Vec::new();
    let mut boff = 0;
    for (l, mo) in pad.layers.iter().zip(&lay.mask_off) {
        boffs.push(boff);
        let mask = match mo {
            Some(mo) => format!(" bs[{mo}u + e] = e < {}u ? 1.0 : 0.0;", l.out_dims),
            None => String::new(),
        };
        let _ = writeln!(
            k,
            "    for (uint e = lid; e < {op}u; e += WG) {{ {copy}{mask}{h} }}",
            copy = bias_copy(boff, l),
            h = if acc16 {
                format!(" bh[{boff}u + e] = float16_t(bs[{boff}u + e]);")
            } else {
                String::new()
            },
            op = l.out_p,
        );
        boff += l.out_p;
    }
    if outreg {
        // the targets' padding (masked, but never uninitialised)
        let _ = writeln!(
            k,
            "    for (uint e = lid; e < {n}u; e += WG) {{ sh[{o}u + e] = 0.0; }}",
            n = lay.sh - lay.tg,
            o = lay.tg
        );
    }
    k.push_str(BAR);
    // dW accumulators, persistent across chunks: slot j of layer i holds tile j·NSG + sgid
    // the split layers' tensors are stored from the epilogues that produce them (X_{i+1}
    // in the forward, dz in the loss and input-gradient epilogues) where there is one;
    // `NSHADE_GPU_DWSTORE=copy` copies every tile from workgroup memory in the backward
    // instead (for measurements)
    let direct = direct_stores();
    // a store of the f16 tile `hh` (row block `rb`, sample block `sb` of the chunk) into
    // layer i's X (`x`) or dz, or nothing where layer i does not split directly
    let tee = |i: usize, x: bool, rb: &str| -> String {
        match split.as_ref().filter(|sp| sp.layers[i] && direct) {
            Some(sp) => format!(" coopMatStore(hh, {}, {ROW});", sp.tile(&pad, i, x, rb)),
            None => String::new(),
        }
    };
    // the copy of tile t − `base` of f16 rows in workgroup memory (`src`: array and
    // offset) into `dst` (a [`DwSplit::tile`] of row block `rb`)
    let copy = |base: usize, src: &str, dst: &str| {
        format!(
            "uint u = t - {base}u; uint rb = u / {st_n}u; uint sb = u % {st_n}u; {ACC16} h;
            coopMatLoad(h, {src} + rb * 16u * SX + sb * 16u, SX, {ROW});
            coopMatStore(h, {dst}, {ROW});"
        )
    };
    let mut slots: Vec<Vec<String>> = Vec::new();
    for (i, l) in pad.layers.iter().enumerate() {
        let nt = if is_split(i) {
            0
        } else {
            (l.out_p / 16) * (l.in_p / 16)
        };
        let ty = if half[i] { ACC16 } else { ACC };
        let mut names = Vec::new();
        // (the merged output layer: its subgroup's row blocks of its own sample block)
        let count = if merge && i == last {
            rpb
        } else {
            nt.div_ceil(nsg)
        };
        for j in 0..count {
            let name = format!("dw{i}_{j}");
            let _ = writeln!(k, "    {ty} {name} = {ty}(0.0);");
            names.push(name);
        }
        slots.push(names);
    }
    // bias gradients on the tensor cores (workgroups of 64, where registers are to spare:
    // seed #3 holds 190 of 256): db += dz·1 into one f32 accumulator per layer, in the
    // slot of tile (ot, ot mod it_n) — one row block per subgroup where those tiles fall
    // to distinct subgroups — instead of per-invocation sums of f16 loads (three
    // instructions a value); `NSHADE_GPU_OFF=dbmma` keeps the sums
    let db_owned = |i: usize| {
        let l = pad.layers[i];
        let (ob, it_n) = (l.out_p / 16, l.in_p / 16);
        let owners: Vec<usize> = (0..ob).map(|ot| (ot * it_n + ot % it_n) % nsg).collect();
        let distinct = owners
            .iter()
            .enumerate()
            .all(|(a, x)| !owners[..a].contains(x));
        distinct && !slots[i].is_empty()
    };
    let dbmma: Vec<bool> = (0..n_l)
        .map(|i| {
            wg == 64
                && lay.zc >= 256
                && !exp_has(&off, "dbmma")
                && !exp_has(&exp, "nodw")
                && !exp_has(&exp, "fwd")
                && db_owned(i)
        })
        .collect();
    if dbmma.contains(&true) {
        let _ = writeln!(k, "    {MB} ones = {MB}(float16_t(1.0));");
    }
    for i in (0..n_l).filter(|&i| dbmma[i]) {
        let _ = writeln!(k, "    {ACC} db{i} = {ACC}(0.0);");
    }
    // after a dW product with dz's tile `a` (row block `ot`, column block `it`)
    let db_mul = |i: usize| -> String {
        if dbmma[i] {
            let it_n = pad.layers[i].in_p / 16;
            format!(" if (ot % {it_n}u == it) {{ db{i} = coopMatMulAdd(a, ones, db{i}); }}")
        } else {
            String::new()
        }
    };
    // hoisted weight tiles: forward W blocks and input-gradient Wᵀ blocks of phases with
    // at most NSG tiles (subgroup sgid always takes tile min(sgid, nt − 1)), at most 40,
    // or 64 where layers split (their dW accumulators are gone: freq(8) | mlp(128x4)
    // 1.22-1.33x with 64, the same with 96 or 128 on an H100; `NSHADE_GPU_HOLD`, for
    // measurements)
    let hold = std::env::var("NSHADE_GPU_HOLD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if split.is_some() { 64 } else { 40usize });
    let mut held = 0usize;
    // the tiles of a phase dealt by row block in the compact layout (in the other shapes,
    // where a phase has at most one tile per subgroup, that was slower on an H100: seed #3
    // in two workgroups of 64 invocations and 32 samples 0.79-0.95x the default, B
    // 0.97-0.98x, B in workgroups of 128 0.54-0.65x)
    let by_rows = compact.is_some();
    let mut hoist =
        |k: &mut String, name: &str, nt: usize, kn: usize, at: &dyn Fn(usize, &str) -> String| {
            let rb = nt / st_n;
            if (nt > nsg && !(by_rows && nsg.is_multiple_of(rb))) || held + kn > hold {
                return None;
            }
            held += kn;
            let blk = if by_rows {
                format!("(min(sgid, {}u) % {rb}u)", nt - 1)
            } else {
                format!("(min(sgid, {}u) / {st_n}u)", nt - 1)
            };
            Some(
                (0..kn)
                    .map(|kk| {
                        let w = format!("{name}_{kk}");
                        let _ = writeln!(k, "    {MA} {w}; coopMatLoad({w}, {});", at(kk, &blk));
                        w
                    })
                    .collect::<Vec<_>>(),
            )
        };
    let mut fwd_w: Vec<Option<Vec<String>>> = Vec::new();
    for (i, l) in pad.layers.iter().enumerate() {
        let (p, ip) = (l.padded, l.in_p);
        fwd_w.push(if level >= 1 {
            hoist(
                &mut k,
                &format!("wf{i}"),
                (l.out_p / 16) * st_n,
                ip / 16,
                &|kk, blk| {
                    format!(
                        "w16, {p}u + {blk} * 16u * {ip}u + {}u, {ip}u, {ROW}",
                        kk * 16
                    )
                },
            )
        } else {
            None
        });
    }
    let mut bwd_w: Vec<Option<Vec<String>>> = Vec::new();
    for (i, l) in pad.layers.iter().enumerate() {
        let (p, ip) = (l.padded, l.in_p);
        bwd_w.push(
            if (i > 0 || grid.is_some()) && level >= 2 && !(merge && i == last) {
                hoist(
                    &mut k,
                    &format!("wb{i}"),
                    (ip / 16) * st_n,
                    l.out_p / 16,
                    &|kk, blk| format!("w16, {p}u + {}u + {blk} * 16u, {ip}u, {COL}", kk * 16 * ip),
                )
            } else {
                None
            },
        );
    }
    // the merged output layer's Wᵀ tiles, one for each of the subgroup's row blocks
    // `h·rpb + r` (h = sgid / ST_N, the subgroup's place among its sample block's)
    if merge {
        let l = pad.layers[last];
        for r in 0..rpb {
            let _ = writeln!(
                k,
                "    {MA} wm{r}; coopMatLoad(wm{r}, w16, {p}u + (sgid / {st_n}u * {rpb}u + {r}u) * 16u, {ip}u, {COL});",
                p = l.padded,
                ip = l.in_p
            );
        }
    }
    // the compact layout: the split layers' inputs X_i (i ≥ 1) as their forward tiles,
    // kept in registers for the relu masks of their backward (a tile's subgroup and slot
    // j are the same in both phases), `xm{i}_{j}`
    let kept = |i: usize| i > 0 && compact.is_some_and(|sp| sp[i]);
    let kept_slots = |i: usize| ((pad.layers[i].in_p / 16) * st_n).div_ceil(nsg);
    for i in (0..n_l).filter(|&i| kept(i)) {
        for j in 0..kept_slots(i) {
            let _ = writeln!(k, "    {ACC16} xm{i}_{j} = {ACC16}(0.0);");
        }
    }
    for a in 0..n_l {
        let _ = writeln!(k, "    float acc{a} = 0.0;");
    }
    // packed lanes: this invocation's part of the grid outputs' Σ|dy|
    k.push_str("    float acca = 0.0;\n");
    // rows of `sh`: u, v at 0 and 1, then targets at 2.., outputs after them, or with the
    // output epilogue in registers the validity at 2 and the targets sample by sample
    let (tgt, outr) = (2, 2 + od);
    let target_at = |c: usize| {
        if outreg {
            format!("{}u + e * {}u + {c}u", lay.tg, lay.ts)
        } else {
            format!("{}u * R + e", tgt + c)
        }
    };
    // the sampling of the chunk from sample `first`: the prefetched texels interpolated
    // (raw inputs into X_0 at `x0`)
    let sample = |first: &str, x0: &str| -> String {
        let mut b = format!(
            "    if (lid < S) {{
        uint e = lid;
        bool valid = {first} + e < BATCH;
        float u = pu; float v = pv;
        float fx = u * {w}.0 - 0.5; float fy = v * {h}.0 - 0.5;
        float tx = fx - floor(fx); float ty = fy - floor(fy);
"
        );
        for c in 0..od {
            let _ = writeln!(
                b,
                "        {{ float top = pt[{a}] + (pt[{bb}] - pt[{a}]) * tx; float bottom = pt[{cc}] + (pt[{d}] - pt[{cc}]) * tx;
          sh[{at}] = top + (bottom - top) * ty; }}",
                a = 4 * c,
                bb = 4 * c + 1,
                cc = 4 * c + 2,
                d = 4 * c + 3,
                at = target_at(c)
            );
        }
        b.push_str("        float uu = valid ? u : 0.0; float vv = valid ? v : 0.0;\n");
        if outreg {
            b.push_str("        sh[2u * R + e] = valid ? 1.0 : 0.0;\n");
        }
        if !matches!(shp.enc, Enc::Raw) {
            b.push_str("        sh[e] = uu; sh[R + e] = vv;\n");
        } else {
            let _ = writeln!(
                b,
                "        xh[{x0} + e] = float16_t(uu); xh[{x0} + SX + e] = float16_t(vv);"
            );
        }
        b.push_str("    }\n");
        b
    };
    // freq: one item per (input, octave, sample); sin at i·K + k, cos at D·K + i·K + k, into
    // X_0 at `x0`. The octave's factor 2^o·π is computed, not picked by a switch (which
    // diverges where a subgroup's items span two octaves, as with 16-sample chunks): π·2^o
    // is exact, the shared emitter's literal (`syntax::frequency_scale`), so the same
    // values (`NSHADE_GPU_OFF=fswitch`: the switch, for measurements)
    let freq = |x0: &str| -> Option<String> {
        let Enc::Freq(ko) = shp.enc else {
            return None;
        };
        let mut cases = String::new();
        // timing only: no sin / cos
        let nofreq = exp_has(&exp, "nofreq");
        let body = if !nofreq && !exp_has(&off, "fswitch") {
            freq_sin_cos(ko)
        } else {
            let default = if nofreq {
                "vs = xv * float(o); vc = xv + float(o); break;"
            } else {
                "break;"
            };
            for o in (0..ko).filter(|_| !nofreq) {
                let _ = writeln!(
                    cases,
                    "            case {o}: vs = {}; vc = {}; break;",
                    syntax::frequency_sin("xv", o),
                    syntax::frequency_cos("xv", o)
                );
            }
            format!(
                "float vs = 0.0; float vc = 0.0;
        switch (o) {{
{cases}            default: {default}
        }}"
            )
        };
        Some(format!(
            "    for (uint e = lid; e < {n}u; e += WG) {{
        uint s = e % S; uint io = e / S; uint i = io / {ko}u; uint o = io % {ko}u;
        float xv = sh[i * R + s];
        {body}
        xh[{x0} + (i * {ko}u + o) * SX + s] = float16_t(vs); xh[{x0} + ({dk}u + i * {ko}u + o) * SX + s] = float16_t(vc);
    }}
",
            n = 2 * ko * s,
            dk = 2 * ko
        ))
    };
    let x0_first = format!("{}u", lay.xo[0]);
    // the chunk from `first`: its samples, the next chunk's texels fetched where `more`,
    // its encoding into X_0, each followed by a barrier
    let head = |k: &mut String, more: &str| {
        k.push_str(&sample("first", &x0_first));
        let _ = writeln!(k, "    if ({more}) {{");
        fetch(k, "first + S + lid");
        k.push_str("    }\n");
        k.push_str(BAR);
        if let Some(f) = freq(&x0_first) {
            k.push_str(&f);
            k.push_str(BAR);
        }
    };
    if ahead {
        // chunk 0's samples and encoding before the loop, chunk c + 1's in chunk c's
        // backward (below), X_0 alternating between two buffers: `x0c` this chunk's,
        // `x0n` the next one's
        k.push_str("    {\n    uint first = wid * CHUNKS * S;\n");
        head(&mut k, "1u < CHUNKS");
        k.push_str("    }\n");
    }
    // (where the chunk loop starts, for `NSHADE_GPU_EXP=nobar`)
    let loop_at = k.len();
    k.push_str(
        "    uint pbase = wid * P;\n    for (uint c = 0u; c < CHUNKS; c++) {\n    uint first = (wid * CHUNKS + c) * S;\n",
    );
    if ahead {
        let _ = writeln!(
            k,
            "    uint x0c = (c & 1u) == 0u ? {a}u : {b}u; uint x0n = {ab}u - x0c;",
            a = lay.xo[0],
            b = lay.x0alt,
            ab = lay.xo[0] + lay.x0alt
        );
    } else {
        head(&mut k, "c + 1u < CHUNKS");
    }
    if let Some(g) = grid {
        k.push_str(&grid_forward(g, lay.xo[0], s, wg));
        k.push_str(BAR);
    }
    // X_i's offset in `xh` plus `extra`, as an expression (X_0's alternates with `ahead`)
    let xoff = |i: usize, extra: usize| -> String {
        if ahead && i == 0 {
            format!("x0c + {extra}u")
        } else {
            format!("{}u", lay.xo[i] + extra)
        }
    };
    // forward
    // tile t of a phase: row block and sample block, sample blocks fastest
    // (the compact layout deals the tiles by row block: a subgroup's tiles of a phase then
    // share their weight tiles, held in registers where the row blocks divide NSG)
    // (names suffixed with `sfx`)
    let tile_map = |nt: usize, blk: &str, sfx: &str| {
        if by_rows {
            format!(
                "uint {blk}{sfx} = q{sfx} % {rb}u; uint sb{sfx} = q{sfx} / {rb}u;",
                rb = nt / st_n
            )
        } else {
            format!("uint {blk}{sfx} = q{sfx} / {st_n}u; uint sb{sfx} = q{sfx} % {st_n}u;")
        }
    };
    // the loop over a subgroup's tiles, or (`one`) the block of its tile j
    let tile_head_of = |k: &mut String, nt: usize, blk: &str, one: Option<usize>| {
        let open = match one {
            Some(j) => format!("{{ uint j = {j}u;"),
            None => format!("for (uint j = 0u; j < {}u; j++) {{", nt.div_ceil(nsg)),
        };
        let _ = writeln!(
            k,
            "    {open}
        uint t = j * NSG + sgid; uint q = min(t, {lt}u);
        {map}",
            lt = nt - 1,
            map = tile_map(nt, blk, "")
        );
    };
    let tile_head = |k: &mut String, nt: usize, blk: &str| tile_head_of(k, nt, blk, None);
    // a phase of `nt` tiles: the subgroup's tiles share their row block (the compact
    // layout's deal, row blocks dividing the subgroups, and every subgroup's tiles real:
    // none clamped to the last)
    let shared_rows =
        |nt: usize| by_rows && nsg.is_multiple_of(nt / st_n) && nt.is_multiple_of(nsg);
    // a phase of `nt` tiles side by side ([`Interleave`]): the phase's block opened, each
    // of the subgroup's tiles' indices (`t{j}`, `q{j}`, `{blk}{j}`, `sb{j}`) and its
    // accumulator (`init(j)`, declaring `c{j}`), then every tile's products; each tile's
    // epilogue follows in a block of its own ([`tile_head_of`]), then the phase's close
    let interleaved_phase = |k: &mut String,
                             nt: usize,
                             blk: &str,
                             kn: usize,
                             held: Option<&[String]>,
                             init: &dyn Fn(usize) -> String,
                             a_at: &dyn Fn(&str, usize) -> String,
                             b_at: &dyn Fn(&str, usize) -> String| {
        let nj = nt.div_ceil(nsg);
        k.push_str("    {\n");
        for j in 0..nj {
            let _ = writeln!(
                k,
                "    uint t{j} = {j}u * NSG + sgid; uint q{j} = min(t{j}, {lt}u); {map}\n    {init}",
                lt = nt - 1,
                map = tile_map(nt, blk, &j.to_string()),
                init = init(j)
            );
        }
        interleaved_products(
            k,
            nj,
            kn,
            shared_rows(nt),
            held,
            &|j, kk| a_at(&format!("{blk}{j}"), kk),
            &|j, kk| b_at(&format!("sb{j}"), kk),
        );
    };
    let scale = 1.0 / (batch as usize * od) as f32;
    'layers: for (i, l) in pad.layers.iter().enumerate() {
        let lin = &shp.layers[i];
        let nt = (l.out_p / 16) * st_n;
        // (f16 accumulators: hidden layers only; the output layer's loss stays f32)
        let h16 = acc16 && i + 1 < n_l;
        let (ty, arr) = if h16 { (ACC16, "bh") } else { (ACC, "bs") };
        let kn = l.in_p / 16;
        let a_at = |ot: &str, kk: usize| {
            format!(
                "w16, {p}u + {ot} * 16u * {ip}u + {k16}u, {ip}u, {ROW}",
                p = l.padded,
                ip = l.in_p,
                k16 = kk * 16
            )
        };
        let b_at =
            |sb: &str, kk: usize| format!("xh, {} + {sb} * 16u, SX, {ROW}", xoff(i, kk * 16 * sx));
        if merge && i == last {
            // the output layer in one phase: subgroup sgid takes sample block sb =
            // sgid % ST_N and, as the `mh`-th of its block's subgroups, its input row
            // blocks it = mh·rpb + r. Every subgroup of a block computes the block's
            // output tile (one of them adds the loss and stores dy for the bias sums of
            // the next phase); dy, converted into A and B matrices, gives the dW tiles of
            // its rows (summed over the subgroup's own sample block) and their input
            // gradients, stored at once where they go to a region the phase does not read;
            // in place into X_i by the subgroup alone where it holds the block's every row
            // (no other subgroup reads them), else kept in registers until a barrier (the
            // block's other subgroups read all of X_i's rows)
            let d16 = acc16;
            let cty = if d16 { ACC16 } else { ACC };
            let body = loss_branch(
                lin.act,
                loss,
                scale,
                ("rm[e] * vm[e] != 0.0", "c[e]", "tm[e]"),
                "        ",
            );
            let _ = writeln!(k, "    {MERGED_OUTPUT_MARK}");
            for r in 0..rpb {
                let _ = writeln!(k, "    {ACC16} dq{i}_{r};");
            }
            let _ = writeln!(
                k,
                "    {{
    uint sb = sgid % {st_n}u; uint mh = sgid / {st_n}u;
    {ACC} c; coopMatLoad(c, bs, {b}u, 0u, {COL});",
                b = boffs[i]
            );
            for kk in 0..kn {
                mul_add(
                    &mut k,
                    fwd_w[i].as_ref().map(|w| w[kk].as_str()),
                    &a_at("0u", kk),
                    &b_at("sb", kk),
                );
            }
            let _ = writeln!(
                k,
                "    {ACC} tm; coopMatLoad(tm, sh, {tg}u + sb * {tsb}u, {ts}u, {COL});
    {rm}
    {ACC} vm; coopMatLoad(vm, sh, 2u * R + sb * 16u, 0u, {ROW});
    float la = loss_acc;
    for (int e = 0; e < c.length(); e++) {{
        {body}
        {chk}
        c[e] = dyv;
    }}
    if (mh != 0u) {{ loss_acc = la; }}
    {ACC16} dy = {ACC16}(c);
    if (mh == 0u) {{ coopMatStore(dy, {ga}, {gt}u + sb * 16u, SX, {ROW}); }}
    {MA} dya = {MA}(dy); {MB} dyb = {MB}(dy);",
                rm = match lay.mask_off[i] {
                    Some(mo) => format!("{ACC} rm; coopMatLoad(rm, bs, {mo}u, 0u, {COL});"),
                    None => format!("{ACC} rm = {ACC}(1.0);"),
                },
                tg = lay.tg,
                ts = lay.ts,
                tsb = 16 * lay.ts,
                chk = f16_check("dyv", &off),
                ga = lay.ga,
                gt = lay.gofs[i],
            );
            let below = Some(shp.layers[i - 1].act);
            let x = lay.xo[i];
            for r in 0..rpb {
                let yh = format!(
                    "{ACC16} yh; coopMatLoad(yh, xh, {x}u + it * 16u * SX + sb * 16u, SX, {ROW});"
                );
                let _ = writeln!(
                    k,
                    "    uint it{r} = mh * {rpb}u + {r}u;
    {{ {MB} b; coopMatLoad(b, xh, {x}u + it{r} * 16u * SX + sb * 16u, SX, {COL}); dw{i}_{r} = coopMatMulAdd(dya, b, dw{i}_{r}); }}
    {{ uint it = it{r}; {cty} c = {cty}(0.0); c = coopMatMulAdd(wm{r}, dyb, c);
{epi}        dq{i}_{r} = {conv};
    }}",
                    epi = dx_epilogue(&yh, below, d16, &off, &exp, false),
                    conv = if d16 {
                        "c".to_string()
                    } else {
                        format!("{ACC16}(c)")
                    },
                );
            }
            // the stores in place (with the dW kernel's copy where layer i − 1 splits)
            let stores: String = (0..rpb)
                .map(|r| {
                    format!(
                        "    {{ uint it = it{r}; {ACC16} hh = dq{i}_{r}; coopMatStore(hh, {ga}, {nxt}u + it * 16u * SX + sb * 16u, SX, {ROW});{tz} }}\n",
                        ga = lay.ga,
                        nxt = lay.gofs[i - 1],
                        tz = tee(i - 1, false, "it"),
                    )
                })
                .collect();
            if !inpl[i] {
                // (a region no subgroup reads in this phase)
                k.push_str(&stores);
                k.push_str("    }\n");
            } else if mp == 1 {
                k.push_str("    subgroupMemoryBarrierShared(); subgroupBarrier();\n");
                k.push_str(&stores);
                k.push_str("    }\n");
            } else {
                k.push_str("    }\n");
                k.push_str(BAR);
                let _ = writeln!(
                    k,
                    "    {{\n    uint sb = sgid % {st_n}u; uint mh = sgid / {st_n}u;"
                );
                for r in 0..rpb {
                    let _ = writeln!(k, "    uint it{r} = mh * {rpb}u + {r}u;");
                }
                k.push_str(&stores);
                k.push_str("    }\n");
            }
            k.push_str(BAR);
            continue 'layers;
        }
        let nj = nt.div_ceil(nsg);
        let inter = interleave && nj > 1 && i + 1 < n_l;
        if inter {
            // every tile's bias and products first
            interleaved_phase(
                &mut k,
                nt,
                "ot",
                kn,
                fwd_w[i].as_deref(),
                &|j| {
                    format!(
                        "{ty} c{j}; coopMatLoad(c{j}, {arr}, {b}u + ot{j} * 16u, 0u, {COL});",
                        b = boffs[i]
                    )
                },
                &a_at,
                &b_at,
            );
        }
        for j in 0..if inter { nj } else { 1 } {
            if inter {
                tile_head_of(&mut k, nt, "ot", Some(j));
                let _ = writeln!(k, "        {ty} c = c{j};");
            } else {
                tile_head(&mut k, nt, "ot");
                let _ = writeln!(
                    k,
                    "        {ty} c; coopMatLoad(c, {arr}, {b}u + ot * 16u, 0u, {COL});",
                    b = boffs[i]
                );
                for kk in 0..kn {
                    mul_add(
                        &mut k,
                        fwd_w[i].as_ref().map(|w| w[kk].as_str()),
                        &a_at("ot", kk),
                        &b_at("sb", kk),
                    );
                }
            }
            if i + 1 < n_l {
                // hidden layer: activation in registers, padding rows to zero, f16 into X_{i+1}
                // (relu, leaky relu, tanh and none give 0 there already)
                if !exp_has(&exp, "noepi") {
                    let _ = if h16 {
                        writeln!(
                            k,
                            "        for (int e = 0; e < c.length(); e++) {{ float16_t zz = c[e]; c[e] = {}; }}",
                            act16(lin.act, "zz")
                        )
                    } else {
                        writeln!(
                            k,
                            "        for (int e = 0; e < c.length(); e++) {{ float zz = c[e]; c[e] = {}; }}",
                            act(lin.act, "zz")
                        )
                    };
                }
                if let Some(mo) = lay.mask_off[i] {
                    // the rows past out_dims (`needs_mask`): a column-major stride-0 load of a
                    // 0/1 row mask
                    let _ = writeln!(
                        k,
                        "        {{ {ACC} m; coopMatLoad(m, bs, {mo}u + ot * 16u, 0u, {COL}); for (int e = 0; e < c.length(); e++) {{ c[e] = c[e] * m[e]; }} }}"
                    );
                }
                let _ = writeln!(
                    k,
                    "        if (t < {nt}u) {{ {ACC16} hh = {conv}; coopMatStore(hh, xh, {x}u + ot * 16u * SX + sb * 16u, SX, {ROW});{tx}{keep} }}\n    }}",
                    conv = if h16 {
                        "c".to_string()
                    } else {
                        format!("{ACC16}(c)")
                    },
                    x = lay.xo[i + 1],
                    tx = tee(i + 1, true, "ot"),
                    keep = if kept(i + 1) {
                        keep_slot(&format!("xm{}", i + 1), kept_slots(i + 1))
                    } else {
                        String::new()
                    },
                );
                if inter && j + 1 == nj {
                    k.push_str("    }\n");
                }
                if j + 1 == if inter { nj } else { 1 } {
                    k.push_str(BAR);
                }
            } else {
                // output layer: through the subgroup's scratch tile, as the WGSL kernel; the
                // loss, dy (times the output activation's derivative, the scale) and dy's f16
                // copy into gh (zero in padding rows)
                let deriv = output_derivative(lin.act);
                let (a, lv, lg, sc) = (
                    act(lin.act, "zz"),
                    super::wgsl::loss_value(loss, "p", "tt"),
                    super::wgsl::loss_gradient(loss, "p", "tt"),
                    lit(scale),
                );
                if outreg {
                    // targets (rows padded), row mask × validity, as matrices of the tile; the
                    // loss and dy only for elements of real rows and samples, in a branch: a
                    // subgroup none of whose invocations has one (padding rows 8-15 of the
                    // tile, on NVIDIA's layout) skips it (`NSHADE_GPU_OFF=lossbr`: every
                    // element, selected)
                    let body = if exp_has(&off, "lossbr") {
                        format!(
                            "float zz = c[e]; float p = {a}; float tt = tm[e];
            bool valid = rm[e] * vm[e] != 0.0;
            loss_acc += valid ? {lv} : 0.0;
            float dyv = valid ? ({lg}) * {sc} * lsc{deriv} : 0.0;"
                        )
                    } else {
                        loss_branch(
                            lin.act,
                            loss,
                            scale,
                            ("rm[e] * vm[e] != 0.0", "c[e]", "tm[e]"),
                            "            ",
                        )
                    };
                    let _ = writeln!(
                    k,
                    "        {ACC} tm; coopMatLoad(tm, sh, {tg}u + ot * 16u + sb * {tsb}u, {ts}u, {COL});
        {rm}
        {ACC} vm; coopMatLoad(vm, sh, {vr}u * R + sb * 16u, 0u, {ROW});
        if (t < {nt}u) {{
        for (int e = 0; e < c.length(); e++) {{
            {body}
            {chk}
            c[e] = dyv;
        }}
        {ACC16} hh = {ACC16}(c); coopMatStore(hh, {ga}, {gt}u + ot * 16u * SX + sb * 16u, SX, {ROW});{tz}
        }}
    }}",
                    // (an output of 16k rows has no padding rows: every row real)
                    rm = match lay.mask_off[i] {
                        Some(mo) => format!(
                            "{ACC} rm; coopMatLoad(rm, bs, {mo}u + ot * 16u, 0u, {COL});"
                        ),
                        None => format!("{ACC} rm = {ACC}(1.0);"),
                    },
                    vr = 2,
                    tg = lay.tg,
                    ts = lay.ts,
                    tsb = 16 * lay.ts,
                    tz = tee(i, false, "ot"),
                    chk = f16_check("dyv", &off),
                    ga = lay.ga,
                    gt = lay.gofs[i],
                );
                    k.push_str(BAR);
                    continue 'layers;
                }
                let _ = writeln!(
                    k,
                    "        uint zs = min(sgid, {scr}u) * 256u;
        coopMatStore(c, zc, zs, 16u, {ROW});
        subgroupMemoryBarrierShared(); subgroupBarrier();
        if (t < {nt}u) {{
        for (uint u = 0u; u < 8u; u++) {{
            uint e = u * 32u + lane; uint o = ot * 16u + e / 16u; uint s = sb * 16u + e % 16u;
            float zz = zc[zs + e];
            if (o < {od}u) {{
                float p = {a}; sh[({outr}u + o) * R + s] = p;
                float tt = sh[({tgt}u + o) * R + s];
                bool valid = first + s < BATCH;
                loss_acc += valid ? {lv} : 0.0;
                float dyv = valid ? ({lg}) * {sc} * lsc{deriv} : 0.0;
                {chk}
                {ga}[{gt}u + o * SX + s] = float16_t(dyv);
            }} else {{
                {ga}[{gt}u + o * SX + s] = float16_t(0.0);
            }}
        }}
        }}
        subgroupMemoryBarrierShared(); subgroupBarrier();
    }}",
                    scr = nt.min(nsg) - 1,
                    chk = f16_check("dyv", &off),
                    ga = lay.ga,
                    gt = lay.gofs[i],
                );
                k.push_str(BAR);
            }
        }
    }
    // dW tiles into the partials (f16 tiles converted, checked against f16's largest):
    // after the chunk loop, or (`early`) in the last chunk right after the layer's last
    // dW products, so the stores drain while the backward of the layers below runs
    let store_dw = |i: usize| -> String {
        let mut k = String::new();
        let l = pad.layers[i];
        let it_n = l.in_p / 16;
        let nt = (l.out_p / 16) * it_n;
        for (j, slot) in slots[i].iter().enumerate() {
            let store = if half[i] {
                format!(
                    "{ACC} f = {ACC}({slot}); for (int e = 0; e < f.length(); e++) {{ lsf |= nsh_ls_over(f[e], 65503.0); }} coopMatStore(f, partial, off, {ip}u, {ROW});",
                    ip = l.in_p
                )
            } else {
                format!(
                    "coopMatStore({slot}, partial, off, {ip}u, {ROW});",
                    ip = l.in_p
                )
            };
            let _ = writeln!(
                k,
                "    {{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; uint it = t % {it_n}u; uint off = pbase + {p}u + ot * 16u * {ip}u + it * 16u; {store} }} }}",
                p = l.padded,
                ip = l.in_p
            );
        }
        k
    };
    // backward, from the last layer; `NSHADE_GPU_DWREUSE=0`: every dW slot loads its own
    // X tiles (for measurements)
    let dw_reuse = std::env::var("NSHADE_GPU_DWREUSE").map_or(true, |v| v != "0");
    if !exp_has(&exp, "fwd") {
        for i in (0..n_l).rev() {
            if merge && i == last {
                // (in the output layer's phase of the forward)
                continue;
            }
            if merge && i + 1 == last {
                // the merged output layer's bias sums, from the dy its phase stored
                let (rows, nb) = lay.accs[0];
                k.push_str(&row_sums("acc0", rows, nb, s, dbcont, &|e| {
                    format!("float({}[{}u + {e}])", lay.ga, lay.gofs[last])
                }));
            }
            let l = pad.layers[i];
            // dz_i at `cur` of `ga`, dz_{i-1} to `nxt`; under layer 0 only a grid has an
            // input gradient, its output's, into the other region of `gh` (grids never
            // take the compact layout, whose regions differ; nothing is written there)
            let (ga, cur) = (lay.ga, lay.gofs[i]);
            let nxt = match (i, compact) {
                (0, None) => lay.maxp * sx - cur,
                (0, Some(_)) => 0,
                _ => lay.gofs[i - 1],
            };
            if ahead && i == n_l - 1 {
                // the next chunk's samples (this chunk's targets were read by the output
                // layer's forward, before the last barrier), its texels fetched after them
                k.push_str("    if (c + 1u < CHUNKS) {\n");
                k.push_str(&sample("first + S", "x0n"));
                k.push_str("    if (c + 2u < CHUNKS) {\n");
                fetch(&mut k, "first + 2u * S + lid");
                k.push_str("    }\n    }\n");
            }
            if ahead && i == 1 {
                // the next chunk's encoding (its u and v sampled a barrier ago) into the X_0
                // buffer this chunk does not read
                if let Some(f) = freq("x0n") {
                    let _ = write!(k, "    if (c + 1u < CHUNKS) {{\n{f}    }}\n");
                }
            }
            // dW += dz·Xᵀ
            let it_n = l.in_p / 16;
            let nt = (l.out_p / 16) * it_n;
            let nodw = exp_has(&exp, "nodw");
            if let Some(sp) = split.as_ref().filter(|sp| sp.layers[i]) {
                // split layer: X_i's and dz's tiles of this chunk into their buffers
                // (chunk `first / S` at `off + first · rows`), for the dW kernel
                // stored directly: X_i for i > 0; dz for hidden layers, and for the output
                // layer where its epilogue runs in registers
                let x_done = direct && i > 0;
                let z_done = direct && (i + 1 < n_l || outreg);
                let nx = if x_done { 0 } else { it_n * st_n };
                let nz = if z_done { 0 } else { (l.out_p / 16) * st_n };
                if !nodw && nx + nz > 0 {
                    // tile t < nx: X_i's (rows rb, samples sb); then dz's
                    let mut arms = Vec::new();
                    if nx > 0 {
                        arms.push(format!(
                            "if (t < {nx}u) {{ {} }}",
                            copy(
                                0,
                                &format!("xh, {}", xoff(i, 0)),
                                &sp.tile(&pad, i, true, "rb")
                            )
                        ));
                    }
                    if nz > 0 {
                        arms.push(format!(
                            "if (t >= {nx}u && t < {ntot}u) {{ {} }}",
                            copy(nx, &format!("{ga}, {cur}u"), &sp.tile(&pad, i, false, "rb")),
                            ntot = nx + nz,
                        ));
                    }
                    let _ = writeln!(
                        k,
                        "    for (uint j = 0u; j < {nj}u; j++) {{
        uint t = j * NSG + sgid;
        {}
    }}",
                        arms.join(" else "),
                        nj = (nx + nz).div_ceil(nsg),
                    );
                }
            } else if !nodw && dw_reuse && nsg.is_multiple_of(it_n) && slots[i].len() > 1 {
                // every slot of this subgroup has the same column block `it` (tile
                // j·NSG + sgid, NSG a multiple of the column blocks): X's tile is loaded
                // once per k step and serves every slot; each accumulator still adds its
                // k steps in order, so the sums are the same
                let _ = writeln!(k, "    {{ uint it = sgid % {it_n}u;");
                for kk in 0..st_n {
                    let _ = writeln!(
                        k,
                        "        {{ {MB} b; coopMatLoad(b, xh, {x} + it * 16u * SX + {k16}u, SX, {COL});",
                        x = xoff(i, 0),
                        k16 = kk * 16
                    );
                    for (j, slot) in slots[i].iter().enumerate() {
                        let _ = writeln!(
                            k,
                            "        {{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; {MA} a; coopMatLoad(a, {ga}, {cur}u + ot * 16u * SX + {k16}u, SX, {ROW}); {slot} = coopMatMulAdd(a, b, {slot});{db} }} }}",
                            k16 = kk * 16,
                            db = db_mul(i),
                        );
                    }
                    k.push_str("        }\n");
                }
                k.push_str("    }\n");
            } else if !nodw {
                for (j, slot) in slots[i].iter().enumerate() {
                    let _ = writeln!(
                        k,
                        "    {{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; uint it = t % {it_n}u;"
                    );
                    for kk in 0..st_n {
                        let _ = writeln!(
                            k,
                            "        {{ {MA} a; coopMatLoad(a, {ga}, {cur}u + ot * 16u * SX + {k16}u, SX, {ROW}); {MB} b; coopMatLoad(b, xh, {x} + it * 16u * SX + {k16}u, SX, {COL}); {slot} = coopMatMulAdd(a, b, {slot});{db} }}",
                            k16 = kk * 16,
                            x = xoff(i, 0),
                            db = db_mul(i),
                        );
                    }
                    k.push_str("    } }\n");
                }
            }
            if early && !slots[i].is_empty() {
                let _ = write!(k, "    if (c + 1u == CHUNKS) {{\n{}    }}\n", store_dw(i));
            }
            // db: rows split over `nb` invocations (samples lid % nb, + nb, ...), or on
            // the tensor cores with dW (`dbmma`)
            let a = n_l - 1 - i;
            let (rows, nb) = lay.accs[a];
            if !dbmma[i] {
                k.push_str(&row_sums(&format!("acc{a}"), rows, nb, s, dbcont, &|e| {
                    format!("float({ga}[{cur}u + {e}])")
                }));
            }
            if i == 0 && grid.is_none() {
                if matches!(shp.enc, Enc::Raw) && !ahead {
                    // the next chunk's sampling writes X_0
                    k.push_str(BAR);
                }
                continue;
            }
            // dx = Wᵀ·dz, times the derivative of the layer below (from its f16 output);
            // under layer 0 the grid's output gradient
            let ntx = it_n * st_n;
            // stored in place (into X_i's region, `inpl`): the tiles kept in registers
            // until every subgroup has read X_i, a barrier later
            let slots_x = ntx.div_ceil(nsg);
            if inpl[i] {
                for j in 0..slots_x {
                    let _ = writeln!(k, "    {ACC16} dq{i}_{j};");
                }
            }
            // f16 accumulators under a hidden layer (`acc16_for`)
            let d16 = acc16 && i > 0;
            let cty = if d16 { ACC16 } else { ACC };
            let kn = l.out_p / 16;
            let a_at = |it: &str, kk: usize| {
                format!(
                    "w16, {p}u + {ko}u + {it} * 16u, {ip}u, {COL}",
                    p = l.padded,
                    ko = kk * 16 * l.in_p,
                    ip = l.in_p
                )
            };
            let b_at = |sb: &str, kk: usize| {
                format!("{ga}, {}u + {sb} * 16u, SX, {ROW}", cur + kk * 16 * sx)
            };
            let conv = if d16 {
                "c".to_string()
            } else {
                format!("{ACC16}(c)")
            };
            let store = format!(
                "coopMatStore(hh, {ga}, {nxt}u + it * 16u * SX + sb * 16u, SX, {ROW});{tz}",
                tz = if i > 0 {
                    tee(i - 1, false, "it")
                } else {
                    String::new()
                }
            );
            // the subgroup's tiles side by side, as the forward's
            let inter = interleave_x && slots_x > 1;
            if inter {
                interleaved_phase(
                    &mut k,
                    ntx,
                    "it",
                    kn,
                    bwd_w[i].as_deref(),
                    &|j| format!("{cty} c{j} = {cty}(0.0);"),
                    &a_at,
                    &b_at,
                );
            }
            for j in 0..if inter { slots_x } else { 1 } {
                if inter {
                    tile_head_of(&mut k, ntx, "it", Some(j));
                    let _ = writeln!(k, "        {cty} c = c{j};");
                } else {
                    tile_head(&mut k, ntx, "it");
                    let _ = writeln!(k, "        {cty} c = {cty}(0.0);");
                    for kk in 0..kn {
                        mul_add(
                            &mut k,
                            bwd_w[i].as_ref().map(|w| w[kk].as_str()),
                            &a_at("it", kk),
                            &b_at("sb", kk),
                        );
                    }
                }
                let below = match i {
                    0 => None,
                    _ => Some(shp.layers[i - 1].act),
                };
                // y = X_i's tile: from workgroup memory, or kept in registers by the forward
                let yh = if kept(i) {
                    pick_slot("yh", &format!("xm{i}"), kept_slots(i))
                } else {
                    format!(
                        "{ACC16} yh; coopMatLoad(yh, xh, {x}u + it * 16u * SX + sb * 16u, SX, {ROW});",
                        x = lay.xo[i]
                    )
                };
                k.push_str(&dx_epilogue(&yh, below, d16, &off, &exp, pack.is_some()));
                if inpl[i] {
                    let keep = keep_slot(&format!("dq{i}"), slots_x);
                    let _ = writeln!(
                        k,
                        "        if (t < {ntx}u) {{ {ACC16} hh = {conv};{keep} }}\n    }}"
                    );
                } else {
                    let _ = writeln!(
                        k,
                        "        if (t < {ntx}u) {{ {ACC16} hh = {conv}; {store} }}\n    }}"
                    );
                }
            }
            if inter {
                k.push_str("    }\n");
            }
            if inpl[i] {
                k.push_str(BAR);
                tile_head(&mut k, ntx, "it");
                let pick = pick_slot("hh", &format!("dq{i}"), slots_x);
                let _ = writeln!(k, "        if (t < {ntx}u) {{ {pick} {store} }}\n    }}");
            }
            k.push_str(BAR);
            if let (0, Some(g)) = (i, grid) {
                k.push_str(&grid_tables(g, nxt, s, pack.as_ref(), wg));
            }
        }
    }
    if exp_has(&exp, "nobar") {
        // (the chunk loop's workgroup barriers as subgroup barriers: what they cost)
        let body = k.split_off(loop_at);
        k.push_str(&body.replace(
            BAR,
            "    subgroupMemoryBarrierShared(); subgroupBarrier();\n",
        ));
    }
    k.push_str("    } // the chunk loop\n");
    if exp_has(&exp, "noend") {
        k.push_str("    if (st.step != 0xffffffffu) { return; }\n");
    }
    if !early {
        for i in (0..pad.layers.len()).filter(|&i| !(merge && i == last)) {
            k.push_str(&store_dw(i));
        }
    }
    if merge {
        // the merged output layer's dW: each subgroup's sums over its sample block, added
        // in block order through the scratch tiles (f32) by block 0's subgroup, which
        // stores the tile; f16 accumulators checked against f16's largest first
        let l = pad.layers[last];
        let it_n = l.in_p / 16;
        for r in 0..rpb {
            let _ = write!(k, "    {ACC} dwf{r} = {ACC}(dw{last}_{r});");
            if half[last] {
                let _ = write!(
                    k,
                    " for (int e = 0; e < dwf{r}.length(); e++) {{ lsf |= nsh_ls_over(dwf{r}[e], 65503.0); }}"
                );
            }
            k.push('\n');
        }
        // (tile it, sample block) pairs, blocks 1.. of each tile in order
        let items: Vec<(usize, usize)> = (0..it_n)
            .flat_map(|it| (1..st_n).map(move |b| (it, b)))
            .collect();
        for round in items.chunks(scratch.len()) {
            k.push_str(BAR);
            for (&(it, b), &(arr, o)) in round.iter().zip(&scratch) {
                let _ = writeln!(
                    k,
                    "    if (sgid == {sg}u) {{ coopMatStore(dwf{r}, {arr}, {o}u, 16u, {ROW}); }}",
                    sg = it / rpb * st_n + b,
                    r = it % rpb
                );
            }
            k.push_str(BAR);
            for (&(it, _), &(arr, o)) in round.iter().zip(&scratch) {
                let _ = writeln!(
                    k,
                    "    if (sgid == {sg}u) {{ {ACC} m; coopMatLoad(m, {arr}, {o}u, 16u, {ROW}); for (int e = 0; e < m.length(); e++) {{ dwf{r}[e] += m[e]; }} }}",
                    sg = it / rpb * st_n,
                    r = it % rpb
                );
            }
        }
        for r in 0..rpb {
            let _ = writeln!(
                k,
                "    if (sgid % {st_n}u == 0u) {{ uint it = sgid / {st_n}u * {rpb}u + {r}u; coopMatStore(dwf{r}, partial, pbase + {p}u + it * 16u, {ip}u, {ROW}); }}",
                p = l.padded,
                ip = l.in_p
            );
        }
    }
    // flags, then the bias folds and the loss in fixed orders
    // the largest |value| checked (`f16_check`) against f16's largest, 65504
    // and the f16 pairs' carries (`lsh`, f16 accumulators)
    k.push_str("    lsf |= lsm > 0x477fe000u ? 1u : 0u;\n    lsf |= (lsh & 0x80008000u) != 0u ? 1u : 0u;\n    { uint lsb = 0u;");
    for a in 0..n_l {
        let _ = write!(k, " lsb |= nsh_ls_bits(acc{a});");
    }
    k.push_str(" if (lsb != 0u || lsf != 0u) { atomicOr(lsbad, 1u); } }\n");
    for (a, &(rows, nb)) in lay.accs.iter().enumerate() {
        let i = n_l - 1 - a;
        let l = pad.layers[i];
        if !dbmma[i] {
            fold_rows(
                &mut k,
                &format!("acc{a}"),
                rows,
                nb,
                l.bias_p,
                true,
                shuffle_folds,
            );
            continue;
        }
        // tensor-core bias sums (`dbmma`): the row sums are any column of db (dz·1),
        // taken through `zc` one subgroup at a time
        let it_n = l.in_p / 16;
        let nt = (l.out_p / 16) * it_n;
        for sg in 0..nsg {
            k.push_str(BAR);
            let _ = writeln!(k, "    if (sgid == {sg}u) {{");
            for j in 0..slots[i].len() {
                let _ = writeln!(
                    k,
                    "        {{ uint t = {j}u * NSG + sgid; uint ot = t / {it_n}u; if (t < {nt}u && ot % {it_n}u == t % {it_n}u) {{
            coopMatStore(db{i}, zc, 0u, 16u, {ROW}); subgroupMemoryBarrierShared(); subgroupBarrier();
            if (lane < 16u && ot * 16u + lane < {rows}u) {{ float v = zc[lane * 16u]; partial[pbase + {bp}u + ot * 16u + lane] = v; if (nsh_ls_bits(v) != 0u) {{ atomicOr(lsbad, 1u); }} }}
        }} }}",
                    bp = l.bias_p
                );
            }
            k.push_str("    }\n");
        }
    }
    if let Some(pk) = &pack {
        fold_rows(
            &mut k,
            "acca",
            pk.lf,
            bias_blocks(pk.lf, s, wg),
            pk.a_off,
            false,
            shuffle_folds,
        );
    }
    // the loss: blocks of 16 invocations, then the blocks, in order (the blocks' sums
    // through subgroup shuffles with `shuffle_folds`, as `fold_rows`)
    let lb = 0;
    let blocks = wg / 16;
    k.push_str(BAR);
    if shuffle_folds {
        let fold = shuffle_sum("loss_acc", 16);
        let _ = writeln!(
            k,
            "    {{ {fold} if (lid % 16u == 0u) {{ zc[{}u + lid / 16u] = t; }} }}",
            lb + wg
        );
    } else {
        k.push_str("    zc[lid] = loss_acc;\n");
        k.push_str(BAR);
        let mut fold = format!("float t = zc[{lb}u + lid * 16u];");
        for b in 1..16 {
            let _ = write!(fold, " t += zc[{lb}u + lid * 16u + {b}u];");
        }
        let _ = writeln!(
            k,
            "    if (lid < {blocks}u) {{ {fold} zc[{}u + lid] = t; }}",
            lb + wg
        );
    }
    k.push_str(BAR);
    let mut fold = format!("float t = zc[{}u];", lb + wg);
    for b in 1..blocks {
        let _ = write!(fold, " t += zc[{}u];", lb + wg + b);
    }
    let _ = writeln!(
        k,
        "    if (lid == 0u) {{ {fold} loss_partial[wid] = t; lsflags[wid] = lsbad; }}\n}}"
    );
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::row_sums;
    use std::cell::RefCell;

    /// The sample offset of a [`row_sums`] element expression (`o * SX + ` then terms
    /// `bl`, `bl * Nu` and `Nu` joined by ` + `) for invocation `bl` of its row.
    fn sample_of(e: &str, bl: usize) -> usize {
        let rest = e.strip_prefix("o * SX + ").expect("the row's start");
        rest.split(" + ")
            .map(|t| {
                let num = |n: &str| n.strip_suffix('u').unwrap().parse::<usize>().unwrap();
                match t.split_once(" * ") {
                    Some(("bl", n)) => bl * num(n),
                    None if t == "bl" => bl,
                    None => num(t),
                    Some(_) => panic!("term {t}"),
                }
            })
            .sum()
    }

    /// Both forms of the bias row sums take every sample of a row exactly once over its
    /// `nb` invocations; the contiguous form gives each invocation S / nb neighbouring
    /// samples in order, the strided form samples `nb` apart.
    #[test]
    fn row_sums_take_every_sample_once() {
        for (nb, s) in [(1, 16), (4, 64), (16, 64), (8, 32), (16, 16)] {
            for contiguous in [false, true] {
                let seen = RefCell::new(Vec::new());
                let text = row_sums("acc", 3, nb, s, contiguous, &|e| {
                    seen.borrow_mut().push(e.to_string());
                    format!("v({e})")
                });
                let exprs = seen.into_inner();
                assert_eq!(exprs.len(), s / nb, "{nb} {s} {contiguous}");
                assert_eq!(text.matches(" acc += v(").count(), s / nb);
                assert!(text.contains(&format!("uint o = lid / {nb}u; uint bl = lid % {nb}u;")));
                let mut hit = vec![0u32; s];
                for bl in 0..nb {
                    let samples: Vec<usize> = exprs.iter().map(|e| sample_of(e, bl)).collect();
                    for (kk, &x) in samples.iter().enumerate() {
                        assert!(x < s, "{nb} {s} {contiguous}: sample {x}");
                        hit[x] += 1;
                        let want = if contiguous {
                            bl * (s / nb) + kk
                        } else {
                            bl + kk * nb
                        };
                        assert_eq!(x, want, "{nb} {s} {contiguous}: lane {bl}, term {kk}");
                    }
                }
                assert!(
                    hit.iter().all(|&h| h == 1),
                    "{nb} {s} {contiguous}: {hit:?}"
                );
            }
        }
    }
}
