//! The CPU backend: batched, multi-threaded (rayon), deterministic.
//!
//! A step splits the batch into fixed chunks of [`CHUNK`] samples, and the chunks into at
//! most [`MAX_GROUPS`] groups of consecutive chunks. Each chunk draws its samples and runs
//! forward and backward through GEMMs; a group's chunks run in order on one thread and add
//! their weight gradients into the group's partial sum, and the partial sums are then
//! added in group order. Because the chunking and the grouping depend on the batch size
//! only, not on the number of threads, the result is bit-identical for any `--threads`.
//!
//! Grid tables are too large for a copy per chunk: their contributions are listed per
//! chunk and per bucket (grid level), then added bucket by bucket (in parallel, buckets
//! cover disjoint ranges), chunk after chunk — again a fixed order.

use crate::data::TrainingData;
use crate::module::{Grads, Layer, Workspace};
use crate::network::Network;
use crate::optim::AdamState;
use crate::train::{Backend, Checkpoint, TrainConfig, TrainError, Trainer, check_compatible};
use rayon::prelude::*;
use std::sync::Arc;

/// Samples per chunk: big enough for efficient GEMMs, small enough to stay in L2.
pub const CHUNK: usize = 256;
/// Parameters per block in the reduction and the optimizer.
const PARAM_BLOCK: usize = 2048;
/// Chunk groups per step at most: a step writes, and then adds up, one dense-gradient
/// buffer per group (not one per chunk, which at batch 65536 meant 256 buffers streamed
/// through memory each step), and up to this many threads share the work.
pub const MAX_GROUPS: usize = 64;

/// Consecutive chunks per group for a batch of `batch` samples.
fn chunks_per_group(batch: usize) -> usize {
    batch.div_ceil(CHUNK).div_ceil(MAX_GROUPS).max(1)
}

/// Dense-gradient copies a step of `batch` samples keeps (one per chunk group).
pub fn gradient_copies(batch: usize) -> usize {
    batch.div_ceil(CHUNK).div_ceil(chunks_per_group(batch))
}

/// How the CPU's linear layers multiply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuPath {
    /// f32 products: the reference arithmetic.
    #[default]
    F32,
    /// bf16 operands with f32 accumulation ([`crate::bf16`]): about twice the products a
    /// cycle on CPUs with AVX512-BF16, the same bits (slower) on every other CPU.
    Bf16,
    /// bf16 operands multiplied by Intel AMX tiles with f32 accumulation ([`crate::amx`]):
    /// only where [`crate::amx::available`].
    Amx,
}

impl CpuPath {
    pub fn name(self) -> &'static str {
        match self {
            CpuPath::F32 => "f32",
            CpuPath::Bf16 => "bf16",
            CpuPath::Amx => "amx",
        }
    }

    /// `Err` with the reason where this path cannot run on this machine.
    pub fn check(self) -> Result<(), TrainError> {
        match self {
            CpuPath::Amx => crate::amx::available().map_err(|why| TrainError::Backend {
                backend: "cpu".into(),
                message: format!("--cpu-path amx cannot run here: {why}"),
            }),
            _ => Ok(()),
        }
    }
}

