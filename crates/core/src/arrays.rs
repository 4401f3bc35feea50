//! Training data from arrays: `.npy` pairs, `.npz` and `.safetensors` archives, and
//! texture sets (several images of one size stacked into one multi-channel target).
//!
//! Everything read here comes from other people: every size is bounded before it is
//! allocated, every value must be finite, and every error is one line naming the file and
//! what is wrong with it (`docs/arrays.md`).

use crate::data::Rows;
use crate::limits;
use crate::model::{InputSpec, check_name};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// The largest array file (or archive) read: 4 GiB.
pub const MAX_ARRAY_FILE_BYTES: u64 = 4 << 30;
/// The most values one array may hold (4 GiB of float32).
pub const MAX_ARRAY_VALUES: u64 = 1 << 30;
/// The most columns of inputs or of targets.
pub const MAX_COLUMNS: usize = 256;
/// The most entries an archive may list.
pub const MAX_ARCHIVE_ENTRIES: usize = 64;

/// Names an archive's inputs may have, in order of preference.
pub const INPUT_NAMES: &[&str] = &["x", "inputs", "input", "X"];
/// Names an archive's targets may have.
pub const TARGET_NAMES: &[&str] = &["y", "targets", "target", "Y"];

#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ArrayError {
    pub path: String,
    pub message: String,
}

fn fail<T>(path: &str, message: impl Into<String>) -> Result<T, ArrayError> {
    Err(ArrayError {
        path: path.to_string(),
        message: message.into(),
    })
}

/// A 2-D array of float32, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl Table {
    fn new(rows: usize, cols: usize, data: Vec<f32>) -> Table {
        debug_assert_eq!(rows * cols, data.len());
        Table { rows, cols, data }
    }

    /// A table from untrusted values: 1 to [`MAX_COLUMNS`] columns, `rows · cols` values,
    /// every one finite; errors name `name`.
    pub fn checked(
        rows: usize,
        cols: usize,
        data: Vec<f32>,
        name: &str,
    ) -> Result<Table, ArrayError> {
        if cols == 0 || cols > MAX_COLUMNS {
            return fail(
                name,
                format!("the array has {cols} columns; nshade takes 1 to {MAX_COLUMNS}"),
            );
        }
        if rows.checked_mul(cols) != Some(data.len()) {
            return fail(
                name,
                format!(
                    "shape ({rows}, {cols}) does not match its {} values",
                    data.len()
                ),
            );
        }
        check_finite(&data, cols, name)?;
        Ok(Table::new(rows, cols, data))
    }
}

/// Training rows from arrays: inputs and targets with the same number of rows.
#[derive(Clone, Debug)]
pub struct ArrayData {
    pub inputs: Table,
    pub targets: Table,
    pub input_names: Vec<String>,
    pub output_names: Vec<String>,
    /// The files, as given.
    pub source: String,
    /// SHA-256 over the files' bytes, in order.
    pub sha256: String,
    /// For a texture set: (width, height); rows are its pixels, top row first.
    pub image_size: Option<(usize, usize)>,
}

impl ArrayData {
    /// Rows of inputs `x` and targets `y` (the same number, at least 2), named `x0, x1, ...`
    /// and `y0, y1, ...`.
    pub fn from_tables(
        x: Table,
        y: Table,
        source: String,
        sha256: String,
    ) -> Result<ArrayData, ArrayError> {
        if x.rows != y.rows {
            return fail(
                &source,
                format!(
                    "the inputs have {} rows and the targets {}; they must match",
                    x.rows, y.rows
                ),
            );
        }
        if x.rows < 2 {
            return fail(&source, format!("{} rows; at least 2 are needed", x.rows));
        }
        Ok(ArrayData {
            input_names: (0..x.cols).map(|i| format!("x{i}")).collect(),
            output_names: (0..y.cols).map(|i| format!("y{i}")).collect(),
            inputs: x,
            targets: y,
            source,
            sha256,
            image_size: None,
        })
    }

    /// Rows of `in + out` values each (the layout of [`crate::data::Rows`]).
    pub fn interleaved(&self) -> Vec<f32> {
        let (i, o) = (self.inputs.cols, self.targets.cols);
        let mut out = Vec::with_capacity(self.inputs.rows * (i + o));
        for r in 0..self.inputs.rows {
            out.extend_from_slice(&self.inputs.data[r * i..][..i]);
            out.extend_from_slice(&self.targets.data[r * o..][..o]);
        }
        out
    }

    /// Per input column, `[min, max]` over all rows.
    pub fn input_ranges(&self) -> Vec<[f32; 2]> {
        column_ranges(&self.inputs)
    }
}

