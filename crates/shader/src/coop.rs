//! The tiled compute forms: one WGSL compute kernel that evaluates tiles of rows per
//! workgroup, every `mlp` layer as 16×16×16 matrix products with f16 operands and f32
//! accumulators — as cooperative matrices (`Form::CoopCompute`, tensor cores) or as plain
//! f16 multiply-add loops over the same tiles (`Form::TiledCompute`, any adapter with f16;
//! the numerical reference of the cooperative form, which differs from it only in the
//! products).
//!
//! Layout of one workgroup (128 invocations = 4 groups of 32, "subgroups" below; the
//! cooperative-matrix operations of a group are uniform across it, so hardware subgroups
//! of 32 or fewer invocations all work):
//!
//! ```text
//! once:      W_l (f16, out_p × in_p padded to multiples of 16, zero padding, rows
//!            `stride` apart) and b_l (f32, zero padding) staged from the parameter buffer
//! per tile:  R rows: invocation r < R reads row (tile·R + r), runs the encodings in f32
//!            (the statements the function form runs) and writes the MLP input, f16,
//!            feature-major into X_0[j·SX + r]; workgroup barrier
//! per layer: output tiles (16 outputs × 16 rows) dealt to the subgroups; a tile is
//!            C = Σ_k W[16 × 16 block] · X[16 × 16 block] from a zero tile, stored to the
//!            subgroup's f32 scratch; barrier; its 32 invocations add the bias, apply the
//!            activation and write 8 values each: f16 into X_{l+1} (zero in padding rows),
//!            or for the last layer f32 into the output buffer; barrier
//! ```
//!
//! Workgroups walk the row tiles `wid.x, wid.x + G, ...` (G = `num_workgroups.x`), so the
//! weights are staged once per workgroup whatever the number of rows.

use crate::body::Body;
use crate::header::{self, Interface};
use crate::ir::{Program, Stmt};
use crate::syntax::WgslSyntax;
use crate::{Error, Form, Options, Target, WeightMode};
use nshade_core::Activation;
use nshade_core::model::Model;
use nshade_core::module::Module;
use std::fmt::Write;

/// Invocations per workgroup.
pub const WORKGROUP_SIZE: usize = 128;
/// Groups of 32 invocations that take matrix tiles.
const GROUPS: usize = WORKGROUP_SIZE / 32;
/// Workgroup memory the forms may use by default (`Options::workgroup_memory`), in
/// bytes: wgpu's limit on the NVIDIA H200 (`max_compute_workgroup_storage_size`), and
/// Vulkan's usual 48 KiB.
pub const MAX_WORKGROUP_BYTES: usize = 48 * 1024;
/// f16 values of skew added to every row of the X tiles (bank conflicts).
pub(crate) const X_SKEW: usize = 8;
/// Workgroups [`TilePlan::dispatch`] launches at most: enough to fill a large GPU several
/// times over (a workgroup stages the weights once and then loops over tiles).
pub const MAX_DISPATCH: usize = 2048;
/// Workgroups [`TilePlan::dispatch`] launches at most for the GLSL subgroup kernel of
/// `coop_rows`: every workgroup stages all the weights before its first tile, and on the
/// H200 (132 multiprocessors) about two workgroups per multiprocessor beat more (seed
/// #3 13.3 G evaluations/s at 264 against 11.5 G at 2048, the hash-grid network 6.0 G
/// against 5.0 G; with the larger shapes of `coop_rows::shapes`, which fit one per
/// multiprocessor, 132 and 264 are within 2-3%; docs/PERFORMANCE.md).
pub const ROWS_DISPATCH: usize = 256;
/// Workgroups per multiprocessor that the kernel of native weights ([`TilePlan::native`])
/// is dispatched at where the host knows the multiprocessors: it stages no weights, so
/// more workgroups than are resident cost nothing but their biases, and they even out the
/// end of the dispatch. Measured on the H200 (132 multiprocessors, 4 subgroups x 32
/// rows, docs/PERFORMANCE.md): `freq(8) | mlp(128x4, relu)` 4.35 / 4.43 / 4.46 / 4.45 /
/// 4.50 G evaluations/s at 2 / 4 / 8 / 16 / 32 per multiprocessor, `freq(8) | mlp(64x4,
/// relu)` 12.97 / 13.35 / 14.16 / 14.25 / 13.96 G.
pub const NATIVE_PER_MULTIPROCESSOR: usize = 16;

/// The workgroup memory the tiles may use under `opts`: all of `--workgroup-memory`, less
/// the output staging of the texture variant (4 f32 per row of the largest tile).
pub fn io_budget(opts: &Options) -> usize {
    if opts.texture_io {
        opts.workgroup_memory.saturating_sub(4 * 4 * WORKGROUP_SIZE)
    } else {
        opts.workgroup_memory
    }
}

/// One `mlp` layer as the kernel holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct TileLayer {
    pub in_dims: usize,
    pub out_dims: usize,
    /// `in_dims` and `out_dims` rounded up to multiples of 16.
    pub in_p: usize,
    pub out_p: usize,
    /// Flat-parameter offsets of `W` (out × in, row-major) and `b`.
    pub weight: usize,
    pub bias: usize,
    /// Offset of the staged `W` in the workgroup weight array, and its row stride (f16).
    pub staged: usize,
    pub stride: usize,
    /// Offset of the staged bias in the workgroup bias array (f32).
    pub staged_bias: usize,
    pub act: Activation,
    /// `W` is not staged: the products read it straight from the f16 parameter buffer
    /// (the GLSL kernel of [`crate::coop_rows`] only; `staged` and `stride` unused).
    pub direct: bool,
    /// `W` is staged in 16 × 16 blocks of 512 contiguous bytes instead of rows (the GLSL
    /// kernel of [`crate::coop_rows`] only): block (k, n) of `W^T` (inputs 16k.., outputs
    /// 16n..) at `staged + 256 · (n · in_p / 16 + k)`, column-major with `stride` 16, so a
    /// subgroup's load of a block reads 512 consecutive bytes (no bank conflicts) and
    /// the layer takes no more memory than unskewed rows ([`TileLayer::block_at`]).
    pub blocked: bool,
    /// Only the `out_dims` real output rows of `W` are staged (the packed layout of
    /// [`crate::coop_rows`], for a last layer with padding outputs, placed first): the
    /// padding columns of its B matrices read whatever staged weights follow, so the
    /// padding outputs hold garbage that nothing reads (each output of a product depends
    /// on its own column alone). The window of `out_p` rows stays inside the array.
    pub trimmed: bool,
}

/// The shape of a tiled compute kernel for one model: what a host needs to dispatch it.
#[derive(Clone, Debug, PartialEq)]
pub struct TilePlan {
    /// Invocations per workgroup ([`WORKGROUP_SIZE`]).
    pub workgroup_size: usize,
    /// Rows per tile: a multiple of 16, at most the workgroup size.
    pub rows: usize,
    /// Row stride of the X tiles (f16): `rows` plus a skew.
    pub sx: usize,
    /// Output tiles each group of 32 invocations computes per phase (one f32 scratch
    /// tile each): a layer of `nt` tiles takes `ceil(nt / (4 · per))` phases of two
    /// workgroup barriers.
    pub per: usize,
    /// The weights do not all fit in workgroup memory: each layer's are staged in turn,
    /// for every tile, into one region sized for the largest layer (every
    /// `TileLayer::staged` is 0); biases are staged once.
    pub streamed: bool,
    /// The GLSL kernel of [`crate::coop_rows`] with `streamed`: each layer's output
    /// blocks are staged in this many parts (at most one per 16 outputs), one after the
    /// other, into a region sized for the largest part; 1 elsewhere.
    pub stream_parts: usize,
    pub layers: Vec<TileLayer>,
    /// f16 elements of the staged weights, f32 elements of the staged biases (in the GLSL
    /// kernels of `coop_rows` and `coop_wide` with f16 accumulation the last layer's
    /// alone: the hidden layers' are staged as f16), f16 elements of each of the two X
    /// tiles.
    pub weights_len: usize,
    pub biases_len: usize,
    pub x_len: usize,
    /// Workgroup memory the kernel declares, in bytes.
    pub workgroup_bytes: usize,
    /// The GLSL cooperative-matrix kernel of [`crate::coop_rows`]: blocks of 16 rows
    /// each subgroup evaluates per tile on its own (`rows` = `16 · blocks` per subgroup;
    /// `x_len` is one subgroup's X); 0 for the shared-tile kernels of this module. For the
    /// kernel of `coop_wide`, the row blocks each subgroup computes per tile.
    pub blocks: usize,
    /// The kernel of `coop_wide` (weights held in registers): the subgroups that share
    /// a row block's outputs, each holding its blocks of every hidden layer's W; 0 for
    /// the other kernels.
    pub output_groups: usize,
    /// The GLSL kernel of [`crate::coop_rows`] with the conversions: the last layer's
    /// outputs, rounded to f16, go over X's rows (at least `out_p + X_SKEW` wide)
    /// instead of an f32 scratch of their own; false for the other kernels.
    pub outputs_over_x: bool,
    /// The GLSL kernel of [`crate::coop_rows`] with the conversions and two row blocks
    /// per subgroup: X holds 16 rows (`x_len` = 16 · `sx`), one block at a time — block
    /// 0's mlp input is stored and loaded as A matrices, then block 1's, and at the end
    /// block 0's outputs are stored and written out, then block 1's; false elsewhere.
    pub x_one_block: bool,
    /// The GLSL kernel of [`crate::coop_rows`] with `Options::rows_native`: every layer's
    /// weight matrices are read from the native buffer (each lane's 8 f16 of a matrix in
    /// one 16-byte load) that [`pack_kernel`] writes; nothing but X and the biases is
    /// staged (`weights_len` 0), so registers, not workgroup memory, bound the
    /// workgroups resident. False for the other kernels.
    pub native: bool,
}