/// The CPU backend, with the products of its linear layers in `path`'s precision.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend {
    pub path: CpuPath,
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }
    fn path(&self) -> String {
        self.path.name().into()
    }
    fn start(
        &self,
        net: &Network,
        params: Vec<f32>,
        data: Arc<TrainingData>,
        cfg: &TrainConfig,
    ) -> Result<Box<dyn Trainer>, TrainError> {
        self.path.check()?;
        Ok(Box::new(
            CpuTrainer::new(net.clone(), params, data, cfg.clone())?.path(self.path),
        ))
    }
    fn resume(
        &self,
        net: &Network,
        checkpoint: Checkpoint,
        data: Arc<TrainingData>,
        cfg: &TrainConfig,
    ) -> Result<Box<dyn Trainer>, TrainError> {
        self.path.check()?;
        let n = net.param_count;
        if [
            checkpoint.params.len(),
            checkpoint.m.len(),
            checkpoint.v.len(),
        ] != [n; 3]
        {
            return Err(TrainError::Backend {
                backend: "cpu".into(),
                message: format!(
                    "the checkpoint holds {} parameters; the network has {n}",
                    checkpoint.params.len()
                ),
            });
        }
        let mut t =
            CpuTrainer::new(net.clone(), checkpoint.params, data, cfg.clone())?.path(self.path);
        t.adam.m = checkpoint.m;
        t.adam.v = checkpoint.v;
        t.adam.t = checkpoint.step;
        Ok(Box::new(t))
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
    /// One dense-gradient vector per chunk group, `groups × dense_count`.
    group_grads: Vec<f32>,
    /// Sparse contributions per chunk and bucket.
    chunk_sparse: Vec<Vec<crate::module::Sparse>>,
    grads: Vec<f32>,
    path: CpuPath,
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
        let groups = gradient_copies(cfg.batch);
        Ok(CpuTrainer {
            adam: AdamState::new(p),
            group_grads: vec![0.0; groups * net.dense_count.max(1)],
            chunk_sparse: vec![
                vec![Default::default(); net.buckets.len()];
                cfg.batch.div_ceil(CHUNK)
            ],
            grads: vec![0.0; p],
            net,
            data,
            cfg,
            params,
            path: CpuPath::F32,
        })
    }

    /// This trainer with its products in `path`'s precision (f32 unless set). `Amx` only
    /// where [`CpuPath::check`] passes (as [`CpuBackend`] checks before it starts a
    /// trainer): elsewhere its first product panics.
    pub fn path(self, path: CpuPath) -> CpuTrainer {
        CpuTrainer { path, ..self }
    }

    /// Computes the gradient of the mean loss over the batch of step `step` at the
    /// current parameters into `self.grads`; returns the mean loss.
    pub fn gradient(&mut self, step: u32) -> f32 {
        let p = self.net.dense_count.max(1);
        let batch = self.cfg.batch;
        let (ind, outd) = (self.net.in_dims, self.net.out_dims);
        let scale = 1.0 / (batch * outd) as f32;
        let (net, data, params, cfg) = (&self.net, &*self.data, &self.params, &self.cfg);
        let path = self.path;
        let seed = cfg.sample_seed();
        let per_group = chunks_per_group(batch);
        let losses: Vec<f64> = self
            .group_grads
            .par_chunks_mut(p)
            .zip(self.chunk_sparse.par_chunks_mut(per_group))
            .enumerate()
            .map_init(
                || ChunkScratch {
                    ws: net.training_workspace().with_products(path),
                    x: Vec::new(),
                    t: Vec::new(),
                    y: Vec::new(),
                    dy: Vec::new(),
                },
                |s, (group, (g, sparse_of))| {
                    g.fill(0.0);
                    let mut loss = 0.0;
                    for (k, sparse) in sparse_of.iter_mut().enumerate() {
                        // A cancelled step is abandoned chunk by chunk (the caller sees
                        // `Cancelled` and applies nothing).
                        if cfg.cancel.is_cancelled() {
                            return 0.0;
                        }
                        let first = (group * per_group + k) * CHUNK;
                        let n = CHUNK.min(batch - first);
                        s.x.resize(n * ind, 0.0);
                        s.t.resize(n * outd, 0.0);
                        s.y.resize(n * outd, 0.0);
                        s.dy.resize(n * outd, 0.0);
                        data.fill(seed, step, first, n, &mut s.x, &mut s.t);
                        net.root.forward(params, &s.x, n, &mut s.y, &mut s.ws);
                        loss += cfg.loss.chunk(&s.y, &s.t, scale, &mut s.dy);
                        sparse.iter_mut().for_each(crate::module::Sparse::clear);
                        let mut grads = Grads {
                            dense: &mut *g,
                            sparse,
                        };
                        net.root.backward(
                            params, &s.x, &s.y, n, &mut s.dy, None, &mut grads, &mut s.ws,
                        );
                    }
                    loss
                },
            )
            .collect();
        if cfg.cancel.is_cancelled() {
            return f32::NAN; // the caller reports `Cancelled`; skip the reduction
        }
        // Fixed-order reduction of the groups' partial sums.
        let group_grads = &self.group_grads;
        let groups = group_grads.len() / p;
        let dense = self.net.dense_count;
        let (dense_grads, table_grads) = self.grads.split_at_mut(dense);
        dense_grads
            .par_chunks_mut(PARAM_BLOCK)
            .enumerate()
            .for_each(|(b, out)| {
                let start = b * PARAM_BLOCK;
                out.copy_from_slice(&group_grads[start..start + out.len()]);
                for c in 1..groups {
                    let src = &group_grads[c * p + start..c * p + start + out.len()];
                    out.iter_mut().zip(src).for_each(|(a, b)| *a += b);
                }
            });
        // Sparse buckets: each owns a disjoint range of the table gradients.
        let mut order: Vec<usize> = (0..self.net.buckets.len()).collect();
        order.sort_by_key(|&b| self.net.buckets[b].start);
        let mut jobs = Vec::with_capacity(order.len());
        let (mut rest, mut pos) = (table_grads, dense);
        for b in order {
            let r = self.net.buckets[b].clone();
            let tail = std::mem::take(&mut rest);
            let (_, tail) = tail.split_at_mut(r.start - pos);
            let (mine, tail) = tail.split_at_mut(r.len());
            jobs.push((b, r.start, mine));
            rest = tail;
            pos = r.end;
        }
        let chunk_sparse = &self.chunk_sparse;
        jobs.into_par_iter().for_each(|(b, start, out)| {
            out.fill(0.0);
            for chunk in chunk_sparse {
                chunk[b].add_into(start, out);
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
    fn path(&self) -> String {
        self.path.name().into()
    }
    fn run(&mut self, steps: u32) -> Result<f32, TrainError> {
        let mut total = 0.0f64;
        for _ in 0..steps {
            let step = self.adam.t;
            if self.cfg.cancel.is_cancelled() {
                return Err(TrainError::Cancelled);
            }
            let loss = self.gradient(step);
            if self.cfg.cancel.is_cancelled() {
                return Err(TrainError::Cancelled);
            }
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
    fn checkpoint(&mut self) -> Result<Checkpoint, TrainError> {
        Ok(Checkpoint {
            params: self.params.clone(),
            m: self.adam.m.clone(),
            v: self.adam.v.clone(),
            step: self.adam.t,
        })
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

    /// The AMX products pack each weight matrix once per step (a step's workspaces keep
    /// it): after three steps the trainer's gradient equals a fresh trainer's at the same
    /// parameters, which it would not if packed weights outlived their step.
    #[test]
    fn amx_steps_multiply_the_current_weights() {
        if let Err(why) = crate::amx::available() {
            eprintln!(
                "AMX NOT AVAILABLE HERE, amx_steps_multiply_the_current_weights not run: {why}"
            );
            return;
        }
        let arch = "freq(3) | mlp(32x3, leaky_relu, sigmoid)";
        let mut t = trainer(arch, 1024).path(CpuPath::Amx);
        t.gradient(0);
        let first = t.last_gradient().to_vec();
        t.run(3).unwrap();
        t.gradient(3);
        let mut fresh = trainer(arch, 1024).path(CpuPath::Amx);
        fresh.params.clone_from(&t.params);
        fresh.gradient(3);
        let (got, want) = (t.last_gradient(), fresh.last_gradient().to_vec());
        assert_eq!(got.len(), want.len());
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
        assert!(
            got.iter().zip(&first).any(|(a, b)| a != b),
            "the weights did not move"
        );
    }

    #[test]
    fn grid_gradient_matches_a_single_chunk_sum() {
        // The chunked, bucketed gradient equals one backward pass over the whole batch.
        let arch = "cat(hashgrid(levels=3, features=2, log2_size=6, base=4, scale=2), identity) | mlp(8x1, relu)";
        let mut t = trainer(arch, 700);
        t.gradient(0);
        let net = t.net.clone();
        let (mut x, mut tt) = (vec![0.0; 700 * 2], vec![0.0; 700 * 3]);
        t.data.fill(t.cfg.sample_seed(), 0, 0, 700, &mut x, &mut tt);
        let mut ws = net.workspace();
        let mut y = vec![0.0; 700 * 3];
        net.forward(&t.params, &x, 700, &mut y, &mut ws);
        let scale = 1.0 / (700.0 * 3.0);
        let mut dy: Vec<f32> = y
            .iter()
            .zip(&tt)
            .map(|(y, t)| t_loss(y, t) * scale)
            .collect();
        fn t_loss(y: &f32, t: &f32) -> f32 {
            TrainConfig::default().loss.gradient(*y, *t)
        }
        let mut full = vec![0.0; net.param_count];
        let mut sparse = vec![crate::module::Sparse::default(); net.buckets.len()];
        let mut g = Grads {
            dense: &mut full[..net.dense_count],
            sparse: &mut sparse,
        };
        net.root
            .backward(&t.params, &x, &y, 700, &mut dy, None, &mut g, &mut ws);
        Grads::scatter(&sparse, &mut full);
        let got = t.last_gradient();
        let table = &got[net.dense_count..];
        assert!(table.iter().any(|v| *v != 0.0));
        for (i, (a, b)) in got.iter().zip(&full).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 + 1e-4 * b.abs(),
                "param {i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn a_cancelled_step_changes_nothing() {
        let mut t = trainer("mlp(16x2, relu)", 1000);
        t.run(2).unwrap();
        let before = t.params().unwrap();
        t.cfg.cancel.cancel();
        assert!(matches!(t.run(3), Err(TrainError::Cancelled)));
        assert_eq!(t.steps_done(), 2);
        assert_eq!(t.params().unwrap(), before);
    }

    /// `f` run on a pool of `threads` threads.
    fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(f)
    }

    #[test]
    fn deterministic_for_any_thread_count() {
        let run = |threads: usize| {
            on_threads(threads, || {
                let mut t = trainer("cat(identity, freq(2)) | mlp(16x2, relu)", 1000);
                t.run(3).unwrap();
                let mut b = trainer("freq(2) | mlp(16x2, relu, sigmoid)", 1000).path(CpuPath::Bf16);
                b.run(3).unwrap();
                let mut g = trainer(
                    "cat(hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2), identity) | mlp(8x1, relu)",
                    1000,
                );
                g.run(3).unwrap();
                (
                    t.params().unwrap(),
                    g.params().unwrap(),
                    b.params().unwrap(),
                )
            })
        };
        assert_eq!(run(1), run(3));
    }

    /// `path`'s products give the f32 gradient of `arch` within their rounding, and train
    /// as well.
    fn tracks_f32(arch: &str, path: CpuPath) {
        let mut f = trainer(arch, 4096);
        let mut b = trainer(arch, 4096).path(path);
        f.gradient(0);
        b.gradient(0);
        let (gf, gb) = (f.last_gradient(), b.last_gradient());
        assert_eq!(gf.len(), gb.len());
        let norm =
            |v: &mut dyn Iterator<Item = f32>| v.map(|x| x as f64 * x as f64).sum::<f64>().sqrt();
        let diff = norm(&mut gf.iter().zip(gb).map(|(a, b)| a - b));
        let size = norm(&mut gf.iter().copied());
        assert!(gb.iter().all(|g| g.is_finite()));
        assert!(diff > 0.0, "{arch}: the {} path was not taken", path.name());
        assert!(
            diff < 0.03 * size,
            "{arch}: |g_{} - g_f32| = {diff}, |g_f32| = {size}",
            path.name()
        );
        f.run(200).unwrap();
        b.run(200).unwrap();
        let (lf, lb) = (f.run(10).unwrap(), b.run(10).unwrap());
        assert!(
            lb < 1.05 * lf && lf < 1.05 * lb,
            "{arch}: loss after 210 steps: f32 {lf}, {} {lb}",
            path.name()
        );
    }

    /// bf16 products give the f32 gradient within their rounding, and train as well.
    #[test]
    fn bf16_products_track_the_f32_gradient_and_loss() {
        tracks_f32("freq(3) | mlp(32x3, leaky_relu, sigmoid)", CpuPath::Bf16);
    }

    /// So do AMX tiles, where the CPU has them (seed #3, whose 32 × 32 layers take the
    /// tiles and whose narrow first and last layers keep f32, and a 64-wide relu MLP);
    /// they are deterministic for any thread count; where AMX cannot run, training on
    /// this path is refused with the reason.
    #[test]
    fn amx_products_track_the_f32_gradient_and_loss() {
        if let Err(why) = crate::amx::available() {
            eprintln!("AMX NOT TESTED HERE: {why}");
            let net = Network::build(&Arch::parse("mlp(16x1, relu)").unwrap(), 2, 3).unwrap();
            let data = Arc::new(TrainingData::Texture(Texture::builtin()));
            let err = CpuBackend { path: CpuPath::Amx }
                .start(&net, net.init_params(5), data, &TrainConfig::default())
                .err()
                .expect("the AMX path started without AMX");
            assert!(err.to_string().contains(why), "{err}");
            return;
        }
        tracks_f32("freq(3) | mlp(32x3, leaky_relu, sigmoid)", CpuPath::Amx);
        tracks_f32("freq(4) | mlp(64x2, relu)", CpuPath::Amx);
        let run = |threads: usize| {
            on_threads(threads, || {
                let mut t = trainer("freq(4) | mlp(48x2, relu, sigmoid)", 1000).path(CpuPath::Amx);
                t.run(3).unwrap();
                t.params().unwrap()
            })
        };
        assert_eq!(run(1), run(3));
    }
}
