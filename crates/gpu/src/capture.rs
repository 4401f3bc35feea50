//! Headless capture of a real fragment shader into a seed-002 dataset (`nshade capture`).
//!
//! This follows `ShaderTraining.capture` of the seed (ShaderTraining.kt) step by step:
//!
//! * training frame `f` of `n` sits at `fraction = f / (n − 1)`, validation frame `f` of `n`
//!   at `(f + 0.381966) / n`, so validation uses parameter slices that training never saw;
//! * `t = fraction·2 − 1` is stored in the rows and `parameter = start + fraction·(end − start)`
//!   is what the shader sees (all f32 arithmetic, in the Kotlin's order);
//! * each frame is rendered into an RGBA32F target and read back; under the seed's strict
//!   semantics every value must be finite and every alpha within 0.001 of 1, under display
//!   semantics ([`OutputSemantics::Display`], what ShaderToy shows) alpha is ignored and
//!   colours become what a UNORM display target stores (NaN → 0, clamped to [0, 1]);
//! * `pixels_per_frame` pixels are drawn per frame from one `java.util.Random(seed)` shared by
//!   all frames of both splits (training first), `x = nextInt(width)` before
//!   `y = nextInt(height)`, so the same seed picks the same pixels as the Kotlin code;
//! * a row is `((x + .5)/w·2 − 1, (y + .5)/h·2 − 1, t, r, g, b)`, y down (row 0 of the image
//!   is the top).
//!
//! Sources ([`SourceKind`]): WGSL with a documented entry point and uniform block, and
//! ShaderToy-style GLSL (`mainImage`) wrapped into a fragment shader with every ShaderToy
//! input ([`shadertoy`]) and compiled by glslang into SPIR-V ([`glslang`]), which naga
//! translates (or, where naga cannot, wgpu loads unchanged).
//! `docs/capture.md` documents both interfaces.
//!
//! [`ShaderRenderer`] is usable on its own: it renders one frame at a parameter into an RGB
//! image ([`ShaderRenderer::render_rgb`]) and times frames with timestamp queries
//! ([`ShaderRenderer::time_frames`]), for `distill`'s cost comparison.

use crate::context::GpuContext;
use nshade_core::dataset::{
    DatasetError, DatasetMeta, InputColumn, OutputColumn, Schema2Meta, SplitData, write_dataset,
    write_dataset_v2,
};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::path::Path;

/// The render target format: linear, unclamped, 32-bit float per channel.
pub const TARGET_FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba32Float;

/// The validation offset of the seed: validation frame `f` sits at `(f + 0.381966) / n`.
pub const VALIDATION_OFFSET: f32 = 0.381966;

/// The full-screen-triangle vertex shader that every capture uses.
pub const VERTEX_WGSL: &str =
    "// nshade capture: full-screen triangle (vertex 0 (-1,-1), 1 (3,-1), 2 (-1,3)).
@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let x = f32(i32(i & 1u) * 4 - 1);
    let y = f32(i32(i >> 1u) * 4 - 1);
    return vec4<f32>(x, y, 0.0, 1.0);
}
";

#[cfg(feature = "glslang")]
pub mod glslang;
pub mod shadertoy;

pub use shadertoy::{
    Dialect, DisplayStats, EPILOGUE as SHADERTOY_EPILOGUE, PRELUDE as SHADERTOY_PRELUDE,
};

/// The largest shader source read (ShaderToy tabs are at most tens of kB).
pub const MAX_SOURCE_BYTES: usize = 4 << 20;

/// The most rows one capture may hold (both splits; 1.5 GiB of row data).
pub const MAX_CAPTURE_ROWS: u64 = 1 << 26;

/// Size in bytes of the uniform buffer bound at group 0, binding 0: the ShaderToy block
/// (208 bytes) fits; the WGSL `Params` block uses its first 16 bytes.
const UNIFORM_BYTES: u64 = 256;

/// The largest uniform block a WGSL source may declare at group 0, binding 0: `Params`
/// with its `values: array<vec4<f32>, 4>` (docs/capture.md).
const WGSL_UNIFORM_LIMIT: u64 = 80;

/// Most parameters one capture varies (`Params.values` holds 16).
pub const MAX_PARAMETERS: usize = 16;

/// The ShaderToy inputs a parameter may drive, by name.
pub const SHADERTOY_PARAMETERS: &[&str] =
    &["iTime", "iMouse.x", "iMouse.y", "iMouse.z", "iMouse.w"];

/// One parameter a capture varies: its name (a dataset column) and its range.
#[derive(Clone, Debug, PartialEq)]
pub struct Parameter {
    pub name: String,
    pub range: [f32; 2],
}

impl Parameter {
    pub fn new(name: &str, range: [f32; 2]) -> Parameter {
        Parameter {
            name: name.into(),
            range,
        }
    }
}

/// Where a parameter reaches the shader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// WGSL: `params.values[i / 4][i % 4]` (the first one is also `params.parameter`).
    Wgsl(usize),
    /// ShaderToy `iTime` (and what follows from it: `iFrame`, `iDate.w`, `iGlobalTime`).
    Time,
    /// ShaderToy `iMouse` component 0..3 (`x`, `y`, `z`, `w`).
    Mouse(usize),
}

impl Slot {
    /// Where the parameters named `names` go for a `kind` source: WGSL by position,
    /// ShaderToy by name ([`SHADERTOY_PARAMETERS`]).
    pub fn for_names(kind: SourceKind, names: &[&str]) -> Result<Vec<Slot>, CaptureError> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| match kind {
                SourceKind::Wgsl => Ok(Slot::Wgsl(i)),
                SourceKind::ShaderToyGlsl => match *n {
                    "iTime" => Ok(Slot::Time),
                    "iMouse.x" => Ok(Slot::Mouse(0)),
                    "iMouse.y" => Ok(Slot::Mouse(1)),
                    "iMouse.z" => Ok(Slot::Mouse(2)),
                    "iMouse.w" => Ok(Slot::Mouse(3)),
                    other => Err(CaptureError::Settings(format!(
                        "parameter '{other}': a ShaderToy tab's parameters are named after the inputs they drive: {}",
                        SHADERTOY_PARAMETERS.join(", ")
                    ))),
                },
            })
            .collect()
    }

    /// How the shader reads it (recorded in `dataset.json`).
    pub fn describe(self) -> String {
        match self {
            Slot::Wgsl(0) => "params.values[0].x (also params.parameter)".into(),
            Slot::Wgsl(i) => format!("params.values[{}].{}", i / 4, ["x", "y", "z", "w"][i % 4]),
            Slot::Time => "iTime (iFrame, iDate.w and iGlobalTime follow it)".into(),
            Slot::Mouse(k) => format!("iMouse.{}", ["x", "y", "z", "w"][k]),
        }
    }
}

/// What the training target is: the seed's contract or what ShaderToy shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputSemantics {
    /// The seed's contract (`--strict`): every value finite, alpha within 0.001 of 1,
    /// colours kept as rendered (HDR, unclamped). The default for WGSL.
    Strict,
    /// What a ShaderToy canvas shows (`--display`): alpha ignored, NaN → 0, +Inf → 1,
    /// −Inf → 0, every value clamped to [0, 1]; replaced values are counted, and a frame
    /// with more than half its pixels non-finite is refused. The default for GLSL tabs.
    Display,
}

impl OutputSemantics {
    /// `.wgsl` → strict, ShaderToy GLSL → display.
    pub fn default_for(kind: SourceKind) -> OutputSemantics {
        match kind {
            SourceKind::Wgsl => OutputSemantics::Strict,
            SourceKind::ShaderToyGlsl => OutputSemantics::Display,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OutputSemantics::Strict => "strict",
            OutputSemantics::Display => "display",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{0}")]
    Settings(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{name}: {message}")]
    Compile { name: String, message: String },
    #[error(
        "the shader produced NaN/Inf at parameter {parameter} ({split} frame {frame}, pixel x={x} y={y}, channel {channel})"
    )]
    NonFinite {
        parameter: f32,
        split: &'static str,
        frame: u32,
        x: u32,
        y: u32,
        channel: &'static str,
    },
    #[error(
        "the shader's output is not opaque at parameter {parameter} ({split} frame {frame}, pixel x={x} y={y}: alpha {alpha}); the learned RGB model requires alpha within 0.001 of 1 everywhere"
    )]
    NotOpaque {
        parameter: f32,
        split: &'static str,
        frame: u32,
        x: u32,
        y: u32,
        alpha: f32,
    },
    #[error(
        "the shader produced NaN/Inf in {pixels} of {total} pixels at parameter {parameter} ({split} frame {frame}); display capture refuses a frame when more than half its pixels are NaN/Inf"
    )]
    MostlyInvalid {
        parameter: f32,
        split: &'static str,
        frame: u32,
        pixels: u64,
        total: u64,
    },
    #[error("GPU: {0}")]
    Gpu(String),
    #[error(transparent)]
    Dataset(#[from] DatasetError),
}

/// The two source languages capture accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// WGSL: `@fragment fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32>`
    /// with `Params { resolution: vec2<f32>, parameter: f32 }` at `@group(0) @binding(0)`.
    Wgsl,
    /// ShaderToy-style GLSL: `void mainImage(out vec4 fragColor, in vec2 fragCoord)` with
    /// `iResolution` and `iTime` (= the parameter).
    ShaderToyGlsl,
}

impl SourceKind {
    /// From a file name: `.wgsl` → WGSL; `.glsl`, `.frag`, `.fs` → ShaderToy GLSL.
    pub fn from_path(path: &Path) -> Option<SourceKind> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "wgsl" => Some(SourceKind::Wgsl),
            "glsl" | "frag" | "fs" => Some(SourceKind::ShaderToyGlsl),
            _ => None,
        }
    }

    /// The manifest's `sourceKind`.
    pub fn manifest_name(self) -> &'static str {
        match self {
            SourceKind::Wgsl => "wgsl-fragment",
            SourceKind::ShaderToyGlsl => "shadertoy-glsl",
        }
    }

    /// The parameter range used when none is given: the seed's -1..1 for WGSL, 0..2 for
    /// ShaderToy tabs (ShaderToy starts `iTime` at 0; tabs fade in from it and loops
    /// bounded by `min(iFrame, 0)` misbehave for negative frames).
    pub fn default_parameter_range(self) -> (f32, f32) {
        match self {
            SourceKind::Wgsl => (-1.0, 1.0),
            SourceKind::ShaderToyGlsl => (0.0, 2.0),
        }
    }

    /// The name of the verbatim copy beside the dataset.
    pub fn copy_name(self) -> &'static str {
        match self {
            SourceKind::Wgsl => "source.wgsl",
            SourceKind::ShaderToyGlsl => "source.glsl",
        }
    }
}

/// A fragment shader to capture: its kind, its bytes exactly as read, and a name for
/// messages (usually the file path).
#[derive(Clone, Debug)]
pub struct ShaderSource {
    pub kind: SourceKind,
    pub name: String,
    pub bytes: Vec<u8>,
}

impl ShaderSource {
    /// Reads a shader file; the kind comes from the extension.
    pub fn from_file(path: &Path) -> Result<ShaderSource, CaptureError> {
        let name = path.display().to_string();
        let kind = SourceKind::from_path(path).ok_or_else(|| {
            CaptureError::Settings(format!(
                "{name}: unknown shader kind (use .wgsl for WGSL or .glsl/.frag for ShaderToy-style GLSL)"
            ))
        })?;
        let read_err = |e| CaptureError::Read {
            path: name.clone(),
            source: e,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(file, MAX_SOURCE_BYTES as u64 + 1),
            &mut bytes,
        )
        .map_err(read_err)?;
        let source = ShaderSource { kind, name, bytes };
        source.check_size()?;
        Ok(source)
    }

    pub fn new(kind: SourceKind, name: &str, text: &str) -> ShaderSource {
        ShaderSource {
            kind,
            name: name.to_string(),
            bytes: text.as_bytes().to_vec(),
        }
    }

    /// `sourceShaderDigest`: lowercase hex sha256 of the source file's bytes exactly as read
    /// (no wrapper, no vertex shader, no normalisation of line endings).
    pub fn digest(&self) -> String {
        hex(&Sha256::digest(&self.bytes))
    }

    /// A one-line compile error about this source.
    fn compile_error(&self, message: String) -> CaptureError {
        CaptureError::Compile {
            name: self.name.clone(),
            message: one_line(&message),
        }
    }

    fn check_size(&self) -> Result<(), CaptureError> {
        if self.bytes.len() > MAX_SOURCE_BYTES {
            return Err(CaptureError::Compile {
                name: self.name.clone(),
                message: format!(
                    "larger than {} MiB; a shader source is at most that",
                    MAX_SOURCE_BYTES >> 20
                ),
            });
        }
        Ok(())
    }

    fn text(&self) -> Result<&str, CaptureError> {
        self.check_size()?;
        std::str::from_utf8(&self.bytes).map_err(|e| CaptureError::Compile {
            name: self.name.clone(),
            message: format!("not UTF-8 text ({e})"),
        })
    }

    /// The complete GLSL 450 fragment shader compiled for a ShaderToy source: the prelude,
    /// the user's source with what the wrapper provides blanked out
    /// ([`shadertoy::prepare`]: same length, same lines), and the epilogue.
    pub fn wrapped_glsl(&self) -> Result<String, CaptureError> {
        self.wrapped_glsl_as(Dialect::Glsl450)
    }

    /// [`ShaderSource::wrapped_glsl`] in `dialect` (its own first lines, same body).
    pub fn wrapped_glsl_as(&self, dialect: Dialect) -> Result<String, CaptureError> {
        Ok(format!(
            "{}{}{SHADERTOY_EPILOGUE}",
            dialect.prelude(),
            shadertoy::prepare(self.text()?).text
        ))
    }

    /// For a ShaderToy source, what the wrapper blanked out of it (its own `main()`,
    /// `#version`, declarations of ShaderToy inputs, `out` qualifiers of globals), one
    /// phrase each; empty for WGSL or when nothing was.
    pub fn adaptations(&self) -> Vec<String> {
        match (self.kind, self.text()) {
            (SourceKind::ShaderToyGlsl, Ok(t)) => shadertoy::prepare(t).removed,
            _ => Vec::new(),
        }
    }

