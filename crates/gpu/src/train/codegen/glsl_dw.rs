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

/// Per layer of `net`'s MLP: its weight gradients go through the dW kernel in `mode`
/// ([`split_mode`]), whatever the buffers' sizes ([`DwSplit::of`] may still refuse).
pub fn split_layers_for(net: &Network, mode: &str) -> Vec<bool> {
    split_layers(&Pad::of(net), mode)
}

/// Per layer of `pad`: its weight gradients go through the dW kernel in `mode`
/// ([`split_mode`]), whatever the buffers' sizes.
pub(super) fn split_layers(pad: &Pad, mode: &str) -> Vec<bool> {
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

/// How the dW kernel reads its tiles: `NSHADE_GPU_DWSTAGE` samples a stage staged through
/// workgroup memory (32 by default; 0: every tile straight from the X and dz buffers, the
/// form before the twenty-third session), `NSHADE_GPU_DWPARTS` workgroups a layer and
/// step workgroup (1 or 2, each with its share of the output rows; staged layers only)
/// and `NSHADE_GPU_DWDEPTH` stages in flight in registers (2 by default, or 1). On an
/// H100, D (`freq(8) | mlp(128x4, relu)`) trains 1.10 / 1.04 / 1.04× faster at 2^16 /
/// 2^18 / 2^20 with the default than in place (the dW kernel alone 1.32 / 1.19 / 1.18×);
/// one stage in flight 1.06 / 1.03 / 1.03×, stages of 16 samples 1.04 / 1.04 / 1.04×,
/// two parts 0.98×, `NSHADE_GPU_DWTHREADS=512` invocations (256 by default) 0.98–1.01×
/// (docs/PERFORMANCE.md, twenty-third session).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DwForm {
    /// Samples per stage staged through workgroup memory (0: read in place).
    pub stage: u32,
    /// Workgroups per (step workgroup, split layer), each with out_p / parts rows.
    pub parts: u32,
    /// Stages loaded ahead into registers while one is multiplied (1 or 2).
    pub depth: u32,
    /// Invocations per workgroup (128, 256 or 512; subgroups of 32).
    pub threads: u32,
}

impl DwForm {
    /// The default form, or the one the environment asks for (for measurements).
    pub fn from_env() -> DwForm {
        let var = |n: &str| std::env::var(n).ok().and_then(|v| v.parse::<u32>().ok());
        DwForm {
            stage: var("NSHADE_GPU_DWSTAGE").unwrap_or(32),
            parts: var("NSHADE_GPU_DWPARTS")
                .filter(|p| matches!(p, 1 | 2))
                .unwrap_or(1),
            depth: var("NSHADE_GPU_DWDEPTH")
                .filter(|d| matches!(d, 1 | 2))
                .unwrap_or(2),
            threads: var("NSHADE_GPU_DWTHREADS")
                .filter(|t| matches!(t, 128 | 256 | 512))
                .unwrap_or(256),
        }
    }
}