impl TileLayer {
    /// Layer `l` with its dimensions padded to multiples of 16, its W staged at `staged`
    /// in rows of `in_p + skew` f16 (unless `direct`), its bias staged at `staged_bias`.
    pub(crate) fn of(
        l: &nshade_core::module::Linear,
        skew: usize,
        staged: usize,
        staged_bias: usize,
        direct: bool,
    ) -> TileLayer {
        let in_p = l.in_dims.next_multiple_of(16);
        TileLayer {
            in_dims: l.in_dims,
            out_dims: l.out_dims,
            in_p,
            out_p: l.out_dims.next_multiple_of(16),
            weight: l.weight,
            bias: l.bias,
            staged,
            stride: in_p + skew,
            staged_bias,
            act: l.act,
            direct,
            blocked: false,
            trimmed: false,
        }
    }

    /// The layer staged in 16 × 16 blocks ([`TileLayer::blocked`]) at `staged`.
    pub(crate) fn into_blocked(self) -> TileLayer {
        TileLayer {
            blocked: true,
            stride: 16,
            ..self
        }
    }

    /// f16 elements of the staged W (padded rows of `stride`, or blocks; `trimmed`: the
    /// real rows alone).
    pub(crate) fn staged_len(&self) -> usize {
        if self.blocked {
            self.out_p * self.in_p
        } else {
            self.staged_rows() * self.stride
        }
    }

    /// The output rows of W that are staged: `out_dims` where `trimmed`, else `out_p`.
    pub(crate) fn staged_rows(&self) -> usize {
        if self.trimmed {
            self.out_dims
        } else {
            self.out_p
        }
    }

    /// The staged offset of block (k, n) of `W^T` (inputs `16k..`, outputs `16n..`), read
    /// as a column-major B matrix with stride `self.stride`.
    pub(crate) fn block_at(&self, k: usize, n: usize) -> usize {
        if self.blocked {
            self.staged + 256 * (n * (self.in_p / 16) + k)
        } else {
            self.staged + n * 16 * self.stride + k * 16
        }
    }

    /// The 16 × 16 output tiles of this layer over a tile of `rows` input rows.
    pub fn tiles(&self, rows: usize) -> usize {
        (self.out_p / 16) * (rows / 16)
    }
}

impl TilePlan {
    /// Workgroups to dispatch for `rows` rows: one per tile up to
    /// [`TilePlan::max_dispatch`]; the workgroups loop over the remaining tiles, so each
    /// stages the weights once for several tiles.
    pub fn dispatch(&self, rows: usize) -> u32 {
        self.dispatch_capped(rows, self.max_dispatch())
    }

    /// The cap of [`TilePlan::dispatch`]: [`ROWS_DISPATCH`] for the subgroup kernel
    /// (`blocks > 0`) but that of native weights, else [`MAX_DISPATCH`].
    pub fn max_dispatch(&self) -> usize {
        if self.native {
            MAX_DISPATCH
        } else if self.blocks > 0 {
            ROWS_DISPATCH
        } else {
            MAX_DISPATCH
        }
    }

    /// The subgroup kernel's workgroups resident at once on one multiprocessor, as far as
    /// the workgroup memory that they share on the H200's driver goes (1 or 2; more did
    /// not pay where it fit, docs/PERFORMANCE.md).
    pub fn resident_per_multiprocessor(&self) -> usize {
        (crate::coop_rows::RESIDENT_BYTES / self.workgroup_bytes.max(1)).clamp(1, 2)
    }

    /// The cap of [`TilePlan::dispatch`] on a GPU of `multiprocessors` (where the host
    /// can count them): for the subgroup kernel of `coop_rows` one wave of resident workgroups,
    /// `multiprocessors` x [`TilePlan::resident_per_multiprocessor`], so every
    /// multiprocessor loops over the same number of tiles (on the H200, 132 of them:
    /// `freq(8) | mlp(64x4, relu)` 13.81 G evaluations/s at 132 workgroups against 13.2 G
    /// at 256, `freq(8) | mlp(128x4, relu)` 3.75 G against 3.63 G, the hash-grid network
    /// 12.55 G at 264 against 12.4 G; docs/PERFORMANCE.md), and for the kernel of native
    /// weights [`NATIVE_PER_MULTIPROCESSOR`] per multiprocessor; else
    /// [`TilePlan::max_dispatch`].
    pub fn max_dispatch_on(&self, multiprocessors: Option<usize>) -> usize {
        match multiprocessors {
            // the subgroup kernel of `coop_rows` (the kernel of held weights, with its
            // output groups, was not measured so)
            Some(m) if m > 0 && self.native => m * NATIVE_PER_MULTIPROCESSOR,
            Some(m) if m > 0 && self.blocks > 0 && self.output_groups == 0 => {
                m * self.resident_per_multiprocessor()
            }
            _ => self.max_dispatch(),
        }
    }

    /// [`TilePlan::dispatch`] with another cap on the workgroups (at least 1, at most
    /// 65535).
    pub fn dispatch_capped(&self, rows: usize, cap: usize) -> u32 {
        rows.div_ceil(self.rows).clamp(1, cap.clamp(1, 65535)) as u32
    }

    /// Workgroup barriers per row of input: each layer's phases, two barriers each, plus
    /// the encoding's, over the rows of a tile (what [`plan`] minimises).
    pub fn barriers_per_row(&self) -> f64 {
        let phases: usize = self
            .layers
            .iter()
            .map(|l| l.tiles(self.rows).div_ceil(GROUPS * self.per))
            .sum();
        let staging = if self.streamed { self.layers.len() } else { 0 };
        (2 * phases + staging + 1) as f64 / self.rows as f64
    }
}

/// The width of the mlp the tiled forms evaluate (its widest layer's outputs), or `None`
/// where they cannot take `model`.
pub fn mlp_width(model: &Model) -> Option<usize> {
    final_mlp(model)
        .ok()
        .and_then(|m| m.layers.iter().map(|l| l.out_dims).max())
}

/// The network's last `mlp`, when the model is encodings followed by one `mlp` (the only
/// networks the tiled forms take).
fn final_mlp(model: &Model) -> Result<&nshade_core::module::Mlp, Error> {
    fn has_mlp(m: &Module) -> bool {
        match m {
            Module::Mlp(_) => true,
            Module::Chain(c) => c.stages.iter().any(has_mlp),
            Module::Cat(c) => c.children.iter().any(has_mlp),
            _ => false,
        }
    }
    let refuse = |why: &str| {
        Err(Error::Model(format!(
            "the tiled compute forms evaluate encodings followed by one mlp, and {why} (use --form function)"
        )))
    };
    match &model.network.root {
        Module::Mlp(m) => Ok(m),
        Module::Chain(c) => match c.stages.last() {
            Some(Module::Mlp(m)) => {
                if c.stages[..c.stages.len() - 1].iter().any(has_mlp) {
                    refuse("this network has an mlp before its last stage")
                } else {
                    Ok(m)
                }
            }
            _ => refuse("this network does not end in an mlp"),
        },
        _ => refuse("this network has no mlp at its end"),
    }
}