    /// Compiles and checks the fragment shader (see [`Compiled`] for the routes). Errors are
    /// one line with the line (and, where the front end gives it, the column) in the
    /// user's source.
    pub fn compile(&self) -> Result<Compiled, CaptureError> {
        self.compile_with(false)
    }

    /// [`ShaderSource::compile`]; with `storage`, a read-only storage buffer at
    /// `@group(0) @binding(1)` is allowed too (see [`ShaderRenderer::with_storage`]).
    pub fn compile_with(&self, storage: bool) -> Result<Compiled, CaptureError> {
        let text = self.text()?;
        let err = |message: String| self.compile_error(message);
        match self.kind {
            SourceKind::Wgsl => {
                let module = naga::front::wgsl::parse_str(text).map_err(|e| {
                    let at = e
                        .location(text)
                        .map(|l| format!("line {}:{}: ", l.line_number, l.line_position))
                        .unwrap_or_default();
                    err(format!("does not compile: {at}{}", e.message()))
                })?;
                self.check_module(module, text, text, 0, storage, Frontend::NagaWgsl)
            }
            SourceKind::ShaderToyGlsl => {
                if !text.contains("mainImage") {
                    return Err(err(
                        "a ShaderToy-style source must define void mainImage(out vec4 fragColor, in vec2 fragCoord)"
                            .into(),
                    ));
                }
                #[cfg(feature = "glslang")]
                {
                    // ShaderToy's dialect first; a tab written for desktop GLSL (implicit
                    // conversions, desktop built-ins) compiles as 4.50. The ES error is the
                    // one reported when neither accepts it.
                    match self.compile_glslang(Dialect::Es310, text, storage) {
                        Ok(c) => Ok(c),
                        Err(es) => self
                            .compile_glslang(Dialect::Glsl450, text, storage)
                            .map_err(|_| es),
                    }
                }
                #[cfg(not(feature = "glslang"))]
                {
                    self.compile_naga_glsl(&self.wrapped_glsl()?, text, storage)
                }
            }
        }
    }

    /// glslang → SPIR-V → naga, or the SPIR-V itself where naga cannot read it.
    #[cfg(feature = "glslang")]
    fn compile_glslang(
        &self,
        dialect: Dialect,
        text: &str,
        storage: bool,
    ) -> Result<Compiled, CaptureError> {
        let err = |message: String| self.compile_error(message);
        let full = self.wrapped_glsl_as(dialect)?;
        let words = glslang::compile(&full).map_err(|e| {
            let first = dialect.prelude().matches('\n').count();
            let lines = text.lines().count().max(1);
            let at = match e.line {
                Some(l) if l > first && l - first <= lines => format!("line {}: ", l - first),
                Some(l) if l > first => format!(
                    "in the nshade wrapper after the source (line {} of docs/capture.md's epilogue; it calls mainImage(out vec4, vec2)): ",
                    l - first - lines
                ),
                Some(_) => "in the nshade wrapper: ".to_string(),
                None => String::new(),
            };
            let more = match e.more {
                0 => String::new(),
                n => format!(" (and {n} more errors)"),
            };
            err(format!("does not compile: {at}{}{more}", e.message))
        })?;
        let bindings =
            glslang::spirv_bindings(&words).map_err(|e| err(format!("glslang's SPIR-V: {e}")))?;
        let mut seen = Vec::new();
        for b in bindings {
            let allowed = b == (0, 0) || (storage && b == (0, 1));
            if !allowed || seen.contains(&b) {
                return Err(err(format!(
                    "declares a resource at set {} binding {}; capture binds only the ShaderToy inputs (set 0 binding 0{}); textures and buffers (iChannel0-3) are not supported (docs/capture.md)",
                    b.0,
                    b.1,
                    if storage {
                        ", and a storage buffer at binding 1"
                    } else {
                        ""
                    }
                )));
            }
            seen.push(b);
        }
        match glslang::to_naga(&words) {
            Ok(module) => Ok(Compiled {
                code: FragmentCode::Naga(Box::new(module)),
                entry: "main".into(),
                frontend: Frontend::GlslangNaga(dialect),
                wrapped: Some(full),
            }),
            Err(why) => Ok(Compiled {
                code: FragmentCode::SpirV { words, why },
                entry: "main".into(),
                frontend: Frontend::GlslangSpirV(dialect),
                wrapped: Some(full),
            }),
        }
    }

    /// naga's GLSL front end (builds without glslang).
    #[cfg(not(feature = "glslang"))]
    fn compile_naga_glsl(
        &self,
        full: &str,
        text: &str,
        storage: bool,
    ) -> Result<Compiled, CaptureError> {
        let err = |message: String| self.compile_error(message);
        let mut frontend = naga::front::glsl::Frontend::default();
        let module = frontend
            .parse(
                &naga::front::glsl::Options::from(naga::ShaderStage::Fragment),
                full,
            )
            .map_err(|e| {
                let first = e.errors.first();
                let at = first
                    .and_then(|f| f.location(full))
                    .map(|l| user_location(l.offset as usize, SHADERTOY_PRELUDE.len(), text))
                    .unwrap_or_default();
                let msg = first
                    .map(|f| f.kind.to_string())
                    .unwrap_or_else(|| "unknown error".into());
                let more = if e.errors.len() > 1 {
                    format!(" (and {} more errors)", e.errors.len() - 1)
                } else {
                    String::new()
                };
                err(format!("does not compile: {at}{msg}{more}"))
            })?;
        self.check_module(
            module,
            text,
            full,
            SHADERTOY_PRELUDE.len(),
            storage,
            Frontend::NagaGlsl,
        )
    }

    /// Validates a naga module and checks its bindings and entry point against what
    /// capture provides.
    fn check_module(
        &self,
        module: naga::Module,
        text: &str,
        full: &str,
        offset: usize,
        storage: bool,
        frontend: Frontend,
    ) -> Result<Compiled, CaptureError> {
        let err = |message: String| self.compile_error(message);
        let mut validator = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        );
        validator.validate(&module).map_err(|e| {
            let at = e
                .location(full)
                .map(|l| {
                    if self.kind == SourceKind::Wgsl {
                        format!("line {}:{}: ", l.line_number, l.line_position)
                    } else {
                        user_location(l.offset as usize, offset, text)
                    }
                })
                .unwrap_or_default();
            err(format!(
                "does not validate: {at}{}",
                error_chain(e.as_inner())
            ))
        })?;
        // Only the 64-byte uniform buffer at group 0, binding 0 is bound.
        for (_, g) in module.global_variables.iter() {
            let Some(rb) = &g.binding else { continue };
            let name = g.name.as_deref().unwrap_or("a global");
            if storage
                && (rb.group, rb.binding) == (0, 1)
                && matches!(g.space, naga::AddressSpace::Storage { access } if !access.contains(naga::StorageAccess::STORE))
            {
                continue;
            }
            if (rb.group, rb.binding) != (0, 0) {
                return Err(err(format!(
                    "{name} is bound at @group({}) @binding({}); capture binds only the Params uniform block at @group(0) @binding(0) (docs/capture.md)",
                    rb.group, rb.binding
                )));
            }
            if g.space != naga::AddressSpace::Uniform {
                return Err(err(format!(
                    "{name} at @group(0) @binding(0) must be the Params uniform block (var<uniform>)"
                )));
            }
            let size = module.types[g.ty].inner.size(module.to_ctx());
            let limit = match self.kind {
                SourceKind::Wgsl => WGSL_UNIFORM_LIMIT,
                SourceKind::ShaderToyGlsl => shadertoy::BLOCK_BYTES as u64,
            };
            if size as u64 > limit {
                return Err(err(format!(
                    "{name} at @group(0) @binding(0) is {size} bytes; capture provides {limit} (Params: resolution, parameter, values; docs/capture.md)"
                )));
            }
        }
        let fragments: Vec<&naga::EntryPoint> = module
            .entry_points
            .iter()
            .filter(|e| e.stage == naga::ShaderStage::Fragment)
            .collect();
        let entry = match self.kind {
            SourceKind::ShaderToyGlsl => "main".to_string(),
            SourceKind::Wgsl => {
                if fragments.iter().any(|e| e.name == "fs_main") {
                    "fs_main".to_string()
                } else if fragments.len() == 1 {
                    fragments[0].name.clone()
                } else {
                    return Err(err(format!(
                        "needs a fragment entry point named fs_main (found {})",
                        if fragments.is_empty() {
                            "no fragment entry point".to_string()
                        } else {
                            fragments
                                .iter()
                                .map(|e| e.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    )));
                }
            }
        };
        let wrapped = (self.kind == SourceKind::ShaderToyGlsl).then(|| full.to_string());
        Ok(Compiled {
            code: FragmentCode::Naga(Box::new(module)),
            entry,
            frontend,
            wrapped,
        })
    }
}

/// How a compiled fragment shader reaches wgpu.
#[derive(Debug)]
pub enum FragmentCode {
    /// naga's IR: runs on every backend.
    Naga(Box<naga::Module>),
    /// SPIR-V from glslang that naga cannot translate (`why`): loaded unchanged, which
    /// needs an adapter with `PASSTHROUGH_SHADERS` (Vulkan).
    SpirV { words: Vec<u32>, why: String },
}

/// The front end that read a source (recorded in `dataset.json` as `frontend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frontend {
    /// WGSL through naga.
    NagaWgsl,
    /// GLSL through naga's GLSL front end (a build without the `glslang` feature).
    NagaGlsl,
    /// GLSL (in this dialect) through glslang to SPIR-V, then naga.
    GlslangNaga(Dialect),
    /// GLSL (in this dialect) through glslang to SPIR-V, loaded unchanged.
    GlslangSpirV(Dialect),
}

impl Frontend {
    /// The name recorded in `dataset.json` and printed by `capture`.
    pub fn name(self) -> String {
        match self {
            Frontend::NagaWgsl => "naga (WGSL)".into(),
            Frontend::NagaGlsl => "naga (GLSL 4.50)".into(),
            Frontend::GlslangNaga(d) => format!("glslang ({}) + naga", d.name()),
            Frontend::GlslangSpirV(d) => format!("glslang ({}) + SPIR-V passthrough", d.name()),
        }
    }
}

/// A fragment shader ready for a render pipeline.
#[derive(Debug)]
pub struct Compiled {
    pub code: FragmentCode,
    /// The fragment entry point.
    pub entry: String,
    pub frontend: Frontend,
    /// For a ShaderToy tab, the complete GLSL that was compiled (`source.frag` beside a
    /// dataset).
    pub wrapped: Option<String>,
}