/// Per column, `[min, max]`.
pub fn column_ranges(t: &Table) -> Vec<[f32; 2]> {
    let mut r = vec![[f32::INFINITY, f32::NEG_INFINITY]; t.cols];
    for row in t.data.chunks_exact(t.cols.max(1)) {
        for (c, v) in row.iter().enumerate() {
            r[c][0] = r[c][0].min(*v);
            r[c][1] = r[c][1].max(*v);
        }
    }
    r
}

/// The file kinds this module reads, by extension.
pub fn is_array_file(path: &Path) -> bool {
    matches!(
        path.extension()
            .and_then(|e| e.to_str())
            .map(|e| e.to_ascii_lowercase())
            .as_deref(),
        Some("npy" | "npz" | "safetensors")
    )
}

fn read_file(path: &Path) -> Result<Vec<u8>, ArrayError> {
    let p = path.display().to_string();
    limits::read_bounded(path, MAX_ARRAY_FILE_BYTES).map_err(|e| ArrayError {
        path: p,
        message: match e {
            limits::ReadError::Io(e) => format!("cannot read it: {e}"),
            e => e.describe(MAX_ARRAY_FILE_BYTES),
        },
    })
}

/// Parses one `.npy` array of 1 or 2 dimensions (a 1-D array is one column) holding
/// little-endian float32, float64 or float16, or uint8 (values as stored).
pub fn parse_npy(bytes: &[u8], name: &str) -> Result<Table, ArrayError> {
    // The shape is checked before npyz sees it: its own size arithmetic overflows on a
    // header that claims an enormous shape.
    if let Some(shape) = header_shape(bytes) {
        let count = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if count.is_none_or(|c| c > MAX_ARRAY_VALUES) {
            return fail(
                name,
                format!("the array's shape {shape:?} holds more than {MAX_ARRAY_VALUES} values"),
            );
        }
    }
    let npy = match npyz::NpyFile::new(bytes) {
        Ok(n) => n,
        Err(e) => return fail(name, format!("not a valid .npy array ({e})")),
    };
    if npy.order() != npyz::Order::C {
        return fail(
            name,
            "the array is in Fortran order; save it in C order (np.ascontiguousarray)",
        );
    }
    let shape = npy.shape().to_vec();
    let (rows, cols) = match shape.as_slice() {
        [n] => (*n, 1),
        [n, c] => (*n, *c),
        _ => {
            return fail(
                name,
                format!(
                    "the array has shape {shape:?}; nshade reads 2-D arrays (rows, columns) or 1-D ones (one column)"
                ),
            );
        }
    };
    let count = rows.checked_mul(cols).filter(|&c| c <= MAX_ARRAY_VALUES);
    let Some(count) = count else {
        return fail(
            name,
            format!("the array's shape {shape:?} holds more than {MAX_ARRAY_VALUES} values"),
        );
    };
    if cols as usize > MAX_COLUMNS || cols == 0 {
        // Refused before the data is read (Table::checked says the same).
        return fail(
            name,
            format!("the array has {cols} columns; nshade takes 1 to {MAX_COLUMNS}"),
        );
    }
    let descr = npy.dtype().descr();
    let size = match descr.as_str() {
        "'<f4'" => 4,
        "'<f8'" => 8,
        "'<f2'" => 2,
        "'|u1'" => 1,
        d => {
            return fail(
                name,
                format!(
                    "the array holds {d}; nshade reads little-endian float32, float64, float16 or uint8 (convert with .astype('<f4'))"
                ),
            );
        }
    };
    let data_len = npy_data_len(bytes);
    if count * size != data_len as u64 {
        return fail(
            name,
            format!("the header says shape {shape:?} but the file holds {data_len} data bytes"),
        );
    }
    let data: Vec<f32> = match size {
        4 => npy.into_vec::<f32>().map_err(|e| io_err(name, e))?,
        8 => npy
            .into_vec::<f64>()
            .map_err(|e| io_err(name, e))?
            .into_iter()
            .map(|v| v as f32)
            .collect(),
        2 => {
            let raw = &bytes[bytes.len() - data_len..];
            raw.chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect()
        }
        _ => bytes[bytes.len() - data_len..]
            .iter()
            .map(|&b| b as f32)
            .collect(),
    };
    Table::checked(rows as usize, cols as usize, data, name)
}

fn io_err(name: &str, e: impl std::fmt::Display) -> ArrayError {
    ArrayError {
        path: name.to_string(),
        message: format!("reading the array: {e}"),
    }
}

