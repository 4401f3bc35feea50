//! Datasets: a directory with `dataset.json` and little-endian float32 row files, one per
//! split (`train`, `validation`). Validation uses different parameter values from training.
//!
//! * **Schema 1** (seed 002): rows of `x, y, t, r, g, b` (x, y pixel centres and t the
//!   capture parameter, all normalised to [−1, 1]; colours linear, unclamped). Read and
//!   written byte for byte as the seed's Kotlin does.
//! * **Schema 2**: any number of named input columns (each with the range its values lie
//!   in; some marked as frame parameters) and named output columns of any widths; rows of
//!   the inputs then the outputs. `docs/capture.md` documents both field by field.
//!
//! Reading verifies the schema, the columns, the splits, row counts against file sizes,
//! the sha256 of each file and that every value is finite (schema 2 also: every input
//! within its range, every parameter column equal to its frame's parameter), and names
//! what failed in one line.

use crate::data::Rows;
use crate::limits::{self, ReadError, one_line, quote, read_bounded};
use crate::model::check_name;
use crate::texture::hex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Values per schema-1 row: x, y, t, r, g, b.
pub const ROW_FLOATS: usize = 6;

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("cannot read {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("cannot write {path}: {cause}")]
    Write { path: String, cause: std::io::Error },
}

/// One split (`train` or `validation`) as described in the manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitInfo {
    pub file: String,
    pub rows: u64,
    /// The parameters of each frame, in file order: schema 1, one value per frame (what
    /// the shader saw); schema 2, `frames × parameter columns` values, frame after frame.
    pub parameters: Vec<f32>,
    pub sha256: String,
    /// Frames in the split (schema 1: `parameters.len()`).
    #[serde(skip)]
    pub frames: usize,
}

/// A schema-2 split as it is written in the manifest.
#[derive(Deserialize)]
struct SplitInfo2 {
    file: String,
    rows: u64,
    parameters: Vec<Vec<f32>>,
    sha256: String,
}

/// An input column: its name, the range its values lie in, and whether it is a frame
/// parameter (constant over a frame's rows, listed per frame in the splits).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputColumn {
    pub name: String,
    pub range: [f32; 2],
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parameter: bool,
}

/// An output column: its name and how many values it holds per row (at least 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputColumn {
    pub name: String,
    pub width: usize,
}

impl InputColumn {
    pub fn new(name: &str, range: [f32; 2], parameter: bool) -> InputColumn {
        InputColumn {
            name: name.into(),
            range,
            parameter,
        }
    }
}

/// The columns of a schema-1 dataset: x, y, t in [−1, 1] (t the parameter) and r, g, b.
pub fn schema1_columns() -> (Vec<InputColumn>, Vec<OutputColumn>) {
    (
        vec![
            InputColumn::new("x", [-1.0, 1.0], false),
            InputColumn::new("y", [-1.0, 1.0], false),
            InputColumn::new("t", [-1.0, 1.0], true),
        ],
        ["r", "g", "b"]
            .iter()
            .map(|n| OutputColumn {
                name: n.to_string(),
                width: 1,
            })
            .collect(),
    )
}

/// One validation frame: its parameters (raw, as the shader saw them), its normalised t
/// (schema 1 only) and its rows.
#[derive(Clone, Debug)]
pub struct Slice<'a> {
    pub parameters: Vec<f32>,
    pub t: Option<f32>,
    pub rows: &'a [f32],
}

/// A loaded, verified dataset.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub dir: PathBuf,
    /// 1 or 2.
    pub schema: u32,
    /// The manifest as read (all fields, including ones nshade does not use).
    pub manifest: Value,
    /// The input columns in row order (schema 1: x, y, t).
    pub inputs: Vec<InputColumn>,
    /// The output columns in row order (schema 1: r, g, b).
    pub outputs: Vec<OutputColumn>,
    /// `[width, height]`; optional in schema 2.
    pub resolution: Option<[u32; 2]>,
    /// Schema 1: the `parameterRange`; schema 2: the first parameter column's range
    /// (`[-1, 1]` without one).
    pub parameter_range: [f32; 2],
    pub seed: i64,
    pub source_digest: String,
    pub train_info: SplitInfo,
    pub validation_info: SplitInfo,
    pub train: Rows,
    pub validation: Rows,
}

