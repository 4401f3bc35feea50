//! The model file (`weights.json`): a trained network with everything needed to evaluate
//! it elsewhere. `docs/model-format.md` documents every field; keep the two in step.
//! Grid tables and very large tensors live in a binary sidecar beside it
//! (`weights.safetensors`, see [`crate::sidecar`]); models without them are one file.

use crate::activation::Activation;
use crate::arch::Arch;
use crate::limits::{self, one_line, quote};
use crate::module::{Layer, Module, TensorInfo};
use crate::network::Network;
use crate::sidecar;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The `format` field of every model file.
pub const FORMAT: &str = "nshade-model";
/// The `version` this build writes and reads.
pub const VERSION: u32 = 1;

/// Errors of reading and writing model files. The message is complete on its own (the
/// underlying error is part of it, not a separate `source`, so an error chain printed
/// with `{:#}` does not repeat it).
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read model {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("model {path} is not valid JSON: {error}")]
    Json {
        path: String,
        error: serde_json::Error,
    },
    #[error("model {path}: {message}")]
    Invalid { path: String, message: String },
    #[error("cannot write model {path}: {error}")]
    Write { path: String, error: std::io::Error },
    #[error("model {path}: cannot read its sidecar {sidecar}: {error}")]
    SidecarRead {
        path: String,
        sidecar: String,
        error: std::io::Error,
    },
}

/// The sidecar's name beside a `weights.json` written by [`Model::save`] to that name.
pub const SIDECAR_FILE: &str = "weights.safetensors";

/// What the inputs mean and how they are mapped before the network sees them:
/// `x_network = x · scale + offset`, per input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputSpec {
    /// Names of the inputs, e.g. `["u", "v"]` or `["x", "y", "t"]`.
    pub names: Vec<String>,
    /// The range each input is trained on, `[lo, hi]`.
    pub domain: Vec<[f32; 2]>,
    pub scale: Vec<f32>,
    pub offset: Vec<f32>,
    /// A sentence stating the coordinate convention.
    pub convention: String,
}

impl InputSpec {
    /// Texture coordinates: (u, v) ∈ [0, 1], u right, v down.
    pub fn uv() -> InputSpec {
        InputSpec {
            names: vec!["u".into(), "v".into()],
            domain: vec![[0.0, 1.0], [0.0, 1.0]],
            scale: vec![1.0, 1.0],
            offset: vec![0.0, 0.0],
            convention: "texture coordinates: u right, v down, pixel (x, y) of a WxH image at ((x + 0.5) / W, (y + 0.5) / H)".into(),
        }
    }

    /// Seed-002 dataset coordinates: (x, y, t) ∈ [−1, 1], x right, y down.
    pub fn xyt() -> InputSpec {
        InputSpec {
            names: vec!["x".into(), "y".into(), "t".into()],
            domain: vec![[-1.0, 1.0]; 3],
            scale: vec![1.0; 3],
            offset: vec![0.0; 3],
            convention: "pixel centres normalised to [-1, 1], x right, y down; t is the capture parameter normalised to [-1, 1]".into(),
        }
    }

    /// Checks the names and the convention against the rules every model file follows
    /// (see [`check_name`]; the convention: at most [`limits::MAX_CONVENTION_LEN`]
    /// characters, none of them a control character, a line or paragraph separator or a
    /// bidirectional override).
    pub fn check(&self) -> Result<(), String> {
        for n in &self.names {
            check_name(n).map_err(|e| format!("input name {e}"))?;
        }
        let c = &self.convention;
        if c.chars().count() > limits::MAX_CONVENTION_LEN {
            return Err(format!(
                "the convention is longer than {} characters",
                limits::MAX_CONVENTION_LEN
            ));
        }
        if let Some(bad) = c.chars().find(|c| limits::is_unsafe_char(*c)) {
            return Err(format!(
                "the convention holds the character {} (no control characters, line breaks or direction overrides)",
                bad.escape_default()
            ));
        }
        Ok(())
    }

    /// Applies `x · scale + offset` in place to rows of `names.len()` values.
    pub fn apply(&self, x: &mut [f32]) {
        if self.scale.iter().all(|s| *s == 1.0) && self.offset.iter().all(|o| *o == 0.0) {
            return;
        }
        let d = self.names.len();
        for row in x.chunks_exact_mut(d) {
            for ((v, s), o) in row.iter_mut().zip(&self.scale).zip(&self.offset) {
                *v = *v * s + o;
            }
        }
    }
}

/// Checks an input or output name: 1 to [`limits::MAX_NAME_LEN`] characters, each an
/// ASCII letter, digit, `_`, `.` or `-` (names reach generated shader comments and file
/// headers, so nothing else is accepted). The error starts with the name, quoted.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= limits::MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{}' is not allowed: names are 1 to {} ASCII letters, digits, '_', '.' or '-'",
            quote(name),
            limits::MAX_NAME_LEN
        ))
    }
}

/// A trained model: network, parameters, input meaning, provenance and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub network: Network,
    pub params: Vec<f32>,
    pub inputs: InputSpec,
    /// Names of the outputs, e.g. `["r", "g", "b"]`.
    pub outputs: Vec<String>,
    /// Training provenance (arch, seed, steps, loss, data digest, ...): free-form JSON.
    pub training: Map<String, Value>,
    /// Quality metrics (loss, PSNR, ...): free-form JSON.
    pub metrics: Map<String, Value>,
}

impl Model {
    pub fn new(network: Network, params: Vec<f32>, inputs: InputSpec) -> Model {
        let outputs = if network.out_dims == 3 {
            vec!["r".into(), "g".into(), "b".into()]
        } else {
            (0..network.out_dims).map(|i| format!("y{i}")).collect()
        };
        Model {
            network,
            params,
            inputs,
            outputs,
            training: Map::new(),
            metrics: Map::new(),
        }
    }