fn user_location(offset: usize, prelude: usize, text: &str) -> String {
    if offset < prelude || offset > prelude + text.len() {
        return String::from("in the nshade wrapper: ");
    }
    let prefix = &text[..offset - prelude];
    let line = prefix.matches('\n').count() + 1;
    let col = offset - prelude - prefix.rfind('\n').map(|p| p + 1).unwrap_or(0) + 1;
    format!("line {line}:{col}: ")
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// Collapses a multi-line message into one line.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `java.util.Random`, bit for bit: a 48-bit linear congruential generator
/// `seed = (seed · 0x5DEECE66D + 0xB) mod 2⁴⁸`, seeded with `(seed ^ 0x5DEECE66D) mod 2⁴⁸`,
/// `next(bits) = (int)(seed >>> (48 − bits))`, and `nextInt(bound)` that maps a power of two
/// bound to `(int)((bound · (long)next(31)) >> 31)` and otherwise rejects draws `u` for which
/// `u − u % bound + (bound − 1)` overflows a 32-bit int (Java SE `Random` documentation).
#[derive(Clone, Debug)]
pub struct JavaRandom {
    seed: u64,
}

impl JavaRandom {
    const MULTIPLIER: u64 = 0x5_DEEC_E66D;
    const ADDEND: u64 = 0xB;
    const MASK: u64 = (1 << 48) - 1;

    /// `new java.util.Random(seed)`.
    pub fn new(seed: i64) -> JavaRandom {
        JavaRandom {
            seed: (seed as u64 ^ Self::MULTIPLIER) & Self::MASK,
        }
    }

    /// `Random.next(bits)`.
    pub fn next(&mut self, bits: u32) -> i32 {
        self.seed = (self
            .seed
            .wrapping_mul(Self::MULTIPLIER)
            .wrapping_add(Self::ADDEND))
            & Self::MASK;
        (self.seed >> (48 - bits)) as i32
    }

    /// `Random.nextInt()`.
    pub fn next_int(&mut self) -> i32 {
        self.next(32)
    }

    /// `Random.nextInt(bound)`; `bound` must be positive.
    pub fn next_int_bounded(&mut self, bound: i32) -> i32 {
        assert!(bound > 0, "bound must be positive");
        let mut r = self.next(31);
        let m = bound - 1;
        if bound & m == 0 {
            ((bound as i64 * r as i64) >> 31) as i32
        } else {
            let mut u = r;
            loop {
                r = u % bound;
                if u.wrapping_sub(r).wrapping_add(m) >= 0 {
                    break r;
                }
                u = self.next(31);
            }
        }
    }
}

/// What to capture and how much.
#[derive(Clone, Debug)]
pub struct CaptureSettings {
    pub width: u32,
    pub height: u32,
    /// `[start, end]`; the parameter the shader sees runs over it (when `parameters` is
    /// empty).
    pub parameter_range: [f32; 2],
    /// Several parameters (`--param NAME=A..B`), in order; empty: the one parameter over
    /// `parameter_range` (schema 1). One parameter that is the source's default (WGSL's
    /// `params.parameter`, ShaderToy's `iTime`) also writes schema 1; anything else
    /// writes schema 2 (docs/capture.md).
    pub parameters: Vec<Parameter>,
    pub training_frames: u32,
    pub validation_frames: u32,
    pub pixels_per_frame: u32,
    /// Every pixel of every frame, in raster order, instead of `pixels_per_frame` random
    /// ones (a dense capture: what `distill` uses; the seed's Random is not drawn from).
    pub every_pixel: bool,
    pub seed: i64,
    pub fixed_state: String,
    /// Strict or display semantics; `None`: the default for the source's kind
    /// ([`OutputSemantics::default_for`]).
    pub semantics: Option<OutputSemantics>,
}

impl Default for CaptureSettings {
    /// The seed's defaults at 320×180.
    fn default() -> Self {
        CaptureSettings {
            width: 320,
            height: 180,
            parameter_range: [-1.0, 1.0],
            parameters: Vec::new(),
            training_frames: 48,
            validation_frames: 13,
            pixels_per_frame: 2048,
            every_pixel: false,
            seed: 4090,
            fixed_state: "Fixed shader source and resolution; only the parameter varies".into(),
            semantics: None,
        }
    }
}

impl CaptureSettings {
    /// The seed's `require`s: a finite range with start < end, training frames in 2..=512,
    /// validation frames in 2..=128, pixels per frame in 1..=65536, a non-empty target.
    pub fn validate(&self) -> Result<(), CaptureError> {
        let bad = |m: String| Err(CaptureError::Settings(m));
        if self.parameters.len() > MAX_PARAMETERS {
            return bad(format!(
                "{} parameters; a capture varies at most {MAX_PARAMETERS}",
                self.parameters.len()
            ));
        }
        for (i, p) in self.parameters.iter().enumerate() {
            nshade_core::model::check_name(&p.name)
                .map_err(|e| CaptureError::Settings(format!("parameter name {e}")))?;
            if ["x", "y", "r", "g", "b"].contains(&p.name.as_str()) {
                return bad(format!(
                    "parameter '{}': x, y, r, g and b name the dataset's other columns",
                    p.name
                ));
            }
            if self.parameters[..i].iter().any(|q| q.name == p.name) {
                return bad(format!("parameter '{}' is given twice", p.name));
            }
        }
        let ranges: Vec<(String, [f32; 2])> = if self.parameters.is_empty() {
            vec![("parameter range".into(), self.parameter_range)]
        } else {
            self.parameters
                .iter()
                .map(|p| (format!("parameter '{}': range", p.name), p.range))
                .collect()
        };
        for (what, [a, b]) in ranges {
            if !a.is_finite() || !b.is_finite() {
                return bad(format!(
                    "{what} {a}..{b} must be finite (no NaN or infinity)"
                ));
            }
            if a >= b {
                return bad(format!("{what} {a}..{b}: the start must be below the end"));
            }
        }
        if !(2..=512).contains(&self.training_frames) {
            return bad(format!(
                "training frames {} must be in 2..=512",
                self.training_frames
            ));
        }
        if !(2..=128).contains(&self.validation_frames) {
            return bad(format!(
                "validation frames {} must be in 2..=128",
                self.validation_frames
            ));
        }
        if !(1..=65536).contains(&self.pixels_per_frame) {
            return bad(format!(
                "pixels per frame {} must be in 1..=65536",
                self.pixels_per_frame
            ));
        }
        if self.width == 0 || self.height == 0 {
            return bad(format!(
                "size {}x{} is empty; width and height must be at least 1",
                self.width, self.height
            ));
        }
        if self.width > i32::MAX as u32 || self.height > i32::MAX as u32 {
            return bad(format!("size {}x{} is too large", self.width, self.height));
        }
        let frames = (self.training_frames + self.validation_frames) as u64;
        let rows = frames * self.rows_per_frame();
        if rows > MAX_CAPTURE_ROWS {
            return bad(format!(
                "{frames} frames of {} rows each make {rows} rows; a capture holds at most {MAX_CAPTURE_ROWS} (fewer frames, a smaller size or fewer pixels per frame)",
                self.rows_per_frame()
            ));
        }
        Ok(())
    }

    /// The parameters varied: `parameters`, or the one over `parameter_range` named `t`.
    pub fn effective_parameters(&self) -> Vec<Parameter> {
        if self.parameters.is_empty() {
            vec![Parameter::new("t", self.parameter_range)]
        } else {
            self.parameters.clone()
        }
    }

    /// Whether this capture of a `kind` source writes schema 2: more than one parameter,
    /// or one that is not the source's default (ShaderToy: anything but `iTime`).
    pub fn is_schema2(&self, kind: SourceKind) -> bool {
        match self.parameters.as_slice() {
            [] => false,
            [p] => kind == SourceKind::ShaderToyGlsl && p.name != "iTime",
            _ => true,
        }
    }

    /// Rows each frame adds: every pixel, or `pixels_per_frame`.
    pub fn rows_per_frame(&self) -> u64 {
        if self.every_pixel {
            self.width as u64 * self.height as u64
        } else {
            self.pixels_per_frame as u64
        }
    }
}

/// One frame of a split: where it sits in the range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FramePosition {
    /// In [0, 1] (training) or (0, 1) (validation).
    pub fraction: f32,
    /// `fraction·2 − 1`: the row's t.
    pub normalized: f32,
    /// `start + fraction·(end − start)`: what the shader sees.
    pub parameter: f32,
}

/// The Kotlin's frame placement, in f32 as the Kotlin computes it.
pub fn frame_position(training: bool, frame: u32, count: u32, range: [f32; 2]) -> FramePosition {
    let fraction = if training {
        frame as f32 / (count - 1) as f32
    } else {
        (frame as f32 + VALIDATION_OFFSET) / count as f32
    };
    let normalized = fraction * 2.0 - 1.0;
    let parameter = range[0] + fraction * (range[1] - range[0]);
    FramePosition {
        fraction,
        normalized,
        parameter,
    }
}

/// The parameter vectors of a split's frames (schema 2), `count × parameters.len()` values:
/// parameter j of frame f sits at the schema-1 position of frame `π_j(f)` ([`frame_position`]:
/// `k/(count−1)` for training, `(k + 0.381966)/count` for validation), where `π_0` is the
/// identity and each other `π_j` a permutation of `0..count` drawn by
/// `java.util.Collections.shuffle` with `java.util.Random(seed + 1)` (training's
/// permutations first, then validation's). So every parameter takes the schema-1 values
/// of its range, validation values are never training values, and the vectors are a
/// Latin hypercube fixed by the seed.
pub fn frame_vectors(
    parameters: &[Parameter],
    seed: i64,
    training_frames: u32,
    validation_frames: u32,
) -> (Vec<f32>, Vec<f32>) {
    let mut random = JavaRandom::new(seed.wrapping_add(1));
    let mut split = |training: bool, count: u32| {
        let perms: Vec<Vec<u32>> = (0..parameters.len())
            .map(|j| {
                let mut p: Vec<u32> = (0..count).collect();
                if j > 0 {
                    // Collections.shuffle(list, rnd): for i = size..2, swap(i − 1, nextInt(i)).
                    for i in (2..=count as usize).rev() {
                        let k = random.next_int_bounded(i as i32) as usize;
                        p.swap(i - 1, k);
                    }
                }
                p
            })
            .collect();
        let mut out = Vec::with_capacity(count as usize * parameters.len());
        for f in 0..count as usize {
            for (p, perm) in parameters.iter().zip(&perms) {
                out.push(frame_position(training, perm[f], count, p.range).parameter);
            }
        }
        out
    };
    let train = split(true, training_frames);
    let validation = split(false, validation_frames);
    (train, validation)
}

/// A rendered frame: `width × height` RGB values, row-major, row 0 at the top.
#[derive(Clone, Debug)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub data: Vec<f32>,
}

/// What [`ShaderRenderer::time_frames`] measured.
#[derive(Clone, Debug)]
pub struct RenderTiming {
    /// Frames timed: the count asked for, or fewer ([`timed_frames`]) where a probe frame
    /// shows they would take longer than [`TIMING_BUDGET_MS`].
    pub frames: u32,
    /// Median GPU time of one full-screen pass, from timestamp queries (None without them).
    pub gpu_ms_median: Option<f64>,
    /// Wall-clock time per frame (submit of all frames to idle, divided by the count).
    pub wall_ms_per_frame: f64,
}

/// Wall-clock time a timing may spend on its frames: on a software adapter a large model
/// takes about a second a frame (a 65 000-parameter hash grid at 320×180 on llvmpipe), where
/// 50 frames would outlast a short training run; on hardware every count asked for fits.
pub const TIMING_BUDGET_MS: f64 = 2000.0;

/// The fewest frames a timing takes, whatever one costs (the median of three).
pub const MIN_TIMED_FRAMES: u32 = 3;

/// How many of `asked` frames to time after a probe frame that took `frame_ms` (wall
/// clock): all of them where they fit [`TIMING_BUDGET_MS`] at that rate, else as many as
/// fit, never fewer than [`MIN_TIMED_FRAMES`] (nor than one, nor more than asked).
pub fn timed_frames(asked: u32, frame_ms: f64) -> u32 {
    let asked = asked.max(1);
    // (`as` truncates and saturates)
    let fit = if frame_ms > 0.0 {
        (TIMING_BUDGET_MS / frame_ms) as u32
    } else {
        asked
    };
    asked.min(fit.max(MIN_TIMED_FRAMES))
}

/// A compiled shader with its render target, ready to render frames at any parameter.
pub struct ShaderRenderer<'a> {
    ctx: &'a GpuContext,
    kind: SourceKind,
    frontend: Frontend,
    wrapped: Option<String>,
    /// Where each value of a parameter vector goes (default: the one parameter).
    slots: Vec<Slot>,
    width: u32,
    height: u32,
    pipeline: wgpu::RenderPipeline,
    bind_group: wgpu::BindGroup,
    /// Kept alive for the bind group (see [`ShaderRenderer::with_storage`]).
    _storage: Option<wgpu::Buffer>,
    uniform: wgpu::Buffer,
    view: wgpu::TextureView,
    texture: wgpu::Texture,
    readback: wgpu::Buffer,
    padded_row: u32,
}

fn gpu_err(e: impl std::fmt::Display) -> CaptureError {
    CaptureError::Gpu(one_line(&e.to_string()))
}

