//! Grid encodings (`hashgrid`, `densegrid`) in the GPU training kernels.
//!
//! **Forward**: the step kernel looks each (level, sample) up with the shared emitter
//! [`nshade_shader::wgsl::grid_level`], the code the exported shaders run, reading the
//! tables from the parameter buffer (global memory).
//!
//! **Backward**: a batch touches a small, data-dependent part of tables that may hold
//! millions of entries, so table gradients cannot be per-workgroup partial sums. Each
//! contribution `w_corner · dy` is added with integer atomics into a signed 64-bit
//! fixed-point accumulator per table parameter, two `atomic<u32>` words (`lo` at `2i`,
//! `hi` at `2i + 1`): `old = atomicAdd(lo, l)`, `carry = old > 0xffffffff − l`,
//! `atomicAdd(hi, h + carry)`. Integer addition is associative, so the sums are exact and
//! independent of the order in which invocations arrive: runs stay bit-reproducible, with
//! no float atomics. Where the device has 64-bit atomics (`SHADER_INT64_ATOMIC_ALL_OPS`;
//! the H200 and lavapipe do) a contribution is instead one `atomicAdd` of the same 64-bit
//! value on an `atomic<u64>` over the same words: half the atomics, and none waits for
//! another's result (`NSHADE_GPU_ATOMIC64=0` keeps the pairs).
//!
//! Fixed point: a value v is `round-toward-zero(v · 2^48)` as a two's-complement 64-bit
//! integer; [`FIXED_RANGE`] bounds each contribution (|v| is clamped to it) and the sum
//! (|Σ| < 2^15), and the resolution is 2^−48 ≈ 3.6·10^−15 (contributions are truncated
//! to it). The f32 → (hi, lo) split works on |v|: `a = |v|·2^16` (exact), `hi =
//! floor(a)`, `lo = (a − hi)·2^32` (both exact: `a − floor(a)` is exact in f32), then
//! the pair is negated in two's complement for v < 0.
//!
//! **Packed lanes** (the GLSL step kernel; [`Packing`]): both features of an entry in
//! one 64-bit atomic as two 32-bit fixed-point lanes, with a per-output scale checked
//! after the step — half the atomics, still exact integer sums.
//!
//! **Input gradient** (only when a module with parameters precedes the grid): one item
//! per sample, summing the levels in the CPU's order (see [`input_gradient_body`]).
//!
//! **Adam** (`nsh_grid_adam`, one invocation per table parameter, after the dense Adam
//! kernel): converts the accumulator back (magnitude as `f32(hi) + f32(lo)·2^−32`, times
//! 2^−16, sign applied; no cancellation), clears it for the next step, and applies the
//! same Adam update as the dense parameters (and the CPU's `Adam::update`) to the fp32
//! master table, with the moments after the dense ones in the moments buffer.

use nshade_core::module::Grid;
use nshade_core::network::Network;
use nshade_shader::ir::GridLookup;
use std::fmt::Write;

/// Largest |contribution| and |sum| of one table parameter's gradient accumulator.
pub const FIXED_RANGE: f32 = 32767.0;

/// Grid-table parameters of `net` (they follow its `dense_count` dense parameters).
pub fn table_count(net: &Network) -> usize {
    net.param_count - net.dense_count
}

pub(crate) fn lookups(g: &Grid) -> impl Iterator<Item = (usize, GridLookup)> + '_ {
    let inv = 1.0 / (g.max - g.min);
    g.levels.iter().enumerate().map(move |(index, level)| {
        (
            index,
            GridLookup {
                level: level.clone(),
                index,
                features: g.features,
                min: g.min,
                inv,
            },
        )
    })
}

/// One `case` per level of a loop body over `e < levels · S` (`l = e / S`, `s = e % S`):
/// `level(lookup, x)` gives the case's code for the level's D input expressions.
fn per_level(
    g: &Grid,
    x_at: &dyn Fn(&str, &str) -> String,
    level: &dyn Fn(&GridLookup, &[String]) -> String,
) -> String {
    let mut b = String::from("        let l = e / S; let s = e % S;\n");
    for d in 0..g.in_dims {
        let _ = writeln!(b, "        let x{d} = {};", x_at(&format!("{d}u"), "s"));
    }
    let x: Vec<String> = (0..g.in_dims).map(|d| format!("x{d}")).collect();
    b.push_str("        switch l {\n");
    for (index, lookup) in lookups(g) {
        let _ = write!(
            b,
            "        case {index}u: {{\n{}        }}\n",
            level(&lookup, &x)
        );
    }
    b.push_str("        default: {}\n        }\n");
    b
}

