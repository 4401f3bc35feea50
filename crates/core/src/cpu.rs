//! The CPU backend: batched, multi-threaded (rayon), deterministic.
//!
//! A step splits the batch into fixed chunks of [`CHUNK`] samples. Each chunk draws its
//! samples, runs forward and backward through GEMMs, and writes its own weight-gradient
//! partial sum; the partial sums are then added in chunk order. Because the chunking does
//! not depend on the number of threads, the result is bit-identical for any `--threads`.

use crate::data::TrainingData;
use crate::module::{Layer, Workspace};
use crate::network::Network;
use crate::optim::AdamState;
use crate::train::{Backend, TrainConfig, TrainError, Trainer, check_compatible};
use rayon::prelude::*;
use std::sync::Arc;

/// Samples per chunk: big enough for efficient GEMMs, small enough to stay in L2.
pub const CHUNK: usize = 256;
/// Parameters per block in the reduction and the optimizer.
const PARAM_BLOCK: usize = 2048;

pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }
    fn start(
        &self,
        net: &Network,
        params: Vec<f32>,
        data: Arc<TrainingData>,
        cfg: &TrainConfig,
    ) -> Result<Box<dyn Trainer>, TrainError> {
        Ok(Box::new(CpuTrainer::new(
            net.clone(),
            params,
            data,
            cfg.clone(),
        )?))
    }
}

/// Scratch memory of one worker thread.
struct ChunkScratch {
    ws: Workspace,
    x: Vec<f32>,
    t: Vec<f32>,
    y: Vec<f32>,
    dy: Vec<f32>,
}

pub struct CpuTrainer {
    net: Network,
    data: Arc<TrainingData>,
    cfg: TrainConfig,
    params: Vec<f32>,
    adam: AdamState,
    /// One gradient vector per chunk, `chunks × param_count`.
    chunk_grads: Vec<f32>,
    grads: Vec<f32>,
}

impl CpuTrainer {
    pub fn new(
        net: Network,
        params: Vec<f32>,
        data: Arc<TrainingData>,
        cfg: TrainConfig,
    ) -> Result<CpuTrainer, TrainError> {
        check_compatible(&net, &data, &cfg)?;
        let p = net.param_count;
        let chunks = cfg.batch.div_ceil(CHUNK);
        Ok(CpuTrainer {
            adam: AdamState::new(p),
            chunk_grads: vec![0.0; chunks * p.max(1)],
            grads: vec![0.0; p],
            net,
            data,
            cfg,
            params,
        })
    }

    /// Computes the gradient of the mean loss over the batch of step `step` at the
    /// current parameters into `self.grads`; returns the mean loss.
    pub fn gradient(&mut self, step: u32) -> f32 {
        let p = self.net.param_count.max(1);
        let batch = self.cfg.batch;
        let (ind, outd) = (self.net.in_dims, self.net.out_dims);
        let scale = 1.0 / (batch * outd) as f32;
        let (net, data, params, cfg) = (&self.net, &*self.data, &self.params, &self.cfg);
        let seed = cfg.sample_seed();
        let losses: Vec<f64> = self
            .chunk_grads
            .par_chunks_mut(p)
            .enumerate()
            .map_init(
                || ChunkScratch {
                    ws: net.workspace(),
                    x: Vec::new(),
                    t: Vec::new(),
                    y: Vec::new(),
                    dy: Vec::new(),
                },
                |s, (c, g)| {
                    let first = c * CHUNK;
                    let n = CHUNK.min(batch - first);
                    s.x.resize(n * ind, 0.0);
                    s.t.resize(n * outd, 0.0);
                    s.y.resize(n * outd, 0.0);
                    s.dy.resize(n * outd, 0.0);
                    data.fill(seed, step, first, n, &mut s.x, &mut s.t);
                    net.root.forward(params, &s.x, n, &mut s.y, &mut s.ws);
                    let mut loss = 0.0f64;
                    for ((d, &y), &t) in s.dy.iter_mut().zip(&s.y).zip(&s.t) {
                        loss += cfg.loss.value(y, t) as f64;
                        *d = cfg.loss.gradient(y, t) * scale;
                    }
                    g.fill(0.0);
                    net.root
                        .backward(params, &s.x, &s.y, n, &mut s.dy, None, g, &mut s.ws);
                    loss
                },
            )
            .collect();
        // Fixed-order reduction of the chunk partial sums.
        let chunk_grads = &self.chunk_grads;
        let chunks = chunk_grads.len() / p;
        self.grads
            .par_chunks_mut(PARAM_BLOCK)
            .enumerate()
            .for_each(|(b, out)| {
                let start = b * PARAM_BLOCK;
                out.copy_from_slice(&chunk_grads[start..start + out.len()]);
                for c in 1..chunks {
                    let src = &chunk_grads[c * p + start..c * p + start + out.len()];
                    out.iter_mut().zip(src).for_each(|(a, b)| *a += b);
                }
            });
        (losses.iter().sum::<f64>() / (batch * outd) as f64) as f32
    }

    /// The gradient computed by the last [`CpuTrainer::gradient`] call.
    pub fn last_gradient(&self) -> &[f32] {
        &self.grads
    }

    fn apply_adam(&mut self) {
        self.adam.t += 1;
        let lr = self.cfg.lr.at(self.adam.t - 1);
        let (step_lr, inv_c2) = self.cfg.adam.corrections(lr, self.adam.t);
        let adam = self.cfg.adam;
        let grads = &self.grads;
        self.params
            .par_chunks_mut(PARAM_BLOCK)
            .zip(self.adam.m.par_chunks_mut(PARAM_BLOCK))
            .zip(self.adam.v.par_chunks_mut(PARAM_BLOCK))
            .enumerate()
            .for_each(|(b, ((p, m), v))| {
                let g = &grads[b * PARAM_BLOCK..b * PARAM_BLOCK + p.len()];
                adam.update(step_lr, inv_c2, p, g, m, v);
            });
    }
}

impl Trainer for CpuTrainer {
    fn run(&mut self, steps: u32) -> Result<f32, TrainError> {
        let mut total = 0.0f64;
        for _ in 0..steps {
            let step = self.adam.t;
            let loss = self.gradient(step);
            if !loss.is_finite() {
                return Err(TrainError::Diverged { step, loss });
            }
            total += loss as f64;
            self.apply_adam();
        }
        Ok((total / steps.max(1) as f64) as f32)
    }
    fn params(&mut self) -> Result<Vec<f32>, TrainError> {
        Ok(self.params.clone())
    }
    fn steps_done(&self) -> u32 {
        self.adam.t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Arch;
    use crate::texture::Texture;

    fn trainer(arch: &str, batch: usize) -> CpuTrainer {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let params = net.init_params(5);
        let cfg = TrainConfig {
            batch,
            ..TrainConfig::default()
        };
        CpuTrainer::new(
            net,
            params,
            Arc::new(TrainingData::Texture(Texture::builtin())),
            cfg,
        )
        .unwrap()
    }

    #[test]
    fn training_reduces_the_loss() {
        let mut t = trainer("freq(3) | mlp(32x3, leaky_relu, sigmoid)", 4096);
        let first = t.run(5).unwrap();
        t.run(150).unwrap();
        let last = t.run(5).unwrap();
        assert!(last < 0.6 * first, "loss {first} → {last}");
    }

    #[test]
    fn deterministic_for_any_thread_count() {
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let mut t = trainer("cat(identity, freq(2)) | mlp(16x2, relu)", 1000);
                t.run(3).unwrap();
                t.params().unwrap()
            })
        };
        assert_eq!(run(1), run(3));
    }
}
