//! The CPU backend: batched, multi-threaded (rayon), deterministic.
//!
//! A step splits the batch into fixed chunks of [`CHUNK`] samples, and the chunks into at
//! most [`MAX_GROUPS`] groups of consecutive chunks. Each chunk draws its samples and runs
//! forward and backward through GEMMs; a group's chunks run in order on one thread and add
//! their weight gradients into the group's partial sum, and the partial sums are then
//! added in group order. Because the chunking and the grouping depend on the batch size
//! only, not on the number of threads, the result is bit-identical for any `--threads`.
//!
//! A run of several steps ([`CpuTrainer::run_spinning`]) keeps every thread of the pool
//! in the run, each with its scratch memory for all the steps: the threads claim chunk
//! groups, then reduction blocks, then Adam blocks from shared counters and wait for
//! each other between these phases at a spinning barrier, instead of a fork and a join a
//! phase (threads put to sleep and woken between phases). The same work in the same
//! order, so the same bits.
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
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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

impl ChunkScratch {
    fn new(net: &Network, path: CpuPath) -> ChunkScratch {
        ChunkScratch {
            ws: net.training_workspace().with_products(path),
            x: Vec::new(),
            t: Vec::new(),
            y: Vec::new(),
            dy: Vec::new(),
        }
    }
}

/// What the chunk groups of one step read.
struct StepInputs<'a> {
    net: &'a Network,
    data: &'a TrainingData,
    params: &'a [f32],
    cfg: &'a TrainConfig,
    step: u32,
}

impl StepInputs<'_> {
    /// Chunk group `group` of the step: each chunk draws its samples, runs forward and
    /// backward, and adds its weight gradients into `g` (zeroed first) and its sparse
    /// contributions into its entry of `sparse_of`. Returns the group's loss sum (what
    /// it has so far where the step is cancelled: the caller then applies nothing).
    fn group(
        &self,
        group: usize,
        g: &mut [f32],
        sparse_of: &mut [Vec<crate::module::Sparse>],
        s: &mut ChunkScratch,
    ) -> f64 {
        let (net, cfg) = (self.net, self.cfg);
        let batch = cfg.batch;
        let (ind, outd) = (net.in_dims, net.out_dims);
        let scale = 1.0 / (batch * outd) as f32;
        let per_group = chunks_per_group(batch);
        g.fill(0.0);
        let mut loss = 0.0;
        for (k, sparse) in sparse_of.iter_mut().enumerate() {
            // A cancelled step is abandoned chunk by chunk (the caller sees
            // `Cancelled` and applies nothing).
            if cfg.cancel.is_cancelled() {
                return loss;
            }
            let first = (group * per_group + k) * CHUNK;
            let n = CHUNK.min(batch - first);
            s.x.resize(n * ind, 0.0);
            s.t.resize(n * outd, 0.0);
            s.y.resize(n * outd, 0.0);
            s.dy.resize(n * outd, 0.0);
            self.data
                .fill(cfg.sample_seed(), self.step, first, n, &mut s.x, &mut s.t);
            net.root.forward(self.params, &s.x, n, &mut s.y, &mut s.ws);
            loss += cfg.loss.chunk(&s.y, &s.t, scale, &mut s.dy);
            sparse.iter_mut().for_each(crate::module::Sparse::clear);
            let mut grads = Grads {
                dense: &mut *g,
                sparse,
            };
            net.root.backward(
                self.params,
                &s.x,
                &s.y,
                n,
                &mut s.dy,
                None,
                &mut grads,
                &mut s.ws,
            );
        }
        loss
    }
}

/// The mean loss of a step from its groups' loss sums over `elements` outputs.
fn mean_loss(sums: &[f64], elements: usize) -> f32 {
    (sums.iter().sum::<f64>() / elements as f64) as f32
}

/// Adam's step size and second-moment correction for step `step` (counted from 0).
fn adam_rates(cfg: &TrainConfig, step: u32) -> (f32, f32) {
    cfg.adam.corrections(cfg.lr.at(step), step + 1)
}