/// The forward pass of grid `g` as the body of a loop over `e < levels · S`: `x_at(j, s)`
/// and `y_at(j, s)` are the workgroup-memory expressions of input / output value `j` of
/// sample `s`. Tables are read from `params` (flat indices).
pub fn forward_body(
    g: &Grid,
    x_at: &dyn Fn(&str, &str) -> String,
    y_at: &dyn Fn(&str, &str) -> String,
) -> String {
    per_level(g, x_at, &|lookup, x| {
        let read = |e: &str| format!("params[{e}]");
        let (mut code, outs) =
            nshade_shader::wgsl::grid_level("q", "            ", x, lookup, 0, &read);
        for (f, o) in outs.iter().enumerate() {
            let j = format!("{}u", lookup.index * lookup.features + f);
            let _ = writeln!(code, "            {} = {o};", y_at(&j, "s"));
        }
        code
    })
}

/// The table-gradient pass of grid `g` as the body of a loop over `e < levels · S`:
/// every corner's `w · dy` goes into the fixed-point accumulators (`nsh_gacc_add`).
/// `dy` is zero for samples past the batch end, whose contributions are skipped.
///
/// With packed lanes (`pack`), each corner adds both features of a pair in one
/// `nsh_gacc_add2`, scaled by their outputs' exponents of this step's parity.
pub fn backward_body(
    g: &Grid,
    x_at: &dyn Fn(&str, &str) -> String,
    dy_at: &dyn Fn(&str, &str) -> String,
    pack: Option<&Packing>,
) -> String {
    per_level(g, x_at, &|lookup, x| {
        let read = |e: &str| format!("params[{e}]");
        let (mut code, _) =
            nshade_shader::wgsl::grid_level("q", "            ", x, lookup, 0, &read);
        for f in 0..lookup.features {
            let j = format!("{}u", lookup.index * lookup.features + f);
            let _ = writeln!(code, "            let dy{f} = {};", dy_at(&j, "s"));
        }
        // timing only (`NSHADE_GPU_EXP`): `nocoarse` drops the atomics of levels 0-4,
        // `nofine` those of the others
        let exp = std::env::var("NSHADE_GPU_EXP").unwrap_or_default();
        if (exp.contains("nocoarse") && lookup.index < 5)
            || (exp.contains("nofine") && lookup.index >= 5)
        {
            return code;
        }
        if let Some(pk) = pack {
            for f in 0..lookup.features {
                let _ = writeln!(
                    code,
                    "            let sc{f} = ldexp(1.0f, bitcast<i32>(ls[{k0}u + (st.step & 1u) * {lf}u + {o}u]));",
                    k0 = pk.k_word(0),
                    lf = pk.lf,
                    o = lookup.index * lookup.features + f
                );
            }
            for c in 0..1usize << x.len() {
                for f in (0..lookup.features).step_by(2) {
                    let _ = writeln!(
                        code,
                        "            nsh_gacc_add2(qe{c} + {f}u, qw{c} * dy{f} * sc{f}, qw{c} * dy{g} * sc{g});",
                        g = f + 1
                    );
                }
            }
            return code;
        }
        for c in 0..1usize << x.len() {
            for f in 0..lookup.features {
                let _ = writeln!(
                    code,
                    "            nsh_gacc_add(qe{c} + {f}u, qw{c} * dy{f});"
                );
            }
        }
        code
    })
}

