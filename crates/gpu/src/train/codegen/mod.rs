//! Generates the WGSL of one training step for a resolved network.
//!
//! **Step kernel** (`nsh_step`): `groups` workgroups of `threads` invocations. Each
//! workgroup handles `chunks` chunks of `samples` consecutive samples; per chunk it draws
//! the samples (the same hash as `TrainingData::fill`), runs forward, the loss gradient
//! and backward with every intermediate tensor in workgroup memory, and adds the chunk's
//! weight gradients into per-invocation register accumulators. Each parameter's
//! accumulator belongs to exactly one invocation, so a workgroup's partial sum is written
//! once at the end (`partial[group · P + p]`), with no atomics. The loss of the
//! workgroup's samples is reduced in a fixed order into `loss_partial[group]`.
//!
//! **Adam kernel** (`nsh_adam`): one invocation per parameter adds the partial sums in
//! group order (fixed, so the result is bit-reproducible), then applies Adam to the fp32
//! master weights; one extra workgroup reduces the loss partials into the step's slot.
//!
//! Workgroup-memory layout: a tensor of width D occupies D rows of `R = samples + 1`
//! floats (value j of sample s at `(base + j)·R + s`); the odd stride keeps the
//! column-wise reads of the weight-gradient loops free of bank conflicts. GEMM-like loops
//! compute small register tiles (up to 4×4) with strided assignment so that neighbouring
//! invocations read neighbouring words. On the vec4 path (`Launch::vec`) rows are
//! `vec4<f32>`s of 4 consecutive samples, every matrix loop reads 4 samples per load, and
//! weights come from the padded `vec4` copy described by [`VecPad`].
//!
//! Files: this one holds the generator (`Gen`: workgroup-memory layout, the module tree's
//! forward and backward, sampling, loss, the scalar f32 loops) and assembles the step
//! kernel; `vec4.rs` the vec4 loops, `staged.rs` the staged cooperative-matrix and f16
//! products, `fused.rs` the fused cooperative-matrix MLP (docs/gpu-training.md), and
//! `adam.rs` the reduce + Adam kernel and the loss scale's constants.

use super::wgsl::{self, lit};
use nshade_core::Activation;
use nshade_core::loss::Loss;
use nshade_core::module::{Layer, Linear, Module};
use nshade_core::network::Network;
use nshade_shader::wgsl as shader_wgsl;
use std::fmt::Write;

mod adam;
mod fused;
mod glsl;
mod glsl_dw;
mod glsl_grid;
mod glsl_private;
mod staged;
mod vec4;

pub use adam::{
    LOSS_SCALE_INTERVAL, LOSS_SCALE_MAX, LOSS_SCALE_MIN, LossScale, adam_kernel,
    adam_kernel_scaled, loss_scale,
};
use fused::{DW_END, Fold, f16_range_check};
pub use fused::{fused_enabled, net_fusable};
pub use glsl::{
    GlslLaunch, GlslShape, Interleave, MERGED_OUTPUT_MARK, SHUFFLE_FOLDS_EXT, acc16_fits,
    acc16_for, ahead_fits, ahead_for, compact_regions, compact_shape, early_stores, glsl_fits,
    glsl_samples, glsl_step_kernel, inplace_layers, merged_output_fits,
};
pub use glsl_dw::{DwForm, DwSplit, glsl_dw_kernel, split_layers_for, split_mode};
pub use glsl_private::{
    PRIVATE_SAMPLES, PrivateLaunch, private_enabled, private_fits, private_step_kernel,
};
pub use vec4::{VecLayer, VecPad};

/// Where samples come from, as the kernel sees it.
#[derive(Clone, Copy, Debug)]
pub enum DataKind {
    Texture {
        width: u32,
        height: u32,
    },
    Rows {
        rows: u32,
        in_dims: u32,
        out_dims: u32,
    },
}

/// The shape of the launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Samples per chunk (a power of two).
    pub samples: u32,
    /// Invocations per workgroup.
    pub threads: u32,
    /// Workgroups per step.
    pub groups: u32,
    /// Chunks per workgroup.
    pub chunks: u32,
    /// f32 path: hidden-layer gradients in two extra buffers instead of in place, so a
    /// layer's dW and dx share one phase (one barrier fewer per layer, more memory; on
    /// the H200 it was slower, so it is off by default).
    pub pingpong: bool,
    /// Register tiles may leave up to 1 − 1/tile_k of the invocations idle in a phase
    /// (bigger tiles, fewer workgroup-memory loads per multiply-add).
    pub tile_k: u32,
    /// f32 path: matrix loops on 4-sample vectors (`vec4` loads from workgroup memory,
    /// weights from a padded `vec4` copy kept by the Adam kernel); needs `samples` to be
    /// a multiple of 4.
    pub vec: bool,
    /// Fused cooperative-matrix MLP: `subgroupBarrier` (needs the device feature
    /// `SUBGROUP_BARRIER`) between a subgroup's matrix store into its scratch tile and
    /// its invocations' reads of it, one workgroup barrier per layer; otherwise two
    /// workgroup barriers per tile iteration.
    pub sgbar: bool,
    /// Fused cooperative-matrix MLP: f16 rows of `xh`/`gh` are `samples + skew` long and
    /// scratch tiles have rows of 16 + skew/2 floats (0 or 8: a padded stride moves the
    /// rows a matrix load reads into different banks).
    pub skew: u32,
    /// Fused cooperative-matrix MLP: the layers' f16 inputs live in a per-workgroup
    /// region of a storage buffer (binding 9, L2-resident) instead of workgroup memory,
    /// so that chunks of more samples fit.
    pub xglobal: bool,
    /// Fused cooperative-matrix MLP: the f16 weights are copied into workgroup memory
    /// (rows padded by 8) at the start of the step kernel, where they fit.
    pub wsh: bool,
    /// Grid-table gradients: one 64-bit `atomicAdd` per contribution (device features
    /// `SHADER_INT64` and `SHADER_INT64_ATOMIC_ALL_OPS`) instead of a carry-propagating
    /// pair of 32-bit ones; the same accumulator bits either way.
    pub atomic64: bool,
}

/// Invocations per workgroup of the Adam kernel.
pub const ADAM_THREADS: u32 = 256;
/// Parameters per Adam workgroup: its invocations split the group sums 8 ways (a fixed
/// interleaving, combined in a fixed order), so the reduction has 8× the parallelism of
/// one invocation per parameter.
pub const ADAM_PARAMS: u32 = 32;

/// Parameters per Adam workgroup: [`ADAM_PARAMS`], or `NSHADE_GPU_ADAMP` (8, 16, 32, 64
/// or 128) for tuning; 256 / it slices per parameter.
pub fn adam_params() -> u32 {
    match std::env::var("NSHADE_GPU_ADAMP")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n @ (8 | 16 | 32 | 64 | 128)) => n,
        _ => ADAM_PARAMS,
    }
}

/// A tensor in workgroup memory: rows `base..base + width`.
#[derive(Clone, Copy, Debug)]
struct View {
    base: usize,
    width: usize,
}

impl View {
    fn sub(self, col: usize, width: usize) -> View {
        View {
            base: self.base + col,
            width,
        }
    }
}

/// The forward pass of a module, kept for its backward pass.
enum Fwd<'a> {
    Leaf {
        m: &'a Module,
        x: View,
        y: View,
    },
    Mlp {
        layers: Vec<LayerFwd<'a>>,
        /// Fused cooperative-matrix MLP: offset (f16 elements) of every layer's input in
        /// `xh` (the hidden layers' activations live only there, as f16).
        fused: Option<Vec<usize>>,
    },
    Chain(Vec<Fwd<'a>>),
    Cat {
        x: View,
        y: View,
        children: Vec<Fwd<'a>>,
    },
}

struct LayerFwd<'a> {
    l: &'a Linear,
    x: View,
    z: Option<View>,
    a: View,
}

/// A switch for A/B timings: `NSHADE_GPU_<name>=0` turns one kernel feature off (on by
/// default): `PREFETCH` (texels loaded a chunk ahead), `BSH` (the fused path's biases
/// in workgroup memory as the accumulator's start), `FSPREAD` (the fused path's freq
/// phase over (input, octave, sample)), the GLSL step kernel's `SHFOLD` (its folds
/// through subgroup shuffles) and the subgroup-private kernel's `PRIVATE_CONVERT`,
/// `PRIVATE_DBPACK` and `PRIVATE_FOLD` (`PrivateLaunch`).
/// `NSHADE_GPU_HOIST` (`Gen::hoist`) takes a level.
pub(crate) fn knob(name: &str) -> bool {
    std::env::var(format!("NSHADE_GPU_{name}")).map_or(true, |v| v != "0")
}

fn largest_tile(n: usize, max: usize) -> usize {
    [4, 2, 1]
        .into_iter()
        .find(|&t| t <= max && n.is_multiple_of(t))
        .unwrap_or(1)
}

struct Gen {
    s: usize,
    r: usize,
    wg: usize,
    rows: usize,
    body: String,
    accs: usize,
    writeback: String,
    /// Cooperative-matrix layout (None: the plain f32 path).
    coop: Option<Pad>,
    /// f16 elements of the `xh` / `gh` staging arrays and f32 elements of `zc`.
    xh: usize,
    gh: usize,
    zc: usize,
    /// dW accumulator slots (one 16×16 tile per subgroup each) handed out so far.
    dw_tiles: usize,
    /// Fused path: the dW slots that accumulate in f16 across the chunks (those of
    /// layers with more than 64 inputs or outputs; `NSHADE_GPU_DW16`: 0 none, 2 all).
    /// Their group sums are written to the partials as f32, like the others.
    dw_half: Vec<usize>,
    /// Parameters of the network (the partials' dummy area follows them).
    param_count: usize,
    /// The output layer (by weight offset) whose activation derivative the loss phase
    /// applies, so its backward skips that phase.
    fused_out: Option<usize>,
    pingpong: bool,
    /// Register tiles may leave up to 1 − 1/tile_k of the invocations idle in a phase.
    tile_k: usize,
    /// The `vec4` f32 path's padded weight layout (None: scalar loops).
    vec: Option<VecPad>,
    /// Dynamic loss scaling: gradients staged as f16 are checked for overflow.
    scaled: bool,
    /// The f16 path: the cooperative-matrix path's layout and f16 staging (`coop` is
    /// set), with plain multiply-add loops (f16 operands, f32 accumulation) instead of
    /// cooperative matrices.
    f16: bool,
    /// Cooperative-matrix path: MLPs whose hidden activations need no z run fused
    /// ([`Gen::fused_forward`]); the others (and `NSHADE_GPU_FUSED=0`) stage per layer.
    fused: bool,
    /// Fused path: `subgroupBarrier` between a subgroup's matrix store into its scratch
    /// tile and its invocations' reads (`Launch::sgbar`), instead of `workgroupBarrier`.
    sgbar: bool,
    /// Fused path: row stride (f16 elements) of `xh` and `gh` (S + skew).
    sx: usize,
    /// Fused path: X in the storage buffer `xg` (`Launch::xglobal`).
    xglobal: bool,
    /// Fused path: weights read from the workgroup copy `ws` (`Launch::wsh`).
    wsh: bool,
    /// Fused path: the next `freq` stage also writes its output as f16 into `xh` at this
    /// offset (it feeds a fused MLP), so the MLP needs no conversion phase.
    mirror_freq: Option<usize>,
    /// Fused path: the f32 rows (by base) whose f16 copy is already in `xh` (written by
    /// the phase that produced them: the sampling or a `freq` stage).
    mirrored: Option<usize>,
    /// Code for the start of the kernel (before its first barrier).
    init_extra: String,
    /// The network input's rows (set by `build_body`).
    input: Option<usize>,
    /// Fused path with `wsh`: f32 elements of `bs`, the workgroup copy of the MLPs'
    /// biases (each layer's at a multiple of 16, zero-padded to `out_p`).
    bs_len: usize,
    /// Fused path: the accumulator's initial value in the next [`Gen::fused_tiles`]
    /// (None: zero).
    cinit: Option<String>,
    /// Fused path: bias gradients summed in blocks, added up at the end of the kernel.
    folds: Vec<Fold>,
    /// Fused path: weight tiles loaded into matrix registers once per workgroup (before
    /// the chunk loop; see [`Gen::hoist`]), and how many.
    hoisted: String,
    hoisted_n: usize,