impl<'a> ShaderRenderer<'a> {
    /// Compiles `source` and prepares a `width × height` RGBA32F target.
    pub fn new(
        ctx: &'a GpuContext,
        source: &ShaderSource,
        width: u32,
        height: u32,
    ) -> Result<ShaderRenderer<'a>, CaptureError> {
        ShaderRenderer::with_storage(ctx, source, width, height, None)
    }

    /// [`ShaderRenderer::new`] with a read-only storage buffer holding `storage` at
    /// `@group(0) @binding(1)` (an exported neural shader's parameters in buffer mode).
    pub fn with_storage(
        ctx: &'a GpuContext,
        source: &ShaderSource,
        width: u32,
        height: u32,
        storage: Option<&[u8]>,
    ) -> Result<ShaderRenderer<'a>, CaptureError> {
        if width == 0 || height == 0 {
            return Err(CaptureError::Settings(format!(
                "size {width}x{height} is empty; width and height must be at least 1"
            )));
        }
        let max = ctx.device.limits().max_texture_dimension_2d;
        if width > max || height > max {
            return Err(CaptureError::Settings(format!(
                "size {width}x{height} exceeds the adapter's largest texture ({max})"
            )));
        }
        let align = wgpu::COPY_BYTES_PER_ROW_ALIGNMENT;
        let padded_row = (width * 16).div_ceil(align) * align;
        let limit = ctx.device.limits().max_buffer_size;
        if padded_row as u64 * height as u64 > limit {
            return Err(CaptureError::Settings(format!(
                "size {width}x{height}: an RGBA32F readback of it exceeds the adapter's largest buffer ({limit} bytes)"
            )));
        }
        let Compiled {
            code,
            entry,
            frontend,
            wrapped,
        } = source.compile_with(storage.is_some())?;
        let device = &ctx.device;
        if let FragmentCode::SpirV { why, .. } = &code
            && !ctx.has(wgpu::Features::PASSTHROUGH_SHADERS)
        {
            return Err(CaptureError::Compile {
                name: source.name.clone(),
                message: format!(
                    "glslang compiled it, but {why}, and adapter {} cannot load SPIR-V unchanged (PASSTHROUGH_SHADERS)",
                    ctx.summary.name
                ),
            });
        }
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        let vs = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("nshade capture vertex"),
            source: wgpu::ShaderSource::Wgsl(Cow::Borrowed(VERTEX_WGSL)),
        });
        let fs = match code {
            FragmentCode::Naga(module) => {
                device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some("nshade capture fragment"),
                    source: wgpu::ShaderSource::Naga(Cow::Owned(*module)),
                })
            }
            // SAFETY: SPIR-V that glslang generated from a source it accepted under Vulkan
            // rules; its only resources are the ShaderToy block at set 0 binding 0 (and the
            // storage buffer at binding 1 when one is bound), checked by `compile_with`
            // against its decorations, which is the layout below.
            FragmentCode::SpirV { words, .. } => unsafe {
                device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                    label: Some("nshade capture fragment (SPIR-V)"),
                    entry_points: vec![wgpu::PassthroughShaderEntryPoint {
                        name: entry.clone().into(),
                        workgroup_size: (1, 1, 1),
                    }]
                    .into(),
                    spirv: Some(words.into()),
                    ..Default::default()
                })
            },
        };
        let layout_entry = |binding, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::FRAGMENT,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let mut layout_entries = vec![layout_entry(0, wgpu::BufferBindingType::Uniform)];
        if storage.is_some() {
            layout_entries.push(layout_entry(
                1,
                wgpu::BufferBindingType::Storage { read_only: true },
            ));
        }
        let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("nshade capture params"),
            entries: &layout_entries,
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("nshade capture"),
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("nshade capture"),
            layout: Some(&layout),
            vertex: wgpu::VertexState {
                module: &vs,
                entry_point: Some("vs_main"),
                compilation_options: Default::default(),
                buffers: &[],
            },
            primitive: wgpu::PrimitiveState::default(),
            depth_stencil: None,
            multisample: wgpu::MultisampleState::default(),
            fragment: Some(wgpu::FragmentState {
                module: &fs,
                entry_point: Some(&entry),
                compilation_options: Default::default(),
                targets: &[Some(wgpu::ColorTargetState {
                    format: TARGET_FORMAT,
                    blend: None,
                    write_mask: wgpu::ColorWrites::ALL,
                })],
            }),
            multiview_mask: None,
            cache: None,
        });
        let uniform = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("nshade capture params"),
            size: UNIFORM_BYTES,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let storage_buf = storage.map(|bytes| {
            let b = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("nshade capture storage"),
                size: (bytes.len() as u64).next_multiple_of(4).max(4),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut padded = bytes.to_vec();
            padded.resize(b.size() as usize, 0);
            ctx.queue.write_buffer(&b, 0, &padded);
            b
        });
        let mut group_entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }];
        if let Some(b) = &storage_buf {
            group_entries.push(wgpu::BindGroupEntry {
                binding: 1,
                resource: b.as_entire_binding(),
            });
        }
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("nshade capture params"),
            layout: &bgl,
            entries: &group_entries,
        });
        let texture = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("nshade capture target"),
            size: wgpu::Extent3d {
                width,
                height,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: TARGET_FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let view = texture.create_view(&wgpu::TextureViewDescriptor::default());
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("nshade capture readback"),
            size: padded_row as u64 * height as u64,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let internal_err = pollster::block_on(internal.pop());
        let validation_err = pollster::block_on(validation.pop());
        if let Some(e) = validation_err.or(internal_err) {
            return Err(CaptureError::Compile {
                name: source.name.clone(),
                message: format!(
                    "rejected by wgpu (check the entry point and the Params block against docs/capture.md): {}",
                    one_line(&error_chain(&e))
                ),
            });
        }
        Ok(ShaderRenderer {
            ctx,
            kind: source.kind,
            frontend,
            wrapped,
            slots: vec![match source.kind {
                SourceKind::Wgsl => Slot::Wgsl(0),
                SourceKind::ShaderToyGlsl => Slot::Time,
            }],
            width,
            height,
            pipeline,
            bind_group,
            _storage: storage_buf,
            uniform,
            view,
            texture,
            readback,
            padded_row,
        })
    }

    /// The front end that compiled the source.
    pub fn frontend(&self) -> Frontend {
        self.frontend
    }

    /// For a ShaderToy tab, the complete GLSL that was compiled.
    pub fn wrapped(&self) -> Option<&str> {
        self.wrapped.as_deref()
    }

    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// Makes later renders take vectors of these parameters ([`Slot::for_names`]: WGSL in
    /// order, ShaderToy by input name); a renderer starts with the one default parameter.
    pub fn set_parameters(&mut self, names: &[&str]) -> Result<(), CaptureError> {
        if names.is_empty() || names.len() > MAX_PARAMETERS {
            return Err(CaptureError::Settings(format!(
                "{} parameters; a capture varies 1 to {MAX_PARAMETERS}",
                names.len()
            )));
        }
        let slots = Slot::for_names(self.kind, names)?;
        for (i, s) in slots.iter().enumerate() {
            if slots[..i].contains(s) {
                return Err(CaptureError::Settings(format!(
                    "parameter '{}' is given twice",
                    names[i]
                )));
            }
        }
        self.slots = slots;
        Ok(())
    }

    /// The parameters' slots, in order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    fn write_params(&self, values: &[f32]) -> Result<(), CaptureError> {
        if values.len() != self.slots.len() {
            return Err(CaptureError::Settings(format!(
                "{} parameter values for a renderer of {} parameters",
                values.len(),
                self.slots.len()
            )));
        }
        let (w, h) = (self.width as f32, self.height as f32);
        let mut bytes = [0u8; UNIFORM_BYTES as usize];
        let put = |bytes: &mut [u8], at: usize, v: f32| {
            bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
        };
        match self.kind {
            // Params { resolution: vec2<f32>, parameter: f32, _pad: f32,
            //          values: array<vec4<f32>, 4> }
            SourceKind::Wgsl => {
                put(&mut bytes, 0, w);
                put(&mut bytes, 4, h);
                for (slot, &v) in self.slots.iter().zip(values) {
                    if let Slot::Wgsl(i) = *slot {
                        if i == 0 {
                            put(&mut bytes, 8, v);
                        }
                        put(&mut bytes, 16 + 4 * i, v);
                    }
                }
            }
            // The std140 block of the wrapper (shadertoy::PRELUDE).
            SourceKind::ShaderToyGlsl => {
                let time = self
                    .slots
                    .iter()
                    .zip(values)
                    .find(|(s, _)| **s == Slot::Time)
                    .map_or(0.0, |(_, v)| *v);
                let mut inputs = shadertoy::Inputs::new(self.width, self.height, time);
                for (slot, &v) in self.slots.iter().zip(values) {
                    if let Slot::Mouse(k) = *slot {
                        inputs.mouse[k] = v;
                    }
                }
                let block = inputs.to_bytes();
                bytes[..block.len()].copy_from_slice(&block);
            }
        }
        self.ctx.queue.write_buffer(&self.uniform, 0, &bytes);
        Ok(())
    }

    fn encode_pass(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        timestamps: Option<(&wgpu::QuerySet, u32)>,
    ) {
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("nshade capture"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &self.view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color::TRANSPARENT),
                    store: wgpu::StoreOp::Store,
                },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: timestamps.map(|(q, i)| wgpu::RenderPassTimestampWrites {
                query_set: q,
                beginning_of_pass_write_index: Some(i),
                end_of_pass_write_index: Some(i + 1),
            }),
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.bind_group, &[]);
        pass.draw(0..3, 0..1);
    }

    fn wait(&self) -> Result<(), CaptureError> {
        self.ctx
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(gpu_err)?;
        Ok(())
    }

    /// Renders at `parameter` and returns the RGBA32F image, row-major, row 0 at the top.
    pub fn render_rgba(&self, parameter: f32) -> Result<Vec<f32>, CaptureError> {
        self.render_rgba_at(&[parameter])
    }

    /// [`ShaderRenderer::render_rgba`] at a parameter vector (one value per
    /// [`ShaderRenderer::set_parameters`] name).
    pub fn render_rgba_at(&self, values: &[f32]) -> Result<Vec<f32>, CaptureError> {
        let device = &self.ctx.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.write_params(values)?;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("nshade capture"),
        });
        self.encode_pass(&mut encoder, None);
        encoder.copy_texture_to_buffer(
            wgpu::TexelCopyTextureInfo {
                texture: &self.texture,
                mip_level: 0,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            wgpu::TexelCopyBufferInfo {
                buffer: &self.readback,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(self.padded_row),
                    rows_per_image: Some(self.height),
                },
            },
            wgpu::Extent3d {
                width: self.width,
                height: self.height,
                depth_or_array_layers: 1,
            },
        );
        self.ctx.queue.submit([encoder.finish()]);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(gpu_err(error_chain(&e)));
        }
        let image = read_buffer(self.ctx, &self.readback, |bytes| {
            let row = self.width as usize * 16;
            let mut out = Vec::with_capacity(self.width as usize * self.height as usize * 4);
            for y in 0..self.height as usize {
                let start = y * self.padded_row as usize;
                out.extend(
                    bytes[start..start + row]
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
            }
            out
        })?;
        Ok(image)
    }

    /// The source kind this renderer was built from.
    pub fn kind(&self) -> SourceKind {
        self.kind
    }

    /// Renders at `parameter` and returns the training target's RGB values under
    /// `semantics` (strict: as rendered; display: as [`shadertoy::apply_display`] shows
    /// them), with what display semantics replaced.
    pub fn render_target(
        &self,
        parameter: f32,
        semantics: OutputSemantics,
    ) -> Result<(RgbImage, DisplayStats), CaptureError> {
        self.render_target_at(&[parameter], semantics)
    }

    /// [`ShaderRenderer::render_target`] at a parameter vector.
    pub fn render_target_at(
        &self,
        values: &[f32],
        semantics: OutputSemantics,
    ) -> Result<(RgbImage, DisplayStats), CaptureError> {
        let mut rgba = self.render_rgba_at(values)?;
        let stats = match semantics {
            OutputSemantics::Strict => DisplayStats::default(),
            OutputSemantics::Display => shadertoy::apply_display(&mut rgba).0,
        };
        Ok((
            RgbImage {
                width: self.width,
                height: self.height,
                data: rgba
                    .chunks_exact(4)
                    .flat_map(|p| [p[0], p[1], p[2]])
                    .collect(),
            },
            stats,
        ))
    }

    /// Renders at `parameter` and returns the RGB values (alpha dropped).
    pub fn render_rgb(&self, parameter: f32) -> Result<RgbImage, CaptureError> {
        self.render_rgb_at(&[parameter])
    }

    /// [`ShaderRenderer::render_rgb`] at a parameter vector.
    pub fn render_rgb_at(&self, values: &[f32]) -> Result<RgbImage, CaptureError> {
        let rgba = self.render_rgba_at(values)?;
        Ok(RgbImage {
            width: self.width,
            height: self.height,
            data: rgba
                .chunks_exact(4)
                .flat_map(|p| [p[0], p[1], p[2]])
                .collect(),
        })
    }

    /// Renders `frames` full-screen passes at `parameter` (after a warm-up frame and a
    /// probe frame; fewer, at least [`MIN_TIMED_FRAMES`], where the probe shows `frames`
    /// would take longer than [`TIMING_BUDGET_MS`]: [`timed_frames`]) and reports the
    /// median GPU time per pass from timestamp queries when the device has
    /// `TIMESTAMP_QUERY`, and the wall-clock time per frame in any case.
    pub fn time_frames(&self, parameter: f32, frames: u32) -> Result<RenderTiming, CaptureError> {
        self.time_frames_at(&[parameter], frames)
    }

    /// [`ShaderRenderer::time_frames`] at a parameter vector.
    pub fn time_frames_at(
        &self,
        values: &[f32],
        frames: u32,
    ) -> Result<RenderTiming, CaptureError> {
        let device = &self.ctx.device;
        self.render_rgba_at(values)?;
        // one more frame alone for the rate (the warm-up's may include a lazy compile:
        // lavapipe builds the shader at its first draw)
        let probe = std::time::Instant::now();
        self.render_rgba_at(values)?;
        let frames = timed_frames(frames, probe.elapsed().as_secs_f64() * 1e3);
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let queries = self.ctx.has(wgpu::Features::TIMESTAMP_QUERY).then(|| {
            let count = 2 * frames;
            let set = device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("nshade capture timing"),
                ty: wgpu::QueryType::Timestamp,
                count,
            });
            let size = count as u64 * 8;
            let resolve = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("nshade timestamps"),
                size,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let read = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("nshade timestamps readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            (set, resolve, read, count)
        });
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("nshade capture timing"),
        });
        for i in 0..frames {
            self.encode_pass(&mut encoder, queries.as_ref().map(|q| (&q.0, 2 * i)));
        }
        if let Some((set, resolve, read, count)) = &queries {
            encoder.resolve_query_set(set, 0..*count, resolve, 0);
            encoder.copy_buffer_to_buffer(resolve, 0, read, 0, *count as u64 * 8);
        }
        let start = std::time::Instant::now();
        self.ctx.queue.submit([encoder.finish()]);
        self.wait()?;
        let wall = start.elapsed().as_secs_f64() * 1e3 / frames as f64;
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(gpu_err(error_chain(&e)));
        }
        let gpu_ms_median = match &queries {
            Some((_, _, read, _)) => {
                let ticks: Vec<u64> = read_buffer(self.ctx, read, |b| {
                    b.chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                        .collect()
                })?;
                let period = self.ctx.queue.get_timestamp_period() as f64;
                let mut ms: Vec<f64> = ticks
                    .chunks_exact(2)
                    .map(|p| p[1].saturating_sub(p[0]) as f64 * period * 1e-6)
                    .collect();
                ms.sort_by(f64::total_cmp);
                Some(ms[ms.len() / 2])
            }
            None => None,
        };
        Ok(RenderTiming {
            frames,
            gpu_ms_median,
            wall_ms_per_frame: wall,
        })
    }
}

fn read_buffer<T>(
    ctx: &GpuContext,
    buffer: &wgpu::Buffer,
    f: impl FnOnce(&[u8]) -> T,
) -> Result<T, CaptureError> {
    let slice = buffer.slice(..);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    ctx.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(gpu_err)?;
    rx.recv()
        .map_err(gpu_err)?
        .map_err(|e| gpu_err(format!("cannot read the render target back: {e}")))?;
    let out = {
        let view = slice.get_mapped_range().map_err(gpu_err)?;
        f(&view)
    };
    buffer.unmap();
    Ok(out)
}

/// A WGSL fragment module for timing or viewing a neural replacement with
/// [`ShaderRenderer`]: `eval_source` must define
/// `fn nshade_eval(xyt: vec3<f32>) -> vec3<f32>` (as `nshade export --target wgsl` does, with
/// baked weights) and must not itself bind `@group(0) @binding(0)` or define `Params` or
/// `fs_main`. The appended `fs_main` feeds it the dataset's inputs: x, y the pixel centre
/// mapped to [−1, 1] (y down) and `t = (parameter − start)/(end − start)·2 − 1`, so a model
/// trained on a capture over `range` renders the frame that capture saw at `parameter`.
pub fn neural_fragment_wgsl(eval_source: &str, range: [f32; 2]) -> String {
    format!(
        "{eval_source}
// ---- nshade capture interface (docs/capture.md) ----
struct Params {{
    resolution: vec2<f32>,
    parameter: f32,
    _pad: f32,
}}

@group(0) @binding(0) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {{
    let xy = pos.xy / params.resolution * 2.0 - 1.0;
    let start = f32({start:?});
    let end = f32({end:?});
    let t = (params.parameter - start) / (end - start) * 2.0 - 1.0;
    return vec4<f32>(nshade_eval(vec3<f32>(xy, t)), 1.0);
}}
",
        start = range[0],
        end = range[1],
    )
}

/// [`neural_fragment_wgsl`] for a model of a schema-2 capture: `eval_source` defines
/// `fn nshade_eval(p: vecN<f32>)` with N = 2 + `parameters` (at most 4), whose inputs are
/// x, y (pixel centres in [−1, 1], y down) and the parameters as the shader saw them (the
/// model maps them itself); the appended `fs_main` reads the parameters from
/// `params.values` in order, as a WGSL capture does.
pub fn neural_fragment_wgsl_params(
    eval_source: &str,
    parameters: usize,
) -> Result<String, CaptureError> {
    if !(1..=2).contains(&parameters) {
        return Err(CaptureError::Settings(format!(
            "a neural shader takes x, y and 1 or 2 parameters (vectors of at most 4 inputs); this one has {parameters} parameters"
        )));
    }
    let values: Vec<String> = (0..parameters)
        .map(|i| format!("params.values[0].{}", ["x", "y"][i]))
        .collect();
    Ok(format!(
        "{eval_source}
// ---- nshade capture interface (docs/capture.md) ----
struct Params {{
    resolution: vec2<f32>,
    parameter: f32,
    _pad: f32,
    values: array<vec4<f32>, 4>,
}}

@group(0) @binding(0) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {{
    let xy = pos.xy / params.resolution * 2.0 - 1.0;
    return vec4<f32>(nshade_eval(vec{n}<f32>(xy, {values})), 1.0);
}}
",
        n = 2 + parameters,
        values = values.join(", "),
    ))
}

