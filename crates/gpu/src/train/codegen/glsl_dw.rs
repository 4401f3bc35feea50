//! Weight gradients outside the GLSL step kernel: the step kernel stores each split
//! layer's input X (f16, as the forward wrote it) and output gradient dz (f16, as the
//! backward wrote it) per chunk into two storage buffers, and a second kernel multiplies
//! them, dW = Σ dz·Xᵀ, one workgroup per step-kernel workgroup over exactly that
//! workgroup's chunks, into the same per-group partial sums (`partial[group·P + p]`) the
//! Adam kernel reduces in group order. The step kernel then holds no dW accumulators
//! (108 registers a lane for `freq(8) | mlp(128x4)`), and the products run in f32
//! accumulators with the whole chunk loop as their reduction. Each accumulator adds its
//! chunks and k steps in order, so the sums are fixed and runs stay bit-reproducible.
//! Pure: network and launch in, source text out.

use super::Pad;
use super::glsl::{ACC, COL, HEAD, MA, MB, ROW};
use nshade_core::network::Network;
use std::fmt::Write;

/// Which layers' weight gradients leave the step kernel, and where their tensors go.
///
/// Layout of the two buffers (f16 elements): chunk `ch` = `group·chunks + c` of split
/// layer i keeps X_i at `x_off[i] + ch·in_p·S` (in_p rows of S samples) and dz_i at
/// `z_off[i] + ch·out_p·S` (out_p rows), so a 16×16 tile is 16 rows of stride S.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DwSplit {
    /// Per layer of the padded MLP: its weight gradients go through the buffers.
    pub layers: Vec<bool>,
    /// Per layer: offset of its X region in the X buffer (0 for layers not split).
    pub x_off: Vec<u64>,
    /// Per layer: offset of its dz region in the dz buffer.
    pub z_off: Vec<u64>,
    /// Elements of the X and dz buffers.
    pub x_len: u64,
    pub z_len: u64,
}

/// `NSHADE_GPU_DWSPLIT`: `0` keeps every dW in the step kernel, `all` splits every
/// layer, `wide` the layers with more than 64 inputs or outputs; otherwise (the default)
/// the layers with more than 64 inputs and outputs. On an H100 `freq(8) | mlp(128x4)`
/// trains 1.21 / 1.32 / 1.34x faster at 2^16 / 2^18 / 2^20 with its wide layers split
/// than with none, the same with only its three 128x128 layers split (then its first
/// and last layers, whose dW are a quarter of the traffic, accumulate in the step kernel)
/// and 1.02-1.05x faster that way with f16 accumulators (with every layer split they
/// gave 0.98-1.00x); `freq(8) | mlp(64x4)` with every layer split 0.52-0.49x (its step
/// is then bound by the stores and loads of X and dz).
pub fn split_mode() -> String {
    std::env::var("NSHADE_GPU_DWSPLIT").unwrap_or_default()
}

/// Per layer of `pad`: its weight gradients go through the dW kernel in `mode`
/// ([`split_mode`]), whatever the buffers' sizes.
fn split_layers(pad: &Pad, mode: &str) -> Vec<bool> {
    pad.layers
        .iter()
        .map(|l| match mode {
            "0" => false,
            "all" => true,
            "wide" => l.out_p > 64 || l.in_p > 64,
            _ => l.out_p > 64 && l.in_p > 64,
        })
        .collect()
}

impl DwSplit {
    /// Split layers (the dW kernel's second dispatch dimension).
    pub fn count(&self) -> u32 {
        self.layers.iter().filter(|&&b| b).count() as u32
    }

    /// Every layer splits.
    pub fn all(&self) -> bool {
        self.layers.iter().all(|&b| b)
    }

    /// The `coopMatLoad` / `coopMatStore` buffer, offset and stride of a 16×16 tile of
    /// layer i's X (`x`) or dz in the step kernel: row block `rb` (an expression),
    /// sample block `sb` of the chunk starting at sample `first` (the kernel's names).
    pub(super) fn tile(&self, pad: &Pad, i: usize, x: bool, rb: &str) -> String {
        let (buf, off, rows) = if x {
            ("gx", self.x_off[i], pad.layers[i].in_p)
        } else {
            ("gz", self.z_off[i], pad.layers[i].out_p)
        };
        format!("{buf}, {off}u + first * {rows}u + {rb} * 16u * S + sb * 16u, S")
    }

