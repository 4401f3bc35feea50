//! The GLSL cooperative-matrix kernel with subgroup-private rows: what `--target glsl
//! --form coop-compute` emits wherever its weights fit in workgroup memory (else the
//! shared-tile kernel of [`crate::coop`]). It compiles with glslang and is checked against
//! the CPU by `crates/gpu/tests/tiled_infer.rs` on adapters with cooperative matrices (on
//! the H200 in every shape); there it ran 4-6x faster than the WGSL kernel
//! (docs/PERFORMANCE.md).
//!
//! `GL_KHR_cooperative_matrix` gives an invocation its own elements of an accumulator
//! (`length()`, `[]`) and converts accumulators between component types, so the bias, the
//! activation and the f16 rounding of a layer happen in registers; WGSL's `coop_mat` has
//! neither, which is why the WGSL kernel sends every layer's accumulators through f32
//! scratch and two workgroup barriers. Here each group of 32 invocations (a subgroup)
//! owns `16 · blocks` rows of the workgroup's tile and never waits for another:
//!
//! ```text
//! once:      W_l (f16, out_p × in_p zero-padded, rows `stride` apart) and b_l (f32,
//!            and f16 with `rows_acc16`) staged from the parameter buffer; one
//!            workgroup barrier
//! per tile:  the subgroup's rows: lane r holds row r's raw inputs, read while the
//!            previous tile ran, and reads those of the next tile; it runs the
//!            encodings in f32 and writes the mlp input as f16 into its row of X
//!            (row-major, rows `sx` apart); subgroup barrier
//! per layer: every 16 × in_p block of X into A matrices (registers); subgroup barrier;
//!            for each 16-output block n: C = b (a stride-0 load) + Σ_k A_k · W_(k,n)
//!            (W as a column-major B operand; C f16 in the hidden layers with
//!            `rows_acc16`, else f32), the activation applied to C's elements, C as f16
//!            stored back over X's columns [16n, 16n + 16) of the same rows; subgroup
//!            barrier. The last layer stores C (f32) into the subgroup's output
//!            scratch, from which 32 lanes write whole output rows (consecutive
//!            floats, the last activation applied on the way) to the output buffer.
//! ```
//!
//! At most [`crate::coop::ROWS_DISPATCH`] workgroups: each stages all the weights, and
//! the kernel is bound by latency, not by any one part of its work (docs/PERFORMANCE.md,
//! "The GLSL kernel after its latency work").
//!
//! The layer's A matrices are all loaded before its first store, so X is overwritten in
//! place; a subgroup's rows are its own, so only subgroup barriers follow the staging.

use crate::coop::{TileLayer, TilePlan, X_SKEW};
use crate::ir::Program;
use crate::{Options, RowsSplit, StagedLayout};
use nshade_core::model::Model;
use std::fmt::Write;

/// The shapes tried, best first: (subgroups per workgroup, 16-row blocks per subgroup).
/// More subgroups share one copy of the staged weights and keep more warps resident on
/// each multiprocessor (on the H200 the workgroup memory of all resident workgroups
/// together stays under about 48 KiB, so a kernel that stages its weights runs one or two
/// workgroups per multiprocessor and its warps are its subgroups); more blocks let every
/// weight matrix loaded serve more products. [`plan`] takes the first shape whose rows
/// keep their skew before any unskewed one (bank conflicts cost more than a smaller
/// shape). The orders are those measured on the H200 at 1920x1080 (docs/PERFORMANCE.md,
/// "Subgroups per workgroup"): networks with grid tables (the hash-grid network C: 7.0 G
/// evaluations/s at (4, 2), 3.3-6.6 G otherwise), dense networks at most 32 wide (seed
/// #3: 21.6 G at (8, 2), 19.3 G at (16, 1), 8.5-18.3 G otherwise), wider ones with staged
/// weights (`freq(8) | mlp(64x4, relu)`: 4.3 G at (3, 1), 3.0 G at (2, 1), 1.6-2.2 G
/// otherwise) and with weights read in place (`freq(8) | mlp(128x4, relu)`: 0.57 G at (2,
/// 3), 0.50 G at (3, 2), 0.25-0.44 G otherwise). With `rows_convert` the same orders
/// stand (seed #3: 30.2 G at (8, 2), 30.9 G at (4, 2), 19.2-26.6 G otherwise; the
/// hash-grid network 8.1 G at (4, 2), 4.3-7.3 G otherwise) but for grids and wider mlps,
/// whose X with the conversions holds only the mlp input and the outputs (one row block
/// at a time where that is what fits or lets two workgroups be resident) and whose
/// weights are packed: `freq(8) | mlp(64x4, relu)` 13.1 G at (12, 2), 12.3 G at (11, 2),
/// 11.8 G at (8, 2), 11.2 G at (10, 2), 10.6 G at (4, 2), 10.1 G at (6, 2), 9.5 G at
/// (12, 1); the hash-grid network 12.5 G at (6, 2), 11.7 G at (8, 2), 11.2 G at (4, 2).
fn shapes(grid: bool, width: usize, direct: bool, convert: bool) -> &'static [(usize, usize)] {
    if direct {
        &[
            (2, 3),
            (3, 2),
            (1, 4),
            (2, 2),
            (1, 2),
            (4, 2),
            (2, 1),
            (4, 1),
            (1, 1),
        ]
    } else if grid && convert {
        &[
            (6, 2),
            (8, 2),
            (4, 2),
            (8, 1),
            (2, 1),
            (4, 1),
            (1, 2),
            (2, 2),
            (1, 1),
        ]
    } else if grid {
        &[(4, 2), (8, 1), (2, 1), (4, 1), (1, 2), (2, 2), (1, 1)]
    } else if width <= 32 {
        &[
            (8, 2),
            (16, 1),
            (4, 1),
            (8, 1),
            (2, 2),
            (4, 2),
            (2, 1),
            (1, 2),
            (1, 1),
        ]
    } else if convert {
        &[
            (12, 2),
            (11, 2),
            (8, 2),
            (10, 2),
            (7, 2),
            (4, 2),
            (6, 2),
            (9, 2),
            (12, 1),
            (3, 1),
            (2, 1),
            (2, 2),
            (1, 2),
            (4, 1),
            (1, 1),
        ]
    } else {
        &[(3, 1), (2, 1), (2, 2), (1, 2), (4, 1), (4, 2), (1, 1)]
    }
}

/// The shapes tried for streamed weights ([`Variant::streamed`]), best first:
/// (subgroups, row blocks each, parts of each layer). One workgroup per multiprocessor
/// stages a layer at a time for all its subgroups, so as many subgroups as fit beside
/// the largest layer and the registers allow, two row blocks each (X one block at a
/// time). Measured on the H200 for `freq(8) | mlp(128x4, relu)` (G evaluations/s at
/// 1920x1080, docs/PERFORMANCE.md): whole layers (8, 2) 3.50, (10, 2) 3.09, (7, 2) 3.07,
/// (9, 2) 2.77, (4, 2) 2.77, (6, 2) 2.69; layers in two parts (the last ones, for
/// wider layers and smaller budgets) (8, 2) 3.49, (4, 2) 3.17 (two workgroups
/// resident), (6, 2) 2.63; in four (4, 2) 3.20, (6, 2) 3.21 (so more subgroups in more
/// parts before fewer in two: `freq(8) | mlp(192x3, relu)` takes (8, 2) in four).
const STREAMED_SHAPES: &[(usize, usize, usize)] = &[
    (8, 2, 1),
    (10, 2, 1),
    (7, 2, 1),
    (9, 2, 1),
    (4, 2, 1),
    (6, 2, 1),
    (8, 2, 2),
    (8, 2, 4),
    (6, 2, 4),
    (4, 2, 2),
    (6, 2, 2),
    (2, 2, 2),
    (1, 2, 2),
];

/// The padded output rows of each part of layer `l` staged in `parts` parts (no more
/// parts than 16-output blocks): whole blocks, the last part possibly smaller.
fn part_rows(l: &TileLayer, parts: usize) -> usize {
    let nb = l.out_p / 16;
    16 * nb.div_ceil(parts.clamp(1, nb))
}

/// The shapes tried for weights read from the native buffer ([`Direct::Native`]),
/// best first: nothing but X and the biases in workgroup memory, so registers bound the
/// warps resident.
const NATIVE_SHAPES: &[(usize, usize)] = &[(4, 2), (8, 2), (2, 2), (4, 1), (8, 1), (1, 2), (1, 1)];

/// The skew of staged weight rows, packed or not (f16): their width is then 8 more than
/// a multiple of 16 f16, so the 8 columns of 32 bytes that a phase of a B matrix load
/// reads start 16 bytes apart modulo 128 (all 32 banks).
const W_SKEW: usize = 8;