/// `net`'s sparse buckets with their parameter ranges, in the order of the ranges.
fn bucket_ranges(net: &Network) -> Vec<(usize, Range<usize>)> {
    let mut order: Vec<(usize, Range<usize>)> = net.buckets.iter().cloned().enumerate().collect();
    order.sort_by_key(|(_, r)| r.start);
    order
}

/// `out` = block `b` (of [`PARAM_BLOCK`] parameters) of the sum of the groups' dense
/// gradients (`group_grads`, one vector of `p` a group), added in group order.
fn reduce_block(group_grads: &[f32], p: usize, b: usize, out: &mut [f32]) {
    let start = b * PARAM_BLOCK;
    out.copy_from_slice(&group_grads[start..start + out.len()]);
    for c in 1..group_grads.len() / p {
        let src = &group_grads[c * p + start..c * p + start + out.len()];
        out.iter_mut().zip(src).for_each(|(a, b)| *a += b);
    }
}

/// `out` = bucket `b`'s table gradients (from parameter `start` on): the chunks'
/// contributions added chunk after chunk.
fn reduce_bucket(
    chunk_sparse: &[Vec<crate::module::Sparse>],
    b: usize,
    start: usize,
    out: &mut [f32],
) {
    out.fill(0.0);
    for chunk in chunk_sparse {
        chunk[b].add_into(start, out);
    }
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
        let (batch, outd) = (self.cfg.batch, self.net.out_dims);
        let inputs = StepInputs {
            net: &self.net,
            data: &self.data,
            params: &self.params,
            cfg: &self.cfg,
            step,
        };
        let path = self.path;
        let per_group = chunks_per_group(batch);
        let losses: Vec<f64> = self
            .group_grads
            .par_chunks_mut(p)
            .zip(self.chunk_sparse.par_chunks_mut(per_group))
            .enumerate()
            .map_init(
                || ChunkScratch::new(inputs.net, path),
                |s, (group, (g, sparse_of))| inputs.group(group, g, sparse_of, s),
            )
            .collect();
        if self.cfg.cancel.is_cancelled() {
            return f32::NAN; // the caller reports `Cancelled`; skip the reduction
        }
        // Fixed-order reduction of the groups' partial sums.
        let group_grads = &self.group_grads;
        let (dense_grads, mut rest) = self.grads.split_at_mut(self.net.dense_count);
        dense_grads
            .par_chunks_mut(PARAM_BLOCK)
            .enumerate()
            .for_each(|(b, out)| reduce_block(group_grads, p, b, out));
        // Sparse buckets: each owns a disjoint range of the table gradients.
        let mut jobs = Vec::new();
        let mut pos = self.net.dense_count;
        for (b, r) in bucket_ranges(&self.net) {
            let tail = std::mem::take(&mut rest);
            let (_, tail) = tail.split_at_mut(r.start - pos);
            let (mine, tail) = tail.split_at_mut(r.len());
            jobs.push((b, r.start, mine));
            rest = tail;
            pos = r.end;
        }
        let chunk_sparse = &self.chunk_sparse;
        jobs.into_par_iter()
            .for_each(|(b, start, out)| reduce_bucket(chunk_sparse, b, start, out));
        mean_loss(&losses, batch * outd)
    }

    /// The gradient computed by the last [`CpuTrainer::gradient`] call.
    pub fn last_gradient(&self) -> &[f32] {
        &self.grads
    }

    fn apply_adam(&mut self) {
        let (step_lr, inv_c2) = adam_rates(&self.cfg, self.adam.t);
        self.adam.t += 1;
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

impl CpuTrainer {
    /// [`Trainer::run`] on every thread of the pool at once, for all `steps`: the
    /// threads claim a step's chunk groups, then the reduction's blocks, then Adam's,
    /// from shared counters, and wait for each other between these phases at a
    /// [`SpinBarrier`] instead of a fork and a join a phase. The same work in the same
    /// order as [`CpuTrainer::gradient`] and `apply_adam`, so the same bits.
    fn run_spinning(&mut self, steps: u32) -> Result<f32, TrainError> {
        if self.cfg.cancel.is_cancelled() {
            return Err(TrainError::Cancelled);
        }
        let p = self.net.dense_count.max(1);
        let dense = self.net.dense_count;
        let (batch, outd) = (self.cfg.batch, self.net.out_dims);
        let groups = self.group_grads.len() / p;
        let per_group = chunks_per_group(batch);
        let chunks = self.chunk_sparse.len();
        let dense_blocks = dense.div_ceil(PARAM_BLOCK);
        let buckets = bucket_ranges(&self.net);
        let adam_blocks = self.params.len().div_ceil(PARAM_BLOCK);
        let mut losses = vec![0.0f64; groups];
        let t0 = self.adam.t;
        let (net, data, cfg, path) = (&self.net, &*self.data, &self.cfg, self.path);
        let group_grads = Disjoint::new(&mut self.group_grads);
        let chunk_sparse = Disjoint::new(&mut self.chunk_sparse);
        let grads = Disjoint::new(&mut self.grads);
        let params = Disjoint::new(&mut self.params);
        let m = Disjoint::new(&mut self.adam.m);
        let v = Disjoint::new(&mut self.adam.v);
        let loss_of = Disjoint::new(&mut losses);
        // (as many as `rayon::broadcast` below runs)
        let barrier = SpinBarrier::new(rayon::current_num_threads());
        // the next chunk group, reduction block and Adam block to claim; each is reset
        // by the barrier before its phase
        let next = [0; 3].map(AtomicUsize::new);
        let claim = |phase: usize| next[phase].fetch_add(1, Ordering::Relaxed);
        let stop = AtomicBool::new(false);
        // all threads meet; the last reads the cancellation flag and resets the counter
        // of the next phase; `false` where a thread panicked
        let meet = |phase: usize| {
            barrier.wait(|| {
                stop.store(cfg.cancel.is_cancelled(), Ordering::Relaxed);
                next[phase].store(0, Ordering::Relaxed);
            })
        };
        // one thread's part of the run
        let each = || -> (Result<f64, TrainError>, u32) {
            let mut s = ChunkScratch::new(net, path);
            let mut total = 0.0f64;
            for k in 0..steps {
                let step = t0 + k;
                s.ws.forget_weights();
                {
                    // SAFETY: nothing writes the parameters before the Adam phase
                    let params = unsafe { params.all() };
                    let inputs = StepInputs {
                        net,
                        data,
                        params,
                        cfg,
                        step,
                    };
                    loop {
                        let g = claim(0);
                        if g >= groups {
                            break;
                        }
                        let mine = g * per_group..((g + 1) * per_group).min(chunks);
                        // SAFETY: group g's gradient vector, sparse lists and loss are
                        // this thread's alone (it claimed g) until the barrier
                        unsafe {
                            loss_of.part(g..g + 1)[0] = inputs.group(
                                g,
                                group_grads.part(g * p..(g + 1) * p),
                                chunk_sparse.part(mine),
                                &mut s,
                            );
                        }
                    }
                }
                if !meet(1) || stop.load(Ordering::Relaxed) {
                    return (Err(TrainError::Cancelled), k);
                }
                {
                    // SAFETY: the groups' results are written no more this step
                    let (gg, cs) = unsafe { (group_grads.all(), chunk_sparse.all()) };
                    loop {
                        let i = claim(1);
                        // SAFETY: block i of the gradient is this thread's alone
                        if i < dense_blocks {
                            let r = i * PARAM_BLOCK..((i + 1) * PARAM_BLOCK).min(dense);
                            reduce_block(gg, p, i, unsafe { grads.part(r) });
                        } else if let Some((b, r)) = buckets.get(i - dense_blocks) {
                            reduce_bucket(cs, *b, r.start, unsafe { grads.part(r.clone()) });
                        } else {
                            break;
                        }
                    }
                }
                // (a cancellation now still completes the step, as between `gradient`
                // and `apply_adam`: the flag is read again at the next meeting)
                if !meet(2) {
                    return (Err(TrainError::Cancelled), k);
                }
                {
                    // SAFETY: the losses and the gradient are written no more this step
                    let (lost, g) = unsafe { (loss_of.all(), grads.all()) };
                    let loss = mean_loss(lost, batch * outd);
                    if !loss.is_finite() {
                        return (Err(TrainError::Diverged { step, loss }), k);
                    }
                    total += loss as f64;
                    let (step_lr, inv_c2) = adam_rates(cfg, step);
                    loop {
                        let b = claim(2);
                        if b >= adam_blocks {
                            break;
                        }
                        let r = b * PARAM_BLOCK..((b + 1) * PARAM_BLOCK).min(g.len());
                        // SAFETY: block b of the parameters and moments is this thread's alone
                        unsafe {
                            cfg.adam.update(
                                step_lr,
                                inv_c2,
                                params.part(r.clone()),
                                &g[r.clone()],
                                m.part(r.clone()),
                                v.part(r),
                            )
                        };
                    }
                }
                if !meet(0) || (stop.load(Ordering::Relaxed) && k + 1 < steps) {
                    return (Err(TrainError::Cancelled), k + 1);
                }
            }
            (Ok(total), steps)
        };
        let outcomes = rayon::broadcast(|_| {
            // a thread that panics breaks the barrier, so the others stop waiting for it;
            // its panic is raised again once every thread has returned
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&each));
            if run.is_err() {
                barrier.break_all();
            }
            run
        });
        let mut first = None;
        for outcome in outcomes {
            match outcome {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(o) => {
                    first.get_or_insert(o);
                }
            }
        }
        // every thread saw the same losses and flags: the same outcome
        let (outcome, done) = first.expect("a pool has threads");
        self.adam.t = t0 + done;
        outcome.map(|total| (total / steps.max(1) as f64) as f32)
    }
}

