//! The training loop's interface: a [`Backend`] starts a [`Trainer`] for one network on
//! one data source; the trainer runs steps and hands back parameters. The CPU backend
//! ([`crate::cpu`]) is the reference every other backend is tested against.

use crate::data::TrainingData;
use crate::loss::Loss;
use crate::network::Network;
use crate::optim::{Adam, LrSchedule};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A flag another thread (a signal handler) sets to stop a running step early. Backends
/// check it between pieces of a step (the CPU: between 256-sample chunks), so a stop is
/// prompt whatever the network's size; a stopped step changes no parameter. It is not part
/// of what a run computes: every token compares equal and none is serialised.
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> CancelToken {
        CancelToken::default()
    }
    /// Asks every holder of this token to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl PartialEq for CancelToken {
    fn eq(&self, _: &CancelToken) -> bool {
        true
    }
}

/// Everything that decides what a training run computes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// Samples per step (the seed's 256 × 256 = 65536).
    pub batch: usize,
    /// Seeds the initial weights and every sample draw.
    pub seed: u64,
    pub loss: Loss,
    pub lr: LrSchedule,
    pub adam: Adam,
    /// Stops a run early (checked inside a step); not part of what the run computes.
    #[serde(skip)]
    pub cancel: CancelToken,
}

impl Default for TrainConfig {
    /// The seed's defaults: batch 65536, lr 0.005, relative L2, Adam(0.9, 0.999, 1e-8).
    fn default() -> TrainConfig {
        TrainConfig {
            batch: 65536,
            seed: 1337,
            loss: Loss::RelativeL2,
            lr: LrSchedule::constant(0.005),
            adam: Adam::default(),
            cancel: CancelToken::default(),
        }
    }
}

impl TrainConfig {
    /// The 32-bit seed of the sample draws (distinct from the initialisation stream).
    pub fn sample_seed(&self) -> u32 {
        ((self.seed ^ (self.seed >> 32)) as u32) ^ 0x9e37_79b9
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("the data has {data} inputs per sample but the network takes {network}")]
    InputWidth { data: usize, network: usize },
    #[error("the data has {data} outputs per sample but the network produces {network}")]
    OutputWidth { data: usize, network: usize },
    #[error("batch size must be at least 1")]
    EmptyBatch,
    #[error("the training data is empty")]
    EmptyData,
    #[error("training diverged at step {step}: the loss is {loss} (try a lower --lr)")]
    Diverged { step: u32, loss: f32 },
    #[error("interrupted")]
    Cancelled,
    #[error("{backend} backend: {message}")]
    Backend { backend: String, message: String },
}

/// A running training job on some backend.
pub trait Trainer: Send {
    /// Runs `steps` more steps; returns the mean loss over them.
    fn run(&mut self, steps: u32) -> Result<f32, TrainError>;
    /// The current fp32 parameters.
    fn params(&mut self) -> Result<Vec<f32>, TrainError>;
    /// Steps taken so far.
    fn steps_done(&self) -> u32;
    /// The numeric path this trainer runs: `f32`, `bf16` (CPU products), `f16` or `coop`
    /// (cooperative matrices).
    fn path(&self) -> String {
        "f32".into()
    }
    /// Everything needed to continue exactly where this trainer is: parameters, Adam
    /// moments and the step count (the sample stream and the learning rate follow from
    /// the step). Backends that cannot export their state say so.
    fn checkpoint(&mut self) -> Result<Checkpoint, TrainError> {
        Err(TrainError::Backend {
            backend: self.path(),
            message: "this backend cannot write checkpoints (the CPU backend can)".into(),
        })
    }
}

/// A trainer's complete state (see [`Trainer::checkpoint`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// Steps taken.
    pub step: u32,
}

/// A place where training runs.
pub trait Backend {
    /// `cpu`, or the adapter's name for the GPU.
    fn name(&self) -> String;
    /// The numeric path training takes: `f32`, `bf16` (CPU products), `f16` or `coop`
    /// (cooperative matrices).
    fn path(&self) -> String {
        "f32".into()
    }
    /// Starts training `net` from `params` on `data`.
    fn start(
        &self,
        net: &Network,
        params: Vec<f32>,
        data: Arc<TrainingData>,
        cfg: &TrainConfig,
    ) -> Result<Box<dyn Trainer>, TrainError>;
    /// Continues training from a [`Checkpoint`]: the same steps, samples and updates an
    /// uninterrupted run would take from there. Backends that cannot say so.
    fn resume(
        &self,
        net: &Network,
        checkpoint: Checkpoint,
        data: Arc<TrainingData>,
        cfg: &TrainConfig,
    ) -> Result<Box<dyn Trainer>, TrainError> {
        let _ = (net, checkpoint, data, cfg);
        Err(TrainError::Backend {
            backend: self.name(),
            message: "this backend cannot resume from a checkpoint (the CPU backend can)".into(),
        })
    }
}

/// Checks that a network fits the data and the config is sane (shared by backends).
pub fn check_compatible(
    net: &Network,
    data: &TrainingData,
    cfg: &TrainConfig,
) -> Result<(), TrainError> {
    if data.in_dims() != net.in_dims {
        return Err(TrainError::InputWidth {
            data: data.in_dims(),
            network: net.in_dims,
        });
    }
    if data.out_dims() != net.out_dims {
        return Err(TrainError::OutputWidth {
            data: data.out_dims(),
            network: net.out_dims,
        });
    }
    if cfg.batch == 0 {
        return Err(TrainError::EmptyBatch);
    }
    if let TrainingData::Rows(r) = data
        && r.is_empty()
    {
        return Err(TrainError::EmptyData);
    }
    Ok(())
}
