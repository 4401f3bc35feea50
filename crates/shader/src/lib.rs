//! nshade inference-shader emission: a trained [`Model`] in, shader source out.
//!
//! Like naga's backends: one language-neutral walk of the model ([`ir::Program`]), then
//! one writer per target language. WGSL, GLSL (450 and ES 3.00, ShaderToy), HLSL and
//! Slang are written as text directly; MSL and SPIR-V are translated by naga from the
//! generated WGSL, which naga validates first.
//!
//! Architecture invariant: emission is pure — no GPU, no files, no printing.
//!
//! ```
//! use nshade_core::{Arch, Network, model::{InputSpec, Model}};
//! use nshade_shader::{Options, Target, export};
//! let net = Network::build(&Arch::parse("freq(2) | mlp(8x1, relu, sigmoid)").unwrap(), 2, 3).unwrap();
//! let params = net.init_params(1);
//! let model = Model::new(net, params, InputSpec::uv());
//! let src = export(&model, &Options::new(Target::Wgsl)).unwrap().into_text().unwrap();
//! assert!(src.contains("fn nshade_eval(p: vec2<f32>) -> vec3<f32>"));
//! ```

mod body;
pub mod coop;
mod coop_rows;
mod coop_slang;
mod coop_wide;
mod glsl;
mod header;

pub use header::comment_safe;
mod hlsl;
pub mod ir;
mod naga_out;
pub mod syntax;
pub mod wgsl;

use nshade_core::model::Model;
use std::fmt;

/// A shading language (and flavour) to emit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// WGSL (WebGPU, wgpu).
    Wgsl,
    /// GLSL 450 core, also valid Vulkan GLSL.
    Glsl,
    /// GLSL ES 3.00 (WebGL2).
    GlslEs,
    /// HLSL, shader model 5 and later.
    Hlsl,
    /// Slang.
    Slang,
    /// Metal Shading Language (translated by naga).
    Msl,
    /// SPIR-V binary (translated by naga), with a compute entry point.
    SpirV,
    /// A complete ShaderToy image tab (GLSL ES 3.00 `mainImage`, weights baked).
    ShaderToy,
}

impl Target {
    pub const ALL: [Target; 8] = [
        Target::Wgsl,
        Target::Glsl,
        Target::GlslEs,
        Target::Hlsl,
        Target::Slang,
        Target::Msl,
        Target::SpirV,
        Target::ShaderToy,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Target::Wgsl => "wgsl",
            Target::Glsl => "glsl",
            Target::GlslEs => "glsl-es",
            Target::Hlsl => "hlsl",
            Target::Slang => "slang",
            Target::Msl => "msl",
            Target::SpirV => "spirv",
            Target::ShaderToy => "shadertoy",
        }
    }

    /// The usual file extension.
    pub fn extension(self) -> &'static str {
        match self {
            Target::Wgsl => "wgsl",
            Target::Glsl => "glsl",
            Target::GlslEs => "glsl",
            Target::Hlsl => "hlsl",
            Target::Slang => "slang",
            Target::Msl => "metal",
            Target::SpirV => "spv",
            Target::ShaderToy => "glsl",
        }
    }

    pub fn from_name(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s)
    }

    /// Whether the target can compute in f16.
    pub fn supports_f16(self) -> bool {
        matches!(
            self,
            Target::Wgsl | Target::Hlsl | Target::Slang | Target::Msl | Target::SpirV
        )
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the weights live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightMode {
    /// Literals in the source.
    Baked,
    /// A read-only buffer holding the flat parameter vector in model order.
    Buffer,
}

/// The arithmetic precision inside the generated function. Its interface is f32 always.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    F16,
}

/// The shape of the generated code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// The function `{prefix}eval` (one sample, scalar code), plus the entry points the
    /// options ask for: every target, also fragment shaders; the portable form.
    Function,
    /// One compute kernel over tiles of rows: the encodings per row, every `mlp` layer
    /// as 16×16×16 cooperative-matrix products (f16 operands, f32 accumulators) with the
    /// weights staged once per workgroup ([`coop`]). WGSL (and naga's SPIR-V) only;
    /// needs f16 and cooperative matrices (tensor cores).
    CoopCompute,
    /// [`Form::CoopCompute`] with the tile products written as f16 multiply-add loops
    /// accumulated in f32: the same staging, tiles and epilogues without cooperative
    /// matrices, for any adapter with f16 (the numerical reference of the cooperative form).
    TiledCompute,
}