fn check_finite(data: &[f32], cols: usize, name: &str) -> Result<(), ArrayError> {
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return fail(
            name,
            format!(
                "value at row {}, column {} is {} (every value must be finite)",
                i / cols.max(1),
                i % cols.max(1),
                data[i]
            ),
        );
    }
    Ok(())
}

/// The `shape` of an `.npy` header, when it can be read (`None` leaves the judgement to the
/// full parser).
fn header_shape(bytes: &[u8]) -> Option<Vec<u64>> {
    let len = bytes.len() - npy_data_len(bytes);
    let text = std::str::from_utf8(bytes.get(10.min(len)..len)?).ok()?;
    let after = &text[text.find("'shape'")? + 7..];
    let open = after.find('(')?;
    let close = after[open..].find(')')? + open;
    after[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.trim_end_matches('L').parse::<u64>().ok())
        .collect()
}

/// Bytes after an `.npy` header (its length is in the header's first 10 or 12 bytes).
fn npy_data_len(bytes: &[u8]) -> usize {
    let header = match bytes.get(6) {
        Some(1) if bytes.len() >= 10 => 10 + u16::from_le_bytes([bytes[8], bytes[9]]) as usize,
        Some(2 | 3) if bytes.len() >= 12 => {
            12 + u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize
        }
        _ => bytes.len(),
    };
    bytes.len().saturating_sub(header)
}

/// The named 2-D arrays of an `.npz` archive (entries `NAME.npy`).
pub fn read_npz(path: &Path) -> Result<Vec<(String, Table)>, ArrayError> {
    let p = path.display().to_string();
    let bytes = read_file(path)?;
    let mut zip = match zip::ZipArchive::new(std::io::Cursor::new(&bytes)) {
        Ok(z) => z,
        Err(e) => return fail(&p, format!("not a valid .npz (zip) archive ({e})")),
    };
    if zip.len() > MAX_ARCHIVE_ENTRIES {
        return fail(
            &p,
            format!(
                "the archive lists {} entries; at most {MAX_ARCHIVE_ENTRIES}",
                zip.len()
            ),
        );
    }
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let mut entry = match zip.by_index(i) {
            Ok(e) => e,
            Err(e) => return fail(&p, format!("entry {i}: {e}")),
        };
        let Some(name) = entry.name().strip_suffix(".npy").map(str::to_string) else {
            continue;
        };
        let label = format!("{p}[{name}]");
        // Decompressed sizes are bounded whatever the entry's header claims.
        let mut data = Vec::new();
        (&mut entry)
            .take(MAX_ARRAY_FILE_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(|e| io_err(&label, e))?;
        if data.len() as u64 > MAX_ARRAY_FILE_BYTES {
            return fail(&label, "decompresses to more than 4 GiB");
        }
        out.push((name, parse_npy(&data, &label)?));
    }
    Ok(out)
}

/// The 1-D or 2-D tensors of a `.safetensors` file (F32, F64, F16, BF16 or U8).
pub fn read_safetensors(path: &Path) -> Result<Vec<(String, Table)>, ArrayError> {
    use safetensors::Dtype;
    let p = path.display().to_string();
    let bytes = read_file(path)?;
    let st = match safetensors::SafeTensors::deserialize(&bytes) {
        Ok(s) => s,
        Err(e) => return fail(&p, format!("not a valid .safetensors file ({e})")),
    };
    if st.len() > MAX_ARCHIVE_ENTRIES {
        return fail(
            &p,
            format!(
                "the file holds {} tensors; at most {MAX_ARCHIVE_ENTRIES}",
                st.len()
            ),
        );
    }
    let mut out = Vec::new();
    let mut names = st.names();
    names.sort();
    for name in names {
        let label = format!("{p}[{name}]");
        let t = st.tensor(name).map_err(|e| io_err(&label, e))?;
        let shape = t.shape().to_vec();
        let (rows, cols) = match shape.as_slice() {
            [n] => (*n, 1),
            [n, c] => (*n, *c),
            _ => {
                return fail(
                    &label,
                    format!("the tensor has shape {shape:?}; nshade reads 1-D or 2-D tensors"),
                );
            }
        };
        let raw = t.data();
        let data: Vec<f32> = match t.dtype() {
            Dtype::F32 => raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F64 => raw
                .chunks_exact(8)
                .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32)
                .collect(),
            Dtype::F16 => raw
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => raw
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::U8 => raw.iter().map(|&b| b as f32).collect(),
            d => {
                return fail(
                    &label,
                    format!("the tensor holds {d:?}; nshade reads F32, F64, F16, BF16 or U8"),
                );
            }
        };
        out.push((name.to_string(), Table::checked(rows, cols, data, &label)?));
    }
    Ok(out)
}