/// The input gradient of grid `g` (when a module with parameters precedes it) as the
/// body of a loop over the samples `e < S`, levels in order as the CPU sums them:
/// `dx_d = Σ_l dp_d · ∂p_d/∂x_d` with `dp_d = Σ_corners ∂w/∂t_d · (dy · features)` and
/// `∂p_d/∂x_d = res·inv` inside [min, max], 0 where the input was clamped.
/// `add`: accumulate into `dx` instead of overwriting it.
pub fn input_gradient_body(
    g: &Grid,
    x_at: &dyn Fn(&str, &str) -> String,
    dy_at: &dyn Fn(&str, &str) -> String,
    dx_at: &dyn Fn(&str, &str) -> String,
    add: bool,
) -> String {
    let lit = super::wgsl::lit;
    let d_n = g.in_dims;
    let mut b = String::from("        let s = e;\n");
    for d in 0..d_n {
        let _ = writeln!(b, "        let x{d} = {};", x_at(&format!("{d}u"), "s"));
        let _ = writeln!(b, "        var dx{d} = 0.0f;");
    }
    let x: Vec<String> = (0..d_n).map(|d| format!("x{d}")).collect();
    for (_, lookup) in lookups(g) {
        let read = |e: &str| format!("params[{e}]");
        let (code, _) = nshade_shader::wgsl::grid_level("q", "            ", &x, &lookup, 0, &read);
        let _ = write!(b, "        {{\n{code}");
        for f in 0..lookup.features {
            let j = format!("{}u", lookup.index * lookup.features + f);
            let _ = writeln!(b, "            let dy{f} = {};", dy_at(&j, "s"));
        }
        for d in 0..d_n {
            let _ = writeln!(b, "            var dp{d} = 0.0f;");
        }
        for c in 0..1usize << d_n {
            let dot: Vec<String> = (0..lookup.features)
                .map(|f| {
                    if f == 0 {
                        format!("dy0 * params[qe{c}]")
                    } else {
                        format!("dy{f} * params[qe{c} + {f}u]")
                    }
                })
                .collect();
            let _ = writeln!(b, "            {{ let dot = {};", dot.join(" + "));
            for d in 0..d_n {
                let mut wd = String::from(if (c >> d) & 1 == 1 { "1.0f" } else { "-1.0f" });
                for e2 in (0..d_n).filter(|&e2| e2 != d) {
                    if (c >> e2) & 1 == 1 {
                        let _ = write!(wd, " * qt{e2}");
                    } else {
                        let _ = write!(wd, " * (1.0f - qt{e2})");
                    }
                }
                let _ = writeln!(b, "            dp{d} += ({wd}) * dot;");
            }
            b.push_str("            }\n");
        }
        let dpdx = lit(lookup.level.res as f32 * lookup.inv);
        for d in 0..d_n {
            let _ = writeln!(
                b,
                "            let r{d} = (x{d} - {}) * {};\n            dx{d} += dp{d} * select(0.0f, {dpdx}, r{d} >= 0.0f && r{d} <= 1.0f);",
                lit(lookup.min),
                lit(lookup.inv)
            );
        }
        b.push_str("        }\n");
    }
    let op = if add { "+=" } else { "=" };
    for d in 0..d_n {
        let _ = writeln!(b, "        {} {op} dx{d};", dx_at(&format!("{d}u"), "s"));
    }
    b
}

/// Declarations the step kernel needs when `net` has grids: the accumulators at
/// binding 6 and `nsh_gacc_add(flat parameter index, value)` (32-bit atomic pairs).
pub fn step_decls(net: &Network) -> String {
    step_decls_scaled(net, false, false)
}