/// Lays the staged (not direct) layers out packed: each run of consecutive staged layers
/// with the same `out_p` shares rows of the sum of their `in_p` plus [`W_SKEW`] f16,
/// each layer at its column offset; a last layer with padding outputs and rows of its
/// own goes first, [`TileLayer::trimmed`] (its padding rows are the next layers' first
/// rows: `freq(8) | mlp(64x4, relu)` stages 3 rows of 72 f16 instead of 16, which makes
/// room for two more subgroups); returns the staged f16 elements, at least the trimmed
/// layer's window of `out_p` rows.
fn pack(layers: &mut [TileLayer]) -> usize {
    let n = layers.len();
    let trim = n > 0 && {
        let l = &layers[n - 1];
        !l.direct
            && l.out_dims < l.out_p
            && (n == 1 || layers[n - 2].direct || layers[n - 2].out_p != l.out_p)
    };
    let (mut staged, mut window) = (0, 0);
    if trim {
        let l = &mut layers[n - 1];
        l.trimmed = true;
        l.staged = 0;
        l.stride = l.in_p + W_SKEW;
        staged = l.staged_len();
        window = l.out_p * l.stride;
    }
    let layers = &mut layers[..n - usize::from(trim)];
    let mut i = 0;
    while i < layers.len() {
        if layers[i].direct {
            i += 1;
            continue;
        }
        let out_p = layers[i].out_p;
        let end = (i..layers.len())
            .find(|&j| layers[j].direct || layers[j].out_p != out_p)
            .unwrap_or(layers.len());
        let stride = layers[i..end].iter().map(|l| l.in_p).sum::<usize>() + W_SKEW;
        let mut col = 0;
        for l in &mut layers[i..end] {
            l.staged = staged + col;
            l.stride = stride;
            col += l.in_p;
        }
        staged += out_p * stride;
        i = end;
    }
    staged.max(window)
}

/// Workgroup memory that the workgroups resident on one multiprocessor share on the H200's
/// driver (measured: docs/PERFORMANCE.md, "Subgroups per workgroup"), whatever the
/// hardware has: two workgroups are resident only where each takes at most half.
pub(crate) const RESIDENT_BYTES: usize = 48 * 1024;

/// Which layers read their weights straight from the parameter buffer instead of
/// staging them in workgroup memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direct {
    /// None (an f32 parameter buffer: the products need f16 operands).
    Never,
    /// With an f16 buffer, where staging every layer does not fit: every layer whose
    /// dimensions are multiples of 16 and whose weights start 16 bytes aligned.
    WhenNeeded,
    /// Every such layer (`Options::rows_direct`, for measurements).
    Always,
    /// Every layer, from the buffer in the matrices' register layout that
    /// [`write_pack`] writes (`Options::rows_native`): any dimensions.
    Native,
}

/// Whether layer `l` of an f16 parameter buffer can be read as B matrices in place:
/// whole 16 x 16 blocks, rows of a multiple of 16 bytes, the start 16-byte aligned.
fn direct_ok(l: &nshade_core::module::Linear) -> bool {
    l.in_dims.is_multiple_of(16) && l.out_dims.is_multiple_of(16) && l.weight.is_multiple_of(8)
}

/// The layout of `mlp` (behind grid tables: `grid`) for this kernel within `budget`
/// bytes of workgroup memory: the first of [`shapes`] (or `shape` alone) that fits,
/// skewed weight rows before unskewed ones, staged weights before direct ones
/// (`direct`), with room for f16 biases where the hidden layers accumulate in f16
/// (`acc16`); `None` when none fits.
pub(crate) fn plan(
    mlp: &nshade_core::module::Mlp,
    grid: bool,
    budget: usize,
    shape: Option<(usize, usize)>,
    direct: Direct,
    acc16: bool,
    variant: Variant,
) -> Option<TilePlan> {
    let Variant {
        convert,
        hold,
        layout,
        one_block,
        streamed,
        parts,
    } = variant;
    if streamed && (hold || direct != Direct::Never || !streamable(mlp)) {
        return None;
    }
    let native = direct == Direct::Native;
    let modes: &[bool] = match direct {
        Direct::Never => &[false],
        Direct::WhenNeeded => &[false, true],
        Direct::Always | Direct::Native => &[true],
    };
    let width = mlp.layers.iter().map(|l| l.out_dims).max().unwrap_or(0);
    // held weights are read from workgroup memory once: rows without skew; else the
    // order of `StagedLayout` (`layout` asks for one)
    let layouts = match (hold, layout) {
        // streamed: one layer at a time in skewed rows of its own
        _ if streamed => vec![StagedLayout::Rows],
        (true, _) => vec![StagedLayout::Rows],
        (false, None) => vec![
            StagedLayout::Packed,
            StagedLayout::Rows,
            StagedLayout::Blocked,
        ],
        (false, Some(l)) => vec![l],
    };
    let skew = if hold { 0 } else { W_SKEW };
    for &use_direct in modes {
        // (groups, blocks, parts of each streamed layer)
        let order: Vec<(usize, usize, usize)> = match (shape, streamed) {
            (Some((g, b)), true) => match parts {
                Some(n) => vec![(g, b, n)],
                None => vec![(g, b, 1), (g, b, 2), (g, b, 4)],
            },
            (None, true) => STREAMED_SHAPES
                .iter()
                .filter(|s| parts.is_none_or(|n| s.2 == n))
                .copied()
                .chain(parts.map(|n| (8, 2, n)))
                .collect(),
            (Some((g, b)), false) => vec![(g, b, 1)],
            (None, false) if native => NATIVE_SHAPES.iter().map(|&(g, b)| (g, b, 1)).collect(),
            (None, false) => shapes(grid, width, use_direct, convert)
                .iter()
                .map(|&(g, b)| (g, b, 1))
                .collect(),
        };
        for &layout in &layouts {
            for &(groups, blocks, parts) in &order {
                let shape = Shape {
                    groups,
                    blocks,
                    layout,
                    skew,
                    use_direct,
                    native,
                    streamed,
                    parts,
                };
                if let Some(p) = plan_shape(mlp, budget, shape, acc16, convert, one_block) {
                    return Some(p);
                }
            }
        }
    }
    None
}

/// What the kernel of [`plan`] is asked to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Variant {
    /// `Options::rows_convert`, `Options::rows_hold`, `Options::rows_layout`.
    pub convert: bool,
    pub hold: bool,
    pub layout: Option<StagedLayout>,
    /// With the conversions and two row blocks per subgroup, X may hold one block at a
    /// time (not for `RowsSplit::EncodeOnly`, whose outputs are X's).
    pub one_block: bool,
    /// The weights do not fit staged all at once: each layer's are staged in turn, per
    /// tile, into one region sized for the largest (skewed rows; an f16 parameter buffer
    /// whose layers start and have rows 16 bytes aligned, read 16 bytes at a time, one
    /// layer ahead into registers: see [`streamable`]).
    pub streamed: bool,
    /// With `streamed`, the parts each layer's outputs are staged in (`None`: the
    /// planner's choice, [`STREAMED_SHAPES`]); `Some` also streams weights that fit.
    pub parts: Option<usize>,
}

/// Whether every layer of `mlp` can be staged per tile from an f16 parameter buffer 16
/// bytes at a time: its weights start at a multiple of 8 f16 and its rows are a multiple
/// of 8 f16 long.
pub(crate) fn streamable(mlp: &nshade_core::module::Mlp) -> bool {
    mlp.layers
        .iter()
        .all(|l| l.weight.is_multiple_of(8) && l.in_dims.is_multiple_of(8))
}

/// One candidate of [`plan`]: (subgroups, 16-row blocks per subgroup), the staged
/// weights' layout (with `skew` f16 per row for [`StagedLayout::Rows`]), and whether the
/// layers that can read the f16 buffer in place do.
#[derive(Clone, Copy, Debug)]
struct Shape {
    groups: usize,
    blocks: usize,
    layout: StagedLayout,
    skew: usize,
    use_direct: bool,
    /// With `use_direct`: every layer, from the native buffer ([`Direct::Native`]).
    native: bool,
    /// Each layer staged in turn per tile at offset 0 ([`Variant::streamed`]), in
    /// `parts` parts of its outputs.
    streamed: bool,
    parts: usize,
}