    /// Fused path: row stride (floats) of a subgroup's 16×16 scratch tile in `zc`.
    zst: usize,
    /// Fused path: the most tiles of one phase (subgroups beyond it share the last
    /// scratch tile, see [`Gen::fused_tiles`]).
    nt_max: usize,
    /// Fused path: f16 elements of `xh` given to the MLPs so far (each MLP keeps its
    /// layers' inputs there from its forward to its backward).
    xh_next: usize,
    /// Timing experiments on the fused path (`NSHADE_GPU_EXP`: `fwd` no backward,
    /// `nodw` no weight-gradient products, `noepi` empty tile epilogues); the kernels
    /// then compute wrong gradients — for splitting a step's time only.
    exp: String,
    /// Grid table gradients in packed lanes (`grid::Packing`; [`grid::packing_for`]).
    pack: Option<super::grid::Packing>,
}

/// Padded (multiple-of-16) layout of every linear layer's weights for the cooperative
/// matrix path: the f16 weight copy `w16` and the gradient partials use it.
#[derive(Clone, Debug, Default)]
pub struct Pad {
    /// (weight offset in the flat vector, out, in, padded offset, padded out, padded in)
    pub layers: Vec<PadLayer>,
    /// Padded weight elements; in the partials the biases follow, packed layer after
    /// layer (`PadLayer::bias_p`).
    pub weights: usize,
    /// Bias elements (the sum of the layers' `out_dims`).
    pub biases: usize,
}

#[derive(Clone, Copy, Debug)]
pub struct PadLayer {
    pub weight: usize,
    pub bias: usize,
    pub out_dims: usize,
    pub in_dims: usize,
    pub padded: usize,
    pub out_p: usize,
    pub in_p: usize,
    /// Position of the layer's bias gradients in a group's partials (after all the
    /// padded weights; before, they sat at `weights + bias`, which left a gap as large as
    /// the weights in every group's partials).
    pub bias_p: usize,
}

impl Pad {
    pub fn of(net: &Network) -> Pad {
        fn walk(m: &Module, pad: &mut Pad) {
            match m {
                Module::Mlp(mlp) => {
                    for l in &mlp.layers {
                        let (op, ip) = (
                            l.out_dims.next_multiple_of(16),
                            l.in_dims.next_multiple_of(16),
                        );
                        pad.layers.push(PadLayer {
                            weight: l.weight,
                            bias: l.bias,
                            out_dims: l.out_dims,
                            in_dims: l.in_dims,
                            padded: pad.weights,
                            out_p: op,
                            in_p: ip,
                            bias_p: pad.biases,
                        });
                        pad.weights += op * ip;
                        pad.biases += l.out_dims;
                    }
                }
                Module::Chain(c) => c.stages.iter().for_each(|s| walk(s, pad)),
                Module::Cat(c) => c.children.iter().for_each(|s| walk(s, pad)),
                _ => {}
            }
        }
        let mut pad = Pad::default();
        walk(&net.root, &mut pad);
        let w = pad.weights;
        for l in &mut pad.layers {
            l.bias_p += w;
        }
        pad
    }
    fn layer(&self, weight: usize) -> PadLayer {
        *self
            .layers
            .iter()
            .find(|l| l.weight == weight)
            .expect("layer in pad table")
    }
    /// Offset of the per-group scratch tile (for surplus accumulator slots), aligned to
    /// 16 floats: matrix stores need 16-byte-aligned addresses. (`p`, the dense
    /// parameter count, is no longer needed: every dense parameter is a weight or a bias
    /// of a layer of the table.)
    pub fn dummy(&self, _p: usize) -> usize {
        (self.weights + self.biases).next_multiple_of(16)
    }
    /// Floats per group in the partials buffer (a multiple of 16, so every group's
    /// base address is aligned for matrix stores).
    pub fn partial_len(&self, p: usize) -> usize {
        self.dummy(p) + 256
    }
}

/// The dW tile that subgroup `sgid` owns in round `j`: `t`, clamped to the last of `nt`
/// tiles (`q`), as (`ot`, `it`) = (output, input) tile of a layer with `it_n` input tiles.
fn dw_tile(j: usize, nt: usize, it_n: usize) -> String {
    format!(
        "        let t = {j}u * NSG + sgid; let q = min(t, {last}u); let ot = q / {it_n}u; let it = q % {it_n}u;",
        last = nt - 1
    )
}

impl Gen {
    #[allow(clippy::too_many_arguments)]
    fn new(
        s: usize,
        wg: usize,
        coop: Option<Pad>,
        param_count: usize,
        pingpong: bool,
        tile_k: usize,
        vec: Option<VecPad>,
    ) -> Gen {
        // vec4 path: rows of R floats, R a multiple of 4 with R/4 odd (column reads of
        // neighbouring rows by neighbouring invocations hit different banks)
        let vec = vec.filter(|_| coop.is_none() && s.is_multiple_of(4));
        let r = if vec.is_some() {
            if (s / 4).is_multiple_of(2) { s + 4 } else { s }
        } else {
            s + 1
        };
        Gen {
            vec,
            param_count,
            fused_out: None,
            pingpong: pingpong && coop.is_none(),
            tile_k: tile_k.max(1),
            s,
            r,
            wg,
            rows: 0,
            body: String::new(),
            accs: 0,
            writeback: String::new(),
            coop,
            xh: 0,
            gh: 0,
            zc: 0,
            dw_tiles: 0,
            dw_half: Vec::new(),
            scaled: false,
            f16: false,
            fused: false,
            sgbar: false,
            sx: s,
            zst: 16,
            xglobal: false,
            wsh: false,
            mirror_freq: None,
            mirrored: None,
            init_extra: String::new(),
            input: None,
            bs_len: 0,
            cinit: None,
            folds: Vec::new(),
            hoisted: String::new(),
            hoisted_n: 0,
            nt_max: 1,
            xh_next: 0,
            exp: std::env::var("NSHADE_GPU_EXP").unwrap_or_default(),
            pack: None,
        }
    }

    /// Fused path: rows of `xh`/`gh` padded by `skew` f16 elements.
    fn set_skew(&mut self, skew: usize) {
        self.sx = self.s + skew;
        // (scratch rows stay 16 floats: the epilogue reads 32 consecutive floats per
        // load, free of conflicts, and 2 KiB more would not fit beside padded f16 rows
        // for freq(8) | mlp(64x4) at 32 samples)
        self.zst = 16;
        let _ = skew;
    }

    /// After the chunk loop: subgroup `sgid` stores its dW tile of slot `slot` into the
    /// partial sums (surplus tiles, `t ≥ nt`, into the dummy block).
    fn dw_writeback(
        &mut self,
        tile: &str,
        nt: usize,
        slot: usize,
        ip: usize,
        dummy: usize,
        wp: usize,
    ) {
        let head = format!(
            "    {{\n{tile}\n        let real = t < {nt}u;\n        let stride = select(16u, {ip}u, real);\n        let off = pbase + select({dummy}u, {wp}u + (ot * 16u) * {ip}u + it * 16u, real);"
        );
        if !self.dw_half.contains(&slot) {
            let _ = writeln!(
                self.writeback,
                "{head}\n        coopStoreT(dws{slot}, &partial[off], stride);\n    }}"
            );
            return;
        }
        // an f16 tile goes through the subgroup's 256 elements of `gh` (dead by then)
        // and its invocations write it as f32, 8 values each; with dynamic loss scaling
        // a sum that reached f16's largest value (an accumulator that overflowed to ∞,
        // or one that saturated) flags the step
        self.gh = self.gh.max(self.wg / 32 * 256);
        if !self.writeback.contains("&gh[sgid * 256u]") {
            // the last chunk's bias sums may still read `gh` (its last dW phase ends
            // without a barrier)
            self.writeback
                .push_str("    workgroupBarrier(); // gh is scratch from here\n");
        }
        let chk = if self.scaled {
            " lsf |= select(0u, 1u, nsh_ls_over(v, 65503.0f));"
        } else {
            ""
        };
        let _ = writeln!(
            self.writeback,
            "{head}\n        coopStoreT(dws{slot}, &gh[sgid * 256u], 16u);\n        workgroupBarrier();\n        \
             for (var u = 0u; u < 8u; u++) {{ let e = u * 32u + lane; let v = f32(gh[sgid * 256u + e]);{chk} partial[off + (e / 16u) * stride + e % 16u] = v; }}\n        \
             workgroupBarrier();\n    }}"
        );
    }

