//! Seed-002 datasets: a directory with `dataset.json` and little-endian float32 row files of
//! `x, y, t, r, g, b` (x, y pixel centres and t the capture parameter, all normalised to
//! [−1, 1]; colours linear, unclamped). Validation uses different parameter slices from
//! training. Reading verifies the schema, the splits, row counts against file sizes, the
//! sha256 of each file and that every value is finite, and names what failed.

use crate::data::Rows;
use crate::limits::{self, ReadError, one_line, quote, read_bounded};
use crate::texture::hex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Values per row: x, y, t, r, g, b.
pub const ROW_FLOATS: usize = 6;
const ROW_BYTES: usize = ROW_FLOATS * 4;

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
    /// The parameter value of each captured frame, in file order.
    pub parameters: Vec<f32>,
    pub sha256: String,
}

/// A loaded, verified dataset.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub dir: PathBuf,
    /// The manifest as read (all fields, including ones nshade does not use).
    pub manifest: Value,
    pub resolution: [u32; 2],
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
        match manifest.get("schema").and_then(Value::as_i64) {
            Some(1) => {}
            Some(s) => return Err(invalid(format!("schema {s} is not supported (expected 1)"))),
            None => return Err(invalid("missing or non-numeric 'schema'".into())),
        }
        let resolution = manifest
            .get("resolution")
            .and_then(|r| serde_json::from_value::<[u32; 2]>(r.clone()).ok())
            .filter(|r| {
                (1..=limits::MAX_DATASET_RESOLUTION).contains(&r[0])
                    && (1..=limits::MAX_DATASET_RESOLUTION).contains(&r[1])
            })
            .ok_or_else(|| {
                invalid(format!(
                    "'resolution' must be [width, height], each in 1..={}",
                    limits::MAX_DATASET_RESOLUTION
                ))
            })?;
        let parameter_range = manifest
            .get("parameterRange")
            .and_then(|r| serde_json::from_value::<[f32; 2]>(r.clone()).ok())
            .filter(|r| r[0].is_finite() && r[1].is_finite() && r[0] < r[1])
            .ok_or_else(|| {
                invalid("'parameterRange' must be [start, end] with start < end".into())
            })?;
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
            let info: SplitInfo = serde_json::from_value(v.clone())
                .map_err(|e| invalid(format!("split '{name}': {e}")))?;
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
            if info.parameters.is_empty() || info.parameters.iter().any(|p| !p.is_finite()) {
                return Err(invalid(format!(
                    "split '{name}': 'parameters' must be a non-empty list of finite numbers"
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
                .checked_mul(ROW_BYTES as u64)
                .filter(|b| *b <= limits::MAX_DATASET_SPLIT_BYTES)
                .ok_or_else(|| {
                    bad(format!(
                        "the manifest says {} rows ({ROW_BYTES} bytes each), more than the limit of {} bytes",
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
                    "size mismatch: {len} bytes, but the manifest says {} rows of {ROW_BYTES} bytes ({want} bytes)",
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
            if !info.rows.is_multiple_of(info.parameters.len() as u64) {
                return Err(bad(format!(
                    "{} rows do not divide into {} frames",
                    info.rows,
                    info.parameters.len()
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
                    i / ROW_FLOATS,
                    i % ROW_FLOATS
                )));
            }
            Ok((
                info,
                Rows {
                    in_dims: 3,
                    out_dims: 3,
                    data,
                },
            ))
        };
        let (train_info, train) = split("train")?;
        let (validation_info, validation) = split("validation")?;
        Ok(Dataset {
            dir: dir.to_path_buf(),
            manifest,
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

    /// The validation rows grouped by frame: (parameter, normalised t, rows of that frame).
    pub fn validation_slices(&self) -> Vec<(f32, f32, &[f32])> {
        let frames = self.validation_info.parameters.len();
        let per = self.validation.len() / frames;
        (0..frames)
            .map(|i| {
                let rows = &self.validation.data[i * per * ROW_FLOATS..(i + 1) * per * ROW_FLOATS];
                (self.validation_info.parameters[i], rows[2], rows)
            })
            .collect()
    }
}

/// What a capture writes into `dataset.json` besides the splits.
#[derive(Clone, Debug)]
pub struct DatasetMeta {
    pub source_kind: String,
    pub source_digest: String,
    pub fixed_state: String,
    pub resolution: [u32; 2],
    pub parameter_range: [f32; 2],
    pub seed: i64,
}

/// One split to write: its rows (x, y, t, r, g, b each) and the parameter of each frame.
pub struct SplitData<'a> {
    pub rows: &'a [f32],
    pub parameters: &'a [f32],
}

/// Writes a dataset directory in the seed-002 format: `train.f32`, `validation.f32`,
/// `dataset.json` (with per-split sha256) and the given extra files (shader sources).
/// Everything is written under a temporary sibling name and renamed into place at the end,
/// so no `dataset.json` exists unless everything was written. `dir` must be new or empty.
pub fn write_dataset(
    dir: &Path,
    meta: &DatasetMeta,
    train: SplitData,
    validation: SplitData,
    extra_files: &[(String, Vec<u8>)],
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
        let mut splits = serde_json::Map::new();
        for (name, s) in [("train", &train), ("validation", &validation)] {
            let bytes: Vec<u8> = s.rows.iter().flat_map(|v| v.to_le_bytes()).collect();
            let file = format!("{name}.f32");
            std::fs::write(tmp.join(&file), &bytes).map_err(|e| werr(&tmp.join(&file), e))?;
            splits.insert(
                name.into(),
                json!({"file": file, "rows": s.rows.len() / ROW_FLOATS, "parameters": s.parameters, "sha256": hex(&Sha256::digest(&bytes))}),
            );
        }
        let manifest = json!({
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
        });
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
        assert_eq!(ds.resolution, [8, 4]);
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
