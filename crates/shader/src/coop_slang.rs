//! The Slang cooperative-matrix kernel: what `--target slang --form coop-compute` emits.
//! Slang's `linalg.CoopMat` (Slang 2026; SPIR-V `SPV_KHR_cooperative_matrix`, Vulkan
//! `VK_KHR_cooperative_matrix`) in the layout of the portable GLSL subgroup kernel of
//! [`crate::coop_rows`]: each subgroup of 32 invocations owns `16 · blocks` rows of every
//! tile and meets no other subgroup after the staging.
//!
//! ```text
//! once:      W_l (f16, out_p × in_p zero-padded, rows `stride` apart) and b_l (f32)
//!            staged from the parameter buffer; one workgroup barrier
//! per tile:  the subgroup's rows: lane r encodes row r (f32) into its row of X (f16);
//!            subgroup barrier
//! per layer, per block of 16 rows: for each 16-output block n, C = Σ_k A_k · W_(k,n)
//!            (A from X, W as a column-major B, f32 accumulators) stored into the
//!            subgroup's f32 scratch Z; subgroup barrier; the lanes add the bias, apply
//!            the activation and store the block's outputs as f16 over X's columns (the
//!            last layer: as f32 rows of the output buffer); subgroup barrier
//! ```
//!
//! Compiled by Slang's compiler in the tests (`crates/shader/tests/slang.rs`) and run
//! against the CPU where the adapter has cooperative matrices
//! (`crates/gpu/tests/tiled_infer.rs`).

use crate::coop::{TileLayer, TilePlan};
use crate::header::Interface;
use crate::ir::Program;
use crate::{Error, Options};
use nshade_core::model::Model;
use std::fmt::Write;

/// The shapes tried, best first: (subgroups per workgroup, 16-row blocks per subgroup).
const SHAPES: &[(usize, usize)] = &[(4, 2), (4, 1), (2, 2), (2, 1), (1, 2), (1, 1)];

/// Skew of the staged weight rows and of X's rows (f16), as in the GLSL kernel.
const SKEW: usize = 8;

/// The kernel's layout for `mlp` within `budget` bytes of workgroup memory: the first of
/// [`SHAPES`] that fits with skewed weight rows, else with unskewed ones; `None` when
/// none does (every weight is staged).
pub(crate) fn plan(mlp: &nshade_core::module::Mlp, budget: usize) -> Option<TilePlan> {
    for skew in [SKEW, 0] {
        for &(groups, blocks) in SHAPES {
            let (mut staged, mut staged_bias) = (0, 0);
            let mut layers = Vec::new();
            for l in &mlp.layers {
                let t = TileLayer::of(l, skew, staged, staged_bias, false);
                staged += t.staged_len();
                staged_bias += t.out_p;
                layers.push(t);
            }
            let widest = layers
                .iter()
                .map(|l| l.in_p.max(l.out_p))
                .max()
                .unwrap_or(16);
            let zw = layers.iter().map(|l| l.out_p).max().unwrap_or(16);
            let sx = widest + SKEW;
            let rows_each = 16 * blocks;
            let x_len = rows_each * sx;
            let bytes = staged * 2 + staged_bias * 4 + groups * (x_len * 2 + 16 * zw * 4);
            if bytes <= budget {
                return Some(TilePlan {
                    workgroup_size: 32 * groups,
                    rows: groups * rows_each,
                    sx,
                    per: 0,
                    streamed: false,
                    stream_parts: 1,
                    layers,
                    weights_len: staged,
                    biases_len: staged_bias,
                    x_len,
                    workgroup_bytes: bytes,
                    blocks,
                    output_groups: 0,
                    outputs_over_x: false,
                    x_one_block: false,
                    native: false,
                });
            }
        }
    }
    None
}