    /// Fused path: the start of an index expression into X (`xh[` in workgroup memory,
    /// or this workgroup's region of the storage buffer `xg`).
    fn xa(&self) -> &'static str {
        if self.xglobal { "xg[xgb + " } else { "xh[" }
    }

    /// Fused path: the weights of the layer at `pl` as (array, offset, row stride):
    /// the storage copy `w16` (rows of `in_p`), or the workgroup copy `ws` (rows of
    /// `in_p + 8`, layers one after another as in [`Pad`]).
    fn wsrc(&self, pl: &PadLayer) -> (&'static str, usize, usize) {
        if self.wsh {
            let pad = self.coop.as_ref().unwrap();
            let off = pad
                .layers
                .iter()
                .take_while(|l| l.weight != pl.weight)
                .map(|l| l.out_p * (l.in_p + 8))
                .sum();
            ("ws", off, pl.in_p + 8)
        } else {
            ("w16", pl.padded, pl.in_p)
        }
    }

    /// Fused path: f16 elements of the workgroup weight copy `ws`.
    fn ws_len(&self) -> usize {
        self.coop
            .as_ref()
            .map_or(0, |p| p.layers.iter().map(|l| l.out_p * (l.in_p + 8)).sum())
    }

    /// Fused path: `zc` holds the scratch tiles (after the body is generated).
    fn finish_scratch(&mut self) {
        if self.fused {
            self.zc = self.zc.max(self.scratch_tiles() * 16 * self.zst);
        }
    }

    /// Fused path: scratch tiles in `zc` (`SCR`).
    fn scratch_tiles(&self) -> usize {
        (self.wg / 32).min(self.nt_max).max(1)
    }

    fn alloc(&mut self, width: usize) -> View {
        let v = View {
            base: self.rows,
            width,
        };
        self.rows += width;
        v
    }

    /// `sh[...]` of value `j` (expression) of sample `s` (expression) in `v` (on the
    /// vec4 path `sh` is an array of `vec4<f32>` with rows of RV vectors, and this is one
    /// component).
    fn at(&self, v: View, j: &str, s: &str) -> String {
        if self.vec.is_some() {
            format!("sh[({}u + {j}) * RV + ({s}) / 4u][({s}) % 4u]", v.base)
        } else {
            format!("sh[({}u + {j}) * R + {s}]", v.base)
        }
    }

    /// The `vec4` of samples `4·sg .. 4·sg + 4` of value `j` in `v` (vec4 path).
    fn at4(&self, v: View, j: &str, sg: &str) -> String {
        format!("sh[({}u + {j}) * RV + {sg}]", v.base)
    }

    /// A loop over `n` items spread over the workgroup, then a barrier.
    fn items(&mut self, n: usize, body: &str) {
        let _ = writeln!(
            self.body,
            "    for (var e = lid; e < {n}u; e += WG) {{\n{body}    }}\n    workgroupBarrier();"
        );
    }

    /// Per element (j < width, s < S): `dst[j][s] = f(src[j][s])` given as `expr(x)`.
    fn map(&mut self, src: View, dst: View, f: impl Fn(&str) -> String, add: bool) {
        let n = src.width * self.s;
        let op = if add { "+=" } else { "=" };
        let body = format!(
            "        let j = e / S; let s = e % S;\n        let x = {};\n        {} {op} {};\n",
            self.at(src, "j", "s"),
            self.at(dst, "j", "s"),
            f("x")
        );
        self.items(n, &body);
    }

    fn forward<'a>(&mut self, m: &'a Module, x: View, out: Option<View>) -> Fwd<'a> {
        match m {
            Module::Grid(gr) => {
                let y = out.unwrap_or_else(|| self.alloc(m.out_dims()));
                let mut body = super::grid::forward_body(gr, &|j, s| self.at(x, j, s), &|j, s| {
                    self.at(y, j, s)
                });
                if self.exp.contains("nogridfwd") {
                    // timing only: the lookups' outputs as constants (no table reads)
                    body.clear();
                    for f in 0..gr.features {
                        let yj =
                            self.at(y, &format!("(e / S) * {}u + {f}u", gr.features), "(e % S)");
                        body.push_str(&format!("        {yj} = f32(e & 7u) * 0.01f;\n"));
                    }
                }
                self.items(gr.levels.len() * self.s, &body);
                Fwd::Leaf { m, x, y }
            }
            Module::Identity(_) => {
                let y = match out {
                    Some(o) => {
                        self.map(x, o, |v| v.to_string(), false);
                        o
                    }
                    None => x,
                };
                Fwd::Leaf { m, x, y }
            }
            Module::Frequency(f) => {
                let mirror = self.mirror_freq.take();
                // the f32 rows are dead when the f16 copy feeds a fused MLP and the input
                // is the network's (nothing upstream has parameters, so no backward
                // reads them): not even allocated; the view only names the MLP's input
                let f32_rows = !(mirror.is_some() && out.is_none() && self.input == Some(x.base));
                let y = match out {
                    Some(o) => o,
                    None if f32_rows => self.alloc(m.out_dims()),
                    None => View {
                        base: self.rows,
                        width: m.out_dims(),
                    },
                };
                let (d, k) = (f.in_dims, f.octaves);
                // fused path: one item per (input, octave, sample), the octave chosen by
                // a switch that is uniform across 32 neighbouring samples — k times the
                // invocations of one item per (input, sample) with k octaves in a row
                // (freq(8) | mlp(64x4): 2-3% faster on the H200)
                let spread = self.fused && k > 1 && knob("FSPREAD");
                let mut body = String::new();
                // the k-th outputs: sin in row i·K + k, cos in row D·K + i·K + k
                let store = |body: &mut String, o: &str| {
                    let (rs, rc) = (
                        format!("i * {k}u + {o}"),
                        format!("{}u + i * {k}u + {o}", d * k),
                    );
                    if f32_rows {
                        let _ = writeln!(
                            body,
                            "        {} = vs;\n        {} = vc;",
                            self.at(y, &rs, "s"),
                            self.at(y, &rc, "s"),
                        );
                    }
                    if let Some(x0) = mirror {
                        let _ = writeln!(
                            body,
                            "        xh[{x0}u + ({rs}) * SX + s] = f16(vs); xh[{x0}u + ({rc}) * SX + s] = f16(vc);"
                        );
                    }
                };
                let _ = writeln!(
                    body,
                    "{}\n        let xv = {};{}",
                    if spread {
                        format!(
                            "        let s = e % S; let io = e / S; let i = io / {k}u; let o = io % {k}u;"
                        )
                    } else {
                        "        let i = e / S; let s = e % S;".to_string()
                    },
                    self.at(x, "i", "s"),
                    if spread {
                        "\n        var vs = 0.0f; var vc = 0.0f;\n        switch o {"
                    } else {
                        ""
                    }
                );
                for o in 0..k {
                    let (sv, cv) = (
                        shader_wgsl::frequency_sin("xv", o),
                        shader_wgsl::frequency_cos("xv", o),
                    );
                    if spread {
                        let _ =
                            writeln!(body, "            case {o}u: {{ vs = {sv}; vc = {cv}; }}");
                    } else {
                        let _ = writeln!(body, "        {{ let vs = {sv}; let vc = {cv};");
                        store(&mut body, &format!("{o}u"));
                        body.push_str("        }\n");
                    }
                }
                if spread {
                    body.push_str("            default: {}\n        }\n");
                    store(&mut body, "o");
                }
                if mirror.is_some() {
                    self.mirrored = Some(y.base);
                }
                self.items(d * if spread { k } else { 1 } * self.s, &body);
                Fwd::Leaf { m, x, y }
            }
            Module::Triangle(t) => {
                let y = out.unwrap_or_else(|| self.alloc(m.out_dims()));
                let (d, k) = (t.in_dims, t.octaves);
                let mut body = format!(
                    "        let i = e / S; let s = e % S;\n        let xv = {};\n",
                    self.at(x, "i", "s")
                );
                for o in 0..k {
                    let _ = writeln!(
                        body,
                        "        {} = {};",
                        self.at(y, &format!("i * {k}u + {o}u"), "s"),
                        shader_wgsl::triangle("xv", o),
                    );
                }
                self.items(d * self.s, &body);
                Fwd::Leaf { m, x, y }
            }
            Module::Mlp(mlp) if self.fused => {
                let (layers, xo) = self.fused_forward(&mlp.layers, x, out);
                Fwd::Mlp {
                    layers,
                    fused: Some(xo),
                }
            }
            Module::Mlp(mlp) => {
                let mut layers = Vec::new();
                let mut input = x;
                let last = mlp.layers.len() - 1;
                for (i, l) in mlp.layers.iter().enumerate() {
                    let a = match out {
                        Some(o) if i == last => o,
                        _ => self.alloc(l.out_dims),
                    };
                    let z = wgsl::needs_z(l.act).then(|| self.alloc(l.out_dims));
                    if self.coop.is_some() {
                        self.coop_forward(l, input, z, a);
                    } else {
                        self.linear_forward(l, input, z, a);
                    }
                    layers.push(LayerFwd { l, x: input, z, a });
                    input = a;
                }
                Fwd::Mlp {
                    layers,
                    fused: None,
                }
            }
            Module::Chain(c) => {
                let mut stages = Vec::new();
                let mut input = x;
                let last = c.stages.len() - 1;
                for (i, st) in c.stages.iter().enumerate() {
                    // fused path: a freq stage that feeds an MLP writes the MLP's f16
                    // input itself (the MLP's X_0 starts at the next free `xh` element)
                    if self.fused
                        && !self.xglobal
                        && matches!(st, Module::Frequency(_))
                        && matches!(c.stages.get(i + 1), Some(Module::Mlp(_)))
                    {
                        self.mirror_freq = Some(self.xh_next);
                    }
                    let f = self.forward(st, input, if i == last { out } else { None });
                    self.mirror_freq = None;
                    input = fwd_out(&f);
                    stages.push(f);
                }
                Fwd::Chain(stages)
            }
            Module::Cat(c) => {
                let y = out.unwrap_or_else(|| self.alloc(m.out_dims()));
                let mut col = 0;
                let mut children = Vec::new();
                for ch in &c.children {
                    let w = ch.out_dims();
                    children.push(self.forward(ch, x, Some(y.sub(col, w))));
                    col += w;
                }
                Fwd::Cat { x, y, children }
            }
            Module::OneBlob(o) => {
                let y = out.unwrap_or_else(|| self.alloc(m.out_dims()));
                let (d, b) = (o.in_dims, o.bins);
                let mut body = format!(
                    "        let i = e / S; let s = e % S;\n        let xv = {};\n",
                    self.at(x, "i", "s")
                );
                for k in 0..b {
                    let _ = writeln!(
                        body,
                        "        {} = {};",
                        self.at(y, &format!("i * {b}u + {k}u"), "s"),
                        shader_wgsl::oneblob("xv", o.centre(k), o.k()),
                    );
                }
                self.items(d * self.s, &body);
                Fwd::Leaf { m, x, y }
            }
            Module::SphericalHarmonics(h) => {
                let y = out.unwrap_or_else(|| self.alloc(m.out_dims()));
                let mut body = String::from("        let s = e;\n");
                for (a, v) in ["xv", "yv", "zv"].iter().enumerate() {
                    let _ = writeln!(
                        body,
                        "        let {v} = {};",
                        self.at(x, &a.to_string(), "s")
                    );
                }
                for k in 0..h.count() {
                    let _ = writeln!(
                        body,
                        "        {} = {};",
                        self.at(y, &k.to_string(), "s"),
                        shader_wgsl::spherical_harmonic("xv", "yv", "zv", k),
                    );
                }
                self.items(self.s, &body);
                Fwd::Leaf { m, x, y }
            }
            Module::Pick(p) => {
                let y = out.unwrap_or_else(|| self.alloc(m.out_dims()));
                let mut body = String::from("        let s = e;\n");
                for (j, &i) in p.indices.iter().enumerate() {
                    let _ = writeln!(
                        body,
                        "        {} = {};",
                        self.at(y, &j.to_string(), "s"),
                        self.at(x, &i.to_string(), "s"),
                    );
                }
                self.items(self.s, &body);
                Fwd::Leaf { m, x, y }
            }
        }
    }

    /// z = W·x + b, a = act(z), tiled TO (outputs) × TS (samples) per invocation.
    fn linear_forward(&mut self, l: &Linear, x: View, z: Option<View>, a: View) {
        if self.vec.is_some() {
            return self.vec_forward(l, x, z, a);
        }
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        let (to, ts) = self.tiles(o_n, self.s);
        let (og, sg) = (o_n / to, self.s / ts);
        let mut b = format!("        let og = e / {sg}u; let sg = e % {sg}u;\n");
        for t in 0..to {
            for u in 0..ts {
                let _ = writeln!(
                    b,
                    "        var c{t}_{u} = params[{}u + og + {}u];",
                    l.bias,
                    t * og
                );
            }
        }
        let lb = self.tile_fma(("x", x, "i"), sg, ts, to, |t| {
            format!("params[{}u + (og + {}u) * {i_n}u + i]", l.weight, t * og)
        });
        b.push_str(&unroll("i", i_n, &lb));
        for t in 0..to {
            for u in 0..ts {
                let (j, s) = (format!("og + {}u", t * og), format!("sg + {}u", u * sg));
                let _ = writeln!(b, "        {{ let zz = c{t}_{u};");
                if let Some(z) = z {
                    let _ = writeln!(b, "        {} = zz;", self.at(z, &j, &s));
                }
                let _ = writeln!(
                    b,
                    "        {} = {}; }}",
                    self.at(a, &j, &s),
                    wgsl::act_value(l.act, "zz")
                );
            }
        }
        self.items(og * sg, &b);
    }

    /// Backward of `f` given ∂L/∂y in `dy` (may be overwritten); writes ∂L/∂x into `dx`
    /// when asked (`add`: accumulate instead of overwrite).
    fn backward(&mut self, f: &Fwd, dy: View, dx: Option<(View, bool)>) {
        match f {
            Fwd::Leaf { m, x, y } => {
                if let Module::Grid(gr) = m {
                    let body = super::grid::backward_body(
                        gr,
                        &|j, s| self.at(*x, j, s),
                        &|j, s| self.at(dy, j, s),
                        self.pack.as_ref(),
                    );
                    if let Some(pk) = self.pack.clone() {
                        // packed lanes: every grid output's Σ|dy| over the samples, in a
                        // register per output and invocation, into the partials after
                        // the dense ones (the dense Adam kernel checks the lanes with it)
                        for k in 0..pk.lf.div_ceil(self.wg) {
                            let a = self.accs;
                            self.accs += 1;
                            let _ = writeln!(
                                self.body,
                                "    {{ let o = lid + {}u; if (o < {}u) {{ for (var s = 0u; s < S; s++) {{ acc{a} += abs({}); }} }} }}",
                                k * self.wg,
                                pk.lf,
                                self.at(dy, "o", "s")
                            );
                            self.write_bias_partial(k, pk.lf, pk.a_off, a);
                        }
                    }
                    // timing only: `nogridbwd` leaves out the table-gradient pass
                    if !self.exp.contains("nogridbwd") {
                        self.items(gr.levels.len() * self.s, &body);
                    }
                    if let Some((dxv, add)) = dx {
                        let body = super::grid::input_gradient_body(
                            gr,
                            &|j, s| self.at(*x, j, s),
                            &|j, s| self.at(dy, j, s),
                            &|j, s| self.at(dxv, j, s),
                            add,
                        );
                        self.items(self.s, &body);
                    }
                    return;
                }
                let Some((dx, add)) = dx else { return };
                match m {
                    Module::Identity(_) => self.map(dy, dx, |v| v.to_string(), add),
                    Module::Frequency(fq) => {
                        let (d, k) = (fq.in_dims, fq.octaves);
                        let op = if add { "+=" } else { "=" };
                        let mut body = String::from(
                            "        let i = e / S; let s = e % S;\n        var acc = 0.0f;\n",
                        );
                        for o in 0..k {
                            let (js, jc) = (
                                format!("i * {k}u + {o}u"),
                                format!("{}u + i * {k}u + {o}u", d * k),
                            );
                            let _ = writeln!(
                                body,
                                "        acc += {} * ({} * {} - {} * {});",
                                lit(shader_wgsl::frequency_scale(o)),
                                self.at(*y, &jc, "s"),
                                self.at(dy, &js, "s"),
                                self.at(*y, &js, "s"),
                                self.at(dy, &jc, "s"),
                            );
                        }
                        let _ = writeln!(body, "        {} {op} acc;", self.at(dx, "i", "s"));
                        self.items(d * self.s, &body);
                    }
                    Module::Triangle(t) => {
                        let (d, k) = (t.in_dims, t.octaves);
                        let op = if add { "+=" } else { "=" };
                        let mut body = format!(
                            "        let i = e / S; let s = e % S;\n        var acc = 0.0f;\n        let xi = {};\n",
                            self.at(*x, "i", "s")
                        );
                        for o in 0..k {
                            let _ = writeln!(
                                body,
                                "        acc += {} * {};",
                                shader_wgsl::triangle_derivative("xi", o),
                                self.at(dy, &format!("i * {k}u + {o}u"), "s"),
                            );
                        }
                        let _ = writeln!(body, "        {} {op} acc;", self.at(dx, "i", "s"));
                        self.items(d * self.s, &body);
                    }
                    Module::OneBlob(o) => {
                        let (d, b) = (o.in_dims, o.bins);
                        let op = if add { "+=" } else { "=" };
                        let mut body = format!(
                            "        let i = e / S; let s = e % S;\n        var acc = 0.0f;\n        let xi = {};\n",
                            self.at(*x, "i", "s")
                        );
                        for k in 0..b {
                            let j = format!("i * {b}u + {k}u");
                            let _ = writeln!(
                                body,
                                "        acc += {} * {};",
                                shader_wgsl::oneblob_derivative(
                                    "xi",
                                    &self.at(*y, &j, "s"),
                                    o.centre(k),
                                    o.k()
                                ),
                                self.at(dy, &j, "s"),
                            );
                        }
                        let _ = writeln!(body, "        {} {op} acc;", self.at(dx, "i", "s"));
                        self.items(d * self.s, &body);
                    }
                    Module::SphericalHarmonics(h) => {
                        let op = if add { "+=" } else { "=" };
                        let mut body = String::from("        let s = e;\n");
                        for (a, v) in ["xv", "yv", "zv"].iter().enumerate() {
                            let _ = writeln!(
                                body,
                                "        let {v} = {};",
                                self.at(*x, &a.to_string(), "s")
                            );
                        }
                        for axis in 0..3 {
                            let _ = writeln!(body, "        var g{axis} = 0.0f;");
                            // Y_0 is constant: its derivative is zero.
                            for k in 1..h.count() {
                                let dk = shader_wgsl::spherical_harmonic_derivative(
                                    "xv", "yv", "zv", k, axis,
                                );
                                if dk != "0.0" {
                                    let _ = writeln!(
                                        body,
                                        "        g{axis} += {dk} * {};",
                                        self.at(dy, &k.to_string(), "s")
                                    );
                                }
                            }
                        }
                        for axis in 0..3 {
                            let _ = writeln!(
                                body,
                                "        {} {op} g{axis};",
                                self.at(dx, &axis.to_string(), "s")
                            );
                        }
                        self.items(self.s, &body);
                    }
                    Module::Pick(p) => {
                        // A gather per input (no write conflicts): the sum of the output
                        // gradients of every position that picked it.
                        let mut body = String::from("        let s = e;\n");
                        for i in 0..p.in_dims {
                            let terms: Vec<String> = p
                                .indices
                                .iter()
                                .enumerate()
                                .filter(|(_, k)| **k == i)
                                .map(|(j, _)| self.at(dy, &j.to_string(), "s"))
                                .collect();
                            let target = self.at(dx, &i.to_string(), "s");
                            if terms.is_empty() {
                                if !add {
                                    let _ = writeln!(body, "        {target} = 0.0f;");
                                }
                            } else {
                                let op = if add { "+=" } else { "=" };
                                let _ =
                                    writeln!(body, "        {target} {op} {};", terms.join(" + "));
                            }
                        }
                        self.items(self.s, &body);
                    }
                    _ => unreachable!("leaf modules are identity, freq, tri, oneblob, sh and pick"),
                }
            }
            Fwd::Mlp {
                layers,
                fused: Some(xo),
            } => {
                if self.fused_out != Some(layers[layers.len() - 1].l.weight) {
                    self.act_backward(&layers[layers.len() - 1], dy);
                }
                self.fused_backward(layers, xo, dy, dx);
            }
            Fwd::Mlp { layers, .. } => {
                // The output layer's dz is formed in place in `dy`; every hidden layer's
                // dz is formed in place over its own activations a (read-then-write by
                // the same invocation, after the last reader of a has passed a barrier).
                let last = layers.len() - 1;
                if self.fused_out != Some(layers[last].l.weight) {
                    self.act_backward(&layers[last], dy);
                }
                let mut d = dy;
                let ping = if self.pingpong && last > 0 {
                    let w = layers[..last]
                        .iter()
                        .map(|l| l.l.out_dims)
                        .max()
                        .unwrap_or(0);
                    Some([self.alloc(w), self.alloc(w)])
                } else {
                    None
                };
                for (i, lf) in layers.iter().enumerate().rev() {
                    if let (Some(ping), true) = (ping, i > 0) {
                        let below = &layers[i - 1];
                        let buf = ping[(last - i) % 2].sub(0, lf.l.in_dims);
                        self.linear_backward(lf, d, None, false);
                        self.linear_backward_dx(lf, d, buf, false, Some(below));
                        d = buf;
                    } else if self.coop.is_some() {
                        let below = (i > 0).then(|| &layers[i - 1]);
                        let target = match below {
                            Some(b) => Some((b.a, false)),
                            None => dx,
                        };
                        self.coop_backward(lf, d, target, below);
                        if let Some(b) = below {
                            d = b.a;
                        }
                    } else if i > 0 {
                        let below = &layers[i - 1];
                        self.linear_backward(lf, d, None, true);
                        self.linear_backward_dx(lf, d, below.a, false, Some(below));
                        d = below.a;
                    } else {
                        self.linear_backward(lf, d, dx, dx.is_none());
                    }
                }
            }
            Fwd::Chain(stages) => {
                let mut d = dy;
                for i in (0..stages.len()).rev() {
                    let upstream = stages[..i].iter().any(fwd_has_params);
                    let target = if i == 0 {
                        dx
                    } else if upstream {
                        Some((self.alloc(fwd_in(&stages[i]).width), false))
                    } else {
                        None
                    };
                    if target.is_none() && !fwd_has_params(&stages[i]) {
                        break;
                    }
                    self.backward(&stages[i], d, target);
                    match target {
                        Some((t, _)) => d = t,
                        None => break,
                    }
                }
            }
            Fwd::Cat { children, .. } => {
                let mut col = 0;
                let mut wrote = false;
                for ch in children {
                    let w = fwd_out(ch).width;
                    let dyc = dy.sub(col, w);
                    col += w;
                    let target = dx.map(|(v, add)| (v, add || wrote));
                    if target.is_none() && !fwd_has_params(ch) {
                        continue;
                    }
                    self.backward(ch, dyc, target);
                    if target.is_some() {
                        wrote = true;
                    }
                }
            }
        }
    }

    /// dz = dy ⊙ f'(z), in place.
    fn act_backward(&mut self, lf: &LayerFwd, d: View) {
        if lf.l.act == Activation::None {
            return;
        }
        let n = lf.l.out_dims * self.s;
        let zexpr = match lf.z {
            Some(z) => self.at(z, "j", "s"),
            None => "0.0f".into(),
        };
        let body = format!(
            "        let j = e / S; let s = e % S;\n        let z = {zexpr};\n        let y = {};\n        {} *= {};\n",
            self.at(lf.a, "j", "s"),
            self.at(d, "j", "s"),
            wgsl::act_derivative(lf.l.act, "z", "y")
        );
        self.items(n, &body);
    }

    /// Weight-gradient accumulation (dW += dz·xᵀ, db += Σ dz) into register
    /// accumulators, and dx = Wᵀ·dz when asked; one phase, one barrier.
    fn linear_backward(
        &mut self,
        lf: &LayerFwd,
        dz: View,
        dx: Option<(View, bool)>,
        barrier: bool,
    ) {
        if self.vec.is_some() {
            return self.vec_backward(lf, dz, dx, barrier);
        }
        let l = lf.l;
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        // dW tiles: as large as possible while every invocation still gets one.
        let (mut to, mut ti) = (largest_tile(o_n, 4), largest_tile(i_n, 4));
        while (o_n / to) * (i_n / ti) * self.tile_k < self.wg && (to > 1 || ti > 1) {
            if to >= ti && to > 1 {
                to = largest_tile(o_n, to / 2);
            } else {
                ti = largest_tile(i_n, ti / 2);
            }
        }
        let (og, ig) = (o_n / to, i_n / ti);
        let nq = og * ig;
        let mut b = String::new();
        for k in 0..nq.div_ceil(self.wg) {
            let base = self.accs;
            self.accs += to * ti;
            let _ = writeln!(
                b,
                "    {{ let q = lid + {}u; if (q < {nq}u) {{ let og = q / {ig}u; let ig = q % {ig}u;",
                k * self.wg
            );
            let mut lb = String::new();
            for t in 0..to {
                let _ = writeln!(
                    lb,
                    "            let d{t} = {};",
                    self.at(dz, &format!("og + {}u", t * og), "s")
                );
            }
            for u in 0..ti {
                let _ = writeln!(
                    lb,
                    "            let x{u} = {};",
                    self.at(lf.x, &format!("ig + {}u", u * ig), "s")
                );
            }
            for t in 0..to {
                for u in 0..ti {
                    let a = base + t * ti + u;
                    let _ = writeln!(lb, "            acc{a} = fma(d{t}, x{u}, acc{a});");
                }
            }
            b.push_str(&unroll("s", self.s, &lb));
            b.push_str("    } }\n");
            let _ = writeln!(
                self.writeback,
                "    {{ let q = lid + {}u; if (q < {nq}u) {{ let og = q / {ig}u; let ig = q % {ig}u;",
                k * self.wg
            );
            self.write_weight_partials(l.weight, to, ti, og, ig, i_n, base);
        }
        for k in 0..o_n.div_ceil(self.wg) {
            let a = self.accs;
            self.accs += 1;
            let _ = writeln!(
                b,
                "    {{ let o = lid + {}u; if (o < {o_n}u) {{ for (var s = 0u; s < S; s++) {{ acc{a} += {}; }} }} }}",
                k * self.wg,
                self.at(dz, "o", "s")
            );
            self.write_bias_partial(k, o_n, l.bias, a);
        }
        if barrier {
            b.push_str("    workgroupBarrier();\n");
        }
        self.body.push_str(&b);
        if let Some((dxv, add)) = dx {
            self.linear_backward_dx(lf, dz, dxv, add, None);
        }
    }

    /// The write-back of a weight-gradient tile: accumulators `base..` of `to × ti`
    /// outputs × inputs (strides `og`, `ig`) into this group's partial sums, then the
    /// close of the guard the caller opened.
    #[allow(clippy::too_many_arguments)]
    fn write_weight_partials(
        &mut self,
        weight: usize,
        to: usize,
        ti: usize,
        og: usize,
        ig: usize,
        i_n: usize,
        base: usize,
    ) {
        for t in 0..to {
            for u in 0..ti {
                let _ = writeln!(
                    self.writeback,
                    "        partial[pbase + {weight}u + (og + {}u) * {i_n}u + ig + {}u] = acc{};",
                    t * og,
                    u * ig,
                    base + t * ti + u
                );
            }
        }
        self.writeback.push_str("    } }\n");
    }

    /// The write-back of bias accumulator `a` (outputs `k·wg + lid` of `o_n`).
    fn write_bias_partial(&mut self, k: usize, o_n: usize, bias: usize, a: usize) {
        let _ = writeln!(
            self.writeback,
            "    {{ let o = lid + {}u; if (o < {o_n}u) {{ partial[pbase + {bias}u + o] = acc{a}; }} }}",
            k * self.wg
        );
    }

    /// One step `k` of a register-tiled matrix–vector loop (the scalar path's forward
    /// and input gradient): the `ts` operand values `{v}{u}` (row `k` of `src` at samples
    /// sg + u·SG, `op` = (v, src, k)), the `rows` weights `w{t}` (`weight(t)`), and
    /// `c{t}_{u} = fma(w{t}, {v}{u}, c{t}_{u})`.
    fn tile_fma(
        &self,
        op: (&str, View, &str),
        sg: usize,
        ts: usize,
        rows: usize,
        weight: impl Fn(usize) -> String,
    ) -> String {
        let (v, src, k) = op;
        let mut lb = String::new();
        for u in 0..ts {
            let _ = writeln!(
                lb,
                "            let {v}{u} = {};",
                self.at(src, k, &format!("sg + {}u", u * sg))
            );
        }
        for t in 0..rows {
            let _ = writeln!(lb, "            let w{t} = {};", weight(t));
            for u in 0..ts {
                let _ = writeln!(lb, "            c{t}_{u} = fma(w{t}, {v}{u}, c{t}_{u});");
            }
        }
        lb
    }

    /// dx = Wᵀ·dz (or += with `add`), tiled TI (inputs) × TS (samples); with `fused`,
    /// dx is multiplied by the derivative of that layer's activation and written in place
    /// over its activations. Ends with a barrier.
    fn linear_backward_dx(
        &mut self,
        lf: &LayerFwd,
        dz: View,
        dxv: View,
        add: bool,
        fused: Option<&LayerFwd>,
    ) {
        if self.vec.is_some() {
            return self.vec_backward_dx(lf, dz, dxv, add, fused);
        }
        let l = lf.l;
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        let s_n = self.s;
        let mut b = String::new();
        let (ti, ts) = self.tiles(i_n, s_n);
        let (ig, sg) = (i_n / ti, s_n / ts);
        let _ = writeln!(
            b,
            "    for (var e = lid; e < {}u; e += WG) {{\n        let ig = e / {sg}u; let sg = e % {sg}u;",
            ig * sg
        );
        for t in 0..ti {
            for u in 0..ts {
                let _ = writeln!(b, "        var c{t}_{u} = 0.0f;");
            }
        }
        let lb = self.tile_fma(("d", dz, "o"), sg, ts, ti, |t| {
            format!("params[{}u + o * {i_n}u + ig + {}u]", l.weight, t * ig)
        });
        b.push_str(&unroll("o", o_n, &lb));
        let op = if add { "+=" } else { "=" };
        for t in 0..ti {
            for u in 0..ts {
                let (j, s) = (format!("ig + {}u", t * ig), format!("sg + {}u", u * sg));
                let dst = self.at(dxv, &j, &s);
                match fused {
                    Some(below) if below.l.act != Activation::None => {
                        let z = match below.z {
                            Some(z) => self.at(z, &j, &s),
                            None => "0.0f".into(),
                        };
                        let _ = writeln!(
                            b,
                            "        {{ let z = {z}; let y = {}; {dst} = c{t}_{u} * {}; }}",
                            self.at(below.a, &j, &s),
                            wgsl::act_derivative(below.l.act, "z", "y")
                        );
                    }
                    _ => {
                        let _ = writeln!(b, "        {dst} {op} c{t}_{u};");
                    }
                }
            }
        }
        b.push_str("    }\n    workgroupBarrier();\n");
        self.body.push_str(&b);
    }

    /// Register tile (rows × samples) for a `rows × S` output: as large as 4×4 while
    /// every invocation still gets an item.
    fn tiles(&self, rows: usize, s: usize) -> (usize, usize) {
        let (mut tr, mut ts) = (largest_tile(rows, 4), largest_tile(s, 4));
        while (rows / tr) * (s / ts) * self.tile_k < self.wg && (tr > 1 || ts > 1) {
            if ts >= tr && ts > 1 {
                ts = largest_tile(s, ts / 2);
            } else {
                tr = largest_tile(rows, tr / 2);
            }
        }
        (tr, ts)
    }
}