/// The layout with `rows` rows per tile, weight rows skewed by `skew` and X rows by
/// `x_skew` f16, all weights staged once or (`streamed`) one layer at a time, and the
/// most scratch tiles per group that fit in `budget` bytes; `None` when none fits.
fn candidate(
    mlp: &nshade_core::module::Mlp,
    budget: usize,
    rows: usize,
    skew: usize,
    x_skew: usize,
    streamed: bool,
) -> Option<TilePlan> {
    let mut layers = Vec::new();
    let (mut staged, mut staged_bias, mut largest) = (0, 0, 0);
    for l in &mlp.layers {
        let t = TileLayer::of(
            l,
            skew,
            if streamed { 0 } else { staged },
            staged_bias,
            false,
        );
        staged += t.staged_len();
        largest = largest.max(t.staged_len());
        staged_bias += t.out_p;
        layers.push(t);
    }
    let weights_len = if streamed { largest } else { staged };
    let widest = layers.iter().map(|l| l.in_p).max().unwrap_or(16);
    let most = layers
        .iter()
        .map(|l| l.tiles(rows))
        .max()
        .unwrap_or(1)
        .div_ceil(GROUPS);
    let sx = rows + x_skew;
    let x_len = widest * sx;
    (1..=most).rev().find_map(|per| {
        // weights f16, biases f32, two X tiles f16, the groups' scratch tiles and the
        // zero tile f32
        let bytes =
            weights_len * 2 + staged_bias * 4 + 2 * x_len * 2 + (GROUPS * per + 1) * 256 * 4;
        (bytes <= budget).then(|| TilePlan {
            workgroup_size: WORKGROUP_SIZE,
            rows,
            sx,
            per,
            streamed,
            stream_parts: 1,
            layers: layers.clone(),
            weights_len,
            biases_len: staged_bias,
            x_len,
            workgroup_bytes: bytes,
            blocks: 0,
            output_groups: 0,
            outputs_over_x: false,
            x_one_block: false,
            native: false,
        })
    })
}

/// The tiled kernel's layout for `model` within `budget` bytes of workgroup memory (the
/// largest row tile that fits), or why the model cannot have one.
pub fn plan(model: &Model, budget: usize) -> Result<TilePlan, Error> {
    let mlp = final_mlp(model)?;
    let pad = |n: usize| n.next_multiple_of(16);
    let mut best: Option<TilePlan> = None;
    // Every row tile, skew and scratch size that fits; the fewest barriers per row win,
    // then larger tiles, then skewed weight rows (fewer bank conflicts). Only when the
    // weights of all layers fit nowhere, each layer's in turn (streamed), which also
    // tries unskewed X tiles.
    for streamed in [false, true] {
        for rows in [128, 64, 32, 16] {
            for skew in [8, 0] {
                for x_skew in [X_SKEW, 0] {
                    if x_skew == 0 && !streamed {
                        continue;
                    }
                    if let Some(cand) = candidate(mlp, budget, rows, skew, x_skew, streamed) {
                        let better = best
                            .as_ref()
                            .is_none_or(|b| cand.barriers_per_row() < b.barriers_per_row() - 1e-12);
                        if better {
                            best = Some(cand);
                        }
                    }
                }
            }
        }
        if best.is_some() {
            break;
        }
    }
    best.ok_or_else(|| {
        let w = mlp
            .layers
            .iter()
            .map(|l| pad(l.in_dims) * pad(l.out_dims))
            .max()
            .unwrap_or(0);
        Error::Model(format!(
            "the tiled compute forms keep at least one layer's weights in workgroup memory as f16, and this mlp's largest layer ({w} padded weights, {} bytes) with its smallest row tiles does not fit in the {budget} bytes of workgroup memory allowed (--workgroup-memory; or use --form function)",
            w * 2
        ))
    })
}

/// The most 16 × 16 weight blocks that the GLSL subgroup kernel holds in registers by
/// default (4 registers a lane each; seed #3 has 12, `freq(3) | mlp(32x4, ...)` 16).
pub const HOLD_BLOCKS: usize = 16;

/// Whether the GLSL subgroup kernel holds its weights in registers (`Options::rows_hold`)
/// when nothing asks otherwise: with NVIDIA's conversions (`rows_convert`), for dense mlps
/// of at most [`HOLD_BLOCKS`] weight blocks, with buffer input and output. Measured on the
/// H200 (docs/PERFORMANCE.md): seed #3 40.9 G evaluations/s against 30.1 G staged (its
/// outputs then go over X as f16), `freq(3) | mlp(32x4, ...)` 35.0 against 27.3 G; the
/// hash-grid network (28 blocks) 7.1 G against 8.0 G, so grids and larger mlps keep their
/// weights staged.
pub fn hold_by_default(model: &Model, opts: &Options) -> bool {
    opts.target == Target::Glsl
        && opts.form == Form::CoopCompute
        && opts.rows_convert
        && !opts.rows_stationary
        && !opts.texture_io
        && model.network.param_count == model.network.dense_count
        && final_mlp(model).is_ok_and(|m| {
            m.layers
                .iter()
                .map(|l| l.in_dims.div_ceil(16) * l.out_dims.div_ceil(16))
                .sum::<usize>()
                <= HOLD_BLOCKS
        })
}

/// The pack kernel of `Options::rows_native` (GLSL 450) for `model` and `opts`, with the
/// number of 16 x 16 matrices it writes (dispatch that many workgroups; the native buffer
/// holds `32 · (matrices + 1)` uvec4s, the last 32 for the pack kernel's report of the
/// elements per lane, which must be 8).
pub fn pack_kernel(model: &Model, opts: &Options) -> Result<(String, usize), Error> {
    let plan = plan_for(model, opts)?;
    let total = *crate::coop_rows::native_bases(&plan.layers)
        .last()
        .expect("not empty");
    Ok((crate::coop_rows::write_pack(opts, &plan), total))
}

/// `opts` with `rows_hold` on where [`hold_by_default`] says and the held kernel fits
/// ([`plan_for`]); else `opts` as given. What `nshade export` and the GPU evaluator write.
pub fn with_default_hold(model: &Model, opts: Options) -> Options {
    if hold_by_default(model, &opts) {
        let held = Options {
            rows_hold: true,
            ..opts.clone()
        };
        if plan_for(model, &held).is_ok() {
            return held;
        }
    }
    opts
}