/// [`step_decls`]; with dynamic loss scaling (`scaled`) a contribution that is not
/// finite or exceeds [`FIXED_RANGE`] also flags the step's overflow (`lsbad`). With
/// `atomic64` (the device has 64-bit atomics) each contribution is one `atomicAdd` on an
/// `atomic<u64>` — the same two's-complement value `trunc(v·2^48)` into the same
/// little-endian words, so the accumulators hold the same bits as with the pairs, and
/// the table Adam kernel reads them the same way.
pub fn step_decls_scaled(net: &Network, scaled: bool, atomic64: bool) -> String {
    let mut grids = false;
    net.root.for_each_grid(&mut |_| grids = true);
    if !grids {
        return String::new();
    }
    let check = if scaled {
        format!(
            "    if (nsh_ls_over(v, {})) {{ atomicOr(&lsbad, 1u); }}\n",
            super::wgsl::lit(FIXED_RANGE)
        )
    } else {
        String::new()
    };
    // timing only: `NSHADE_GPU_EXP=noatom` drops the table gradients
    let noatom = if std::env::var("NSHADE_GPU_EXP").is_ok_and(|v| v == "noatom") {
        "    if (i != 0xffffffffu) { return; }\n"
    } else {
        ""
    };
    let range = super::wgsl::lit(FIXED_RANGE);
    let base = net.dense_count;
    if atomic64 {
        return format!(
            "@group(0) @binding(6) var<storage, read_write> gacc: array<atomic<u64>>;
const GRID_BASE: u32 = {base}u;
// Adds v to table parameter i's signed 64-bit fixed-point accumulator (v·2^48).
fn nsh_gacc_add(i: u32, v: f32) {{
{check}    if (v == 0.0f) {{ return; }}
{noatom}    // |v|·2^48 is exact in f32 and below 2^63; the conversion truncates toward zero
    let m = u64(min(abs(v), {range}) * 281474976710656.0f);
    atomicAdd(&gacc[i - GRID_BASE], select(m, 0lu - m, v < 0.0f));
}}
"
        );
    }
    format!(
        "@group(0) @binding(6) var<storage, read_write> gacc: array<atomic<u32>>;
const GRID_BASE: u32 = {base}u;
// Adds v to table parameter i's signed 64-bit fixed-point accumulator (v·2^48).
fn nsh_gacc_add(i: u32, v: f32) {{
{check}    if (v == 0.0f) {{ return; }}
{noatom}    let a = min(abs(v), {range}) * 65536.0f;
    let hf = floor(a);
    var hi = u32(hf);
    var lo = u32((a - hf) * 4294967296.0f);
    if (v < 0.0f) {{
        hi = ~hi + select(0u, 1u, lo == 0u);
        lo = 0u - lo;
    }}
    let k = 2u * (i - GRID_BASE);
    let old = atomicAdd(&gacc[k], lo);
    atomicAdd(&gacc[k + 1u], hi + select(0u, 1u, old > 0xffffffffu - lo));
}}
"
    )
}

/// Invocations per workgroup of the table Adam kernel.
pub const ADAM_THREADS: u32 = 256;

/// Table parameters per invocation of the table Adam kernel (`NSHADE_GPU_GRID_ADAM_PER`
/// for measurements, 1 to 16): invocation `g` of `N` updates parameters `g + j·N`,
/// `j < per`, with every load of its parameters issued before the first store.
pub fn adam_per() -> u32 {
    std::env::var("NSHADE_GPU_GRID_ADAM_PER")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(ADAM_PER, |p: u32| p.clamp(1, 16))
}

/// The default of [`adam_per`].
const ADAM_PER: u32 = 8;

/// Workgroups (x, y) of the table Adam kernel for `tables` parameters, `per` to an
/// invocation.
pub fn adam_groups(tables: usize, per: u32) -> (u32, u32) {
    let n = (tables as u32).div_ceil(ADAM_THREADS * per).max(1);
    let x = n.min(65535);
    (x, n.div_ceil(x))
}

/// The table Adam kernel (`nsh_grid_adam`): bindings 0 step record, 1 params, 2 moments,
/// 3 accumulators, 4 grads. Mode 0 updates, mode 1 writes the gradient into `grads`;
/// both clear the accumulators.
pub fn adam_kernel(net: &Network, adam: nshade_core::optim::Adam) -> String {
    adam_kernel_scaled(net, adam, false)
}

/// [`adam_kernel`]; with dynamic loss scaling (`scaled`, binding 5: the state buffer)
/// the gradient is divided by the step's scale S, and a step whose overflow decision
/// (written by the dense Adam kernel) is set leaves tables and moments unchanged (the
/// accumulators are still cleared).
pub fn adam_kernel_scaled(net: &Network, adam: nshade_core::optim::Adam, scaled: bool) -> String {
    adam_kernel_per(net, adam, scaled, adam_per())
}