impl Form {
    pub const ALL: [Form; 3] = [Form::Function, Form::CoopCompute, Form::TiledCompute];

    /// The name used on the command line (`--form`).
    pub fn name(self) -> &'static str {
        match self {
            Form::Function => "function",
            Form::CoopCompute => "coop-compute",
            Form::TiledCompute => "tiled-compute",
        }
    }

    pub fn from_name(s: &str) -> Option<Form> {
        Form::ALL.into_iter().find(|f| f.name() == s)
    }

    /// One of the tiled compute kernels.
    pub fn is_tiled(self) -> bool {
        self != Form::Function
    }
}

impl fmt::Display for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What to emit.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub target: Target,
    /// The function (default) or a tiled compute kernel. The tiled forms read buffer
    /// weights (`weights` must be `Buffer`; `precision` picks the f32 or f16 parameter
    /// buffer of buffer mode, their arithmetic is f16 operands with f32 accumulation, or
    /// f16 in the GLSL subgroup kernel's hidden layers with `rows_acc16`).
    pub form: Form,
    /// The tiled forms: bytes of workgroup memory the kernel may declare (the device's
    /// `max_compute_workgroup_storage_size`); the largest row tile that fits is taken.
    /// Default [`coop::MAX_WORKGROUP_BYTES`].
    pub workgroup_memory: usize,
    pub weights: WeightMode,
    pub precision: Precision,
    /// Prefix of every global name (`nshade_` gives `nshade_eval`, `nshade_params`, ...).
    pub prefix: String,
    /// Also emit the full-screen vertex + fragment entry points (GLSL: a complete fragment shader).
    pub fragment: bool,
    /// Also emit the compute entry point `{prefix}main` (WGSL only; always in SPIR-V).
    pub compute: bool,
    /// Buffer mode: one loop per `mlp` layer instead of straight-line code. The code
    /// grows with the layer widths instead of the parameter count and compiles much
    /// faster for large networks; straight-line code keeps every value in a register.
    pub loops: bool,
    /// Descriptor set / bind group of every resource.
    pub group: u32,
    /// Binding of the parameter buffer; the view uniform is `binding + 1`, the compute
    /// entry's inputs and outputs `binding + 2` and `binding + 3`.
    pub binding: u32,
    /// Slang only: mark `{prefix}eval` `[Differentiable]`, so a shader can take
    /// `fwd_diff` / `bwd_diff` of the network with respect to its inputs (the weights are
    /// constants to Slang's autodiff: literals, or reads of the parameter buffer).
    pub differentiable: bool,
    /// Tiled compute forms, WGSL and SPIR-V, and the GLSL subgroup kernel (`texture2D`
    /// and an `rgba32f` `image2D`): rows come from the texels of a
    /// `texture_2d<f32>` (the first `in_dims` channels, row-major over the texture) and go
    /// to a `texture_storage_2d<rgba32float, write>` of the same size (the outputs in the
    /// first channels, then 0 and alpha 1) instead of storage buffers — a deferred
    /// neural pass over a G-buffer. At most 4 inputs and 4 outputs.
    pub texture_io: bool,
    /// `--target glsl --form coop-compute`: the subgroup-private kernel of `coop_rows`
    /// (epilogues in registers, no workgroup barrier after staging; what `nshade export`
    /// writes) in the first shape that fits, in an order measured per kind of network
    /// (grid tables, dense up to 32 wide, wider), with `None` (the default), or in this
    /// shape, (subgroups per workgroup, blocks of 16 rows per subgroup); `Some((0, 0))`
    /// asks for the shared-tile kernel of `coop`, which is also what is written where no
    /// shape fits the workgroup memory.
    pub rows_shape: Option<(usize, usize)>,
    /// With buffer weights (`--weights uniform`): the parameters in a uniform block of
    /// vec4<f32> (a constant buffer) instead of a storage buffer, read with constant
    /// indices where the code is straight-line. Dense networks of at most
    /// [`UNIFORM_MAX_PARAMS`] parameters; every target but glsl-es (whose buffer mode is
    /// a uniform block already) and shadertoy.
    pub uniform_weights: bool,
    /// WGSL, GLSL 450, HLSL and Slang with buffer weights (`--form function`; `nshade
    /// export --vec4-buffer`): the
    /// storage buffer declared as an array of 4-vectors of its element type, and each
    /// vector the straight-line code needs loaded once into a local whose components are
    /// the weights — one 16-byte (f32) or 8-byte (f16) load for four multiply-adds where
    /// the plain buffer issues a load per multiply-add. The bytes are the flat vector's,
    /// zero-padded to whole vectors. What `eval`/`render` run from the buffer; `nshade
    /// bench --inference` measures it (weights `buffer-vec4`); other targets refuse it.
    pub vec4_buffer: bool,
    /// `--target glsl --form coop-compute --precision f16` (an f16 parameter buffer): the
    /// subgroup-private kernel reads every layer it can (dimensions multiples of 16,
    /// weights 16-byte aligned) straight from the buffer, even where staging them would
    /// fit (by default only where it would not). For measurements.
    pub rows_direct: bool,
    /// The GLSL subgroup kernel with a part left out, to time its parts apart (`nshade
    /// bench --inference` with `NSHADE_ROWS_SPLIT`); anything but [`RowsSplit::Whole`]
    /// computes something other than the network.
    pub rows_split: RowsSplit,
    /// The GLSL subgroup kernel: hidden layers accumulate in f16 (`coopmat<float16_t>`
    /// accumulators, f16 biases, activations on f16 elements), the way tiny-cuda-nn's
    /// fully fused MLP does; the last layer still accumulates in f32. Fewer registers
    /// and instructions per element, at f16 rounding of every hidden dot product.
    pub rows_acc16: bool,
    /// The GLSL subgroup kernel: every weight matrix loaded once per subgroup into
    /// registers before the row loop, instead of once per block of rows (small networks
    /// only: 4 registers per lane per 16 x 16 block; `nshade export --coop-conversions`,
    /// `eval` and `bench` turn it on where `coop::hold_by_default` says). The
    /// staged rows are then unskewed (read once), and with `rows_convert` the last
    /// layer's outputs go over X's rows instead of a scratch of their own.
    pub rows_hold: bool,
    /// The GLSL subgroup kernel (`nshade export --coop-conversions`): each hidden layer's
    /// accumulators become the next layer's A matrices in registers
    /// (`GL_NV_cooperative_matrix2`'s conversions between uses, Vulkan
    /// `VK_NV_cooperative_matrix2` with `cooperativeMatrixConversions`) instead of going
    /// through workgroup memory and a subgroup barrier; X then holds only the mlp input.
    /// NVIDIA only; other kernels ignore it.
    pub rows_convert: bool,
    /// `--target glsl --form coop-compute`: the kernel of `coop_wide`, whose subgroups
    /// hold their blocks of every hidden layer's weights in registers for the whole
    /// dispatch and share each layer's rows through workgroup memory, where it fits
    /// (mlps with a hidden layer; otherwise the other kernels as without it). Without
    /// it, that kernel is still written for dense mlps at least 64 wide (where it was
    /// measured fastest) unless `rows_shape` asks for another. With it, `rows_shape`
    /// (for measurements) is this kernel's (subgroups, row blocks of 16 per subgroup of
    /// each 64-row tile): the subgroups sharing a row block's outputs are subgroups x
    /// blocks / 4.
    pub rows_stationary: bool,
    /// With `rows_stationary` (for measurements): that kernel's tiles of this many rows
    /// (32 or 64) instead of the planner's choice.
    pub held_rows: Option<usize>,
    /// How the GLSL subgroup kernel stages weights that it does not hold (for
    /// measurements): `None` the planner's choice ([`StagedLayout`]'s order).
    pub rows_layout: Option<StagedLayout>,
    /// The GLSL subgroup kernel with the conversions and two row blocks per subgroup:
    /// X holds both blocks' rows, not one block at a time (`TilePlan::x_one_block`).
    /// For measurements.
    pub rows_whole_x: bool,
    /// The GLSL subgroup kernel with the conversions and an f16 buffer: `Some(parts)`
    /// stages each layer's weights in turn per tile, in that many parts of its outputs
    /// (`TilePlan::streamed`, `TilePlan::stream_parts`), even where all of them fit
    /// staged at once (the planner streams only where they do not, in the parts it
    /// chooses). For measurements.
    pub rows_stream: Option<usize>,
    /// The GLSL subgroup kernel's X and staged weights as arrays of f16 (`Some(true)`;
    /// each row and weight chunk then stored 2 bytes at a time) or as uvec4s of 8 f16
    /// (`Some(false)`); by default (`None`) f16 arrays where the weights are held in
    /// registers (X alone is stored per tile: seed #3 40.8 G against 39.8 G on the H200),
    /// uvec4s otherwise (staged and streamed weights: 2.5-5% faster). For measurements.
    pub rows_narrow: Option<bool>,
    /// `--target glsl --form coop-compute --precision f16`: the subgroup kernel reads
    /// every weight matrix straight from a second buffer in the cooperative matrices'
    /// own register layout (each lane's 8 f16 of a 16 x 16 B matrix as one 16-byte
    /// load, tiny-cuda-nn's "native" layout), which a separate pack kernel
    /// ([`coop::pack_kernel`]) writes once from the parameter buffer on the device that
    /// runs it; nothing is staged in workgroup memory but the biases and X.
    pub rows_native: bool,
    /// `--form function` in WGSL, SPIR-V, MSL and GLSL 450 (`nshade export --points N`):
    /// the function evaluates this many points at once (1, 2 or 4), `{prefix}eval{N}(p:
    /// array<IN, N>) -> array<OUT, N>` (GLSL `OUT[N] {prefix}evalN(IN p[N])`), each value
    /// a vector of the points so that every weight is read once for N multiply-adds (and
    /// at f16 two points share a packed instruction); the compute entry evaluates N
    /// consecutive rows per invocation.
    /// Networks without grid tables; no fragment entry (a fragment is one point).
    pub points: usize,
}

