//! The GLSL cooperative-matrix kernel with the weights held in registers (`--target glsl
//! --form coop-compute` with `Options::rows_stationary`), for mlps too wide for
//! [`crate::coop_rows`] to stage: every subgroup keeps its share of each hidden layer's
//! weight matrices — the 16-output blocks it owns — in registers for the whole dispatch,
//! and the tile's rows pass from layer to layer through two f16 buffers in workgroup
//! memory that every subgroup reads. Where `coop_rows` loads each weight block once per
//! 16 or 32 rows (from workgroup memory, or from the buffer where the weights do not fit
//! there: `freq(8) | mlp(128x4, relu)` needs 110 KiB as f16), this kernel loads it once
//! per workgroup; the price is a workgroup barrier per layer, since a layer's outputs come
//! from every subgroup.
//!
//! Layout (f16 `ws`): X0 at 0 and X1 at `x_len` (64 rows each, row-major, rows of `sx`),
//! which before the row loop hold each hidden layer's W in turn while the subgroups load
//! their blocks; the last layer's W staged after them for the whole dispatch (its 16 or
//! so outputs are one block, shared by the subgroups by row blocks instead). Subgroup s is
//! in output group `s % G_o` and row group `s / G_o`: it computes the output blocks
//! `s % G_o + j · G_o` of every hidden layer for its row group's blocks of rows.

use crate::coop::{TileLayer, TilePlan, X_SKEW};
use crate::ir::Program;
use crate::{Options, RowsSplit};
use nshade_core::model::Model;
use std::fmt::Write;

/// 16-row blocks per tile, the largest first: 64 rows, else 32 (see [`plan`]).
const TILE_BLOCKS: [usize; 2] = [4, 2];
/// Weight blocks a subgroup may hold (4 registers per lane each).
const MAX_HELD: usize = 40;

/// The plan of this kernel for `mlp` within `budget` bytes of workgroup memory, or `None`
/// where it does not apply (no hidden layer, more weight blocks per subgroup than
/// [`MAX_HELD`]) or does not fit. Tiles of 64 rows where they fit, else of 32: on the
/// H200 32-row tiles were slower even where they let two workgroups be resident on a
/// multiprocessor instead of one (`freq(8) | mlp(128x4, relu)` 1.97 G evaluations/s
/// against 2.44 G). `blocks` is the row blocks of each subgroup and `output_groups` the
/// subgroups that share a row block's outputs. For measurements, `shape`
/// (`Options::rows_shape` with `Options::rows_stationary`) asks for (subgroups, row
/// blocks per subgroup) instead of the default (up to 8 output groups, one per
/// 16-output block of the widest hidden layer, and the row groups that make 8
/// subgroups) and `tile_rows` for tiles of 32 or 64 rows.
pub(crate) fn plan(
    mlp: &nshade_core::module::Mlp,
    budget: usize,
    acc16: bool,
    shape: Option<(usize, usize)>,
    tile_rows: Option<usize>,
) -> Option<TilePlan> {
    TILE_BLOCKS
        .iter()
        .filter(|&&tb| tile_rows.is_none_or(|r| r == 16 * tb))
        .flat_map(|&tb| [X_SKEW, 0].map(|skew| (tb, skew)))
        .filter_map(|(tb, skew)| plan_tile(mlp, acc16, shape, tb, skew))
        .find(|p| p.workgroup_bytes <= budget)
}