/// [`adam_kernel_scaled`] with `per` table parameters to an invocation (dispatch
/// [`adam_groups`] of the same `per`). Each invocation loads its parameters'
/// accumulators (one 8-byte load each), moments and values first, clears the
/// accumulators, then updates: the loads of all `per` parameters are in flight
/// together. On the H200 (C = `hashgrid(16, 2, 18, 16, 1.5) | mlp(64x2, relu)`, 4.3 M
/// table parameters) the kernel of one parameter per invocation, stores between its
/// loads, took about 190 us a step; 2 / 4 / 8 per invocation 73 / 80 / 69 us.
pub fn adam_kernel_per(
    net: &Network,
    adam: nshade_core::optim::Adam,
    scaled: bool,
    per: u32,
) -> String {
    let lit = super::wgsl::lit;
    let t = table_count(net);
    let threads = ADAM_THREADS;
    let (ls_decl, ls_head, ls_g) = if scaled {
        (
            "@group(0) @binding(5) var<storage, read> ls: array<u32>;\n",
            "    let lcur = (st.step & 1u) * 4u;\n    let inv_s = 1.0f / bitcast<f32>(ls[lcur]);\n    let skip = ls[lcur + 3u] != 0u;\n",
            " * inv_s",
        )
    } else {
        ("", "    let skip = false;\n", "")
    };
    let mut b = String::new();
    for j in 0..per {
        // clamped indices: every load is in bounds; only stores check i < T
        let _ = writeln!(
            b,
            "    let i{j} = g0 + {j}u * nall;\n    let c{j} = min(i{j}, T - 1u);\n    \
             let a{j} = gacc[c{j}];\n    let m{j} = moments[M0 + c{j}];\n    \
             let v{j} = moments[M0 + T + c{j}];\n    let p{j} = params[DENSE + c{j}];"
        );
    }
    for j in 0..per {
        let _ = writeln!(b, "    if (i{j} < T) {{ gacc[i{j}] = vec2<u32>(0u, 0u); }}");
    }
    for j in 0..per {
        let _ = write!(
            b,
            "    if (i{j} < T) {{
        let g = nsh_fixed(a{j}){ls_g};
        if (st.mode == 1u) {{
            grads[DENSE + i{j}] = g;
        }} else if (!skip) {{
            let m = {b1} * m{j} + {omb1} * g;
            let v = {b2} * v{j} + {omb2} * g * g;
            moments[M0 + i{j}] = m;
            moments[M0 + T + i{j}] = v;
            params[DENSE + i{j}] = p{j} - st.step_lr * m / (sqrt(v * st.inv_c2) + {eps});
        }}
    }}
",
            b1 = lit(adam.beta1),
            omb1 = lit(1.0 - adam.beta1),
            b2 = lit(adam.beta2),
            omb2 = lit(1.0 - adam.beta2),
            eps = lit(adam.epsilon),
        );
    }
    format!(
        "const T: u32 = {t}u;
const DENSE: u32 = {dense}u;
const M0: u32 = {m0}u;
struct Step {{ step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32 }}
@group(0) @binding(0) var<uniform> st: Step;
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read_write> moments: array<f32>;
@group(0) @binding(3) var<storage, read_write> gacc: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> grads: array<f32>;
{ls_decl}
// The f32 value of a signed 64-bit fixed-point accumulator (lo, hi): magnitude as
// f32(hi) + f32(lo)·2^-32, times 2^-16, sign applied (no cancellation).
fn nsh_fixed(a: vec2<u32>) -> f32 {{
    let neg = (a.y >> 31u) == 1u;
    var ml = a.x;
    var mh = a.y;
    if (neg) {{
        ml = 0u - a.x;
        mh = ~a.y + select(0u, 1u, a.x == 0u);
    }}
    let g = (f32(mh) + f32(ml) * 2.3283064e-10f) * 1.5258789e-5f;
    return select(g, -g, neg);
}}

@compute @workgroup_size({threads})
fn nsh_grid_adam(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {{
    if (st.mode == 2u) {{ return; }}
    let g0 = id.x + id.y * n.x * {threads}u;
    let nall = n.x * n.y * {threads}u;
{ls_head}{b}}}
",
        dense = net.dense_count,
        m0 = 2 * net.dense_count,
    )
}