/// Loops of up to this many iterations are unrolled (constant indices let the compiler
/// fold addresses and batch the loads).
const UNROLL_MAX: usize = 64;

/// `for (var v = 0u; v < n; v++) { body }`, unrolled into blocks with `let v = k;` when
/// short.
fn unroll(v: &str, n: usize, body: &str) -> String {
    if n > UNROLL_MAX {
        format!("        for (var {v} = 0u; {v} < {n}u; {v}++) {{\n{body}        }}\n")
    } else {
        (0..n)
            .map(|k| format!("        {{ let {v} = {k}u;\n{body}        }}\n"))
            .collect()
    }
}

fn fwd_out(f: &Fwd) -> View {
    match f {
        Fwd::Leaf { y, .. } | Fwd::Cat { y, .. } => *y,
        Fwd::Mlp { layers, .. } => layers.last().unwrap().a,
        Fwd::Chain(s) => fwd_out(s.last().unwrap()),
    }
}

fn fwd_in(f: &Fwd) -> View {
    match f {
        Fwd::Leaf { x, .. } | Fwd::Cat { x, .. } => *x,
        Fwd::Mlp { layers, .. } => layers[0].x,
        Fwd::Chain(s) => fwd_in(&s[0]),
    }
}

fn fwd_has_params(f: &Fwd) -> bool {
    match f {
        Fwd::Leaf { m, .. } => m.has_params(),
        Fwd::Mlp { .. } => true,
        Fwd::Chain(s) => s.iter().any(fwd_has_params),
        Fwd::Cat { children, .. } => children.iter().any(fwd_has_params),
    }
}