    /// Evaluates rows of raw inputs (before the input mapping) on the CPU.
    pub fn eval(&self, x: &[f32]) -> Vec<f32> {
        let mut x = x.to_vec();
        self.inputs.apply(&mut x);
        self.network.eval(&self.params, &x)
    }

    /// Whether tensor `t` is stored in the sidecar: every grid table (the parameters after
    /// [`Network::dense_count`]) and every tensor of at least [`sidecar::MIN_VALUES`] values.
    pub fn in_sidecar(&self, t: &TensorInfo) -> bool {
        t.offset >= self.network.dense_count || t.len() >= sidecar::MIN_VALUES
    }

    /// Whether saving this model writes a sidecar beside the JSON.
    pub fn has_sidecar(&self) -> bool {
        self.network.tensors().iter().any(|t| self.in_sidecar(t))
    }

    /// The model file as JSON, naming its sidecar (if it has one) [`SIDECAR_FILE`].
    pub fn to_json(&self) -> Value {
        self.to_files(SIDECAR_FILE).0
    }

    /// The model file as JSON and, for a model with grid tables or huge tensors, the bytes
    /// of its sidecar, which the JSON names `sidecar_file` (relative to the JSON's
    /// directory). Both are the same bytes for the same model.
    pub fn to_files(&self, sidecar_file: &str) -> (Value, Option<Vec<u8>>) {
        let all = self.network.tensors();
        let values = |t: &TensorInfo| &self.params[t.offset..t.offset + t.len()];
        let stored: Vec<&TensorInfo> = all.iter().filter(|t| self.in_sidecar(t)).collect();
        let encoded = (!stored.is_empty()).then(|| {
            sidecar::encode(
                &stored
                    .iter()
                    .map(|t| sidecar::Tensor {
                        name: &t.name,
                        shape: &t.shape,
                        values: values(t),
                    })
                    .collect::<Vec<_>>(),
            )
        });
        let mut spans = stored.iter().zip(encoded.iter().flat_map(|e| &e.spans));
        let tensors: Vec<Value> = all
            .iter()
            .map(|t| {
                let order = if t.offset >= self.network.dense_count {
                    "row-major [entry][feature]"
                } else if t.shape.len() == 2 {
                    "row-major [out][in]"
                } else {
                    "vector"
                };
                if self.in_sidecar(t) {
                    let (_, span) = spans.next().expect("one span per sidecar tensor");
                    json!({
                        "name": t.name, "shape": t.shape, "order": order, "offset": t.offset,
                        "sidecar": {"byte_offset": span.byte_offset, "byte_length": span.byte_length},
                    })
                } else {
                    json!({
                        "name": t.name,
                        "shape": t.shape,
                        "order": order,
                        "offset": t.offset,
                        "values": values(t),
                    })
                }
            })
            .collect();
        let mut v = json!({
            "format": FORMAT,
            "version": VERSION,
            "input_dims": self.network.in_dims,
            "output_dims": self.network.out_dims,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "arch": self.network.arch.to_string(),
            "arch_tree": self.network.arch.to_json(),
            "network": describe(&self.network.root),
            "param_count": self.network.param_count,
            "tensors": tensors,
            "training": self.training,
            "metrics": self.metrics,
        });
        if let Some(e) = &encoded {
            v["sidecar"] = json!({
                "file": sidecar_file, "format": sidecar::FORMAT,
                "bytes": e.bytes.len(), "sha256": e.sha256,
            });
        }
        (v, encoded.map(|e| e.bytes))
    }

    /// The model file's text: pretty JSON with each tensor's values on one line.
    pub fn to_json_string(&self) -> String {
        json_text(&self.to_json())
    }

    /// The sidecar path of the model file `path`: the same name with the extension
    /// `.safetensors` (`weights.json` → `weights.safetensors`).
    pub fn sidecar_path(path: &Path) -> PathBuf {
        path.with_extension("safetensors")
    }

