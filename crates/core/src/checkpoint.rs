//! Checkpoint files: a trainer's complete state ([`Checkpoint`]) as safetensors (`params`,
//! `adam_m`, `adam_v`, float32) with string metadata: `step`, and whatever the caller
//! records to refuse a resume under different settings (architecture, data digest, seed,
//! batch, ...). Written atomically; read with bounded sizes.

use crate::limits;
use crate::train::{Checkpoint, TrainError, Trainer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

/// The sha256 (hex) of a parameter vector's little-endian bytes: what a fine-tuning run's
/// checkpoint records of the parameters it started from.
pub fn params_digest(params: &[f32]) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for v in params {
        h.update(v.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// A checkpoint read back to resume from, and the metadata saved with it (the settings
/// and whatever the caller added, see [`Checkpointer::save`]).
pub type Resumed = (Checkpoint, HashMap<String, String>);

/// One training run's checkpoint: its file (`DIR/NAME.safetensors`), the settings it must
/// be resumed under, and when the next one is due. Every training command (and the Python
/// module) keeps its checkpoints through this, so they are written, checked and removed
/// the same way.
#[derive(Clone, Debug)]
pub struct Checkpointer {
    path: PathBuf,
    every: Option<u32>,
    next: Option<u32>,
    settings: HashMap<String, String>,
}

impl Checkpointer {
    /// A checkpoint at `dir/name.safetensors`, written every `every` steps (rounded up to
    /// the end of the training call that reaches them; `None`: only read, for `--resume`),
    /// recording `settings` (everything that decides the steps: architecture, data digest,
    /// seed, batch, loss, learning rate, ...).
    pub fn new<K: Into<String>>(
        dir: &Path,
        name: &str,
        every: Option<u32>,
        settings: impl IntoIterator<Item = (K, String)>,
    ) -> Checkpointer {
        Checkpointer {
            path: dir.join(format!("{name}.safetensors")),
            every,
            next: None,
            settings: settings.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        }
    }

    /// The checkpoint file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The checkpoint to resume from, if the file exists: refused (a message for the
    /// caller to put after its flag's name), naming the first
    /// setting (in name order) that differs, when written under other settings. Also
    /// hands back the metadata, where a caller finds what it saved with [`Self::save`].
    pub fn load_matching(&self) -> Result<Option<Resumed>, String> {
        if !self.path.exists() {
            return Ok(None);
        }
        let (c, meta) = load(&self.path)?;
        let mut keys: Vec<&String> = self.settings.keys().collect();
        keys.sort();
        for k in keys {
            let want = &self.settings[k];
            if meta.get(k) != Some(want) {
                return Err(format!(
                    "{} was written with {k} = {}, this run has {want}; run the same command as before",
                    self.path.display(),
                    meta.get(k).map_or("(none)", String::as_str)
                ));
            }
        }
        Ok(Some((c, meta)))
    }

    /// Sets where training starts (a resumed run: the checkpoint's step); the first
    /// checkpoint is due at the next multiple of the interval after it.
    pub fn begin(&mut self, step: u32) {
        self.next = self
            .every
            .filter(|&e| e > 0)
            .map(|e| (step / e + 1).saturating_mul(e));
    }

    /// Called after every training call, `done` steps of `total` taken: writes the
    /// trainer's state when a checkpoint is due (never after the last step: the run's
    /// results follow at once). `extra` goes into the metadata beside the settings (a
    /// caller's running totals). Returns whether one was written.
    pub fn after_call(
        &mut self,
        trainer: &mut dyn Trainer,
        done: u32,
        total: u32,
        extra: &[(&str, String)],
    ) -> Result<bool, String> {
        let Some(every) = self.every.filter(|&e| e > 0) else {
            return Ok(false);
        };
        let next = *self.next.get_or_insert(every);
        if done < next || done >= total {
            return Ok(false);
        }
        self.save(trainer, extra)?;
        self.next = Some((done / every + 1).saturating_mul(every));
        Ok(true)
    }

    /// Writes the trainer's state now, with the settings and `extra` as metadata.
    pub fn save(&self, trainer: &mut dyn Trainer, extra: &[(&str, String)]) -> Result<(), String> {
        let c = trainer.checkpoint().map_err(|e| match e {
            TrainError::Backend { message, .. } => format!("checkpoint: {message}"),
            e => format!("checkpoint: {e}"),
        })?;
        let mut meta = self.settings.clone();
        for (k, v) in extra {
            meta.insert((*k).to_string(), v.clone());
        }
        save(&self.path, &c, &meta)
    }

    /// Removes the checkpoint once the run it belongs to has succeeded.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
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