/// Workgroup-memory floats per sample of a network's step kernel (for choosing `samples`).
/// Workgroup-memory bytes of a network's step kernel for `samples` per chunk and
/// `threads` invocations (f32 path, or the cooperative-matrix path with `coop`).
#[allow(clippy::too_many_arguments)]
pub fn shared_bytes(
    net: &Network,
    samples: usize,
    threads: usize,
    precision: Precision,
    pingpong: bool,
    vec: bool,
    skew: usize,
    xglobal: bool,
    wsh: bool,
) -> usize {
    let coop = precision.padded();
    let mut g = Gen::new(
        samples,
        threads,
        coop.then(|| Pad::of(net)),
        net.dense_count,
        pingpong,
        1,
        vec.then(|| VecPad::of(net)),
    );
    g.f16 = precision == Precision::F16;
    g.fused = precision == Precision::Coop && fused_enabled() && net_fusable(net);
    g.set_skew(skew);
    g.xglobal = xglobal && g.fused;
    g.wsh = wsh && g.fused;
    let _ = build_body(&mut g, net);
    g.finish_scratch();
    if g.xglobal {
        g.xh = 0;
    }
    let ws = if g.wsh && g.body.contains("ws[") {
        g.ws_len()
    } else {
        0
    };
    let coop_extra = if coop {
        2 * (g.xh + g.gh + ws) + 4 * (g.zc + g.bs_len) + 4 * 256
    } else {
        0
    };
    // the fused path sums the loss in `zc` (dead by then) instead of `red`
    let red = if g.fused && g.zc >= threads {
        4
    } else {
        threads * 4
    };
    (g.rows * g.r).next_multiple_of(4) * 4 + red + coop_extra
}