/// The plan for tiles of `tb` 16-row blocks with weights staged at `skew`.
fn plan_tile(
    mlp: &nshade_core::module::Mlp,
    acc16: bool,
    shape: Option<(usize, usize)>,
    tb: usize,
    skew: usize,
) -> Option<TilePlan> {
    let count = mlp.layers.len();
    if count < 2 {
        return None;
    }
    let mut layers = Vec::new();
    let mut staged_bias = 0;
    for l in &mlp.layers {
        let t = TileLayer::of(l, skew, 0, staged_bias, false);
        staged_bias += t.out_p;
        layers.push(t);
    }
    let hidden = &layers[..count - 1];
    let nb = hidden.iter().map(|l| l.out_p / 16).max()?;
    let (og, rg) = match shape {
        Some((g, b)) => {
            if b == 0 || !tb.is_multiple_of(b) || !g.is_multiple_of(tb / b) || g > 32 {
                return None;
            }
            let rg = tb / b;
            (g / rg, rg)
        }
        None => {
            let og = nb.min(8);
            // row groups: up to 8 subgroups in all, dividing the tile's row blocks
            let rg = match 8 / og {
                0 | 1 => 1,
                2 | 3 => 2,
                _ => 4,
            };
            (og, rg.min(tb))
        }
    };
    if og == 0 || og > nb {
        return None;
    }
    let held: usize = hidden
        .iter()
        .map(|l| (l.out_p / 16).div_ceil(og) * (l.in_p / 16))
        .sum();
    if held > MAX_HELD {
        return None;
    }
    let rows = 16 * tb;
    let widest = layers.iter().map(|l| l.in_p.max(l.out_p)).max()?;
    let sx = widest + X_SKEW;
    let x_len = rows * sx;
    // the hidden layers' W pass through the X buffers in chunks of whole output blocks
    let stride = hidden.iter().map(|l| l.stride).max()?;
    let area = (2 * x_len).max(16 * stride);
    let hidden_bias: usize = hidden.iter().map(|l| l.out_p).sum();
    let last = layers.last_mut()?;
    last.staged = area;
    let weights_len = area + last.out_p * last.stride;
    // the last layer's f32 outputs go to the X buffer it does not read where they fit
    let z_len = if z_in_x(rows, x_len, last.out_p) {
        0
    } else {
        rows * last.out_p
    };
    let last_out = last.out_p;
    let bytes = weights_len * 2 + bias_bytes(hidden_bias, last_out, acc16) + z_len * 4;
    Some(TilePlan {
        workgroup_size: 32 * og * rg,
        rows,
        sx,
        per: 0,
        streamed: false,
        stream_parts: 1,
        layers,
        weights_len,
        biases_len: if acc16 { last_out } else { staged_bias },
        x_len,
        workgroup_bytes: bytes,
        blocks: tb / rg,
        output_groups: og,
        outputs_over_x: false,
        x_one_block: false,
        native: false,
    })
}

/// Workgroup memory of the staged biases: with f16 accumulation (`acc16`) the hidden
/// layers' (`hidden` of them) as f16 and the last layer's (`last`) as f32, else all as f32.
fn bias_bytes(hidden: usize, last: usize, acc16: bool) -> usize {
    if acc16 {
        hidden * 2 + last * 4
    } else {
        (hidden + last) * 4
    }
}

/// Whether a tile's f32 outputs of the last layer (`rows` x `zw`, two f16 elements each)
/// fit in one X buffer of `x_len` f16, which the last layer does not read: then they go
/// there instead of to a workgroup array of their own, and the kernel needs that much
/// less workgroup memory (4 KiB for 16 outputs; on the H200 that decides whether two
/// workgroups are resident on a multiprocessor).
fn z_in_x(rows: usize, x_len: usize, zw: usize) -> bool {
    rows * zw * 2 <= x_len
}