/// The layout of the kernel that `export` writes for `opts` (a tiled form): for `--target
/// glsl --form coop-compute` the subgroup-private kernel of [`crate::coop_rows`] where its
/// weights fit staged with the conversions, else the kernel of held weights of
/// [`crate::coop_wide`] for dense mlps at least 64 wide, else the subgroup-private kernel
/// where its weights fit (unless `Options::rows_shape` is `Some((0, 0))`), else [`plan`]
/// within [`io_budget`].
pub fn plan_for(model: &Model, opts: &Options) -> Result<TilePlan, Error> {
    // the kernel of held weights where asked for, and by default for dense mlps at least
    // 64 wide without the conversions or whose weights do not fit staged with them
    // (measured faster there on the H200: `freq(8) | mlp(128x4, relu)` 2.41 G
    // evaluations/s against 0.57 G, `freq(8) | mlp(64x4, relu)` 7.33 G against 4.18 G
    // without the conversions; slower for 32-wide mlps and grids: seed #3 13.1 G against
    // 20.6 G, the hash-grid network 6.58 G against 6.89 G; docs/PERFORMANCE.md)
    let dense = model.network.param_count == model.network.dense_count;
    let wide = mlp_width(model).is_some_and(|w| w >= 64);
    let rows_with = |direct: crate::coop_rows::Direct, streamed: bool| {
        crate::coop_rows::plan(
            final_mlp(model).ok()?,
            model.network.param_count > model.network.dense_count,
            opts.workgroup_memory,
            opts.rows_shape,
            direct,
            opts.rows_acc16,
            crate::coop_rows::Variant {
                convert: opts.rows_convert,
                hold: opts.rows_hold,
                layout: opts.rows_layout,
                one_block: !opts.rows_whole_x && opts.rows_split != crate::RowsSplit::EncodeOnly,
                streamed,
                parts: opts.rows_stream,
            },
        )
    };
    let rows = |direct| rows_with(direct, false);
    // Slang: its kernel of staged weights, or why not
    if opts.target == Target::Slang {
        let budget = opts.workgroup_memory;
        return crate::coop_slang::plan(final_mlp(model)?, budget).ok_or_else(|| {
            Error::Option(format!(
                "--target slang --form coop-compute stages every weight in workgroup memory as f16, and this mlp's do not fit in {budget} bytes (--workgroup-memory); --target glsl --form coop-compute streams them or reads them from the native buffer"
            ))
        });
    }
    // every weight matrix from the native buffer, where asked
    if let (Target::Glsl, Form::CoopCompute) = (opts.target, opts.form)
        && opts.rows_native
    {
        return rows(crate::coop_rows::Direct::Native).ok_or_else(|| {
            Error::Option(
                "the kernel of native weights does not fit this model's rows in workgroup memory"
                    .into(),
            )
        });
    }
    // with the conversions, the subgroup kernel first where its weights fit staged
    // (`freq(8) | mlp(64x4, relu)`: 13.1 G evaluations/s against 7.3 G for held weights on
    // the H200; docs/PERFORMANCE.md)
    if let (Target::Glsl, Form::CoopCompute) = (opts.target, opts.form)
        && opts.rows_convert
        && !opts.rows_stationary
        && !opts.rows_direct
        && opts.rows_shape != Some((0, 0))
        && let Some(p) = {
            // else (or where asked), from an f16 buffer, each layer's weights staged in
            // turn per tile (`freq(8) | mlp(128x4, relu)`, whose 110 KiB of weights fit
            // neither staged nor held)
            let streamed = || {
                (opts.buffer_is_f16() && !opts.rows_hold)
                    .then(|| rows_with(crate::coop_rows::Direct::Never, true))
                    .flatten()
            };
            match opts.rows_stream {
                Some(_) => streamed(),
                None => rows(crate::coop_rows::Direct::Never).or_else(streamed),
            }
        }
    {
        return Ok(p);
    }
    if let (Target::Glsl, Form::CoopCompute) = (opts.target, opts.form)
        && (opts.rows_stationary || (dense && wide && opts.rows_shape.is_none()))
        && !opts.texture_io
        && opts.rows_split == crate::RowsSplit::Whole
        && let Some(p) = crate::coop_wide::plan(
            final_mlp(model)?,
            opts.workgroup_memory,
            opts.rows_acc16,
            opts.rows_shape.filter(|_| opts.rows_stationary),
            opts.held_rows.filter(|_| opts.rows_stationary),
        )
    {
        return Ok(p);
    }
    if let (Target::Glsl, Form::CoopCompute) = (opts.target, opts.form)
        && opts.rows_shape != Some((0, 0))
        && let Some(p) = rows(match (opts.buffer_is_f16(), opts.rows_direct) {
            (false, _) => crate::coop_rows::Direct::Never,
            (true, false) => crate::coop_rows::Direct::WhenNeeded,
            (true, true) => crate::coop_rows::Direct::Always,
        })
    {
        return Ok(p);
    }
    if opts.rows_acc16 || opts.rows_hold || (opts.target == Target::Glsl && opts.texture_io) {
        return Err(Error::Option(
            "f16 accumulation, held weights and GLSL texture input and output belong to the subgroup kernel, which does not fit this model's weights in workgroup memory".into(),
        ));
    }
    plan(model, io_budget(opts))
}