    /// Writes the model file and, if the model has one, its sidecar ([`Model::sidecar_path`]),
    /// each atomically (temporary sibling, then rename): the sidecar first and the JSON
    /// last, so the JSON never names a sidecar that is not there yet.
    pub fn save(&self, path: &Path) -> Result<(), ModelError> {
        let werr = |p: &Path, e| ModelError::Write {
            path: p.display().to_string(),
            error: e,
        };
        if let Err(m) = self.check_strings() {
            return Err(werr(
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidInput, m),
            ));
        }
        let side = Model::sidecar_path(path);
        let name = side
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| side != path && sidecar::check_file_name(n).is_ok())
            .map(str::to_owned);
        if self.has_sidecar() && name.is_none() {
            return Err(werr(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a model with a sidecar needs a UTF-8 file name without ':' that does not end in .safetensors",
                ),
            ));
        }
        let (json, bytes) = self.to_files(name.as_deref().unwrap_or(SIDECAR_FILE));
        if let Some(bytes) = bytes {
            crate::fsutil::write_atomic(&side, &bytes).map_err(|e| werr(&side, e))?;
        }
        crate::fsutil::write_atomic(path, json_text(&json).as_bytes()).map_err(|e| werr(path, e))
    }

    /// `path` itself if it is a file, else `path/weights.json`.
    pub fn resolve_path(path: &Path) -> PathBuf {
        if path.is_dir() {
            path.join("weights.json")
        } else {
            path.to_path_buf()
        }
    }

    /// Loads and validates a model file (or a directory holding `weights.json`) and the
    /// sidecar it names, if any.
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        let file = Model::resolve_path(path);
        let p = file.display().to_string();
        let read_err = |error| ModelError::Read {
            path: p.clone(),
            error,
        };
        let bytes = limits::read_bounded(&file, limits::MAX_MODEL_JSON_BYTES).map_err(|e| {
            read_err(match e {
                limits::ReadError::Io(e) => e,
                e => std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    e.describe(limits::MAX_MODEL_JSON_BYTES),
                ),
            })
        })?;
        let text = std::str::from_utf8(&bytes).map_err(|e| {
            read_err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not UTF-8 text ({e})"),
            ))
        })?;
        let value: Value =
            serde_json::from_str(limits::strip_bom(text)).map_err(|e| ModelError::Json {
                path: p.clone(),
                error: e,
            })?;
        drop(bytes);
        let invalid = |message: String| ModelError::Invalid {
            path: p.clone(),
            message: one_line(&message),
        };
        let bytes = match declared_sidecar(&value).map_err(invalid)? {
            Some(d) => {
                let side = file.with_file_name(&d.file);
                Some(
                    read_sidecar(&side, d.bytes).map_err(|e| ModelError::SidecarRead {
                        path: p.clone(),
                        sidecar: side.display().to_string(),
                        error: e,
                    })?,
                )
            }
            None => None,
        };
        Model::from_json_and_sidecar(&value, bytes.as_deref()).map_err(invalid)
    }

    /// Validates and builds a model from its JSON alone; a model whose JSON names a sidecar
    /// needs [`Model::from_json_and_sidecar`] (or [`Model::load`]).
    pub fn from_json(v: &Value) -> Result<Model, String> {
        Model::from_json_and_sidecar(v, None)
    }

    /// Validates and builds a model from its JSON and the bytes of the sidecar it names
    /// (if any); the error, one line, says which field or which part of the sidecar is
    /// wrong. Memory is allocated only in proportion to what `v` and the sidecar hold.
    pub fn from_json_and_sidecar(v: &Value, sidecar_bytes: Option<&[u8]>) -> Result<Model, String> {
        Model::from_json_checked(v, sidecar_bytes).map_err(|e| one_line(&e))
    }

    /// The names, the convention and the free-form fields against the rules of
    /// [`check_name`], [`InputSpec::check`] and [`limits::MAX_FREE_JSON_DEPTH`] (what
    /// loading checks and saving refuses to break).
    pub fn check_strings(&self) -> Result<(), String> {
        self.inputs
            .check()
            .map_err(|e| format!("field 'inputs': {e}"))?;
        for n in &self.outputs {
            check_name(n).map_err(|e| format!("field 'outputs': output name {e}"))?;
        }
        for (k, m) in [("training", &self.training), ("metrics", &self.metrics)] {
            let depth = m
                .values()
                .map(|v| limits::json_depth(v, limits::MAX_FREE_JSON_DEPTH))
                .max()
                .unwrap_or(0);
            if depth + 1 > limits::MAX_FREE_JSON_DEPTH {
                return Err(format!(
                    "field '{k}' nests more than {} levels deep (the limit)",
                    limits::MAX_FREE_JSON_DEPTH
                ));
            }
        }
        Ok(())
    }

    fn from_json_checked(v: &Value, sidecar_bytes: Option<&[u8]>) -> Result<Model, String> {
        let obj = v.as_object().ok_or("the top level must be a JSON object")?;
        let field = |k: &str| obj.get(k).ok_or_else(|| format!("missing field '{k}'"));
        if field("format")?.as_str() != Some(FORMAT) {
            return Err(format!("field 'format' must be \"{FORMAT}\""));
        }
        let version = field("version")?
            .as_u64()
            .ok_or("field 'version' must be a number")?;
        if version != VERSION as u64 {
            return Err(format!(
                "version {version} is not supported (this build reads version {VERSION})"
            ));
        }
        let dims = |k: &str| -> Result<usize, String> {
            field(k)?
                .as_u64()
                .filter(|d| (1..=4096).contains(d))
                .map(|d| d as usize)
                .ok_or_else(|| format!("field '{k}' must be a whole number in 1..=4096"))
        };
        let (in_dims, out_dims) = (dims("input_dims")?, dims("output_dims")?);
        let arch_text = field("arch")?
            .as_str()
            .ok_or("field 'arch' must be a string")?;
        let arch = Arch::parse(arch_text).map_err(|e| format!("field 'arch': {e}"))?;
        // Two JSON levels per module (the node and its `modules` list), plus the leaves.
        let tree = field("arch_tree")?;
        if limits::json_depth(tree, 2 * limits::MAX_DEPTH + 2) > 2 * limits::MAX_DEPTH + 1 {
            return Err(format!(
                "field 'arch_tree': modules nest more than {} levels deep (the limit)",
                limits::MAX_DEPTH
            ));
        }
        let tree: Arch =
            serde_json::from_value(tree.clone()).map_err(|e| format!("field 'arch_tree': {e}"))?;
        if tree != arch {
            return Err("fields 'arch' and 'arch_tree' describe different architectures".into());
        }
        let network =
            Network::build(&arch, in_dims, out_dims).map_err(|e| format!("field 'arch': {e}"))?;
        if field("network")? != &describe(&network.root) {
            return Err("field 'network' does not match the architecture and widths".into());
        }
        if field("param_count")?.as_u64() != Some(network.param_count as u64) {
            return Err(format!(
                "field 'param_count' must be {}",
                network.param_count
            ));
        }
        let inputs: InputSpec = serde_json::from_value(field("inputs")?.clone())
            .map_err(|e| format!("field 'inputs': {e}"))?;
        if inputs.names.len() != in_dims
            || inputs.scale.len() != in_dims
            || inputs.offset.len() != in_dims
            || inputs.domain.len() != in_dims
        {
            return Err(format!("field 'inputs' must describe {in_dims} inputs"));
        }
        if inputs
            .scale
            .iter()
            .chain(&inputs.offset)
            .chain(inputs.domain.iter().flatten())
            .any(|v| !v.is_finite())
        {
            return Err("field 'inputs' holds a non-finite number".into());
        }
        let outputs: Vec<String> = serde_json::from_value(field("outputs")?.clone())
            .map_err(|e| format!("field 'outputs': {e}"))?;
        if outputs.len() != out_dims {
            return Err(format!("field 'outputs' must name {out_dims} outputs"));
        }
        inputs.check().map_err(|e| format!("field 'inputs': {e}"))?;
        for n in &outputs {
            check_name(n).map_err(|e| format!("field 'outputs': output name {e}"))?;
        }
        let tensors = field("tensors")?
            .as_array()
            .ok_or("field 'tensors' must be an array")?;
        let expected = network.tensors();
        if tensors.len() != expected.len() {
            return Err(format!(
                "field 'tensors' must hold {} tensors, found {}",
                expected.len(),
                tensors.len()
            ));
        }
        let declared = declared_sidecar(v)?;
        // First every tensor's description (and inline values) is checked, then the
        // parameter vector is allocated: only once the JSON and the sidecar are known to
        // hold all of its values, so a small file cannot make it allocate much.
        let mut inline: Vec<(&[Value], usize)> = Vec::new();
        // tensors stored in the sidecar, and where each goes in `params`
        let mut wanted: Vec<sidecar::Wanted<'_>> = Vec::new();
        let mut wanted_at: Vec<usize> = Vec::new();
        let mut sidecar_values = 0u64;
        for (t, e) in tensors.iter().zip(&expected) {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            if name != e.name {
                return Err(format!(
                    "tensor '{}' found where '{}' was expected",
                    quote(name),
                    e.name
                ));
            }
            let shape: Option<Vec<usize>> = t
                .get("shape")
                .and_then(|s| serde_json::from_value(s.clone()).ok());
            if shape.as_ref() != Some(&e.shape) {
                return Err(format!("tensor '{name}' must have shape {:?}", e.shape));
            }
            if t.get("offset").and_then(Value::as_u64) != Some(e.offset as u64) {
                return Err(format!("tensor '{name}' must have offset {}", e.offset));
            }
            if let Some(place) = t.get("sidecar") {
                if t.get("values").is_some() {
                    return Err(format!("tensor '{name}' has both 'values' and 'sidecar'"));
                }
                let Some(d) = &declared else {
                    return Err(format!(
                        "tensor '{name}' is in a sidecar but the model names none (field 'sidecar' is missing)"
                    ));
                };
                let num = |k: &str| {
                    place.get(k).and_then(Value::as_u64).ok_or_else(|| {
                        format!("tensor '{name}': field 'sidecar.{k}' must be a whole number")
                    })
                };
                let span = sidecar::Span {
                    byte_offset: num("byte_offset")?,
                    byte_length: num("byte_length")?,
                };
                if span.byte_length != 4 * e.len() as u64 {
                    return Err(format!(
                        "tensor '{name}': field 'sidecar.byte_length' must be {} (4 bytes per value)",
                        4 * e.len()
                    ));
                }
                if span.byte_offset.saturating_add(span.byte_length) > d.bytes {
                    return Err(format!(
                        "tensor '{name}': its sidecar bytes end past the sidecar's {} bytes",
                        d.bytes
                    ));
                }
                sidecar_values += e.len() as u64;
                wanted.push(sidecar::Wanted {
                    name: &e.name,
                    shape: &e.shape,
                    span,
                });
                wanted_at.push(e.offset);
                continue;
            }
            let values = t
                .get("values")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("tensor '{name}' has no 'values' array"))?;
            if values.len() != e.len() {
                return Err(format!(
                    "tensor '{name}' must hold {} values, found {}",
                    e.len(),
                    values.len()
                ));
            }
            for (i, v) in values.iter().enumerate() {
                let f = v
                    .as_f64()
                    .ok_or_else(|| format!("tensor '{name}' value {i} is not a number"))?
                    as f32;
                if !f.is_finite() {
                    return Err(format!("tensor '{name}' value {i} is not finite"));
                }
            }
            inline.push((values, e.offset));
        }
        let sidecar_bytes = match &declared {
            Some(d) => {
                if wanted.is_empty() {
                    return Err(format!(
                        "field 'sidecar' names '{}' but no tensor is stored there",
                        d.file
                    ));
                }
                let bytes = sidecar_bytes.ok_or_else(|| {
                    format!(
                        "the tensors in sidecar '{}' were not read (load the model from its file)",
                        d.file
                    )
                })?;
                sidecar::check_length(bytes, d).map_err(|m| format!("sidecar {}: {m}", d.file))?;
                if 4 * sidecar_values > d.bytes {
                    return Err(format!(
                        "sidecar {}: the tensors placed there need {} bytes, more than its {}",
                        d.file,
                        4 * sidecar_values,
                        d.bytes
                    ));
                }
                Some((d, bytes))
            }
            None => None,
        };
        let mut params = vec![0.0f32; network.param_count];
        for (values, offset) in inline {
            for (p, v) in params[offset..].iter_mut().zip(values) {
                *p = v.as_f64().unwrap_or(0.0) as f32;
            }
        }
        if let Some((d, bytes)) = sidecar_bytes {
            sidecar::read(bytes, d, &wanted, |i, values| {
                for (p, v) in params[wanted_at[i]..].iter_mut().zip(values) {
                    *p = v;
                }
            })
            .map_err(|m| format!("sidecar {}: {m}", d.file))?;
        }
        let map = |k: &str| {
            obj.get(k)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let model = Model {
            network,
            params,
            inputs,
            outputs,
            training: map("training"),
            metrics: map("metrics"),
        };
        model.check_strings()?;
        Ok(model)
    }
}