/// How the GLSL subgroup kernel lays out its staged weights in workgroup memory
/// (`Options::rows_layout`); the planner tries them in this order, the first that fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedLayout {
    /// Consecutive layers with the same padded outputs side by side in shared rows,
    /// skewed by 8 f16 once per row: as conflict-free as skewed rows, smaller.
    Packed,
    /// Each layer's rows of `in_p + 8` f16 (skewed: no bank conflicts).
    Rows,
    /// 16 x 16 blocks of 512 contiguous bytes: the size of unskewed rows, with 2-way
    /// conflicts on loads (unskewed rows have 8-way ones).
    Blocked,
}

impl StagedLayout {
    /// `packed`, `rows` or `blocked`.
    pub fn parse(s: &str) -> Option<StagedLayout> {
        match s {
            "packed" => Some(StagedLayout::Packed),
            "rows" => Some(StagedLayout::Rows),
            "blocked" => Some(StagedLayout::Blocked),
            _ => None,
        }
    }
}

/// Measurement variants of the GLSL subgroup kernel (`Options::rows_split`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowsSplit {
    /// The kernel (what `export` writes).
    Whole,
    /// Read the inputs, encode them, store the mlp input, and write its first columns as
    /// the outputs: no layers.
    EncodeOnly,
    /// The layers on a constant mlp input: no input reads, no encoding.
    NoEncode,
    /// Everything but the activations applied to the accumulators' elements.
    NoActivation,
    /// Each layer loads one weight matrix and uses it for all its products: what the
    /// weight loads cost.
    OneWeight,
    /// The accumulators start at zero instead of loading the biases: what the bias
    /// loads cost.
    NoBias,
}