/// The rows and parameters of both splits, as the Kotlin produces them.
#[derive(Clone, Debug)]
pub struct CapturedRows {
    /// Rows of `x, y, t, r, g, b` (schema 1) or `x, y, p1, ..., pn, r, g, b` (schema 2).
    pub train: Vec<f32>,
    /// One value per frame (schema 1), or each frame's parameter vector (schema 2).
    pub train_parameters: Vec<f32>,
    pub validation: Vec<f32>,
    pub validation_parameters: Vec<f32>,
    /// The semantics the frames were checked or converted with.
    pub semantics: OutputSemantics,
    /// Display semantics: what was replaced or clamped in every rendered frame of each
    /// split (all pixels, not only the sampled ones); zero under strict semantics.
    pub train_display: DisplayStats,
    pub validation_display: DisplayStats,
    /// 1 or 2.
    pub schema: u32,
    /// The parameters varied, in column order.
    pub parameters: Vec<Parameter>,
}

impl CapturedRows {
    /// Values per row: x, y, the parameter columns, r, g, b.
    pub fn row_floats(&self) -> usize {
        5 + if self.schema == 1 {
            1
        } else {
            self.parameters.len()
        }
    }
}

/// Appends one frame's rows: `pixels` draws of `x = nextInt(w)`, `y = nextInt(h)` from
/// `random`, each giving `((x+.5)/w·2−1, (y+.5)/h·2−1, inputs..., r, g, b)` from an RGBA
/// image (`inputs`: the frame's t for schema 1, its parameter vector for schema 2).
pub fn sample_frame(
    random: &mut JavaRandom,
    rgba: &[f32],
    width: u32,
    height: u32,
    inputs: &[f32],
    pixels: u32,
    out: &mut Vec<f32>,
) {
    let (w, h) = (width as i32, height as i32);
    for _ in 0..pixels {
        let x = random.next_int_bounded(w);
        let y = random.next_int_bounded(h);
        push_row(rgba, width, height, x as u32, y as u32, inputs, out);
    }
}

fn push_row(
    rgba: &[f32],
    width: u32,
    height: u32,
    x: u32,
    y: u32,
    inputs: &[f32],
    out: &mut Vec<f32>,
) {
    let index = (y as usize * width as usize + x as usize) * 4;
    out.push((x as f32 + 0.5) / width as f32 * 2.0 - 1.0);
    out.push((y as f32 + 0.5) / height as f32 * 2.0 - 1.0);
    out.extend_from_slice(inputs);
    out.extend_from_slice(&rgba[index..index + 3]);
}

/// A dense frame: one row per pixel, rows top to bottom, each left to right.
pub fn every_pixel(rgba: &[f32], width: u32, height: u32, inputs: &[f32], out: &mut Vec<f32>) {
    for y in 0..height {
        for x in 0..width {
            push_row(rgba, width, height, x, y, inputs, out);
        }
    }
}

/// The seed's per-frame checks: every value finite, every alpha within 0.001 of 1.
fn check_frame(
    rgba: &[f32],
    width: u32,
    parameter: f32,
    split: &'static str,
    frame: u32,
) -> Result<(), CaptureError> {
    let at = |i: usize| ((i / 4) as u32 % width, (i / 4) as u32 / width);
    if let Some(i) = rgba.iter().position(|v| !v.is_finite()) {
        let (x, y) = at(i);
        return Err(CaptureError::NonFinite {
            parameter,
            split,
            frame,
            x,
            y,
            channel: ["r", "g", "b", "a"][i % 4],
        });
    }
    if let Some(p) = rgba
        .chunks_exact(4)
        .position(|p| (p[3] - 1.0).abs() >= 0.001)
    {
        let (x, y) = at(p * 4);
        return Err(CaptureError::NotOpaque {
            parameter,
            split,
            frame,
            x,
            y,
            alpha: rgba[p * 4 + 3],
        });
    }
    Ok(())
}

/// Display semantics for one frame, in place; refuses a frame whose pixels are mostly
/// (more than half) NaN/Inf.
fn display_frame(
    rgba: &mut [f32],
    parameter: f32,
    split: &'static str,
    frame: u32,
) -> Result<DisplayStats, CaptureError> {
    let (stats, bad) = shadertoy::apply_display(rgba);
    let total = (rgba.len() / 4) as u64;
    if bad * 2 > total {
        return Err(CaptureError::MostlyInvalid {
            parameter,
            split,
            frame,
            pixels: bad,
            total,
        });
    }
    Ok(stats)
}

/// Renders every frame of both splits and draws the rows (nothing is written).
/// `progress(split, frame, count)` is called before each frame.
pub fn capture_rows(
    renderer: &mut ShaderRenderer,
    settings: &CaptureSettings,
    progress: &mut dyn FnMut(&str, u32, u32) -> Result<(), CaptureError>,
) -> Result<CapturedRows, CaptureError> {
    settings.validate()?;
    if renderer.size() != (settings.width, settings.height) {
        return Err(CaptureError::Settings(format!(
            "the renderer is {}x{}, the settings ask for {}x{}",
            renderer.width, renderer.height, settings.width, settings.height
        )));
    }
    let semantics = settings
        .semantics
        .unwrap_or(OutputSemantics::default_for(renderer.kind));
    let parameters = settings.effective_parameters();
    let names: Vec<&str> = parameters.iter().map(|p| p.name.as_str()).collect();
    let schema2 = settings.is_schema2(renderer.kind);
    if settings.parameters.is_empty() {
        renderer.set_parameters(&[match renderer.kind {
            SourceKind::Wgsl => "t",
            SourceKind::ShaderToyGlsl => "iTime",
        }])?;
    } else {
        renderer.set_parameters(&names)?;
    }
    let range = parameters[0].range;
    let (train_vectors, validation_vectors) = frame_vectors(
        &parameters,
        settings.seed,
        settings.training_frames,
        settings.validation_frames,
    );
    let np = parameters.len();
    let mut random = JavaRandom::new(settings.seed);
    let mut out = CapturedRows {
        train: Vec::new(),
        train_parameters: Vec::new(),
        validation: Vec::new(),
        validation_parameters: Vec::new(),
        semantics,
        train_display: DisplayStats::default(),
        validation_display: DisplayStats::default(),
        schema: if schema2 { 2 } else { 1 },
        parameters: parameters.clone(),
    };
    let row_floats = out.row_floats();
    for (split, count) in [
        ("train", settings.training_frames),
        ("validation", settings.validation_frames),
    ] {
        let training = split == "train";
        let mut rows =
            Vec::with_capacity(count as usize * settings.rows_per_frame() as usize * row_floats);
        let mut parameters = Vec::with_capacity(count as usize * np);
        let mut display = DisplayStats::default();
        let vectors = if training {
            &train_vectors
        } else {
            &validation_vectors
        };
        for frame in 0..count {
            progress(split, frame, count)?;
            let pos = frame_position(training, frame, count, range);
            // Schema 1: the Kotlin's placement, t in the rows; schema 2: the frame's
            // parameter vector, in the rows as the shader saw it.
            let (values, inputs): (&[f32], Vec<f32>) = if schema2 {
                let v = &vectors[frame as usize * np..][..np];
                (v, v.to_vec())
            } else {
                (std::slice::from_ref(&pos.parameter), vec![pos.normalized])
            };
            parameters.extend_from_slice(values);
            let mut rgba = renderer.render_rgba_at(values)?;
            match semantics {
                OutputSemantics::Strict => {
                    check_frame(&rgba, settings.width, values[0], split, frame)?
                }
                OutputSemantics::Display => {
                    display.add(&display_frame(&mut rgba, values[0], split, frame)?)
                }
            }
            if settings.every_pixel {
                every_pixel(&rgba, settings.width, settings.height, &inputs, &mut rows);
            } else {
                sample_frame(
                    &mut random,
                    &rgba,
                    settings.width,
                    settings.height,
                    &inputs,
                    settings.pixels_per_frame,
                    &mut rows,
                );
            }
        }
        if training {
            out.train = rows;
            out.train_parameters = parameters;
            out.train_display = display;
        } else {
            out.validation = rows;
            out.validation_parameters = parameters;
            out.validation_display = display;
        }
    }
    Ok(out)
}

/// What a finished capture wrote.
#[derive(Clone, Debug)]
pub struct CaptureSummary {
    pub source_kind: SourceKind,
    /// The front end that compiled the source (`dataset.json`'s `frontend` under display
    /// semantics).
    pub frontend: Frontend,
    pub digest: String,
    pub train_rows: usize,
    pub validation_rows: usize,
    /// Files written beside the row files and `dataset.json`.
    pub source_files: Vec<String>,
    pub semantics: OutputSemantics,
    /// Display semantics: what was replaced or clamped per split (see [`CapturedRows`]).
    pub train_display: DisplayStats,
    pub validation_display: DisplayStats,
    /// The dataset schema written: 1 (one time parameter) or 2.
    pub schema: u32,
    /// The parameters varied, with the slot each drove.
    pub parameters: Vec<(Parameter, Slot)>,
}

/// Fails early, before any rendering, when `dir` exists and is not an empty directory.
pub fn check_new_dir(dir: &Path) -> Result<(), CaptureError> {
    if dir.exists() {
        let d = dir.display();
        if !dir.is_dir() {
            return Err(CaptureError::Settings(format!(
                "{d}: exists and is not a directory"
            )));
        }
        let mut entries = std::fs::read_dir(dir).map_err(|e| CaptureError::Read {
            path: d.to_string(),
            source: e,
        })?;
        if entries.next().is_some() {
            return Err(CaptureError::Settings(format!(
                "{d}: directory exists and is not empty (choose a new dataset directory)"
            )));
        }
    }
    Ok(())
}

/// The whole capture: checks the settings and `dir`, compiles the shader, renders every
/// frame, and only then writes the dataset (atomically: a temporary sibling renamed into
/// place). On any error nothing is left at `dir`.
pub fn capture(
    ctx: &GpuContext,
    source: &ShaderSource,
    settings: &CaptureSettings,
    dir: &Path,
    progress: &mut dyn FnMut(&str, u32, u32) -> Result<(), CaptureError>,
) -> Result<CaptureSummary, CaptureError> {
    settings.validate()?;
    check_new_dir(dir)?;
    let mut renderer = ShaderRenderer::new(ctx, source, settings.width, settings.height)?;
    let rows = capture_rows(&mut renderer, settings, progress)?;
    let mut files: Vec<(String, Vec<u8>)> =
        vec![(source.kind.copy_name().to_string(), source.bytes.clone())];
    if let Some(wrapped) = renderer.wrapped() {
        files.push(("source.frag".into(), wrapped.as_bytes().to_vec()));
    }
    files.push(("vertex.wgsl".into(), VERTEX_WGSL.as_bytes().to_vec()));
    let meta = DatasetMeta {
        source_kind: source.kind.manifest_name().into(),
        source_digest: source.digest(),
        fixed_state: settings.fixed_state.clone(),
        resolution: [settings.width, settings.height],
        parameter_range: settings.parameter_range,
        seed: settings.seed,
    };
    let slots = renderer.slots().to_vec();
    let train = || SplitData {
        rows: &rows.train,
        parameters: &rows.train_parameters,
    };
    let validation = || SplitData {
        rows: &rows.validation,
        parameters: &rows.validation_parameters,
    };
    let write = |to: &Path| {
        if rows.schema == 1 {
            write_dataset(to, &meta, train(), validation(), &files)
        } else {
            write_dataset_v2(
                to,
                &schema2_meta(&meta, &rows.parameters, &slots, settings),
                train(),
                validation(),
                &files,
            )
        }
    };
    match rows.semantics {
        // The seed's path: exactly the seed-002 manifest.
        OutputSemantics::Strict => write(dir)?,
        // The manifest also records the display semantics and what they replaced: the
        // dataset is built in a temporary sibling, its manifest extended, and the whole
        // directory renamed into place.
        OutputSemantics::Display => {
            let staging = nshade_core::fsutil::temp_sibling(dir);
            let result = (|| {
                write(&staging)?;
                extend_manifest(&staging, &rows, renderer.frontend(), settings)?;
                if dir.exists() {
                    std::fs::remove_dir(dir).map_err(|e| write_error(dir, e))?;
                }
                std::fs::rename(&staging, dir).map_err(|e| write_error(dir, e))
            })();
            if result.is_err() {
                let _ = std::fs::remove_dir_all(&staging);
            }
            result?;
        }
    }
    Ok(CaptureSummary {
        source_kind: source.kind,
        frontend: renderer.frontend(),
        digest: meta.source_digest,
        train_rows: rows.train.len() / rows.row_floats(),
        validation_rows: rows.validation.len() / rows.row_floats(),
        source_files: files.into_iter().map(|(n, _)| n).collect(),
        semantics: rows.semantics,
        train_display: rows.train_display,
        validation_display: rows.validation_display,
        schema: rows.schema,
        parameters: rows.parameters.iter().cloned().zip(slots).collect(),
    })
}