/// Reads a sidecar that the model file says is `bytes` long: a regular file of exactly
/// that length (checked before reading, so a wrong or special file is not read whole).
fn read_sidecar(path: &Path, bytes: u64) -> Result<Vec<u8>, std::io::Error> {
    let other = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(other("not a regular file".into()));
    }
    if meta.len() != bytes {
        return Err(other(format!(
            "it is {} bytes but the model file says {bytes} (truncated or replaced?)",
            meta.len()
        )));
    }
    match limits::read_bounded(path, bytes) {
        Ok(b) => Ok(b),
        Err(limits::ReadError::Io(e)) => Err(e),
        Err(e) => Err(other(e.describe(bytes))),
    }
}

/// The top-level `sidecar` field, checked: `{file, format, bytes, sha256}`, or `None`.
fn declared_sidecar(v: &Value) -> Result<Option<sidecar::Declared>, String> {
    let Some(s) = v.get("sidecar") else {
        return Ok(None);
    };
    let file = s
        .get("file")
        .and_then(Value::as_str)
        .ok_or("field 'sidecar.file' must be a string")?;
    sidecar::check_file_name(file).map_err(|e| format!("field 'sidecar.file': {e}"))?;
    if s.get("format").and_then(Value::as_str) != Some(sidecar::FORMAT) {
        return Err(format!(
            "field 'sidecar.format' must be \"{}\"",
            sidecar::FORMAT
        ));
    }
    let bytes = s
        .get("bytes")
        .and_then(Value::as_u64)
        .ok_or("field 'sidecar.bytes' must be a whole number")?;
    if bytes > limits::MAX_SIDECAR_BYTES {
        return Err(format!(
            "field 'sidecar.bytes' is {bytes}, more than the limit of {}",
            limits::MAX_SIDECAR_BYTES
        ));
    }
    let sha256 = s
        .get("sha256")
        .and_then(Value::as_str)
        .filter(|h| h.len() == 64 && h.bytes().all(|c| c.is_ascii_hexdigit()))
        .ok_or("field 'sidecar.sha256' must be 64 hexadecimal digits")?;
    Ok(Some(sidecar::Declared {
        file: file.to_owned(),
        bytes,
        sha256: sha256.to_ascii_lowercase(),
    }))
}

