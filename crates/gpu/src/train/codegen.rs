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

use super::wgsl::{self, lit};
use nshade_core::Activation;
use nshade_core::loss::Loss;
use nshade_core::module::{Layer, Linear, Module};
use nshade_core::network::Network;
use nshade_shader::wgsl as shader_wgsl;
use std::fmt::Write;

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

fn has_params(m: &Module) -> bool {
    match m {
        Module::Mlp(_) => true,
        Module::Chain(c) => c.stages.iter().any(has_params),
        Module::Cat(c) => c.children.iter().any(has_params),
        Module::Grid(_) => true,
        _ => false,
    }
}

/// A switch for A/B timings: `NSHADE_GPU_<name>=0` turns one kernel feature off (on by
/// default): `PREFETCH` (texels loaded a chunk ahead), `BSH` (the fused path's biases
/// in workgroup memory as the accumulator's start).
fn knob(name: &str) -> bool {
    std::env::var(format!("NSHADE_GPU_{name}")).map_or(true, |v| v != "0")
}

/// The fused path's f16 range check of a scaled gradient `v`: it ORs into the
/// invocation's flag `lsf`, which one workgroup atomic publishes at the end of the
/// kernel (no branch per value; an atomic per value measured 5% slower for seed #3).
fn f16_range_check(v: &str) -> String {
    format!(" lsf |= select(0u, 1u, nsh_ls_over({v}, 65504.0f));")
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
}

/// The barrier after a fused MLP's last phase when it is the first layer's dW (reads
/// of its X_0 and dz only); `step_kernel_with` drops it when it ends the chunk and
/// the sampling writes neither (the sampling's own barrier then orders those reads
/// before the next chunk's writes).
const DW_END: &str = "    workgroupBarrier(); // dW end\n";

/// A bias gradient summed in blocks ([`Gen::fused_bias_sums`]): invocation
/// `lid` holds the partial sum of row lid / blocks in `acc{acc}`; the row sums (blocks
/// added in order) go to the partials at `bias_p` at the end of the kernel.
struct Fold {
    acc: usize,
    rows: usize,
    blocks: usize,
    bias_p: usize,
}

impl Fold {
    /// `if (lid < rows) { t = Σ_b red[base + lid·blocks + b]; partial = t }`.
    fn code(&self, red: &str, base: usize, scaled: bool) -> String {
        let nb = self.blocks;
        let mut fold = format!("var t = {red}[{base}u + lid * {nb}u];");
        for k in 1..nb {
            let _ = write!(fold, " t += {red}[{base}u + lid * {nb}u + {k}u];");
        }
        let chk = if scaled {
            " if (nsh_ls_bits(t) != 0u) { atomicOr(&lsbad, 1u); }"
        } else {
            ""
        };
        format!(
            "    if (lid < {}u) {{ {fold} partial[pbase + {}u + lid] = t;{chk} }}\n",
            self.rows, self.bias_p
        )
    }
}

/// The fused cooperative-matrix MLP needs every hidden activation's derivative from its
/// output alone (the f16 activations are all it keeps).
fn fusable(layers: &[Linear]) -> bool {
    layers[..layers.len() - 1]
        .iter()
        .all(|l| !wgsl::needs_z(l.act))
}

/// Every MLP of `net` can run fused (a kernel runs either all its MLPs fused or none:
/// the staged kernels use `xh` from its start as scratch).
pub fn net_fusable(net: &Network) -> bool {
    fn walk(m: &Module) -> bool {
        match m {
            Module::Mlp(mlp) => fusable(&mlp.layers),
            Module::Chain(c) => c.stages.iter().all(walk),
            Module::Cat(c) => c.children.iter().all(walk),
            _ => true,
        }
    }
    walk(&net.root)
}