/// The schema-2 manifest of a capture: inputs x, y (pixel centres in [−1, 1]) and each
/// parameter (its range, as the shader saw it), outputs r, g, b; `shaderInputs` says where
/// each parameter reached the shader and `parameterSampling` how frames were placed.
fn schema2_meta(
    meta: &DatasetMeta,
    parameters: &[Parameter],
    slots: &[Slot],
    settings: &CaptureSettings,
) -> Schema2Meta {
    let mut inputs = vec![
        InputColumn::new("x", [-1.0, 1.0], false),
        InputColumn::new("y", [-1.0, 1.0], false),
    ];
    inputs.extend(
        parameters
            .iter()
            .map(|p| InputColumn::new(&p.name, p.range, true)),
    );
    let mut extra = serde_json::Map::new();
    extra.insert(
        "shaderInputs".into(),
        serde_json::Value::Object(
            parameters
                .iter()
                .zip(slots)
                .map(|(p, s)| (p.name.clone(), s.describe().into()))
                .collect(),
        ),
    );
    extra.insert(
        "parameterSampling".into(),
        format!(
            "Latin hypercube: parameter j of frame f at the schema-1 position of frame perm_j(f) (training k/(n-1), validation (k+{VALIDATION_OFFSET})/n of its range); perm_0 the identity, the others java.util.Collections.shuffle with java.util.Random(seed+1)"
        )
        .into(),
    );
    extra.insert("color".into(), "linear RGB, unclamped, opaque".into());
    Schema2Meta {
        source_kind: meta.source_kind.clone(),
        source_digest: meta.source_digest.clone(),
        fixed_state: settings.fixed_state.replace(
            "only the parameter varies",
            "only the parameters vary",
        ),
        resolution: Some(meta.resolution),
        seed: meta.seed,
        inputs,
        outputs: ["r", "g", "b"]
            .iter()
            .map(|n| OutputColumn {
                name: n.to_string(),
                width: 1,
            })
            .collect(),
        coordinates: "pixel centers; x right, y down; x,y normalized to [-1,1]; parameters as the shader saw them".into(),
        extra,
    }
}

fn write_error(path: &Path, e: std::io::Error) -> CaptureError {
    CaptureError::Dataset(DatasetError::Write {
        path: path.display().to_string(),
        cause: e,
    })
}

/// The manifest's `color` under display semantics.
pub const DISPLAY_COLOR: &str =
    "RGB as a display shows it: clamped to [0,1], NaN -> 0, +Inf -> 1, -Inf -> 0; alpha ignored";