/// The complete GLSL 450 compute shader of `plan` (from [`plan`]).
pub(crate) fn write(model: &Model, program: &Program, opts: &Options, plan: &TilePlan) -> String {
    debug_assert!(plan.output_groups > 0 && opts.rows_split == RowsSplit::Whole);
    let p = &opts.prefix;
    let (in_dims, out_dims) = (program.in_dims, program.out_dims);
    let wg = plan.workgroup_size;
    let og = plan.output_groups;
    let groups = wg / 32;
    let (rows, sx, rb) = (plan.rows, plan.sx, plan.blocks);
    let x_len = plan.x_len;
    let count = plan.layers.len();
    let last = plan.layers.last().expect("an mlp has layers");
    let zw = last.out_p;
    // the last layer's f32 outputs: in the X buffer it does not read (f16 pairs), or zs
    let z_alias = z_in_x(rows, x_len, zw);
    let (z_arr, z_at, z_unit) = if z_alias {
        (format!("{p}ws"), (count % 2) * x_len, 2)
    } else {
        (format!("{p}zs"), 0, 1)
    };
    let (mut s, in_ty) = crate::coop::glsl_head(
        model,
        opts,
        (in_dims, out_dims, wg),
        (true, false, ""),
        entries(plan, opts, in_dims, out_dims),
    );
    let f16 = opts.buffer_is_f16();
    let acc16 = opts.rows_acc16;
    let (ma, mb, mc, mh) = crate::coop::glsl_mats();
    let _ = write!(
        s,
        "
layout(local_size_x = {wg}) in;

{buffers}
// f16: the tile's rows of X in two buffers (at 0 and {x_len}; rows of {sx}), which hold
// each hidden layer's W in turn, in chunks, before the rows; the last layer's W at {lw}.
// Biases ({bias_note}) and the last layer's outputs (f32, rows of {zw}{z_note}).
shared float16_t {p}ws[{wl}];
shared float {p}bs[{bl}];{bh}{zdecl}

void main() {{
    uint lid = gl_LocalInvocationIndex;
    uint sgid = lid / 32u;
    uint og = sgid % {og}u;
    uint rg = sgid / {og}u;
",
        buffers = crate::coop::glsl_buffers(model, opts),
        lw = last.staged,
        wl = plan.weights_len,
        bl = plan.biases_len,
        bias_note = if acc16 {
            "the hidden layers' f16 in bh, the last layer's f32 in bs"
        } else {
            "f32"
        },
        z_note = if z_alias {
            format!(", as pairs of f16 bits in X{}", count % 2)
        } else {
            String::new()
        },
        zdecl = if z_alias {
            String::new()
        } else {
            format!("\nshared float {p}zs[{}];", rows * zw)
        },
        bh = if acc16 {
            format!("\nshared float16_t {p}bh[{}];", last.staged_bias)
        } else {
            String::new()
        },
    );
    let d = &crate::coop::GLSL;
    let read = |l: &TileLayer| crate::coop::glsl_f32(crate::coop::weight_read(p, l), f16);
    let hidden = &plan.layers[..count - 1];
    // Biases: the hidden layers' in bh (f16 accumulation) or bs, the last layer's in bs
    // (at 0 with f16 accumulation); the last layer's W staged for the whole dispatch.
    s.push_str("    // Biases and the last layer's weights, once per workgroup.\n");
    for (i, l) in plan.layers.iter().enumerate() {
        let (arr, at, conv) = match (acc16, i + 1 < count) {
            (true, true) => ("bh", l.staged_bias, "float16_t"),
            (true, false) => ("bs", 0, ""),
            (false, _) => ("bs", l.staged_bias, ""),
        };
        let _ = writeln!(
            s,
            "    for (uint e = lid; e < {op}u; e += {wg}u) {{
        float v = 0.0;
        if (e < {od}u) {{ v = {b}; }}
        {p}{arr}[{at}u + e] = {conv}(v);
    }}",
            op = l.out_p,
            od = l.out_dims,
            b = crate::coop::glsl_f32(format!("{p}params[{}u + e]", l.bias), f16),
        );
    }
    s.push_str(&crate::coop::stage_weights(
        d,
        p,
        wg,
        last,
        &read(last),
        "    ",
    ));
    // output block slots of each hidden layer: (slot j, whether it may be past the layer)
    let slots = |l: &TileLayer| {
        let nb = l.out_p / 16;
        (0..nb.div_ceil(og))
            .map(move |j| (j, (j + 1) * og > nb))
            .collect::<Vec<_>>()
    };
    s.push_str(
        "    // This subgroup's blocks of every hidden layer's W^T, held for the whole dispatch.\n",
    );
    for (i, l) in hidden.iter().enumerate() {
        for (j, _) in slots(l) {
            for k in 0..l.in_p / 16 {
                let _ = writeln!(s, "    {mb} w{i}_{j}_{k};");
            }
        }
    }
    // each hidden layer's W staged in chunks of whole output blocks through the X area
    let area = last.staged;
    for (i, l) in hidden.iter().enumerate() {
        let chunk = (area / l.stride / 16).max(1);
        let nb = l.out_p / 16;
        for c0 in (0..nb).step_by(chunk) {
            let c1 = (c0 + chunk).min(nb);
            let whole = c0 == 0 && c1 == nb;
            let _ = writeln!(s, "    barrier();");
            s.push_str(&crate::coop::stage_weight_rows(
                d,
                p,
                wg,
                l,
                &read(l),
                "    ",
                16 * c0..16 * c1,
            ));
            let _ = writeln!(s, "    barrier();");
            for (j, partial) in slots(l) {
                let _ = writeln!(s, "    {{ uint nn = og + {}u;", j * og);
                let cond = match (whole, partial) {
                    (true, false) => None,
                    (true, true) => Some(format!("nn < {nb}u")),
                    (false, _) => Some(format!("nn >= {c0}u && nn < {c1}u")),
                };
                if let Some(c) = &cond {
                    let _ = writeln!(s, "    if ({c}) {{");
                }
                for k in 0..l.in_p / 16 {
                    let _ = writeln!(
                        s,
                        "      coopMatLoad(w{i}_{j}_{k}, {p}ws, (nn - {c0}u) * {}u + {}u, {}u, gl_CooperativeMatrixLayoutColumnMajor);",
                        16 * l.stride,
                        16 * k,
                        l.stride
                    );
                }
                if cond.is_some() {
                    let _ = writeln!(s, "    }}");
                }
                let _ = writeln!(s, "    }}");
            }
        }
    }
    let arg = crate::coop::row_input(p, in_dims, &in_ty);
    // The encoding of a tile's rows: spread over the workgroup, `parts` invocations per
    // row, each storing its contiguous share of the row's f16 elements (features, then
    // zero padding). Each share is the whole encoding's straight-line code followed by
    // its stores, so what a share does not store is dead code to the compiler; the
    // part index is uniform over a subgroup (rows is a multiple of 32).
    let parts = if wg > rows && wg.is_multiple_of(rows) {
        wg / rows
    } else {
        1
    };
    let _ = write!(
        s,
        "    barrier();
    uint n = uint({p}outputs.length()) / {out_dims}u;
    uint tiles = (n + {r1}u) / {rows}u;
    for (uint tile = gl_WorkGroupID.x; tile < tiles; tile += gl_NumWorkGroups.x) {{
        uint r0 = tile * {rows}u;
        // The tile's rows (the last row again past n): encodings in f32, the mlp input as f16 in X0{spread}.
        for (uint r = lid{modulo}; r < {rows}u; r += {step}u) {{
            uint row = min(r0 + r, n - 1u);
            {in_ty} p = {arg};
",
        r1 = rows - 1,
        spread = if parts > 1 {
            format!(", {parts} invocations per row")
        } else {
            String::new()
        },
        modulo = if parts > 1 {
            format!(" % {rows}u")
        } else {
            String::new()
        },
        step = if parts > 1 { rows } else { wg },
    );
    let encoding = crate::coop::encoding(program);
    let at = format!("{p}ws[r * {sx}u + ");
    let l0 = &plan.layers[0];
    if parts == 1 {
        let ind = "            ";
        let xs = crate::coop::glsl_encoding(model, &encoding, opts, ind, &mut s);
        crate::coop::store_x_row(&mut s, ind, &at, &xs, l0, "float16_t");
    } else {
        let ind = "                ";
        let share = l0.in_p.div_ceil(parts);
        let _ = writeln!(s, "            uint q = lid / {rows}u;");
        for q in 0..parts {
            let range = (q * share).min(l0.in_p)..((q + 1) * share).min(l0.in_p);
            let _ = writeln!(
                s,
                "            {}if (q == {q}u) {{",
                if q > 0 { "else " } else { "" }
            );
            let mut code = String::new();
            let xs = crate::coop::glsl_encoding(model, &encoding, opts, ind, &mut code);
            if range.start < xs.len() {
                s.push_str(&code);
            }
            for j in range {
                let v = xs.get(j).map_or("0.0", String::as_str);
                let _ = writeln!(s, "{ind}{at}{j}u] = float16_t({v});");
            }
            let _ = writeln!(s, "            }}");
        }
    }
    let _ = writeln!(s, "        }}\n        barrier();");
    let (hacc, hbias) = if acc16 { (&mh, "bh") } else { (&mc, "bs") };
    for (i, l) in hidden.iter().enumerate() {
        let (xin, xout) = ((i % 2) * x_len, ((i + 1) % 2) * x_len);
        let y = if acc16 {
            crate::coop_rows::activation_f16(&l.act)
        } else {
            crate::syntax::activation(&crate::syntax::CSyntax, &l.act, "z")
        };
        let ety = if acc16 { "float16_t" } else { "float" };
        let _ = writeln!(
            s,
            "        // Layer {i}: {} x {} ({}): X{} -> X{}.",
            l.out_dims,
            l.in_dims,
            l.act.name(),
            i % 2,
            (i + 1) % 2
        );
        let nb = l.out_p / 16;
        for (j, partial) in slots(l) {
            let _ = writeln!(s, "        {{ uint nn = og + {}u;", j * og);
            if partial {
                let _ = writeln!(s, "        if (nn < {nb}u) {{");
            }
            for m in 0..rb {
                let _ = writeln!(
                    s,
                    "          {hacc} c{m}; coopMatLoad(c{m}, {p}{hbias}, {}u + nn * 16u, 0u, gl_CooperativeMatrixLayoutRowMajor);",
                    l.staged_bias
                );
            }
            for k in 0..l.in_p / 16 {
                for m in 0..rb {
                    let _ = writeln!(
                        s,
                        "          {{ {ma} a; coopMatLoad(a, {p}ws, {xin}u + (rg * {rb}u + {m}u) * {}u + {}u, {sx}u, gl_CooperativeMatrixLayoutRowMajor); c{m} = coopMatMulAdd(a, w{i}_{j}_{k}, c{m}); }}",
                        16 * sx,
                        16 * k
                    );
                }
            }
            for m in 0..rb {
                let c = format!("c{m}");
                if !matches!(l.act, nshade_core::Activation::None) {
                    let _ = writeln!(
                        s,
                        "          for (int e = 0; e < {c}.length(); e++) {{ {ety} z = {c}[e]; {c}[e] = {y}; }}"
                    );
                }
                let conv = if acc16 {
                    c.clone()
                } else {
                    format!("{mh}({c})")
                };
                let _ = writeln!(
                    s,
                    "          coopMatStore({conv}, {p}ws, {xout}u + (rg * {rb}u + {m}u) * {}u + nn * 16u, {sx}u, gl_CooperativeMatrixLayoutRowMajor);",
                    16 * sx
                );
            }
            if partial {
                let _ = writeln!(s, "        }}");
            }
            let _ = writeln!(s, "        }}");
        }
        let _ = writeln!(s, "        barrier();");
    }
    // the last layer: its (output block, row block) tiles spread over all subgroups,
    // weights from the staged copy
    let xin = ((count - 1) % 2) * x_len;
    let nbl = last.out_p / 16;
    let tb = rows / 16;
    let tiles = nbl * tb;
    let _ = writeln!(
        s,
        "        // Layer {}: {} x {} ({} on the outputs): X{} -> f32 outputs, {tiles} tiles over the subgroups.",
        count - 1,
        last.out_dims,
        last.in_dims,
        last.act.name(),
        (count - 1) % 2
    );
    for q in 0..tiles.div_ceil(groups) {
        let _ = writeln!(
            s,
            "        {{ uint t = sgid + {}u;{}",
            q * groups,
            if (q + 1) * groups > tiles {
                format!(" if (t < {tiles}u) {{")
            } else {
                " {".to_string()
            }
        );
        let _ = writeln!(
            s,
            "          uint nn = t / {tb}u; uint m = t % {tb}u;
          {mc} c; coopMatLoad(c, {p}bs, {}u + nn * 16u, 0u, gl_CooperativeMatrixLayoutRowMajor);",
            if acc16 { 0 } else { last.staged_bias }
        );
        for k in 0..last.in_p / 16 {
            let _ = writeln!(
                s,
                "          {{ {ma} a; coopMatLoad(a, {p}ws, {xin}u + m * {}u + {}u, {sx}u, gl_CooperativeMatrixLayoutRowMajor); {mb} w; coopMatLoad(w, {p}ws, {}u + nn * {}u + {}u, {}u, gl_CooperativeMatrixLayoutColumnMajor); c = coopMatMulAdd(a, w, c); }}",
                16 * sx,
                16 * k,
                last.staged,
                16 * last.stride,
                16 * k,
                last.stride
            );
        }
        let _ = writeln!(
            s,
            "          coopMatStore(c, {z_arr}, {z_at}u + m * {}u + nn * {}u, {}u, gl_CooperativeMatrixLayoutRowMajor);
        }} }}",
            16 * zw * z_unit,
            16 * z_unit,
            zw * z_unit
        );
    }
    let out = crate::syntax::activation(
        &crate::syntax::CSyntax,
        &last.act,
        &if z_alias {
            // an f32 stored into f16 elements: the low half first
            format!(
                "uintBitsToFloat(packFloat2x16(f16vec2({p}ws[{z_at}u + 2u * (r * {zw}u + o)], {p}ws[{z_at}u + 2u * (r * {zw}u + o) + 1u])))"
            )
        } else {
            format!("{p}zs[r * {zw}u + o]")
        },
    );
    let _ = writeln!(
        s,
        "        barrier();
        // The tile's output rows: {rows} x {out_dims} consecutive floats.
        for (uint e = lid; e < {tot}u; e += {wg}u) {{
            uint r = e / {out_dims}u; uint o = e % {out_dims}u;
            if (r0 + r < n) {{ {p}outputs[r0 * {out_dims}u + e] = {out}; }}
        }}
        barrier();
    }}
}}",
        tot = rows * out_dims,
    );
    s
}