/// The complete Slang compute shader of `plan` (from [`plan`]).
pub(crate) fn write(
    model: &Model,
    program: &Program,
    opts: &Options,
    plan: &TilePlan,
) -> Result<String, Error> {
    let p = &opts.prefix;
    let (g, b) = (opts.group, opts.binding);
    let (in_dims, out_dims) = (program.in_dims, program.out_dims);
    let (wg, rows, sx, blocks) = (plan.workgroup_size, plan.rows, plan.sx, plan.blocks);
    let groups = wg / 32;
    let rows_each = 16 * blocks;
    let zw = plan.layers.iter().map(|l| l.out_p).max().unwrap_or(16);
    let f16 = opts.buffer_is_f16();
    let elem = if f16 { "half" } else { "float" };
    let in_ty = if in_dims == 1 {
        "float".to_string()
    } else {
        format!("float{in_dims}")
    };
    let entries = entries(plan, opts, in_dims, out_dims, zw);
    let iface = Interface {
        signature: format!(
            "[shader(\"compute\")] void main() with [numthreads({wg}, 1, 1)] (evaluates rows of {in_ty} into rows of {out_dims} float; no {p}eval function in this form)"
        ),
        buffer: vec![format!(
            "weights: StructuredBuffer<{elem}> {p}params, Vulkan binding {b} set {g}: the parameter buffer below"
        )],
        entries,
    };
    let mut s = crate::header::write(model, opts, &iface);
    let read = |i: &str| format!("float({p}params[{i}])");
    let _ = write!(
        s,
        "
[[vk::binding({b}, {g})]] StructuredBuffer<{elem}> {p}params;
[[vk::binding({b2}, {g})]] StructuredBuffer<float> {p}inputs;
[[vk::binding({b3}, {g})]] RWStructuredBuffer<float> {p}outputs;

// Staged weights (f16) and biases (f32); each subgroup's {rows_each} rows of X (f16, rows of
// {sx}) and 16 rows of f32 sums (rows of {zw}).
groupshared half {p}ws[{wl}];
groupshared float {p}bs[{bl}];
groupshared half {p}xs[{xl}];
groupshared float {p}zs[{zl}];

typealias {p}MA = linalg.CoopMat<half, MemoryScope.Subgroup, 16, 16, linalg.CoopMatMatrixUse.MatrixA>;
typealias {p}MB = linalg.CoopMat<half, MemoryScope.Subgroup, 16, 16, linalg.CoopMatMatrixUse.MatrixB>;
typealias {p}MC = linalg.CoopMat<float, MemoryScope.Subgroup, 16, 16, linalg.CoopMatMatrixUse.MatrixAccumulator>;

[shader(\"compute\")]
[numthreads({wg}, 1, 1)]
void main(uint3 gid : SV_GroupID, uint lid : SV_GroupIndex)
{{
",
        b2 = b + 2,
        b3 = b + 3,
        wl = plan.weights_len.max(1),
        bl = plan.biases_len.max(1),
        xl = groups * plan.x_len,
        zl = groups * 16 * zw,
    );
    // staging, once per workgroup
    for l in &plan.layers {
        let _ = writeln!(
            s,
            "    for (uint e = lid; e < {n}u; e += {wg}u) {{ uint o = e / {ip}u; uint i = e % {ip}u; {p}ws[{st}u + o * {stride}u + i] = (o < {od}u && i < {id}u) ? half({w}) : half(0.0); }}",
            n = l.out_p * l.in_p,
            ip = l.in_p,
            st = l.staged,
            stride = l.stride,
            od = l.out_dims,
            id = l.in_dims,
            w = read(&format!("{}u + o * {}u + i", l.weight, l.in_dims)),
        );
        let _ = writeln!(
            s,
            "    for (uint e = lid; e < {op}u; e += {wg}u) {{ {p}bs[{sb}u + e] = e < {od}u ? {bias} : 0.0; }}",
            op = l.out_p,
            sb = l.staged_bias,
            od = l.out_dims,
            bias = read(&format!("{}u + e", l.bias)),
        );
    }
    let _ = write!(
        s,
        "    GroupMemoryBarrierWithGroupSync();
    uint sg = lid / 32u;
    uint lane = lid % 32u;
    uint xb = sg * {x_len}u;
    uint zb = sg * {z_len}u;
    uint len, stride;
    {p}outputs.GetDimensions(len, stride);
    uint n = len / {out_dims}u;
    uint tiles = (n + {r1}u) / {rows}u;
    for (uint tile = gid.x; tile < tiles; tile += WorkgroupCount().x) {{
        uint r0 = tile * {rows}u + sg * {rows_each}u;
        // The subgroup's rows (the last row again past n): encodings in f32, the mlp input as f16.
        for (uint r = lane; r < {rows_each}u; r += 32u) {{
            uint row = min(r0 + r, n - 1u);
            {in_ty} p = {arg};
",
        x_len = plan.x_len,
        z_len = 16 * zw,
        r1 = rows - 1,
        arg = crate::coop::row_input(p, in_dims, &in_ty),
    );
    let ind = "            ";
    let encoding = crate::coop::encoding(program);
    let xs = crate::coop::glsl_encoding(model, &encoding, opts, ind, &mut s);
    let at = format!("{p}xs[xb + r * {sx}u + ");
    crate::coop::store_x_row(&mut s, ind, &at, &xs, &plan.layers[0], "half");
    let _ = writeln!(s, "        }}\n        GroupMemoryBarrierWithWaveSync();");
    let n_last = plan.layers.len() - 1;
    let row_major = "linalg.CoopMatMatrixLayout.RowMajor";
    for (i, l) in plan.layers.iter().enumerate() {
        let (kb, nb) = (l.in_p / 16, l.out_p / 16);
        let _ = writeln!(
            s,
            "        // Layer {i}: {} x {} ({}).",
            l.out_dims,
            l.in_dims,
            l.act.name()
        );
        for m in 0..blocks {
            for nn in 0..nb {
                let _ = writeln!(
                    s,
                    "        {{\n            {p}MC c;\n            c.fill(0.0);"
                );
                for k in 0..kb {
                    let _ = writeln!(
                        s,
                        "            c = linalg.coopMatMulAdd<float, false, half, half, float, MemoryScope.Subgroup, 16, 16, 16>({p}MA.Load<{row_major}, half>({p}xs, xb + {xo}u, {sx}u), {p}MB.Load<linalg.CoopMatMatrixLayout.ColumnMajor, half>({p}ws, {wo}u, {stride}u), c);",
                        xo = m * 16 * sx + k * 16,
                        wo = l.staged + nn * 16 * l.stride + k * 16,
                        stride = l.stride,
                    );
                }
                let _ = writeln!(
                    s,
                    "            c.Store<{row_major}, float>({p}zs, zb + {}u, {zw}u);\n        }}",
                    nn * 16
                );
            }
            let _ = writeln!(s, "        GroupMemoryBarrierWithWaveSync();");
            let z = format!(
                "({p}zs[zb + q * {zw}u + o] + {p}bs[{}u + o])",
                l.staged_bias
            );
            let y = crate::syntax::activation(&crate::syntax::CSyntax, &l.act, "z");
            if i < n_last {
                let _ = writeln!(
                    s,
                    "        for (uint e = lane; e < {tot}u; e += 32u) {{ uint q = e / {op}u; uint o = e % {op}u; float z = {z}; {p}xs[xb + ({m}u * 16u + q) * {sx}u + o] = half({y}); }}",
                    tot = 16 * l.out_p,
                    op = l.out_p,
                );
            } else {
                let _ = writeln!(
                    s,
                    "        for (uint e = lane; e < {tot}u; e += 32u) {{ uint q = e / {out_dims}u; uint o = e % {out_dims}u; uint row = r0 + {m}u * 16u + q; float z = {z}; if (row < n) {{ {p}outputs[row * {out_dims}u + o] = {y}; }} }}",
                    tot = 16 * out_dims,
                );
            }
            let _ = writeln!(s, "        GroupMemoryBarrierWithWaveSync();");
        }
    }
    s.push_str("    }\n}\n");
    Ok(s)
}

/// The header lines of this kernel.
fn entries(
    plan: &TilePlan,
    opts: &Options,
    in_dims: usize,
    out_dims: usize,
    zw: usize,
) -> Vec<String> {
    let p = &opts.prefix;
    let (g, b) = (opts.group, opts.binding);
    let (rows, wg) = (plan.rows, plan.workgroup_size);
    let rows_each = 16 * plan.blocks;
    let mut entries = vec![
        format!(
            "form coop-compute: one compute kernel; each group of 32 invocations (a subgroup) evaluates {rows_each} rows of each tile of {rows} on its own, every mlp layer as 16x16x16 products of Slang's linalg.CoopMat (half A and B, float accumulators, subgroup scope) stored into the subgroup's f32 scratch, from which its lanes add the bias, apply the activation and write the rows back as f16 (the last layer: to the output buffer)"
        ),
        format!(
            "requires: Slang 2026 or later (linalg.CoopMat) targeting SPIR-V with SPV_KHR_cooperative_matrix (Vulkan: VK_KHR_cooperative_matrix listing f16 x f16 -> f32 at 16x16x16 with subgroup scope, shaderFloat16{}); subgroups of exactly 32 invocations; {} bytes of workgroup memory (Vulkan maxComputeSharedMemorySize)",
            if opts.buffer_is_f16() {
                ", storageBuffer16BitAccess for the f16 parameter buffer"
            } else {
                ""
            },
            plan.workgroup_bytes
        ),
        format!(
            "entry point main, [numthreads({wg}, 1, 1)]: n = {p}outputs.GetDimensions() / {out_dims} rows in tiles of {rows}; workgroup w evaluates tiles w, w + G, w + 2G, ... (G = WorkgroupCount().x)"
        ),
        format!(
            "dispatch: (G, 1, 1) workgroups, any G from 1 to 65535; each stages the weights once and then loops over its tiles, so G = min(ceil(n / {rows}), {}) beats one workgroup per tile",
            crate::coop::ROWS_DISPATCH
        ),
        format!(
            "bindings (Vulkan set {g}): {p}params at {b} (the parameter buffer below), {p}inputs at {} (StructuredBuffer<float>; row r = raw inputs [r * {in_dims}, r * {in_dims} + {in_dims})), {p}outputs at {} (RWStructuredBuffer<float>; row r = outputs [r * {out_dims}, r * {out_dims} + {out_dims})); bind exactly n rows of outputs and at least n rows of inputs",
            b + 2,
            b + 3
        ),
        format!(
            "once per workgroup the weights are staged from the parameter buffer into workgroup memory as f16 (each layer's W zero-padded to multiples of 16 rows and columns) and the biases as f32; inputs are encoded in f32, the mlp input and hidden activations are kept as f16 (rows of {} f16), sums are f32 (16 rows of {zw} per subgroup) and outputs are f32",
            plan.sx
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