/// Pretty JSON text of a model file, newline-terminated.
fn json_text(v: &Value) -> String {
    let mut s = String::new();
    write_json(v, 0, &mut s);
    s.push('\n');
    s
}

/// The resolved module tree with widths, as stored in the `network` field.
pub fn describe(m: &Module) -> Value {
    let act = |a: &Activation| serde_json::to_value(a).expect("activation serialises");
    match m {
        Module::Identity(i) => json!({"type": "identity", "in": i.dims, "out": i.dims}),
        Module::Frequency(f) => {
            json!({"type": "freq", "in": f.in_dims, "out": f.out_dims(), "octaves": f.octaves})
        }
        Module::Triangle(t) => {
            json!({"type": "tri", "in": t.in_dims, "out": t.out_dims(), "octaves": t.octaves})
        }
        Module::Mlp(mlp) => json!({
            "type": "mlp", "in": mlp.in_dims(), "out": mlp.out_dims(),
            "layers": mlp.layers.iter().map(|l| json!({
                "in": l.in_dims, "out": l.out_dims, "activation": act(&l.act),
                "weight_offset": l.weight, "bias_offset": l.bias,
            })).collect::<Vec<_>>(),
        }),
        Module::Chain(c) => {
            json!({"type": "chain", "in": c.in_dims(), "out": c.out_dims(), "stages": c.stages.iter().map(describe).collect::<Vec<_>>()})
        }
        Module::Cat(c) => {
            json!({"type": "cat", "in": c.in_dims(), "out": c.out_dims(), "children": c.children.iter().map(describe).collect::<Vec<_>>()})
        }
        Module::Grid(g) => json!({
            "type": if g.hash { "hashgrid" } else { "densegrid" },
            "in": g.in_dims, "out": g.out_dims(), "features": g.features,
            "min": g.min, "max": g.max,
            "levels": g.levels.iter().map(|l| json!({
                "res": l.res, "entries": l.entries, "hashed": l.hashed, "offset": l.offset,
            })).collect::<Vec<_>>(),
        }),
        Module::OneBlob(o) => {
            json!({"type": "oneblob", "in": o.in_dims, "out": o.out_dims(), "bins": o.bins, "min": o.min, "max": o.max})
        }
        Module::SphericalHarmonics(h) => {
            json!({"type": "sh", "in": 3, "out": h.out_dims(), "degree": h.degree})
        }
        Module::Pick(p) => {
            json!({"type": "pick", "in": p.in_dims, "out": p.out_dims(), "indices": p.indices})
        }
    }
}

