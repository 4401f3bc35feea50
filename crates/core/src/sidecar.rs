//! The binary sidecar of a model file. Large parameter tensors (every grid table, and any
//! tensor of at least [`MIN_VALUES`] values) are stored as little-endian f32 in a
//! [safetensors](https://github.com/huggingface/safetensors) file beside `weights.json`,
//! which names the file, states its length and sha256, and gives each such tensor's byte
//! range. `docs/model-format.md` ("Sidecar") documents the layout for other readers.
//!
//! Reading checks, in this order, and names the first failure: the length, the sha256, the
//! safetensors structure, that every tensor the model file places in the sidecar is there
//! as F32 with the stated shape and byte range, that the sidecar holds nothing else, and
//! that every value is finite.

use crate::limits::{one_line, quote};
use crate::texture::hex;
use safetensors::{Dtype, SafeTensors, View};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::BTreeSet;

/// The `format` the model file states for its sidecar.
pub const FORMAT: &str = "safetensors";

/// Tensors of at least this many values go to the sidecar even when they are not grid
/// tables (2^20 values: 4 MiB as f32, about 10 MiB as JSON text). No MLP layer of a
/// usual size comes near it, so models without grids stay a single file.
pub const MIN_VALUES: usize = 1 << 20;

/// Where a tensor's values lie in the sidecar: bytes `byte_offset .. byte_offset +
/// byte_length` of the whole file (header included), little-endian f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub byte_offset: u64,
    pub byte_length: u64,
}

/// One tensor to store.
pub struct Tensor<'a> {
    pub name: &'a str,
    pub shape: &'a [usize],
    pub values: &'a [f32],
}

/// A tensor the model file places in the sidecar, as the model file describes it.
pub struct Wanted<'a> {
    pub name: &'a str,
    pub shape: &'a [usize],
    pub span: Span,
}

/// What the model file says about its sidecar (top-level field `sidecar`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    /// File name, relative to the directory of the model file.
    pub file: String,
    pub bytes: u64,
    /// Lowercase hex.
    pub sha256: String,
}

/// A sidecar ready to be written.
pub struct Encoded {
    pub bytes: Vec<u8>,
    /// Lowercase hex sha256 of `bytes`.
    pub sha256: String,
    /// The span of each input tensor, in input order.
    pub spans: Vec<Span>,
}

/// A tensor as safetensors sees it; its bytes are made when the writer asks for them, so
/// only one tensor's copy exists beside the output buffer at a time.
struct Raw<'a> {
    shape: &'a [usize],
    values: &'a [f32],
}

impl View for &Raw<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.values.iter().flat_map(|v| v.to_le_bytes()).collect())
    }
    fn data_len(&self) -> usize {
        self.values.len() * 4
    }
}