/// f16 elements per workgroup of the fused path's X buffer (`Launch::xglobal`).
pub fn xglobal_len(net: &Network, launch: Launch) -> usize {
    let mut g = Gen::new(
        launch.samples as usize,
        launch.threads as usize,
        Some(Pad::of(net)),
        net.dense_count,
        false,
        1,
        None,
    );
    g.fused = fused_enabled() && net_fusable(net);
    g.set_skew(launch.skew as usize);
    g.xglobal = true;
    let _ = build_body(&mut g, net);
    g.xh_next
}

/// The linear layer that produces the network output, if one does.
fn out_layer<'a>(f: &'a Fwd<'a>) -> Option<&'a LayerFwd<'a>> {
    match f {
        Fwd::Mlp { layers, .. } => layers.last(),
        Fwd::Chain(s) => out_layer(s.last()?),
        _ => None,
    }
}

/// Output activation whose derivative the loss phase applies: (activation, z view).
type OutAct = Option<(Activation, Option<View>)>;

fn build_body(g: &mut Gen, net: &Network) -> (View, View, View, OutAct, Option<usize>) {
    let x = g.alloc(net.in_dims);
    let t = g.alloc(net.out_dims);
    g.input = Some(x.base);
    // fused path, network = one MLP: the sampling writes its f16 input (X_0 at 0)
    if g.fused && !g.xglobal && matches!(net.root, Module::Mlp(_)) {
        g.mirrored = Some(x.base);
    }
    // forward
    let f = g.forward(&net.root, x, None);
    let y = fwd_out(&f);
    // loss and dy (times the output activation's derivative when a linear layer
    // produces the output)
    let dy = g.alloc(net.out_dims);
    let out = out_layer(&f).map(|l| (l.l.weight, l.l.act, l.z));
    g.fused_out = out.map(|o| o.0);
    g.body.push_str("    //@LOSS@\n");
    if net.root.has_params() && !(g.fused && g.exp == "fwd") {
        g.backward(&f, dy, None);
    }
    (y, t, dy, out.map(|o| (o.1, o.2)), out.map(|o| o.0))
}

/// The step kernel's WGSL for `net` trained with `loss` on `data`; the
/// cooperative-matrix path (`coop`) uses dynamic loss scaling.
pub fn step_kernel(
    net: &Network,
    loss: Loss,
    data: DataKind,
    batch: u32,
    launch: Launch,
    coop: bool,
) -> String {
    step_kernel_scaled(net, loss, data, batch, launch, coop, coop)
}

/// WGSL of the dynamic loss-scaling state for the step kernel (`scaled`): the state
/// buffer `ls` (binding 7: per step parity k, words 4k.. hold the scale S as f32 bits,
/// the count of good steps since the last change of S, the count of skipped steps, and
/// the overflow decision of the step), the per-group overflow flags (binding 8), the
/// workgroup flag `lsbad` and the overflow test.
const LS_STEP_DECLS: &str = "@group(0) @binding(7) var<storage, read> ls: array<u32>;
@group(0) @binding(8) var<storage, read_write> lsflags: array<u32>;
var<workgroup> lsbad: atomic<u32>;
// true when v is not finite or |v| > lim (bit test: no reliance on NaN comparisons)
fn nsh_ls_over(v: f32, lim: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u || abs(v) > lim;
}
fn nsh_ls_bits(v: f32) -> u32 {
    return select(0u, 1u, (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u);
}
";

/// The arithmetic of the step kernel's linear layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// fp32 everywhere (the default).
    F32,
    /// f16 operands staged in workgroup memory (layer inputs, output gradients) and an
    /// f16 weight copy, multiply-add loops accumulating in f32 (needs `SHADER_F16`).
    F16,
    /// f16 × f16 → f32 cooperative matrices.
    Coop,
}

impl Precision {
    /// `f32`, `f16` or `coop`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Coop => "coop",
        }
    }
    /// Uses the padded f16 weight copy and layout of [`Pad`].
    pub fn padded(self) -> bool {
        self != Precision::F32
    }
}

/// [`step_kernel`] with dynamic loss scaling on or off independently of the path
/// (`scaled`: the loss gradient is multiplied by the scale S of the state buffer, and
/// every workgroup flags overflow — a non-finite weight-gradient sum, a scaled gradient
/// beyond f16's range when staged as f16, a grid contribution beyond the fixed-point
/// range — into `lsflags[group]`; see [`adam_kernel_scaled`]).
#[allow(clippy::too_many_arguments)]
pub fn step_kernel_scaled(
    net: &Network,
    loss: Loss,
    data: DataKind,
    batch: u32,
    launch: Launch,
    coop: bool,
    scaled: bool,
) -> String {
    let precision = if coop {
        Precision::Coop
    } else {
        Precision::F32
    };
    step_kernel_for(net, loss, data, batch, launch, precision, scaled)
}

/// The step kernel for any [`Precision`] (the f16 and cooperative-matrix paths should
/// run `scaled`); on the cooperative-matrix path MLPs run fused unless
/// `NSHADE_GPU_FUSED=0`.
#[allow(clippy::too_many_arguments)]
pub fn step_kernel_for(
    net: &Network,
    loss: Loss,
    data: DataKind,
    batch: u32,
    launch: Launch,
    precision: Precision,
    scaled: bool,
) -> String {
    step_kernel_with(
        net,
        loss,
        data,
        batch,
        launch,
        precision,
        scaled,
        fused_enabled(),
    )
}

