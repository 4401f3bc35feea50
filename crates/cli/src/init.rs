//! `--init MODEL`: start training from a trained model's parameters (fine-tuning) instead
//! of fresh Xavier weights. The run trains the model's own architecture (an `--arch`, if
//! given, must be the same network) and keeps its input mapping, because its parameters
//! were learned for it.

use anyhow::{Context, Result, bail};
use nshade_core::arch::NamedArch;
use nshade_core::model::Model;
use nshade_core::network::Network;
use std::path::Path;

/// The model a run starts from.
pub struct Init {
    pub model: Model,
    /// The path as given, for messages and provenance.
    pub shown: String,
}

impl Init {
    /// Loads `--init PATH` (a `weights.json` or a directory holding one).
    pub fn load(path: &Path) -> Result<Init> {
        let model = Model::load(path).with_context(|| format!("--init {}", path.display()))?;
        Ok(Init {
            model,
            shown: path.display().to_string(),
        })
    }

    /// The architectures to train: the model's own, named `name` (or as given by
    /// `--arch`, which must describe the same network).
    pub fn archs(&self, given: &[String], name: &str) -> Result<Vec<String>> {
        let own = self.model.network.arch.to_string();
        match given {
            [] => Ok(vec![format!("{name}={own}")]),
            [one] => {
                let named = NamedArch::parse(one)
                    .map_err(|e| anyhow::anyhow!("--arch {}: {e}", crate::common::shown(one)))?;
                if named.arch.to_string() != own {
                    bail!(
                        "--init {}: the model is {own}; --arch {} is another network (leave --arch out to fine-tune the model's own)",
                        self.shown,
                        crate::common::shown(one)
                    );
                }
                Ok(vec![one.clone()])
            }
            _ => bail!(
                "--init {}: fine-tunes one network; give at most one --arch (the model's own)",
                self.shown
            ),
        }
    }

    /// The starting parameters for `net`, which must have the model's widths.
    pub fn params_for(&self, net: &Network) -> Result<Vec<f32>> {
        let m = &self.model.network;
        if (net.in_dims, net.out_dims) != (m.in_dims, m.out_dims)
            || net.param_count != m.param_count
        {
            bail!(
                "--init {}: the model takes {} inputs to {} outputs; this data has {} inputs and {} outputs",
                self.shown,
                m.in_dims,
                m.out_dims,
                net.in_dims,
                net.out_dims
            );
        }
        Ok(self.model.params.clone())
    }
}