/// Encodes `tensors` (distinct names) as a safetensors file without metadata. The crate
/// orders tensors by name and pads the header with spaces to a multiple of 8 bytes, so the
/// same tensors always give the same bytes.
pub fn encode(tensors: &[Tensor<'_>]) -> Encoded {
    let raws: Vec<(&str, Raw<'_>)> = tensors
        .iter()
        .map(|t| {
            let (shape, values) = (t.shape, t.values);
            (t.name, Raw { shape, values })
        })
        .collect();
    // Fails only for a header over 100 MB (millions of tensors) or for values that do not
    // match their shape, neither of which a network's tensor list can produce.
    let bytes = safetensors::serialize(raws.iter().map(|(n, r)| (*n, r)), None)
        .expect("a network's tensors serialise as safetensors");
    let (header, meta) = SafeTensors::read_metadata(&bytes).expect("own output parses");
    let data_start = 8 + header as u64;
    let spans = tensors
        .iter()
        .map(|t| {
            let (a, b) = meta.info(t.name).expect("tensor was written").data_offsets;
            Span {
                byte_offset: data_start + a as u64,
                byte_length: (b - a) as u64,
            }
        })
        .collect();
    let sha256 = hex(&Sha256::digest(&bytes));
    Encoded {
        bytes,
        sha256,
        spans,
    }
}

/// Whether `name` is acceptable as a sidecar file name: a plain file name in the model
/// file's directory (no directories, no `..`).
pub fn check_file_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.contains(['/', '\\', '\0'])
        || name.contains(':')
        || name.chars().any(crate::limits::is_unsafe_char)
        || name.len() > 255
    {
        return Err(format!(
            "'{}' is not a plain file name beside the model file",
            quote(name)
        ));
    }
    Ok(())
}

/// Checks that `bytes` has the length the model file declares (the first check of
/// [`read`]).
pub fn check_length(bytes: &[u8], declared: &Declared) -> Result<(), String> {
    if bytes.len() as u64 != declared.bytes {
        return Err(format!(
            "is {} bytes but the model file says {} (truncated or replaced?)",
            bytes.len(),
            declared.bytes
        ));
    }
    Ok(())
}

/// Verifies `bytes` against the model file's declaration and tensor list and hands each
/// wanted tensor's values (in `wanted` order) to `sink`. The error is one sentence.
pub fn read(
    bytes: &[u8],
    declared: &Declared,
    wanted: &[Wanted<'_>],
    mut sink: impl FnMut(usize, &mut dyn Iterator<Item = f32>),
) -> Result<(), String> {
    check_length(bytes, declared)?;
    let digest = hex(&Sha256::digest(bytes));
    if !digest.eq_ignore_ascii_case(&declared.sha256) {
        return Err(format!(
            "sha256 mismatch: the file has {digest}, the model file says {} (modified after saving?)",
            declared.sha256
        ));
    }
    let st = SafeTensors::deserialize(bytes).map_err(|e| {
        format!(
            "is not a valid safetensors file: {}",
            one_line(&e.to_string())
        )
    })?;
    let base = bytes.as_ptr() as usize;
    for w in wanted {
        let view = st.tensor(w.name).map_err(|_| {
            format!(
                "holds no tensor '{}' (the model file places it there)",
                w.name
            )
        })?;
        if view.dtype() != Dtype::F32 {
            return Err(format!(
                "tensor '{}' is {:?}, expected F32",
                w.name,
                view.dtype()
            ));
        }
        if view.shape() != w.shape {
            return Err(format!(
                "tensor '{}' has shape {:?}, the model file says {:?}",
                w.name,
                view.shape(),
                w.shape
            ));
        }
        let data = view.data();
        let at = Span {
            byte_offset: (data.as_ptr() as usize - base) as u64,
            byte_length: data.len() as u64,
        };
        if at != w.span {
            return Err(format!(
                "tensor '{}' lies at bytes {}..{}, the model file says {}..{}",
                w.name,
                at.byte_offset,
                at.byte_offset + at.byte_length,
                w.span.byte_offset,
                w.span.byte_offset + w.span.byte_length
            ));
        }
        if let Some(i) = data
            .chunks_exact(4)
            .position(|b| !f32::from_le_bytes(b.try_into().expect("4 bytes")).is_finite())
        {
            return Err(format!("tensor '{}' value {i} is not finite", w.name));
        }
    }
    let listed: BTreeSet<&str> = wanted.iter().map(|w| w.name).collect();
    let mut extra: Vec<&str> = st
        .names()
        .into_iter()
        .filter(|n| !listed.contains(n))
        .collect();
    extra.sort_unstable();
    if let Some(n) = extra.first() {
        return Err(format!(
            "holds tensor '{}' that the model file does not place there",
            quote(n)
        ));
    }
    for (i, w) in wanted.iter().enumerate() {
        let data = st.tensor(w.name).expect("checked above").data();
        let mut values = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")));
        sink(i, &mut values);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<f32>, Vec<f32>) {
        (
            (0..12).map(|i| i as f32 * 0.5).collect(),
            vec![-1.0, 2.5, 1e-4],
        )
    }

    fn encoded() -> (Encoded, Declared) {
        let (a, b) = sample();
        let e = encode(&[
            Tensor {
                name: "0.levels.1",
                shape: &[6, 2],
                values: &a,
            },
            Tensor {
                name: "0.levels.0",
                shape: &[3, 1],
                values: &b,
            },
        ]);
        let d = Declared {
            file: "weights.safetensors".into(),
            bytes: e.bytes.len() as u64,
            sha256: e.sha256.clone(),
        };
        (e, d)
    }

    fn wanted(e: &Encoded) -> Vec<Wanted<'static>> {
        vec![
            Wanted {
                name: "0.levels.1",
                shape: &[6, 2],
                span: e.spans[0],
            },
            Wanted {
                name: "0.levels.0",
                shape: &[3, 1],
                span: e.spans[1],
            },
        ]
    }

    fn read_all(bytes: &[u8], d: &Declared, w: &[Wanted<'_>]) -> Result<Vec<Vec<f32>>, String> {
        let mut out = vec![Vec::new(); w.len()];
        read(bytes, d, w, |i, v| out[i] = v.collect())?;
        Ok(out)
    }

    #[test]
    fn encodes_deterministically_and_reads_back() {
        let (e, d) = encoded();
        let (again, _) = encoded();
        assert_eq!(e.bytes, again.bytes);
        // safetensors layout: u64 header length, JSON header padded to 8, then data
        let n = u64::from_le_bytes(e.bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0);
        let header: serde_json::Value = serde_json::from_slice(&e.bytes[8..8 + n]).unwrap();
        assert_eq!(header["0.levels.1"]["dtype"], "F32");
        assert_eq!(header["0.levels.1"]["shape"], serde_json::json!([6, 2]));
        // data ordered by name: levels.0 first
        assert_eq!(e.spans[1].byte_offset, 8 + n as u64);
        assert_eq!(e.spans[0].byte_offset, 8 + n as u64 + 12);
        assert_eq!(e.spans[0].byte_length, 48);
        let (a, b) = sample();
        assert_eq!(read_all(&e.bytes, &d, &wanted(&e)).unwrap(), vec![a, b]);
    }

    #[test]
    fn every_inconsistency_is_named() {
        let (e, d) = encoded();
        let w = wanted(&e);
        let err = |bytes: &[u8], d: &Declared, w: &[Wanted<'_>]| read_all(bytes, d, w).unwrap_err();

        let short = &e.bytes[..e.bytes.len() - 4];
        assert!(err(short, &d, &w).contains("bytes but the model file says"));

        let mut flipped = e.bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(err(&flipped, &d, &w).contains("sha256 mismatch"));

        // a consistent file (sha256 updated) that lacks or adds a tensor, or differs in shape
        let (a, b) = sample();
        let only_a = encode(&[Tensor {
            name: "0.levels.1",
            shape: &[6, 2],
            values: &a,
        }]);
        let decl = |x: &Encoded| Declared {
            bytes: x.bytes.len() as u64,
            sha256: x.sha256.clone(),
            ..d.clone()
        };
        let mut w1 = wanted(&e);
        w1[0].span = only_a.spans[0];
        assert!(read_all(&only_a.bytes, &decl(&only_a), &w1[..1]).is_ok());
        assert!(err(&only_a.bytes, &decl(&only_a), &w1).contains("holds no tensor '0.levels.0'"));
        assert!(err(&e.bytes, &d, &w[..1]).contains("holds tensor '0.levels.0' that"));
        let reshaped = encode(&[
            Tensor {
                name: "0.levels.1",
                shape: &[4, 3],
                values: &a,
            },
            Tensor {
                name: "0.levels.0",
                shape: &[3, 1],
                values: &b,
            },
        ]);
        assert!(err(&reshaped.bytes, &decl(&reshaped), &w).contains("has shape [4, 3]"));
        let mut moved = wanted(&e);
        moved[0].span.byte_offset += 4;
        assert!(err(&e.bytes, &d, &moved).contains("lies at bytes"));

        let nan = [f32::NAN, 0.0, 0.0];
        let bad = encode(&[
            Tensor {
                name: "0.levels.1",
                shape: &[6, 2],
                values: &a,
            },
            Tensor {
                name: "0.levels.0",
                shape: &[3, 1],
                values: &nan,
            },
        ]);
        assert!(err(&bad.bytes, &decl(&bad), &w).contains("'0.levels.0' value 0 is not finite"));

        let junk = vec![0xffu8; 40];
        let jd = Declared {
            bytes: 40,
            sha256: hex(&Sha256::digest(&junk)),
            ..d.clone()
        };
        assert!(err(&junk, &jd, &w).contains("not a valid safetensors file"));
    }

    #[test]
    fn file_names_stay_beside_the_model() {
        assert!(check_file_name("weights.safetensors").is_ok());
        for bad in ["", "..", "../x.safetensors", "/tmp/x", "a\\b", "c:x"] {
            assert!(check_file_name(bad).is_err(), "{bad}");
        }
    }
}