/// The WGSL of a tiled compute form (`opts.form` is `CoopCompute` or `TiledCompute`).
pub(crate) fn write_string(
    model: &Model,
    program: &Program,
    opts: &Options,
) -> Result<String, Error> {
    if opts.target == Target::Glsl {
        return write_glsl(model, program, opts);
    }
    if opts.target == Target::Slang {
        let plan = plan_for(model, opts)?;
        return crate::coop_slang::write(model, program, opts, &plan);
    }
    let plan = plan(model, io_budget(opts))?;
    let tex = opts.texture_io;
    let coop = opts.form == Form::CoopCompute;
    let p = &opts.prefix;
    let (g, b) = (opts.group, opts.binding);
    let (in_dims, out_dims) = (program.in_dims, program.out_dims);
    let elem = if opts.buffer_is_f16() { "f16" } else { "f32" };
    let (rows, sx, per) = (plan.rows, plan.sx, plan.per);
    let wg = plan.workgroup_size;
    let io_decl = if tex {
        format!(
            "@group({g}) @binding({b2}) var {p}input_tex: texture_2d<f32>;
@group({g}) @binding({b3}) var {p}output_tex: texture_storage_2d<rgba32float, write>;
// The outputs of the tile's rows, 4 per row, gathered for whole-texel stores.
var<workgroup> {p}yo: array<f32, {yl}>;",
            b2 = b + 2,
            b3 = b + 3,
            yl = 4 * rows
        )
    } else {
        format!(
            "@group({g}) @binding({b2}) var<storage, read> {p}inputs: array<f32>;
@group({g}) @binding({b3}) var<storage, read_write> {p}outputs: array<f32>;",
            b2 = b + 2,
            b3 = b + 3
        )
    };

    let encoding = encoding(program);
    let entries = entries(&plan, opts, in_dims, out_dims, false);
    let in_ty = if in_dims == 1 {
        "f32".to_string()
    } else {
        format!("vec{in_dims}<f32>")
    };
    let iface = Interface {
        signature: format!(
            "@compute @workgroup_size({wg}) fn {p}main (evaluates rows of {in_ty} into rows of {out_dims} f32; no {p}eval function in this form)"
        ),
        buffer: vec![format!(
            "weights: var<storage, read> {p}params: array<{elem}, {n}> at @group({g}) @binding({b})",
            n = model.params.len()
        )],
        entries,
    };
    let mut s = header::write(model, opts, &iface);
    s.push('\n');
    s.push_str("enable f16;\n");
    if coop {
        s.push_str("enable wgpu_cooperative_matrix;\n");
    }
    let _ = write!(
        s,
        "
@group({g}) @binding({b}) var<storage, read> {p}params: array<{elem}, {n}>;
{io_decl}

// Staged weights (f16) and biases (f32), two f16 X tiles (feature-major, rows of {sx}),
// {per} f32 scratch tile(s) per group of 32 invocations{zero_doc}.
var<workgroup> {p}ws: array<f16, {wl}>;
var<workgroup> {p}bs: array<f32, {bl}>;
var<workgroup> {p}x0: array<f16, {xl}>;
var<workgroup> {p}x1: array<f16, {xl}>;
var<workgroup> {p}zc: array<f32, {zl}>;
{zero_decl}
@compute @workgroup_size({wg})
fn {p}main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {{
    let sgid = lid / 32u;
    let lane = lid % 32u;
    let zslot = sgid * {zg}u;
",
        zg = per * 256,
        n = model.params.len(),
        wl = plan.weights_len.max(1),
        bl = plan.biases_len.max(1),
        xl = plan.x_len,
        zl = GROUPS * per * 256,
        zero_doc = if coop {
            ", and a zero tile (the accumulators' start)"
        } else {
            ""
        },
        zero_decl = if coop {
            format!("var<workgroup> {p}zero: array<f32, 256>;\n")
        } else {
            String::new()
        },
    );
    // Staging: biases once per workgroup; weights too, or per layer and tile (streamed).
    let f32_of = |e: String| {
        if elem == "f16" {
            format!("f32({e})")
        } else {
            e
        }
    };
    let d = &WGSL;
    let stage =
        |l: &TileLayer, ind: &str| stage_weights(d, p, wg, l, &f32_of(weight_read(p, l)), ind);
    let bread = |l: &TileLayer| f32_of(format!("{p}params[{}u + e]", l.bias));
    stage_biases(d, &mut s, &plan, p, &stage, &bread, false);
    if coop {
        let _ = writeln!(
            s,
            "    for (var e = lid; e < 256u; e += {wg}u) {{ {p}zero[e] = 0.0f; }}"
        );
    }
    let _ = write!(
        s,
        "    workgroupBarrier();
    {n_decl}
    let tiles = (n + {r1}u) / {rows}u;
    for (var tile = wid.x; tile < tiles; tile += groups.x) {{
",
        r1 = rows - 1,
        n_decl = if tex {
            format!(
                "let width = textureDimensions({p}input_tex).x;\n    let n = width * textureDimensions({p}input_tex).y;"
            )
        } else {
            format!("let n = arrayLength(&{p}outputs) / {out_dims}u;")
        },
    );
    // The encodings of row r of the tile, in f32, into X_0 (f16).
    let l0 = &plan.layers[0];
    let (guard, ind) = row_header(&mut s, rows, wg);
    if tex {
        let comps = ["x", "y", "z", "w"];
        let arg = if in_dims == 1 {
            "texel.x".to_string()
        } else {
            format!(
                "{in_ty}({})",
                comps[..in_dims]
                    .iter()
                    .map(|c| format!("texel.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let _ = writeln!(
            s,
            "{ind}let row = min(tile * {rows}u + lid, n - 1u);\n{ind}let texel = textureLoad({p}input_tex, vec2<u32>(row % width, row / width), 0);\n{ind}let p = {arg};"
        );
    } else {
        let arg = row_input(p, in_dims, &in_ty);
        let _ = writeln!(
            s,
            "{ind}let row = min(tile * {rows}u + lid, n - 1u);\n{ind}let p = {arg};"
        );
    }
    let read = |i: &str| format!("{p}params[{i}]");
    let body = Body {
        syntax: &WgslSyntax,
        decl: "let ".into(),
        cast: None,
        param: "p".into(),
        buffer_read: &read,
        indent: ind,
        scalar: "f32".into(),
        wgsl: true,
        vec4_locals: None,
        vec4_decl: "let",
        freq_doubling: true,
        lanes: None,
    };
    let body_opts = Options {
        target: Target::Wgsl,
        weights: WeightMode::Buffer,
        loops: false,
        ..opts.clone()
    };
    let xs = body.write(model, &encoding, &body_opts, &mut s);
    write_x0(d, &mut s, p, &xs, l0, sx, ind, guard);

    let last = plan.layers.len() - 1;
    for (i, l) in plan.layers.iter().enumerate() {
        let xin = format!("{p}x{}", i % 2);
        let xout = format!("{p}x{}", (i + 1) % 2);
        phase_head(d, &mut s, &plan, i, l, &stage);
        if coop {
            let _ = writeln!(
                s,
                "            var c = coopLoad<coop_mat16x16<f32, C>>(&{p}zero[0], 16u);"
            );
            for k in 0..l.in_p / 16 {
                let _ = writeln!(
                    s,
                    "            c = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&{p}ws[{w}u + ot * {ws16}u], {stride}u), coopLoadT<coop_mat16x16<f16, B>>(&{xin}[{x}u + st * 16u], {sx}u), c);",
                    w = l.staged + k * 16,
                    ws16 = 16 * l.stride,
                    stride = l.stride,
                    x = k * 16 * sx,
                );
            }
            let _ = writeln!(s, "            coopStoreT(c, &{p}zc[zt], 16u);");
        } else {
            let _ = writeln!(
                s,
                "            for (var v = 0u; v < 8u; v++) {{
                let e = v * 32u + lane; let o = ot * 16u + e / 16u; let s = st * 16u + e % 16u;
                var acc = 0.0f;
                for (var k = 0u; k < {ip}u; k++) {{
                    acc += f32({p}ws[{w}u + o * {stride}u + k]) * f32({xin}[k * {sx}u + s]);
                }}
                {p}zc[zt + e] = acc;
            }}",
                ip = l.in_p,
                w = l.staged,
                stride = l.stride,
            );
        }
        let zz = format!("{p}zc[zt + e] + {p}bs[{}u + o]", l.staged_bias);
        let y = crate::wgsl::activation(&l.act, "zz");
        let epi = if i < last {
            format!(
                "let zz = {zz}; {xout}[o * {sx}u + s] = select(f16(0.0f), f16({y}), o < {}u);",
                l.out_dims
            )
        } else if tex {
            format!(
                "if (o < {od}u) {{ let zz = {zz}; {p}yo[s * 4u + o] = {y}; }}",
                od = l.out_dims
            )
        } else {
            format!(
                "let row = tile * {rows}u + s;
                    if (o < {od}u && row < n) {{ let zz = {zz}; {p}outputs[row * {od}u + o] = {y}; }}",
                od = l.out_dims
            )
        };
        phase_tail(d, &mut s, &plan, l, &epi);
    }
    if tex {
        // Whole texels: the outputs, then 0, and alpha 1 where the model has no 4th.
        let comps: Vec<String> = (0..4)
            .map(|c| {
                if c < out_dims {
                    format!("{p}yo[lid * 4u + {c}u]")
                } else if c == 3 {
                    "1.0".into()
                } else {
                    "0.0".into()
                }
            })
            .collect();
        let _ = writeln!(
            s,
            "        // Row lid's outputs, one texel (yo is next written after this tile's next layers' barriers).
        if (lid < {rows}u) {{
            let row = tile * {rows}u + lid;
            if (row < n) {{
                textureStore({p}output_tex, vec2<u32>(row % width, row / width), vec4<f32>({}));
            }}
        }}",
            comps.join(", ")
        );
    }
    s.push_str("    }\n}\n");
    Ok(s)
}

/// The encodings of `program`: the statements before the mlp's first neuron, whose
/// sources (the mlp input) are the outputs.
pub(crate) fn encoding(program: &Program) -> Program {
    let first = program
        .stmts
        .iter()
        .position(|s| matches!(s, Stmt::Neuron { .. }))
        .expect("an mlp has neurons");
    let Stmt::Neuron { srcs, .. } = &program.stmts[first] else {
        unreachable!()
    };
    Program {
        in_dims: program.in_dims,
        out_dims: srcs.len(),
        stmts: program.stmts[..first].to_vec(),
        outputs: srcs.clone(),
        value_count: program.value_count,
    }
}

/// The header lines of a tiled form (WGSL, or GLSL with `glsl`).
fn entries(
    plan: &TilePlan,
    opts: &Options,
    in_dims: usize,
    out_dims: usize,
    glsl: bool,
) -> Vec<String> {
    let coop = opts.form == Form::CoopCompute;
    let p = &opts.prefix;
    let (g, b) = (opts.group, opts.binding);
    let (rows, wg) = (plan.rows, plan.workgroup_size);
    let name = opts.form.name();
    let products = match (coop, glsl) {
        (true, false) => {
            "16x16x16 cooperative-matrix products (coop_mat16x16: f16 operands A and B, f32 accumulator C)"
        }
        (true, true) => {
            "16x16x16 cooperative-matrix products (coopmat<float16_t> A and B, coopmat<float> accumulator, subgroup scope)"
        }
        _ => {
            "16x16 tile products as f16 x f16 multiply-adds accumulated in f32 loops (no cooperative matrices)"
        }
    };
    let requires = match (coop, glsl) {
        (true, false) => {
            "WGSL `enable f16;` and `enable wgpu_cooperative_matrix;` (wgpu: Features::SHADER_F16 and Features::EXPERIMENTAL_COOPERATIVE_MATRIX, with ExperimentalFeatures enabled; the adapter's cooperative_matrix_properties must list f16 x f16 -> f32 at 16x16x16); hardware subgroups of at most 32 invocations (each 32 consecutive invocations act as one matrix group)"
        }
        (false, false) => "WGSL `enable f16;` (wgpu: Features::SHADER_F16)",
        (true, true) => {
            "GL_KHR_cooperative_matrix, GL_KHR_memory_scope_semantics and GL_EXT_shader_explicit_arithmetic_types_float16 (Vulkan: VK_KHR_cooperative_matrix listing f16 x f16 -> f32 at 16x16x16 with subgroup scope, shaderFloat16); hardware subgroups of at most 32 invocations (each 32 consecutive invocations act as one matrix group)"
        }
        (false, true) => "GL_EXT_shader_explicit_arithmetic_types_float16 (Vulkan: shaderFloat16)",
    };
    let (len, at) = if glsl {
        (format!("{p}outputs.length()"), "layout(set = ".to_string())
    } else {
        (format!("arrayLength({p}outputs)"), "@group(".to_string())
    };
    let bind = |k: u32| {
        if glsl {
            format!("{at}{g}, binding = {})", b + k)
        } else {
            format!("{at}{g}) @binding({})", b + k)
        }
    };
    let mut entries = vec![
        format!(
            "form {name}: one compute kernel; each workgroup evaluates tiles of {rows} rows, every mlp layer as {products}"
        ),
        format!(
            "requires: {requires}{}; {} bytes of workgroup memory (limits.max_compute_workgroup_storage_size, Vulkan maxComputeSharedMemorySize)",
            if glsl && opts.buffer_is_f16() {
                "; GL_EXT_shader_16bit_storage for the f16 parameter buffer (Vulkan: storageBuffer16BitAccess)"
            } else {
                ""
            },
            plan.workgroup_bytes
        ),
        format!(
            "entry point {}, workgroup size {wg}: n = {} rows in tiles of {rows}; workgroup w evaluates tiles w, w + G, w + 2G, ... (G = number of workgroups in x)",
            if glsl {
                "main".to_string()
            } else {
                format!("{p}main")
            },
            if opts.texture_io {
                "W * H (the input texture's size)".to_string()
            } else {
                format!("{len} / {out_dims}")
            }
        ),
        format!(
            "dispatch: (G, 1, 1) workgroups, any G from 1 to 65535; each stages the weights once and then loops over its tiles, so G = min(ceil(n / {rows}), {MAX_DISPATCH}) (what nshade uses) beats one workgroup per tile; each layer runs in phases of {per} output tile(s) per group of 32 invocations",
            per = plan.per
        ),
        if opts.texture_io {
            format!(
                "bindings: {p}params {} (the parameter buffer below), {p}input_tex {} (texture_2d<f32>, W x H; row r = texel (r % W, r / W), its first {in_dims} channel(s) the raw inputs), {p}output_tex {} (texture_storage_2d<rgba32float, write>, W x H or larger; texel (r % W, r / W) = the {out_dims} output(s), then 0, alpha 1); n = W * H rows",
                bind(0),
                bind(2),
                bind(3)
            )
        } else {
            format!(
                "bindings: {p}params {} (the parameter buffer below), {p}inputs {} (f32, read; row r = raw inputs [r * {in_dims}, r * {in_dims} + {in_dims})), {p}outputs {} (f32, read-write; row r = outputs [r * {out_dims}, r * {out_dims} + {out_dims})); bind exactly n rows of outputs and at least n rows of inputs",
                bind(0),
                bind(2),
                bind(3)
            )
        },
        if plan.streamed {
            "the weights do not all fit in workgroup memory: for every tile, each layer's weights are staged in turn from the parameter buffer into one workgroup region as f16 (W zero-padded to multiples of 16 rows and columns; staged offsets below are all 0), the biases once per workgroup as f32; inputs are encoded in f32, the mlp input and hidden activations are kept as f16, accumulation is f32 and outputs are f32".to_string()
        } else {
            "once per workgroup the weights are staged from the parameter buffer into workgroup memory as f16 (each layer's W zero-padded to multiples of 16 rows and columns) and the biases as f32; inputs are encoded in f32, the mlp input and hidden activations are kept as f16, accumulation is f32 and outputs are f32".to_string()
        },
    ];
    for (k, l) in plan.layers.iter().enumerate() {
        entries.push(format!(
            "  layer {k}: {} x {} (padded {} x {}), weights at parameter {}, staged rows of {} f16 at {}; bias at parameter {}",
            l.out_dims, l.in_dims, l.out_p, l.in_p, l.weight, l.stride, l.staged, l.bias
        ));
    }
    entries
}

/// The start of a GLSL tiled kernel: `#version 450`, its extensions (cooperative matrices
/// where `coop`, subgroups where `subgroups`, then `extra` lines) and the header with its
/// interface (`entries`); with the GLSL type of a row of inputs.
pub(crate) fn glsl_head(
    model: &Model,
    opts: &Options,
    (in_dims, out_dims, wg): (usize, usize, usize),
    (coop, subgroups, extra): (bool, bool, &str),
    entries: Vec<String>,
) -> (String, String) {
    let in_ty = if in_dims == 1 {
        "float".to_string()
    } else {
        format!("vec{in_dims}")
    };
    let iface = Interface {
        signature: format!(
            "void main() of a #version 450 compute shader, local_size_x = {wg} (evaluates rows of {in_ty} into rows of {out_dims} float; no {}eval function in this form)",
            opts.prefix
        ),
        buffer: vec![glsl_params_line(model, opts)],
        entries,
    };
    let mut s = String::from("#version 450\n");
    s.push_str(&glsl_extensions(coop, subgroups, opts.buffer_is_f16()));
    s.push_str(extra);
    s.push_str(&header::write(model, opts, &iface));
    (s, in_ty)
}

/// The GLSL and Slang kernels' store of one encoded row into X: value j of `xs`
/// (expressions) at `{at}j]` as f16 (the type `half`: `float16_t` in GLSL, `half` in
/// Slang), then zeros up to the first layer's padded width.
pub(crate) fn store_x_row(
    s: &mut String,
    ind: &str,
    at: &str,
    xs: &[String],
    l0: &TileLayer,
    half: &str,
) {
    for (j, v) in xs.iter().enumerate() {
        let _ = writeln!(s, "{ind}{at}{j}u] = {half}({v});");
    }
    if l0.in_p > l0.in_dims {
        let _ = writeln!(
            s,
            "{ind}for (uint j = {}u; j < {}u; j++) {{ {at}j] = {half}(0.0); }}",
            l0.in_dims, l0.in_p
        );
    }
}

/// The GLSL kernels' declaration of the hidden layers' biases as f16 (a line, starting
/// with its newline) where they accumulate in f16 (`acc16`), else nothing.
pub(crate) fn glsl_bh_decl(p: &str, plan: &TilePlan, acc16: bool) -> String {
    if acc16 {
        format!(
            "\nshared float16_t {p}bh[{}]; // the hidden layers' biases as f16 (they accumulate in f16)",
            plan.layers.last().map_or(0, |l| l.staged_bias).max(1)
        )
    } else {
        String::new()
    }
}

/// The GLSL cooperative-matrix type of 16 x 16 `ty` elements in `usage`, subgroup scope.
pub(crate) fn glsl_mat(ty: &str, usage: &str) -> String {
    format!("coopmat<{ty}, gl_ScopeSubgroup, 16, 16, {usage}>")
}

/// The four matrix types of the GLSL kernels: f16 A, f16 B, f32 and f16 accumulators.
pub(crate) fn glsl_mats() -> (String, String, String, String) {
    (
        glsl_mat("float16_t", "gl_MatrixUseA"),
        glsl_mat("float16_t", "gl_MatrixUseB"),
        glsl_mat("float", "gl_MatrixUseAccumulator"),
        glsl_mat("float16_t", "gl_MatrixUseAccumulator"),
    )
}

/// The GLSL 450 (Vulkan) compute shader of a tiled form: the WGSL kernel's staging,
/// tiles and epilogues, the products through `GL_KHR_cooperative_matrix` (coop-compute)
/// or as loops (tiled-compute). A complete shader (`#version 450`, entry `main`).
fn write_glsl(model: &Model, program: &Program, opts: &Options) -> Result<String, Error> {
    let plan = plan_for(model, opts)?;
    if plan.output_groups > 0 {
        return Ok(crate::coop_wide::write(model, program, opts, &plan));
    }
    if plan.blocks > 0 {
        return Ok(crate::coop_rows::write(model, program, opts, &plan));
    }
    let coop = opts.form == Form::CoopCompute;
    let p = &opts.prefix;
    let (in_dims, out_dims) = (program.in_dims, program.out_dims);
    let (rows, sx, per) = (plan.rows, plan.sx, plan.per);
    let wg = plan.workgroup_size;
    let encoding = encoding(program);
    let entries = entries(&plan, opts, in_dims, out_dims, true);
    let (mut s, in_ty) = glsl_head(
        model,
        opts,
        (in_dims, out_dims, wg),
        (coop, false, ""),
        entries,
    );
    let f16 = opts.buffer_is_f16();
    let _ = write!(
        s,
        "
layout(local_size_x = {wg}) in;

{buffers}
// Staged weights (f16) and biases (f32), two f16 X tiles (feature-major, rows of {sx}),
// {per} f32 scratch tile(s) per group of 32 invocations.
shared float16_t {p}ws[{wl}];
shared float {p}bs[{bl}];
shared float16_t {p}x0[{xl}];
shared float16_t {p}x1[{xl}];
shared float {p}zc[{zl}];

void main() {{
    uint lid = gl_LocalInvocationIndex;
    uint sgid = lid / 32u;
    uint lane = lid % 32u;
    uint zslot = sgid * {zg}u;
",
        zg = per * 256,
        buffers = glsl_buffers(model, opts),
        wl = plan.weights_len.max(1),
        bl = plan.biases_len.max(1),
        xl = plan.x_len,
        zl = GROUPS * per * 256,
    );
    let d = &GLSL;
    let stage = |l: &TileLayer, ind: &str| {
        stage_weights(d, p, wg, l, &glsl_f32(weight_read(p, l), f16), ind)
    };
    let bread = |l: &TileLayer| glsl_f32(format!("{p}params[{}u + e]", l.bias), f16);
    stage_biases(d, &mut s, &plan, p, &stage, &bread, false);
    let _ = write!(
        s,
        "    barrier();
    uint n = uint({p}outputs.length()) / {out_dims}u;
    uint tiles = (n + {r1}u) / {rows}u;
    for (uint tile = gl_WorkGroupID.x; tile < tiles; tile += gl_NumWorkGroups.x) {{
",
        r1 = rows - 1
    );
    let l0 = &plan.layers[0];
    let (guard, ind) = row_header(&mut s, rows, wg);
    let arg = row_input(p, in_dims, &in_ty);
    let _ = writeln!(
        s,
        "{ind}uint row = min(tile * {rows}u + lid, n - 1u);\n{ind}{in_ty} p = {arg};"
    );
    let xs = glsl_encoding(model, &encoding, opts, ind, &mut s);
    write_x0(d, &mut s, p, &xs, l0, sx, ind, guard);
    let last = plan.layers.len() - 1;
    for (i, l) in plan.layers.iter().enumerate() {
        let xin = format!("{p}x{}", i % 2);
        let xout = format!("{p}x{}", (i + 1) % 2);
        phase_head(d, &mut s, &plan, i, l, &stage);
        if coop {
            let (ma, mb, mc) = (
                glsl_mat("float16_t", "gl_MatrixUseA"),
                glsl_mat("float16_t", "gl_MatrixUseB"),
                glsl_mat("float", "gl_MatrixUseAccumulator"),
            );
            let _ = writeln!(
                s,
                "            {mc} c = {mc}(0.0);\n            {ma} a;\n            {mb} bm;"
            );
            for k in 0..l.in_p / 16 {
                let _ = writeln!(
                    s,
                    "            coopMatLoad(a, {p}ws, {w}u + ot * {ws16}u, {stride}u, gl_CooperativeMatrixLayoutRowMajor);
            coopMatLoad(bm, {xin}, {x}u + st * 16u, {sx}u, gl_CooperativeMatrixLayoutRowMajor);
            c = coopMatMulAdd(a, bm, c);",
                    w = l.staged + k * 16,
                    ws16 = 16 * l.stride,
                    stride = l.stride,
                    x = k * 16 * sx,
                );
            }
            let _ = writeln!(
                s,
                "            coopMatStore(c, {p}zc, zt, 16u, gl_CooperativeMatrixLayoutRowMajor);"
            );
        } else {
            let _ = writeln!(
                s,
                "            for (uint v = 0u; v < 8u; v++) {{
                uint e = v * 32u + lane; uint o = ot * 16u + e / 16u; uint s = st * 16u + e % 16u;
                float acc = 0.0;
                for (uint k = 0u; k < {ip}u; k++) {{
                    acc += float({p}ws[{w}u + o * {stride}u + k]) * float({xin}[k * {sx}u + s]);
                }}
                {p}zc[zt + e] = acc;
            }}",
                ip = l.in_p,
                w = l.staged,
                stride = l.stride,
            );
        }
        let zz = format!("{p}zc[zt + e] + {p}bs[{}u + o]", l.staged_bias);
        let y = crate::syntax::activation(&crate::syntax::CSyntax, &l.act, "zz");
        let epi = if i < last {
            format!(
                "float zz = {zz}; {xout}[o * {sx}u + s] = (o < {}u) ? float16_t({y}) : float16_t(0.0);",
                l.out_dims
            )
        } else {
            format!(
                "uint row = tile * {rows}u + s;
                    if (o < {od}u && row < n) {{ float zz = {zz}; {p}outputs[row * {od}u + o] = {y}; }}",
                od = l.out_dims
            )
        };
        phase_tail(d, &mut s, &plan, l, &epi);
    }
    s.push_str("    }\n}\n");
    Ok(s)
}

/// The GLSL statements of `encoding` (the statements before the mlp, [`encoding`]) for
/// the row input `p` in f32, reading grid tables from `{prefix}params`, at `ind`; returns
/// the f32 expressions of the mlp input.
pub(crate) fn glsl_encoding(
    model: &Model,
    encoding: &Program,
    opts: &Options,
    ind: &str,
    s: &mut String,
) -> Vec<String> {
    let p = &opts.prefix;
    let f16 = opts.buffer_is_f16();
    let read = |i: &str| glsl_f32(format!("{p}params[{i}]"), f16);
    let body = Body {
        syntax: &crate::syntax::CSyntax,
        decl: "float ".into(),
        cast: None,
        param: "p".into(),
        buffer_read: &read,
        indent: ind,
        scalar: "float".into(),
        wgsl: false,
        vec4_locals: None,
        vec4_decl: "vec4",
        freq_doubling: true,
        lanes: None,
    };
    let body_opts = Options {
        weights: WeightMode::Buffer,
        loops: false,
        ..opts.clone()
    };
    body.write(model, encoding, &body_opts, s)
}

/// `expr`, a read of the GLSL kernels' parameter buffer, as a float (`f16`: the buffer
/// holds float16_t).
pub(crate) fn glsl_f32(expr: String, f16: bool) -> String {
    if f16 { format!("float({expr})") } else { expr }
}

/// The extensions of a GLSL tiled kernel's header after `#version 450`: cooperative
/// matrices (`coop`), subgroups (`subgroups`), 16-bit buffer elements (`f16`), f16
/// arithmetic always.
pub(crate) fn glsl_extensions(coop: bool, subgroups: bool, f16: bool) -> String {
    let mut s = String::new();
    if coop {
        s.push_str("#extension GL_KHR_cooperative_matrix : require\n#extension GL_KHR_memory_scope_semantics : require\n");
    }
    if subgroups {
        s.push_str("#extension GL_KHR_shader_subgroup_basic : require\n");
    }
    s.push_str("#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
    if f16 {
        s.push_str("#extension GL_EXT_shader_16bit_storage : require\n");
    }
    s
}

/// The declaration of a GLSL tiled kernel's parameter buffer (f32, or f16 where
/// [`Options::buffer_is_f16`]), without the `;`.
pub(crate) fn glsl_params_decl(model: &Model, opts: &Options) -> String {
    let (p, g, b) = (&opts.prefix, opts.group, opts.binding);
    let elem = if opts.buffer_is_f16() {
        "float16_t"
    } else {
        "float"
    };
    format!(
        "layout(std430, set = {g}, binding = {b}) readonly buffer {p}Params {{ {elem} {p}params[{}]; }}",
        model.params.len()
    )
}

/// The header's line for the parameter buffer of a GLSL tiled kernel.
pub(crate) fn glsl_params_line(model: &Model, opts: &Options) -> String {
    format!("weights: {}", glsl_params_decl(model, opts))
}

/// The GLSL tiled kernels' three storage buffers (parameters, input rows, output rows)
/// at `set = group`, bindings `binding`, `binding + 2`, `binding + 3`.
pub(crate) fn glsl_buffers(model: &Model, opts: &Options) -> String {
    let (p, g, b) = (&opts.prefix, opts.group, opts.binding);
    format!(
        "{};
layout(std430, set = {g}, binding = {b2}) readonly buffer {p}Inputs {{ float {p}inputs[]; }};
layout(std430, set = {g}, binding = {b3}) buffer {p}Outputs {{ float {p}outputs[]; }};
",
        glsl_params_decl(model, opts),
        b2 = b + 2,
        b3 = b + 3
    )
}

/// The tokens in which the WGSL and GLSL tiled kernels differ.
pub(crate) struct Dialect {
    /// Declares a u32 loop counter / a u32 value / a mutable f32.
    uloop: &'static str,
    ulet: &'static str,
    fvar: &'static str,
    /// f32 zero, the f16 type (conversion), the workgroup barrier.
    fzero: &'static str,
    half: &'static str,
    barrier: &'static str,
}

const WGSL: Dialect = Dialect {
    uloop: "var",
    ulet: "let",
    fvar: "var",
    fzero: "0.0f",
    half: "f16",
    barrier: "workgroupBarrier();",
};

pub(crate) const GLSL: Dialect = Dialect {
    uloop: "uint",
    ulet: "uint",
    fvar: "float",
    fzero: "0.0",
    half: "float16_t",
    barrier: "barrier();",
};

/// The parameter-buffer read of layer `l`'s weight (o, i).
pub(crate) fn weight_read(p: &str, l: &TileLayer) -> String {
    format!("{p}params[{}u + o * {}u + i]", l.weight, l.in_dims)
}

/// The loop that stages layer `l`'s weights (`read`: the f32 value of weight (o, i)) into
/// the workgroup array as f16, zero-padded, at `ind`.
pub(crate) fn stage_weights(
    d: &Dialect,
    p: &str,
    wg: usize,
    l: &TileLayer,
    read: &str,
    ind: &str,
) -> String {
    stage_weight_rows(d, p, wg, l, read, ind, 0..l.staged_rows())
}

/// The index in `ws` (from the layer's start) of weight (`row`, `i`) of layer `l`, both
/// expressions (GLSL and WGSL alike): rows of `stride`, or (blocked) block (i / 16, row / 16)
/// column-major.
pub(crate) fn staged_index(l: &TileLayer, row: &str) -> String {
    if l.blocked {
        format!(
            "({row} / 16u * {kb}u + i / 16u) * 256u + {row} % 16u * 16u + i % 16u",
            kb = l.in_p / 16
        )
    } else {
        format!("{row} * {}u + i", l.stride)
    }
}

/// [`stage_weights`] for the padded output rows `rows` of layer `l` alone, row
/// `rows.start` at the layer's staged offset (the kernel of `coop_wide` stages a layer
/// in chunks).
pub(crate) fn stage_weight_rows(
    d: &Dialect,
    p: &str,
    wg: usize,
    l: &TileLayer,
    read: &str,
    ind: &str,
    rows: std::ops::Range<usize>,
) -> String {
    let Dialect {
        uloop,
        ulet,
        fvar,
        fzero,
        half,
        ..
    } = d;
    let (o, row) = match rows.start {
        0 => (format!("e / {}u", l.in_p), "o".to_string()),
        o0 => (format!("{o0}u + e / {}u", l.in_p), format!("(o - {o0}u)")),
    };
    let at = staged_index(l, &row);
    format!(
        "{ind}for ({uloop} e = lid; e < {n}u; e += {wg}u) {{
{ind}    {ulet} o = {o}; {ulet} i = e % {ip}u;
{ind}    {fvar} w = {fzero};
{ind}    if (o < {od}u && i < {id}u) {{ w = {read}; }}
{ind}    {p}ws[{st}u + {at}] = {half}(w);
{ind}}}\n",
        n = rows.len() * l.in_p,
        ip = l.in_p,
        od = l.out_dims,
        id = l.in_dims,
        st = l.staged,
    )
}

/// The once-per-workgroup staging: every layer's biases (`bread`: the f32 value of bias
/// `e`), and its weights unless the plan streams them (`stage`); `half_copy` (the GLSL
/// kernel's f16 accumulation): the hidden layers' biases as f16 into `{p}bh` instead, and
/// the last layer's into `{p}bs` at 0.
pub(crate) fn stage_biases(
    d: &Dialect,
    s: &mut String,
    plan: &TilePlan,
    p: &str,
    stage: &dyn Fn(&TileLayer, &str) -> String,
    bread: &dyn Fn(&TileLayer) -> String,
    half_copy: bool,
) {
    s.push_str(if plan.streamed {
        "    // Biases, once per workgroup (each layer's weights are staged before it, per tile).\n"
    } else {
        "    // Weights and biases, once per workgroup.\n"
    });
    let Dialect {
        uloop,
        fvar,
        fzero,
        half,
        ..
    } = d;
    let hidden = plan.layers.len().saturating_sub(1);
    for (i, l) in plan.layers.iter().enumerate() {
        if !plan.streamed {
            s.push_str(&stage(l, "    "));
        }
        let store = match (half_copy, i < hidden) {
            (true, true) => format!("{p}bh[{}u + e] = {half}(v);", l.staged_bias),
            (true, false) => format!("{p}bs[e] = v;"),
            (false, _) => format!("{p}bs[{}u + e] = v;", l.staged_bias),
        };
        let _ = writeln!(
            s,
            "    for ({uloop} e = lid; e < {op}u; e += {wg}u) {{
        {fvar} v = {fzero};
        if (e < {od}u) {{ v = {bread}; }}
        {store}
    }}",
            wg = plan.workgroup_size,
            op = l.out_p,
            od = l.out_dims,
            bread = bread(l),
        );
    }
}

/// The end of a tile's row phase: the mlp input `xs` (f32 expressions) into X_0 as f16,
/// zero rows up to the first layer's padded width, the guard closed, a barrier.
#[allow(clippy::too_many_arguments)]
fn write_x0(
    d: &Dialect,
    s: &mut String,
    p: &str,
    xs: &[String],
    l0: &TileLayer,
    sx: usize,
    ind: &str,
    guard: bool,
) {
    let Dialect {
        uloop,
        fzero,
        half,
        barrier,
        ..
    } = d;
    for (j, v) in xs.iter().enumerate() {
        let _ = writeln!(s, "{ind}{p}x0[{}u + lid] = {half}({v});", j * sx);
    }
    if l0.in_p > l0.in_dims {
        let _ = writeln!(
            s,
            "{ind}for ({uloop} j = {}u; j < {}u; j++) {{ {p}x0[j * {sx}u + lid] = {half}({fzero}); }}",
            l0.in_dims, l0.in_p
        );
    }
    if guard {
        s.push_str("        }\n");
    }
    let _ = writeln!(s, "        {barrier}");
}

/// The start of layer `i` (`l`): a comment, its weights staged when the plan streams
/// them (the previous phase ended in a barrier, so nobody reads them now), then the phase
/// loop and, per scratch tile of the group, its output tile (ot, st), clamped to the last
/// (q).
fn phase_head(
    d: &Dialect,
    s: &mut String,
    plan: &TilePlan,
    i: usize,
    l: &TileLayer,
    stage: &dyn Fn(&TileLayer, &str) -> String,
) {
    let Dialect {
        uloop,
        ulet,
        barrier,
        ..
    } = d;
    let (per, st_n, nt) = (plan.per, plan.rows / 16, l.tiles(plan.rows));
    let _ = writeln!(
        s,
        "        // Layer {i}: {} x {} ({}), {nt} tiles of 16 outputs x 16 rows.",
        l.out_dims,
        l.in_dims,
        l.act.name()
    );
    if plan.streamed {
        s.push_str(&stage(l, "        "));
        let _ = writeln!(s, "        {barrier}");
    }
    let _ = writeln!(
        s,
        "        for ({uloop} j = 0u; j < {nj}u; j++) {{
          for ({uloop} u = 0u; u < {per}u; u++) {{
            {ulet} t = (j * {GROUPS}u + sgid) * {per}u + u; {ulet} q = min(t, {lt}u);
            {ulet} ot = q / {st_n}u; {ulet} st = q % {st_n}u; {ulet} zt = zslot + u * 256u;",
        nj = nt.div_ceil(GROUPS * per),
        lt = nt - 1,
    );
}

/// The end of a phase of layer `l`: a barrier, then each scratch tile's 256 values
/// through `epi` (bias, activation, store; `e`, `o`, `s` in scope), 8 per invocation,
/// and a barrier.
fn phase_tail(d: &Dialect, s: &mut String, plan: &TilePlan, l: &TileLayer, epi: &str) {
    let Dialect {
        uloop,
        ulet,
        barrier,
        ..
    } = d;
    let (per, st_n, nt) = (plan.per, plan.rows / 16, l.tiles(plan.rows));
    let _ = writeln!(
        s,
        "          }}
            {barrier}
          for ({uloop} u = 0u; u < {per}u; u++) {{
            {ulet} t = (j * {GROUPS}u + sgid) * {per}u + u;
            {ulet} ot = t / {st_n}u; {ulet} st = t % {st_n}u; {ulet} zt = zslot + u * 256u;
            if (t < {nt}u) {{
                for ({uloop} v = 0u; v < 8u; v++) {{
                    {ulet} e = v * 32u + lane; {ulet} o = ot * 16u + e / 16u; {ulet} s = st * 16u + e % 16u;
                    {epi}
                }}
            }}
          }}
            {barrier}
        }}"
    );
}

/// The start of the per-row phase of a tile: its comment and, when the tile has fewer
/// rows than the workgroup invocations, the `if (lid < rows)` guard; returns whether the
/// guard is open and the indentation of the phase's body.
fn row_header(s: &mut String, rows: usize, wg: usize) -> (bool, &'static str) {
    let guard = rows < wg;
    let _ = writeln!(
        s,
        "        // Row lid of the tile: inputs (the last row again past n), encodings in f32, the mlp input as f16."
    );
    if guard {
        let _ = writeln!(s, "        if (lid < {rows}u) {{");
    }
    (guard, if guard { "            " } else { "        " })
}

/// The raw inputs of `row` as one value: a scalar for one input, else `in_ty(...)`.
pub(crate) fn row_input(p: &str, in_dims: usize, in_ty: &str) -> String {
    row_input_at(p, in_dims, in_ty, "row")
}

/// [`row_input`] of the row the expression `row` names.
pub(crate) fn row_input_at(p: &str, in_dims: usize, in_ty: &str, row: &str) -> String {
    let comps: Vec<String> = (0..in_dims)
        .map(|k| format!("{p}inputs[{row} * {in_dims}u + {k}u]"))
        .collect();
    if in_dims == 1 {
        comps[0].clone()
    } else {
        format!("{in_ty}({})", comps.join(", "))
    }
}