impl Dataset {
    /// Reads and verifies `dir/dataset.json` and both splits.
    pub fn load(dir: &Path) -> Result<Dataset, DatasetError> {
        let mpath = dir.join("dataset.json");
        let mp = mpath.display().to_string();
        let invalid = |message: String| DatasetError::Invalid {
            path: mp.clone(),
            message: one_line(&message),
        };
        let bytes = read_bounded(&mpath, limits::MAX_DATASET_JSON_BYTES).map_err(|e| match e {
            ReadError::Io(e) => DatasetError::Read {
                path: mp.clone(),
                cause: e,
            },
            e => invalid(e.describe(limits::MAX_DATASET_JSON_BYTES)),
        })?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| invalid(format!("not valid JSON: not UTF-8 text ({e})")))?;
        let manifest: Value = serde_json::from_str(limits::strip_bom(text))
            .map_err(|e| invalid(format!("not valid JSON: {e}")))?;
        drop(bytes);
        let schema = match manifest.get("schema").and_then(Value::as_i64) {
            Some(s @ (1 | 2)) => s as u32,
            Some(s) => {
                return Err(invalid(format!(
                    "schema {s} is not supported (expected 1 or 2)"
                )));
            }
            None => return Err(invalid("missing or non-numeric 'schema'".into())),
        };
        let resolution = match manifest.get("resolution") {
            None if schema == 2 => None,
            r => Some(
                r.and_then(|r| serde_json::from_value::<[u32; 2]>(r.clone()).ok())
                    .filter(|r| {
                        (1..=limits::MAX_DATASET_RESOLUTION).contains(&r[0])
                            && (1..=limits::MAX_DATASET_RESOLUTION).contains(&r[1])
                    })
                    .ok_or_else(|| {
                        invalid(format!(
                            "'resolution' must be [width, height], each in 1..={}",
                            limits::MAX_DATASET_RESOLUTION
                        ))
                    })?,
            ),
        };
        let good_range = |r: &[f32; 2]| r[0].is_finite() && r[1].is_finite() && r[0] < r[1];
        let (inputs, outputs, parameter_range) = if schema == 1 {
            let range = manifest
                .get("parameterRange")
                .and_then(|r| serde_json::from_value::<[f32; 2]>(r.clone()).ok())
                .filter(good_range)
                .ok_or_else(|| {
                    invalid("'parameterRange' must be [start, end] with start < end".into())
                })?;
            let (i, o) = schema1_columns();
            (i, o, range)
        } else {
            let (i, o) = columns(&manifest).map_err(invalid)?;
            let range = i
                .iter()
                .find(|c| c.parameter)
                .map_or([-1.0, 1.0], |c| c.range);
            (i, o, range)
        };
        let in_dims = inputs.len();
        let out_dims: usize = outputs.iter().map(|c| c.width).sum();
        let row_floats = in_dims + out_dims;
        let row_bytes = row_floats as u64 * 4;
        let param_cols: Vec<usize> = (0..in_dims).filter(|&i| inputs[i].parameter).collect();
        let seed = manifest.get("seed").and_then(Value::as_i64).unwrap_or(0);
        let source_digest = manifest
            .get("sourceShaderDigest")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let split = |name: &str| -> Result<(SplitInfo, Rows), DatasetError> {
            let v = manifest
                .get("splits")
                .and_then(|s| s.get(name))
                .ok_or_else(|| invalid(format!("missing split '{name}' in 'splits'")))?;
            let info: SplitInfo = if schema == 1 {
                let mut info: SplitInfo = serde_json::from_value(v.clone())
                    .map_err(|e| invalid(format!("split '{name}': {e}")))?;
                if info.parameters.is_empty() || info.parameters.iter().any(|p| !p.is_finite()) {
                    return Err(invalid(format!(
                        "split '{name}': 'parameters' must be a non-empty list of finite numbers"
                    )));
                }
                info.frames = info.parameters.len();
                info
            } else {
                let info: SplitInfo2 = serde_json::from_value(v.clone())
                    .map_err(|e| invalid(format!("split '{name}': {e}")))?;
                let frames = info.parameters.len();
                if frames == 0 || frames > limits::MAX_DATASET_FRAMES {
                    return Err(invalid(format!(
                        "split '{name}': 'parameters' must list 1 to {} frames, one list of {} parameter values each",
                        limits::MAX_DATASET_FRAMES,
                        param_cols.len()
                    )));
                }
                for (f, p) in info.parameters.iter().enumerate() {
                    if p.len() != param_cols.len() {
                        return Err(invalid(format!(
                            "split '{name}': frame {f} lists {} parameter values; the dataset has {} parameter columns",
                            p.len(),
                            param_cols.len()
                        )));
                    }
                    for (k, &c) in param_cols.iter().enumerate() {
                        let [lo, hi] = inputs[c].range;
                        if !(p[k].is_finite() && lo <= p[k] && p[k] <= hi) {
                            return Err(invalid(format!(
                                "split '{name}': frame {f}'s value {} of parameter '{}' is not a number in its range [{lo}, {hi}]",
                                p[k], inputs[c].name
                            )));
                        }
                    }
                }
                SplitInfo {
                    file: info.file,
                    rows: info.rows,
                    parameters: info.parameters.concat(),
                    sha256: info.sha256,
                    frames,
                }
            };
            if info.file.is_empty()
                || info.file.len() > 255
                || info.file.contains(['/', '\\', '\0', ':'])
                || info.file.starts_with('.')
                || info.file.chars().any(limits::is_unsafe_char)
            {
                return Err(invalid(format!(
                    "split '{name}': file '{}' must be a plain name inside the dataset directory",
                    quote(&info.file)
                )));
            }
            let fpath = dir.join(&info.file);
            let fp = fpath.display().to_string();
            let bad = |message: String| DatasetError::Invalid {
                path: fp.clone(),
                message: one_line(&message),
            };
            let want = info
                .rows
                .checked_mul(row_bytes)
                .filter(|b| *b <= limits::MAX_DATASET_SPLIT_BYTES)
                .ok_or_else(|| {
                    bad(format!(
                        "the manifest says {} rows ({row_bytes} bytes each), more than the limit of {} bytes",
                        info.rows,
                        limits::MAX_DATASET_SPLIT_BYTES
                    ))
                })?;
            // The size is checked before reading: a wrong or special file is not read whole.
            let meta = std::fs::metadata(&fpath).map_err(|e| DatasetError::Read {
                path: fp.clone(),
                cause: e,
            })?;
            if !meta.is_file() {
                return Err(bad("not a regular file".into()));
            }
            let size_mismatch = |len: u64| {
                bad(format!(
                    "size mismatch: {len} bytes, but the manifest says {} rows of {row_bytes} bytes ({want} bytes)",
                    info.rows,
                ))
            };
            if meta.len() != want {
                return Err(size_mismatch(meta.len()));
            }
            let bytes = read_bounded(&fpath, want).map_err(|e| match e {
                ReadError::Io(e) => DatasetError::Read {
                    path: fp.clone(),
                    cause: e,
                },
                e => bad(e.describe(want)),
            })?;
            if bytes.len() as u64 != want {
                return Err(size_mismatch(bytes.len() as u64));
            }
            if info.rows == 0 {
                return Err(bad("split has no rows".into()));
            }
            if !info.rows.is_multiple_of(info.frames as u64) {
                return Err(bad(format!(
                    "{} rows do not divide into {} frames",
                    info.rows, info.frames
                )));
            }
            let digest = hex(&Sha256::digest(&bytes));
            if !digest.eq_ignore_ascii_case(&info.sha256) {
                return Err(bad(format!(
                    "sha256 mismatch: file has {digest}, manifest says {}",
                    quote(&info.sha256)
                )));
            }
            let data: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if let Some(i) = data.iter().position(|v| !v.is_finite()) {
                return Err(bad(format!(
                    "row {} holds a non-finite value (NaN or infinity) in column {}",
                    i / row_floats,
                    i % row_floats
                )));
            }
            if schema == 2 {
                let per = info.rows as usize / info.frames;
                for (r, row) in data.chunks_exact(row_floats).enumerate() {
                    for (c, col) in inputs.iter().enumerate() {
                        let [lo, hi] = col.range;
                        if !(lo <= row[c] && row[c] <= hi) {
                            return Err(bad(format!(
                                "row {r}: input '{}' is {}, outside its range [{lo}, {hi}]",
                                col.name, row[c]
                            )));
                        }
                    }
                    let frame = &info.parameters[r / per * param_cols.len()..][..param_cols.len()];
                    for (k, &c) in param_cols.iter().enumerate() {
                        if row[c].to_bits() != frame[k].to_bits() {
                            return Err(bad(format!(
                                "row {r}: parameter '{}' is {}, but its frame ({}) lists {}",
                                inputs[c].name,
                                row[c],
                                r / per,
                                frame[k]
                            )));
                        }
                    }
                }
            }
            Ok((
                info,
                Rows {
                    in_dims,
                    out_dims,
                    data,
                },
            ))
        };
        let (train_info, train) = split("train")?;
        let (validation_info, validation) = split("validation")?;
        Ok(Dataset {
            dir: dir.to_path_buf(),
            schema,
            manifest,
            inputs,
            outputs,
            resolution,
            parameter_range,
            seed,
            source_digest,
            train_info,
            validation_info,
            train,
            validation,
        })
    }

    /// A digest of the whole dataset: sha256 over both splits' sha256 strings.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.train_info.sha256.as_bytes());
        h.update(self.validation_info.sha256.as_bytes());
        hex(&h.finalize())
    }

    /// Values per row (inputs then outputs).
    pub fn row_floats(&self) -> usize {
        self.train.in_dims + self.train.out_dims
    }

    /// The indices of the parameter columns among the inputs (schema 1: t).
    pub fn parameter_columns(&self) -> Vec<usize> {
        (0..self.inputs.len())
            .filter(|&i| self.inputs[i].parameter)
            .collect()
    }

    /// The names of the output values, one per value: a column of width 1 is its name,
    /// wider ones are `name.0`, `name.1`, ...
    pub fn output_names(&self) -> Vec<String> {
        self.outputs
            .iter()
            .flat_map(|c| {
                (0..c.width).map(move |k| {
                    if c.width == 1 {
                        c.name.clone()
                    } else {
                        format!("{}.{k}", c.name)
                    }
                })
            })
            .collect()
    }

    /// The validation rows grouped by frame.
    pub fn validation_slices(&self) -> Vec<Slice<'_>> {
        let frames = self.validation_info.frames;
        let rf = self.row_floats();
        let per = self.validation.len() / frames;
        let np = self.validation_info.parameters.len() / frames;
        (0..frames)
            .map(|i| {
                let rows = &self.validation.data[i * per * rf..(i + 1) * per * rf];
                Slice {
                    parameters: self.validation_info.parameters[i * np..(i + 1) * np].to_vec(),
                    t: (self.schema == 1).then(|| rows[2]),
                    rows,
                }
            })
            .collect()
    }
}