impl RowsSplit {
    /// `whole`, `encode`, `noencode`, `noact`, `oneweight`, `nobias`.
    pub fn parse(s: &str) -> Option<RowsSplit> {
        match s {
            "whole" => Some(RowsSplit::Whole),
            "encode" => Some(RowsSplit::EncodeOnly),
            "noencode" => Some(RowsSplit::NoEncode),
            "noact" => Some(RowsSplit::NoActivation),
            "oneweight" => Some(RowsSplit::OneWeight),
            "nobias" => Some(RowsSplit::NoBias),
            _ => None,
        }
    }
}

impl Options {
    pub fn new(target: Target) -> Options {
        Options {
            target,
            form: Form::Function,
            workgroup_memory: coop::MAX_WORKGROUP_BYTES,
            weights: WeightMode::Baked,
            precision: Precision::F32,
            prefix: "nshade_".into(),
            fragment: false,
            compute: false,
            loops: false,
            group: 0,
            binding: 0,
            differentiable: false,
            texture_io: false,
            rows_shape: None,
            uniform_weights: false,
            vec4_buffer: false,
            rows_direct: false,
            rows_split: RowsSplit::Whole,
            rows_acc16: false,
            rows_hold: false,
            rows_convert: false,
            rows_stationary: false,
            held_rows: None,
            rows_layout: None,
            rows_whole_x: false,
            rows_stream: None,
            rows_narrow: None,
            rows_native: false,
            points: 1,
        }
    }