/// **Packed lanes** (the GLSL step kernel, one grid of an even number of features, 64-bit
/// atomics): the two features `2j`, `2j + 1` of a table entry share one 64-bit atomic,
/// word `t / 2` for table parameters `t`, `t + 1` (the first half of the accumulators,
/// read in order by the table Adam kernel), as two signed 32-bit fixed-point lanes
/// `V = c1·2^32 + c0` with `c_f = roundEven(w · dy_f · 2^k_f)`.
/// Integer addition keeps the sum exact and order-independent, and each lane decodes
/// exactly (`c0` the low word as i32, `c1` the high word plus 1 where `c0 < 0`) while its
/// sum stays within ±2^31. The exponent `k_f` of every grid output (level, feature) is
/// fixed before the step; the step kernel also sums `A_f = Σ |dy_f|` over its samples
/// (fixed order, into the partials after the dense ones), and the dense Adam kernel
/// reduces A over the groups in a fixed order and checks `A_f · 2^k_f ≤ 2^29`, which
/// bounds every entry's lane sum (a sample's corner weights add up to 1, so no entry
/// receives more than A; rounding adds at most 2 per sample) — where it fails, that
/// output's table gradients of this step are dropped (its entries' update is skipped,
/// a deterministic decision), and it picks the next step's `k_f` so that `A_f · 2^k_f ≤
/// 2^27`. Half the atomics of the exact 64-bit sums (C at 2^20 on the H200: the table
/// gradients were over half of the step); the resolution is `2^−k_f`, about
/// `2^−27 · A_f`, rounded to nearest.
#[derive(Clone, Debug)]
pub struct Packing {
    /// Grid outputs (levels × features): one exponent and one |dy| sum each.
    pub lf: usize,
    pub features: usize,
    /// Every level's first parameter, relative to the first table parameter.
    pub starts: Vec<usize>,
    /// Offset of the |dy| sums in a workgroup's partials (after the dense ones).
    pub a_off: usize,
}

/// The packing of `net`'s table gradients where it applies: a kernel with dynamic loss
/// scaling (`scaled`, whose state holds the exponents) and 64-bit atomics, one grid of an
/// even number of features, and [`packing_enabled`]; `a_off` from the padded layout.
pub fn packing_for(net: &Network, scaled: bool, atomic64: bool) -> Option<Packing> {
    if !(scaled && atomic64 && packing_enabled()) {
        return None;
    }
    let a_off = super::codegen::Pad::of(net).partial_len(net.dense_count);
    Packing::of(net, a_off)
}

/// The step kernel's `nsh_gacc_add2(i, v0, v1)` (WGSL; with [`step_decls_scaled`]'s
/// 64-bit accumulators): the scaled values of table parameters `i`, `i + 1` as the two
/// lanes of the pair's word `(i − GRID_BASE) / 2` ([`Packing`]). `round` rounds half to
/// even, and the conversion saturates (a lane past ±2^31 is caught by the check).
pub const PACKED_STEP_DECLS: &str = "fn nsh_gacc_add2(i: u32, v0: f32, v1: f32) {
    let c0 = i32(round(v0));
    let c1 = i32(round(v1));
    if ((c0 | c1) == 0i) { return; }
    let w = (i64(c1) << 32u) + i64(c0);
    atomicAdd(&gacc[(i - GRID_BASE) >> 1u], bitcast<u64>(w));
}
";

/// Packed lanes are wanted where they apply (default; `NSHADE_GPU_GRID_PACK=0` keeps the
/// exact 64-bit sums).
pub fn packing_enabled() -> bool {
    std::env::var("NSHADE_GPU_GRID_PACK").map_or(true, |v| v != "0")
}

/// `A · 2^k` is checked against 2^PACK_CHECK; the next `k` aims at 2^PACK_TARGET.
pub const PACK_CHECK: i32 = 29;
pub const PACK_TARGET: i32 = 27;
/// The range of the exponents `k`.
pub const PACK_K: (i32, i32) = (-40, 80);

impl Packing {
    /// The packing of `net`'s grid when it applies (one grid of an even number of
    /// features); `a_off`: the length of the dense partial sums.
    pub fn of(net: &Network, a_off: usize) -> Option<Packing> {
        let mut grids = Vec::new();
        net.root.for_each_grid(&mut |g| grids.push(g.clone()));
        let [g] = grids.as_slice() else { return None };
        if g.features < 2 || !g.features.is_multiple_of(2) {
            return None;
        }
        let base = net.dense_count;
        Some(Packing {
            lf: g.levels.len() * g.features,
            features: g.features,
            starts: g.levels.iter().map(|l| l.offset - base).collect(),
            a_off,
        })
    }

    /// Word of the exponents of the step of `parity` in the loss-scale state.
    pub fn k_word(&self, parity: usize) -> usize {
        8 + parity * self.lf
    }

    /// Word of the per-output overflow decisions of the current step.
    pub fn ov_word(&self) -> usize {
        8 + 2 * self.lf
    }