/// The columns of a schema-2 manifest, checked: names per [`check_name`] and unique
/// (inputs and outputs together), ranges finite with start < end, widths at least 1, and
/// the counts and total widths within the limits.
fn columns(manifest: &Value) -> Result<(Vec<InputColumn>, Vec<OutputColumn>), String> {
    let list = |key: &str, max: usize| -> Result<&Vec<Value>, String> {
        let l = manifest
            .get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("schema 2 needs '{key}', a list of columns"))?;
        if l.is_empty() || l.len() > max {
            return Err(format!("'{key}' must list 1 to {max} columns"));
        }
        Ok(l)
    };
    let mut names: Vec<String> = Vec::new();
    let mut seen = |name: &str, what: &str, i: usize| -> Result<(), String> {
        check_name(name).map_err(|e| format!("{what} column {i}: name {e}"))?;
        if names.iter().any(|n| n == name) {
            return Err(format!(
                "{what} column {i}: the name '{name}' is used twice"
            ));
        }
        names.push(name.to_string());
        Ok(())
    };
    let mut inputs = Vec::new();
    for (i, v) in list("inputs", limits::MAX_DATASET_INPUTS)?
        .iter()
        .enumerate()
    {
        let c: InputColumn = serde_json::from_value(v.clone()).map_err(|e| {
            format!(
                "input column {i}: {e} (expected {{\"name\", \"range\": [lo, hi], \"parameter\"}})"
            )
        })?;
        seen(&c.name, "input", i)?;
        if !(c.range[0].is_finite() && c.range[1].is_finite() && c.range[0] < c.range[1]) {
            return Err(format!(
                "input column {i} ('{}'): 'range' must be [lo, hi], finite, with lo < hi",
                c.name
            ));
        }
        inputs.push(c);
    }
    let mut outputs = Vec::new();
    let mut width = 0usize;
    for (i, v) in list("outputs", limits::MAX_DATASET_OUTPUTS)?
        .iter()
        .enumerate()
    {
        let c: OutputColumn = serde_json::from_value(v.clone())
            .map_err(|e| format!("output column {i}: {e} (expected {{\"name\", \"width\"}})"))?;
        seen(&c.name, "output", i)?;
        if c.width == 0 || c.width > limits::MAX_WIDTH {
            return Err(format!(
                "output column {i} ('{}'): 'width' must be in 1..={}",
                c.name,
                limits::MAX_WIDTH
            ));
        }
        width += c.width;
        if width > limits::MAX_WIDTH {
            return Err(format!(
                "the output columns hold more than {} values per row",
                limits::MAX_WIDTH
            ));
        }
        outputs.push(c);
    }
    Ok((inputs, outputs))
}