    /// The element type of the parameter buffer in buffer mode: f16 where the target
    /// computes in f16 and can store it (WGSL, Slang, MSL, SPIR-V), else f32.
    pub fn buffer_is_f16(&self) -> bool {
        self.precision == Precision::F16 && self.target != Target::Hlsl && !self.uniform_weights
    }
}

/// Why a model cannot be exported with the given options.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("target {target} does not support {what}")]
    Unsupported { target: Target, what: String },
    #[error("the model cannot be exported: {0}")]
    Model(String),
    #[error("invalid option: {0}")]
    Option(String),
    #[error("naga rejected the generated WGSL (a bug in nshade-shader): {0}")]
    NagaValidation(String),
    #[error("naga could not translate to {target}: {message}")]
    Translate { target: Target, message: String },
}

/// Generated shader: text, or a SPIR-V binary.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Text(String),
    Binary(Vec<u8>),
}

impl Output {
    pub fn into_text(self) -> Option<String> {
        match self {
            Output::Text(s) => Some(s),
            Output::Binary(_) => None,
        }
    }
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Output::Text(s) => s.as_bytes(),
            Output::Binary(b) => b,
        }
    }
}

/// Emits the inference shader of `model`.
pub fn export(model: &Model, opts: &Options) -> Result<Output, Error> {
    check(model, opts)?;
    let program = ir::Program::lower(model);
    if opts.form.is_tiled() {
        let text = coop::write_string(model, &program, opts)?;
        if opts.target == Target::SpirV {
            return naga_out::tiled_spirv(&text, opts.form).map(Output::Binary);
        }
        return Ok(Output::Text(text));
    }
    let text = match opts.target {
        Target::Wgsl => wgsl::write_string(model, &program, opts)?,
        Target::Glsl | Target::GlslEs | Target::ShaderToy => {
            glsl::write_string(model, &program, opts)?
        }
        Target::Hlsl | Target::Slang => hlsl::write_string(model, &program, opts)?,
        Target::Msl => naga_out::write_msl(model, &program, opts)?,
        Target::SpirV => return naga_out::write_spirv(model, &program, opts).map(Output::Binary),
    };
    Ok(Output::Text(text))
}

/// The bytes of the parameter buffer that buffer-mode shaders for `opts` read: the flat
/// parameter vector in model order, little-endian f32 (f16 where
/// [`Options::buffer_is_f16`]); zero-padded to whole 4-vectors for a uniform block or a
/// buffer of 4-vectors, else no padding.
pub fn pack_weights(model: &Model, opts: &Options) -> Vec<u8> {
    let mut v: Vec<u8> = if opts.buffer_is_f16() {
        model
            .params
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect()
    } else {
        model.params.iter().flat_map(|v| v.to_le_bytes()).collect()
    };
    if opts.uniform_weights || opts.vec4_buffer {
        // whole 4-vectors of the element type: the last one zero-padded
        let elem = if opts.buffer_is_f16() { 2 } else { 4 };
        v.resize(model.params.len().div_ceil(4) * 4 * elem, 0);
    }
    v
}