/// Pretty JSON, two-space indent, arrays of plain numbers kept on one line.
fn write_json(v: &Value, indent: usize, out: &mut String) {
    let pad = |n: usize| "  ".repeat(n);
    match v {
        Value::Object(map) if !map.is_empty() => {
            out.push_str("{\n");
            for (i, (k, val)) in map.iter().enumerate() {
                out.push_str(&pad(indent + 1));
                out.push_str(&serde_json::to_string(k).expect("string"));
                out.push_str(": ");
                write_json(val, indent + 1, out);
                if i + 1 < map.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            out.push_str(&pad(indent));
            out.push('}');
        }
        Value::Array(items) if !items.is_empty() && !items.iter().all(|x| x.is_number()) => {
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                out.push_str(&pad(indent + 1));
                write_json(item, indent + 1, out);
                if i + 1 < items.len() {
                    out.push(',');
                }
                out.push('\n');
            }
            out.push_str(&pad(indent));
            out.push(']');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&serde_json::to_string(item).expect("number"));
            }
            out.push(']');
        }
        _ => out.push_str(&serde_json::to_string(v).expect("scalar")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(arch: &str) -> Model {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let params = net.init_params(11);
        let mut m = Model::new(net, params, InputSpec::uv());
        m.training.insert("seed".into(), json!(11));
        m
    }

    #[test]
    fn save_load_round_trip_gives_identical_outputs() {
        for arch in [
            "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
            "cat(identity, tri(2), freq(1)) | mlp(8x2, sine(3), softplus)",
            "mlp(4x0, none)",
            "cat(pick(0) | oneblob(8), pick(1, 0, 1) | sh(3), pick(1) | freq(2)) | mlp(8x1, relu)",
            "oneblob(3) | mlp(4x1, tanh)",
        ] {
            let m = model(arch);
            let text = m.to_json_string();
            let back = Model::from_json(&serde_json::from_str(&text).unwrap()).unwrap();
            assert_eq!(back, m);
            assert_eq!(back.to_json_string(), text);
            let x: Vec<f32> = (0..200).map(|i| i as f32 / 200.0).collect();
            assert_eq!(back.eval(&x), m.eval(&x));
        }
    }

    const GRID: &str =
        "hashgrid(levels=4, features=2, log2_size=6, base=4, scale=2) | mlp(8x1, relu)";

    fn grid_model() -> Model {
        let mut m = model(GRID);
        // distinct, non-tiny table values so that a mix-up of tensors changes outputs
        for (i, p) in m.params[m.network.dense_count..].iter_mut().enumerate() {
            *p = ((i * 37 % 101) as f32 - 50.0) * 0.02;
        }
        m
    }

    fn read_err(e: ModelError) -> String {
        let s = e.to_string();
        assert!(!s.contains('\n'), "one line: {s}");
        s
    }

    #[test]
    fn models_without_grids_stay_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let m = model("freq(3) | mlp(32x3, leaky_relu, sigmoid)");
        assert!(!m.has_sidecar());
        let path = dir.path().join("weights.json");
        m.save(&path).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["weights.json"]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, m.to_json_string());
        assert!(!text.contains("sidecar"));
        assert_eq!(Model::load(dir.path()).unwrap(), m);
    }

    #[test]
    fn grid_tables_go_to_the_sidecar_and_load_back_identically() {
        let dir = tempfile::tempdir().unwrap();
        let m = grid_model();
        assert!(m.has_sidecar());
        let path = dir.path().join("weights.json");
        m.save(&path).unwrap();
        let side = dir.path().join("weights.safetensors");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let bytes = std::fs::read(&side).unwrap();
        assert_eq!(v["sidecar"]["file"], "weights.safetensors");
        assert_eq!(v["sidecar"]["format"], "safetensors");
        assert_eq!(v["sidecar"]["bytes"], bytes.len());
        use sha2::Digest;
        assert_eq!(
            v["sidecar"]["sha256"],
            crate::texture::hex(&sha2::Sha256::digest(&bytes))
        );
        // dense tensors inline, every level table in the sidecar, nothing else there
        let tensors = v["tensors"].as_array().unwrap();
        let levels: Vec<&Value> = tensors
            .iter()
            .filter(|t| t["name"].as_str().unwrap().starts_with("0.levels."))
            .collect();
        assert_eq!(levels.len(), 4);
        for t in tensors {
            let is_level = t["name"].as_str().unwrap().starts_with("0.levels.");
            assert_eq!(t.get("sidecar").is_some(), is_level, "{t}");
            assert_eq!(t.get("values").is_none(), is_level, "{t}");
        }
        // the byte range in weights.json holds the table's values
        let l1 = levels[1];
        assert_eq!(l1["order"], "row-major [entry][feature]");
        assert_eq!(l1["shape"], json!([64, 2]));
        let at = l1["sidecar"]["byte_offset"].as_u64().unwrap() as usize;
        let off = l1["offset"].as_u64().unwrap() as usize;
        let stored: Vec<f32> = bytes[at..at + 64 * 2 * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(stored, m.params[off..off + 128]);

        let back = Model::load(&path).unwrap();
        assert_eq!(back, m);
        let x: Vec<f32> = (0..400).map(|i| (i as f32 * 0.137).fract()).collect();
        assert_eq!(back.eval(&x), m.eval(&x));
        // saving again gives the same bytes (also through a directory path)
        let again = tempfile::tempdir().unwrap();
        back.save(&again.path().join("weights.json")).unwrap();
        for f in ["weights.json", "weights.safetensors"] {
            assert_eq!(
                std::fs::read(dir.path().join(f)).unwrap(),
                std::fs::read(again.path().join(f)).unwrap(),
                "{f}"
            );
        }
        // another file name gets its own sidecar name
        let other = dir.path().join("model.json");
        m.save(&other).unwrap();
        assert!(dir.path().join("model.safetensors").is_file());
        assert_eq!(Model::load(&other).unwrap(), m);
        assert!(m.save(&dir.path().join("x.safetensors")).is_err());
        assert!(m.save(&dir.path().join("a:b.json")).is_err());
    }

    #[test]
    fn huge_dense_tensors_go_to_the_sidecar_too() {
        // a 1024x1024 hidden layer holds exactly sidecar::MIN_VALUES weights
        let m = model("mlp(1024x2, relu)");
        let (v, bytes) = m.to_files("w.safetensors");
        assert!(bytes.is_some());
        let t = &v["tensors"];
        assert!(t[0].get("values").is_some(), "[1024, 2] stays inline");
        assert_eq!(t[2]["name"], "layers.1.weight");
        assert_eq!(t[2]["order"], "row-major [out][in]");
        assert!(t[2].get("sidecar").is_some());
        assert_eq!(
            Model::from_json_and_sidecar(&v, bytes.as_deref()).unwrap(),
            m
        );
    }

    #[test]
    fn a_broken_sidecar_is_reported_in_one_line_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let m = grid_model();
        let path = dir.path().join("weights.json");
        let side = dir.path().join("weights.safetensors");
        m.save(&path).unwrap();
        let good = std::fs::read(&side).unwrap();

        // tampered: one byte of a table changed
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 3] ^= 0x40;
        std::fs::write(&side, &bad).unwrap();
        let e = read_err(Model::load(dir.path()).unwrap_err());
        assert!(
            e.contains("sidecar weights.safetensors: sha256 mismatch"),
            "{e}"
        );
        assert!(e.contains(&path.display().to_string()), "{e}");

        // truncated
        std::fs::write(&side, &good[..n - 8]).unwrap();
        let e = read_err(Model::load(&path).unwrap_err());
        assert!(
            e.contains(&format!("is {} bytes but the model file says {n}", n - 8)),
            "{e}"
        );

        // missing
        std::fs::remove_file(&side).unwrap();
        let e = read_err(Model::load(&path).unwrap_err());
        assert!(
            e.contains(&format!("cannot read its sidecar {}", side.display())),
            "{e}"
        );

        // JSON alone cannot give the tables
        let (v, bytes) = m.to_files(SIDECAR_FILE);
        let e = Model::from_json(&v).unwrap_err();
        assert!(e.contains("were not read"), "{e}");
        assert_eq!(
            Model::from_json_and_sidecar(&v, bytes.as_deref()).unwrap(),
            m
        );
    }

    #[test]
    fn inconsistent_sidecar_fields_are_reported() {
        let m = grid_model();
        let (good, bytes) = m.to_files(SIDECAR_FILE);
        let bytes = bytes.unwrap();
        let level = good["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .position(|t| t["name"] == "0.levels.2")
            .unwrap();
        type Tamper = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Tamper, &str)> = vec![
            (
                Box::new(|v| v["sidecar"]["file"] = json!("../w.safetensors")),
                "not a plain file name",
            ),
            (
                Box::new(|v| v["sidecar"]["format"] = json!("npy")),
                "sidecar.format",
            ),
            (
                Box::new(|v| v["sidecar"]["sha256"] = json!("abc")),
                "64 hexadecimal digits",
            ),
            (
                Box::new(|v| {
                    v.as_object_mut().unwrap().remove("sidecar");
                }),
                "names none",
            ),
            (
                Box::new(move |v| v["tensors"][level]["values"] = json!([0.0])),
                "both 'values' and 'sidecar'",
            ),
            (
                Box::new(move |v| v["tensors"][level]["sidecar"]["byte_length"] = json!(4)),
                "must be 512",
            ),
            (
                Box::new(move |v| {
                    v["tensors"][level]["sidecar"]["byte_offset"] = json!(1u64 << 40)
                }),
                "end past",
            ),
            (
                Box::new(move |v| v["tensors"][level]["sidecar"]["byte_offset"] = json!(8)),
                "lies at bytes",
            ),
            (
                Box::new(|v| v["sidecar"]["sha256"] = json!("0".repeat(64))),
                "sha256 mismatch",
            ),
        ];
        for (tamper, expect) in cases {
            let mut v = good.clone();
            tamper(&mut v);
            let e = Model::from_json_and_sidecar(&v, Some(&bytes)).unwrap_err();
            assert!(e.contains(expect), "expected '{expect}' in '{e}'");
        }
        // a table stored inline instead is accepted (placement is the writer's choice),
        // but then the sidecar holds a tensor the model file does not place there
        let mut v = good.clone();
        let (o, len) = (m.network.tensors()[level].offset, 64 * 2);
        v["tensors"][level]
            .as_object_mut()
            .unwrap()
            .remove("sidecar");
        v["tensors"][level]["values"] = json!(m.params[o..o + len]);
        let e = Model::from_json_and_sidecar(&v, Some(&bytes)).unwrap_err();
        assert!(e.contains("holds tensor '0.levels.2' that"), "{e}");
    }

    #[test]
    fn tampering_is_reported() {
        let m = model("freq(2) | mlp(8x1, relu)");
        let good = m.to_json();
        type Tamper = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Tamper, &str)> = vec![
            (Box::new(|v| v["format"] = json!("other")), "format"),
            (Box::new(|v| v["version"] = json!(99)), "version 99"),
            (
                Box::new(|v| v["arch"] = json!("freq(2) | mlp(8x2, relu)")),
                "different architectures",
            ),
            (
                Box::new(|v| v["arch"] = json!("freq(2) | mlp(8x1, relu")),
                "column",
            ),
            (
                Box::new(|v| {
                    v["tensors"][0]["values"]
                        .as_array_mut()
                        .unwrap()
                        .pop()
                        .map(|_| ())
                        .unwrap()
                }),
                "must hold",
            ),
            (
                Box::new(|v| v["tensors"][1]["values"][0] = json!("x")),
                "not a number",
            ),
            (
                Box::new(|v| v["tensors"][0]["shape"] = json!([8, 3])),
                "shape",
            ),
            (Box::new(|v| v["output_dims"] = json!(4)), "network"),
            (
                Box::new(|v| {
                    v.as_object_mut().unwrap().remove("tensors");
                }),
                "missing field 'tensors'",
            ),
        ];
        for (tamper, expect) in cases {
            let mut v = good.clone();
            tamper(&mut v);
            let e = Model::from_json(&v).unwrap_err();
            assert!(e.contains(expect), "expected '{expect}' in '{e}'");
        }
    }

    #[test]
    fn a_byte_order_mark_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let m = model("freq(2) | mlp(8x1, relu)");
        let path = dir.path().join("weights.json");
        std::fs::write(&path, format!("\u{feff}{}", m.to_json_string())).unwrap();
        assert_eq!(Model::load(&path).unwrap(), m);
    }

    #[test]
    fn special_and_oversized_files_are_refused_before_reading() {
        if Path::new("/dev/zero").exists() {
            assert_eq!(
                read_err(Model::load(Path::new("/dev/zero")).unwrap_err()),
                "cannot read model /dev/zero: not a regular file"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("weights.json")).unwrap();
        let e = read_err(Model::load(dir.path()).unwrap_err());
        assert!(e.ends_with("weights.json: not a regular file"), "{e}");

        // a sidecar that is a link to a device, or of another size than declared
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weights.json");
        let side = dir.path().join("weights.safetensors");
        grid_model().save(&path).unwrap();
        let good = std::fs::read(&side).unwrap();
        #[cfg(unix)]
        if Path::new("/dev/zero").exists() {
            std::fs::remove_file(&side).unwrap();
            std::os::unix::fs::symlink("/dev/zero", &side).unwrap();
            let e = read_err(Model::load(&path).unwrap_err());
            assert!(
                e.ends_with(&format!(
                    "cannot read its sidecar {}: not a regular file",
                    side.display()
                )),
                "{e}"
            );
            std::fs::remove_file(&side).unwrap();
        }
        std::fs::write(&side, [&good[..], b"extra"].concat()).unwrap();
        let e = read_err(Model::load(&path).unwrap_err());
        assert!(
            e.ends_with(&format!(
                "it is {} bytes but the model file says {} (truncated or replaced?)",
                good.len() + 5,
                good.len()
            )),
            "{e}"
        );
        // a declared size past the limit
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        v["sidecar"]["bytes"] = json!(1u64 << 40);
        assert_eq!(
            Model::from_json(&v).unwrap_err(),
            format!(
                "field 'sidecar.bytes' is 1099511627776, more than the limit of {}",
                limits::MAX_SIDECAR_BYTES
            )
        );
    }

    #[test]
    fn hostile_strings_are_refused_on_one_line() {
        let m = model("freq(2) | mlp(8x1, relu)");
        let good = m.to_json();
        let rule = "is not allowed: names are 1 to 32 ASCII letters, digits, '_', '.' or '-'";
        type Tamper = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(Tamper, String)> = vec![
            (
                Box::new(|v| v["inputs"]["names"][0] = json!("u\n*/ #error injected")),
                format!("field 'inputs': input name 'u\\n*/ #error injected' {rule}"),
            ),
            (
                Box::new(|v| v["outputs"][2] = json!("")),
                format!("field 'outputs': output name '' {rule}"),
            ),
            (
                Box::new(|v| v["outputs"][1] = json!("g".repeat(33))),
                format!("field 'outputs': output name '{}' {rule}", "g".repeat(33)),
            ),
            (
                Box::new(|v| v["outputs"][0] = json!("r\u{202e}")),
                format!("field 'outputs': output name 'r\\u{{202e}}' {rule}"),
            ),
            (
                Box::new(|v| v["inputs"]["convention"] = json!("a\\\n#error x")),
                "field 'inputs': the convention holds the character \\n (no control characters, line breaks or direction overrides)".into(),
            ),
            (
                Box::new(|v| v["inputs"]["convention"] = json!("c".repeat(513))),
                "field 'inputs': the convention is longer than 512 characters".into(),
            ),
            (
                Box::new(|v| {
                    let mut deep = json!(1);
                    for _ in 0..16 {
                        deep = json!([deep]);
                    }
                    v["training"]["x"] = deep;
                }),
                "field 'training' nests more than 16 levels deep (the limit)".into(),
            ),
            (
                Box::new(|v| v["tensors"][0]["name"] = json!("a\nb")),
                "tensor 'a\\nb' found where '1.layers.0.weight' was expected".into(),
            ),
        ];
        for (tamper, expect) in cases {
            let mut v = good.clone();
            tamper(&mut v);
            assert_eq!(Model::from_json(&v).unwrap_err(), expect);
        }
        // saving refuses what loading would refuse
        let mut bad = m.clone();
        bad.outputs[0] = "r\n#error".into();
        let dir = tempfile::tempdir().unwrap();
        let e = read_err(bad.save(&dir.path().join("w.json")).unwrap_err());
        assert!(e.contains("output name 'r\\n#error' is not allowed"), "{e}");
        assert!(!dir.path().join("w.json").exists());
    }

    #[test]
    fn deep_architectures_in_a_model_file_are_refused() {
        let m = model("freq(2) | mlp(8x1, relu)");
        let good = m.to_json();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weights.json");
        // the text form, nested 10000 deep (stack overflow before it was bounded)
        let mut v = good.clone();
        v["arch"] = json!("cat(".repeat(10_000) + "identity" + &")".repeat(10_000));
        std::fs::write(&path, v.to_string()).unwrap();
        assert_eq!(
            read_err(Model::load(&path).unwrap_err()),
            format!(
                "model {}: field 'arch': column 129: modules nest more than 32 levels deep (the limit)",
                path.display()
            )
        );
        // the tree form, past serde_json's recursion limit and past the module depth
        let tree = |n: usize| {
            let mut t = json!({"type": "identity"});
            for _ in 0..n {
                t = json!({"type": "cat", "modules": [t]});
            }
            t
        };
        let mut v = good.clone();
        v["arch_tree"] = tree(40);
        assert_eq!(
            Model::from_json(&v).unwrap_err(),
            "field 'arch_tree': modules nest more than 32 levels deep (the limit)"
        );
        let text = good.to_string().replacen(
            "\"arch_tree\":",
            &format!(
                "\"arch_tree\":{}{{\"type\":\"identity\"}}{},\"x\":",
                "{\"type\":\"cat\",\"modules\":[".repeat(5000),
                "]}".repeat(5000)
            ),
            1,
        );
        std::fs::write(&path, text).unwrap();
        let e = read_err(Model::load(&path).unwrap_err());
        assert!(
            e.contains("is not valid JSON: recursion limit exceeded"),
            "{e}"
        );
    }
}