/// What a capture writes into a schema-1 `dataset.json` besides the splits.
#[derive(Clone, Debug)]
pub struct DatasetMeta {
    pub source_kind: String,
    pub source_digest: String,
    pub fixed_state: String,
    pub resolution: [u32; 2],
    pub parameter_range: [f32; 2],
    pub seed: i64,
}

/// One split to write: its rows and the parameters of each frame (schema 1: one value per
/// frame; schema 2: `frames × parameter columns` values, frame after frame).
pub struct SplitData<'a> {
    pub rows: &'a [f32],
    pub parameters: &'a [f32],
}

/// Writes a dataset directory in the seed-002 format (schema 1): `train.f32`,
/// `validation.f32`, `dataset.json` (with per-split sha256) and the given extra files
/// (shader sources). Everything is written under a temporary sibling name and renamed into
/// place at the end, so no `dataset.json` exists unless everything was written. `dir`
/// must be new or empty.
pub fn write_dataset(
    dir: &Path,
    meta: &DatasetMeta,
    train: SplitData,
    validation: SplitData,
    extra_files: &[(String, Vec<u8>)],
) -> Result<(), DatasetError> {
    write_dir(
        dir,
        ROW_FLOATS,
        [
            (&train, json!(train.parameters)),
            (&validation, json!(validation.parameters)),
        ],
        extra_files,
        |splits| {
            json!({
                "schema": 1,
                "sourceKind": meta.source_kind,
                "sourceShaderDigest": meta.source_digest,
                "fixedState": meta.fixed_state,
                "resolution": meta.resolution,
                "parameterRange": meta.parameter_range,
                "rowFormat": "little-endian float32: x,y,t,r,g,b",
                "coordinates": "pixel centers; x right, y down; x,y,t normalized to [-1,1]",
                "color": "linear RGB, unclamped, opaque",
                "seed": meta.seed,
                "splits": splits,
            })
        },
    )
}