/// The fused cooperative-matrix MLP is on (default; `NSHADE_GPU_FUSED=0`: the staged
/// cooperative-matrix kernels).
pub fn fused_enabled() -> bool {
    std::env::var("NSHADE_GPU_FUSED").map_or(true, |v| v != "0")
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

/// Padded f32 weight layout of the `vec4` path: every linear layer's weights twice,
/// row-major `out × in4` (rows padded to a multiple of 4) and transposed `in × out4`,
/// each block starting at a multiple of 4 floats, so the step kernel reads 4 consecutive
/// weights of a row (or of a column) with one `vec4` load. The padding stays zero.
#[derive(Clone, Debug, Default)]
pub struct VecPad {
    pub layers: Vec<VecLayer>,
    /// Floats in the buffer (a multiple of 4, at least 4).
    pub len: usize,
}

#[derive(Clone, Copy, Debug)]
pub struct VecLayer {
    pub weight: usize,
    pub out_dims: usize,
    pub in_dims: usize,
    /// Offset (floats) of the row-major copy and its padded row length.
    pub fwd: usize,
    pub in4: usize,
    /// Offset (floats) of the transposed copy and its padded row length.
    pub tr: usize,
    pub out4: usize,
}

impl VecPad {
    pub fn of(net: &Network) -> VecPad {
        let mut v = VecPad::default();
        for l in Pad::of(net).layers {
            let (in4, out4) = (
                l.in_dims.next_multiple_of(4),
                l.out_dims.next_multiple_of(4),
            );
            let fwd = v.len;
            let tr = fwd + l.out_dims * in4;
            v.len = tr + l.in_dims * out4;
            v.layers.push(VecLayer {
                weight: l.weight,
                out_dims: l.out_dims,
                in_dims: l.in_dims,
                fwd,
                in4,
                tr,
                out4,
            });
        }
        v.len = v.len.max(4);
        v
    }
    fn layer(&self, weight: usize) -> VecLayer {
        *self
            .layers
            .iter()
            .find(|l| l.weight == weight)
            .expect("layer in vec pad table")
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

    /// Fused path: the start of an index expression into X (`xh[` in workgroup memory,
    /// or this workgroup's region of the storage buffer `xg`).
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
        let _ = writeln!(
            self.writeback,
            "    {{\n{tile}\n        let real = t < {nt}u;\n        let v = dws{slot};\n        let stride = select(16u, {ip}u, real);\n        let off = pbase + select({dummy}u, {wp}u + (ot * 16u) * {ip}u + it * 16u, real);\n        coopStoreT(v, &partial[off], stride);\n    }}"
        );
    }

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
                let body = super::grid::forward_body(gr, &|j, s| self.at(x, j, s), &|j, s| {
                    self.at(y, j, s)
                });
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
        let mut lb = String::new();
        for u in 0..ts {
            let _ = writeln!(
                lb,
                "            let x{u} = {};",
                self.at(x, "i", &format!("sg + {}u", u * sg))
            );
        }
        for t in 0..to {
            let _ = writeln!(
                lb,
                "            let w{t} = params[{}u + (og + {}u) * {i_n}u + i];",
                l.weight,
                t * og
            );
            for u in 0..ts {
                let _ = writeln!(lb, "            c{t}_{u} = fma(w{t}, x{u}, c{t}_{u});");
            }
        }
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
                    let body =
                        super::grid::backward_body(gr, &|j, s| self.at(*x, j, s), &|j, s| {
                            self.at(dy, j, s)
                        });
                    self.items(gr.levels.len() * self.s, &body);
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
        let mut lb = String::new();
        for u in 0..ts {
            let _ = writeln!(
                lb,
                "            let d{u} = {};",
                self.at(dz, "o", &format!("sg + {}u", u * sg))
            );
        }
        for t in 0..ti {
            let _ = writeln!(
                lb,
                "            let w{t} = params[{}u + o * {i_n}u + ig + {}u];",
                l.weight,
                t * ig
            );
            for u in 0..ts {
                let _ = writeln!(lb, "            c{t}_{u} = fma(w{t}, d{u}, c{t}_{u});");
            }
        }
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

    /// Fused cooperative-matrix MLP, forward. The MLP input (f32 rows of `x`) is
    /// converted once into f16 `X_0` in `xh`; every layer then computes its output tiles
    /// (16 outputs × 16 samples, one per subgroup and iteration) with 16×16×16 f16
    /// matrices (weights straight from the padded f16 copy in storage), stores the f32
    /// tile into the subgroup's own 256-float scratch in `zc`, and its 32 invocations
    /// add the bias and apply the activation: hidden layers write f16 into the next
    /// layer's input `X_{i+1}` (zero in padding rows), the output layer writes f32 z and
    /// a into `sh` as the other paths do. One workgroup barrier per layer (two per tile
    /// iteration unless `sgbar`). Returns the layers and the offsets of the `X_i`.
    fn fused_forward<'a>(
        &mut self,
        layers: &'a [Linear],
        x: View,
        out: Option<View>,
    ) -> (Vec<LayerFwd<'a>>, Vec<usize>) {
        let pad = self.coop.clone().unwrap();
        let s = self.s;
        let st_n = s / 16;
        let mut xo = Vec::new();
        let mut off = self.xh_next;
        for l in layers {
            xo.push(off);
            off += pad.layer(l.weight).in_p * self.sx;
        }
        self.xh_next = off;
        self.xh = self.xh.max(off);
        let mut b = String::new();
        let p0 = pad.layer(layers[0].weight);
        if self.mirrored == Some(x.base) && !self.xglobal {
            // the phase that produced the input wrote X_0 already; its padding rows are
            // zeroed once at the start of the kernel
            self.mirrored = None;
            let _ = writeln!(
                self.init_extra,
                "    for (var e = lid; e < {n}u; e += WG) {{ xh[{x0}u + {r}u * SX + e] = f16(0.0f); }}",
                n = (p0.in_p - p0.in_dims) * self.sx,
                x0 = xo[0],
                r = p0.in_dims,
            );
        } else {
            let _ = writeln!(
                b,
                "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n        var v = 0.0f;\n        if (j < {rows}u) {{ v = {src}; }}\n        {xa}{x0}u + j * SX + s] = f16(v);\n    }}\n    {bar};",
                xa = self.xa(),
                bar = if self.xglobal {
                    "storageBarrier()"
                } else {
                    "workgroupBarrier()"
                },
                x0 = xo[0],
                n = p0.in_p * s,
                rows = p0.in_dims,
                src = self.at(x, "j", "s"),
            );
        }
        self.body.push_str(&b);
        b.clear();
        let last = layers.len() - 1;
        let mut out_layers = Vec::new();
        for (i, l) in layers.iter().enumerate() {
            let pl = pad.layer(l.weight);
            let (ip, op) = (pl.in_p, pl.out_p);
            let (wa, wp, ws) = self.wsrc(&pl);
            let (a, z) = if i == last {
                let a = out.unwrap_or_else(|| self.alloc(l.out_dims));
                (a, wgsl::needs_z(l.act).then(|| self.alloc(l.out_dims)))
            } else {
                (View { base: 0, width: 0 }, None)
            };
            let nt = (op / 16) * st_n;
            // with the weights in workgroup memory the biases are there too (f32, copied
            // once per workgroup, zero in padding rows), and the accumulator starts from
            // them: a column-major load with stride 0 repeats the 16 biases of the tile's
            // rows in every column, so the epilogue adds nothing
            let bias_c = (self.wsh && knob("BSH")).then(|| {
                let boff = self.bs_len;
                self.bs_len += op;
                let _ = writeln!(
                    self.init_extra,
                    "    for (var e = lid; e < {op}u; e += WG) {{ bs[{boff}u + e] = select(0.0f, params[{}u + min(e, {}u)], e < {}u); }}",
                    l.bias,
                    l.out_dims - 1,
                    l.out_dims
                );
                format!("coopLoad<coop_mat16x16<f32, C>>(&bs[{boff}u + ot * 16u], 0u)")
            });
            let bias_v = |o: &str| {
                if bias_c.is_some() {
                    "v".to_string()
                } else {
                    format!("v + params[{}u + {o}]", l.bias)
                }
            };
            let hoisted = self.hoist(false, nt, ip / 16, |k| {
                format!(
                    "coopLoadT<coop_mat16x16<f16, A>>(&w16[{}u + (@BLK@ * 16u) * {ip}u + {}u], {ip}u)",
                    pl.padded,
                    k * 16
                )
            });
            let mut mm = String::new();
            for k in 0..ip / 16 {
                let a = match &hoisted {
                    Some(r) => r[k].clone(),
                    None => format!(
                        "coopLoadT<coop_mat16x16<f16, A>>(&{wa}[{wp}u + (ot * 16u) * {ws}u + {}u], {ws}u)",
                        k * 16
                    ),
                };
                let _ = writeln!(
                    mm,
                    "        c = coopMultiplyAdd({a}, coopLoadT<coop_mat16x16<f16, B>>(&{}{}u + st * 16u], SX), c);",
                    self.xa(),
                    xo[i] + k * 16 * self.sx
                );
            }
            let o_n = l.out_dims;
            let epi = if i == last {
                let zs = match z {
                    Some(z) => format!("{} = zz; ", self.at(z, "o", "s")),
                    None => String::new(),
                };
                // markers: when this layer produces the network output, the step kernel
                // puts the loss, dy and dy's f16 copy (zero in padding rows) here
                format!(
                    "if (o < {o_n}u) {{ let zz = {}; {zs}{} = {};\n//@FEPI{w}@\n}} else {{\n//@FPAD{w}@\n}}",
                    bias_v("o"),
                    self.at(a, "o", "s"),
                    wgsl::act_value(l.act, "zz"),
                    w = l.weight,
                )
            } else {
                format!(
                    "let zz = {}; {}{}u + o * SX + s] = select(f16(0.0f), f16({}), o < {o_n}u);",
                    bias_v(&format!("min(o, {}u)", o_n - 1)),
                    self.xa(),
                    xo[i + 1],
                    wgsl::act_value(l.act, "zz")
                )
            };
            let xwrite = i < last;
            self.cinit = bias_c;
            self.fused_tiles(&mut b, nt, "ot", "", &mm, &epi, xwrite);
            self.cinit = None;
            self.body.push_str(&b);
            b.clear();
            out_layers.push(LayerFwd { l, x, z, a });
        }
        (out_layers, xo)
    }

    /// One fused phase over `nt` output tiles (`r` = the tile's row-block name, `st`
    /// its sample block): `mm` accumulates into `c`, the tile goes to the subgroup's
    /// scratch, and `epi` runs per element with `o` (row), `s` (sample) and `v` (the
    /// f32 value) for real tiles. Ends with a workgroup barrier.
    #[allow(clippy::too_many_arguments)]
    fn fused_tiles(
        &mut self,
        b: &mut String,
        nt: usize,
        r: &str,
        pre: &str,
        mm: &str,
        epi: &str,
        xwrite: bool,
    ) {
        let epi = if self.exp == "noepi" { "" } else { epi };
        // Scratch tiles: min(NSG, most tiles of a phase) of them (`SCR`, a constant
        // declared with the arrays). A subgroup uses tile min(sgid, SCR − 1): when SCR <
        // NSG every phase has at most SCR tiles and one iteration, so the subgroups that
        // share the last scratch tile all compute the same (last) tile and store the
        // same values; at most one of them is real and reads it back.
        self.nt_max = self.nt_max.max(nt);
        let nsg = self.wg / 32;
        let st_n = self.s / 16;
        let zst = self.zst;
        let sync = if self.sgbar {
            "subgroupBarrier()"
        } else {
            "workgroupBarrier()"
        };
        let c0 = self
            .cinit
            .clone()
            .unwrap_or_else(|| "coopLoadT<coop_mat16x16<f32, C>>(&zero16[0], 16u)".into());
        let _ = writeln!(
            b,
            "    for (var j = 0u; j < {nj}u; j++) {{\n        let t = j * NSG + sgid; let q = min(t, {lastt}u);\n        let {r} = q / {st_n}u; let st = q % {st_n}u;\n{pre}        var c = {c0};\n{mm}        let cc = c;\n        coopStoreT(cc, &zc[zslot], {zst}u);\n        {sync};\n        if (t < {nt}u) {{\n{body}        }}\n{tail}    }}",
            nj = nt.div_ceil(nsg),
            // the scratch tile is rewritten by the next iteration only; with one
            // iteration the workgroup barrier after the loop orders it
            tail = if self.sgbar && !(xwrite && self.xglobal) && nt <= nsg {
                String::new()
            } else {
                format!("        {sync};\n")
            },
            lastt = nt - 1,
            body = unroll(
                "u",
                8,
                &format!(
                    "            {{ let e = u * 32u + lane; let o = {r} * 16u + e / 16u; let s = st * 16u + e % 16u;\n                let v = zc[zslot + (e / 16u) * {zst}u + e % 16u];\n                {epi} }}\n"
                )
            ),
        );
        // a phase that wrote X into the storage buffer ends with a barrier that makes
        // it visible to the other subgroups
        match (self.sgbar, xwrite && self.xglobal) {
            (true, false) => b.push_str("    workgroupBarrier();\n"),
            (_, true) => b.push_str("    storageBarrier();\n"),
            (false, false) => {}
        }
    }

    /// Fused cooperative-matrix MLP, backward: dy (f32, the output activation's
    /// derivative applied) → f16 dz in `gh`; per layer, from the last: dW += dz·Xᵀ into
    /// the subgroups' persistent accumulator tiles, db += Σ dz (f32 registers), and
    /// dx = Wᵀ·dz by tiles whose epilogue multiplies by the derivative of the layer
    /// below (from its f16 output) and writes the next dz as f16 into the other half of
    /// `gh` — or, for the first layer, the MLP's input gradient in f32 into `dx`. One
    /// workgroup barrier per layer (per tile iteration unless `sgbar`).
    fn fused_backward(
        &mut self,
        layers: &[LayerFwd],
        xo: &[usize],
        dy: View,
        dx: Option<(View, bool)>,
    ) {
        let pad = self.coop.clone().unwrap();
        let s = self.s;
        let st_n = s / 16;
        let nsg = self.wg / 32;
        let maxp = layers
            .iter()
            .map(|lf| pad.layer(lf.l.weight).out_p)
            .max()
            .unwrap();
        let sx = self.sx;
        self.gh = self.gh.max(2 * maxp * sx);
        let scaled = self.scaled;
        let check = |v: &str| {
            if scaled {
                f16_range_check(v)
            } else {
                String::new()
            }
        };
        let last = layers.len() - 1;
        let pl_last = pad.layer(layers[last].l.weight);
        let mut b = String::new();
        // dy's f16 copy: made by the output layer's forward epilogue when this MLP
        // produces the network output (the step kernel fills the markers), else here
        let in_epi = self.fused_out == Some(layers[last].l.weight);
        if !in_epi {
            let _ = writeln!(
                b,
                "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n        var v = 0.0f;\n        if (j < {rows}u) {{ v = {src}; }}{chk}\n        gh[j * SX + s] = f16(v);\n    }}\n    workgroupBarrier();",
                n = pl_last.out_p * s,
                rows = layers[last].l.out_dims,
                src = self.at(dy, "j", "s"),
                chk = check("v"),
            );
        }
        let dummy = pad.dummy(self.param_count);
        for i in (0..=last).rev() {
            let l = layers[i].l;
            let pl = pad.layer(l.weight);
            let (wp, ip, op) = (pl.padded, pl.in_p, pl.out_p);
            let cur = if (last - i).is_multiple_of(2) {
                0
            } else {
                maxp * sx
            };
            let nxt = maxp * sx - cur;
            // dW tiles into persistent slots (tile j·NSG + sgid in slot dws{first + j})
            let it_n = ip / 16;
            let nt = (op / 16) * it_n;
            let first = self.dw_tiles;
            let slots = nt.div_ceil(nsg);
            self.dw_tiles += slots;
            let st_dw = if self.exp == "nodw" { 0 } else { st_n };
            for j in 0..slots {
                let slot = first + j;
                let tile = dw_tile(j, nt, it_n);
                let _ = writeln!(b, "    {{\n{tile}");
                for k in 0..st_dw {
                    let _ = writeln!(
                        b,
                        "        dws{slot} = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&gh[{cur}u + (ot * 16u) * SX + {k16}u], SX), coopLoad<coop_mat16x16<f16, B>>(&{xa}{x}u + (it * 16u) * SX + {k16}u], SX), dws{slot});",
                        k16 = k * 16,
                        xa = self.xa(),
                        x = xo[i]
                    );
                }
                b.push_str("    }\n");
                self.dw_writeback(&tile, nt, slot, ip, dummy, wp);
            }
            // db in f32 registers
            let o_n = l.out_dims;
            self.fused_bias_sums(&mut b, o_n, cur, pl.bias_p);
            let want_dx = i > 0 || dx.is_some();
            if !want_dx {
                b.push_str(DW_END);
                continue;
            }
            let (wa, wq, ws) = self.wsrc(&pl);
            let hoisted = self.hoist(true, (ip / 16) * st_n, op / 16, |k| {
                format!(
                    "coopLoad<coop_mat16x16<f16, A>>(&w16[{}u + {}u + @BLK@ * 16u], {ip}u)",
                    pl.padded,
                    k * 16 * ip
                )
            });
            let mut mm = String::new();
            for k in 0..op / 16 {
                let a = match &hoisted {
                    Some(r) => r[k].clone(),
                    None => format!(
                        "coopLoad<coop_mat16x16<f16, A>>(&{wa}[{wq}u + {}u + it * 16u], {ws}u)",
                        k * 16 * ws
                    ),
                };
                let _ = writeln!(
                    mm,
                    "        c = coopMultiplyAdd({a}, coopLoadT<coop_mat16x16<f16, B>>(&gh[{}u + st * 16u], SX), c);",
                    cur + k * 16 * sx
                );
            }
            let i_n = l.in_dims;
            let epi = if i > 0 {
                let below = layers[i - 1].l;
                let d = if below.act == Activation::None {
                    "v".to_string()
                } else {
                    format!("v * {}", wgsl::act_derivative(below.act, "y", "y"))
                };
                // with X in the storage buffer the 8 values of y are loaded before the
                // tile's products (`yv`, the loads overlap them)
                let y = if self.xglobal {
                    "yv[u]".to_string()
                } else {
                    format!("f32(xh[{}u + o * SX + s])", xo[i])
                };
                format!(
                    "let y = {y}; let d = select(0.0f, {d}, o < {i_n}u);{chk} gh[{nxt}u + o * SX + s] = f16(d);",
                    chk = check("d")
                )
            } else {
                let (dxv, add) = dx.unwrap();
                format!(
                    "if (o < {i_n}u) {{ {} {} v; }}",
                    self.at(dxv, "o", "s"),
                    if add { "+=" } else { "=" }
                )
            };
            let pre = if i > 0 && self.xglobal {
                let mut p = String::from("        var yv: array<f32, 8>;\n");
                for u in 0..8 {
                    let _ = writeln!(
                        p,
                        "        yv[{u}] = f32(xg[xgb + {}u + (it * 16u + {}u + lane / 16u) * SX + st * 16u + lane % 16u]);",
                        xo[i],
                        2 * u
                    );
                }
                p
            } else {
                String::new()
            };
            // the dx tiles: rows are inputs (`it` blocks)
            self.fused_tiles(&mut b, (ip / 16) * st_n, "it", &pre, &mm, &epi, false);
        }
        self.body.push_str(&b);
    }

    /// Fused path: the weight operands of a product phase with one tile per subgroup
    /// (`nt` ≤ NSG: subgroup `sgid` always takes tile min(sgid, nt − 1), so the same
    /// weight tiles every chunk) are loaded once per workgroup from `w16` into matrix
    /// registers, `kn` of them: `tile(k)` gives the k-th load's `(offset, layout)` given
    /// the tile's row block `blk` (an expression). Returns the register names, or None
    /// when the phase has more tiles than subgroups, the knob is off
    /// (`NSHADE_GPU_HOIST`: 0 none, 1 the forward products only, 2 forward and input
    /// gradient, the default) or the registers would pass 40 tiles (160 per invocation).
    fn hoist(
        &mut self,
        dx: bool,
        nt: usize,
        kn: usize,
        tile: impl Fn(usize) -> String,
    ) -> Option<Vec<String>> {
        let level = std::env::var("NSHADE_GPU_HOIST")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(2);
        let need = if dx { 2 } else { 1 };
        if level < need || nt > self.wg / 32 || self.hoisted_n + kn > 40 {
            return None;
        }
        let st_n = self.s / 16;
        let mut names = Vec::new();
        for k in 0..kn {
            let name = format!("wr{}", self.hoisted_n);
            self.hoisted_n += 1;
            let _ = writeln!(
                self.hoisted,
                "    let {name} = {};",
                tile(k).replace("@BLK@", &format!("(min(sgid, {}u) / {st_n}u)", nt - 1))
            );
            names.push(name);
        }
        Some(names)
    }

    /// Fused path: db += Σ_s dz[o][s] for the `o_n` rows of `gh` at `cur`. With
    /// `o_n` ≤ WG the S samples of a row are split over B invocations (B a power of two
    /// dividing S, at most 16, B·o_n ≤ WG; invocation `lid` takes row lid / B and samples
    /// lid % B + k·B, k = 0, 1, … in order — neighbouring invocations read neighbouring
    /// f16, so the reads are free of bank conflicts), which keeps each invocation's
    /// chain of additions per chunk S/B long instead of S; the B partial sums of a row
    /// are added once per kernel, in order of their block (`@RED@`, the workgroup
    /// array the loss tree uses, filled by all invocations between two barriers).
    /// Wider layers keep one invocation per row. A fixed order either way.
    fn fused_bias_sums(&mut self, b: &mut String, o_n: usize, cur: usize, bias_p: usize) {
        let s = self.s;
        let wg = self.wg;
        if o_n > wg {
            for k in 0..o_n.div_ceil(wg) {
                let a = self.accs;
                self.accs += 1;
                let _ = writeln!(
                    b,
                    "    {{ let o = lid + {}u; if (o < {o_n}u) {{\n{}    }} }}",
                    k * wg,
                    unroll(
                        "s",
                        s,
                        &format!("        acc{a} += f32(gh[{cur}u + o * SX + s]);\n")
                    )
                );
                self.write_bias_partial(k, o_n, bias_p, a);
            }
            return;
        }
        let mut nb = 1;
        while nb < 16 && nb * 2 * o_n <= wg && nb * 2 <= s && s.is_multiple_of(nb * 2) {
            nb *= 2;
        }
        let a = self.accs;
        self.accs += 1;
        let mut sum = String::new();
        for k in 0..s / nb {
            let _ = writeln!(
                sum,
                "        acc{a} += f32(gh[{cur}u + o * SX + bl + {}u]);",
                k * nb
            );
        }
        let _ = writeln!(
            b,
            "    {{ let o = lid / {nb}u; let bl = lid % {nb}u; if (o < {o_n}u) {{\n{sum}    }} }}"
        );
        if nb == 1 {
            self.write_bias_partial(0, o_n, bias_p, a);
            return;
        }
        self.folds.push(Fold {
            acc: a,
            rows: o_n,
            blocks: nb,
            bias_p,
        });
    }

    /// f16 copy of `rows` rows of `src` into the staging array `dst` (`xh` or `gh`,
    /// row-major `[row][s]`, stride S), zero-padded to `rows_p` rows. No barrier.
    fn coop_convert(&mut self, b: &mut String, src: View, rows: usize, rows_p: usize, dst: &str) {
        // dynamic loss scaling: a scaled gradient that f16 cannot hold is an overflow
        let check = if self.scaled && dst == "gh" {
            "\n        if (nsh_ls_over(v, 65504.0f)) { atomicOr(&lsbad, 1u); }"
        } else {
            ""
        };
        let _ = writeln!(
            b,
            "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n        var v = 0.0f;\n        if (j < {rows}u) {{ v = {src}; }}{check}\n        {dst}[e] = f16(v);\n    }}",
            n = rows_p * self.s,
            src = self.at(src, "j", "s"),
        );
        let need = rows_p * self.s;
        if dst == "xh" {
            self.xh = self.xh.max(need);
        } else {
            self.gh = self.gh.max(need);
        }
    }

    /// zc (rows_p × S, f32) = A·B with 16×16×16 cooperative matrices; output tiles are
    /// spread over the subgroups. `a(ot, k)` / `b(k, st)` give the load expressions.
    fn coop_gemm(
        &mut self,
        b: &mut String,
        rows_p: usize,
        k_p: usize,
        a: impl Fn(&str, &str) -> String,
        bm: impl Fn(&str, &str) -> String,
    ) {
        // Cooperative-matrix operations need workgroup-uniform control flow, so every
        // subgroup runs the same number of iterations; surplus ones recompute the last
        // tile and store identical values.
        let st = self.s / 16;
        let nt = (rows_p / 16) * st;
        let nsg = self.wg / 32;
        let _ = writeln!(
            b,
            "    for (var j = 0u; j < {nj}u; j++) {{\n        let t = min(j * NSG + sgid, {last}u);\n        let ot = t / {st}u; let st = t % {st}u;\n        var c = coopLoadT<coop_mat16x16<f32, C>>(&zero16[0], 16u);\n        for (var k = 0u; k < {kt}u; k++) {{\n            c = coopMultiplyAdd({a}, {bb}, c);\n        }}\n        let cc = c;\n        let zo = (ot * 16u) * S + st * 16u;\n        coopStoreT(cc, &zc[zo], S);\n    }}",
            nj = nt.div_ceil(nsg),
            last = nt - 1,
            kt = k_p / 16,
            a = a("ot", "k"),
            bb = bm("k", "st"),
        );
        self.zc = self.zc.max(rows_p * self.s);
    }

    /// f16 path: zc (rows × S, f32) = A·B over `k_n` with f16 operands (`a(row, k)`,
    /// `bm(k, s)` give the f16 element expressions) and f32 accumulation, one output per
    /// item. No barrier.
    fn f16_gemm(
        &mut self,
        b: &mut String,
        rows: usize,
        k_n: usize,
        a: impl Fn(&str, &str) -> String,
        bm: impl Fn(&str, &str) -> String,
    ) {
        let _ = writeln!(
            b,
            "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n        var c = 0.0f;",
            n = rows * self.s
        );
        let lb = format!(
            "            c = fma(f32({}), f32({}), c);\n",
            a("j", "k"),
            bm("k", "s")
        );
        b.push_str(&unroll("k", k_n, &lb));
        b.push_str("        zc[j * S + s] = c;\n    }\n");
        self.zc = self.zc.max(rows * self.s);
    }

    /// Forward of one linear layer on cooperative matrices: x → f16 staging, W·x into
    /// `zc`, then bias and activation in f32.
    fn coop_forward(&mut self, l: &Linear, x: View, z: Option<View>, a: View) {
        let pl = self.coop.as_ref().unwrap().layer(l.weight);
        let mut b = String::new();
        self.coop_convert(&mut b, x, l.in_dims, pl.in_p, "xh");
        b.push_str("    workgroupBarrier();\n");
        let (wp, ip) = (pl.padded, pl.in_p);
        if self.f16 {
            self.f16_gemm(
                &mut b,
                l.out_dims,
                l.in_dims,
                |o, k| format!("w16[{wp}u + {o} * {ip}u + {k}]"),
                |k, s| format!("xh[{k} * S + {s}]"),
            );
        } else {
            self.coop_gemm(
            &mut b,
            pl.out_p,
            pl.in_p,
            |ot, k| format!("coopLoadT<coop_mat16x16<f16, A>>(&w16[{wp}u + ({ot} * 16u) * {ip}u + {k} * 16u], {ip}u)"),
            |k, st| format!("coopLoadT<coop_mat16x16<f16, B>>(&xh[({k} * 16u) * S + {st} * 16u], S)"),
        );
        }
        b.push_str("    workgroupBarrier();\n");
        self.body.push_str(&b);
        let zs = match z {
            Some(z) => format!("{} = zz;", self.at(z, "j", "s")),
            None => String::new(),
        };
        let body = format!(
            "        let j = e / S; let s = e % S;\n        let zz = zc[j * S + s] + params[{}u + j];\n        {zs}\n        {} = {};\n",
            l.bias,
            self.at(a, "j", "s"),
            wgsl::act_value(l.act, "zz")
        );
        self.items(l.out_dims * self.s, &body);
    }

    /// Backward of one linear layer on cooperative matrices: dz and x → f16 staging;
    /// dW += dz·xᵀ into the subgroups' persistent accumulator slots, db += Σ dz in f32,
    /// dx = Wᵀ·dz into `zc`; then dx is written (times the activation derivative of the
    /// layer below, in place over its activations, when `below` is given).
    fn coop_backward(
        &mut self,
        lf: &LayerFwd,
        dz: View,
        dx: Option<(View, bool)>,
        below: Option<&LayerFwd>,
    ) {
        let l = lf.l;
        let pl = self.coop.as_ref().unwrap().layer(l.weight);
        let (op, ip, wp) = (pl.out_p, pl.in_p, pl.padded);
        let nsg = self.wg / 32;
        let mut b = String::new();
        self.coop_convert(&mut b, dz, l.out_dims, op, "gh");
        self.coop_convert(&mut b, lf.x, l.in_dims, ip, "xh");
        b.push_str("    workgroupBarrier();\n");
        // dW tiles of this layer: tile j·NSG + sgid lives in slot dws{first + j} of
        // subgroup sgid. Control flow stays uniform: surplus slots accumulate a clamped
        // tile and are stored into the per-group scratch area at `dummy`.
        let it_n = ip / 16;
        let nt = (op / 16) * it_n;
        let first = self.dw_tiles;
        let slots = if self.f16 { 0 } else { nt.div_ceil(nsg) };
        self.dw_tiles += slots;
        if self.f16 {
            // f16 path: dW += dz·xᵀ from the f16 staging into per-invocation f32
            // registers (one weight each), written into the padded partials layout
            let (o_n, i_n) = (l.out_dims, l.in_dims);
            let nq = o_n * i_n;
            let lb = "            acc@ = fma(f32(gh[o * S + s]), f32(xh[i * S + s]), acc@);\n";
            for k in 0..nq.div_ceil(self.wg) {
                let a = self.accs;
                self.accs += 1;
                let head = format!(
                    "    {{ let q = lid + {}u; if (q < {nq}u) {{ let o = q / {i_n}u; let i = q % {i_n}u;\n",
                    k * self.wg
                );
                b.push_str(&head);
                b.push_str(&unroll("s", self.s, &lb.replace('@', &a.to_string())));
                b.push_str("    } }\n");
                self.writeback.push_str(&head);
                let _ = writeln!(
                    self.writeback,
                    "        partial[pbase + {wp}u + o * {ip}u + i] = acc{a};\n    }} }}"
                );
            }
        }
        let dummy = self.coop.as_ref().unwrap().dummy(self.param_count);
        for j in 0..slots {
            let slot = first + j;
            let tile = dw_tile(j, nt, it_n);
            let _ = writeln!(
                b,
                "    {{\n{tile}\n        for (var k = 0u; k < S / 16u; k++) {{\n            dws{slot} = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&gh[(ot * 16u) * S + k * 16u], S), coopLoad<coop_mat16x16<f16, B>>(&xh[(it * 16u) * S + k * 16u], S), dws{slot});\n        }}\n    }}"
            );
            self.dw_writeback(&tile, nt, slot, ip, dummy, wp);
        }
        let o_n = l.out_dims;
        for k in 0..o_n.div_ceil(self.wg) {
            let a = self.accs;
            self.accs += 1;
            let _ = writeln!(
                b,
                "    {{ let o = lid + {}u; if (o < {o_n}u) {{ for (var s = 0u; s < S; s++) {{ acc{a} += {}; }} }} }}",
                k * self.wg,
                self.at(dz, "o", "s")
            );
            let _ = writeln!(
                self.writeback,
                "    {{ let o = lid + {}u; if (o < {o_n}u) {{ partial[pbase + {}u + o] = acc{a}; }} }}",
                k * self.wg,
                pl.bias_p
            );
        }
        if let Some((dxv, add)) = dx {
            if self.f16 {
                self.f16_gemm(
                    &mut b,
                    l.in_dims,
                    l.out_dims,
                    |i, k| format!("w16[{wp}u + {k} * {ip}u + {i}]"),
                    |k, s| format!("gh[{k} * S + {s}]"),
                );
            } else {
                self.coop_gemm(
                &mut b,
                ip,
                op,
                |it, k| format!("coopLoad<coop_mat16x16<f16, A>>(&w16[{wp}u + ({k} * 16u) * {ip}u + {it} * 16u], {ip}u)"),
                |k, st| format!("coopLoadT<coop_mat16x16<f16, B>>(&gh[({k} * 16u) * S + {st} * 16u], S)"),
            );
            }
            b.push_str("    workgroupBarrier();\n");
            self.body.push_str(&b);
            let v = "zc[j * S + s]";
            let line = match below {
                Some(bl) if bl.l.act != Activation::None => {
                    let z = match bl.z {
                        Some(z) => self.at(z, "j", "s"),
                        None => "0.0f".into(),
                    };
                    format!(
                        "        let z = {z}; let y = {};\n        {} = {v} * {};\n",
                        self.at(bl.a, "j", "s"),
                        self.at(dxv, "j", "s"),
                        wgsl::act_derivative(bl.l.act, "z", "y")
                    )
                }
                _ => format!(
                    "        {} {} {v};\n",
                    self.at(dxv, "j", "s"),
                    if add { "+=" } else { "=" }
                ),
            };
            let body = format!("        let j = e / S; let s = e % S;\n{line}");
            self.items(l.in_dims * self.s, &body);
        } else {
            b.push_str("    workgroupBarrier();\n");
            self.body.push_str(&b);
        }
    }

    /// Rows per register tile of the vec4 path (`rows` × one 4-sample vector): up to 4
    /// while every invocation (or 1/tile_k of them) still gets an item.
    fn vec_rows(&self, rows: usize) -> usize {
        let sv = self.s / 4;
        let mut t = largest_tile(rows, 4);
        while (rows / t) * sv * self.tile_k < self.wg && t > 1 {
            t = largest_tile(rows, t / 2);
        }
        t
    }

    /// `for g in 0..⌊n/4⌋` (unrolled when short) over groups of 4 of a reduction axis
    /// of length `n`, then the remainder group: `body(group expr, lanes)` gives the
    /// statements for one group using `lanes` (4, or fewer in the remainder) of it.
    fn groups4(n: usize, body: impl Fn(&str, usize) -> String) -> String {
        let full = n / 4;
        let mut out = unroll("g", full, &body("g", 4));
        if !n.is_multiple_of(4) {
            let _ = write!(
                out,
                "        {{ let g = {full}u;\n{}        }}\n",
                body("g", n % 4)
            );
        }
        out
    }

    /// vec4 path: z = W·x + b, a = act(z); an invocation computes `to` outputs
    /// (strided) × 4 consecutive samples, reading 4 inputs × 4 samples and one `vec4` of
    /// weights per output row per step of the reduction.
    fn vec_forward(&mut self, l: &Linear, x: View, z: Option<View>, a: View) {
        let vl = self.vec.as_ref().unwrap().layer(l.weight);
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        let sv = self.s / 4;
        let to = self.vec_rows(o_n);
        let og = o_n / to;
        let mut b = format!("        let og = e / {sv}u; let sg = e % {sv}u;\n");
        for t in 0..to {
            let _ = writeln!(
                b,
                "        var c{t} = vec4<f32>(params[{}u + og + {}u]);",
                l.bias,
                t * og
            );
        }
        let lanes = ["x", "y", "z", "w"];
        let body = |g: &str, n: usize| self.vec_matvec(x, "x", vl.fwd, vl.in4, "og", to, og, g, n);
        b.push_str(&Self::groups4(i_n, body));
        for t in 0..to {
            let j = format!("og + {}u", t * og);
            if let Some(z) = z {
                let _ = writeln!(b, "        {} = c{t};", self.at4(z, &j, "sg"));
            }
            let acts: Vec<String> = lanes
                .iter()
                .map(|lane| {
                    format!(
                        "{{ let zz = c{t}.{lane}; {}.{lane} = {}; }}",
                        "av",
                        wgsl::act_value(l.act, "zz")
                    )
                })
                .collect();
            // `//@EPI<weight>@`: where the loss phase is fused in when this layer
            // produces the network output (see `step_kernel`)
            let _ = writeln!(
                b,
                "        {{ var av = c{t}; {}\n        {} = av;\n        let lzv = c{t}; let lj = {j};\n        //@EPI{}@\n        }}",
                acts.join(" "),
                self.at4(a, &j, "sg"),
                l.weight
            );
        }
        self.items(og * sv, &b);
    }

    /// vec4 path: dW += dz·xᵀ and db += Σ dz into register accumulators (an invocation
    /// owns a to × ti tile of W, strided, and reads 4 samples per `vec4` load), then
    /// dx = Wᵀ·dz when asked.
    fn vec_backward(&mut self, lf: &LayerFwd, dz: View, dx: Option<(View, bool)>, barrier: bool) {
        let l = lf.l;
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        let sv = self.s / 4;
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
        let lanes = ["x", "y", "z", "w"];
        let mut b = String::new();
        for k in 0..nq.div_ceil(self.wg) {
            let base = self.accs;
            self.accs += to * ti;
            let head = format!(
                "    {{ let q = lid + {}u; if (q < {nq}u) {{ let og = q / {ig}u; let ig = q % {ig}u;\n",
                k * self.wg
            );
            b.push_str(&head);
            let mut lb = String::new();
            for t in 0..to {
                let _ = writeln!(
                    lb,
                    "            let d{t} = {};",
                    self.at4(dz, &format!("og + {}u", t * og), "sg")
                );
            }
            for u in 0..ti {
                let _ = writeln!(
                    lb,
                    "            let x{u} = {};",
                    self.at4(lf.x, &format!("ig + {}u", u * ig), "sg")
                );
            }
            for lane in lanes {
                for t in 0..to {
                    for u in 0..ti {
                        let a = base + t * ti + u;
                        let _ = writeln!(
                            lb,
                            "            acc{a} = fma(d{t}.{lane}, x{u}.{lane}, acc{a});"
                        );
                    }
                }
            }
            b.push_str(&unroll("sg", sv, &lb));
            b.push_str("    } }\n");
            self.writeback.push_str(&head);
            self.write_weight_partials(l.weight, to, ti, og, ig, i_n, base);
        }
        for k in 0..o_n.div_ceil(self.wg) {
            let a = self.accs;
            self.accs += 1;
            let _ = writeln!(
                b,
                "    {{ let o = lid + {}u; if (o < {o_n}u) {{ for (var sg = 0u; sg < {sv}u; sg++) {{ let v = {}; acc{a} += v.x; acc{a} += v.y; acc{a} += v.z; acc{a} += v.w; }} }} }}",
                k * self.wg,
                self.at4(dz, "o", "sg")
            );
            self.write_bias_partial(k, o_n, l.bias, a);
        }
        if barrier {
            b.push_str("    workgroupBarrier();\n");
        }
        self.body.push_str(&b);
        if let Some((dxv, add)) = dx {
            self.vec_backward_dx(lf, dz, dxv, add, None);
        }
    }

    /// vec4 path, one group `g` of `n` ≤ 4 inputs of a matrix–vector tile: loads input
    /// vectors `{var}0..` from `src`, then for each of the `rows` output rows (`row + t·stride`)
    /// the padded weight vector from block `block` of `wv` (rows `row4` floats long), and
    /// accumulates `c{t} += w{t}.lane · {var}{lane}` (forward: W; input gradient: Wᵀ).
    #[allow(clippy::too_many_arguments)]
    fn vec_matvec(
        &self,
        src: View,
        var: &str,
        block: usize,
        row4: usize,
        row: &str,
        rows: usize,
        stride: usize,
        g: &str,
        n: usize,
    ) -> String {
        let lanes = ["x", "y", "z", "w"];
        let mut lb = String::new();
        for c in 0..n {
            let _ = writeln!(
                lb,
                "            let {var}{c} = {};",
                self.at4(src, &format!("{g} * 4u + {c}u"), "sg")
            );
        }
        for t in 0..rows {
            let _ = writeln!(
                lb,
                "            let w{t} = wv[{}u + ({row} + {}u) * {}u + {g}];",
                block / 4,
                t * stride,
                row4 / 4
            );
            for (c, lane) in lanes.iter().enumerate().take(n) {
                let _ = writeln!(
                    lb,
                    "            c{t} = fma(vec4<f32>(w{t}.{lane}), {var}{c}, c{t});"
                );
            }
        }
        lb
    }

    /// vec4 path: dx = Wᵀ·dz (or += with `add`); an invocation computes `ti` inputs
    /// (strided) × 4 samples from the transposed weight copy; with `fused`, times the
    /// derivative of that layer's activation, in place over its activations. Ends with a
    /// barrier.
    fn vec_backward_dx(
        &mut self,
        lf: &LayerFwd,
        dz: View,
        dxv: View,
        add: bool,
        fused: Option<&LayerFwd>,
    ) {
        let l = lf.l;
        let vl = self.vec.as_ref().unwrap().layer(l.weight);
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        let sv = self.s / 4;
        let ti = self.vec_rows(i_n);
        let ig = i_n / ti;
        let lanes = ["x", "y", "z", "w"];
        let mut b = format!("        let ig = e / {sv}u; let sg = e % {sv}u;\n");
        for t in 0..ti {
            let _ = writeln!(b, "        var c{t} = vec4<f32>(0.0f);");
        }
        let body = |g: &str, n: usize| self.vec_matvec(dz, "d", vl.tr, vl.out4, "ig", ti, ig, g, n);
        b.push_str(&Self::groups4(o_n, body));
        for t in 0..ti {
            let j = format!("ig + {}u", t * ig);
            let dst = self.at4(dxv, &j, "sg");
            match fused {
                Some(below) if below.l.act != Activation::None => {
                    let zv = match below.z {
                        Some(z) => self.at4(z, &j, "sg"),
                        None => "vec4<f32>(0.0f)".into(),
                    };
                    let parts: Vec<String> = lanes
                        .iter()
                        .map(|lane| {
                            format!(
                                "{{ let z = zv.{lane}; let y = yv.{lane}; r.{lane} = c{t}.{lane} * {}; }}",
                                wgsl::act_derivative(below.l.act, "z", "y")
                            )
                        })
                        .collect();
                    let _ = writeln!(
                        b,
                        "        {{ let zv = {zv}; let yv = {}; var r = c{t};\n        {}\n        {dst} = r; }}",
                        self.at4(below.a, &j, "sg"),
                        parts.join(" ")
                    );
                }
                _ => {
                    let op = if add { "+=" } else { "=" };
                    let _ = writeln!(b, "        {dst} {op} c{t};");
                }
            }
        }
        self.items(ig * sv, &b);
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
        Fwd::Leaf { m, .. } => matches!(m, Module::Grid(_)),
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
    if has_params(&net.root) && !(g.fused && g.exp == "fwd") {
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
    sample_seed: u32,
    launch: Launch,
    coop: bool,
) -> String {
    step_kernel_scaled(net, loss, data, batch, sample_seed, launch, coop, coop)
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
    sample_seed: u32,
    launch: Launch,
    coop: bool,
    scaled: bool,
) -> String {
    let precision = if coop {
        Precision::Coop
    } else {
        Precision::F32
    };
    step_kernel_for(
        net,
        loss,
        data,
        batch,
        sample_seed,
        launch,
        precision,
        scaled,
    )
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
    sample_seed: u32,
    launch: Launch,
    precision: Precision,
    scaled: bool,
) -> String {
    step_kernel_with(
        net,
        loss,
        data,
        batch,
        sample_seed,
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
    sample_seed: u32,
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
        Some(pad) => pad.partial_len(net.dense_count),
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
    decls.push_str(&super::grid::step_decls_scaled(net, scaled));
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
    let step_struct = if scaled {
        "struct Step { step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32, poison: f32 }"
    } else {
        "struct Step { step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32 }"
    };
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
        init.push_str("    for (var e = lid; e < 256u; e += WG) { zero16[e] = 0.0f; }\n    workgroupBarrier();\n");
        let _ = nsg;
        for j in 0..g.dw_tiles {
            let _ = writeln!(
                init,
                "    var dws{j} = coopLoadT<coop_mat16x16<f32, C>>(&zero16[0], 16u);"
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
const SEED_H: u32 = {seed_h}u;

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
    let step_h = nsh_pcg_hash(st.step ^ SEED_H);
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
        seed_h = nshade_core::rng::pcg_hash(sample_seed),
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

/// The static loss scale: 1 on the f32 path; on the cooperative-matrix path the
/// per-sample gradients are scaled by the power of two nearest the batch (so f16 keeps
/// them in its normal range) and the Adam kernel divides it out exactly.
pub fn loss_scale(batch: u32, coop: bool) -> f32 {
    if coop {
        2f32.powi((batch.max(1) as f32).log2().round() as i32)
    } else {
        1.0
    }
}

/// Consecutive good steps after which the dynamic loss scale doubles.
pub const LOSS_SCALE_INTERVAL: u32 = 2000;
/// Smallest and largest dynamic loss scale (halving and doubling stop there).
pub const LOSS_SCALE_MIN: f32 = 1.0 / 65536.0;
pub const LOSS_SCALE_MAX: f32 = 18446744073709551616.0; // 2^64

/// Dynamic loss scaling: the loss gradient is multiplied by a scale S kept on the GPU;
/// a step whose gradients overflow is skipped and halves S, and `interval` consecutive
/// good steps double it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScale {
    /// S at the first step (a power of two keeps scaling exact).
    pub initial: f32,
    /// Consecutive good steps before S doubles.
    pub interval: u32,
}

impl LossScale {
    /// The default for a batch: S starts at the power of two nearest the batch (the
    /// per-sample gradients of the mean loss then sit in f16's normal range) and doubles
    /// after [`LOSS_SCALE_INTERVAL`] good steps.
    pub fn for_batch(batch: u32) -> LossScale {
        LossScale {
            initial: loss_scale(batch, true),
            interval: LOSS_SCALE_INTERVAL,
        }
    }
}

/// The reduction + Adam kernel's WGSL. `mode` 0 updates the weights; mode 1 only writes
/// the reduced gradient into `grads` (for tests). The cooperative-matrix path (`pad`)
/// uses dynamic loss scaling with the defaults of [`LossScale::for_batch`].
pub fn adam_kernel(
    param_count: usize,
    groups: u32,
    batch: u32,
    out_dims: usize,
    adam: nshade_core::optim::Adam,
    pad: Option<&Pad>,
    vpad: Option<&VecPad>,
) -> String {
    let scaling = pad.map(|_| LossScale::for_batch(batch));
    adam_kernel_scaled(
        param_count,
        groups,
        batch,
        out_dims,
        adam,
        pad,
        vpad,
        scaling,
    )
}

/// [`adam_kernel`] with dynamic loss scaling on (`scaling`) or off, whatever the path.
/// With it, every workgroup ORs the step kernel's per-group overflow flags (binding 9);
/// the gradient is divided by the step's scale S (state buffer, binding 8, slot of the
/// step's parity); on overflow the update is skipped (weights, moments and the weight
/// copies unchanged); the loss workgroup writes the step's decision for the table Adam
/// kernel and the next step's state into the other slot: S halved on overflow (at least
/// [`LOSS_SCALE_MIN`]) with the good-step count reset and the skipped count raised, else
/// the count raised and, when it reaches `interval`, S doubled (at most
/// [`LOSS_SCALE_MAX`]) and the count reset. Mode 1 (gradient only) writes the unscaled
/// gradient and leaves the state alone.
#[allow(clippy::too_many_arguments)]
pub fn adam_kernel_scaled(
    param_count: usize,
    groups: u32,
    batch: u32,
    out_dims: usize,
    adam: nshade_core::optim::Adam,
    pad: Option<&Pad>,
    vpad: Option<&VecPad>,
    scaling: Option<LossScale>,
) -> String {
    let p = param_count.max(1);
    let apw = adam_params();
    let npw = p.div_ceil(apw as usize);
    let inv = 1.0 / (batch as f64 * out_dims as f64);
    let (mut head, mut ppos, mut w16) = (String::new(), String::new(), String::new());
    let (stride, inv_ls) = match pad {
        Some(pad) => {
            head.push_str("enable f16;\n");
            ppos.push_str("fn ppos(p: u32) -> u32 {\n");
            for l in &pad.layers {
                let _ = writeln!(
                    ppos,
                    "    if (p >= {w}u && p < {e}u) {{ let q = p - {w}u; return {pw}u + (q / {i}u) * {ip}u + q % {i}u; }}",
                    w = l.weight,
                    e = l.weight + l.out_dims * l.in_dims,
                    pw = l.padded,
                    i = l.in_dims,
                    ip = l.in_p
                );
                let _ = writeln!(
                    ppos,
                    "    if (p >= {b}u && p < {e}u) {{ return {bp}u + p - {b}u; }}",
                    b = l.bias,
                    e = l.bias + l.out_dims,
                    bp = l.bias_p
                );
            }
            // every dense parameter is a weight or bias of a layer above; anything else
            // would read the scratch tile (in range)
            let _ = writeln!(ppos, "    return {}u;\n}}", pad.dummy(param_count));
            ppos.push_str("@group(0) @binding(7) var<storage, read_write> w16: array<f16>;\n");
            let _ = write!(
                w16,
                "            let pp = ppos(p);\n            if (pp < {}u) {{ w16[pp] = f16(params[p]); }}\n",
                pad.weights
            );
            (pad.partial_len(param_count), 1.0 / loss_scale(batch, true))
        }
        None => {
            if let Some(vp) = vpad {
                // the vec4 path's padded row-major and transposed f32 weight copies
                ppos.push_str("@group(0) @binding(7) var<storage, read_write> wv: array<f32>;\n");
                w16.push_str("            let wval = params[p];\n");
                for l in &vp.layers {
                    let _ = writeln!(
                        w16,
                        "            if (p >= {w}u && p < {e}u) {{ let q = p - {w}u; let o = q / {i}u; let i = q % {i}u; wv[{f}u + o * {i4}u + i] = wval; wv[{t}u + i * {o4}u + o] = wval; }}",
                        w = l.weight,
                        e = l.weight + l.out_dims * l.in_dims,
                        i = l.in_dims,
                        f = l.fwd,
                        i4 = l.in4,
                        t = l.tr,
                        o4 = l.out4
                    );
                }
            }
            (p, 1.0)
        }
    };
    let idx = if pad.is_some() { "ppos(p)" } else { "p" };
    let (mut ls_decl, mut ls_init, mut ls_next) = (String::new(), String::new(), String::new());
    let (mut inv_g, mut skip) = (lit(inv_ls), "");
    let mut step_struct =
        "struct Step { step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32 }";
    if let Some(ls) = scaling {
        step_struct = "struct Step { step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32, poison: f32 }";
        ls_decl = "@group(0) @binding(8) var<storage, read_write> ls: array<u32>;\n\
                   @group(0) @binding(9) var<storage, read> lsflags: array<u32>;\n\
                   var<workgroup> lsb: atomic<u32>;\n"
            .into();
        ls_init = format!(
            "    if (lid == 0u) {{ atomicStore(&lsb, 0u); }}\n    workgroupBarrier();\n\
             \x20   var fb = 0u;\n    for (var g = lid; g < G; g += {t}u) {{ fb |= lsflags[g]; }}\n\
             \x20   if (fb != 0u) {{ atomicOr(&lsb, 1u); }}\n    workgroupBarrier();\n\
             \x20   let bad = atomicLoad(&lsb) != 0u;\n\
             \x20   let lcur = (st.step & 1u) * 4u;\n    let inv_s = 1.0f / bitcast<f32>(ls[lcur]);\n",
            t = ADAM_THREADS
        );
        ls_next = format!(
            "        if (lid == 0u && st.mode != 2u) {{\n\
             \x20           ls[lcur + 3u] = select(0u, 1u, bad);\n\
             \x20       }}\n\
             \x20       if (lid == 0u && st.mode == 0u) {{\n\
             \x20           let lnext = 4u - lcur;\n\
             \x20           var sc = bitcast<f32>(ls[lcur]);\n\
             \x20           var good = ls[lcur + 1u];\n\
             \x20           var skipped = ls[lcur + 2u];\n\
             \x20           if (bad) {{\n\
             \x20               sc = max(sc * 0.5f, {min});\n\
             \x20               good = 0u;\n\
             \x20               skipped += 1u;\n\
             \x20           }} else {{\n\
             \x20               good += 1u;\n\
             \x20               if (good >= {n}u) {{ sc = min(sc * 2.0f, {max}); good = 0u; }}\n\
             \x20           }}\n\
             \x20           ls[lnext] = bitcast<u32>(sc);\n\
             \x20           ls[lnext + 1u] = good;\n\
             \x20           ls[lnext + 2u] = skipped;\n\
             \x20           ls[lnext + 3u] = 0u;\n\
             \x20       }}\n",
            min = lit(LOSS_SCALE_MIN),
            max = lit(LOSS_SCALE_MAX),
            n = ls.interval.max(1),
        );
        inv_g = "inv_s".into();
        skip = " if (!bad)";
    }
    // the group sums of slice gs (groups gs, gs + NS, … in that order), unrolled so
    // that the loads are independent and can all be in flight (the sum order is that
    // of the loop it replaces: a latency-bound chain of G/NS loads before)
    let ns = (ADAM_THREADS / apw) as usize;
    let mut gsum = String::new();
    for k in 0..(groups as usize) / ns {
        let _ = writeln!(
            gsum,
            "            g += partial[({}u + gs) * PS + pi];",
            k * ns
        );
    }
    if !(groups as usize).is_multiple_of(ns) {
        let _ = writeln!(
            gsum,
            "            {{ let w = {}u + gs; if (w < G) {{ g += partial[w * PS + pi]; }} }}",
            (groups as usize) / ns * ns
        );
    }
    format!(
        "{head}
const P: u32 = {p}u;
const PS: u32 = {stride}u;
const REAL_P: u32 = {param_count}u;
const G: u32 = {groups}u;
const NPW: u32 = {npw}u;
{step_struct}
@group(0) @binding(0) var<uniform> st: Step;
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read_write> moments: array<f32>;
@group(0) @binding(3) var<storage, read> partial: array<f32>;
@group(0) @binding(4) var<storage, read> loss_partial: array<f32>;
@group(0) @binding(5) var<storage, read_write> losses: array<f32>;
@group(0) @binding(6) var<storage, read_write> grads: array<f32>;
var<workgroup> red: array<f32, {t}>;
{ppos}{ls_decl}
@compute @workgroup_size({t})
fn nsh_adam(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
{ls_init}    if (wid.x == NPW) {{
        var s = 0.0f;
        for (var g = lid; g < G; g += {t}u) {{ s += loss_partial[g]; }}
        red[lid] = s;
        workgroupBarrier();
        for (var stride = {half}u; stride > 0u; stride >>= 1u) {{
            if (lid < stride) {{ red[lid] += red[lid + stride]; }}
            workgroupBarrier();
        }}
        if (lid == 0u) {{ losses[st.slot] = red[0] * {inv}; }}
{ls_next}    }} else {{
        let pl = lid % {pb}u; let gs = lid / {pb}u;
        let p = wid.x * {pb}u + pl;
        var g = 0.0f;
        if (p < REAL_P && st.mode != 2u) {{
            let pi = {idx};
{gsum}        }}
        red[lid] = g;
        workgroupBarrier();
        if (p < REAL_P && gs == 0u && st.mode == 2u) {{
{w16}        }} else if (p < REAL_P && gs == 0u) {{
            g = red[pl];
            for (var k = 1u; k < {ns}u; k++) {{ g += red[k * {pb}u + pl]; }}
            g = g * {inv_g};
            if (st.mode == 1u) {{
                grads[p] = g;
            }} else{skip} {{
                let m = {b1} * moments[p] + {omb1} * g;
                let v = {b2} * moments[P + p] + {omb2} * g * g;
                moments[p] = m;
                moments[P + p] = v;
                params[p] = params[p] - st.step_lr * m / (sqrt(v * st.inv_c2) + {eps});
{w16}            }}
        }}
    }}
}}
",
        t = ADAM_THREADS,
        half = ADAM_THREADS / 2,
        pb = apw,
        ns = ADAM_THREADS / apw,
        inv = lit(inv as f32),
        b1 = lit(adam.beta1),
        omb1 = lit(1.0 - adam.beta1),
        b2 = lit(adam.beta2),
        omb2 = lit(1.0 - adam.beta2),
        eps = lit(adam.epsilon),
    )
}