/// [`step_kernel_for`] with the fused cooperative-matrix MLP chosen explicitly (`fused`;
/// it applies only on the cooperative-matrix path).
#[allow(clippy::too_many_arguments)]
pub fn step_kernel_with(
    net: &Network,
    loss: Loss,
    data: DataKind,
    batch: u32,
    launch: Launch,
    precision: Precision,
    scaled: bool,
    fused: bool,
) -> String {
    let coop = precision.padded();
    let s = launch.samples as usize;
    let mut g = Gen::new(
        s,
        launch.threads as usize,
        coop.then(|| Pad::of(net)),
        net.dense_count,
        launch.pingpong,
        launch.tile_k as usize,
        launch.vec.then(|| VecPad::of(net)),
    );
    g.scaled = scaled;
    g.f16 = precision == Precision::F16;
    g.fused = precision == Precision::Coop && fused && net_fusable(net);
    g.sgbar = launch.sgbar && g.fused;
    g.xglobal = launch.xglobal && g.fused;
    g.wsh = launch.wsh && g.fused;
    g.set_skew(launch.skew as usize);
    g.pack = super::grid::packing_for(net, scaled && coop, launch.atomic64);
    let (y, t, dy, out_act, out_layer_weight) = build_body(&mut g, net);
    g.finish_scratch();
    let deriv = match out_act {
        Some((act, z)) if act != Activation::None => {
            let zz = match z {
                Some(z) => g.at(z, "j", "s"),
                None => "0.0f".into(),
            };
            format!(
                " * {}",
                wgsl::act_derivative(act, "zz", "p").replace("zz", &zz)
            )
        }
        _ => String::new(),
    };
    let x = View {
        base: 0,
        width: net.in_dims,
    };
    let od = net.out_dims;
    // the per-sample gradient of the mean loss, times the static scale (unscaled f32,
    // or coop without dynamic scaling) or the dynamic scale `lsc`
    let (scale, lsm) = if scaled {
        (1.0 / (batch as usize * od) as f32, " * lsc")
    } else {
        (loss_scale(batch, coop) / (batch as usize * od) as f32, "")
    };
    let loss_code = format!(
        "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n\
         \x20       let p = {yv}; let t = {tv};\n\
         \x20       let valid = first + s < BATCH;\n\
         \x20       loss_acc += select(0.0f, {lv}, valid);\n\
         \x20       {dyv} = select(0.0f, ({lg}) * {sc}{lsm}{deriv}, valid);\n    }}\n    workgroupBarrier();\n",
        n = od * s,
        yv = g.at(y, "j", "s"),
        tv = g.at(t, "j", "s"),
        lv = wgsl::loss_value(loss, "p", "t"),
        lg = wgsl::loss_gradient(loss, "p", "t"),
        dyv = g.at(dy, "j", "s"),
        sc = lit(scale),
    );
    // vec4 path: the loss and dy are computed in the epilogue of the output layer's
    // forward (one phase and barrier fewer)
    let epi = out_layer_weight.map(|w| format!("        //@EPI{w}@\n"));
    let body = match epi {
        Some(epi) if g.vec.is_some() && g.body.contains(&epi) => {
            let deriv = match out_act {
                Some((act, _)) if act != Activation::None => {
                    format!(" * {}", wgsl::act_derivative(act, "zl", "p"))
                }
                _ => String::new(),
            };
            let mut fused = format!(
                "        var dyv = vec4<f32>(0.0f); let tv4 = {};\n",
                g.at4(t, "lj", "sg")
            );
            for (c, lane) in ["x", "y", "z", "w"].iter().enumerate() {
                let _ = writeln!(
                    fused,
                    "        {{ let p = av.{lane}; let zl = lzv.{lane}; let t = tv4.{lane};\n\
                     \x20         let valid = first + sg * 4u + {c}u < BATCH;\n\
                     \x20         loss_acc += select(0.0f, {lv}, valid);\n\
                     \x20         dyv.{lane} = select(0.0f, ({lg}) * {sc}{lsm}{deriv}, valid); }}",
                    lv = wgsl::loss_value(loss, "p", "t"),
                    lg = wgsl::loss_gradient(loss, "p", "t"),
                    sc = lit(scale),
                );
            }
            let _ = writeln!(fused, "        {} = dyv;", g.at4(dy, "lj", "sg"));
            g.body.replace("    //@LOSS@\n", "").replace(&epi, &fused)
        }
        _ if g.fused
            && out_layer_weight.is_some_and(|w| g.body.contains(&format!("//@FEPI{w}@"))) =>
        {
            // fused cooperative-matrix path: loss, dy (times the output activation's
            // derivative) and dy's f16 copy for the backward in the output layer's
            // forward epilogue (element o, s; a = act(zz)): two phases fewer
            let w = out_layer_weight.unwrap();
            let deriv = match out_act {
                Some((act, _)) if act != Activation::None => {
                    format!(" * {}", wgsl::act_derivative(act, "zz", "p"))
                }
                _ => String::new(),
            };
            let chk = if scaled {
                f16_range_check("dyv")
            } else {
                String::new()
            };
            let fepi = format!(
                "{{ let p = {av}; let t = {tv};\n\
                 \x20 let valid = first + s < BATCH;\n\
                 \x20 loss_acc += select(0.0f, {lv}, valid);\n\
                 \x20 let dyv = select(0.0f, ({lg}) * {sc}{lsm}{deriv}, valid);{chk}\n\
                 \x20 {dyv} = dyv; gh[o * SX + s] = f16(dyv); }}",
                av = g.at(y, "o", "s"),
                tv = g.at(t, "o", "s"),
                lv = wgsl::loss_value(loss, "p", "t"),
                lg = wgsl::loss_gradient(loss, "p", "t"),
                dyv = g.at(dy, "o", "s"),
                sc = lit(scale),
            );
            g.body
                .replace("    //@LOSS@\n", "")
                .replace(&format!("//@FEPI{w}@"), &fepi)
                .replace(&format!("//@FPAD{w}@"), "gh[o * SX + s] = f16(0.0f);")
        }
        _ => g.body.replace("    //@LOSS@\n", &loss_code),
    };

    // a fused MLP's last dW phase that ends the chunk needs no barrier of its own when
    // the sampling does not write its inputs (it writes `xh` only for a one-MLP net)
    let body = match body.strip_suffix(DW_END) {
        Some(b) if !matches!(net.root, Module::Mlp(_)) => format!("{b}    // dW end\n"),
        _ => body,
    };
    // sample generation
    let mut draw = String::from(
        "    for (var e = lid; e < S; e += WG) {\n        let idx = first + e;\n        let valid = idx < BATCH;\n        let h = nsh_pcg_hash(idx ^ step_h);\n",
    );
    // texture data with S ≤ WG: the texels of chunk c + 1 are loaded into registers
    // during chunk c (and chunk 0's before the loop), so the loads' latency overlaps a
    // whole chunk; the sampling phase interpolates what was loaded. Same values, same
    // arithmetic as drawing them in place.
    let mut prefetch_init = String::new();
    let mut prefetch_next = String::new();
    match data {
        DataKind::Texture { width, height } if s <= launch.threads as usize && knob("PREFETCH") => {
            let fetch = |first: &str| {
                let mut f = format!(
                    "    if (lid < S) {{\n        let h = nsh_pcg_hash(({first} + lid) ^ step_h);\n\
                     \x20       pu = nsh_unit(h); pv = nsh_unit(nsh_pcg_hash(h));\n\
                     \x20       let fx = pu * {width}.0f - 0.5f; let fy = pv * {height}.0f - 0.5f;\n\
                     \x20       let x0f = floor(fx); let y0f = floor(fy);\n\
                     \x20       let x0 = min(u32(max(x0f, 0.0f)), {wm}u); let x1 = min(u32(max(x0f + 1.0f, 0.0f)), {wm}u);\n\
                     \x20       let y0 = min(u32(max(y0f, 0.0f)), {hm}u); let y1 = min(u32(max(y0f + 1.0f, 0.0f)), {hm}u);\n",
                    wm = width - 1,
                    hm = height - 1,
                );
                for k in 0..3 {
                    let _ = writeln!(
                        f,
                        "        pt{a} = data[(y0 * {width}u + x0) * 3u + {k}u]; pt{b} = data[(y0 * {width}u + x1) * 3u + {k}u];\n\
                         \x20       pt{c} = data[(y1 * {width}u + x0) * 3u + {k}u]; pt{d} = data[(y1 * {width}u + x1) * 3u + {k}u];",
                        a = 4 * k,
                        b = 4 * k + 1,
                        c = 4 * k + 2,
                        d = 4 * k + 3,
                    );
                }
                f.push_str("    }\n");
                f
            };
            prefetch_init.push_str("    var pu = 0.0f; var pv = 0.0f;\n");
            for k in 0..12 {
                let _ = writeln!(prefetch_init, "    var pt{k} = 0.0f;");
            }
            prefetch_init.push_str(&fetch("wid.x * CHUNKS * S"));
            let _ = write!(
                prefetch_next,
                "    if (c + 1u < CHUNKS) {{\n{}    }}\n",
                fetch("first + S")
            );
            draw = format!(
                "    if (lid < S) {{\n        let e = lid;\n        let idx = first + e;\n        let valid = idx < BATCH;\n\
                 \x20       let u = pu; let v = pv;\n\
                 \x20       let fx = u * {width}.0f - 0.5f; let fy = v * {height}.0f - 0.5f;\n\
                 \x20       let tx = fx - floor(fx); let ty = fy - floor(fy);\n"
            );
            for k in 0..3 {
                let _ = writeln!(
                    draw,
                    "        {{ let top = pt{a} + (pt{b} - pt{a}) * tx; let bottom = pt{c} + (pt{d} - pt{c}) * tx;\n\
                     \x20         {tk} = top + (bottom - top) * ty; }}",
                    a = 4 * k,
                    b = 4 * k + 1,
                    c = 4 * k + 2,
                    d = 4 * k + 3,
                    tk = g.at(t, &format!("{k}u"), "e"),
                );
            }
            let _ = writeln!(
                draw,
                "        {} = select(0.0f, u, valid); {} = select(0.0f, v, valid);",
                g.at(x, "0u", "e"),
                g.at(x, "1u", "e"),
            );
        }
        DataKind::Texture { width, height } => {
            let _ = write!(
                draw,
                "        let u = nsh_unit(h); let v = nsh_unit(nsh_pcg_hash(h));\n\
                 \x20       let fx = u * {w}.0f - 0.5f; let fy = v * {h}.0f - 0.5f;\n\
                 \x20       let x0f = floor(fx); let y0f = floor(fy);\n\
                 \x20       let tx = fx - x0f; let ty = fy - y0f;\n\
                 \x20       let x0 = min(u32(max(x0f, 0.0f)), {wm}u); let x1 = min(u32(max(x0f + 1.0f, 0.0f)), {wm}u);\n\
                 \x20       let y0 = min(u32(max(y0f, 0.0f)), {hm}u); let y1 = min(u32(max(y0f + 1.0f, 0.0f)), {hm}u);\n\
                 \x20       for (var k = 0u; k < 3u; k++) {{\n\
                 \x20           let a = data[(y0 * {w}u + x0) * 3u + k]; let b = data[(y0 * {w}u + x1) * 3u + k];\n\
                 \x20           let c = data[(y1 * {w}u + x0) * 3u + k]; let d = data[(y1 * {w}u + x1) * 3u + k];\n\
                 \x20           let top = a + (b - a) * tx; let bottom = c + (d - c) * tx;\n\
                 \x20           {tk} = top + (bottom - top) * ty;\n        }}\n\
                 \x20       {x0v} = select(0.0f, u, valid); {x1v} = select(0.0f, v, valid);\n",
                w = width,
                h = height,
                wm = width - 1,
                hm = height - 1,
                tk = g.at(t, "k", "e"),
                x0v = g.at(x, "0u", "e"),
                x1v = g.at(x, "1u", "e"),
            );
        }
        DataKind::Rows {
            rows,
            in_dims,
            out_dims,
        } => {
            let w = in_dims + out_dims;
            let _ = write!(
                draw,
                "        let r = nsh_mulhi(h, {rows}u);\n\
                 \x20       for (var k = 0u; k < {in_dims}u; k++) {{ {xk} = select(0.0f, data[r * {w}u + k], valid); }}\n\
                 \x20       for (var k = 0u; k < {out_dims}u; k++) {{ {tk} = data[r * {w}u + {in_dims}u + k]; }}\n",
                xk = g.at(x, "k", "e"),
                tk = g.at(t, "k", "e"),
            );
        }
    }
    // fused path, network = one MLP: the sampling also writes the MLP's f16 input
    // (X_0 at the start of `xh`; see `build_body`)
    if g.fused && !g.xglobal && matches!(net.root, Module::Mlp(_)) {
        let _ = writeln!(
            draw,
            "        for (var k = 0u; k < {}u; k++) {{ xh[k * SX + e] = f16({}); }}",
            net.in_dims,
            g.at(x, "k", "e")
        );
    }
    draw.push_str("    }\n");
    draw.push_str(&prefetch_next);
    draw.push_str("    workgroupBarrier();\n");

    let mut accs = String::new();
    for a in 0..g.accs {
        let _ = writeln!(accs, "    var acc{a} = 0.0f;");
    }
    let p = match &g.coop {
        Some(pad) => pad.partial_len(net.dense_count) + g.pack.as_ref().map_or(0, |pk| pk.lf),
        None => net.dense_count.max(1),
    };
    // the fused path sums the loss in `zc` (dead by then; see `shared_bytes`)
    let red = if g.fused && g.zc >= launch.threads as usize {
        "zc"
    } else {
        "red"
    };
    let (shared, sh_ty) = if g.vec.is_some() {
        ((g.rows * g.r).div_ceil(4).max(1), "vec4<f32>")
    } else {
        (g.rows * g.r, "f32")
    };
    let (mut head, mut decls, mut init) = (String::new(), String::new(), String::new());
    if g.vec.is_some() {
        let _ = write!(
            decls,
            "const RV: u32 = {}u;\n@group(0) @binding(5) var<storage, read> wv: array<vec4<f32>>;\n",
            g.r / 4
        );
    }
    decls.push_str(&super::grid::step_decls_scaled(
        net,
        scaled,
        launch.atomic64,
    ));
    if g.pack.is_some() {
        decls.push_str(super::grid::PACKED_STEP_DECLS);
    }
    let mut writeback = g.writeback.clone();
    let mut ls_end = String::new();
    if scaled {
        decls.push_str(LS_STEP_DECLS);
        init.push_str(
            "    if (lid == 0u) { atomicStore(&lsbad, 0u); }\n    let lsc = bitcast<f32>(ls[(st.step & 1u) * 4u]) + st.poison;\n",
        );
        // a non-finite weight-gradient sum in any register accumulator (unused ones are 0)
        if g.accs > 0 {
            writeback.push_str("    { var lsb = 0u;\n");
            for a in 0..g.accs {
                let _ = writeln!(writeback, "      lsb |= nsh_ls_bits(acc{a});");
            }
            writeback.push_str("      if (lsb != 0u) { atomicOr(&lsbad, 1u); } }\n");
        }
        ls_end.push_str("        lsflags[wid.x] = atomicLoad(&lsbad);\n");
        if g.fused {
            init.push_str("    var lsf = 0u;\n");
            writeback.push_str("    if (lsf != 0u) { atomicOr(&lsbad, 1u); }\n");
        }
    }
    // the end: bias folds and the loss sum. Where `zc` holds every fold's WG partial
    // sums, the loss's and WG/16 more, all in three barriers: the partial sums are
    // written at once, the folds and 16-value blocks of the loss summed, then the
    // blocks in order; otherwise a fold at a time (three barriers each) and the
    // pairwise loss tree (one barrier per level). Either order is fixed.
    let wg = launch.threads as usize;
    let nf = g.folds.len();
    let mut end = String::new();
    if red == "zc" && wg.is_multiple_of(16) && g.zc >= (nf + 1) * wg + wg / 16 {
        end.push_str("    workgroupBarrier();\n");
        for (k, f) in g.folds.iter().enumerate() {
            let _ = writeln!(end, "    zc[{}u + lid] = acc{};", k * wg, f.acc);
        }
        let _ = writeln!(
            end,
            "    zc[{}u + lid] = loss_acc;\n    workgroupBarrier();",
            nf * wg
        );
        for (k, f) in g.folds.iter().enumerate() {
            end.push_str(&f.code("zc", k * wg, scaled));
        }
        let mut blk = format!("var t = zc[{}u + lid * 16u];", nf * wg);
        for k in 1..16 {
            let _ = write!(blk, " t += zc[{}u + lid * 16u + {k}u];", nf * wg);
        }
        let _ = writeln!(
            end,
            "    if (lid < {}u) {{ {blk} zc[{}u + lid] = t; }}\n    workgroupBarrier();",
            wg / 16,
            (nf + 1) * wg
        );
        let mut tot = format!("var t = zc[{}u];", (nf + 1) * wg);
        for k in 1..wg / 16 {
            let _ = write!(tot, " t += zc[{}u];", (nf + 1) * wg + k);
        }
        let _ = write!(
            end,
            "    if (lid == 0u) {{\n        {tot}\n        loss_partial[wid.x] = t;\n{ls_end}    }}\n"
        );
    } else {
        for f in &g.folds {
            let _ = write!(
                end,
                "    workgroupBarrier();\n    {red}[lid] = acc{};\n    workgroupBarrier();\n{}    workgroupBarrier();\n",
                f.acc,
                f.code(red, 0, scaled)
            );
        }
        let _ = write!(
            end,
            "    {red}[lid] = loss_acc;\n    workgroupBarrier();\n{}    if (lid == 0u) {{\n        loss_partial[wid.x] = {red}[0];\n{ls_end}    }}\n",
            loss_tree(wg, red)
        );
    }
    // The sample seed's hash comes with each step, not as a constant: trainers of one
    // network with different seeds share one compiled pipeline.
    let step_struct = "struct Step { step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32, poison: f32, seed_h: u32 }";
    if precision == Precision::F16 {
        head.push_str("enable f16;\n");
        let _ = write!(
            decls,
            "@group(0) @binding(5) var<storage, read> w16: array<f16>;\n\
             var<workgroup> xh: array<f16, {}>;\nvar<workgroup> gh: array<f16, {}>;\n\
             var<workgroup> zc: array<f32, {}>;\n",
            g.xh.max(1),
            g.gh.max(1),
            g.zc.max(1)
        );
    } else if coop {
        head.push_str("enable f16;\nenable wgpu_cooperative_matrix;\n");
        let nsg = launch.threads / 32;
        let _ = write!(
            decls,
            "const NSG: u32 = {nsg}u;\nconst SX: u32 = {sx}u;\nconst SCR: u32 = {scr}u;\n@group(0) @binding(5) var<storage, read> w16: array<f16>;\n\
             var<workgroup> xh: array<f16, {}>;\nvar<workgroup> gh: array<f16, {}>;\n\
             var<workgroup> zc: array<f32, {}>;\nvar<workgroup> zero16: array<f32, 256>;\n",
            if g.xglobal { 1 } else { g.xh.max(1) },
            g.gh.max(1),
            g.zc.max(1),
            sx = g.sx,
            scr = g.scratch_tiles(),
        );
        init.push_str("    let sgid = lid / 32u;\n    let lane = lid % 32u;\n");
        if g.bs_len > 0 {
            let _ = writeln!(decls, "var<workgroup> bs: array<f32, {}>;", g.bs_len);
        }
        if g.wsh && g.body.contains("ws[") {
            // the weights of this step, copied once per workgroup (rows padded by 8;
            // the padding columns are never read), before the barrier below; not when
            // every product takes its weights from registers (`Gen::hoist`)
            let _ = writeln!(decls, "var<workgroup> ws: array<f16, {}>;", g.ws_len());
            let pad = g.coop.clone().unwrap();
            for l in &pad.layers {
                let (_, off, st) = g.wsrc(l);
                let _ = writeln!(
                    init,
                    "    for (var e = lid; e < {n}u; e += WG) {{ let o = e / {ip}u; let i = e % {ip}u; ws[{off}u + o * {st}u + i] = w16[{wp}u + e]; }}",
                    n = l.out_p * l.in_p,
                    ip = l.in_p,
                    wp = l.padded
                );
            }
        }
        if g.xglobal {
            // this workgroup's region of the X buffer (XGS f16 per group; the host
            // sizes the buffer groups · XGS)
            let _ = writeln!(
                decls,
                "const XGS: u32 = {}u;\n@group(0) @binding(9) var<storage, read_write> xg: array<f16>;",
                g.xh_next
            );
            init.push_str("    let xgb = wid.x * XGS;\n");
        }
        let _ = writeln!(
            init,
            "    let zslot = min(sgid, SCR - 1u) * {}u;",
            16 * g.zst
        );
        init.push_str(&g.init_extra);
        init.push_str("    for (var e = lid; e < 256u; e += WG) { zero16[e] = 0.0f; }\n");
        if !g.dw_half.is_empty() {
            decls.push_str("var<workgroup> zero16h: array<f16, 256>;\n");
            init.push_str("    for (var e = lid; e < 256u; e += WG) { zero16h[e] = f16(0.0f); }\n");
        }
        init.push_str("    workgroupBarrier();\n");
        let _ = nsg;
        for j in 0..g.dw_tiles {
            let _ = writeln!(
                init,
                "    var dws{j} = {};",
                if g.dw_half.contains(&j) {
                    "coopLoadT<coop_mat16x16<f16, C>>(&zero16h[0], 16u)"
                } else {
                    "coopLoadT<coop_mat16x16<f32, C>>(&zero16[0], 16u)"
                }
            );
        }
        init.push_str(&g.hoisted);
    }
    format!(
        "{head}{common}
const S: u32 = {s}u;
const R: u32 = {r}u;
const WG: u32 = {wg}u;
const CHUNKS: u32 = {chunks}u;
const BATCH: u32 = {batch}u;
const P: u32 = {p}u;

{step_struct}
@group(0) @binding(0) var<uniform> st: Step;
@group(0) @binding(1) var<storage, read> params: array<f32>;
@group(0) @binding(2) var<storage, read> data: array<f32>;
@group(0) @binding(3) var<storage, read_write> partial: array<f32>;
@group(0) @binding(4) var<storage, read_write> loss_partial: array<f32>;

var<workgroup> sh: array<{sh_ty}, {shared}>;
var<workgroup> red: array<f32, {red_n}>;
{decls}
@compute @workgroup_size({wg})
fn nsh_step(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
    let step_h = nsh_pcg_hash(st.step ^ st.seed_h);
{prefetch_init}{init}{accs}    var loss_acc = 0.0f;
    for (var c = 0u; c < CHUNKS; c++) {{
    let first = (wid.x * CHUNKS + c) * S;
{draw}{body}    }}
    let pbase = wid.x * P;
{writeback}{end}}}
",
        common = wgsl::COMMON,
        red_n = if red == "red" { launch.threads } else { 1 },
        r = g.r,
        wg = launch.threads,
        chunks = launch.chunks,
    )
}

/// The fixed-order tree that sums `red[0..wg]` into `red[0]` (pairs at halving
/// strides; a remainder above the largest power of two is folded in first), one barrier
/// per level. It replaced one invocation adding 256 values in a row (a few µs at the end
/// of every workgroup).
fn loss_tree(wg: usize, red: &str) -> String {
    let mut out = String::new();
    let p2 = if wg.is_power_of_two() {
        wg
    } else {
        wg.next_power_of_two() / 2
    };
    if p2 < wg {
        let _ = writeln!(
            out,
            "    if (lid < {}u) {{ {red}[lid] += {red}[lid + {p2}u]; }}\n    workgroupBarrier();",
            wg - p2
        );
    }
    let mut h = p2 / 2;
    while h > 0 {
        let _ = writeln!(
            out,
            "    if (lid < {h}u) {{ {red}[lid] += {red}[lid + {h}u]; }}\n    workgroupBarrier();"
        );
        h /= 2;
    }
    out
}