/// Largest parameter count of `--weights uniform`: 64 KiB of f32, the uniform block size
/// Vulkan, Metal and D3D guarantee (wgpu's default `max_uniform_buffer_binding_size`).
pub const UNIFORM_MAX_PARAMS: usize = 65536 / 4;

/// Whether `--weights uniform` can hold `model`: a dense network (no grid tables) of at
/// most [`UNIFORM_MAX_PARAMS`] parameters.
pub fn uniform_holds(model: &Model) -> bool {
    model.network.param_count == model.network.dense_count
        && model.params.len() <= UNIFORM_MAX_PARAMS
}

/// Largest parameter count a GLSL ES 3.00 buffer-mode shader can hold: WebGL2 guarantees
/// uniform blocks of 16 KiB.
pub const GLSL_ES_MAX_BUFFER_PARAMS: usize = 16384 / 4;

/// Largest number of grid-table parameters baked into the source as a constant array
/// (64 KiB of f32): larger tables make huge sources that drivers compile slowly, if at
/// all; they need `--weights buffer`.
pub const MAX_BAKED_TABLE_PARAMS: usize = 16384;

/// Whether `model`'s parameters can be baked into source: its grid tables hold at most
/// [`MAX_BAKED_TABLE_PARAMS`] values.
pub fn bakeable(model: &Model) -> bool {
    model.network.param_count - model.network.dense_count <= MAX_BAKED_TABLE_PARAMS
}