/// Picks the inputs and targets of an archive by name ([`INPUT_NAMES`], [`TARGET_NAMES`]).
fn pick(path: &str, mut arrays: Vec<(String, Table)>) -> Result<(Table, Table), ArrayError> {
    let mut take = |names: &[&str], what: &str| {
        let found: Vec<usize> = arrays
            .iter()
            .enumerate()
            .filter(|(_, (n, _))| names.contains(&n.as_str()))
            .map(|(i, _)| i)
            .collect();
        match found.as_slice() {
            [i] => Ok(arrays.remove(*i).1),
            [] => fail(
                path,
                format!(
                    "no {what} array: name it one of {} (it holds {})",
                    names.join(", "),
                    if arrays.is_empty() {
                        "no arrays".to_string()
                    } else {
                        arrays
                            .iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            ),
            _ => fail(
                path,
                format!("more than one {what} array (of {})", names.join(", ")),
            ),
        }
    };
    let x = take(INPUT_NAMES, "inputs")?;
    let y = take(TARGET_NAMES, "targets")?;
    Ok((x, y))
}

/// Loads arrays for training: `inputs` is an `.npz` or `.safetensors` archive holding both
/// (see [`INPUT_NAMES`], [`TARGET_NAMES`]), or an `.npy` of inputs with `targets` an `.npy`
/// of targets.
pub fn load(inputs: &Path, targets: Option<&Path>) -> Result<ArrayData, ArrayError> {
    let p = inputs.display().to_string();
    let ext = inputs
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .unwrap_or_default();
    let mut hasher = Sha256::new();
    let (x, y, source) = match (ext.as_str(), targets) {
        ("npy", Some(t)) => {
            let xb = read_file(inputs)?;
            let tb = read_file(t)?;
            hasher.update(&xb);
            hasher.update(&tb);
            let tp = t.display().to_string();
            (
                parse_npy(&xb, &p)?,
                parse_npy(&tb, &tp)?,
                format!("{p} + {tp}"),
            )
        }
        ("npy", None) => {
            return fail(
                &p,
                "an .npy file holds one array: give the targets with --targets FILE.npy (or put x and y in one .npz)",
            );
        }
        ("npz" | "safetensors", None) => {
            hasher.update(read_file(inputs)?);
            let arrays = if ext == "npz" {
                read_npz(inputs)?
            } else {
                read_safetensors(inputs)?
            };
            let (x, y) = pick(&p, arrays)?;
            (x, y, p.clone())
        }
        (_, Some(_)) => {
            return fail(
                &p,
                "--targets goes with an .npy of inputs; an archive holds its own targets",
            );
        }
        _ => {
            return fail(&p, "not an array file (.npy, .npz or .safetensors)");
        }
    };
    ArrayData::from_tables(x, y, source, hex(&hasher.finalize()))
}

/// A texture set: several images of one size, one row per pixel with inputs (u, v) at
/// the pixel centre and targets the images' channels side by side, each image with its
/// own channel count (grey 1, grey+alpha 2, RGB 3, RGBA 4; values as the decoder gives
/// them in [0, 1] for 8/16-bit files, linear floats for EXR). Outputs are named
/// `STEM.r`, `STEM.g`, ... (`STEM.l` for grey, `.a` for alpha). An EXR of other channels
/// than one layer's R, G, B (A) gives all its channels ([`crate::exr_channels`]), named as
/// the file names them (`albedo.R`), after `STEM.` when the set has several files; such
/// an EXR alone is a texture set too.
pub fn texture_set(paths: &[&Path]) -> Result<ArrayData, ArrayError> {
    let mut hasher = Sha256::new();
    let mut size = None;
    let mut planes: Vec<(Vec<f32>, usize)> = Vec::new();
    let mut output_names = Vec::new();
    for path in paths {
        let p = path.display().to_string();
        if crate::exr_channels::is_multichannel(path) {
            // An EXR of any channels: all of them, named as the file names them.
            let e = crate::exr_channels::read(path)?;
            hasher.update(e.sha256.as_bytes());
            check_size(&mut size, (e.width, e.height), &p)?;
            let n = e.channels.len();
            let mut data = vec![0.0f32; e.width * e.height * n];
            for (c, (name, values)) in e.channels.iter().enumerate() {
                for (i, v) in values.iter().enumerate() {
                    data[i * n + c] = *v;
                }
                let name: String = name
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || "_-.".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                let name = if paths.len() == 1 {
                    name
                } else {
                    format!("{}.{name}", stem_of(path))
                };
                push_name(&mut output_names, name, &p)?;
            }
            planes.push((data, n));
            continue;
        }
        let (img, sha) = crate::texture::decode(path).map_err(|e| ArrayError {
            path: p.clone(),
            message: e.to_string(),
        })?;
        hasher.update(sha.as_bytes());
        check_size(&mut size, (img.width() as usize, img.height() as usize), &p)?;
        let (data, chans): (Vec<f32>, &[&str]) = match img.color().channel_count() {
            1 => (img.to_luma32f().into_raw(), &["l"]),
            2 => (img.to_luma_alpha32f().into_raw(), &["l", "a"]),
            3 => (img.to_rgb32f().into_raw(), &["r", "g", "b"]),
            _ => (img.to_rgba32f().into_raw(), &["r", "g", "b", "a"]),
        };
        check_finite(&data, chans.len(), &p)?;
        let stem = stem_of(path);
        for c in chans {
            push_name(&mut output_names, format!("{stem}.{c}"), &p)?;
        }
        planes.push((data, chans.len()));
    }
    let Some((w, h)) = size else {
        return fail("texture set", "no images");
    };
    let cols: usize = planes.iter().map(|p| p.1).sum();
    if cols > MAX_COLUMNS {
        return fail(
            "texture set",
            format!("{cols} channels in all; at most {MAX_COLUMNS}"),
        );
    }
    let mut inputs = Vec::with_capacity(w * h * 2);
    let mut targets = Vec::with_capacity(w * h * cols);
    for y in 0..h {
        for x in 0..w {
            inputs.push((x as f32 + 0.5) / w as f32);
            inputs.push((y as f32 + 0.5) / h as f32);
            let i = y * w + x;
            for (data, c) in &planes {
                targets.extend_from_slice(&data[i * c..][..*c]);
            }
        }
    }
    Ok(ArrayData {
        inputs: Table::new(w * h, 2, inputs),
        targets: Table::new(w * h, cols, targets),
        input_names: vec!["u".into(), "v".into()],
        output_names,
        source: paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" + "),
        sha256: hex(&hasher.finalize()),
        image_size: Some((w, h)),
    })
}

/// A texture-set member's stem for its outputs' names.
fn stem_of(path: &Path) -> String {
    sanitize(
        &path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
}

/// Adds an output name, made unique (`_` before the last component) and checked.
fn push_name(names: &mut Vec<String>, mut name: String, path: &str) -> Result<(), ArrayError> {
    while names.contains(&name) {
        name = match name.rsplit_once('.') {
            Some((a, b)) => format!("{a}_.{b}"),
            None => format!("{name}_"),
        };
    }
    check_name(&name).map_err(|e| ArrayError {
        path: path.to_string(),
        message: format!("output {e}"),
    })?;
    names.push(name);
    Ok(())
}

/// Every member of a texture set has the first one's size.
fn check_size(
    size: &mut Option<(usize, usize)>,
    (w, h): (usize, usize),
    path: &str,
) -> Result<(), ArrayError> {
    match *size {
        None => *size = Some((w, h)),
        Some((sw, sh)) if (sw, sh) != (w, h) => {
            return fail(
                path,
                format!(
                    "it is {w}x{h}; the texture set's first image is {sw}x{sh} (all must be one size)"
                ),
            );
        }
        _ => {}
    }
    Ok(())
}

/// splitmix64: the validation split's per-row draw.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Row indices of the training and validation splits: row `i` is held out when
/// `mix(seed ^ mix(i)) / 2^64 < fraction` (the same rows for the same seed and data).
pub fn split(rows: usize, fraction: f64, seed: u64) -> (Vec<usize>, Vec<usize>) {
    let (mut train, mut val) = (Vec::new(), Vec::new());
    for i in 0..rows {
        let u = mix(seed ^ mix(i as u64)) as f64 / 18_446_744_073_709_551_616.0;
        if u < fraction {
            val.push(i);
        } else {
            train.push(i);
        }
    }
    (train, val)
}

/// The input mapping: each column's training range onto [0, 1] (a constant column maps
/// to 0). A texture set's (u, v) already lie in [0, 1] and are kept.
pub fn input_mapping(data: &ArrayData, ranges: &[[f32; 2]]) -> InputSpec {
    if data.image_size.is_some() {
        return InputSpec::uv();
    }
    let (mut scale, mut offset) = (Vec::new(), Vec::new());
    for r in ranges {
        let span = r[1] - r[0];
        let s = if span > 0.0 { 1.0 / span } else { 1.0 };
        scale.push(s);
        offset.push(-r[0] * s);
    }
    InputSpec {
        names: data.input_names.clone(),
        domain: ranges.to_vec(),
        scale,
        offset,
        convention: "array columns in file order; each input mapped from its training range onto [0, 1] (x * scale + offset)".into(),
    }
}

/// Mean squared error and PSNR of `pred` against `want` (rows of `cols`) over the columns
/// `from..to`, with PSNR peak `peak`.
pub fn score(
    pred: &[f32],
    want: &[f32],
    cols: usize,
    from: usize,
    to: usize,
    peak: f64,
) -> (f64, f64) {
    let (mut sum, mut n) = (0.0f64, 0usize);
    for (p, w) in pred.chunks_exact(cols).zip(want.chunks_exact(cols)) {
        for c in from..to {
            let d = (p[c] - w[c]) as f64;
            sum += d * d;
            n += 1;
        }
    }
    let mse = sum / n.max(1) as f64;
    let psnr = if mse > 0.0 {
        10.0 * (peak * peak / mse).log10()
    } else {
        f64::INFINITY
    };
    (mse, psnr)
}

/// Early stopping (`fit --stop-at-psnr`, Python's `stop_at_psnr`) is checked after every
/// this many steps.
pub const STOP_CHECK_EVERY: u32 = 1024;

/// Whether a run with early stopping at `target` dB stops after `done` of `total` steps:
/// checked on multiples of [`STOP_CHECK_EVERY`] before the last step, where `psnr` (the
/// model's PSNR over all outputs on the scored rows) is called. It depends on the
/// parameters alone, so a run stops at the same step every time (and after a resume).
pub fn stop_early<E>(
    done: u32,
    total: u32,
    target: Option<f64>,
    psnr: impl FnOnce() -> Result<f64, E>,
) -> Result<bool, E> {
    match target {
        Some(t) if done.is_multiple_of(STOP_CHECK_EVERY) && done < total => Ok(psnr()? >= t),
        _ => Ok(false),
    }
}

/// Arrays ready to train on: the training rows (inputs mapped), the mapping, the split,
/// and the rows a model is scored on.
pub struct Prepared {
    /// Training rows: mapped inputs then raw targets.
    pub rows: Rows,
    pub spec: InputSpec,
    pub train_rows: Vec<usize>,
    pub val_rows: Vec<usize>,
    /// Raw inputs and targets of the scored rows: the validation rows, or every row
    /// when none are held out.
    pub score_x: Vec<f32>,
    pub score_y: Vec<f32>,
    /// PSNR peak: 1 when every target lies in [0, 1], else the largest target range.
    pub peak: f64,
}

/// Splits `data` ([`split`]), maps the inputs (`keep`, a model's mapping when
/// fine-tuning, else [`input_mapping`] of the training rows) and gathers the rows.
pub fn prepare(
    data: &ArrayData,
    fraction: f64,
    seed: u64,
    keep: Option<InputSpec>,
) -> Result<Prepared, String> {
    let (train_rows, val_rows) = split(data.inputs.rows, fraction, seed);
    prepare_split(data, train_rows, val_rows, keep)
}

/// [`prepare`] with the split given: training on `train_rows`, scoring on `val_rows` (on
/// the training rows when it is empty). Python's `validation=(x, y)` appends its rows to
/// the data and holds out exactly those.
pub fn prepare_split(
    data: &ArrayData,
    train_rows: Vec<usize>,
    val_rows: Vec<usize>,
    keep: Option<InputSpec>,
) -> Result<Prepared, String> {
    let (in_dims, out_dims) = (data.inputs.cols, data.targets.cols);
    if train_rows.is_empty() {
        return Err("no training rows are left".into());
    }
    let gather = |t: &Table, idx: &[usize]| -> Vec<f32> {
        let mut out = Vec::with_capacity(idx.len() * t.cols);
        for &i in idx {
            out.extend_from_slice(&t.data[i * t.cols..][..t.cols]);
        }
        out
    };
    let train_x = Table::new(train_rows.len(), in_dims, gather(&data.inputs, &train_rows));
    let spec = keep.unwrap_or_else(|| input_mapping(data, &column_ranges(&train_x)));
    let mut mapped = train_x.data;
    spec.apply(&mut mapped);
    let train_y = gather(&data.targets, &train_rows);
    let mut rows = Vec::with_capacity(train_rows.len() * (in_dims + out_dims));
    for (x, y) in mapped
        .chunks_exact(in_dims)
        .zip(train_y.chunks_exact(out_dims))
    {
        rows.extend_from_slice(x);
        rows.extend_from_slice(y);
    }
    let scored = if val_rows.is_empty() {
        &train_rows
    } else {
        &val_rows
    };
    let unit = data.targets.data.iter().all(|v| (0.0..=1.0).contains(v));
    let peak = if unit {
        1.0
    } else {
        column_ranges(&data.targets)
            .iter()
            .map(|c| (c[1] - c[0]) as f64)
            .fold(0.0, f64::max)
            .max(1e-12)
    };
    Ok(Prepared {
        score_x: gather(&data.inputs, scored),
        score_y: gather(&data.targets, scored),
        rows: Rows {
            in_dims,
            out_dims,
            data: rows,
        },
        spec,
        train_rows,
        val_rows,
        peak,
    })
}

/// A file stem as an output-name prefix: allowed characters kept, others `_`, at most
/// 24 characters (names are at most 32).
fn sanitize(stem: &str) -> String {
    let s: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(24)
        .collect();
    if s.is_empty() { "image".into() } else { s }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `.npy` file: a version-1 header with `descr` and `shape`, then `data`.
    pub fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn npy_dtypes_and_shapes() {
        let t = parse_npy(&npy("<f4", "(2, 3)", &f32s(&[1., 2., 3., 4., 5., 6.])), "a").unwrap();
        assert_eq!((t.rows, t.cols), (2, 3));
        assert_eq!(t.data, [1., 2., 3., 4., 5., 6.]);
        let t = parse_npy(&npy("<f4", "(3,)", &f32s(&[1., 2., 3.])), "a").unwrap();
        assert_eq!((t.rows, t.cols), (3, 1));
        let d: Vec<u8> = [0.5f64, -2.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let t = parse_npy(&npy("<f8", "(2, 1)", &d), "a").unwrap();
        assert_eq!(t.data, [0.5, -2.0]);
        let h: Vec<u8> = [half::f16::from_f32(0.25), half::f16::from_f32(3.0)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(
            parse_npy(&npy("<f2", "(2,)", &h), "a").unwrap().data,
            [0.25, 3.0]
        );
        assert_eq!(
            parse_npy(&npy("|u1", "(1, 2)", &[7, 255]), "a")
                .unwrap()
                .data,
            [7.0, 255.0]
        );
    }

    #[test]
    fn npy_errors_are_one_line_each() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not numpy".to_vec(), "not a valid .npy"),
            (npy("<i4", "(2,)", &[0; 8]), "'<i4'"),
            (npy(">f4", "(2,)", &[0; 8]), "'>f4'"),
            (npy("<f4", "(2, 2, 2)", &[0; 32]), "2-D arrays"),
            (npy("<f4", "(2, 3)", &[0; 20]), "data bytes"),
            (npy("<f4", "(2, 0)", &[]), "0 columns"),
            (npy("<f4", "(2, 1000)", &[]), "1000 columns"),
            (npy("<f4", "(4611686018427387904, 4)", &[]), "more than"),
            (
                npy("<f4", "(2,)", &f32s(&[1.0, f32::NAN])),
                "row 1, column 0 is NaN",
            ),
            (npy("<f4", "(1, 2)", &f32s(&[f32::INFINITY, 1.0])), "is inf"),
        ];
        for (bytes, want) in cases {
            let e = parse_npy(&bytes, "f.npy").unwrap_err().to_string();
            assert!(e.starts_with("f.npy: ") && e.contains(want), "{want}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // A header that claims to be huge.
        let mut big = npy("<f4", "(1,)", &f32s(&[1.0]));
        big[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(parse_npy(&big, "f.npy").is_err());
    }

    #[test]
    fn pairs_archives_and_mismatches() {
        let dir = tempfile::tempdir().unwrap();
        let x = dir.path().join("x.npy");
        let y = dir.path().join("y.npy");
        std::fs::write(&x, npy("<f4", "(3, 2)", &f32s(&[0., 1., 2., 3., 4., 5.]))).unwrap();
        std::fs::write(&y, npy("<f4", "(3,)", &f32s(&[9., 8., 7.]))).unwrap();
        let d = load(&x, Some(&y)).unwrap();
        assert_eq!((d.inputs.cols, d.targets.cols, d.inputs.rows), (2, 1, 3));
        assert_eq!(d.interleaved(), [0., 1., 9., 2., 3., 8., 4., 5., 7.]);
        assert_eq!(d.input_ranges(), [[0.0, 4.0], [1.0, 5.0]]);
        let e = load(&x, None).unwrap_err().to_string();
        assert!(e.contains("--targets"), "{e}");
        let y2 = dir.path().join("y2.npy");
        std::fs::write(&y2, npy("<f4", "(2,)", &f32s(&[9., 8.]))).unwrap();
        let e = load(&x, Some(&y2)).unwrap_err().to_string();
        assert!(e.contains("3 rows and the targets 2"), "{e}");

        // .npz with x and y.
        let npz = dir.path().join("d.npz");
        {
            let f = std::fs::File::create(&npz).unwrap();
            let mut z = zip::ZipWriter::new(f);
            let o = zip::write::SimpleFileOptions::default();
            z.start_file("x.npy", o).unwrap();
            std::io::Write::write_all(&mut z, &std::fs::read(&x).unwrap()).unwrap();
            z.start_file("y.npy", o).unwrap();
            std::io::Write::write_all(&mut z, &std::fs::read(&y).unwrap()).unwrap();
            z.finish().unwrap();
        }
        let a = load(&npz, None).unwrap();
        assert_eq!(a.interleaved(), d.interleaved());
        // An archive without targets names what it holds.
        let only = dir.path().join("o.npz");
        {
            let mut z = zip::ZipWriter::new(std::fs::File::create(&only).unwrap());
            z.start_file("inputs.npy", zip::write::SimpleFileOptions::default())
                .unwrap();
            std::io::Write::write_all(&mut z, &std::fs::read(&x).unwrap()).unwrap();
            z.finish().unwrap();
        }
        let e = load(&only, None).unwrap_err().to_string();
        assert!(
            e.contains("no targets array") && e.contains("it holds"),
            "{e}"
        );
        let e = load(&dir.path().join("junk.npz"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read"), "{e}");

        // .safetensors with x (f16) and y (f32).
        let st = dir.path().join("d.safetensors");
        let xh: Vec<u8> = [0f32, 1., 2., 3., 4., 5.]
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        let yb = f32s(&[9., 8., 7.]);
        let tensors = vec![
            (
                "x",
                safetensors::tensor::TensorView::new(safetensors::Dtype::F16, vec![3, 2], &xh)
                    .unwrap(),
            ),
            (
                "y",
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![3], &yb)
                    .unwrap(),
            ),
        ];
        safetensors::serialize_to_file(tensors, None, &st).unwrap();
        let s = load(&st, None).unwrap();
        assert_eq!(s.interleaved(), d.interleaved());
    }

    #[test]
    fn split_is_deterministic_and_near_its_fraction() {
        let (t, v) = split(10_000, 0.1, 7);
        assert_eq!(t.len() + v.len(), 10_000);
        assert!((900..1100).contains(&v.len()), "{}", v.len());
        assert_eq!(split(10_000, 0.1, 7), (t.clone(), v.clone()));
        assert_ne!(split(10_000, 0.1, 8).1, v);
        assert!(split(100, 0.0, 7).1.is_empty());
    }

    #[test]
    fn scores() {
        let (mse, psnr) = score(&[0.0, 1.0, 0.5, 0.5], &[0.0, 0.9, 0.5, 0.4], 2, 0, 2, 1.0);
        assert!((mse - 0.005).abs() < 1e-9);
        assert!((psnr - 23.0103).abs() < 1e-3);
        let (_, p1) = score(&[0.0, 1.0, 0.5, 0.5], &[0.0, 0.9, 0.5, 0.4], 2, 0, 1, 1.0);
        assert!(p1.is_infinite());
    }

    #[test]
    fn texture_sets_stack_channels() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("albedo.png");
        let r = dir.path().join("rough.png");
        let mut rgb = image::RgbImage::new(2, 2);
        rgb.put_pixel(1, 0, image::Rgb([255, 0, 51]));
        rgb.save(&a).unwrap();
        let mut grey = image::GrayImage::new(2, 2);
        grey.put_pixel(1, 0, image::Luma([102]));
        grey.save(&r).unwrap();
        let d = texture_set(&[&a, &r]).unwrap();
        assert_eq!(
            d.output_names,
            ["albedo.r", "albedo.g", "albedo.b", "rough.l"]
        );
        assert_eq!((d.inputs.rows, d.targets.cols), (4, 4));
        assert_eq!(d.inputs.data[2..4], [0.75, 0.25]);
        assert_eq!(d.targets.data[4..8], [1.0, 0.0, 0.2, 0.4]);
        let small = dir.path().join("small.png");
        image::GrayImage::new(1, 2).save(&small).unwrap();
        let e = texture_set(&[&a, &small]).unwrap_err().to_string();
        assert!(e.contains("1x2") && e.contains("2x2"), "{e}");
    }
}
