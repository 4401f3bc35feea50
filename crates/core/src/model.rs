//! The model file (`weights.json`): a trained network with everything needed to evaluate
//! it elsewhere. `docs/model-format.md` documents every field; keep the two in step.

use crate::activation::Activation;
use crate::arch::Arch;
use crate::module::{Layer, Module};
use crate::network::Network;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The `format` field of every model file.
pub const FORMAT: &str = "nshade-model";
/// The `version` this build writes and reads.
pub const VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read model {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("model {path} is not valid JSON: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("model {path}: {message}")]
    Invalid { path: String, message: String },
    #[error("cannot write model {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

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

    /// The model file as JSON.
    pub fn to_json(&self) -> Value {
        let tensors: Vec<Value> = self
            .network
            .tensors()
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "shape": t.shape,
                    "order": if t.shape.len() == 2 { "row-major [out][in]" } else { "vector" },
                    "offset": t.offset,
                    "values": self.params[t.offset..t.offset + t.len()],
                })
            })
            .collect();
        json!({
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
        })
    }

    /// The model file's text: pretty JSON with each tensor's values on one line.
    pub fn to_json_string(&self) -> String {
        let mut s = String::new();
        write_json(&self.to_json(), 0, &mut s);
        s.push('\n');
        s
    }

    /// Writes `weights.json` atomically (temporary sibling, then rename).
    pub fn save(&self, path: &Path) -> Result<(), ModelError> {
        crate::fsutil::write_atomic(path, self.to_json_string().as_bytes()).map_err(|e| {
            ModelError::Write {
                path: path.display().to_string(),
                source: e,
            }
        })
    }

    /// `path` itself if it is a file, else `path/weights.json`.
    pub fn resolve_path(path: &Path) -> PathBuf {
        if path.is_dir() {
            path.join("weights.json")
        } else {
            path.to_path_buf()
        }
    }

    /// Loads and validates a model file (or a directory holding `weights.json`).
    pub fn load(path: &Path) -> Result<Model, ModelError> {
        let file = Model::resolve_path(path);
        let p = file.display().to_string();
        let text = std::fs::read_to_string(&file).map_err(|e| ModelError::Read {
            path: p.clone(),
            source: e,
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|e| ModelError::Json {
            path: p.clone(),
            source: e,
        })?;
        Model::from_json(&value).map_err(|message| ModelError::Invalid { path: p, message })
    }

    /// Validates and builds a model from its JSON; the error says which field is wrong.
    pub fn from_json(v: &Value) -> Result<Model, String> {
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
        let tree: Arch = serde_json::from_value(field("arch_tree")?.clone())
            .map_err(|e| format!("field 'arch_tree': {e}"))?;
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
        let mut params = vec![0.0f32; network.param_count];
        for (t, e) in tensors.iter().zip(&expected) {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            if name != e.name {
                return Err(format!(
                    "tensor '{name}' found where '{}' was expected",
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
                params[e.offset + i] = f;
            }
        }
        let map = |k: &str| {
            obj.get(k)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        Ok(Model {
            network,
            params,
            inputs,
            outputs,
            training: map("training"),
            metrics: map("metrics"),
        })
    }
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
            json!({"type": "oneblob", "in": o.in_dims, "out": o.out_dims(), "bins": o.bins})
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
}