/// [`plan`] for one shape; `convert`: the hidden layers' activations stay in registers
/// (`Options::rows_convert`), so X holds only the mlp input, and the last layer's
/// outputs, accumulated in f32 and rounded to f16, go over X's rows instead of a scratch
/// of their own (X's rows then at least `out_p + X_SKEW` wide; the f32 outputs stored
/// over X as f16 pairs put X's rows 64 bytes apart, where a subgroup's stores and loads
/// of 8 rows meet in 4 banks: seed #3 ran at 31.6 G evaluations/s that way on the H200
/// and at 40.7 G this way, docs/PERFORMANCE.md); `one_block`: with the conversions and
/// two row blocks, X holds one block at a time (see [`TilePlan::x_one_block`]).
fn plan_shape(
    mlp: &nshade_core::module::Mlp,
    budget: usize,
    shape: Shape,
    acc16: bool,
    convert: bool,
    one_block: bool,
) -> Option<TilePlan> {
    let Shape {
        groups,
        blocks,
        layout,
        skew,
        use_direct,
        native,
        streamed,
        parts,
    } = shape;
    let mut layers = Vec::new();
    let (mut staged, mut staged_bias) = (0, 0);
    for l in &mlp.layers {
        let direct = use_direct && (native || direct_ok(l));
        let t = match layout {
            // every layer at 0: the region is as large as the largest
            StagedLayout::Rows if streamed => TileLayer::of(l, skew, 0, staged_bias, false),
            StagedLayout::Rows => TileLayer::of(l, skew, staged, staged_bias, direct),
            // placed by `pack` below
            StagedLayout::Packed => TileLayer::of(l, 0, 0, staged_bias, direct),
            StagedLayout::Blocked => {
                TileLayer::of(l, 0, staged, staged_bias, direct).into_blocked()
            }
        };
        if streamed {
            staged = staged.max(part_rows(&t, parts) * t.stride);
        } else if !t.direct {
            staged += t.staged_len();
        }
        staged_bias += t.out_p;
        layers.push(t);
    }
    if layout == StagedLayout::Packed {
        staged = pack(&mut layers);
    }
    let widest = layers
        .iter()
        .map(|l| l.in_p.max(l.out_p))
        .max()
        .unwrap_or(16);
    let out_p = layers.last().map_or(16, |l| l.out_p);
    // with `convert`, X holds the mlp input alone and the outputs
    let sx = if convert {
        layers[0].in_p.max(out_p) + X_SKEW
    } else {
        widest + X_SKEW
    };
    let rows_each = 16 * blocks;
    // with `convert` the outputs go over X: no scratch
    let z_len = if convert { 0 } else { rows_each * out_p };
    // biases f32; where the hidden layers accumulate in f16, theirs as f16 and the last
    // layer's alone as f32
    let bias_bytes = if acc16 {
        (staged_bias - out_p) * 2 + out_p * 4
    } else {
        staged_bias * 4
    };
    // the workgroup's bytes with X for `x_rows` rows per subgroup
    let bytes_with =
        |x_rows: usize| staged * 2 + bias_bytes + groups * (x_rows * sx * 2 + z_len * 4);
    // X for one block at a time (where the last layer's accumulators all live at once)
    // where X for both does not fit, or where one block lets two workgroups be resident
    // on a multiprocessor and both do not (measured on the H200, docs/PERFORMANCE.md:
    // `freq(8) | mlp(64x4, relu)` 11.7 G evaluations/s at (8, 2), which fits only this
    // way, against 10.2 G at (4, 2) with X for both blocks and 9.2 G without; the
    // hash-grid network at (4, 2) 11.0 G against 8.1 G; seed #3's held kernel, resident
    // twice either way, 34.5 G against 40.7 G)
    let x_one_block = one_block && convert && blocks == 2 && out_p <= 64 && {
        let (whole, one) = (bytes_with(rows_each), bytes_with(16));
        whole > budget || (whole > RESIDENT_BYTES / 2 && one <= RESIDENT_BYTES / 2)
    };
    let x_rows = if x_one_block { 16 } else { rows_each };
    let bytes = bytes_with(x_rows);
    (bytes <= budget).then_some(TilePlan {
        workgroup_size: 32 * groups,
        rows: groups * rows_each,
        sx,
        per: 0,
        streamed,
        stream_parts: if streamed { parts } else { 1 },
        layers,
        weights_len: staged,
        biases_len: if acc16 { out_p } else { staged_bias },
        x_len: x_rows * sx,
        workgroup_bytes: bytes,
        blocks,
        output_groups: 0,
        outputs_over_x: convert,
        x_one_block,
        native,
    })
}