    /// Word of the per-output counts of training steps whose table update the check
    /// dropped.
    pub fn drop_word(&self) -> usize {
        8 + 3 * self.lf
    }

    /// Words of the loss-scale state with the packing's: the two loss-scale slots, the
    /// exponents of both parities, the decisions, the drop counts.
    pub fn state_words(&self) -> usize {
        8 + 4 * self.lf
    }

    /// The first step's exponent for `batch` samples: room for a mean |dy| up to 64.
    pub fn initial_k(batch: u32) -> i32 {
        let lb = (batch.max(1) as f64).log2().ceil() as i32;
        (PACK_TARGET - lb - 4).clamp(PACK_K.0, PACK_K.1)
    }
}

/// The table Adam kernel for packed lanes ([`Packing`]; bindings as
/// [`adam_kernel_scaled`] with the state buffer, the moments read as pairs): one item
/// per feature pair, `per` to an invocation; each decodes both lanes of its word, clears
/// it, and updates both parameters unless the step overflowed or the output's check
/// failed (the same arithmetic per parameter as [`adam_kernel_per`]).
pub fn adam_kernel_packed(
    net: &Network,
    adam: nshade_core::optim::Adam,
    per: u32,
    pk: &Packing,
) -> String {
    let lit = super::wgsl::lit;
    let t = table_count(net);
    let threads = ADAM_THREADS;
    let f = pk.features;
    // the grid output of a table parameter: its level's, and its feature
    let mut lf_fn = String::from("fn nsh_lf(t: u32) -> u32 {\n");
    for (l, &st) in pk.starts.iter().enumerate().rev() {
        let _ = writeln!(
            lf_fn,
            "    if (t >= {st}u) {{ return {}u + (t - {st}u) % {f}u; }}",
            l * f
        );
    }
    lf_fn.push_str("    return 0u;\n}\n");
    let mut b = String::new();
    for j in 0..per {
        let _ = writeln!(
            b,
            "    let q{j} = g0 + {j}u * nall;\n    let cq{j} = min(q{j}, NP - 1u);\n    let c{j} = 2u * cq{j};\n    \
             let a{j} = gacc[cq{j}];\n    let m{j} = moments[MP + cq{j}];\n    let v{j} = moments[VP + cq{j}];\n    \
             let pa{j} = params[DENSE + c{j}];\n    let pb{j} = params[DENSE + c{j} + 1u];"
        );
    }
    for j in 0..per {
        let _ = writeln!(
            b,
            "    if (q{j} < NP) {{ gacc[cq{j}] = vec2<u32>(0u, 0u); }}"
        );
    }
    for j in 0..per {
        let _ = write!(
            b,
            "    if (q{j} < NP) {{
        let lf = nsh_lf(c{j});
        let l0 = bitcast<i32>(a{j}.x);
        let l1 = bitcast<i32>(a{j}.y + select(0u, 1u, l0 < 0));
        let ga = f32(l0) * ldexp(1.0f, -bitcast<i32>(ls[kc + lf])) * inv_s;
        let gb = f32(l1) * ldexp(1.0f, -bitcast<i32>(ls[kc + lf + 1u])) * inv_s;
        if (st.mode == 1u) {{
            grads[DENSE + c{j}] = ga;
            grads[DENSE + c{j} + 1u] = gb;
        }} else if (!skip) {{
            let ok = vec2<bool>(ls[OV + lf] == 0u, ls[OV + lf + 1u] == 0u);
            let g = vec2<f32>(ga, gb);
            let m = {b1} * m{j} + {omb1} * g;
            let v = {b2} * v{j} + {omb2} * g * g;
            moments[MP + cq{j}] = select(m{j}, m, ok);
            moments[VP + cq{j}] = select(v{j}, v, ok);
            if (ok.x) {{ params[DENSE + c{j}] = pa{j} - st.step_lr * m.x / (sqrt(v.x * st.inv_c2) + {eps}); }}
            if (ok.y) {{ params[DENSE + c{j} + 1u] = pb{j} - st.step_lr * m.y / (sqrt(v.y * st.inv_c2) + {eps}); }}
        }}
    }}
",
            b1 = lit(adam.beta1),
            omb1 = lit(1.0 - adam.beta1),
            b2 = lit(adam.beta2),
            omb2 = lit(1.0 - adam.beta2),
            eps = lit(adam.epsilon),
        );
    }
    // the moments as pairs: m of parameter p at 2·DENSE + p, v at 2·DENSE + T + p (both
    // even offsets for even p), so pair q's at MP + q and VP + q
    format!(
        "const T: u32 = {t}u;
const NP: u32 = {np}u;
const DENSE: u32 = {dense}u;
const MP: u32 = {mp}u;
const VP: u32 = {vp}u;
const LF: u32 = {lfn}u;
const OV: u32 = {ov}u;
struct Step {{ step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32 }}
@group(0) @binding(0) var<uniform> st: Step;
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read_write> moments: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> gacc: array<vec2<u32>>;
@group(0) @binding(4) var<storage, read_write> grads: array<f32>;
@group(0) @binding(5) var<storage, read> ls: array<u32>;
{lf_fn}
@compute @workgroup_size({threads})
fn nsh_grid_adam(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {{
    if (st.mode == 2u) {{ return; }}
    let g0 = id.x + id.y * n.x * {threads}u;
    let nall = n.x * n.y * {threads}u;
    let lcur = (st.step & 1u) * 4u;
    let inv_s = 1.0f / bitcast<f32>(ls[lcur]);
    let skip = ls[lcur + 3u] != 0u;
    let kc = 8u + (st.step & 1u) * LF;
{b}}}
",
        np = t / 2,
        dense = net.dense_count,
        mp = net.dense_count,
        vp = net.dense_count + t / 2,
        lfn = pk.lf,
        ov = pk.ov_word(),
    )
}