/// What a schema-2 `dataset.json` holds besides the splits.
#[derive(Clone, Debug)]
pub struct Schema2Meta {
    pub source_kind: String,
    pub source_digest: String,
    pub fixed_state: String,
    pub resolution: Option<[u32; 2]>,
    pub seed: i64,
    pub inputs: Vec<InputColumn>,
    pub outputs: Vec<OutputColumn>,
    /// A sentence on what the input columns mean (`coordinates`).
    pub coordinates: String,
    /// More fields for the manifest (e.g. how parameters were drawn).
    pub extra: Map<String, Value>,
}

/// Writes a schema-2 dataset directory, atomically as [`write_dataset`]. The columns are
/// checked as a reader checks them; each split's rows hold `inputs + output widths` values.
pub fn write_dataset_v2(
    dir: &Path,
    meta: &Schema2Meta,
    train: SplitData,
    validation: SplitData,
    extra_files: &[(String, Vec<u8>)],
) -> Result<(), DatasetError> {
    let dp = dir.display().to_string();
    let invalid = |message: String| DatasetError::Invalid {
        path: dp.clone(),
        message,
    };
    let probe = json!({"inputs": meta.inputs, "outputs": meta.outputs});
    columns(&probe).map_err(invalid)?;
    let np = meta.inputs.iter().filter(|c| c.parameter).count();
    let row_floats = meta.inputs.len() + meta.outputs.iter().map(|c| c.width).sum::<usize>();
    let frames_of = |s: &SplitData| -> Result<Vec<Vec<f32>>, DatasetError> {
        if np == 0 {
            return Ok(vec![Vec::new()]);
        }
        if s.parameters.is_empty() || !s.parameters.len().is_multiple_of(np) {
            return Err(invalid(format!(
                "{} parameter values do not make frames of {np}",
                s.parameters.len()
            )));
        }
        Ok(s.parameters.chunks(np).map(<[f32]>::to_vec).collect())
    };
    let (ft, fv) = (frames_of(&train)?, frames_of(&validation)?);
    let names: Vec<String> = meta
        .inputs
        .iter()
        .map(|c| c.name.clone())
        .chain(meta.outputs.iter().flat_map(|c| {
            (0..c.width).map(move |k| {
                if c.width == 1 {
                    c.name.clone()
                } else {
                    format!("{}.{k}", c.name)
                }
            })
        }))
        .collect();
    write_dir(
        dir,
        row_floats,
        [(&train, json!(ft)), (&validation, json!(fv))],
        extra_files,
        |splits| {
            let mut m = json!({
                "schema": 2,
                "sourceKind": meta.source_kind,
                "sourceShaderDigest": meta.source_digest,
                "fixedState": meta.fixed_state,
                "rowFormat": format!("little-endian float32: {}", names.join(",")),
                "coordinates": meta.coordinates,
                "inputs": meta.inputs,
                "outputs": meta.outputs,
                "seed": meta.seed,
                "splits": splits,
            });
            if let Some(r) = meta.resolution {
                m["resolution"] = json!(r);
            }
            for (k, v) in &meta.extra {
                m[k] = v.clone();
            }
            m
        },
    )
}