/// The complete GLSL 450 compute shader of `plan` (from [`plan`]).
pub(crate) fn write(model: &Model, program: &Program, opts: &Options, plan: &TilePlan) -> String {
    let p = &opts.prefix;
    let (in_dims, out_dims) = (program.in_dims, program.out_dims);
    let wg = plan.workgroup_size;
    let groups = wg / 32;
    let (rows, sx, blocks) = (plan.rows, plan.sx, plan.blocks);
    let rows_each = 16 * blocks;
    let last = plan.layers.last().expect("an mlp has layers");
    let zw = last.out_p;
    let z_len = rows_each * zw;
    let f16 = opts.buffer_is_f16();
    let acc16 = opts.rows_acc16;
    let tex = opts.texture_io;
    let convert = opts.rows_convert;
    // X and the staged weights as uvec4 (8 f16 each): rows and weights stored 16 bytes
    // at a time; the matrices' offsets and strides in those units (`xu`). Not where the
    // weights are held (`Options::rows_narrow`: measured slower there)
    let wide = !opts.rows_narrow.unwrap_or(opts.rows_hold);
    let xu = if wide { 8 } else { 1 };
    let sxu = sx / xu;
    // the last layer's outputs over X (f16): where the plan has no output scratch
    let over_x = plan.outputs_over_x;
    let extensions = format!(
        "{}{}",
        // texelFetch on a texture2D without a sampler
        if tex {
            "#extension GL_EXT_samplerless_texture_functions : require\n"
        } else {
            ""
        },
        // accumulators converted into A matrices
        if convert {
            "#extension GL_NV_cooperative_matrix2 : require\n"
        } else {
            ""
        }
    );
    let (mut s, in_ty) = crate::coop::glsl_head(
        model,
        opts,
        (in_dims, out_dims, wg),
        (true, true, &extensions),
        entries(plan, opts, in_dims, out_dims),
    );
    let (ma, mb, mc, mh) = crate::coop::glsl_mats();
    let _ = write!(
        s,
        "
layout(local_size_x = {wg}) in;

{buffers}
// Staged weights (f16{eight}) and biases (f32{bnote}); each subgroup's {xrows} of {xwhat} (f16{eight},
// row-major, rows of {sx}) and of the last layer's outputs ({over}).
shared {wty} {p}ws[{wl}];
shared float {p}bs[{bl}];{bh}
shared {wty} {p}xs[{xl}];{zdecl}

// All loads and stores of shared memory by this subgroup so far are visible to it.
void {p}sync() {{
    subgroupMemoryBarrierShared();
    subgroupBarrier();
}}
{xh}
void main() {{
    uint lid = gl_LocalInvocationIndex;
    uint sgid = lid / 32u;
    uint lane = lid % 32u;
    uint xb = sgid * {x_len}u;{zb}
",
        xwhat = if convert { "the mlp input" } else { "X" },
        bnote = if acc16 {
            ": the last layer's; the hidden layers' as f16 in bh"
        } else {
            ""
        },
        xrows = if plan.x_one_block {
            format!("{rows_each} rows, 16 at a time,")
        } else {
            format!("{rows_each} rows")
        },
        over = if over_x {
            "rounded to f16, over X's rows".to_string()
        } else {
            format!("f32, rows of {zw}")
        },
        zdecl = if over_x {
            String::new()
        } else {
            format!("\nshared float {p}zs[{}];", groups * z_len)
        },
        zb = if over_x {
            String::new()
        } else {
            format!("\n    uint zb = sgid * {z_len}u;")
        },
        buffers = if tex {
            let (g, b) = (opts.group, opts.binding);
            format!(
                "{};
layout(set = {g}, binding = {}) uniform texture2D {p}input_tex;
layout(set = {g}, binding = {}, rgba32f) uniform writeonly image2D {p}output_tex;
",
                crate::coop::glsl_params_decl(model, opts),
                b + 2,
                b + 3
            )
        } else {
            crate::coop::glsl_buffers(model, opts)
        } + &if plan.native {
            format!(
                "// Every weight matrix in the cooperative matrices' register layout (written by the
// pack kernel): matrix t's lane l holds its 8 f16 at element 32 t + l.
layout(std430, set = {}, binding = {}) readonly buffer {p}NativeW {{ uvec4 {p}wnat[]; }};
",
                opts.group,
                opts.binding + 1
            )
        } else if plan.streamed {
            format!(
                "// The f16 parameters again, 8 to an element: the weights staged per tile are read 16
// bytes at a time.
layout(std430, set = {}, binding = {}) readonly buffer {p}ParamsV {{ uvec4 {p}paramsv[]; }};
",
                opts.group, opts.binding
            )
        } else {
            String::new()
        },
        wty = if wide { "uvec4" } else { "float16_t" },
        eight = if wide { ", 8 to a uvec4" } else { "" },
        wl = plan.weights_len.div_ceil(xu).max(1),
        bl = plan.biases_len.max(1),
        xl = groups * plan.x_len / xu,
        x_len = plan.x_len / xu,
        xh = if wide {
            format!(
                "
// Element e of X (f16), 8 to a uvec4.
float16_t {p}xh(uint e) {{
    return unpackFloat2x16({p}xs[e / 8u][(e / 2u) % 4u])[e % 2u];
}}
"
            )
        } else {
            String::new()
        },
        bh = crate::coop::glsl_bh_decl(p, plan, acc16),
    );
    let d = &crate::coop::GLSL;
    let stage = |l: &TileLayer, ind: &str| {
        if l.direct {
            return String::new();
        }
        let read = crate::coop::glsl_f32(crate::coop::weight_read(p, l), f16);
        if wide {
            stage_wide(p, wg, l, &read, ind)
        } else {
            crate::coop::stage_weights(d, p, wg, l, &read, ind)
        }
    };
    let bread = |l: &TileLayer| crate::coop::glsl_f32(format!("{p}params[{}u + e]", l.bias), f16);
    // with f16 accumulation the hidden layers' biases go to bh instead, as f16
    crate::coop::stage_biases(d, &mut s, plan, p, &stage, &bread, acc16);
    // streamed: layer i + 1's weights (16-byte chunks) read into registers while layer i
    // runs, stored into ws between two barriers after it; layer 0's before the tiles
    let fetch = Stream::new(plan, wide);
    if plan.streamed {
        let _ = writeln!(
            s,
            "    // Each layer's weights in turn: 16-byte chunks read into registers a layer ahead.\n    {}",
            fetch.declare()
        );
        s.push_str(&fetch.read(p, &plan.layers, 0, "    "));
        s.push_str(&fetch.store(p, &plan.layers, 0, false, "    "));
    }
    let split = opts.rows_split;
    // (layer, k, n) of the products' weight matrices: itself, or (OneWeight) the first
    let wkey = |i: usize, k: usize, nn: usize| {
        if split == RowsSplit::OneWeight {
            (i, 0, 0)
        } else {
            (i, k, nn)
        }
    };
    // W^T block (k, n) of layer i as a column-major B: staged rows of `stride`, or in
    // place in the f16 buffer (rows of in_dims)
    // (streamed: `n0` the first output block staged, at ws's start)
    let native = plan.native;
    let bases = native_bases(&plan.layers);
    let wload = |i: usize, var: &str, k: usize, nn: usize, n0: usize| {
        let l = &plan.layers[i];
        if native {
            // the lane's 8 f16 of the matrix, one 16-byte load
            let t = bases[i] + nn * (l.in_p / 16) + k;
            return format!(
                "{mb} {var}; {{ uvec4 q = {p}wnat[{}u + lane]; f16vec2 h0 = unpackFloat2x16(q.x), h1 = unpackFloat2x16(q.y), h2 = unpackFloat2x16(q.z), h3 = unpackFloat2x16(q.w); {var}[0] = h0.x; {var}[1] = h0.y; {var}[2] = h1.x; {var}[3] = h1.y; {var}[4] = h2.x; {var}[5] = h2.y; {var}[6] = h3.x; {var}[7] = h3.y; }}",
                t * 32
            );
        }
        let (arr, wo, stride) = if l.direct {
            ("params", l.weight + nn * 16 * l.in_dims + k * 16, l.in_dims)
        } else {
            let at = l.block_at(k, nn.saturating_sub(n0));
            debug_assert!(at.is_multiple_of(xu) && l.stride.is_multiple_of(xu));
            ("ws", at / xu, l.stride / xu)
        };
        format!(
            "{mb} {var}; coopMatLoad({var}, {p}{arr}, {wo}u, {stride}u, gl_CooperativeMatrixLayoutColumnMajor);"
        )
    };
    if opts.rows_hold {
        s.push_str(
            "    barrier();\n    // Every weight matrix, held in registers for all the rows.\n",
        );
        let mut held = std::collections::BTreeSet::new();
        for (i, l) in plan.layers.iter().enumerate() {
            for k in 0..l.in_p / 16 {
                for nn in 0..l.out_p / 16 {
                    let (a, b, c) = wkey(i, k, nn);
                    if held.insert((a, b, c)) {
                        let _ = writeln!(s, "    {}", wload(a, &format!("w{a}_{b}_{c}"), b, c, 0));
                    }
                }
            }
        }
    }
    let (arg, n_decl) = if tex {
        // row r is texel (r % W, r / W); its first in_dims channels are the inputs
        let swizzle = &"xyzw"[..in_dims];
        (
            format!(
                "texelFetch({p}input_tex, ivec2(int(row % width), int(row / width)), 0).{swizzle}"
            ),
            format!(
                "uint width = uint(textureSize({p}input_tex, 0).x);\n    uint n = width * uint(textureSize({p}input_tex, 0).y);"
            ),
        )
    } else {
        (
            crate::coop::row_input(p, in_dims, &in_ty),
            format!("uint n = uint({p}outputs.length()) / {out_dims}u;"),
        )
    };
    let _ = write!(
        s,
        "    barrier();
    {n_decl}
    uint tiles = (n + {r1}u) / {rows}u;
",
        r1 = rows - 1,
    );
    let one = plan.x_one_block;
    let kb0 = plan.layers[0].in_p / 16;
    // streamed: at the start of a tile, stage 1's chunks read (stage 0's are staged)
    let ahead = if plan.streamed && opts.rows_split != RowsSplit::EncodeOnly {
        format!(
            "\n{}",
            fetch.read(p, &plan.layers, 1, "        ").trim_end()
        )
    } else {
        String::new()
    };
    if rows_each <= 32 {
        // lane r reads row r of the subgroup's rows of the next tile while this one runs
        let rows_loop = if one {
            // every lane a row; layer 0's A matrices declared here, loaded block by block
            let decl: Vec<String> = (0..blocks)
                .flat_map(|m| (0..kb0).map(move |k| (m, k)))
                .map(|(m, k)| format!("{ma} a{m}_{k};"))
                .collect();
            format!(
                "        // The subgroup's rows, one per lane: encodings in f32, the mlp input as f16
        // through X one block of 16 rows at a time, into layer 0's A matrices.
        {}
        {{
            uint r = lane;",
                decl.join(" ")
            )
        } else {
            format!(
                "        // The subgroup's rows: encodings in f32, the mlp input as f16.
        for (uint r = lane; r < {rows_each}u; r += 32u) {{"
            )
        };
        let _ = write!(
            s,
            "    uint tile = gl_WorkGroupID.x;
    // Lane r < {rows_each} holds the raw inputs of row r of the subgroup's rows of the next
    // tile, read while the current tile runs (the last row again past n).
    {in_ty} pnext = {in_ty}(0.0);
    if (tile < tiles) {{ uint row = min(tile * {rows}u + sgid * {rows_each}u + lane, n - 1u); pnext = {arg}; }}
    for (; tile < tiles; tile += gl_NumWorkGroups.x) {{
        uint r0 = tile * {rows}u + sgid * {rows_each}u;{ahead}
        {in_ty} pcur = pnext;
        uint tn = tile + gl_NumWorkGroups.x;
        if (tn < tiles) {{ uint row = min(tn * {rows}u + sgid * {rows_each}u + lane, n - 1u); pnext = {arg}; }}
{rows_loop}
            {in_ty} p = pcur;
",
        );
    } else {
        let _ = write!(
            s,
            "    for (uint tile = gl_WorkGroupID.x; tile < tiles; tile += gl_NumWorkGroups.x) {{
        uint r0 = tile * {rows}u + sgid * {rows_each}u;{ahead}
        // The subgroup's rows (the last row again past n): encodings in f32, the mlp input as f16.
        for (uint r = lane; r < {rows_each}u; r += 32u) {{
            uint row = min(r0 + r, n - 1u);
            {in_ty} p = {arg};
",
        );
    }
    let ind = "            ";
    let xs = if split == RowsSplit::NoEncode {
        // a constant mlp input: the layers alone
        (0..plan.layers[0].in_dims)
            .map(|j| format!("{}", 0.25 + 0.5 * (j % 2) as f32))
            .collect()
    } else {
        let encoding = crate::coop::encoding(program);
        crate::coop::glsl_encoding(model, &encoding, opts, ind, &mut s)
    };
    // the mlp input of the subgroup's row `row` into X
    let store_row = |s: &mut String, ind: &str, row: &str| {
        if wide {
            store_x_row_wide(
                s,
                ind,
                &format!("{p}xs[xb + {row} * {sxu}u + "),
                &xs,
                &plan.layers[0],
            );
        } else {
            let at = format!("{p}xs[xb + {row} * {sx}u + ");
            crate::coop::store_x_row(s, ind, &at, &xs, &plan.layers[0], "float16_t");
        }
    };
    if one {
        for m in 0..blocks {
            let _ = writeln!(s, "{ind}if (r / 16u == {m}u) {{");
            store_row(&mut s, &format!("{ind}    "), "(r % 16u)");
            let _ = writeln!(s, "{ind}}}\n{ind}{p}sync();");
            for k in 0..kb0 {
                let _ = writeln!(
                    s,
                    "{ind}coopMatLoad(a{m}_{k}, {p}xs, xb + {off}u, {sxu}u, gl_CooperativeMatrixLayoutRowMajor);",
                    off = k * 16 / xu
                );
            }
            if m + 1 < blocks {
                let _ = writeln!(s, "{ind}{p}sync();");
            }
        }
        let _ = writeln!(s, "        }}");
    } else {
        store_row(&mut s, ind, "r");
        let _ = writeln!(s, "        }}\n        {p}sync();");
    }
    // the last layer's output o of the subgroup's row r as f32 (an expression)
    let xel = |o: &str| {
        if wide {
            format!("float({p}xh(xb * 8u + r * {sx}u + {o}))")
        } else {
            format!("float({p}xs[xb + r * {sx}u + {o}])")
        }
    };
    let z = |o: &str| {
        if over_x {
            xel(o)
        } else {
            format!("{p}zs[zb + r * {zw}u + {o}]")
        }
    };
    // output o of the subgroup's row r (expressions)
    let out = |o: &str| {
        if split == RowsSplit::EncodeOnly {
            xel(o)
        } else if split == RowsSplit::NoActivation {
            z(o)
        } else {
            // the last layer's activation, on the outputs alone
            crate::syntax::activation(&crate::syntax::CSyntax, &last.act, &z(o))
        }
    };
    // the outputs of the `nrows` rows from row `base` (X's or the scratch's rows from 0)
    // to the output buffer or texture, and a subgroup barrier
    let outputs = |s: &mut String, base: &str, nrows: usize| {
        if tex {
            // whole texels: the outputs, then 0, and alpha 1 where the model has no 4th
            let texel: Vec<String> = (0..4)
                .map(|k| match k {
                    k if k < out_dims => out(&format!("{k}u")),
                    3 => "1.0".to_string(),
                    _ => "0.0".to_string(),
                })
                .collect();
            let _ = writeln!(
                s,
                "        // The subgroup's output rows: one texel each.
        for (uint r = lane; r < {nrows}u; r += 32u) {{
            uint row = {base} + r;
            if (row < n) {{ imageStore({p}output_tex, ivec2(int(row % width), int(row / width)), vec4({})); }}
        }}
        {p}sync();",
                texel.join(", ")
            );
        } else {
            let _ = writeln!(
                s,
                "        // The subgroup's output rows: {nrows} x {out_dims} consecutive floats.
        for (uint e = lane; e < {tot}u; e += 32u) {{
            uint r = e / {out_dims}u; uint o = e % {out_dims}u;
            if ({base} + r < n) {{ {p}outputs[{base} * {out_dims}u + e] = {out}; }}
        }}
        {p}sync();",
                tot = nrows * out_dims,
                out = out("o"),
            );
        }
    };
    let n_last = plan.layers.len() - 1;
    // EncodeOnly: no layers; the mlp input's first columns are the outputs (so the
    // encoding is not dead code)
    let layers = if split == RowsSplit::EncodeOnly {
        &plan.layers[..0]
    } else {
        &plan.layers[..]
    };
    for (i, l) in layers.iter().enumerate() {
        let (kb, nb) = (l.in_p / 16, l.out_p / 16);
        let _ = writeln!(
            s,
            "        // Layer {i}: {} x {} ({}).",
            l.out_dims,
            l.in_dims,
            l.act.name()
        );
        let is_last = i == n_last;
        // with `convert`, the hidden layers' outputs become the next layer's A matrices
        // (y{i+1}_m_n) in registers; only layer 0 reads X
        if convert && !is_last {
            for m in 0..blocks {
                for nn in 0..nb {
                    let _ = writeln!(s, "        {ma} y{}_{m}_{nn};", i + 1);
                }
            }
        }
        let _ = writeln!(s, "        {{");
        // the layer's stages (parts of its outputs; one unless streamed): while each
        // runs the next one's chunks are read (layer 0's first: at the start of the tile)
        let stages = fetch.of_layer(i);
        let from_x = !convert || i == 0;
        // (with `one`, layer 0's A matrices were loaded with the mlp input)
        if from_x && !one {
            for m in 0..blocks {
                for k in 0..kb {
                    let _ = writeln!(
                        s,
                        "            {ma} a{m}_{k}; coopMatLoad(a{m}_{k}, {p}xs, xb + {off}u, {sxu}u, gl_CooperativeMatrixLayoutRowMajor);",
                        off = (m * 16 * sx + k * 16) / xu
                    );
                }
            }
        }
        // the layer's stores into X come after every load of it (with `convert` it
        // stores nothing there, but with `over_x` a one-layer mlp's outputs)
        if !convert || (over_x && from_x && is_last && !one) {
            let _ = writeln!(s, "            {p}sync();");
        }
        let a_name = |m: usize, k: usize| {
            if from_x {
                format!("a{m}_{k}")
            } else {
                format!("y{i}_{m}_{k}")
            }
        };
        // f16 accumulation (`acc16`) for the hidden layers; the last layer's activation
        // is applied to the outputs alone, in the output loop
        let h = acc16 && !is_last;
        let (acc, barr) = if h { (&mh, "bh") } else { (&mc, "bs") };
        let y = if h {
            activation_f16(&l.act)
        } else {
            crate::syntax::activation(&crate::syntax::CSyntax, &l.act, "z")
        };
        let ety = if h { "float16_t" } else { "float" };
        // Output blocks in groups of `ng`: `ng · blocks` independent accumulators, so a
        // weight matrix loaded serves `blocks` products and consecutive products do not
        // wait on each other (at most 8 accumulators live: 64 f32 registers per lane).
        let ng = (8 / blocks).clamp(1, nb);
        for (pi, &j) in stages.iter().enumerate() {
            let part = &fetch.stages[j].1;
            if plan.streamed && (i > 0 || pi > 0) {
                s.push_str(&fetch.read(p, &plan.layers, j + 1, "            "));
            }
            for n0 in part.clone().step_by(ng) {
                let group: Vec<usize> = (n0..(n0 + ng).min(part.end)).collect();
                for &nn in &group {
                    for m in 0..blocks {
                        if split == RowsSplit::NoBias {
                            let _ = writeln!(s, "            {acc} c{m}_{nn} = {acc}(0.0);");
                        } else {
                            // (with f16 accumulation the last layer's f32 biases are at 0)
                            let at = if acc16 && is_last { 0 } else { l.staged_bias };
                            let _ = writeln!(
                                s,
                                "            {acc} c{m}_{nn}; coopMatLoad(c{m}_{nn}, {p}{barr}, {bo}u, 0u, gl_CooperativeMatrixLayoutRowMajor);",
                                bo = at + nn * 16
                            );
                        }
                    }
                }
                for k in 0..kb {
                    for &nn in &group {
                        let (a, b, c) = wkey(i, k, nn);
                        let w = if opts.rows_hold {
                            let _ = writeln!(s, "            {{");
                            format!("w{a}_{b}_{c}")
                        } else {
                            let _ =
                                writeln!(s, "            {{ {}", wload(a, "w", b, c, part.start));
                            "w".to_string()
                        };
                        for m in 0..blocks {
                            let _ = writeln!(
                                s,
                                "              c{m}_{nn} = coopMatMulAdd({}, {w}, c{m}_{nn});",
                                a_name(m, k)
                            );
                        }
                        let _ = writeln!(s, "            }}");
                    }
                }
                for &nn in &group {
                    for m in 0..blocks {
                        let c = format!("c{m}_{nn}");
                        if !matches!(l.act, nshade_core::Activation::None)
                            && split != RowsSplit::NoActivation
                            && !is_last
                        {
                            let _ = writeln!(
                                s,
                                "            for (int e = 0; e < {c}.length(); e++) {{ {ety} z = {c}[e]; {c}[e] = {y}; }}"
                            );
                        }
                        if !is_last {
                            let conv = if h { c.clone() } else { format!("{mh}({c})") };
                            if convert {
                                let _ =
                                    writeln!(s, "            y{}_{m}_{nn} = {ma}({conv});", i + 1);
                            } else {
                                let _ = writeln!(
                                    s,
                                    "            coopMatStore({conv}, {p}xs, xb + {off}u, {sxu}u, gl_CooperativeMatrixLayoutRowMajor);",
                                    off = (m * 16 * sx + nn * 16) / xu
                                );
                            }
                        } else if over_x && !one {
                            let _ = writeln!(
                                s,
                                "            coopMatStore({mh}({c}), {p}xs, xb + {off}u, {sxu}u, gl_CooperativeMatrixLayoutRowMajor);",
                                off = (m * 16 * sx + nn * 16) / xu
                            );
                        } else if !over_x {
                            let _ = writeln!(
                                s,
                                "            coopMatStore({c}, {p}zs, zb + {off}u, {zw}u, gl_CooperativeMatrixLayoutRowMajor);",
                                off = m * 16 * zw + nn * 16
                            );
                        }
                    }
                }
            }
            // streamed: the layer's next part staged (its last part's successor after the
            // layer, below)
            if plan.streamed && pi + 1 < stages.len() {
                s.push_str(&fetch.store(p, &plan.layers, j + 1, true, "            "));
            }
        }
        if one && is_last {
            // block by block over X's 16 rows: the outputs stored, then written out
            for m in 0..blocks {
                for nn in 0..nb {
                    let _ = writeln!(
                        s,
                        "            coopMatStore({mh}(c{m}_{nn}), {p}xs, xb + {off}u, {sxu}u, gl_CooperativeMatrixLayoutRowMajor);",
                        off = nn * 16 / xu
                    );
                }
                let _ = writeln!(s, "            {p}sync();");
                outputs(&mut s, &format!("(r0 + {}u)", 16 * m), 16);
            }
        }
        if (convert && !is_last) || (one && is_last) {
            let _ = writeln!(s, "        }}");
        } else {
            let _ = writeln!(s, "        }}\n        {p}sync();");
        }
        if plan.streamed {
            let last_stage = stages[stages.len() - 1];
            s.push_str(&fetch.store(p, &plan.layers, last_stage + 1, true, "        "));
        }
    }
    if !one {
        outputs(&mut s, "r0", rows_each);
    }
    s.push_str("    }\n}\n");
    s
}

/// The first native matrix of each layer ([`Direct::Native`]): a layer's 16 x 16 blocks
/// of W^T in order of output block, then input block (block (k, n) of layer i is matrix
/// `bases[i] + n * in_p / 16 + k`); the last entry is the count.
pub(crate) fn native_bases(layers: &[TileLayer]) -> Vec<usize> {
    let mut bases = vec![0];
    for l in layers {
        let last = *bases.last().expect("not empty");
        bases.push(last + (l.in_p / 16) * (l.out_p / 16));
    }
    bases
}

/// The pack kernel of [`Direct::Native`]: GLSL 450, one subgroup of 32 invocations per
/// weight matrix (dispatch `native_bases(..).last()` workgroups), each staging its
/// 16 x 16 block of W^T (zero-padded) from the f16 parameter buffer, loading it as the
/// kernel's B matrix and storing each lane's 8 elements as one uvec4 at 32 t + lane of
/// the native buffer; lane 0 of matrix 0 also writes the elements per lane (8 where the
/// layout holds) at the element after the last matrix's.
pub fn write_pack(opts: &Options, plan: &TilePlan) -> String {
    let p = &opts.prefix;
    let (g, b) = (opts.group, opts.binding);
    let bases = native_bases(&plan.layers);
    let total = *bases.last().expect("not empty");
    let mut find = String::new();
    for (i, l) in plan.layers.iter().enumerate() {
        let _ = writeln!(
            find,
            "    {}if (t < {}u) {{ u = t - {}u; kb = {}u; w0 = {}u; id = {}u; od = {}u; }}",
            if i == 0 { "" } else { "else " },
            bases[i + 1],
            bases[i],
            l.in_p / 16,
            l.weight,
            l.in_dims,
            l.out_dims
        );
    }
    format!(
        "#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
// nshade pack kernel, generated by nshade-shader {version}: regenerate it with `nshade export
// --native-weights` rather than edit it. It writes the native weight buffer that the
// coop-compute kernel exported with it reads: every 16 x 16 block of each layer's W^T
// (zero-padded), {total} matrices, loaded as that kernel's B matrices
// (coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>) and stored lane by lane,
// matrix t's lane l holding its 8 f16 elements at uvec4 32 t + l.
// bindings: {p}params layout(set = {g}, binding = {b}) (the f16 parameter buffer, as the
// kernel's), {p}wnat layout(set = {g}, binding = {b1}) (at least {bytes} bytes, read-write).
// dispatch: ({total}, 1, 1) workgroups of 32 invocations (one subgroup of exactly 32),
// once per set of weights, on the device that runs the kernel; then uvec4 32 x {total}
// holds the elements per lane: the layout (and the kernel) is valid only where it is 8.
// requires: GL_KHR_cooperative_matrix (f16 at 16x16 with subgroup scope),
// GL_EXT_shader_16bit_storage; 512 bytes of workgroup memory.
layout(local_size_x = 32) in;
layout(std430, set = {g}, binding = {b}) readonly buffer {p}Params {{ float16_t {p}params[]; }};
layout(std430, set = {g}, binding = {b1}) writeonly buffer {p}NativeW {{ uvec4 {p}wnat[]; }};
shared float16_t {p}ts[256];
void main() {{
    uint t = gl_WorkGroupID.x;
    uint lane = gl_LocalInvocationIndex;
    uint u = 0u, kb = 1u, w0 = 0u, id = 0u, od = 0u;
{find}    uint k = u % kb, n = u / kb;
    // block (k, n) of W^T column-major: element (i, o) at o * 16 + i
    for (uint e = lane; e < 256u; e += 32u) {{
        uint o = n * 16u + e / 16u, i = k * 16u + e % 16u;
        {p}ts[e] = (o < od && i < id) ? {p}params[w0 + o * id + i] : float16_t(0.0);
    }}
    barrier();
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> w;
    coopMatLoad(w, {p}ts, 0u, 16u, gl_CooperativeMatrixLayoutColumnMajor);
    uvec4 q = uvec4(0u);
    if (w.length() == 8) {{
        q = uvec4(packFloat2x16(f16vec2(w[0], w[1])), packFloat2x16(f16vec2(w[2], w[3])), packFloat2x16(f16vec2(w[4], w[5])), packFloat2x16(f16vec2(w[6], w[7])));
    }}
    {p}wnat[t * 32u + lane] = q;
    if (t == 0u && lane == 0u) {{ {p}wnat[{total}u * 32u] = uvec4(uint(w.length())); }}
}}
",
        b1 = b + 1,
        bytes = (total + 1) * 512,
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// The layers' stages (layer, its 16-output blocks), one per layer unless the plan is
/// streamed, and the per-tile staging of a streamed plan ([`Variant::streamed`]): its
/// stages are the layers' parts in order, cyclic over the tiles; while stage
/// j runs, each invocation reads its 16-byte chunks (8 f16 of one weight row) of stage
/// j + 1 into registers `wp0..` (zero in the padding), and after it stores them into
/// the stage's skewed rows in `ws`, between two workgroup barriers.
struct Stream {
    wg: usize,
    /// `ws` holds uvec4s: a chunk is one store.
    wide: bool,
    /// The most chunks an invocation holds (for the largest stage); 0 when not streamed.
    regs: usize,
    /// (layer, its output blocks in this stage), in order.
    stages: Vec<(usize, std::ops::Range<usize>)>,
}

impl Stream {
    fn new(plan: &TilePlan, wide: bool) -> Stream {
        let wg = plan.workgroup_size;
        let mut stages = Vec::new();
        for (i, l) in plan.layers.iter().enumerate() {
            // (`stream_parts` is 1 unless streamed)
            let (nb, bp) = (l.out_p / 16, part_rows(l, plan.stream_parts) / 16);
            for a in (0..nb).step_by(bp) {
                stages.push((i, a..(a + bp).min(nb)));
            }
        }
        let regs = if plan.streamed {
            stages
                .iter()
                .map(|(i, r)| Self::chunks(&plan.layers[*i], r).div_ceil(wg))
                .max()
                .unwrap_or(0)
        } else {
            0
        };
        Stream {
            wg,
            wide,
            regs,
            stages,
        }
    }

    /// The stages of layer `i`, in order.
    fn of_layer(&self, i: usize) -> Vec<usize> {
        (0..self.stages.len())
            .filter(|&j| self.stages[j].0 == i)
            .collect()
    }

    /// The padded weights of output blocks `r` of layer `l` in 16-byte chunks.
    fn chunks(l: &TileLayer, r: &std::ops::Range<usize>) -> usize {
        r.len() * 16 * l.in_p / 8
    }

    fn declare(&self) -> String {
        let regs: Vec<String> = (0..self.regs)
            .map(|c| format!("wp{c} = uvec4(0u)"))
            .collect();
        format!("uvec4 {};", regs.join(", "))
    }

    /// Chunk `c` of the invocation: (q, the guard that q is in the stage, or "").
    fn at(&self, n: usize, c: usize) -> (String, String) {
        let q = format!("lid + {}u", c * self.wg);
        let guard = if (c + 1) * self.wg > n {
            format!("{q} < {n}u")
        } else {
            String::new()
        };
        (q, guard)
    }

    /// Reads stage `j`'s chunks (of `layers`) into the registers.
    fn read(&self, p: &str, layers: &[TileLayer], j: usize, ind: &str) -> String {
        let (i, r) = &self.stages[j % self.stages.len()];
        let l = &layers[*i];
        let (k8, real, o0) = (l.in_p / 8, l.in_dims / 8, r.start * 16);
        let n = Self::chunks(l, r);
        let mut s = format!(
            "{ind}// layer {i}, outputs {o0}..{}: read into registers\n",
            r.end * 16
        );
        for c in 0..n.div_ceil(self.wg) {
            let (q, guard) = self.at(n, c);
            if l.out_dims <= o0 {
                let _ = writeln!(s, "{ind}wp{c} = uvec4(0u);");
                continue;
            }
            let mut cond = format!("q / {k8}u < {}u", l.out_dims - o0);
            if real < k8 {
                let _ = write!(cond, " && q % {k8}u < {real}u");
            }
            if !guard.is_empty() {
                cond = format!("{guard} && {cond}");
            }
            let _ = writeln!(
                s,
                "{ind}{{ uint q = {q}; wp{c} = uvec4(0u); if ({cond}) {{ wp{c} = {p}paramsv[{}u + q / {k8}u * {real}u + q % {k8}u]; }} }}",
                l.weight / 8 + o0 * real
            );
        }
        s
    }

    /// Stores stage `j`'s chunks from the registers into its rows of `ws`, between two
    /// workgroup barriers (`fenced`; else the caller orders them).
    fn store(&self, p: &str, layers: &[TileLayer], j: usize, fenced: bool, ind: &str) -> String {
        let (i, r) = &self.stages[j % self.stages.len()];
        let l = &layers[*i];
        let k8 = l.in_p / 8;
        let n = Self::chunks(l, r);
        let mut s = format!(
            "{ind}// layer {i}, outputs {}..{} into ws{}\n",
            r.start * 16,
            r.end * 16,
            if fenced {
                format!(" once every subgroup is done with it\n{ind}barrier();")
            } else {
                String::new()
            }
        );
        for c in 0..n.div_ceil(self.wg) {
            let (q, guard) = self.at(n, c);
            let body = if self.wide {
                // one store of the chunk
                format!(
                    "uint q = {q}; {p}ws[q / {k8}u * {}u + q % {k8}u] = wp{c};",
                    l.stride / 8
                )
            } else {
                // 8 stores of one f16 each
                let halves: Vec<String> = ["x", "y", "z", "w"]
                    .iter()
                    .enumerate()
                    .map(|(j, f)| {
                        format!(
                            "h = unpackFloat2x16(wp{c}.{f}); {p}ws[at + {}u] = h.x; {p}ws[at + {}u] = h.y;",
                            2 * j,
                            2 * j + 1
                        )
                    })
                    .collect();
                format!(
                    "uint q = {q}; uint at = q / {k8}u * {}u + q % {k8}u * 8u; f16vec2 h; {}",
                    l.stride,
                    halves.join(" ")
                )
            };
            if guard.is_empty() {
                let _ = writeln!(s, "{ind}{{ {body} }}");
            } else {
                let _ = writeln!(s, "{ind}if ({guard}) {{ {body} }}");
            }
        }
        if fenced {
            let _ = writeln!(s, "{ind}barrier();");
        }
        s
    }
}

/// Stages layer `l`'s weights (`read`: the f32 value of weight (o, i)) into `ws` as
/// uvec4s of 8 f16 (rows, packed or blocked; zero in the padding): each invocation
/// packs 8 consecutive inputs of a row and stores them at once.
fn stage_wide(p: &str, wg: usize, l: &TileLayer, read: &str, ind: &str) -> String {
    let k8 = l.in_p / 8;
    let at = crate::coop::staged_index(l, "o");
    let pairs: Vec<String> = (0..4)
        .map(|j| format!("packFloat2x16(f16vec2(v[{}], v[{}]))", 2 * j, 2 * j + 1))
        .collect();
    format!(
        "{ind}for (uint e = lid; e < {n}u; e += {wg}u) {{
{ind}    uint o = e / {k8}u; uint i0 = e % {k8}u * 8u;
{ind}    float v[8];
{ind}    for (uint j = 0u; j < 8u; j++) {{
{ind}        uint i = i0 + j; float w = 0.0;
{ind}        if (o < {od}u && i < {id}u) {{ w = {read}; }}
{ind}        v[j] = w;
{ind}    }}
{ind}    uint i = i0;
{ind}    {p}ws[({st}u + {at}) / 8u] = uvec4({});
{ind}}}\n",
        pairs.join(", "),
        n = l.staged_rows() * k8,
        od = l.out_dims,
        id = l.in_dims,
        st = l.staged,
    )
}

/// The store of one encoded row into X as uvec4s: `at` (`xs[` and the row's first
/// uvec4 plus ` + `) then chunk c; values j of `xs` (f32 expressions) as f16, zero up to
/// the first layer's padded width.
fn store_x_row_wide(s: &mut String, ind: &str, at: &str, xs: &[String], l0: &TileLayer) {
    let v = |j: usize| xs.get(j).map_or("0.0".to_string(), |e| format!("({e})"));
    for c in 0..l0.in_p / 8 {
        let pairs: Vec<String> = (0..4)
            .map(|h| {
                let j = 8 * c + 2 * h;
                format!("packFloat2x16(f16vec2({}, {}))", v(j), v(j + 1))
            })
            .collect();
        let _ = writeln!(s, "{ind}{at}{c}u] = uvec4({});", pairs.join(", "));
    }
}

/// `act` of the f16 accumulator element `z` (a `float16_t`), as a `float16_t`: the
/// piecewise-linear activations in f16 arithmetic, the others in f32.
pub(crate) fn activation_f16(act: &nshade_core::Activation) -> String {
    use nshade_core::Activation as A;
    match *act {
        A::None => "z".into(),
        A::Relu => "max(z, float16_t(0.0))".into(),
        // max(z, s·z) equals the select for 0 ≤ s ≤ 1 (`syntax::activation`)
        A::LeakyRelu { slope } if (0.0..=1.0).contains(&slope) => format!(
            "max(z, float16_t({}) * z)",
            crate::syntax::float_literal(slope)
        ),
        A::LeakyRelu { slope } => format!(
            "(z > float16_t(0.0) ? z : float16_t({}) * z)",
            crate::syntax::float_literal(slope)
        ),
        _ => format!(
            "float16_t({})",
            crate::syntax::activation(&crate::syntax::CSyntax, act, "float(z)")
        ),
    }
}

/// The header lines of this kernel.
fn entries(plan: &TilePlan, opts: &Options, in_dims: usize, out_dims: usize) -> Vec<String> {
    let p = &opts.prefix;
    let (g, b) = (opts.group, opts.binding);
    let (rows, wg) = (plan.rows, plan.workgroup_size);
    let rows_each = 16 * plan.blocks;
    let bind = |k: u32| format!("layout(set = {g}, binding = {})", b + k);
    let mut entries = vec![
        format!(
            "form coop-compute: one compute kernel; each group of 32 invocations (a subgroup) evaluates {rows_each} rows of each tile of {rows} on its own, every mlp layer as 16x16x16 cooperative-matrix products (coopmat<float16_t> A and B, {acc}, subgroup scope) with the bias, activation and f16 rounding applied to the accumulator's elements (the last layer's activation to the outputs as they are written){conv}{hold}",
            conv = match (opts.rows_convert, plan.outputs_over_x) {
                (true, true) => {
                    "; each hidden layer's accumulators are converted into the next layer's A matrices in registers (GL_NV_cooperative_matrix2), so only the mlp input passes through workgroup memory (the last layer's outputs, rounded to f16, are written over it)"
                }
                (true, false) => {
                    "; each hidden layer's accumulators are converted into the next layer's A matrices in registers (GL_NV_cooperative_matrix2), so only the mlp input and the outputs pass through workgroup memory"
                }
                _ => "",
            },
            hold = if opts.rows_hold {
                "; every subgroup loads each staged 16x16 weight block into registers once and holds it for all its rows"
            } else {
                ""
            },
            acc = if opts.rows_acc16 {
                "coopmat<float16_t> accumulators in the hidden layers and coopmat<float> in the last"
            } else {
                "coopmat<float> accumulators"
            }
        ),
        format!(
            "requires: GL_KHR_cooperative_matrix, GL_KHR_memory_scope_semantics, GL_KHR_shader_subgroup_basic and GL_EXT_shader_explicit_arithmetic_types_float16 (Vulkan: VK_KHR_cooperative_matrix listing f16 x f16 -> f32 at 16x16x16 with subgroup scope, shaderFloat16){}{}{}; subgroups of exactly 32 invocations; {} bytes of workgroup memory (Vulkan maxComputeSharedMemorySize)",
            if opts.buffer_is_f16() {
                ", GL_EXT_shader_16bit_storage for the f16 parameter buffer (storageBuffer16BitAccess)"
            } else {
                ""
            },
            if opts.texture_io {
                ", GL_EXT_samplerless_texture_functions for the input texture"
            } else {
                ""
            },
            if opts.rows_convert {
                ", GL_NV_cooperative_matrix2 for the conversions of accumulators into A matrices (Vulkan: VK_NV_cooperative_matrix2 with cooperativeMatrixConversions)"
            } else {
                ""
            },
            plan.workgroup_bytes
        ),
        format!(
            "entry point main, workgroup size {wg}: n = {} rows in tiles of {rows}; workgroup w evaluates tiles w, w + G, w + 2G, ... (G = number of workgroups in x)",
            if opts.texture_io {
                "W * H (the input texture's size)".to_string()
            } else {
                format!("{p}outputs.length() / {out_dims}")
            }
        ),
        if plan.native {
            format!(
                "dispatch: (G, 1, 1) workgroups, any G from 1 to 65535; each stages the biases once and then loops over its tiles; G = min(ceil(n / {rows}), {} x multiprocessors) where the host knows the GPU's multiprocessors (NVIDIA: VK_NV_shader_sm_builtins' shaderSMCount), else min(ceil(n / {rows}), {}) (what nshade uses)",
                crate::coop::NATIVE_PER_MULTIPROCESSOR,
                crate::coop::MAX_DISPATCH
            )
        } else {
            format!(
                "dispatch: (G, 1, 1) workgroups, any G from 1 to 65535; each stages the {} once and then loops over its tiles, so G = min(ceil(n / {rows}), {}) beats one workgroup per tile, and where the host knows the GPU's multiprocessors (NVIDIA: VK_NV_shader_sm_builtins' shaderSMCount) one wave of resident workgroups, G = min(ceil(n / {rows}), {k} x multiprocessors), is faster still ({k} resident per multiprocessor within 48 KiB of workgroup memory; what nshade uses)",
                if plan.streamed { "biases" } else { "weights" },
                crate::coop::ROWS_DISPATCH,
                k = plan.resident_per_multiprocessor()
            )
        },
        if opts.texture_io {
            format!(
                "bindings: {p}params {} (the parameter buffer below), {p}input_tex {} (texture2D, read with texelFetch (GL_EXT_samplerless_texture_functions), W x H; row r = texel (r % W, r / W), its first {in_dims} channel(s) the raw inputs), {p}output_tex {} (rgba32f image2D, write-only, W x H or larger; texel (r % W, r / W) = the {out_dims} output(s), then 0, alpha 1); n = W * H rows",
                bind(0),
                bind(2),
                bind(3)
            )
        } else {
            format!(
                "bindings: {p}params {} (the parameter buffer below), {p}inputs {} (float, read; row r = raw inputs [r * {in_dims}, r * {in_dims} + {in_dims})), {p}outputs {} (float, read-write; row r = outputs [r * {out_dims}, r * {out_dims} + {out_dims})); bind exactly n rows of outputs and at least n rows of inputs",
                bind(0),
                bind(2),
                bind(3)
            )
        },
        if plan.native {
            let total = *native_bases(&plan.layers).last().expect("not empty");
            format!(
                "{p}wnat {} (uvec4, read): every weight matrix in the cooperative matrices' register layout, {total} matrices of 16 x 16 f16 (each layer's W^T zero-padded to multiples of 16, block (k, n) = inputs 16k.., outputs 16n..), matrix t's lane l holding its 8 elements at uvec4 32 t + l, read by each subgroup 16 bytes a lane at a time for its products; {} bytes. Written once per set of weights, on the device that runs this kernel, by the pack kernel that `nshade export --native-weights` writes beside it (same set, {p}params at binding {b}, {p}wnat at binding {}, read-write; dispatch ({total}, 1, 1) workgroups of 32), which also writes the matrices' elements per lane as uvec4 32 x {total}: the layout holds only where that is 8 (NVIDIA)",
                bind(1),
                (total + 1) * 512,
                b + 1
            )
        } else if plan.streamed {
            format!(
                "each layer's weights are staged per tile, in turn, into one region of workgroup memory (rows of the layer's padded inputs + {W_SKEW} f16, all at offset 0): the workgroup reads the next layer's from the f16 parameter buffer 16 bytes at a time (a second binding of it as uvec4, {p}paramsv) into registers while the current layer runs, and stores them between two workgroup barriers after it"
            )
        } else {
            String::new()
        },
        format!(
            "once per workgroup the {}biases as f32{}; inputs are encoded in f32, the mlp input and hidden activations are kept as f16, accumulation is {} and outputs are f32{}",
            if plan.streamed || plan.native {
                ""
            } else {
                "weights (but those of layers read in place, below) are staged from the parameter buffer into workgroup memory as f16 (each layer's W zero-padded to multiples of 16 rows and columns) and the "
            },
            if opts.rows_acc16 {
                " (the hidden layers' as f16)"
            } else {
                ""
            },
            if opts.rows_acc16 {
                "f16 in the hidden layers and f32 in the last"
            } else {
                "f32"
            },
            if plan.outputs_over_x {
                " (the last layer's sums rounded to f16 before its activation)"
            } else {
                ""
            }
        ),
    ];
    entries.retain(|e| !e.is_empty());
    let bases = native_bases(&plan.layers);
    for (k, l) in plan.layers.iter().enumerate() {
        entries.push(if plan.native {
            format!(
                "  layer {k}: {} x {} (padded {} x {}), weights at parameter {}, matrices {}..{} of {p}wnat (block (k, n) at {} + n * {} + k); bias at parameter {}",
                l.out_dims,
                l.in_dims,
                l.out_p,
                l.in_p,
                l.weight,
                bases[k],
                bases[k + 1],
                bases[k],
                l.in_p / 16,
                l.bias
            )
        } else if l.direct {
            format!(
                "  layer {k}: {} x {}, weights at parameter {} read in place from the f16 buffer (16 x 16 blocks, 16-byte aligned); bias at parameter {}",
                l.out_dims, l.in_dims, l.weight, l.bias
            )
        } else if l.blocked {
            format!(
                "  layer {k}: {} x {} (padded {} x {}), weights at parameter {}, staged at {} in 16 x 16 blocks of 256 f16 (block (k, n) = inputs 16k.., outputs 16n.. at {} + 256 * (n * {} + k), column-major: output-major, inputs consecutive); bias at parameter {}",
                l.out_dims, l.in_dims, l.out_p, l.in_p, l.weight, l.staged, l.staged, l.in_p / 16, l.bias
            )
        } else {
            format!(
                "  layer {k}: {} x {} (padded {} x {}), weights at parameter {}, staged rows of {} f16 at {}{}; bias at parameter {}",
                l.out_dims,
                l.in_dims,
                l.out_p,
                l.in_p,
                l.weight,
                l.stride,
                l.staged,
                if l.trimmed {
                    format!(
                        " ({} real rows only: the padding outputs read the next layers' rows and are never used)",
                        l.out_dims
                    )
                } else {
                    String::new()
                },
                l.bias
            )
        });
    }
    entries
}