fn check(model: &Model, opts: &Options) -> Result<(), Error> {
    let tables = model.network.param_count - model.network.dense_count;
    if opts.weights == WeightMode::Baked && !bakeable(model) {
        let hint = if opts.target == Target::ShaderToy {
            "a ShaderToy tab can only bake them; use a smaller grid"
        } else {
            "use --weights buffer"
        };
        return Err(Error::Model(format!(
            "its grid tables hold {tables} parameters, more than the {MAX_BAKED_TABLE_PARAMS} that baked weights allow ({hint})"
        )));
    }
    let t = opts.target;
    let unsupported = |what: &str| {
        Err(Error::Unsupported {
            target: t,
            what: what.into(),
        })
    };
    check_prefix(&opts.prefix)?;
    if opts.differentiable && t != Target::Slang {
        return unsupported(
            "--differentiable (automatic differentiation is Slang's: use --target slang)",
        );
    }
    if opts.binding > MAX_BINDING {
        return Err(Error::Option(format!(
            "binding {} is too large: the resources take bindings binding..=binding + 3, so it may be at most {MAX_BINDING}",
            opts.binding
        )));
    }
    if opts.rows_split != RowsSplit::Whole && (t != Target::Glsl || opts.form != Form::CoopCompute)
    {
        return Err(Error::Option(
            "the measurement variants belong to the GLSL coop-compute kernel".into(),
        ));
    }
    if (opts.rows_acc16 || opts.rows_hold || opts.rows_stationary || opts.rows_convert)
        && (t != Target::Glsl || opts.form != Form::CoopCompute)
    {
        return Err(Error::Option(
            "f16 accumulation, held weights and cooperative-matrix conversions belong to --target glsl --form coop-compute".into(),
        ));
    }
    if opts.rows_native
        && (t != Target::Glsl || opts.form != Form::CoopCompute || opts.precision != Precision::F16)
    {
        return Err(Error::Option(
            "native weights (--native-weights) belong to --target glsl --form coop-compute with an f16 parameter buffer".into(),
        ));
    }
    if opts.rows_direct
        && (t != Target::Glsl || opts.form != Form::CoopCompute || opts.precision != Precision::F16)
    {
        return Err(Error::Option(
            "reading the weights in place belongs to --target glsl --form coop-compute --precision f16".into(),
        ));
    }
    // GLSL's tiled forms take an f16 parameter buffer (they compute with f16 operands
    // whatever the buffer holds).
    if opts.precision == Precision::F16
        && !t.supports_f16()
        && !(t == Target::Glsl && opts.form.is_tiled())
    {
        return unsupported("f16 precision (use --precision f32)");
    }
    if opts.vec4_buffer
        && (!matches!(
            t,
            Target::Wgsl | Target::Glsl | Target::Hlsl | Target::Slang
        ) || opts.weights != WeightMode::Buffer
            || opts.form.is_tiled()
            || opts.uniform_weights)
    {
        return Err(Error::Option(
            "a buffer of 4-vectors belongs to --target wgsl, glsl, hlsl or slang with --form function --weights buffer"
                .into(),
        ));
    }
    if opts.points != 1 {
        if !matches!(opts.points, 2 | 4) {
            return Err(Error::Option(format!(
                "--points {} is not 1, 2 or 4",
                opts.points
            )));
        }
        if !matches!(t, Target::Wgsl | Target::SpirV | Target::Msl | Target::Glsl)
            || opts.form.is_tiled()
        {
            return unsupported(
                "--points (points at once belong to --form function in wgsl, spirv, msl and glsl)",
            );
        }
        if opts.fragment {
            return Err(Error::Option(
                "--points with a fragment entry (a fragment evaluates one point)".into(),
            ));
        }
        if model.network.param_count > model.network.dense_count {
            return Err(Error::Model(
                "it has grid tables, whose lookups are per point (use --points 1)".into(),
            ));
        }
    }
    if opts.uniform_weights {
        if opts.weights != WeightMode::Buffer || opts.form.is_tiled() {
            return Err(Error::Option(
                "--weights uniform belongs to --form function (the tiled forms stage their weights from a storage buffer)".into(),
            ));
        }
        if matches!(t, Target::GlslEs | Target::ShaderToy) {
            return unsupported(
                "--weights uniform (glsl-es reads a uniform block with --weights buffer; a ShaderToy tab has no buffers)",
            );
        }
        if model.network.param_count > model.network.dense_count {
            return Err(Error::Model(
                "it has grid tables, which a uniform block cannot hold (use --weights buffer)"
                    .into(),
            ));
        }
        if model.params.len() > UNIFORM_MAX_PARAMS {
            return Err(Error::Model(format!(
                "it has {} parameters, and a uniform block holds at most {UNIFORM_MAX_PARAMS} (64 KiB); use --weights buffer",
                model.params.len()
            )));
        }
    }
    if t == Target::ShaderToy && opts.weights == WeightMode::Buffer {
        return unsupported("buffer weights (a ShaderToy tab has no buffers; use --weights baked)");
    }
    if opts.loops && opts.weights != WeightMode::Buffer {
        return Err(Error::Option(
            "loops need buffer weights (baked weights are literals, which a loop cannot index)"
                .into(),
        ));
    }
    if opts.form.is_tiled() {
        let slang_coop = t == Target::Slang && opts.form == Form::CoopCompute;
        if !matches!(t, Target::Wgsl | Target::SpirV | Target::Glsl) && !slang_coop {
            return unsupported(&format!(
                "--form {} (wgsl, spirv and glsl have it, slang --form coop-compute; the other targets have --form function)",
                opts.form
            ));
        }
        if opts.weights != WeightMode::Buffer {
            return Err(Error::Option(format!(
                "--form {} stages its weights from the parameter buffer: it needs --weights buffer",
                opts.form
            )));
        }
        if opts.fragment || opts.loops {
            return Err(Error::Option(format!(
                "--form {} is a compute kernel: --fragment and --loops belong to --form function",
                opts.form
            )));
        }
        coop::plan_for(model, opts)?;
    }
    if opts.texture_io {
        let glsl_coop = t == Target::Glsl && opts.form == Form::CoopCompute;
        if !glsl_coop && (!opts.form.is_tiled() || !matches!(t, Target::Wgsl | Target::SpirV)) {
            return Err(Error::Option(
                "texture input and output belong to the tiled compute forms in wgsl and spirv (--form coop-compute or tiled-compute) and to --target glsl --form coop-compute".into(),
            ));
        }
        let (i, o) = (model.network.in_dims, model.network.out_dims);
        if !(1..=4).contains(&i) || !(1..=4).contains(&o) {
            return Err(Error::Model(format!(
                "it has {i} inputs and {o} outputs; texture input and output carry 1 to 4 channels each"
            )));
        }
    }
    if opts.compute && !matches!(t, Target::Wgsl | Target::SpirV) {
        return unsupported("the compute entry point (only wgsl and spirv have one)");
    }
    if t == Target::GlslEs
        && opts.weights == WeightMode::Buffer
        && model.params.len() > GLSL_ES_MAX_BUFFER_PARAMS
    {
        return unsupported(&format!(
            "buffer weights for {} parameters: WebGL2 guarantees uniform blocks of {GLSL_ES_MAX_BUFFER_PARAMS} floats (use --weights baked)",
            model.params.len()
        ));
    }
    let (i, o) = (model.network.in_dims, model.network.out_dims);
    if opts.form.is_tiled() && (1..=4).contains(&i) {
        // outputs go to a flat array: any number
    } else if !(1..=4).contains(&i) || !(1..=4).contains(&o) {
        return Err(Error::Model(format!(
            "it has {i} inputs and {o} outputs; the generated function takes and returns vectors of 1 to 4 values"
        )));
    }
    if (opts.fragment || t == Target::ShaderToy) && (o != 3 || !(2..=3).contains(&i)) {
        return unsupported(&format!(
            "a full-screen entry point for a model with {i} inputs and {o} outputs (it needs 2 (u, v) or 3 (x, y, t) inputs and 3 outputs)"
        ));
    }
    if let Some(k) = model.params.iter().position(|v| !v.is_finite()) {
        return Err(Error::Model(format!("parameter {k} is not finite")));
    }
    if opts.precision == Precision::F16
        && let Some(k) = model
            .params
            .iter()
            .position(|v| half::f16::from_f32(*v).is_infinite())
    {
        return Err(Error::Model(format!(
            "parameter {k} is {}, outside the f16 range of +-65504 (use --precision f32)",
            model.params[k]
        )));
    }
    for (k, v) in model
        .inputs
        .scale
        .iter()
        .chain(&model.inputs.offset)
        .enumerate()
    {
        if !v.is_finite() {
            return Err(Error::Model(format!(
                "input mapping value {k} (scale then offset) is not finite"
            )));
        }
    }
    Ok(())
}