/// The shared writer: row files, then the manifest `manifest(splits)` builds around the
/// `{file, rows, parameters, sha256}` entries, in a temporary sibling renamed into place at
/// the end.
fn write_dir(
    dir: &Path,
    row_floats: usize,
    splits: [(&SplitData, Value); 2],
    extra_files: &[(String, Vec<u8>)],
    manifest: impl FnOnce(Value) -> Value,
) -> Result<(), DatasetError> {
    let dp = dir.display().to_string();
    if dir.exists()
        && std::fs::read_dir(dir)
            .map_err(|e| DatasetError::Read {
                path: dp.clone(),
                cause: e,
            })?
            .next()
            .is_some()
    {
        return Err(DatasetError::Invalid {
            path: dp,
            message: "directory exists and is not empty (choose a new dataset directory)".into(),
        });
    }
    for (s, _) in &splits {
        if !s.rows.len().is_multiple_of(row_floats) {
            return Err(DatasetError::Invalid {
                path: dp,
                message: format!("{} values do not make rows of {row_floats}", s.rows.len()),
            });
        }
    }
    let tmp = crate::fsutil::temp_sibling(dir);
    let werr = |p: &Path, e: std::io::Error| DatasetError::Write {
        path: p.display().to_string(),
        cause: e,
    };
    let result = (|| {
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|e| werr(&tmp, e))?;
        }
        std::fs::create_dir_all(&tmp).map_err(|e| werr(&tmp, e))?;
        for (name, bytes) in extra_files {
            std::fs::write(tmp.join(name), bytes).map_err(|e| werr(&tmp.join(name), e))?;
        }
        let mut entries = Map::new();
        for (name, (s, parameters)) in ["train", "validation"].into_iter().zip(splits) {
            let bytes: Vec<u8> = s.rows.iter().flat_map(|v| v.to_le_bytes()).collect();
            let file = format!("{name}.f32");
            std::fs::write(tmp.join(&file), &bytes).map_err(|e| werr(&tmp.join(&file), e))?;
            entries.insert(
                name.into(),
                json!({"file": file, "rows": s.rows.len() / row_floats, "parameters": parameters, "sha256": hex(&Sha256::digest(&bytes))}),
            );
        }
        let manifest = manifest(Value::Object(entries));
        let text = serde_json::to_string_pretty(&manifest).expect("manifest serialises") + "\n";
        std::fs::write(tmp.join("dataset.json"), text)
            .map_err(|e| werr(&tmp.join("dataset.json"), e))?;
        if dir.exists() {
            std::fs::remove_dir(dir).map_err(|e| werr(dir, e))?;
        }
        std::fs::rename(&tmp, dir).map_err(|e| werr(dir, e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(frames: usize, per: usize, t0: f32) -> (Vec<f32>, Vec<f32>) {
        let mut r = Vec::new();
        let mut params = Vec::new();
        for f in 0..frames {
            let t = t0 + f as f32 * 0.1;
            params.push(t * 3.0);
            for p in 0..per {
                let (x, y) = (p as f32 / per as f32 * 2.0 - 1.0, 0.5);
                r.extend([x, y, t, x.abs(), y, t.sin()]);
            }
        }
        (r, params)
    }

    fn meta() -> DatasetMeta {
        DatasetMeta {
            source_kind: "test".into(),
            source_digest: "abc".into(),
            fixed_state: "none".into(),
            resolution: [8, 4],
            parameter_range: [-1.0, 1.0],
            seed: 4090,
        }
    }

    fn write(dir: &Path) {
        let (tr, tp) = rows(4, 10, -0.9);
        let (va, vp) = rows(2, 10, -0.85);
        write_dataset(
            dir,
            &meta(),
            SplitData {
                rows: &tr,
                parameters: &tp,
            },
            SplitData {
                rows: &va,
                parameters: &vp,
            },
            &[("source.wgsl".into(), b"// src".to_vec())],
        )
        .unwrap();
    }

    #[test]
    fn write_then_load() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("ds");
        write(&d);
        let ds = Dataset::load(&d).unwrap();
        assert_eq!(ds.train.len(), 40);
        assert_eq!(ds.validation_slices().len(), 2);
        assert_eq!(ds.resolution, Some([8, 4]));
        assert!(d.join("source.wgsl").is_file());
        assert!(
            write_dataset(
                &d,
                &meta(),
                SplitData {
                    rows: &[],
                    parameters: &[]
                },
                SplitData {
                    rows: &[],
                    parameters: &[]
                },
                &[]
            )
            .is_err()
        );
    }

    #[test]
    fn corruption_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        type Corrupt = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Corrupt)> = vec![
            (
                "schema 2",
                Box::new(|d: &Path| edit(d, |m| m["schema"] = json!(2))),
            ),
            (
                "missing split 'validation'",
                Box::new(|d: &Path| {
                    edit(d, |m| {
                        m["splits"].as_object_mut().unwrap().remove("validation");
                    })
                }),
            ),
            (
                "size mismatch",
                Box::new(|d: &Path| edit(d, |m| m["splits"]["train"]["rows"] = json!(41))),
            ),
            (
                "sha256 mismatch",
                Box::new(|d: &Path| {
                    let p = d.join("train.f32");
                    let mut b = std::fs::read(&p).unwrap();
                    b[5] ^= 1;
                    std::fs::write(p, b).unwrap();
                }),
            ),
            (
                "non-finite",
                Box::new(|d: &Path| {
                    let p = d.join("validation.f32");
                    let mut b = std::fs::read(&p).unwrap();
                    b[24 * 3 + 12..24 * 3 + 16].copy_from_slice(&f32::NAN.to_le_bytes());
                    std::fs::write(&p, &b).unwrap();
                    let digest = hex(&Sha256::digest(&b));
                    edit(d, |m| m["splits"]["validation"]["sha256"] = json!(digest));
                }),
            ),
            (
                "cannot read",
                Box::new(|d: &Path| std::fs::remove_file(d.join("train.f32")).unwrap()),
            ),
            (
                "not valid JSON",
                Box::new(|d: &Path| std::fs::write(d.join("dataset.json"), "{").unwrap()),
            ),
        ];
        for (i, (expect, corrupt)) in cases.iter().enumerate() {
            let d = tmp.path().join(format!("ds{i}"));
            write(&d);
            corrupt(&d);
            let e = Dataset::load(&d).unwrap_err().to_string();
            assert!(e.contains(expect), "expected '{expect}' in '{e}'");
        }
    }

    #[test]
    fn a_byte_order_mark_is_accepted_and_sizes_are_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("ds");
        write(&d);
        let p = d.join("dataset.json");
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, format!("\u{feff}{text}")).unwrap();
        assert_eq!(Dataset::load(&d).unwrap().train.len(), 40);
        std::fs::write(&p, text).unwrap();

        let err = |d: &Path| {
            let e = Dataset::load(d).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            e
        };
        // a row count whose byte size overflows, or passes the limit
        edit(&d, |m| m["splits"]["train"]["rows"] = json!(u64::MAX / 3));
        assert!(
            err(&d).ends_with(&format!(
                "train.f32: the manifest says {} rows (24 bytes each), more than the limit of 17179869184 bytes",
                u64::MAX / 3
            )),
            "{}",
            err(&d)
        );
        edit(&d, |m| m["splits"]["train"]["rows"] = json!(40));
        edit(&d, |m| m["resolution"] = json!([70000, 4]));
        assert!(
            err(&d)
                .ends_with("dataset.json: 'resolution' must be [width, height], each in 1..=65536"),
            "{}",
            err(&d)
        );
        edit(&d, |m| m["resolution"] = json!([8, 4]));
        // hostile file names and digests are quoted on one line
        edit(&d, |m| m["splits"]["train"]["file"] = json!("a\nb"));
        assert!(
            err(&d).ends_with(
                "split 'train': file 'a\\nb' must be a plain name inside the dataset directory"
            ),
            "{}",
            err(&d)
        );
        edit(&d, |m| m["splits"]["train"]["file"] = json!("train.f32"));
        // a row file that is a device is not read
        #[cfg(unix)]
        if Path::new("/dev/zero").exists() {
            std::fs::remove_file(d.join("train.f32")).unwrap();
            std::os::unix::fs::symlink("/dev/zero", d.join("train.f32")).unwrap();
            assert!(
                err(&d).ends_with("train.f32: not a regular file"),
                "{}",
                err(&d)
            );
        }
        // and a manifest that is one
        #[cfg(unix)]
        if Path::new("/dev/zero").exists() {
            std::fs::remove_file(&p).unwrap();
            std::os::unix::fs::symlink("/dev/zero", &p).unwrap();
            assert!(
                err(&d).ends_with("dataset.json: not a regular file"),
                "{}",
                err(&d)
            );
        }
    }

    fn edit(d: &Path, f: impl Fn(&mut Value)) {
        let p = d.join("dataset.json");
        let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        f(&mut m);
        std::fs::write(p, serde_json::to_string(&m).unwrap()).unwrap();
    }
}