/// Whether a [`CpuTrainer::run_spinning`] runs in this process.
static SPINNING: AtomicBool = AtomicBool::new(false);

/// Pause instructions a [`SpinBarrier`] waiter spins through before it yields its core
/// at each further check.
const SPINS: u32 = 1 << 8;

/// A barrier whose waiters spin (then yield), so that a thread passes it within
/// nanoseconds of the last arrival: a phase of a small network's step takes tens of
/// microseconds, and a thread put to sleep and woken between phases cost seed #3 about
/// 5% of its step on 2 threads.
struct SpinBarrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
    threads: usize,
    /// Set by a thread that will not arrive (it panicked): waits return at once.
    broken: AtomicBool,
}

impl SpinBarrier {
    fn new(threads: usize) -> SpinBarrier {
        SpinBarrier {
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            threads,
            broken: AtomicBool::new(false),
        }
    }

    /// Waits until all `threads` have arrived; the last to arrive runs `last` first.
    /// `false` where the barrier is broken ([`SpinBarrier::break_all`]): the caller
    /// must stop.
    fn wait(&self, last: impl FnOnce()) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.threads {
            last();
            self.arrived.store(0, Ordering::Relaxed);
            self.generation
                .store(generation.wrapping_add(1), Ordering::Release);
            return !self.broken.load(Ordering::Acquire);
        }
        let mut spins = 0;
        while self.generation.load(Ordering::Acquire) == generation {
            if self.broken.load(Ordering::Acquire) {
                return false;
            }
            if spins < SPINS {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        !self.broken.load(Ordering::Acquire)
    }

    /// Releases every waiter, now and later, with `false`.
    fn break_all(&self) {
        self.broken.store(true, Ordering::Release);
    }
}

/// A slice the threads of [`CpuTrainer::run_spinning`] share: each part is written by
/// the one thread that claimed it, and read by all only after a barrier.
struct Disjoint<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: access goes through `part` and `all`, whose callers keep writes disjoint and
// apart from reads (see there)
unsafe impl<T: Send> Sync for Disjoint<T> {}

impl<T> Disjoint<T> {
    fn new(v: &mut [T]) -> Disjoint<T> {
        Disjoint {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    /// Elements `r`, to write.
    ///
    /// # Safety
    /// No other thread may touch `r` while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn part(&self, r: Range<usize>) -> &mut [T] {
        assert!(r.start <= r.end && r.end <= self.len);
        // SAFETY: in bounds (asserted); exclusive by the caller's promise
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r.start), r.len()) }
    }

    /// Every element, to read.
    ///
    /// # Safety
    /// No thread may write any element while the slice lives.
    unsafe fn all(&self) -> &[T] {
        // SAFETY: the whole allocation; no writer by the caller's promise
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Trainer for CpuTrainer {
    fn path(&self) -> String {
        self.path.name().into()
    }
    fn run(&mut self, steps: u32) -> Result<f32, TrainError> {
        if steps > 1 {
            // one spinning run at a time (two on one pool would wait for each other)
            if SPINNING
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                /// Clears [`SPINNING`] however the run ends.
                struct Done;
                impl Drop for Done {
                    fn drop(&mut self) {
                        SPINNING.store(false, Ordering::Release);
                    }
                }
                let _done = Done;
                return self.run_spinning(steps);
            }
        }
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

    /// The whole state of a trainer after its steps, as bits.
    fn state_bits(t: &CpuTrainer) -> (Vec<u32>, Vec<u32>, Vec<u32>, u32) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        (bits(&t.params), bits(&t.adam.m), bits(&t.adam.v), t.adam.t)
    }

    /// Several steps a call (every pool thread spinning through them together) give the
    /// bits of one step a call (a fork and a join a phase): dense and sparse gradients,
    /// f32 and bf16 products, a batch whose last chunk is partial.
    /// And with AMX products where the CPU has them: the packed weights of a thread's
    /// workspace, kept through the steps of the run, are packed again each step.
    #[test]
    fn spinning_runs_match_single_steps() {
        let seed3 = "freq(3) | mlp(32x3, leaky_relu, sigmoid)";
        let mut cases = vec![
            (seed3, CpuPath::F32),
            ("freq(2) | mlp(16x2, relu, sigmoid)", CpuPath::Bf16),
            (
                "cat(hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2), identity) | mlp(8x1, relu)",
                CpuPath::F32,
            ),
        ];
        match crate::amx::available() {
            Ok(()) => cases.push((seed3, CpuPath::Amx)),
            Err(why) => eprintln!("AMX NOT AVAILABLE HERE, its spinning run not compared: {why}"),
        }
        for (arch, path) in cases {
            let (spun, single) = on_threads(3, || {
                // (directly: `run` takes this path only while no other run in the
                // process does, and the tests run side by side)
                let mut a = trainer(arch, 1100).path(path);
                let loss = a.run_spinning(4).unwrap();
                let mut b = trainer(arch, 1100).path(path);
                let losses: Vec<f32> = (0..4).map(|_| b.run(1).unwrap()).collect();
                let mean = (losses.iter().map(|&l| l as f64).sum::<f64>() / 4.0) as f32;
                (
                    (state_bits(&a), loss.to_bits()),
                    (state_bits(&b), mean.to_bits()),
                )
            });
            assert_eq!(spun.0.3, 4, "{arch}");
            assert!(spun == single, "{arch}: the spinning run differs");
        }
    }

    /// A run that diverges stops at the same step, with the same state, spinning or not.
    #[test]
    fn spinning_runs_stop_where_single_steps_diverge() {
        let arch = "freq(2) | mlp(16x2, relu)";
        let diverging = || {
            let mut t = trainer(arch, 1000);
            t.cfg.lr = crate::optim::LrSchedule::constant(1e30);
            t
        };
        let (spun, single) = on_threads(2, || {
            let mut a = diverging();
            let ra = a.run_spinning(50);
            let mut b = diverging();
            let rb = (0..50).map(|_| b.run(1)).find(|r| r.is_err()).unwrap();
            (
                (format!("{ra:?}"), state_bits(&a)),
                (format!("{rb:?}"), state_bits(&b)),
            )
        });
        assert!(spun.0.contains("Diverged"), "{}", spun.0);
        assert_eq!(spun.0, single.0);
        assert!(spun.1 == single.1, "the states differ");
    }

    /// The barrier lets its threads through together, the last one's action run once; a
    /// broken one (a thread panicked) releases its waiters with `false` instead of
    /// holding them for a thread that will not come.
    #[test]
    fn spin_barriers_pass_together_or_release_when_broken() {
        let b = SpinBarrier::new(3);
        let actions = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let waiters: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        (0..100).all(|_| {
                            b.wait(|| {
                                actions.fetch_add(1, Ordering::Relaxed);
                            })
                        })
                    })
                })
                .collect();
            assert!(waiters.into_iter().all(|w| w.join().unwrap()));
        });
        assert_eq!(actions.load(Ordering::Relaxed), 100);
        let b = SpinBarrier::new(2);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| b.wait(|| {}));
            std::thread::sleep(std::time::Duration::from_millis(20));
            b.break_all();
            assert!(
                !waiter.join().unwrap(),
                "a broken barrier let its waiter pass"
            );
        });
    }

    /// A thread that panics in a spinning run (here: parameters too short for the network,
    /// in the one chunk group of a batch of 200, so the other thread waits at the barrier)
    /// raises its panic from `run` instead of leaving the other waiting for it.
    #[test]
    fn a_panic_in_a_spinning_run_is_raised_not_waited_for() {
        let caught = on_threads(2, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut t = trainer("freq(2) | mlp(16x2, relu)", 200);
                t.params.truncate(10);
                t.run_spinning(3)
            }))
        });
        assert!(caught.is_err(), "the run did not panic: {caught:?}");
    }

    /// A spinning run cancelled from another thread while it runs stops with whole steps
    /// applied: its state is that of as many single steps.
    #[test]
    fn a_spinning_run_cancelled_midway_keeps_whole_steps() {
        let arch = "freq(2) | mlp(16x2, relu)";
        let (done, spun, single) = on_threads(2, || {
            let mut a = trainer(arch, 1000);
            let cancel = a.cfg.cancel.clone();
            let stopper = std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(300));
                cancel.cancel();
            });
            let r = a.run_spinning(10_000_000);
            stopper.join().unwrap();
            assert!(matches!(r, Err(TrainError::Cancelled)), "{r:?}");
            let done = a.steps_done();
            let mut b = trainer(arch, 1000);
            for _ in 0..done {
                b.run(1).unwrap();
            }
            (done, state_bits(&a), state_bits(&b))
        });
        assert!(done > 0, "no step ran before the cancellation");
        assert_eq!(spun.3, done);
        assert!(spun == single, "the state after {done} steps differs");
    }

    /// `path`'s products give the f32 gradient of `arch` within their rounding, tensor by
    /// tensor, and train as well.
    fn tracks_f32(arch: &str, path: CpuPath) {
        let mut f = trainer(arch, 4096);
        let mut b = trainer(arch, 4096).path(path);
        f.gradient(0);
        b.gradient(0);
        let (gf, gb) = (f.last_gradient(), b.last_gradient());
        assert_eq!(gf.len(), gb.len());
        assert!(gb.iter().all(|g| g.is_finite()));
        let norm =
            |v: &mut dyn Iterator<Item = f32>| v.map(|x| x as f64 * x as f64).sum::<f64>().sqrt();
        let diff = norm(&mut gf.iter().zip(gb).map(|(a, b)| a - b));
        assert!(diff > 0.0, "{arch}: the {} path was not taken", path.name());
        let tensors = f.net.tensors();
        assert!(!tensors.is_empty());
        for t in &tensors {
            let range = t.offset..t.offset + t.shape.iter().product::<usize>();
            let (tf, tb) = (&gf[range.clone()], &gb[range]);
            let diff = norm(&mut tf.iter().zip(tb).map(|(a, b)| a - b));
            let size = norm(&mut tf.iter().copied());
            assert!(size > 0.0, "{arch}: {} has no f32 gradient", t.name);
            assert!(
                diff < 0.03 * size,
                "{arch}: {}: |g_{} - g_f32| = {diff}, |g_f32| = {size}",
                t.name,
                path.name()
            );
        }
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
        // an 8-input first layer that must form its input gradient (the grid below
        // trains): its weight gradient stays f32, the tables' gradients follow
        tracks_f32(
            "hashgrid(levels=4, features=2, log2_size=12, base=8, scale=1.5) | mlp(32x2, relu)",
            CpuPath::Amx,
        );
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