/// Display semantics in `dir/dataset.json`: `color` says what the values are, and the extra
/// field `display` records the rules and, per split, the counts of every rendered frame
/// (seed-002 readers ignore fields they do not know).
fn extend_manifest(
    dir: &Path,
    rows: &CapturedRows,
    frontend: Frontend,
    settings: &CaptureSettings,
) -> Result<(), CaptureError> {
    let path = dir.join("dataset.json");
    let text = std::fs::read_to_string(&path).map_err(|e| CaptureError::Read {
        path: path.display().to_string(),
        source: e,
    })?;
    let mut manifest: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| DatasetError::Invalid {
            path: path.display().to_string(),
            message: format!("not valid JSON: {e}"),
        })?;
    let counts = |s: &DisplayStats| {
        serde_json::json!({
            "values": s.values,
            "replaced": s.replaced(),
            "nan": s.nan,
            "posInf": s.pos_inf,
            "negInf": s.neg_inf,
            "clamped": s.clamped,
        })
    };
    manifest["color"] = DISPLAY_COLOR.into();
    manifest["frontend"] = frontend.name().into();
    manifest["sampling"] = if settings.every_pixel {
        "every pixel of each frame, rows top to bottom, left to right".into()
    } else {
        format!(
            "{} pixels per frame drawn by java.util.Random(seed)",
            settings.pixels_per_frame
        )
        .into()
    };
    manifest["display"] = serde_json::json!({
        "semantics": "shadertoy-display",
        "rules": "alpha ignored; NaN -> 0; +Inf -> 1; -Inf -> 0; then clamped to [0,1]; a frame with more than half its pixels NaN/Inf is refused",
        "counted": "RGB values of every pixel of every rendered frame of the split",
        "train": counts(&rows.train_display),
        "validation": counts(&rows.validation_display),
    });
    let text = serde_json::to_string_pretty(&manifest).expect("manifest serialises") + "\n";
    std::fs::write(&path, text).map_err(|e| write_error(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::context_or_skip;

    #[test]
    fn timed_frames_fit_the_budget_and_keep_three() {
        // fast frames: every frame asked for
        assert_eq!(timed_frames(50, 0.05), 50);
        assert_eq!(timed_frames(50, TIMING_BUDGET_MS / 50.0), 50);
        // 53 ms a frame (a ShaderToy tab on llvmpipe): as many as fit the budget
        assert_eq!(timed_frames(50, 53.0), (TIMING_BUDGET_MS / 53.0) as u32);
        assert!(timed_frames(50, 53.0) < 50);
        // a second a frame (a hash grid on llvmpipe): three, not two
        assert_eq!(timed_frames(50, 1000.0), MIN_TIMED_FRAMES);
        assert_eq!(timed_frames(10, 1e9), MIN_TIMED_FRAMES);
        // never more than asked, never none
        assert_eq!(timed_frames(2, 1e9), 2);
        assert_eq!(timed_frames(0, 0.01), 1);
        assert_eq!(timed_frames(0, 1e9), 1);
        // a probe too fast for the clock to see, or a NaN: everything asked for
        assert_eq!(timed_frames(7, 0.0), 7);
        assert_eq!(timed_frames(7, f64::NAN), 7);
    }

    // Expected values printed by OpenJDK 17 (`java.util.Random`), e.g.
    // `Random r = new Random(4090); r.nextInt(320); r.nextInt(180); ...`. They follow from
    // the documented algorithm: seed0 = (4090 ^ 0x5DEECE66D) mod 2^48,
    // seed' = (seed·0x5DEECE66D + 0xB) mod 2^48, next(31) = seed' >> 17, and for a bound
    // that is not a power of two nextInt = next(31) % bound unless that draw is rejected.
    // `tools/seed_dataset.py random SEED BOUND N` recomputes them independently in Python.
    #[test]
    fn java_random_matches_java() {
        let mut r = JavaRandom::new(4090);
        let picks: Vec<(i32, i32)> = (0..8)
            .map(|_| (r.next_int_bounded(320), r.next_int_bounded(180)))
            .collect();
        assert_eq!(
            picks,
            [
                (184, 108),
                (134, 109),
                (280, 95),
                (307, 170),
                (202, 121),
                (231, 59),
                (295, 165),
                (58, 23)
            ]
        );
        // Power-of-two bound (the multiply-shift path).
        let mut r = JavaRandom::new(4090);
        let picks: Vec<(i32, i32)> = (0..6)
            .map(|_| (r.next_int_bounded(64), r.next_int_bounded(36)))
            .collect();
        assert_eq!(
            picks,
            [(51, 0), (58, 1), (44, 23), (57, 26), (46, 13), (18, 23)]
        );
        // A bound just above 2^30: about half the draws are rejected, the first five here.
        let mut r = JavaRandom::new(4090);
        let v: Vec<i32> = (0..10).map(|_| r.next_int_bounded(1_073_741_825)).collect();
        assert_eq!(
            v,
            [
                621375395, 450746630, 269477761, 612466151, 612362759, 892318138, 575643443,
                679784839, 378842836, 593691682
            ]
        );
        let mut r = JavaRandom::new(4090);
        let v: Vec<i32> = (0..10).map(|_| r.next_int()).collect();
        assert_eq!(
            v,
            [
                -843837967,
                -363591399,
                -388370547,
                -1203731677,
                -1303496656,
                1242750791,
                -414009882,
                901493260,
                -1172781932,
                538955522
            ]
        );
        assert_eq!(JavaRandom::new(42).next_int(), -1170105035);
        assert_eq!(JavaRandom::new(0).next_int(), -1155484576);
        let mut r = JavaRandom::new(-7);
        let v: Vec<i32> = (0..6).map(|_| r.next_int_bounded(1_000_000_007)).collect();
        assert_eq!(
            v,
            [
                577934662, 935951290, 445645583, 119890471, 314447087, 829394584
            ]
        );
    }

    #[test]
    fn frame_positions_match_kotlin_floats() {
        // Kotlin: 3.toFloat()/(48-1) prints 0.06382979; (3+.381966f)/13 prints 0.26015124.
        let t = frame_position(true, 3, 48, [-1.0, 1.0]);
        assert_eq!(t.fraction, "0.06382979".parse::<f32>().unwrap());
        let v = frame_position(false, 3, 13, [-1.0, 1.0]);
        assert_eq!(v.fraction, "0.26015124".parse::<f32>().unwrap());
        assert_eq!(v.normalized, v.fraction * 2.0 - 1.0);
        let first = frame_position(true, 0, 48, [0.0, 2.0]);
        let last = frame_position(true, 47, 48, [0.0, 2.0]);
        assert_eq!((first.parameter, first.normalized), (0.0, -1.0));
        assert_eq!((last.parameter, last.normalized), (2.0, 1.0));
        // Validation slices never coincide with training slices.
        for f in 0..13 {
            let p = frame_position(false, f, 13, [-1.0, 1.0]).parameter;
            assert!((0..48).all(|g| frame_position(true, g, 48, [-1.0, 1.0]).parameter != p));
        }
    }

    #[test]
    fn settings_are_checked() {
        let ok = CaptureSettings::default();
        ok.validate().unwrap();
        let cases: Vec<(CaptureSettings, &str)> = vec![
            (
                CaptureSettings {
                    parameter_range: [1.0, 1.0],
                    ..ok.clone()
                },
                "start must be below the end",
            ),
            (
                CaptureSettings {
                    parameter_range: [2.0, 1.0],
                    ..ok.clone()
                },
                "start must be below the end",
            ),
            (
                CaptureSettings {
                    parameter_range: [f32::NAN, 1.0],
                    ..ok.clone()
                },
                "must be finite",
            ),
            (
                CaptureSettings {
                    parameter_range: [0.0, f32::INFINITY],
                    ..ok.clone()
                },
                "must be finite",
            ),
            (
                CaptureSettings {
                    training_frames: 1,
                    ..ok.clone()
                },
                "training frames 1 must be in 2..=512",
            ),
            (
                CaptureSettings {
                    training_frames: 513,
                    ..ok.clone()
                },
                "training frames 513",
            ),
            (
                CaptureSettings {
                    validation_frames: 1,
                    ..ok.clone()
                },
                "validation frames 1 must be in 2..=128",
            ),
            (
                CaptureSettings {
                    validation_frames: 129,
                    ..ok.clone()
                },
                "validation frames 129",
            ),
            (
                CaptureSettings {
                    pixels_per_frame: 0,
                    ..ok.clone()
                },
                "pixels per frame 0 must be in 1..=65536",
            ),
            (
                CaptureSettings {
                    pixels_per_frame: 65537,
                    ..ok.clone()
                },
                "pixels per frame 65537",
            ),
            (
                CaptureSettings {
                    width: 0,
                    ..ok.clone()
                },
                "size 0x180 is empty",
            ),
            (
                CaptureSettings {
                    height: 0,
                    ..ok.clone()
                },
                "size 320x0 is empty",
            ),
        ];
        for (s, want) in cases {
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
        }
    }

    fn compile_err(kind: SourceKind, text: &str) -> String {
        let e = ShaderSource::new(kind, "test", text)
            .compile()
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n'), "one line: {e:?}");
        e
    }

    #[test]
    fn compile_errors_are_one_line_with_user_positions() {
        let e = compile_err(
            SourceKind::Wgsl,
            "@fragment\nfn fs_main() -> @location(0) vec4<f32> {\n  let c = 1.0\n  return vec4<f32>(c);\n}\n",
        );
        assert!(e.starts_with("test: does not compile: line 4:"), "{e}");
        let e = compile_err(
            SourceKind::ShaderToyGlsl,
            "// comment\nvoid mainImage(out vec4 fragColor, in vec2 fragCoord) {\n    fragColor = vec4(nope, 1.0);\n}\n",
        );
        assert!(e.starts_with("test: does not compile: line 3:"), "{e}");
        assert!(e.contains("nope"), "{e}");
        let e = compile_err(SourceKind::ShaderToyGlsl, "void main() {}\n");
        assert!(e.contains("mainImage"), "{e}");
        let e = compile_err(
            SourceKind::Wgsl,
            "@fragment fn a() -> @location(0) vec4<f32> { return vec4<f32>(1.0); }\n@fragment fn b() -> @location(0) vec4<f32> { return vec4<f32>(1.0); }\n",
        );
        assert!(e.contains("fs_main") && e.contains("a, b"), "{e}");
        let e = compile_err(SourceKind::Wgsl, "fn helper() -> f32 { return 1.0; }\n");
        assert!(e.contains("no fragment entry point"), "{e}");
        let e = compile_err(
            SourceKind::Wgsl,
            "@group(0) @binding(1) var tex: texture_2d<f32>;\n@fragment fn fs_main() -> @location(0) vec4<f32> { return textureLoad(tex, vec2<i32>(0), 0); }\n",
        );
        assert!(e.contains("tex is bound at @group(0) @binding(1)"), "{e}");
        let e = compile_err(
            SourceKind::Wgsl,
            "struct P { a: array<vec4<f32>, 6> }\n@group(0) @binding(0) var<uniform> p: P;\n@fragment fn fs_main() -> @location(0) vec4<f32> { return p.a[5]; }\n",
        );
        assert!(
            e.contains("p at @group(0) @binding(0) is 96 bytes; capture provides 80"),
            "{e}"
        );
        let e = compile_err(
            SourceKind::ShaderToyGlsl,
            "void mainImage(out vec4 c, in vec2 p) { c = texture(iChannel0, p); }\n",
        );
        assert!(e.contains("iChannel0"), "{e}");
        // Validation (not parse) errors also name a position.
        let e = compile_err(
            SourceKind::Wgsl,
            "@fragment\nfn fs_main() -> @location(0) vec4<f32> {\n  return vec4<f32>(1.0, 2.0);\n}\n",
        );
        assert!(e.contains("test: does not"), "{e}");
    }

    #[test]
    fn digest_is_sha256_of_the_file_bytes() {
        let s = ShaderSource::new(SourceKind::Wgsl, "x", "abc");
        assert_eq!(
            s.digest(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    const ORIENT_WGSL: &str = "struct Params { resolution: vec2<f32>, parameter: f32, _pad: f32 }
@group(0) @binding(0) var<uniform> params: Params;
@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    return vec4<f32>(pos.x, pos.y, params.parameter, 1.0);
}
";
    const ORIENT_GLSL: &str = "void mainImage(out vec4 fragColor, in vec2 fragCoord) {
    fragColor = vec4(fragCoord, iTime + iResolution.z * 1000.0, 1.0);
}
";

    #[test]
    fn conventions_wgsl_y_down_shadertoy_y_up() {
        let Some(ctx) = context_or_skip() else { return };
        let (w, h) = (8u32, 4u32);
        let wgsl = ShaderRenderer::new(
            &ctx,
            &ShaderSource::new(SourceKind::Wgsl, "o", ORIENT_WGSL),
            w,
            h,
        )
        .unwrap();
        let img = wgsl.render_rgba(0.25).unwrap();
        // Row 0 of the image is the top; WGSL pos is the pixel centre with y down.
        for (y, x) in [(0, 0), (0, 7), (3, 2)] {
            let p = &img[(y * w as usize + x) * 4..][..4];
            assert_eq!(p, [x as f32 + 0.5, y as f32 + 0.5, 0.25, 1.0]);
        }
        let glsl = ShaderRenderer::new(
            &ctx,
            &ShaderSource::new(SourceKind::ShaderToyGlsl, "o", ORIENT_GLSL),
            w,
            h,
        )
        .unwrap();
        let img = glsl.render_rgb(-0.5).unwrap();
        // ShaderToy fragCoord: origin bottom-left, y up — so the top row has y = h - 0.5.
        for (y, x) in [(0, 0), (0, 7), (3, 2)] {
            let p = &img.data[(y * w as usize + x) * 3..][..3];
            assert_eq!(p, [x as f32 + 0.5, h as f32 - (y as f32 + 0.5), 999.5]);
        }
        let timing = glsl.time_frames(0.0, 4).unwrap();
        // a frame of this shader takes far less than TIMING_BUDGET_MS / 4
        assert_eq!(timing.frames, 4);
        assert!(timing.wall_ms_per_frame > 0.0);
        if ctx.has(wgpu::Features::TIMESTAMP_QUERY) {
            assert!(timing.gpu_ms_median.is_some_and(|t| t >= 0.0));
        }
    }

    #[test]
    fn neural_wrapper_feeds_the_dataset_inputs() {
        let Some(ctx) = context_or_skip() else { return };
        let eval = "fn nshade_eval(xyt: vec3<f32>) -> vec3<f32> { return xyt; }\n";
        let src = ShaderSource::new(
            SourceKind::Wgsl,
            "neural",
            &neural_fragment_wgsl(eval, [0.5, 2.5]),
        );
        let (w, h) = (10u32, 6u32);
        let r = ShaderRenderer::new(&ctx, &src, w, h).unwrap();
        let pos = frame_position(false, 1, 3, [0.5, 2.5]);
        let img = r.render_rgb(pos.parameter).unwrap();
        for y in 0..h {
            for x in 0..w {
                let got = &img.data[((y * w + x) * 3) as usize..][..3];
                let want = [
                    (x as f32 + 0.5) / w as f32 * 2.0 - 1.0,
                    (y as f32 + 0.5) / h as f32 * 2.0 - 1.0,
                    pos.normalized,
                ];
                for c in 0..3 {
                    assert!(
                        (got[c] - want[c]).abs() < 1e-5,
                        "({x},{y}) {got:?} {want:?}"
                    );
                }
            }
        }
    }

    fn small() -> CaptureSettings {
        CaptureSettings {
            width: 16,
            height: 8,
            training_frames: 3,
            validation_frames: 2,
            pixels_per_frame: 5,
            ..CaptureSettings::default()
        }
    }

    #[test]
    fn dense_capture_takes_every_pixel_in_raster_order() {
        let Some(ctx) = context_or_skip() else { return };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dense");
        let src = ShaderSource::new(SourceKind::Wgsl, "o", ORIENT_WGSL);
        let s = CaptureSettings {
            parameter_range: [0.0, 2.0],
            every_pixel: true,
            semantics: Some(OutputSemantics::Display),
            ..small()
        };
        let summary = capture(&ctx, &src, &s, &dir, &mut |_, _, _| Ok(())).unwrap();
        assert_eq!(
            (summary.train_rows, summary.validation_rows),
            (3 * 128, 2 * 128)
        );
        let ds = nshade_core::dataset::Dataset::load(&dir).unwrap();
        assert_eq!(ds.train.data.len(), 3 * 128 * 6);
        assert!(
            ds.manifest["sampling"]
                .as_str()
                .unwrap()
                .contains("every pixel")
        );
        for (f, frame) in ds.train.data.chunks_exact(128 * 6).enumerate() {
            let t = f as f32 - 1.0;
            for (i, row) in frame.chunks_exact(6).enumerate() {
                let (x, y) = ((i % 16) as f32, (i / 16) as f32);
                // The shader writes its pixel centre (clamped to [0, 1] by the display).
                let want = [
                    (x + 0.5) / 16.0 * 2.0 - 1.0,
                    (y + 0.5) / 8.0 * 2.0 - 1.0,
                    t,
                    (x + 0.5).min(1.0),
                    (y + 0.5).min(1.0),
                    (f as f32).min(1.0),
                ];
                assert_eq!(row, want, "frame {f} row {i}");
            }
        }
        // The row bound is checked before anything is rendered.
        let huge = CaptureSettings {
            width: 8192,
            height: 8192,
            every_pixel: true,
            ..small()
        };
        let e = huge.validate().unwrap_err().to_string();
        assert!(e.contains("at most 67108864"), "{e}");
    }

    #[test]
    fn capture_writes_rows_the_kotlin_way() {
        let Some(ctx) = context_or_skip() else { return };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ds");
        let src = ShaderSource::new(SourceKind::Wgsl, "o", ORIENT_WGSL);
        let s = CaptureSettings {
            parameter_range: [0.0, 2.0],
            ..small()
        };
        let mut calls = Vec::new();
        let summary = capture(&ctx, &src, &s, &dir, &mut |split, f, n| {
            calls.push((split.to_string(), f, n));
            Ok(())
        })
        .unwrap();
        assert_eq!(calls.len(), 5);
        assert_eq!((summary.train_rows, summary.validation_rows), (15, 10));
        let ds = nshade_core::dataset::Dataset::load(&dir).unwrap();
        assert_eq!(ds.train_info.parameters, [0.0, 1.0, 2.0]);
        assert_eq!(ds.source_digest, src.digest());
        assert_eq!(ds.manifest["sourceKind"], "wgsl-fragment");
        assert_eq!(
            std::fs::read(dir.join("source.wgsl")).unwrap(),
            ORIENT_WGSL.as_bytes()
        );
        assert!(dir.join("vertex.wgsl").is_file());
        // Recompute every row from the Kotlin's recipe.
        let mut r = JavaRandom::new(4090);
        for (rows, training, params) in [
            (&ds.train.data, true, &ds.train_info.parameters),
            (&ds.validation.data, false, &ds.validation_info.parameters),
        ] {
            for (f, &p) in params.iter().enumerate() {
                let pos = frame_position(training, f as u32, params.len() as u32, [0.0, 2.0]);
                assert_eq!(pos.parameter, p);
                for i in 0..5 {
                    let row = &rows[(f * 5 + i) * 6..][..6];
                    let x = r.next_int_bounded(16) as f32;
                    let y = r.next_int_bounded(8) as f32;
                    let want = [
                        (x + 0.5) / 16.0 * 2.0 - 1.0,
                        (y + 0.5) / 8.0 * 2.0 - 1.0,
                        pos.normalized,
                        x + 0.5,
                        y + 0.5,
                        p,
                    ];
                    assert_eq!(row, want);
                }
            }
        }
    }

    #[test]
    fn bad_output_is_refused_and_nothing_written() {
        let Some(ctx) = context_or_skip() else { return };
        let tmp = tempfile::tempdir().unwrap();
        let nan = "struct Params { resolution: vec2<f32>, parameter: f32, _pad: f32 }
@group(0) @binding(0) var<uniform> params: Params;
@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    var g = 0.5;
    if (params.parameter > 0.5 && pos.x > 3.0) { g = sqrt(-1.0 - params.parameter); }
    return vec4<f32>(0.5, g, 0.5, 1.0);
}
";
        let glass = "void mainImage(out vec4 c, in vec2 p) { c = vec4(1.0, 1.0, 1.0, 0.99); }";
        let strict = CaptureSettings {
            semantics: Some(OutputSemantics::Strict),
            ..small()
        };
        for (src, want) in [
            (
                ShaderSource::new(SourceKind::Wgsl, "nan", nan),
                "NaN/Inf at parameter 1 (train frame 2, pixel x=3 y=0, channel g)",
            ),
            (
                ShaderSource::new(SourceKind::ShaderToyGlsl, "glass", glass),
                "not opaque at parameter -1 (train frame 0, pixel x=0 y=0: alpha 0.99)",
            ),
        ] {
            let dir = tmp.path().join(&src.name);
            let e = capture(&ctx, &src, &strict, &dir, &mut |_, _, _| Ok(()))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e:?} should contain {want:?}");
            assert!(!dir.exists());
        }
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
        // A non-empty directory is refused before rendering.
        let full = tmp.path().join("full");
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("x"), b"").unwrap();
        let src = ShaderSource::new(SourceKind::Wgsl, "o", ORIENT_WGSL);
        let e = capture(&ctx, &src, &small(), &full, &mut |_, _, _| {
            panic!("must not render")
        })
        .unwrap_err();
        assert!(e.to_string().contains("not empty"), "{e}");
        // A shader whose interface does not match the pipeline is a compile error, not a panic.
        let wrong = "@fragment fn fs_main(@location(0) uv: vec2<f32>) -> @location(0) vec4<f32> { return vec4<f32>(uv, 0.0, 1.0); }";
        let e = ShaderRenderer::new(&ctx, &ShaderSource::new(SourceKind::Wgsl, "w", wrong), 4, 4)
            .err()
            .expect("mismatched interface must fail")
            .to_string();
        assert!(
            e.starts_with("w: rejected by wgpu") && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn frame_vectors_are_a_seeded_latin_hypercube_apart_from_validation() {
        let ps = [
            Parameter::new("a", [-1.0, 1.0]),
            Parameter::new("b", [0.0, 6.5]),
            Parameter::new("c", [2.0, 3.0]),
        ];
        let (tr, va) = frame_vectors(&ps, 4090, 9, 5);
        assert_eq!((tr.len(), va.len()), (27, 15));
        for (j, p) in ps.iter().enumerate() {
            let col = |v: &[f32]| -> Vec<f32> { v.iter().skip(j).step_by(3).copied().collect() };
            let mut got = col(&tr);
            let mut want: Vec<f32> = (0..9)
                .map(|f| frame_position(true, f, 9, p.range).parameter)
                .collect();
            // The first parameter in order, exactly as schema 1 places it.
            if j == 0 {
                assert_eq!(got, want);
            }
            got.sort_by(f32::total_cmp);
            want.sort_by(f32::total_cmp);
            assert_eq!(got, want, "training values of {}", p.name);
            let mut vgot = col(&va);
            vgot.sort_by(f32::total_cmp);
            let mut vwant: Vec<f32> = (0..5)
                .map(|f| frame_position(false, f, 5, p.range).parameter)
                .collect();
            vwant.sort_by(f32::total_cmp);
            assert_eq!(vgot, vwant, "validation values of {}", p.name);
            assert!(vgot.iter().all(|v| !got.contains(v)), "{}", p.name);
        }
        // Shuffled (not the identity) and fixed by the seed.
        assert_ne!(
            tr.iter().skip(1).step_by(3).copied().collect::<Vec<_>>(),
            (0..9)
                .map(|f| frame_position(true, f, 9, ps[1].range).parameter)
                .collect::<Vec<_>>()
        );
        assert_eq!(frame_vectors(&ps, 4090, 9, 5), (tr.clone(), va));
        assert_ne!(frame_vectors(&ps, 4091, 9, 5).0, tr);
    }

    #[test]
    fn parameter_names_and_slots() {
        let names = |k, n: &[&str]| Slot::for_names(k, n).map_err(|e| e.to_string());
        assert_eq!(
            names(SourceKind::Wgsl, &["light", "time"]),
            Ok(vec![Slot::Wgsl(0), Slot::Wgsl(1)])
        );
        assert_eq!(
            names(SourceKind::ShaderToyGlsl, &["iMouse.y", "iTime"]),
            Ok(vec![Slot::Mouse(1), Slot::Time])
        );
        let e = names(SourceKind::ShaderToyGlsl, &["light"]).unwrap_err();
        assert!(e.contains("parameter 'light': a ShaderToy tab's parameters are named after the inputs they drive: iTime, iMouse.x"), "{e}");
        let settings = |ps: Vec<Parameter>| CaptureSettings {
            parameters: ps,
            ..CaptureSettings::default()
        };
        let err = |ps| settings(ps).validate().unwrap_err().to_string();
        assert_eq!(
            err(vec![
                Parameter::new("a", [0.0, 1.0]),
                Parameter::new("a", [1.0, 2.0])
            ]),
            "parameter 'a' is given twice"
        );
        assert_eq!(
            err(vec![Parameter::new("a", [1.0, 1.0])]),
            "parameter 'a': range 1..1: the start must be below the end"
        );
        assert!(err(vec![Parameter::new("x", [0.0, 1.0])]).contains("x, y, r, g and b"));
        assert!(
            settings(vec![Parameter::new("iTime", [0.0, 1.0])])
                .validate()
                .is_ok()
        );
        assert!(
            !settings(vec![Parameter::new("iTime", [0.0, 1.0])])
                .is_schema2(SourceKind::ShaderToyGlsl)
        );
        assert!(
            settings(vec![Parameter::new("iMouse.x", [0.0, 1.0])])
                .is_schema2(SourceKind::ShaderToyGlsl)
        );
        assert!(!settings(vec![Parameter::new("light", [0.0, 1.0])]).is_schema2(SourceKind::Wgsl));
        assert!(
            settings(vec![
                Parameter::new("a", [0.0, 1.0]),
                Parameter::new("b", [0.0, 1.0])
            ])
            .is_schema2(SourceKind::Wgsl)
        );
    }

    fn glsl(name: &str, text: &str) -> ShaderSource {
        ShaderSource::new(SourceKind::ShaderToyGlsl, name, text)
    }

    fn capture_rows_of(
        ctx: &GpuContext,
        src: &ShaderSource,
        s: &CaptureSettings,
    ) -> Result<CapturedRows, CaptureError> {
        let mut r = ShaderRenderer::new(ctx, src, s.width, s.height)?;
        capture_rows(&mut r, s, &mut |_, _, _| Ok(()))
    }

    #[test]
    fn display_semantics_ignore_alpha_and_clamp() {
        let Some(ctx) = context_or_skip() else { return };
        // A transparent tab is accepted and its RGB captured as written.
        let clear = glsl(
            "clear",
            "void mainImage(out vec4 c, in vec2 p) { c = vec4(0.2, 0.4, 0.6, 0.0); }",
        );
        let rows = capture_rows_of(&ctx, &clear, &small()).unwrap();
        assert_eq!(rows.semantics, OutputSemantics::Display);
        for r in rows
            .train
            .chunks_exact(6)
            .chain(rows.validation.chunks_exact(6))
        {
            assert_eq!(r[3..], [0.2, 0.4, 0.6]);
        }
        assert_eq!(
            rows.train_display.replaced() + rows.train_display.clamped,
            0
        );
        assert_eq!(rows.train_display.values, 3 * 16 * 8 * 3);
        // The same tab under --strict is refused.
        let strict = CaptureSettings {
            semantics: Some(OutputSemantics::Strict),
            ..small()
        };
        let e = capture_rows_of(&ctx, &clear, &strict)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not opaque"), "{e}");
        // Out-of-range colours are clamped: 25718 -> 1, negative -> 0.
        let hot = glsl(
            "hot",
            "void mainImage(out vec4 c, in vec2 p) { c = vec4(25718.0, -3.0, 0.5, 1.0); }",
        );
        let rows = capture_rows_of(&ctx, &hot, &small()).unwrap();
        for r in rows.train.chunks_exact(6) {
            assert_eq!(r[3..], [1.0, 0.0, 0.5]);
        }
        let px = 16 * 8;
        assert_eq!(rows.train_display.clamped, 3 * px * 2);
        assert_eq!(rows.validation_display.clamped, 2 * px * 2);
        // Under strict semantics the HDR value is kept.
        let rows = capture_rows_of(&ctx, &hot, &strict).unwrap();
        assert_eq!(rows.train[3..6], [25718.0, -3.0, 0.5]);
        // A WGSL source takes display semantics when asked (glow-like HDR is clamped).
        let display = CaptureSettings {
            semantics: Some(OutputSemantics::Display),
            ..small()
        };
        let wgsl = ShaderSource::new(SourceKind::Wgsl, "o", ORIENT_WGSL);
        let rows = capture_rows_of(&ctx, &wgsl, &display).unwrap();
        assert!(
            rows.train
                .chunks_exact(6)
                .all(|r| r[3] <= 1.0 && r[4] <= 1.0)
        );
        assert!(rows.train_display.clamped > 0);
    }

    /// NaN in r for the first 3 columns, +Inf in g for the top 2 rows, -Inf in b for the
    /// last 2 columns, r = 2 (clamped) elsewhere, on a 16x8 target.
    const INVALID_GLSL: &str = "#define NAN uintBitsToFloat(0x7fc00000u)
#define INF uintBitsToFloat(0x7f800000u)
void mainImage(out vec4 c, in vec2 p) {
    c = vec4(2.0, 0.25, 0.75, 1.0);
    if (p.x < 3.0) c.r = NAN;
    if (p.y > iResolution.y - 2.0) c.g = INF;
    if (p.x > iResolution.x - 2.0) c.b = -INF;
}
";

    #[test]
    fn display_semantics_count_nan_and_inf() {
        let Some(ctx) = context_or_skip() else { return };
        let rows = capture_rows_of(&ctx, &glsl("invalid", INVALID_GLSL), &small()).unwrap();
        // Per frame: 3 columns x 8 rows NaN, 2 rows x 16 columns +Inf, 2 columns x 8 rows
        // -Inf; r = 2 clamped in the 13 other columns.
        let per = DisplayStats {
            values: 16 * 8 * 3,
            nan: 24,
            pos_inf: 32,
            neg_inf: 16,
            clamped: 13 * 8,
        };
        let times = |n: u64| DisplayStats {
            values: per.values * n,
            nan: per.nan * n,
            pos_inf: per.pos_inf * n,
            neg_inf: per.neg_inf * n,
            clamped: per.clamped * n,
        };
        assert_eq!(rows.train_display, times(3));
        assert_eq!(rows.validation_display, times(2));
        assert_eq!(rows.train_display.replaced(), 3 * 72);
        let mut random = JavaRandom::new(4090);
        for r in rows
            .train
            .chunks_exact(6)
            .chain(rows.validation.chunks_exact(6))
        {
            let x = random.next_int_bounded(16);
            let y = random.next_int_bounded(8);
            let want = [
                if x < 3 { 0.0 } else { 1.0 },
                if y < 2 { 1.0 } else { 0.25 },
                if x >= 14 { 0.0 } else { 0.75 },
            ];
            assert_eq!(r[3..], want, "pixel {x},{y}");
        }
        // The seed's contract refuses it, naming the first bad value.
        let strict = CaptureSettings {
            semantics: Some(OutputSemantics::Strict),
            ..small()
        };
        let e = capture_rows_of(&ctx, &glsl("invalid", INVALID_GLSL), &strict)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("NaN/Inf at parameter -1 (train frame 0, pixel x=0 y=0, channel r)"),
            "{e}"
        );
        // Exactly half the pixels NaN is accepted; more than half is refused, in one line.
        let half = "void mainImage(out vec4 c, in vec2 p) { c = vec4(p.x < 8.0 ? uintBitsToFloat(0x7fc00000u) : 0.5); }";
        let rows = capture_rows_of(&ctx, &glsl("half", half), &small()).unwrap();
        assert_eq!(rows.train_display.nan, 3 * 64 * 3);
        let all = "void mainImage(out vec4 c, in vec2 p) { c = vec4(p.x < 9.0 || iTime > 0.5 ? sqrt(-1.0 - iTime * iTime) : 0.5); }";
        let e = capture_rows_of(&ctx, &glsl("all", all), &small())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the shader produced NaN/Inf in 72 of 128 pixels at parameter -1 (train frame 0); display capture refuses a frame when more than half its pixels are NaN/Inf"
        );
    }

    /// Writes ShaderToy input `k` (the pixel's column) into the colour.
    const INPUTS_GLSL: &str = "void mainImage(out vec4 c, in vec2 p) {
    int k = int(p.x);
    vec3 v = vec3(-7.0);
    if (k == 0) v = iResolution;
    if (k == 1) v = vec3(iTime, iTimeDelta, iFrameRate);
    if (k == 2) v = vec3(float(iFrame), iSampleRate, iGlobalTime);
    if (k == 3) v = iMouse.xyz;
    if (k == 4) v = vec3(iMouse.w, iDate.xy);
    if (k == 5) v = iDate.zww;
    if (k == 6) v = vec3(iChannelTime[0], iChannelTime[1], iChannelTime[2]);
    if (k == 7) v = vec3(iChannelTime[3], float(HW_PERFORMANCE), 0.0);
    if (k >= 8 && k < 12) v = iChannelResolution[k - 8];