/// The header lines of this kernel.
fn entries(plan: &TilePlan, opts: &Options, in_dims: usize, out_dims: usize) -> Vec<String> {
    let p = &opts.prefix;
    let (g, b) = (opts.group, opts.binding);
    let (rows, wg, og) = (plan.rows, plan.workgroup_size, plan.output_groups);
    let bind = |k: u32| format!("layout(set = {g}, binding = {})", b + k);
    let mut entries = vec![
        format!(
            "form coop-compute, weights held in registers: one compute kernel; its {} subgroups of 32 invocations are {og} output groups x {} row groups: subgroup s holds, for the whole dispatch, the 16-output blocks s % {og} + j * {og} of every hidden layer's W (f16 cooperative matrices) and computes them for {} rows of each tile of {rows}; every mlp layer as 16x16x16 cooperative-matrix products ({acc}, subgroup scope) with the bias, activation and f16 rounding applied to the accumulator's elements, the layers' f16 rows in workgroup memory (one workgroup barrier per layer); the last layer's W staged in workgroup memory and its tiles spread over the subgroups",
            wg / 32,
            wg / 32 / og,
            16 * plan.blocks,
            acc = if opts.rows_acc16 {
                "coopmat<float16_t> accumulators in the hidden layers and coopmat<float> in the last"
            } else {
                "coopmat<float> accumulators"
            }
        ),
        format!(
            "requires: GL_KHR_cooperative_matrix, GL_KHR_memory_scope_semantics and GL_EXT_shader_explicit_arithmetic_types_float16 (Vulkan: VK_KHR_cooperative_matrix listing f16 x f16 -> f32 (and f16 -> f16 with f16 accumulation) at 16x16x16 with subgroup scope, shaderFloat16){}; subgroups of exactly 32 invocations; {} bytes of workgroup memory (Vulkan maxComputeSharedMemorySize)",
            if opts.buffer_is_f16() {
                ", GL_EXT_shader_16bit_storage for the f16 parameter buffer (storageBuffer16BitAccess)"
            } else {
                ""
            },
            plan.workgroup_bytes
        ),
        format!(
            "entry point main, workgroup size {wg}: n = {p}outputs.length() / {out_dims} rows in tiles of {rows}; workgroup w evaluates tiles w, w + G, w + 2G, ... (G = number of workgroups in x)"
        ),
        format!(
            "dispatch: (G, 1, 1) workgroups, any G from 1 to 65535; each loads the weights once and then loops over its tiles, so G = min(ceil(n / {rows}), {}) (what nshade uses) beats one workgroup per tile",
            crate::coop::ROWS_DISPATCH
        ),
        format!(
            "bindings: {p}params {} (the parameter buffer below), {p}inputs {} (float, read; row r = raw inputs [r * {in_dims}, r * {in_dims} + {in_dims})), {p}outputs {} (float, read-write; row r = outputs [r * {out_dims}, r * {out_dims} + {out_dims})); bind exactly n rows of outputs and at least n rows of inputs",
            bind(0),
            bind(2),
            bind(3)
        ),
        format!(
            "once per workgroup each hidden layer's W is staged from the parameter buffer into workgroup memory as f16 (zero-padded to multiples of 16 rows and columns), in chunks of whole 16-output blocks, and loaded into the registers of the subgroups that own its blocks, the last layer's W stays staged, and the biases are staged as {}; inputs are encoded in f32, the mlp input and hidden activations are kept as f16, accumulation is {} and outputs are f32",
            if opts.rows_acc16 {
                "f16 (the hidden layers') and f32 (the last layer's)"
            } else {
                "f32"
            },
            if opts.rows_acc16 {
                "f16 in the hidden layers and f32 in the last"
            } else {
                "f32"
            }
        ),
    ];
    for (k, l) in plan.layers.iter().enumerate() {
        entries.push(format!(
            "  layer {k}: {} x {} (padded {} x {}), weights at parameter {}, staged rows of {} f16 at {}; bias at parameter {}",
            l.out_dims, l.in_dims, l.out_p, l.in_p, l.weight, l.stride, l.staged, l.bias
        ));
    }
    entries
}