/// Largest [`Options::binding`]: the resources take `binding..=binding + 3`.
pub const MAX_BINDING: u32 = u32::MAX - 3;

/// Longest [`Options::prefix`], in characters.
pub const MAX_PREFIX_LEN: usize = 32;

/// Checks an identifier prefix ([`Options::prefix`]): 1 to [`MAX_PREFIX_LEN`] ASCII
/// letters, digits and single underscores, not starting with a digit or `gl_`, so that
/// every name made from it is an identifier in every target language. [`export`] checks
/// it; callers may check a prefix early with this.
pub fn check_prefix(p: &str) -> Result<(), Error> {
    if p.is_empty() {
        return Err(Error::Option("the prefix must not be empty".into()));
    }
    let ok = p.len() <= MAX_PREFIX_LEN
        && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !p.starts_with(|c: char| c.is_ascii_digit())
        && !p.starts_with("gl_")
        && !p.contains("__");
    if !ok {
        return Err(Error::Option(format!(
            "prefix '{}' must be 1 to {MAX_PREFIX_LEN} letters, digits and single underscores, not start with a digit or gl_",
            nshade_core::limits::quote(p)
        )));
    }
    Ok(())
}

/// Parses and validates WGSL with naga (f16 allowed): what every generated WGSL passes.
pub fn validate_wgsl(src: &str) -> Result<(), Error> {
    naga_out::parse_and_validate(src, true).map(|_| ())
}

/// Parses and validates WGSL with naga, f16 and cooperative matrices allowed: what the
/// tiled compute forms pass.
pub fn validate_coop_wgsl(src: &str) -> Result<(), Error> {
    naga_out::parse_and_validate_with(src, naga_out::coop_capabilities()).map(|_| ())
}