    /// The split of `net` for `groups · chunks` chunks of `samples`, in `mode`
    /// ([`split_mode`]); `None` when no layer splits or a buffer would exceed
    /// `max_bytes` (the adapter's storage binding limit): the step kernel then keeps
    /// every dW.
    pub fn of(
        net: &Network,
        groups: u32,
        chunks: u32,
        samples: u32,
        mode: &str,
        max_bytes: u64,
    ) -> Option<DwSplit> {
        let pad = Pad::of(net);
        let layers = split_layers(&pad, mode);
        if !layers.iter().any(|&b| b) {
            return None;
        }
        let per = groups as u64 * chunks as u64 * samples as u64;
        let (mut x_off, mut z_off) = (Vec::new(), Vec::new());
        let (mut xl, mut zl) = (0u64, 0u64);
        for (l, &s) in pad.layers.iter().zip(&layers) {
            x_off.push(xl);
            z_off.push(zl);
            if s {
                xl += per * l.in_p as u64;
                zl += per * l.out_p as u64;
            }
        }
        // u32 indices in the kernels, and the binding limit
        let fits = |n: u64| n * 2 <= max_bytes && n < u32::MAX as u64;
        (fits(xl) && fits(zl)).then_some(DwSplit {
            layers,
            x_off,
            z_off,
            x_len: xl,
            z_len: zl,
        })
    }
}

/// The weight-gradient kernel of `split` for `net`: `threads` invocations (subgroups of
/// 32) per workgroup, dispatched as groups × [`DwSplit::count`] workgroups: workgroup
/// (`wid`, n) reads chunks `wid·chunks …` of `samples` of the n-th split layer and writes
/// its dW tiles into `partial[wid·P + …]` (row-major in the padded layout, as the step
/// kernel writes the others). Bindings: 0 the step record (unused), 1
/// `partial`, 2 the X buffer, 3 the dz buffer.
pub fn glsl_dw_kernel(
    net: &Network,
    split: &DwSplit,
    threads: u32,
    samples: u32,
    chunks: u32,
    partial_len: usize,
) -> String {
    let pad = Pad::of(net);
    let nsg = threads as usize / 32;
    let s = samples as usize;
    let st_n = s / 16;
    let mut k = String::from(HEAD);
    let _ = write!(
        k,
        "layout(local_size_x = {threads}) in;
layout(set = 0, binding = 0) uniform Step {{ uint step; uint slot; float step_lr; float inv_c2; uint mode; float poison; uint seed_h; }} st;
layout(set = 0, binding = 1) buffer Partial {{ float partial[]; }};
layout(set = 0, binding = 2) readonly buffer GX {{ float16_t gx[]; }};
layout(set = 0, binding = 3) readonly buffer GZ {{ float16_t gz[]; }};
const uint S = {s}u;
const uint NSG = {nsg}u;
const uint CHUNKS = {chunks}u;
const uint P = {partial_len}u;
void main() {{
    uint wid = gl_WorkGroupID.x;
    uint sgid = gl_LocalInvocationIndex / 32u;
    uint pbase = wid * P;
"
    );
    for (n, (i, l)) in pad
        .layers
        .iter()
        .enumerate()
        .filter(|(i, _)| split.layers[*i])
        .enumerate()
    {
        let (ip, op) = (l.in_p, l.out_p);
        let it_n = ip / 16;
        let nt = (op / 16) * it_n;
        let slots = nt.div_ceil(nsg);
        let _ = writeln!(k, "    if (gl_WorkGroupID.y == {n}u) {{");
        for j in 0..slots {
            let _ = writeln!(k, "    {ACC} d{j} = {ACC}(0.0);");
        }
        // every slot of a subgroup has the same column block when NSG is a multiple of
        // the column blocks: X's tile is loaded once per k step for all of them
        let reuse = nsg.is_multiple_of(it_n);
        let _ = writeln!(
            k,
            "    for (uint c = 0u; c < CHUNKS; c++) {{
        uint ch = wid * CHUNKS + c;
        uint xb = {xo}u + ch * {xs}u; uint zb = {zo}u + ch * {zs}u;",
            xo = split.x_off[i],
            zo = split.z_off[i],
            xs = ip * s,
            zs = op * s,
        );
        for kk in 0..st_n {
            let k16 = kk * 16;
            if reuse {
                let _ = writeln!(
                    k,
                    "        {{ uint it = sgid % {it_n}u; {MB} b; coopMatLoad(b, gx, xb + it * 16u * S + {k16}u, S, {COL});"
                );
                for j in 0..slots {
                    let _ = writeln!(
                        k,
                        "        {{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; {MA} a; coopMatLoad(a, gz, zb + ot * 16u * S + {k16}u, S, {ROW}); d{j} = coopMatMulAdd(a, b, d{j}); }} }}"
                    );
                }
                k.push_str("        }\n");
            } else {
                for j in 0..slots {
                    let _ = writeln!(
                        k,
                        "        {{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; uint it = t % {it_n}u; {MA} a; coopMatLoad(a, gz, zb + ot * 16u * S + {k16}u, S, {ROW}); {MB} b; coopMatLoad(b, gx, xb + it * 16u * S + {k16}u, S, {COL}); d{j} = coopMatMulAdd(a, b, d{j}); }} }}"
                    );
                }
            }
        }
        k.push_str("    }\n");
        for j in 0..slots {
            let _ = writeln!(
                k,
                "    {{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; uint it = t % {it_n}u; coopMatStore(d{j}, partial, pbase + {p}u + ot * 16u * {ip}u + it * 16u, {ip}u, {ROW}); }} }}",
                p = l.padded
            );
        }
        k.push_str("    }\n");
    }
    k.push_str("}\n");
    k
}