/// The table accumulators (two u32 words per table parameter, zeroed), or `None` when
/// `net` has no grid.
pub(super) fn accumulators(
    ctx: &crate::context::GpuContext,
    net: &Network,
) -> Result<Option<wgpu::Buffer>, nshade_core::train::TrainError> {
    let t = table_count(net) as u64;
    if t == 0 {
        return Ok(None);
    }
    let max = ctx.device.limits().max_storage_buffer_binding_size;
    if 8 * t > max {
        return Err(super::backend_err(format!(
            "the grid tables need {} bytes of gradient accumulators; the adapter binds at most {max} bytes per buffer",
            8 * t
        )));
    }
    let buf = super::storage(ctx, "grid accumulators", 8 * t);
    ctx.queue
        .write_buffer(&buf, 0, &vec![0u8; (8 * t) as usize]);
    Ok(Some(buf))
}

/// The table Adam dispatch of a network with grids.
pub(super) struct GridPass {
    pipe: wgpu::ComputePipeline,
    bg: wgpu::BindGroup,
    groups: (u32, u32),
}

impl GridPass {
    pub(super) fn new(
        ctx: &crate::context::GpuContext,
        net: &Network,
        adam: nshade_core::optim::Adam,
        pack: Option<&Packing>,
        records: &wgpu::Buffer,
        bufs: &[&wgpu::Buffer],
    ) -> GridPass {
        // a fifth buffer: the loss-scale state (dynamic loss scaling)
        let scaled = bufs.len() == 5;
        let per = adam_per();
        let (src, items) = match pack {
            Some(pk) => (adam_kernel_packed(net, adam, per, pk), table_count(net) / 2),
            None => (adam_kernel_per(net, adam, scaled, per), table_count(net)),
        };
        if std::env::var("NSHADE_GPU_DUMP").is_ok_and(|v| v == "1") {
            eprintln!("{src}");
        }
        let (pipe, bgl) = super::pipeline(
            ctx,
            "nshade grid adam",
            &src,
            "nsh_grid_adam",
            &[
                super::uniform_ty(),
                super::storage_ty(false),
                super::storage_ty(false),
                super::storage_ty(false),
                super::storage_ty(false),
                super::storage_ty(true),
            ][..1 + bufs.len()],
        );
        let bg = super::bind(ctx, "grid adam", &bgl, records, bufs);
        GridPass {
            pipe,
            bg,
            groups: adam_groups(items, per),
        }
    }

    /// Records the table Adam dispatch of the step whose record is at `off`.
    pub(super) fn record(&self, pass: &mut wgpu::ComputePass<'_>, off: &[u32]) {
        pass.set_pipeline(&self.pipe);
        pass.set_bind_group(0, &self.bg, off);
        pass.dispatch_workgroups(self.groups.0, self.groups.1, 1);
    }
}