/// The weight-gradient kernel of `split` for `net`: `form.threads` invocations (subgroups
/// of 32) per workgroup, dispatched as groups × ([`DwSplit::count`] · `form.parts`)
/// workgroups: workgroup (`wid`, n·parts + h) reads chunks `wid·chunks …` of `samples` of
/// the n-th split layer and writes its share h of that layer's dW tiles (output rows
/// h·out_p/parts …) into `partial[wid·P + …]` (row-major in the padded layout, as the
/// step kernel writes the others). Bindings: 0 the step record (unused), 1 `partial`,
/// 2 the X buffer, 3 the dz buffer (read as uvec4, 8 f16 each, where a layer is staged).
///
/// Staged (`form.stage` > 0, where a stage fits `max_shared` bytes): the workgroup copies
/// a stage of whole chunks of X and dz (contiguous in the buffers) into workgroup memory
/// with 16-byte loads, rows padded by 16 bytes so a tile's rows fall into distinct banks,
/// and loads the next `form.depth` stages into registers while the subgroups multiply
/// this one (two buffers, one barrier a stage). Otherwise every tile is loaded from the
/// buffers. Both
/// add each accumulator's chunks and k steps in the same order: the same sums, the same
/// bits.
pub fn glsl_dw_kernel(
    net: &Network,
    split: &DwSplit,
    samples: u32,
    chunks: u32,
    partial_len: usize,
    form: DwForm,
    max_shared: usize,
) -> String {
    let pad = Pad::of(net);
    let threads = form.threads;
    let nsg = threads as usize / 32;
    let t = threads as usize;
    let s = samples as usize;
    let st_n = s / 16;
    let parts = form.parts.max(1) as usize;
    // chunks a stage for each split layer (None: read in place), and the largest buffer
    let stage_of = |ip: usize, op: usize| -> Option<(usize, usize)> {
        if form.stage == 0 || !op.is_multiple_of(16 * parts) {
            return None;
        }
        let rows = ip + op / parts;
        (1..=chunks as usize)
            .rev()
            .filter(|g| (chunks as usize).is_multiple_of(*g) && g * s <= form.stage as usize)
            .map(|g| (g, rows * (g * s / 8 + 1)))
            .find(|&(_, buf)| 2 * buf * 16 <= max_shared)
    };
    let shared_len = pad
        .layers
        .iter()
        .zip(&split.layers)
        .filter(|(_, on)| **on)
        .filter_map(|(l, _)| stage_of(l.in_p, l.out_p))
        .map(|(_, buf)| 2 * buf)
        .max();
    // the buffers' element: uvec4 (8 f16) where a layer is staged, else f16
    let u = if shared_len.is_some() { 8 } else { 1 };
    let mut k = String::from(HEAD);
    let _ = write!(
        k,
        "layout(local_size_x = {threads}) in;
layout(set = 0, binding = 0) uniform Step {{ uint step; uint slot; float step_lr; float inv_c2; uint mode; float poison; uint seed_h; }} st;
layout(set = 0, binding = 1) buffer Partial {{ float partial[]; }};
layout(set = 0, binding = 2) readonly buffer GX {{ {ty} gx[]; }};
layout(set = 0, binding = 3) readonly buffer GZ {{ {ty} gz[]; }};
const uint S = {s}u;
const uint NSG = {nsg}u;
const uint CHUNKS = {chunks}u;
const uint P = {partial_len}u;
{sh}void main() {{
    uint wid = gl_WorkGroupID.x;
    uint tid = gl_LocalInvocationIndex;
    uint sgid = tid / 32u;
    uint pbase = wid * P;
",
        sh = shared_len.map_or(String::new(), |n| format!("shared uvec4 dsm[{n}];\n")),
        ty = if u == 8 { "uvec4" } else { "float16_t" },
    );
    for (n, (i, l)) in pad
        .layers
        .iter()
        .enumerate()
        .filter(|(i, _)| split.layers[*i])
        .enumerate()
    {
        let (ip, op) = (l.in_p, l.out_p);
        let staged = stage_of(ip, op);
        let lparts = if staged.is_some() { parts } else { 1 };
        // (a layer read in place has one part: the other parts' workgroups do nothing)
        for h in 0..lparts {
            let opp = op / lparts;
            let r0 = h * opp;
            let it_n = ip / 16;
            let nt = (opp / 16) * it_n;
            let slots = nt.div_ceil(nsg);
            let _ = writeln!(k, "    if (gl_WorkGroupID.y == {}u) {{", n * parts + h);
            for j in 0..slots {
                let _ = writeln!(k, "    {ACC} d{j} = {ACC}(0.0);");
            }
            // every slot of a subgroup has the same column block when NSG is a multiple of
            // the column blocks: X's tile is loaded once per k step for all of them
            let reuse = nsg.is_multiple_of(it_n);
            // one k step's products from `xsrc`/`zsrc`: tile offsets of row block `rb`
            let products = |k: &mut String,
                            xt: &dyn Fn(&str) -> String,
                            zt: &dyn Fn(&str) -> String,
                            ind: &str| {
                if reuse {
                    let _ = writeln!(
                        k,
                        "{ind}{{ uint it = sgid % {it_n}u; {MB} b; coopMatLoad(b, {}, {COL});",
                        xt("it")
                    );
                    for j in 0..slots {
                        let _ = writeln!(
                            k,
                            "{ind}{{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; {MA} a; coopMatLoad(a, {}, {ROW}); d{j} = coopMatMulAdd(a, b, d{j}); }} }}",
                            zt("ot")
                        );
                    }
                    let _ = writeln!(k, "{ind}}}");
                } else {
                    for j in 0..slots {
                        let _ = writeln!(
                            k,
                            "{ind}{{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; uint it = t % {it_n}u; {MA} a; coopMatLoad(a, {}, {ROW}); {MB} b; coopMatLoad(b, {}, {COL}); d{j} = coopMatMulAdd(a, b, d{j}); }} }}",
                            zt("ot"),
                            xt("it")
                        );
                    }
                }
            };
            match staged {
                None => {
                    // in place: a tile is 16 rows of stride S halves (S / u elements)
                    let su = s / u;
                    let _ = writeln!(
                        k,
                        "    for (uint c = 0u; c < CHUNKS; c++) {{
        uint ch = wid * CHUNKS + c;
        uint xb = {xo}u + ch * {xs}u; uint zb = {zo}u + ch * {zs}u;",
                        xo = split.x_off[i] / u as u64,
                        zo = split.z_off[i] / u as u64,
                        xs = ip * s / u,
                        zs = op * s / u,
                    );
                    for kk in 0..st_n {
                        let col = kk * 16 / u;
                        products(
                            &mut k,
                            &|rb| format!("gx, xb + {rb} * {}u + {col}u, {su}u", 16 * su),
                            &|rb| format!("gz, zb + {rb} * {}u + {col}u, {su}u", 16 * su),
                            "        ",
                        );
                    }
                    k.push_str("    }\n");
                }
                Some((g, buf)) => {
                    // a stage: g chunks; row r of X (then of dz's rows r0 …) holds the
                    // stage's g·S samples in `rs` uvec4 (one of padding)
                    let cu = s / 8; // uvec4 per chunk row
                    let rs = g * cu + 1;
                    let xq = g * ip * cu; // uvec4 of X a stage
                    let zq = g * opp * cu;
                    let items = (xq + zq).div_ceil(t);
                    let nst = chunks as usize / g;
                    let _ = writeln!(
                        k,
                        "    uint xq = {}u + wid * {}u;
    uint zq = {}u + wid * {}u + {}u;",
                        split.x_off[i] / 8,
                        chunks as usize * ip * cu,
                        split.z_off[i] / 8,
                        chunks as usize * op * cu,
                        r0 * cu
                    );
                    // item m of this invocation: its global offset in the stage (`go`) and
                    // its place in a buffer (`so`); X's items first, then dz's
                    for m in 0..items {
                        let q = format!("(tid + {}u)", m * t);
                        let _ = writeln!(
                            k,
                            "    uint go{m}, so{m}; bool ok{m};
    {{ uint q = {q}; if (q < {xq}u) {{ uint g = q / {a}u, rem = q % {a}u; go{m} = xq + q; so{m} = (rem / {cu}u) * {rs}u + g * {cu}u + rem % {cu}u; ok{m} = true; }}
      else {{ q -= {xq}u; uint g = q / {b}u, rem = q % {b}u; go{m} = zq + g * {zc}u + rem; so{m} = {xrows}u + (rem / {cu}u) * {rs}u + g * {cu}u + rem % {cu}u; ok{m} = q < {zq}u; }} }}",
                            a = ip * cu,
                            b = opp * cu,
                            zc = op * cu,
                            xrows = ip * rs,
                        );
                    }
                    // X's items read gx, dz's gz: which one is known here where the
                    // item's range lies wholly on one side
                    let fetch = |k: &mut String, m: usize, stage: &str, set: &str| {
                        let (lo, hi) = (m * t, (m + 1) * t);
                        let zs = g * op * cu; // dz's uvec4 a stage (every row)
                        let expr_x = format!("gx[go{m} + {stage} * {xq}u]");
                        let expr_z = format!("gz[go{m} + {stage} * {zs}u]");
                        let e = if hi <= xq {
                            expr_x
                        } else if lo >= xq {
                            format!("(ok{m} ? {expr_z} : uvec4(0u))")
                        } else {
                            format!(
                                "(tid + {lo}u < {xq}u ? {expr_x} : (ok{m} ? {expr_z} : uvec4(0u)))"
                            )
                        };
                        let _ = writeln!(k, "        {set}{m} = {e};");
                    };
                    let store = |k: &mut String, m: usize, base: &str, set: &str| {
                        let _ = writeln!(k, "        if (ok{m}) dsm[{base} + so{m}] = {set}{m};");
                    };
                    // one stage's products from the buffer at `cur`
                    let compute = |k: &mut String, cur: &str| {
                        for gg in 0..g {
                            for kk in 0..st_n {
                                let col = gg * cu + kk * 2;
                                products(
                                    k,
                                    &|rb| {
                                        format!("dsm, {cur} + {rb} * {}u + {col}u, {rs}u", 16 * rs)
                                    },
                                    &|rb| {
                                        format!(
                                            "dsm, {cur} + {}u + {rb} * {}u + {col}u, {rs}u",
                                            ip * rs,
                                            16 * rs
                                        )
                                    },
                                    "        ",
                                );
                            }
                        }
                    };
                    // registers: one set a stage in flight (`form.depth`, 1 or 2)
                    let depth = if nst > 1 {
                        form.depth.clamp(1, 2) as usize
                    } else {
                        1
                    };
                    for set in &["pa", "pb"][..depth] {
                        let regs: Vec<String> = (0..items).map(|m| format!("{set}{m}")).collect();
                        let _ = writeln!(k, "    uvec4 {};", regs.join(", "));
                    }
                    k.push_str("    {\n");
                    for m in 0..items {
                        fetch(&mut k, m, "0u", "pa");
                    }
                    for m in 0..items {
                        store(&mut k, m, "0u", "pa");
                    }
                    if depth == 2 {
                        for m in 0..items {
                            fetch(&mut k, m, "1u", "pb");
                        }
                    }
                    k.push_str("    }\n    memoryBarrierShared(); barrier();\n");
                    if depth == 1 {
                        let _ = writeln!(
                            k,
                            "    for (uint s = 0u; s < {nst}u; s++) {{
        uint cur = (s & 1u) * {buf}u;
        if (s + 1u < {nst}u) {{"
                        );
                        for m in 0..items {
                            fetch(&mut k, m, "(s + 1u)", "pa");
                        }
                        k.push_str("        }\n");
                        compute(&mut k, "cur");
                        let _ = writeln!(
                            k,
                            "        if (s + 1u < {nst}u) {{\n        uint nxt = {buf}u - cur;"
                        );
                        for m in 0..items {
                            store(&mut k, m, "nxt", "pa");
                        }
                        k.push_str("        }\n        memoryBarrierShared(); barrier();\n    }\n");
                    } else {
                        // stage t = s + h: its set of registers loads stage t + 2 while the
                        // other set (stage t + 1, loaded an iteration ago) waits to be
                        // stored after this stage's products
                        let _ = writeln!(k, "    for (uint s = 0u; s < {nst}u; s += 2u) {{");
                        for h in 0..2 {
                            let (ld, sv) = if h == 0 { ("pa", "pb") } else { ("pb", "pa") };
                            let _ = writeln!(
                                k,
                                "    {{ uint t = s + {h}u; if (t < {nst}u) {{\n        if (t + 2u < {nst}u) {{"
                            );
                            for m in 0..items {
                                fetch(&mut k, m, "(t + 2u)", ld);
                            }
                            k.push_str("        }\n");
                            compute(&mut k, &format!("{}u", h * buf));
                            let _ = writeln!(k, "        if (t + 1u < {nst}u) {{");
                            for m in 0..items {
                                store(&mut k, m, &format!("{}u", (1 - h) * buf), sv);
                            }
                            k.push_str(
                                "        }\n        memoryBarrierShared(); barrier();\n    } }\n",
                            );
                        }
                        k.push_str("    }\n");
                    }
                }
            }
            for j in 0..slots {
                let _ = writeln!(
                    k,
                    "    {{ uint t = {j}u * NSG + sgid; if (t < {nt}u) {{ uint ot = t / {it_n}u; uint it = t % {it_n}u; coopMatStore(d{j}, partial, pbase + {p}u + ot * 16u * {ip}u + it * 16u, {ip}u, {ROW}); }} }}",
                    p = l.padded + r0 * ip
                );
            }
            k.push_str("    }\n");
        }
    }
    k.push_str("}\n");
    k
}