#if HW_PERFORMANCE == 0
    if (k == 12) v = vec3(0.0);
#else
    if (k == 12) v = vec3(1.0);
#endif
    c = vec4(v, 1.0);
}
";

    #[test]
    fn shadertoy_inputs_have_the_documented_values() {
        let Some(ctx) = context_or_skip() else { return };
        let r = ShaderRenderer::new(&ctx, &glsl("inputs", INPUTS_GLSL), 13, 2).unwrap();
        for (t, frame) in [(0.7f32, 42.0f32), (-1.25, -75.0), (0.0125, 1.0)] {
            let img = r.render_rgb(t).unwrap();
            // The values docs/capture.md lists, written out here.
            let want: [[f32; 3]; 13] = [
                [13.0, 2.0, 1.0],
                [t, 1.0 / 60.0, 60.0],
                [frame, 44100.0, t],
                [0.0; 3],
                [0.0, 2000.0, 0.0],
                [1.0, 43200.0 + t, 43200.0 + t],
                [0.0; 3],
                [0.0, 1.0, 0.0],
                [0.0; 3],
                [0.0; 3],
                [0.0; 3],
                [0.0; 3],
                [1.0; 3],
            ];
            for y in 0..2 {
                for (k, w) in want.iter().enumerate() {
                    assert_eq!(
                        img.data[(y * 13 + k) * 3..][..3],
                        *w,
                        "input {k} at iTime {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn pasted_tabs_with_their_own_main_and_version() {
        let Some(ctx) = context_or_skip() else { return };
        let tab = "#version 300 es
precision highp float;
uniform vec3 iResolution;
uniform float iGlobalTime;
out vec4 outColor;

void mainImage(out vec4 fragColor, in vec2 fragCoord) {
    fragColor = vec4(fragCoord / iResolution.xy, iGlobalTime, 1.0);
}

void main() {
    mainImage(outColor, gl_FragCoord.xy);
    outColor.a = 1.0;
}
";
        let src = glsl("own_main", tab);
        assert_eq!(
            src.adaptations(),
            [
                "#version (line 1)",
                "its declaration of iResolution (line 3)",
                "its declaration of iGlobalTime (line 4)",
                "the out qualifier of a global (line 5)",
                "its own main() (line 11)"
            ]
        );
        let r = ShaderRenderer::new(&ctx, &src, 4, 2).unwrap();
        let img = r.render_rgb(0.5).unwrap();
        // ShaderToy orientation (y up) and iGlobalTime = iTime.
        assert_eq!(img.data[..3], [0.125, 0.75, 0.5]);
        assert_eq!(img.data[(4 + 3) * 3..][..3], [0.875, 0.25, 0.5]);
        // Errors still name the line in the user's file.
        let broken = tab.replace("iGlobalTime, 1.0", "iGlobalTime, nope");
        let e = compile_err(SourceKind::ShaderToyGlsl, &broken);
        assert!(e.starts_with("test: does not compile: line 8:"), "{e}");
        assert!(e.contains("nope"), "{e}");
    }

    /// Each route of the GLSL front end, with values computed here.
    #[cfg(feature = "glslang")]
    #[test]
    fn glsl_front_end_routes() {
        let Some(ctx) = context_or_skip() else { return };
        // GLSL ES (ShaderToy's dialect): a user function named like a desktop-only
        // built-in (max3), an integer hash with bit operations.
        let es = glsl(
            "es",
            "float max3(float a, float b, float c) { return max(a, max(b, c)); }
uint h(uint x) { x ^= x >> 16; x *= 0x7feb352du; return x; }
void mainImage(out vec4 c, in vec2 p) {
    c = vec4(max3(0.25, p.x / iResolution.x, 0.0), float(h(3u) & 1u), 0.0, 1.0);
}
",
        );
        // Desktop GLSL only: an implicit int -> float conversion.
        let desktop = glsl(
            "desktop",
            "void mainImage(out vec4 c, in vec2 p) {\n    float k = 2;\n    c = vec4(p.x / iResolution.x / k, 0.0, 0.0, 1.0);\n}\n",
        );
        // Valid GLSL that naga's SPIR-V front end does not translate: an infinite
        // constant (naga's validator refuses non-finite literals), an unsized array.
        let spirv = glsl(
            "spirv",
            "const float inf = 1.0 / 0.0;
void mainImage(out vec4 c, in vec2 p) {
    vec2 q[] = vec2[](vec2(0.25), vec2(0.75));
    c = vec4(min(inf, q[1].x), p.y / iResolution.y, 0.0, 1.0);
}
",
        );
        let frontend = |s: &ShaderSource| s.compile().unwrap().frontend;
        assert_eq!(frontend(&es), Frontend::GlslangNaga(Dialect::Es310));
        assert_eq!(frontend(&desktop), Frontend::GlslangNaga(Dialect::Glsl450));
        assert_eq!(frontend(&spirv), Frontend::GlslangSpirV(Dialect::Es310));
        let (w, h) = (4u32, 2u32);
        let px = |x: u32| (x as f32 + 0.5) / w as f32;
        let hash_bit = {
            let mut x = 3u32;
            x ^= x >> 16;
            x = x.wrapping_mul(0x7feb352d);
            (x & 1) as f32
        };
        let img = ShaderRenderer::new(&ctx, &es, w, h)
            .unwrap()
            .render_rgb(0.5)
            .unwrap();
        for x in 0..w {
            assert_eq!(img.data[x as usize * 3..][..2], [px(x).max(0.25), hash_bit]);
        }
        let img = ShaderRenderer::new(&ctx, &desktop, w, h)
            .unwrap()
            .render_rgb(0.5)
            .unwrap();
        for x in 0..w {
            assert_eq!(img.data[x as usize * 3], px(x) / 2.0);
        }
        if ctx.has(wgpu::Features::PASSTHROUGH_SHADERS) {
            let r = ShaderRenderer::new(&ctx, &spirv, w, h).unwrap();
            assert_eq!(r.frontend(), Frontend::GlslangSpirV(Dialect::Es310));
            let img = r.render_rgb(0.5).unwrap();
            // Row 0 is the top; ShaderToy's y is up: fragCoord.y = 1.5 of 2.
            assert_eq!(img.data[..3], [0.75, 0.75, 0.0]);
            assert_eq!(img.data[(w as usize) * 3..][..3], [0.75, 0.25, 0.0]);
        } else {
            let e = ShaderRenderer::new(&ctx, &spirv, w, h)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("PASSTHROUGH_SHADERS"), "{e}");
        }
        // An error in the ES dialect is the one reported, at the user's line.
        let e = compile_err(
            SourceKind::ShaderToyGlsl,
            "void mainImage(out vec4 c, in vec2 p) {\n    c = vec4(1.0);\n    c.x = 1.0\n}\n",
        );
        assert!(e.starts_with("test: does not compile: line 4:"), "{e}");
        // A texture is refused with what capture binds.
        let e = compile_err(
            SourceKind::ShaderToyGlsl,
            "layout(binding = 3) uniform sampler2D iChannel0;\nvoid mainImage(out vec4 c, in vec2 p) { c = texture(iChannel0, p); }\n",
        );
        assert!(
            e.contains("set 0 binding 3") || e.contains("iChannel0"),
            "{e}"
        );
    }
}
