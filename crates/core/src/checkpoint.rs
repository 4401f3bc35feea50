//! Checkpoint files: a trainer's complete state ([`Checkpoint`]) as safetensors (`params`,
//! `adam_m`, `adam_v`, float32) with string metadata: `step`, and whatever the caller
//! records to refuse a resume under different settings (architecture, data digest, seed,
//! batch, ...). Written atomically; read with bounded sizes.

use crate::limits;
use crate::train::Checkpoint;
use std::collections::HashMap;
use std::path::Path;

/// Largest checkpoint read: three float32 copies of the largest model, plus the header.
pub const MAX_CHECKPOINT_BYTES: u64 = 12 * limits::MAX_PARAMS as u64 + (1 << 20);

/// Writes `checkpoint` and `meta` to `path` (atomically: a temporary sibling renamed).
pub fn save(
    path: &Path,
    checkpoint: &Checkpoint,
    meta: &HashMap<String, String>,
) -> Result<(), String> {
    let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let (p, m, v) = (
        bytes(&checkpoint.params),
        bytes(&checkpoint.m),
        bytes(&checkpoint.v),
    );
    fn view(b: &[u8]) -> Result<safetensors::tensor::TensorView<'_>, String> {
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![b.len() / 4], b)
            .map_err(|e| e.to_string())
    }
    let mut meta = meta.clone();
    meta.insert("step".into(), checkpoint.step.to_string());
    meta.insert("format".into(), "nshade-checkpoint 1".into());
    let out = safetensors::serialize(
        [
            ("params", view(&p)?),
            ("adam_m", view(&m)?),
            ("adam_v", view(&v)?),
        ],
        Some(meta),
    )
    .map_err(|e| e.to_string())?;
    crate::fsutil::write_atomic(path, &out).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads a checkpoint written by [`save`]; its metadata holds `step` and the caller's keys.
pub fn load(path: &Path) -> Result<(Checkpoint, HashMap<String, String>), String> {
    let p = path.display();
    let bytes = limits::read_bounded(path, MAX_CHECKPOINT_BYTES).map_err(|e| match e {
        limits::ReadError::Io(e) => format!("{p}: {e}"),
        e => format!("{p}: {}", e.describe(MAX_CHECKPOINT_BYTES)),
    })?;
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|e| format!("{p}: not a checkpoint ({e})"))?;
    let meta = header.metadata().clone().unwrap_or_default();
    if meta.get("format").map(String::as_str) != Some("nshade-checkpoint 1") {
        return Err(format!("{p}: not an nshade checkpoint"));
    }
    let step = meta
        .get("step")
        .and_then(|s| s.parse::<u32>().ok())
        .ok_or_else(|| format!("{p}: the checkpoint has no step"))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| format!("{p}: {e}"))?;
    let tensor = |name: &str| -> Result<Vec<f32>, String> {
        let t = st.tensor(name).map_err(|e| format!("{p}: {name}: {e}"))?;
        if t.dtype() != safetensors::Dtype::F32 {
            return Err(format!("{p}: {name} is not float32"));
        }
        Ok(t.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    };
    let c = Checkpoint {
        params: tensor("params")?,
        m: tensor("adam_m")?,
        v: tensor("adam_v")?,
        step,
    };
    if c.m.len() != c.params.len() || c.v.len() != c.params.len() {
        return Err(format!("{p}: its tensors differ in length"));
    }
    Ok((c, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("a.safetensors");
        let c = Checkpoint {
            params: vec![1.0, -2.5, 3.0],
            m: vec![0.1, 0.2, 0.3],
            v: vec![1e-9, 0.0, 7.0],
            step: 42,
        };
        let meta = HashMap::from([("arch".to_string(), "mlp(4x1, relu)".to_string())]);
        save(&path, &c, &meta).unwrap();
        let (back, m) = load(&path).unwrap();
        assert_eq!(back, c);
        assert_eq!(m["arch"], "mlp(4x1, relu)");
        assert_eq!(m["step"], "42");
        std::fs::write(&path, b"junk").unwrap();
        assert!(load(&path).unwrap_err().contains("not a checkpoint"));
        assert!(load(&d.path().join("none")).is_err());
    }
}
