//! The GPU training backend: generated WGSL per architecture (see [`codegen`]), many
//! steps recorded into one command buffer, the loss read back once per `run`.
//!
//! Per step two dispatches: the fused step kernel (sample draw, forward, loss, backward,
//! per-workgroup weight-gradient partial sums) and the reduction + Adam kernel. Both read
//! the step's constants (step index, learning rate, bias corrections) from a uniform
//! buffer at a dynamic offset, written once per `run`; the steps go to the queue in
//! submissions of [`SUBMIT_STEPS`] (recording one overlaps the GPU running the one
//! before), and the losses are read back once per `run`.

pub mod codegen;
pub mod grid;
pub mod wgsl;

use crate::context::{GpuContext, GpuError};
use codegen::{DataKind, Launch, LossScale, Precision};
use nshade_core::data::TrainingData;
use nshade_core::network::Network;
use nshade_core::train::{Backend, Checkpoint, TrainConfig, TrainError, Trainer, check_compatible};
use std::sync::Arc;

/// Most steps per `submit` call (its records written at once, its losses read back once).
const MAX_STEPS_PER_SUBMIT: u32 = 1024;
/// Steps per submission within one `run` (see [`submit_steps`]).
const SUBMIT_STEPS: u32 = 64;

/// Steps recorded per submission of a call of `n`: [`SUBMIT_STEPS`], or
/// `NSHADE_GPU_SUBMIT` (`0`: all `n` in one submission, as before the twenty-second
/// session; for measurements).
fn submit_steps(n: u32) -> u32 {
    match std::env::var("NSHADE_GPU_SUBMIT").map_or(Ok(SUBMIT_STEPS), |v| v.parse::<u32>()) {
        Ok(0) => n.max(1),
        Ok(per) => per,
        Err(_) => SUBMIT_STEPS,
    }
}

/// Bytes of one step's record in the uniform buffer (≥ every adapter's offset alignment).
const RECORD: u64 = 256;

/// The per-step constants (mirrors `struct Step` in the kernels).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct StepRecord {
    step: u32,
    slot: u32,
    step_lr: f32,
    inv_c2: f32,
    mode: u32,
    /// Added to the loss scale by the step kernel (0; +∞ injects an overflow, for tests).
    poison: f32,
    /// `pcg_hash` of the sample seed: the step kernel's stream of samples.
    seed_h: u32,
    _pad: [u32; 1],
}

/// Trains on the GPU through wgpu.
pub struct GpuBackend {
    ctx: Arc<GpuContext>,
    pingpong: bool,
    scalar: bool,
    scaling: Option<LossScale>,
    want: Option<Precision>,
    forms: KernelForms,
}

/// Forms of the GLSL kernels chosen in code instead of by their environment knobs
/// (tests compare the forms on one device; `None`: the knob's or the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelForms {
    /// The dW kernel's form (else [`codegen::DwForm::from_env`]).
    pub dw: Option<codegen::DwForm>,
    /// The next chunk sampled ahead, where it fits (else [`codegen::ahead_for`]'s knob).
    pub ahead: Option<bool>,
    /// In the compact layout, every layer that can stores its input gradient in place
    /// (`Some(true)`), or none (`Some(false)`), instead of as few as fit
    /// ([`codegen::compact_shape`]'s knob).
    pub inplace: Option<bool>,
    /// Which phases write a subgroup's tiles side by side (else
    /// [`codegen::Interleave::from_env`]).
    pub interleave: Option<codegen::Interleave>,
    /// The step kernel's dW partials stored in the last chunk (`Some(true)`) or after the
    /// chunk loop (`Some(false)`), instead of by [`codegen::early_stores`]' rule.
    pub early: Option<bool>,
    /// The output layer's phases merged into one wherever they can be (`Some(true)`:
    /// the device has NVIDIA's conversions and [`codegen::merged_output_fits`]) or
    /// never, instead of as [`merged_output_default`] says.
    pub merged_output: Option<bool>,
    /// The bias and loss folds after the chunk loop through subgroup shuffles
    /// (`Some(true)`, where the device has subgroup operations) or through workgroup
    /// memory (`Some(false)`), instead of by `NSHADE_GPU_SHFOLD` (on by default).
    pub shuffle_folds: Option<bool>,
}

impl GpuBackend {
    /// Opens the default (high-performance) adapter.
    pub fn new() -> Result<GpuBackend, GpuError> {
        Ok(GpuBackend::with_context(Arc::new(GpuContext::new()?)))
    }

    /// The default adapter when it is hardware (not a software rasteriser such as
    /// lavapipe): what `--backend auto` trains on; `None` sends auto to the CPU.
    pub fn hardware() -> Option<GpuBackend> {
        GpuBackend::new()
            .ok()
            .filter(|b| b.context().summary.is_hardware())
    }

    pub fn with_context(ctx: Arc<GpuContext>) -> GpuBackend {
        GpuBackend {
            ctx,
            pingpong: false,
            scalar: false,
            scaling: None,
            want: None,
            forms: KernelForms::default(),
        }
    }

    /// Reads the dW kernel's tiles in this form instead of `NSHADE_GPU_DWSTAGE` /
    /// `NSHADE_GPU_DWPARTS`' (tests compare the forms on one device).
    pub fn dw_form(mut self, form: codegen::DwForm) -> GpuBackend {
        self.forms.dw = Some(form);
        self
    }

    /// Samples the next chunk in the step kernel's backward where it fits, or never,
    /// instead of as `NSHADE_GPU_AHEAD` says (tests compare both on one device).
    pub fn sample_ahead(mut self, ahead: bool) -> GpuBackend {
        self.forms.ahead = Some(ahead);
        self
    }

    /// Stores the input gradients of every layer that can in place in the compact layout
    /// (`true`), or of none (`false`), instead of as few as fit (tests compare them).
    pub fn inplace(mut self, every: bool) -> GpuBackend {
        self.forms.inplace = Some(every);
        self
    }

    /// Writes the step kernel's phases' tiles side by side as `interleave` says instead
    /// of as `NSHADE_GPU_INTERLEAVE` does (tests compare the forms on one device).
    pub fn interleave(mut self, interleave: codegen::Interleave) -> GpuBackend {
        self.forms.interleave = Some(interleave);
        self
    }

    /// Stores the step kernel's dW partials in the last chunk (`true`) or after the chunk
    /// loop (`false`) instead of by the chunk count (tests compare both on one device).
    pub fn early_stores(mut self, early: bool) -> GpuBackend {
        self.forms.early = Some(early);
        self
    }

    /// Merges the step kernel's output-layer phases where the device and the network
    /// allow (`true`) or never (`false`), instead of as `NSHADE_GPU_OUTMERGE` says (tests
    /// compare both on one device).
    pub fn merged_output(mut self, merged: bool) -> GpuBackend {
        self.forms.merged_output = Some(merged);
        self
    }

    /// Folds the step kernel's bias and loss sums through subgroup shuffles (`true`,
    /// where the device has subgroup operations) or through workgroup memory (`false`),
    /// instead of as `NSHADE_GPU_SHFOLD` says (tests compare both on one device).
    pub fn shuffle_folds(mut self, shuffle: bool) -> GpuBackend {
        self.forms.shuffle_folds = Some(shuffle);
        self
    }

    /// Keeps hidden-layer gradients in two separate buffers instead of in place (when
    /// they fit; also `NSHADE_GPU_PINGPONG=1`), so tests cover both layouts.
    pub fn separate_gradient_buffers(mut self) -> GpuBackend {
        self.pingpong = true;
        self
    }

    /// Uses the scalar matrix loops instead of the vec4 ones (also `NSHADE_GPU_VEC=0`;
    /// they remain the fallback for chunks of fewer than 4 samples), so tests cover both.
    pub fn scalar_loops(mut self) -> GpuBackend {
        self.scalar = true;
        self
    }

    /// Dynamic loss scaling with these settings on whatever path runs (the
    /// cooperative-matrix path always scales, by default with
    /// [`LossScale::for_batch`]); on the f32 path it changes nothing but lets tests
    /// drive the state machine (with a power-of-two scale and no overflow the weights
    /// are those of an unscaled run).
    pub fn loss_scaling(mut self, scaling: LossScale) -> GpuBackend {
        self.scaling = Some(scaling);
        self
    }

    /// Chooses the precision path instead of `NSHADE_GPU_PATH`; a path the adapter
    /// cannot run ([`precision_supported`]) falls back to f32.
    pub fn precision(mut self, precision: Precision) -> GpuBackend {
        self.want = Some(precision);
        self
    }

    /// The path trainers of this backend use (for networks with an mlp; others f32)
    /// when one was chosen (`precision`, `NSHADE_GPU_PATH`); without a choice f32, which
    /// [`GpuBackend::precision_for`] may change per network.
    pub fn precision_wanted(&self) -> Precision {
        let p = self.want.unwrap_or_else(requested_precision);
        if precision_supported(&self.ctx, p) {
            p
        } else {
            Precision::F32
        }
    }

    /// The path a trainer for `net` uses: the chosen one, or without a choice
    /// ([`auto_precision`]) the fused cooperative-matrix path where it was measured
    /// faster than f32, else f32.
    pub fn precision_for(&self, net: &Network) -> Precision {
        let chosen =
            self.want.is_some() || std::env::var("NSHADE_GPU_PATH").is_ok_and(|v| !v.is_empty());
        if chosen {
            self.precision_wanted()
        } else {
            auto_precision(&self.ctx, net)
        }
    }

    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }

    /// Starts a trainer with the concrete type (tests use [`GpuTrainer::gradient`]).
    pub fn trainer(
        &self,
        net: &Network,
        params: Vec<f32>,
        data: Arc<TrainingData>,
        cfg: &TrainConfig,
    ) -> Result<GpuTrainer, TrainError> {
        GpuTrainer::with_options(
            self.ctx.clone(),
            net,
            params,
            &data,
            cfg,
            self.pingpong,
            self.scalar,
            self.precision_for(net),
            self.scaling,
            self.forms,
        )
    }
}

/// The automatic path for `net` when none is chosen: `coop` when the adapter can run it
/// ([`coop_supported`]), the fused kernels apply (every hidden activation's derivative
/// follows from its output; `NSHADE_GPU_FUSED` not 0) and the network has a layer of at
/// least 32×32 — on the H200 the fused kernels trained the seed's four networks (32
/// wide), `freq(8) | mlp(64x4, relu)` and the hash-grid network C (1.5x) faster than f32
/// (docs/PERFORMANCE.md); f32 otherwise. Grid table gradients are exact fixed-point sums
/// on every path, so the choice keeps runs deterministic.
pub fn auto_precision(ctx: &GpuContext, net: &Network) -> Precision {
    let wide = codegen::Pad::of(net)
        .layers
        .iter()
        .any(|l| l.out_dims >= 32 && l.in_dims >= 32);
    if wide && coop_supported(ctx) && codegen::fused_enabled() && codegen::net_fusable(net) {
        Precision::Coop
    } else {
        Precision::F32
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> String {
        format!("gpu ({})", self.ctx.summary.name)
    }
    /// The chosen path, or `auto` when none was chosen and the adapter can run `coop`
    /// (trainers then pick per network, see [`auto_precision`]; their `path` says which).
    fn path(&self) -> String {
        let chosen =
            self.want.is_some() || std::env::var("NSHADE_GPU_PATH").is_ok_and(|v| !v.is_empty());
        if !chosen && coop_supported(&self.ctx) {
            "auto".into()
        } else {
            self.precision_wanted().name().into()
        }
    }
    fn start(
        &self,
        net: &Network,
        params: Vec<f32>,
        data: Arc<TrainingData>,
        cfg: &TrainConfig,
    ) -> Result<Box<dyn Trainer>, TrainError> {
        Ok(Box::new(self.trainer(net, params, data, cfg)?))
    }
    /// Restores the parameters, both Adam moments and the step counter: the step kernel
    /// draws step s's samples from the seed and s alone, and the learning rate and bias
    /// corrections follow from s, so the resumed trainer takes the steps an uninterrupted
    /// one takes (bit for bit on the same device: no float atomics). The f16 and
    /// cooperative-matrix paths also carry a loss scale that checkpoints do not hold, so
    /// they are refused.
    fn resume(
        &self,
        net: &Network,
        checkpoint: Checkpoint,
        data: Arc<TrainingData>,
        cfg: &TrainConfig,
    ) -> Result<Box<dyn Trainer>, TrainError> {
        let n = net.param_count;
        if [
            checkpoint.params.len(),
            checkpoint.m.len(),
            checkpoint.v.len(),
        ] != [n; 3]
        {
            return Err(backend_err(format!(
                "the checkpoint holds {} parameters; the network has {n}",
                checkpoint.params.len()
            )));
        }
        let mut t = self.trainer(net, checkpoint.params.clone(), data, cfg)?;
        t.restore(&checkpoint)?;
        Ok(Box::new(t))
    }
}

fn backend_err(message: impl Into<String>) -> TrainError {
    TrainError::Backend {
        backend: "gpu".into(),
        message: message.into(),
    }
}

fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// True when the cooperative-matrix path is asked for (`NSHADE_GPU_PATH=coop`; it is
/// experimental: on the H200 it was at most a few per cent faster than f32, see
/// docs/gpu-training.md) and the device can run it: 16×16×16 f16 → f32 matrices, f16 in
/// shaders, and a fixed subgroup size of 32 (the kernels hand matrix tiles to subgroups
/// by `local_invocation_index / 32`).
pub fn coop_available(ctx: &GpuContext) -> bool {
    coop_supported(ctx) && coop_requested()
}

/// `NSHADE_GPU_PATH=coop` is set.
pub fn coop_requested() -> bool {
    std::env::var("NSHADE_GPU_PATH").is_ok_and(|v| v == "coop")
}

/// The path `NSHADE_GPU_PATH` asks for (`f16`, `coop`; anything else: f32).
pub fn requested_precision() -> Precision {
    match std::env::var("NSHADE_GPU_PATH").as_deref() {
        Ok("coop") => Precision::Coop,
        Ok("f16") => Precision::F16,
        _ => Precision::F32,
    }
}

/// The device can run `p`: f32 always, f16 with `SHADER_F16`, coop see
/// [`coop_supported`].
pub fn precision_supported(ctx: &GpuContext, p: Precision) -> bool {
    match p {
        Precision::F32 => true,
        Precision::F16 => ctx.has(wgpu::Features::SHADER_F16),
        Precision::Coop => coop_supported(ctx),
    }
}

/// The device can run the cooperative-matrix path (see [`coop_available`]).
pub fn coop_supported(ctx: &GpuContext) -> bool {
    ctx.has(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && ctx.has(wgpu::Features::SHADER_F16)
        && ctx.summary.subgroup_size == [32, 32]
        && ctx
            .summary
            .cooperative_matrix_shapes
            .iter()
            .any(|s| s.starts_with("16x16x16") && s.contains("F16->F32"))
}

/// Chooses the launch shape for `net` on this device, and whether it runs on
/// cooperative matrices (`coop`) or plain f32.
pub fn choose_launch(
    ctx: &GpuContext,
    net: &Network,
    batch: usize,
    allow_pingpong: bool,
    scalar: bool,
) -> Result<(Launch, bool), TrainError> {
    let precision = if coop_available(ctx) {
        Precision::Coop
    } else {
        Precision::F32
    };
    choose_launch_for(ctx, net, batch, allow_pingpong, scalar, precision)
}

/// [`choose_launch`] for the `precision` path (the caller checked
/// [`precision_supported`]); the returned flag says whether the padded f16 layout of the
/// f16 and cooperative-matrix paths is used (false: f32).
pub fn choose_launch_for(
    ctx: &GpuContext,
    net: &Network,
    batch: usize,
    allow_pingpong: bool,
    scalar: bool,
    precision: Precision,
) -> Result<(Launch, bool), TrainError> {
    let coop_ok = precision.padded();
    let limits = ctx.device.limits();
    let max = limits.max_compute_workgroup_storage_size as usize;
    // 512 invocations for nets with layers of 64 or more (measured on the H200: 1.4× for
    // freq(8) | mlp(64x4)); 256 for narrower ones (1.3× for the seed's 32-wide nets).
    let wide = codegen::Pad::of(net)
        .layers
        .iter()
        .any(|l| l.out_dims >= 64 && l.in_dims >= 64);
    // vec4 matrix loops on the f32 path (NSHADE_GPU_VEC=0: the scalar loops) whenever
    // the chunk is a multiple of 4 samples; they were fastest with 256 invocations for
    // every network on the H200 (freq(8) | mlp(64x4): 191 M against 148 M with 512)
    let vec_on = !scalar && env_u32("NSHADE_GPU_VEC") != Some(0);
    let threads = env_u32("NSHADE_GPU_THREADS")
        .unwrap_or(if wide && !coop_ok && !vec_on {
            512
        } else {
            256
        })
        .min(limits.max_compute_invocations_per_workgroup)
        .min(limits.max_compute_workgroup_size_x)
        .max(1);
    let want = env_u32("NSHADE_GPU_SAMPLES")
        .unwrap_or(32)
        .next_power_of_two()
        .max(1);
    let vec_for = |s: u32, coop: bool| vec_on && !coop && s.is_multiple_of(4);
    let fits_skew = |s: u32, coop: bool, pp: bool, skew: u32, xg: bool, wsh: bool| {
        codegen::shared_bytes(
            net,
            s as usize,
            threads as usize,
            if coop { precision } else { Precision::F32 },
            pp,
            vec_for(s, coop),
            skew as usize,
            xg,
            wsh,
        ) <= max
    };
    let fits = |s: u32, coop: bool, pp: bool| fits_skew(s, coop, pp, 0, false, false);
    let (mut skew, mut xglobal, mut wsh) = (0, false, false);
    let mut pick = None;
    if coop_ok && threads.is_multiple_of(32) && has_mlp(net) {
        // the fused cooperative-matrix MLP starts from 64 samples per chunk (fewer
        // barriers per sample), halved until it fits
        let fused =
            precision == Precision::Coop && codegen::fused_enabled() && codegen::net_fusable(net);
        let want = if fused && env_u32("NSHADE_GPU_SAMPLES").is_none() {
            64
        } else {
            want
        };
        // fused: padded f16 rows (skew 8) where they fit at this chunk size, else unpadded
        // (NSHADE_GPU_SKEW=0/8 forces one)
        let skews = match env_u32("NSHADE_GPU_SKEW") {
            Some(k) => vec![k.min(8) / 8 * 8],
            None if fused => vec![8, 0],
            None => vec![0],
        };
        // fused: the layers' inputs in workgroup memory; NSHADE_GPU_XG=1 puts them in a
        // storage buffer, which lets 64-wide nets take 64-sample chunks but was slower on
        // the H200 (freq(8) | mlp(64x4): 259 M against 305 M with 32 samples in
        // workgroup memory)
        let places = match env_u32("NSHADE_GPU_XG") {
            Some(k) if fused && k > 0 => vec![true],
            _ => vec![false],
        };
        // fused: the weights copied into workgroup memory where they fit beside the rest
        // (NSHADE_GPU_WSH=0: read from the storage buffer)
        let wshs = if fused && env_u32("NSHADE_GPU_WSH") != Some(0) {
            vec![true, false]
        } else {
            vec![false]
        };
        let options: Vec<(bool, u32, bool)> = places
            .iter()
            .flat_map(|&g| {
                skews
                    .iter()
                    .flat_map(|&k| wshs.iter().map(move |&w| (g, k, w)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut s = want.max(16);
        loop {
            if let Some(&(g, k, w)) = options
                .iter()
                .find(|&&(g, k, w)| fits_skew(s, true, false, k, g, w))
            {
                pick = Some((s, true, false));
                skew = k;
                xglobal = g;
                wsh = w;
                break;
            }
            if s <= 16 {
                break;
            }
            s /= 2;
        }
    }
    // f32: separate gradient buffers (one barrier fewer per layer) when asked for and
    // they fit at the wanted chunk size, else gradients in place and the chunk halved
    // until it fits.
    let pingpong = allow_pingpong || env_u32("NSHADE_GPU_PINGPONG") == Some(1);
    if pick.is_none() && pingpong && fits(want, false, true) {
        pick = Some((want, false, true));
    }
    if pick.is_none() {
        let mut s = want;
        while s > 1 && !fits(s, false, false) {
            s /= 2;
        }
        if !fits(s, false, false) {
            return Err(backend_err(format!(
                "the network needs {} bytes of workgroup memory for one sample; the adapter has {max}",
                codegen::shared_bytes(
                    net,
                    1,
                    threads as usize,
                    Precision::F32,
                    false,
                    false,
                    0,
                    false,
                    false
                )
            )));
        }
        pick = Some((s, false, false));
    }
    let (samples, coop, pingpong) = pick.unwrap();
    // the fused cooperative-matrix MLP (the staged and f16 kernels share its layout)
    let fused = coop
        && precision == Precision::Coop
        && codegen::fused_enabled()
        && codegen::net_fusable(net);
    // fused cooperative-matrix kernels: 128 groups (their padded partials are large;
    // freq(8) | mlp(64x4) on the H200: 232–237 M against 214 M with 512)
    let (groups, chunks) = split_batch(batch as u32, samples, if fused { 128 } else { 512 });
    Ok((
        Launch {
            samples,
            threads,
            groups,
            chunks,
            pingpong,
            // bigger register tiles paid off for 32-wide nets on the H200 (1.06×), not
            // for 64-wide ones (0.7×)
            tile_k: env_u32("NSHADE_GPU_TILEK").unwrap_or(if wide { 1 } else { 2 }),
            vec: vec_for(samples, coop),
            // fused cooperative-matrix MLP: subgroup barriers where the device has them
            // (NSHADE_GPU_SGBAR=1; 0 or unset: workgroup barriers)
            sgbar: fused
                && ctx.has(wgpu::Features::SUBGROUP_BARRIER)
                && env_u32("NSHADE_GPU_SGBAR") != Some(0),
            skew: if fused { skew } else { 0 },
            xglobal: fused && xglobal,
            wsh: fused && wsh,
            // NSHADE_GPU_ATOMIC64=0 keeps the 32-bit pairs (for comparing the two)
            atomic64: ctx
                .has(wgpu::Features::SHADER_INT64 | wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS)
                && env_u32("NSHADE_GPU_ATOMIC64") != Some(0),
        },
        coop,
    ))
}

/// (groups, chunks per group) for `batch` samples in chunks of `samples`, about
/// `target` groups (`NSHADE_GPU_GROUPS` overrides it).
fn split_batch(batch: u32, samples: u32, target: u32) -> (u32, u32) {
    let total = batch.div_ceil(samples);
    let target = env_u32("NSHADE_GPU_GROUPS").unwrap_or(target).max(1);
    let chunks = total.div_ceil(target);
    (total.div_ceil(chunks), chunks)
}

/// Where samples come from, as the step kernel sees it.
fn data_kind(data: &TrainingData) -> DataKind {
    match data {
        TrainingData::Texture(t) => DataKind::Texture {
            width: t.width as u32,
            height: t.height as u32,
        },
        TrainingData::Rows(r) => DataKind::Rows {
            rows: r.len() as u32,
            in_dims: r.in_dims as u32,
            out_dims: r.out_dims as u32,
        },
    }
}

/// The step kernel's output-layer phases merged ([`codegen::GlslLaunch::merged_output`],
/// on devices with NVIDIA's conversions) by default where one subgroup holds each sample
/// block of `shape`'s chunks and a workgroup has more than 8 `chunks` (seed #3's four
/// subgroups of 64 samples: two barriers fewer a chunk, 1.02-1.03x at 2^18 and 2^20 on
/// an H100; at 2^16, 4 chunks, the dW sums after the loop cost what the barriers saved,
/// 0.99-1.00x), not where a block's subgroups share it (B 0.93-0.98x, D 0.92-0.97x: one
/// barrier fewer, the output tile computed by each); `NSHADE_GPU_OUTMERGE=0|1`: never or
/// wherever it fits, for measurements.
pub fn merged_output_default(shape: &codegen::GlslShape, chunks: u32) -> bool {
    match std::env::var("NSHADE_GPU_OUTMERGE").as_deref() {
        Ok("0") => false,
        Ok("1") => true,
        _ => shape.threads / 32 == shape.samples / 16 && chunks > 8,
    }
}

/// The GLSL step kernel is wanted (default; `NSHADE_GPU_GLSL=0` keeps the WGSL kernels).
pub fn glsl_enabled() -> bool {
    std::env::var("NSHADE_GPU_GLSL").map_or(true, |v| v != "0")
}

/// The launch of the GLSL step kernel ([`codegen::glsl_step_kernel`]) and its row skew,
/// where it applies: the cooperative-matrix path's fused kernels, a network and data of
/// its family ([`codegen::glsl_fits`]), an adapter that loads SPIR-V unchanged, and a
/// build with glslang. `fused` is the WGSL launch the kernel replaces (its Adam
/// kernel takes the same groups).
fn glsl_launch(
    ctx: &GpuContext,
    net: &Network,
    kind: DataKind,
    batch: u32,
    fused: Launch,
    max_binding: u64,
    forms: KernelForms,
) -> Option<GlslPlan> {
    if !cfg!(feature = "glslang")
        || !glsl_enabled()
        || !ctx.has(wgpu::Features::PASSTHROUGH_SHADERS)
        || !codegen::fused_enabled()
        || !codegen::net_fusable(net)
        || !codegen::glsl_fits(net, kind)
    {
        return None;
    }
    let max = ctx.device.limits().max_compute_workgroup_storage_size as usize;
    // (where its workgroup memory does not fit, the GLSL step kernel below)
    if codegen::private_enabled()
        && codegen::private_fits(net, kind)
        && let Some(plan) = private_launch(ctx, net, batch, fused, max)
    {
        return Some(plan);
    }
    let mode = codegen::split_mode();
    let mut shape = codegen::glsl_samples(net, max)?;
    // as many workgroups as are resident: one (or the shape's count) per multiprocessor
    // where the driver reports them (132 on the H200: 2-3% over 128 at 2^20), else 128
    let mps = ctx.summary.multiprocessors.unwrap_or(128);
    let (mut groups, mut chunks) = split_batch(batch, shape.samples, mps * shape.per_mp);
    let mut split = codegen::DwSplit::of(net, groups, chunks, shape.samples, &mode, max_binding);
    // the compact layout where it gives more samples a chunk: where layers split (its
    // memory is sized for the layers the mode splits, which `acc16_for` counts again, so
    // a split the binding limit refused gets none) with the same split at its own launch;
    // and for networks without a split layer, where it gives more samples a
    // multiprocessor (`NSHADE_GPU_COMPACT=0`: never)
    let knob = std::env::var("NSHADE_GPU_COMPACT").unwrap_or_default();
    let layers = codegen::split_layers_for(net, &mode);
    let split_now = split.as_ref().map(|sp| sp.layers.clone());
    let allowed = knob != "0"
        && match &split_now {
            Some(l) => *l == layers,
            None => !layers.contains(&true),
        };
    if allowed && let Some(cs) = codegen::compact_shape(net, &layers, &shape, max, forms.inplace) {
        let (g, c) = split_batch(batch, cs.samples, mps * cs.per_mp);
        let csp = codegen::DwSplit::of(net, g, c, cs.samples, &mode, max_binding);
        if csp.as_ref().map(|sp| &sp.layers) == split_now.as_ref() {
            (shape, groups, chunks, split) = (cs, g, c, csp);
        }
    }
    let acc16 = codegen::acc16_for(net, &shape, max);
    Some(GlslPlan {
        launch: shape_launch(&shape, groups, chunks, fused),
        shape,
        split,
        acc16,
        ahead: codegen::ahead_for(net, &shape, acc16, max, forms.ahead),
        private: None,
    })
}

/// The launch of the subgroup-private kernel (`NSHADE_GPU_PRIVATE=1`; with NVIDIA's
/// conversions where the device has them): `NSHADE_GPU_SG`
/// subgroups a workgroup (4 by default), as many workgroups per multiprocessor as their
/// workgroup memory fits into `max` (at most 4; `None` where none fits), the partial sums
/// folded per workgroup or one set per subgroup (`launch.groups` counts the sets; the
/// dispatch, workgroups).
fn private_launch(
    ctx: &GpuContext,
    net: &Network,
    batch: u32,
    fused: Launch,
    max: usize,
) -> Option<GlslPlan> {
    let nsg = env_u32("NSHADE_GPU_SG")
        .filter(|n| matches!(n, 1 | 2 | 4 | 8))
        .unwrap_or(4);
    let partial_len = codegen::Pad::of(net).partial_len(net.dense_count);
    let staged = std::env::var("NSHADE_GPU_PRIVATE_WSH").is_ok_and(|v| v == "1");
    // row blocks of 16 samples a subgroup carries together (`NSHADE_GPU_PRIVATE_BLOCKS`)
    let blocks = env_u32("NSHADE_GPU_PRIVATE_BLOCKS")
        .filter(|b| matches!(b, 1 | 2))
        .unwrap_or(1);
    let samples = codegen::PRIVATE_SAMPLES * blocks;
    // NVIDIA's conversions where the device was opened with them
    // (`NSHADE_GPU_PRIVATE_CONVERT=0`: through workgroup memory, for measurements)
    let convert = ctx.summary.cooperative_matrix_conversions && codegen::knob("PRIVATE_CONVERT");
    let probe = codegen::PrivateLaunch {
        subgroups: nsg,
        chunks: 1,
        partial_len,
        staged,
        convert,
        pack_bias: codegen::knob("PRIVATE_DBPACK"),
        blocks,
        fold: codegen::knob("PRIVATE_FOLD"),
    };
    let per_mp = (max / probe.bytes(net).max(1)).min(4) as u32;
    if per_mp == 0 {
        return None;
    }
    let mps = ctx.summary.multiprocessors.unwrap_or(128);
    let (sets, _) = split_batch(batch, samples, mps * per_mp * nsg);
    let groups = sets.div_ceil(nsg);
    let chunks = batch.div_ceil(groups * nsg * samples);
    let shape = codegen::GlslShape {
        threads: 32 * nsg,
        samples,
        skew: 0,
        per_mp,
        compact: false,
        inplace: 0,
    };
    Some(GlslPlan {
        launch: shape_launch(&shape, groups * probe.sets_per_workgroup(), chunks, fused),
        shape,
        split: None,
        acc16: false,
        ahead: false,
        private: Some(codegen::PrivateLaunch { chunks, ..probe }),
    })
}

/// The launch of a GLSL step kernel in `shape` with `groups` (partial sets) of `chunks`,
/// replacing the WGSL launch `fused` (whose Adam kernel takes the same groups).
fn shape_launch(shape: &codegen::GlslShape, groups: u32, chunks: u32, fused: Launch) -> Launch {
    Launch {
        samples: shape.samples,
        threads: shape.threads,
        groups,
        chunks,
        skew: shape.skew,
        sgbar: false,
        xglobal: false,
        wsh: false,
        ..fused
    }
}

/// What [`glsl_launch`] decides for the GLSL step kernel: its launch (replacing the WGSL
/// one), its shape, the layers whose weight gradients go through the dW kernel
/// ([`codegen::DwSplit`], within the binding limit) and whether it accumulates in f16
/// ([`codegen::acc16_for`]).
struct GlslPlan {
    launch: Launch,
    shape: codegen::GlslShape,
    split: Option<codegen::DwSplit>,
    acc16: bool,
    /// The next chunk sampled in this one's backward ([`codegen::ahead_for`]).
    ahead: bool,
    /// The subgroup-private kernel instead (`launch.groups` then counts its partial sets).
    private: Option<codegen::PrivateLaunch>,
}

/// The pipeline of the GLSL step kernel `src`, compiled by glslang and loaded as SPIR-V
/// (cached per device like the WGSL ones).
fn glsl_pipeline(
    ctx: &GpuContext,
    src: &str,
    threads: u32,
    types: &[wgpu::BindingType],
) -> Result<(wgpu::ComputePipeline, wgpu::BindGroupLayout), TrainError> {
    #[cfg(feature = "glslang")]
    {
        let key = format!("glsl step\n{types:?}\n{src}");
        ctx.try_cached_pipeline(key, || {
            let words = crate::capture::glslang::compile_compute(src).map_err(|e| {
                backend_err(format!(
                    "glslang rejected the GLSL step kernel (line {:?}): {}",
                    e.line, e.message
                ))
            })?;
            let device = &ctx.device;
            // SAFETY: glslang's SPIR-V of the generated step kernel: its bindings are the
            // WGSL step kernel's (`types`), and every index is in range by construction
            // as in the WGSL kernels (see `compile`): tiles are clamped to the layer's
            // padded blocks, `xh`/`gh` rows hold SX ≥ S samples, partial offsets are
            // the padded weights and biases of group `wid` < groups; the dW kernel's and
            // the split layers' stores index chunk `wid · chunks + c` < groups · chunks
            // of regions sized groups · chunks · S · rows (`DwSplit::of`); the
            // subgroup-private kernel writes the partials of set wid · NSG + sgid <
            // `launch.groups` (its sets), or folded of set wid < `launch.groups`, and
            // indexes only its subgroup's rows of `xr`, `tg`, `mk` and `lsum` (folded: it
            // reads every subgroup's tile of `tg` and first slots of `lsum`, in range).
            let module = unsafe {
                crate::infer::passthrough_module(
                    device,
                    "nshade step (GLSL)",
                    &words,
                    "main",
                    threads,
                )
            };
            Ok(module_pipeline(
                device,
                "nshade step (GLSL)",
                &module,
                "main",
                types,
            ))
        })
    }
    #[cfg(not(feature = "glslang"))]
    {
        let _ = (ctx, src, threads, types);
        Err(backend_err("this nshade was built without glslang"))
    }
}

fn has_mlp(net: &Network) -> bool {
    !codegen::Pad::of(net).layers.is_empty()
}

pub struct GpuTrainer {
    ctx: Arc<GpuContext>,
    cfg: TrainConfig,
    param_count: usize,
    launch: Launch,
    precision: Precision,
    adam_groups: u32,
    /// Partial sets a workgroup writes where the step kernel is the subgroup-private one
    /// (one folded, else one per subgroup: `launch.groups` counts sets).
    private: Option<u32>,
    /// The step kernel merges the output layer's phases ([`codegen::MERGED_OUTPUT_MARK`]).
    merged_output: bool,
    /// The step kernel folds its bias and loss sums through subgroup shuffles
    /// ([`codegen::SHUFFLE_FOLDS_EXT`]).
    shuffle_folds: bool,
    step_pipe: wgpu::ComputePipeline,
    adam_pipe: wgpu::ComputePipeline,
    step_bg: wgpu::BindGroup,
    adam_bg: wgpu::BindGroup,
    params: wgpu::Buffer,
    grads: wgpu::Buffer,
    losses: wgpu::Buffer,
    records: wgpu::Buffer,
    /// The table Adam kernel, for networks with grids.
    grid_pass: Option<grid::GridPass>,
    t: u32,
    /// Dense parameters (their Adam moments come first in `moments`, `m` then `v`; the
    /// grid tables' `m` and `v` follow).
    dense_count: usize,
    moments: wgpu::Buffer,
    /// Whether an f16 or padded f32 copy of the weights is refreshed from the master ones.
    weight_copy: bool,
    /// Dynamic loss scaling: its settings and state buffer (two slots of 4 words, then
    /// the packed lanes' words).
    scaling: Option<(LossScale, wgpu::Buffer)>,
    /// Grid table gradients in packed lanes.
    pack: Option<grid::Packing>,
    /// Steps whose loss scale is made infinite ([`GpuTrainer::inject_overflow`]).
    poison: Vec<u32>,
    /// The GLSL step kernel samples the next chunk in this one's backward
    /// ([`codegen::GlslLaunch::ahead`]).
    ahead: bool,
    /// The GLSL step kernel's shape (its compact layout, its layers in place); `None`
    /// where the step kernel is the WGSL one.
    shape: Option<codegen::GlslShape>,
    /// The weight-gradient kernel of the split layers ([`codegen::glsl_dw_kernel`]),
    /// recorded after the step kernel, and its workgroups' second dimension (groups ×
    /// split layers).
    dw_pass: Option<(wgpu::ComputePipeline, wgpu::BindGroup, u32)>,
}

/// The dynamic loss-scale state before the next step (see [`codegen::adam_kernel_scaled`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScaleState {
    /// The scale S the next step multiplies the loss gradient by.
    pub scale: f32,
    /// Consecutive good steps since S last changed.
    pub good_steps: u32,
    /// Steps skipped for overflow so far.
    pub skipped: u32,
}

fn storage(ctx: &GpuContext, label: &str, bytes: u64) -> wgpu::Buffer {
    ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: bytes.max(4),
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

fn layout_entry(binding: u32, ty: wgpu::BindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty,
        count: None,
    }
}

fn storage_ty(read_only: bool) -> wgpu::BindingType {
    wgpu::BindingType::Buffer {
        ty: wgpu::BufferBindingType::Storage { read_only },
        has_dynamic_offset: false,
        min_binding_size: None,
    }
}

fn uniform_ty() -> wgpu::BindingType {
    wgpu::BindingType::Buffer {
        ty: wgpu::BufferBindingType::Uniform,
        has_dynamic_offset: true,
        min_binding_size: wgpu::BufferSize::new(std::mem::size_of::<StepRecord>() as u64),
    }
}

/// The pipeline of `wgsl` with the given binding types: compiled once per device (see
/// `GpuContext::cached_pipeline`).
fn pipeline(
    ctx: &GpuContext,
    label: &str,
    wgsl: &str,
    entry: &str,
    types: &[wgpu::BindingType],
) -> (wgpu::ComputePipeline, wgpu::BindGroupLayout) {
    let checked = std::env::var("NSHADE_GPU_CHECKED").is_ok_and(|v| v == "1");
    let key = format!("{label}\n{entry}\n{types:?}\n{checked}\n{wgsl}");
    ctx.cached_pipeline(key, || compile(ctx, label, wgsl, entry, types, checked))
}

/// Compiles `wgsl` into a pipeline with the given binding types.
fn compile(
    ctx: &GpuContext,
    label: &str,
    wgsl: &str,
    entry: &str,
    types: &[wgpu::BindingType],
    checked: bool,
) -> (wgpu::ComputePipeline, wgpu::BindGroupLayout) {
    let device = &ctx.device;
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    };
    let module = if checked {
        device.create_shader_module(desc)
    } else {
        // SAFETY: every index in the generated kernels is in range by construction:
        // workgroup-memory indices are `(base + j)·R + s` with j < the tensor's width and
        // s < S inside loops bounded by those constants (vec4 path: vector
        // `(base + j)·RV + sg` with sg < S/4 ≤ RV = R/4, or component `s % 4` of
        // `(base + j)·RV + s/4`; the array holds ⌈rows·R/4⌉ vectors); parameter indices are
        // offsets of the network's own tensors (< P); the padded weight copy `wv` is
        // indexed by layer block offset + row < out (in) times the padded row length +
        // group < ⌈in/4⌉ (⌈out/4⌉), inside its block; `partial` is indexed by group < G and p < P;
        // texture texels are clamped to the image; row indices are ⌊h·rows/2³²⌋ < rows;
        // grid-table indices lie inside their level's table (cells clamped to res − 1,
        // hashes masked to the table size) and so do their accumulator words.
        // Cooperative-matrix paths: matrix tiles are clamped (`q = min(t, nt − 1)`), so a
        // 16×16 load or store at row block < rows_p/16 and column block < cols_p/16 stays
        // inside its padded array (`xh`/`gh` rows of SX ≥ S, `w16`/`ws` blocks of
        // out_p × in_p (+8), `zc` tiles `min(sgid, SCR − 1)`, partials `pbase` + padded
        // offset or the 256-float scratch tile at `dummy`, `xg` regions `wid·XGS` of a
        // buffer of `groups·XGS`); epilogue rows are < out_p (bias reads clamped to
        // out_dims − 1) and samples < S.
        // Every loop has a constant bound.
        unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
    };
    module_pipeline(device, label, &module, entry, types)
}

/// The compute pipeline of `module`'s `entry` over one bind group of `types` (in binding
/// order), with that group's layout; workgroup memory is not zeroed (every kernel writes
/// what it reads first).
fn module_pipeline(
    device: &wgpu::Device,
    label: &str,
    module: &wgpu::ShaderModule,
    entry: &str,
    types: &[wgpu::BindingType],
) -> (wgpu::ComputePipeline, wgpu::BindGroupLayout) {
    let entries: Vec<_> = types
        .iter()
        .enumerate()
        .map(|(i, t)| layout_entry(i as u32, *t))
        .collect();
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(label),
        entries: &entries,
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(label),
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: Some(&layout),
        module,
        entry_point: Some(entry),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants: &[],
            zero_initialize_workgroup_memory: false,
        },
        cache: None,
    });
    (pipe, bgl)
}

fn bind(
    ctx: &GpuContext,
    label: &str,
    bgl: &wgpu::BindGroupLayout,
    records: &wgpu::Buffer,
    bufs: &[&wgpu::Buffer],
) -> wgpu::BindGroup {
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 0,
        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: records,
            offset: 0,
            size: wgpu::BufferSize::new(std::mem::size_of::<StepRecord>() as u64),
        }),
    }];
    for (i, b) in bufs.iter().enumerate() {
        entries.push(wgpu::BindGroupEntry {
            binding: i as u32 + 1,
            resource: b.as_entire_binding(),
        });
    }
    ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout: bgl,
        entries: &entries,
    })
}

impl GpuTrainer {
    pub fn new(
        ctx: Arc<GpuContext>,
        net: &Network,
        params: Vec<f32>,
        data: &TrainingData,
        cfg: &TrainConfig,
        pingpong: bool,
        scalar: bool,
    ) -> Result<GpuTrainer, TrainError> {
        let p = if coop_available(&ctx) {
            Precision::Coop
        } else {
            Precision::F32
        };
        GpuTrainer::with_options(
            ctx,
            net,
            params,
            data,
            cfg,
            pingpong,
            scalar,
            p,
            None,
            KernelForms::default(),
        )
    }

    /// [`GpuTrainer::new`] on the `precision` path (checked against
    /// [`precision_supported`] by the caller; networks without an mlp, or whose f16
    /// layout does not fit workgroup memory, run f32) and dynamic loss scaling forced on
    /// with `scaling` (the f16 and cooperative-matrix paths always scale, by default
    /// with [`LossScale::for_batch`]); the GLSL kernels' `forms` where given.
    #[allow(clippy::too_many_arguments)]
    pub fn with_options(
        ctx: Arc<GpuContext>,
        net: &Network,
        params: Vec<f32>,
        data: &TrainingData,
        cfg: &TrainConfig,
        pingpong: bool,
        scalar: bool,
        precision: Precision,
        scaling: Option<LossScale>,
        forms: KernelForms,
    ) -> Result<GpuTrainer, TrainError> {
        check_compatible(net, data, cfg)?;
        if params.len() != net.param_count {
            return Err(backend_err(format!(
                "{} parameters given for a network of {}",
                params.len(),
                net.param_count
            )));
        }
        if cfg.batch > u32::MAX as usize / 2 {
            return Err(backend_err("batch too large"));
        }
        // `coop` below: the padded f16 layout of the f16 and cooperative-matrix paths
        let (launch, coop) = choose_launch_for(&ctx, net, cfg.batch, pingpong, scalar, precision)?;
        let precision = if coop { precision } else { Precision::F32 };
        let kind = data_kind(data);
        // the GLSL step kernel where it applies (its own chunk size)
        let max_binding = ctx
            .device
            .limits()
            .max_storage_buffer_binding_size
            .min(ctx.device.limits().max_buffer_size);
        let glsl = match precision {
            Precision::Coop => glsl_launch(
                &ctx,
                net,
                kind,
                cfg.batch as u32,
                launch,
                max_binding,
                forms,
            ),
            _ => None,
        };
        // the layers whose weight gradients leave the GLSL step kernel for the dW kernel
        let split = glsl.as_ref().and_then(|g| g.split.clone());
        let launch = glsl.as_ref().map_or(launch, |g| g.launch);
        let scaling = scaling.or(coop.then(|| LossScale::for_batch(cfg.batch as u32)));
        // packed table-gradient lanes (with dynamic loss scaling and 64-bit atomics); the
        // step kernels decide the same way
        let pack = grid::packing_for(net, scaling.is_some() && coop, launch.atomic64);
        let pad = codegen::Pad::of(net);
        let vpad = codegen::VecPad::of(net);
        let values: &[f32] = match data {
            TrainingData::Texture(t) => &t.data,
            TrainingData::Rows(r) => &r.data,
        };
        let batch = cfg.batch as u32;
        let step_src = match &glsl {
            Some(GlslPlan {
                private: Some(pl), ..
            }) => {
                codegen::private_step_kernel(net, cfg.loss, kind, batch, *pl).ok_or_else(|| {
                    backend_err("the subgroup-private step kernel does not apply to this network")
                })?
            }
            Some(plan) => codegen::glsl_step_kernel(
                net,
                cfg.loss,
                kind,
                batch,
                codegen::GlslLaunch {
                    shape: plan.shape,
                    chunks: launch.chunks,
                    partial_len: pad.partial_len(net.dense_count)
                        + pack.as_ref().map_or(0, |p| p.lf),
                    atomic64: launch.atomic64,
                    packed: pack.is_some(),
                    split: split.clone(),
                    acc16: plan.acc16,
                    ahead: plan.ahead,
                    interleave: forms
                        .interleave
                        .unwrap_or_else(codegen::Interleave::from_env),
                    early: forms
                        .early
                        .unwrap_or_else(|| codegen::early_stores(launch.chunks)),
                    merged_output: ctx.summary.cooperative_matrix_conversions
                        && forms
                            .merged_output
                            .unwrap_or_else(|| merged_output_default(&plan.shape, launch.chunks)),
                    // (`NSHADE_GPU_SHFOLD=0`: the folds through `zc`, for measurements)
                    shuffle_folds: ctx.has(wgpu::Features::SUBGROUP)
                        && forms
                            .shuffle_folds
                            .unwrap_or_else(|| codegen::knob("SHFOLD")),
                },
            )
            .ok_or_else(|| backend_err("the GLSL step kernel does not apply to this network"))?,
            None => codegen::step_kernel_for(
                net,
                cfg.loss,
                kind,
                batch,
                launch,
                precision,
                scaling.is_some(),
            ),
        };
        // The dense parameters go through partial sums and this kernel; grid tables
        // through fixed-point atomics and `grid::adam_kernel`.
        let adam_src = codegen::adam_kernel_scaled(
            net.dense_count,
            launch.groups,
            batch,
            net.out_dims,
            cfg.adam,
            coop.then_some(&pad),
            launch.vec.then_some(&vpad),
            scaling,
            pack.as_ref(),
        );
        let partial_len = pad.partial_len(net.dense_count) + pack.as_ref().map_or(0, |p| p.lf);
        let dw_form = forms.dw.unwrap_or_else(codegen::DwForm::from_env);
        let dw_src = split.as_ref().map(|sp| {
            codegen::glsl_dw_kernel(
                net,
                sp,
                launch.samples,
                launch.chunks,
                partial_len,
                dw_form,
                ctx.device.limits().max_compute_workgroup_storage_size as usize,
            )
        });
        match std::env::var("NSHADE_GPU_DUMP") {
            Ok(v) if v == "1" => eprintln!("{step_src}\n{adam_src}"),
            // A folder: the two kernels as files (for `tools/vkstats`), last network wins.
            Ok(dir) if !dir.is_empty() => {
                let dir = std::path::Path::new(&dir);
                let _ = std::fs::create_dir_all(dir);
                let name = if glsl.is_some() {
                    "step.comp"
                } else {
                    "step.wgsl"
                };
                let _ = std::fs::write(dir.join(name), &step_src);
                let _ = std::fs::write(dir.join("adam.wgsl"), &adam_src);
                if let Some(d) = &dw_src {
                    let _ = std::fs::write(dir.join("dw.comp"), d);
                }
            }
            _ => {}
        }
        // (`NSHADE_GPU_STEP_FILE=path`: the GLSL step kernel read from that file instead,
        // to time hand-edited variants of a dumped kernel; nothing checks what it computes)
        let step_src = match std::env::var("NSHADE_GPU_STEP_FILE") {
            Ok(path) if glsl.is_some() && !path.is_empty() => std::fs::read_to_string(&path)
                .map_err(|e| backend_err(format!("NSHADE_GPU_STEP_FILE {path}: {e}")))?,
            _ => step_src,
        };
        let p = net.param_count.max(1) as u64;
        let dense = net.dense_count.max(1) as u64;
        let device = &ctx.device;
        let stride = if coop { partial_len as u64 } else { dense };
        let partial_bytes = launch.groups as u64 * stride * 4;
        if partial_bytes > max_binding || (values.len() as u64 * 4) > max_binding {
            return Err(backend_err(format!(
                "buffers exceed the adapter's storage binding limit of {max_binding} bytes"
            )));
        }
        // The Adam moments (two per parameter) are the largest per-parameter buffer.
        if 2 * p * 4 > max_binding {
            return Err(backend_err(format!(
                "the Adam moments of {} parameters ({} bytes) exceed the adapter's storage binding limit of {max_binding} bytes; use a smaller grid",
                net.param_count,
                2 * p * 4
            )));
        }
        let params_buf = storage(&ctx, "params", p * 4);
        ctx.queue
            .write_buffer(&params_buf, 0, bytemuck::cast_slice(&params));
        let moments = storage(&ctx, "moments", 2 * p * 4);
        ctx.queue
            .write_buffer(&moments, 0, &vec![0u8; (2 * p * 4) as usize]);
        let data_buf = storage(&ctx, "data", values.len() as u64 * 4);
        ctx.queue
            .write_buffer(&data_buf, 0, bytemuck::cast_slice(values));
        let partial = storage(&ctx, "partial", partial_bytes);
        let loss_partial = storage(&ctx, "loss_partial", launch.groups as u64 * 4);
        let losses = storage(&ctx, "losses", MAX_STEPS_PER_SUBMIT as u64 * 4);
        let grads = storage(&ctx, "grads", p * 4);
        // f16 copy of the weights in the padded layout (cooperative-matrix path only;
        // zero-initialised so the padding contributes nothing)
        // (or, on the vec4 f32 path, the padded f32 copies of `VecPad`)
        let w16_bytes = if coop {
            (pad.weights as u64 * 2).next_multiple_of(4)
        } else if launch.vec {
            vpad.len as u64 * 4
        } else {
            4
        };
        let w16 = storage(&ctx, "w16", w16_bytes);
        ctx.queue
            .write_buffer(&w16, 0, &vec![0u8; w16_bytes as usize]);
        let records = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("step records"),
            size: MAX_STEPS_PER_SUBMIT as u64 * RECORD,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });

        let gacc = grid::accumulators(&ctx, net)?;
        // dynamic loss scaling: the state (both parity slots start at S, 0 good steps,
        // 0 skipped, no overflow) and the per-group overflow flags; with packed grid
        // lanes the exponents of both parities (the first step's) and the decisions
        let ls = scaling.map(|sc| {
            let mut w = vec![sc.initial.to_bits(), 0, 0, 0, sc.initial.to_bits(), 0, 0, 0];
            if let Some(pk) = &pack {
                let k0 = grid::Packing::initial_k(batch) as u32;
                w.extend(std::iter::repeat_n(k0, 2 * pk.lf));
                // the decisions and the drop counts
                w.extend(std::iter::repeat_n(0, 2 * pk.lf));
            }
            let buf = storage(&ctx, "loss scale", w.len() as u64 * 4);
            ctx.queue.write_buffer(&buf, 0, bytemuck::cast_slice(&w));
            let flags = storage(&ctx, "overflow flags", launch.groups as u64 * 4);
            ctx.queue
                .write_buffer(&flags, 0, &vec![0u8; launch.groups as usize * 4]);
            (buf, flags)
        });
        let no_grid = storage(&ctx, "no grid", 4);
        // fused cooperative-matrix path with the layers' inputs in a storage buffer:
        // one region of `xglobal_len` f16 per group (binding 9, after the loss-scaling
        // bindings, which the cooperative-matrix path always has)
        let xg = (launch.xglobal && ls.is_some()).then(|| {
            let bytes = (launch.groups as u64 * codegen::xglobal_len(net, launch) as u64 * 2)
                .next_multiple_of(4);
            storage(&ctx, "fused activations", bytes)
        });
        if let Some(x) = &xg
            && x.size() > max_binding
        {
            return Err(backend_err(format!(
                "buffers exceed the adapter's storage binding limit of {max_binding} bytes"
            )));
        }
        // the split layers' X and dz (bindings 9 and 10 of the GLSL step kernel, which
        // always has the loss-scaling bindings and never `xg`)
        let gxz = split
            .as_ref()
            .filter(|_| ls.is_some() && xg.is_none())
            .map(|sp| {
                (
                    storage(&ctx, "dW inputs", (sp.x_len * 2).next_multiple_of(4)),
                    storage(
                        &ctx,
                        "dW output gradients",
                        (sp.z_len * 2).next_multiple_of(4),
                    ),
                )
            });
        if split.is_some() != gxz.is_some() {
            return Err(backend_err(
                "the dW kernel needs the loss-scaled GLSL step kernel",
            ));
        }
        let mut step_types = vec![
            uniform_ty(),
            storage_ty(true),
            storage_ty(true),
            storage_ty(false),
            storage_ty(false),
            storage_ty(true),
        ];
        if gacc.is_some() || ls.is_some() {
            step_types.push(storage_ty(false));
        }
        if ls.is_some() {
            step_types.push(storage_ty(true));
            step_types.push(storage_ty(false));
        }
        if xg.is_some() {
            step_types.push(storage_ty(false));
        }
        if gxz.is_some() {
            step_types.push(storage_ty(false));
            step_types.push(storage_ty(false));
        }
        let mut adam_types = vec![
            uniform_ty(),
            storage_ty(false),
            storage_ty(false),
            storage_ty(true),
            storage_ty(true),
            storage_ty(false),
            storage_ty(false),
            storage_ty(false),
        ];
        if ls.is_some() {
            adam_types.push(storage_ty(false));
            adam_types.push(storage_ty(true));
        }
        let (step_pipe, step_bgl) = if glsl.is_some() {
            glsl_pipeline(&ctx, &step_src, launch.threads, &step_types)?
        } else {
            pipeline(&ctx, "nshade step", &step_src, "nsh_step", &step_types)
        };
        let (adam_pipe, adam_bgl) =
            pipeline(&ctx, "nshade adam", &adam_src, "nsh_adam", &adam_types);
        let step_bg = bind(
            &ctx,
            "step",
            &step_bgl,
            &records,
            &[&params_buf, &data_buf, &partial, &loss_partial, &w16]
                .into_iter()
                .chain(gacc.as_ref().or(ls.as_ref().map(|_| &no_grid)))
                .chain(ls.as_ref().map(|l| &l.0))
                .chain(ls.as_ref().map(|l| &l.1))
                .chain(xg.as_ref())
                .chain(gxz.as_ref().map(|g| &g.0))
                .chain(gxz.as_ref().map(|g| &g.1))
                .collect::<Vec<_>>(),
        );
        let dw_pass = match (&dw_src, &gxz, &split) {
            (Some(src), Some((gx, gz)), Some(sp)) => {
                let types = [
                    uniform_ty(),
                    storage_ty(false),
                    storage_ty(true),
                    storage_ty(true),
                ];
                let (pipe, bgl) = glsl_pipeline(&ctx, src, dw_form.threads, &types)?;
                let bg = bind(&ctx, "dw", &bgl, &records, &[&partial, gx, gz]);
                Some((pipe, bg, sp.count() * dw_form.parts))
            }
            _ => None,
        };
        let grid_pass = gacc.as_ref().map(|acc| {
            grid::GridPass::new(
                &ctx,
                net,
                cfg.adam,
                pack.as_ref(),
                &records,
                &[&params_buf, &moments, acc, &grads]
                    .into_iter()
                    .chain(ls.as_ref().map(|l| &l.0))
                    .collect::<Vec<_>>(),
            )
        });
        let adam_bg = bind(
            &ctx,
            "adam",
            &adam_bgl,
            &records,
            &[
                &params_buf,
                &moments,
                &partial,
                &loss_partial,
                &losses,
                &grads,
                &w16,
            ]
            .into_iter()
            .chain(ls.as_ref().map(|l| &l.0))
            .chain(ls.as_ref().map(|l| &l.1))
            .collect::<Vec<_>>(),
        );
        let mut trainer = GpuTrainer {
            merged_output: step_src.contains(codegen::MERGED_OUTPUT_MARK),
            shuffle_folds: step_src.contains(codegen::SHUFFLE_FOLDS_EXT),
            adam_groups: (dense as u32).div_ceil(codegen::adam_params()) + 1,
            private: glsl
                .as_ref()
                .and_then(|g| g.private)
                .map(|pl| pl.sets_per_workgroup()),
            precision,
            ctx,
            cfg: cfg.clone(),
            param_count: net.param_count,
            launch,
            step_pipe,
            adam_pipe,
            step_bg,
            adam_bg,
            params: params_buf,
            grads,
            losses,
            records,
            grid_pass,
            t: 0,
            dense_count: net.dense_count,
            moments,
            weight_copy: coop || launch.vec,
            // (the subgroup-private kernel's plan has neither)
            ahead: glsl.as_ref().is_some_and(|g| g.ahead),
            shape: glsl.as_ref().map(|g| g.shape),
            dw_pass,
            scaling: scaling.zip(ls.map(|l| l.0)),
            pack,
            poison: Vec::new(),
        };
        if coop || launch.vec {
            // fill the f16 (or padded f32) weight copy from the fp32 master weights
            trainer.submit_adam_only(2)?;
        }
        Ok(trainer)
    }

    /// Refuses checkpoints on the loss-scaled paths (their scale state is not saved).
    fn check_checkpointable(&self) -> Result<(), TrainError> {
        if self.scaling.is_some() {
            return Err(backend_err(format!(
                "the {} path's dynamic loss scale is not saved in checkpoints; train with --gpu-path f32 (or on the CPU) to checkpoint and resume",
                self.precision.name()
            )));
        }
        Ok(())
    }

    /// Sets parameters, Adam moments and step from `c` (see [`Backend::resume`]).
    fn restore(&mut self, c: &Checkpoint) -> Result<(), TrainError> {
        self.check_checkpointable()?;
        let d = self.dense_count;
        let moments: Vec<f32> = [&c.m[..d], &c.v[..d], &c.m[d..], &c.v[d..]].concat();
        let queue = &self.ctx.queue;
        queue.write_buffer(&self.params, 0, bytemuck::cast_slice(&c.params));
        queue.write_buffer(&self.moments, 0, bytemuck::cast_slice(&moments));
        self.t = c.step;
        if self.weight_copy {
            self.submit_adam_only(2)?;
        }
        Ok(())
    }

    /// Runs only the Adam kernel once in `mode` (2: refresh the f16 weight copy).
    fn submit_adam_only(&mut self, mode: u32) -> Result<(), TrainError> {
        let r = StepRecord {
            step: self.t,
            slot: 0,
            step_lr: 0.0,
            inv_c2: 0.0,
            mode,
            poison: 0.0,
            seed_h: nshade_core::rng::pcg_hash(self.cfg.sample_seed()),
            _pad: [0; 1],
        };
        let (device, queue) = (&self.ctx.device, &self.ctx.queue);
        queue.write_buffer(&self.records, 0, bytemuck::bytes_of(&r));
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("nshade w16"),
        });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("nshade w16"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.adam_pipe);
            pass.set_bind_group(0, &self.adam_bg, &[0]);
            pass.dispatch_workgroups(self.adam_groups, 1, 1);
        }
        queue.submit([enc.finish()]);
        Ok(())
    }

    /// `coop` (f16 cooperative matrices, f32 accumulation and master weights), `f16`
    /// (f16 operands, f32 accumulation and master weights) or `f32`.
    pub fn path(&self) -> &'static str {
        self.precision.name()
    }

    /// The language of the step kernel that runs: `glsl` ([`codegen::glsl_step_kernel`])
    /// or `wgsl`.
    pub fn kernel_language(&self) -> &'static str {
        if self.shape.is_some() { "glsl" } else { "wgsl" }
    }

    /// Whether the GLSL step kernel samples the next chunk during this one's backward
    /// ([`codegen::GlslLaunch::ahead`]).
    pub fn samples_ahead(&self) -> bool {
        self.ahead
    }

    /// Whether the GLSL step kernel runs in the compact layout
    /// ([`codegen::GlslShape::compact`]).
    pub fn compact_layout(&self) -> bool {
        self.shape.is_some_and(|s| s.compact)
    }

    /// How many layers of the compact layout store their input gradient in place
    /// ([`codegen::GlslShape::inplace`]; 0 elsewhere).
    pub fn inplace_layers(&self) -> u32 {
        self.shape.map_or(0, |s| s.inplace)
    }

    /// Whether the step kernel is the subgroup-private one ([`codegen::private_step_kernel`],
    /// `NSHADE_GPU_PRIVATE=1`).
    pub fn subgroup_private(&self) -> bool {
        self.private.is_some()
    }

    /// Whether the step kernel runs the output layer in one phase
    /// ([`codegen::GlslLaunch::merged_output`]).
    pub fn merged_output(&self) -> bool {
        self.merged_output
    }

    /// Whether the step kernel folds its bias and loss sums through subgroup shuffles
    /// ([`codegen::GlslLaunch::shuffle_folds`]).
    pub fn shuffle_folds(&self) -> bool {
        self.shuffle_folds
    }

    /// Makes step `step` overflow (its loss scale becomes +∞, so every gradient is
    /// non-finite), to test the skip and back-off; needs dynamic loss scaling.
    pub fn inject_overflow(&mut self, step: u32) -> Result<(), TrainError> {
        if self.scaling.is_none() {
            return Err(backend_err(
                "an overflow can be injected only with dynamic loss scaling",
            ));
        }
        self.poison.push(step);
        Ok(())
    }

    /// The dynamic loss-scale settings, if this trainer scales.
    pub fn loss_scaling(&self) -> Option<LossScale> {
        self.scaling.as_ref().map(|s| s.0)
    }

    /// The loss-scale state the next step starts from (reads it back), if this trainer
    /// scales.
    pub fn loss_scale_state(&self) -> Result<Option<LossScaleState>, TrainError> {
        let Some((_, buf)) = &self.scaling else {
            return Ok(None);
        };
        let w = self.read(buf, 8)?;
        let k = (self.t as usize & 1) * 4;
        Ok(Some(LossScaleState {
            scale: w[k],
            good_steps: w[k + 1].to_bits(),
            skipped: w[k + 2].to_bits(),
        }))
    }

    /// With packed grid lanes ([`grid::Packing`]), the number of (training step, grid
    /// output) pairs whose table update the lanes' range check dropped so far; `None`
    /// when the table gradients are exact sums.
    pub fn dropped_table_updates(&self) -> Result<Option<u64>, TrainError> {
        let (Some(pk), Some((_, buf))) = (&self.pack, &self.scaling) else {
            return Ok(None);
        };
        let w = self.read(buf, pk.state_words())?;
        Ok(Some(
            w[pk.drop_word()..pk.drop_word() + pk.lf]
                .iter()
                .map(|v| v.to_bits() as u64)
                .sum(),
        ))
    }

    /// The launch shape chosen for this network and device.
    pub fn launch(&self) -> Launch {
        self.launch
    }

    /// Records and submits `n` steps from step `self.t` (mode 0: train; mode 1: only the
    /// gradient of step `self.t`, weights untouched); returns the per-step losses.
    fn submit(&mut self, n: u32, mode: u32) -> Result<Vec<f32>, TrainError> {
        let recs: Vec<u8> = (0..n)
            .flat_map(|k| {
                let t = self.t + k;
                let lr = self.cfg.lr.at(t);
                let (step_lr, inv_c2) = self.cfg.adam.corrections(lr, t + 1);
                let mut bytes = vec![0u8; RECORD as usize];
                let r = StepRecord {
                    step: t,
                    slot: k,
                    step_lr,
                    inv_c2,
                    mode,
                    poison: if self.poison.contains(&t) {
                        f32::INFINITY
                    } else {
                        0.0
                    },
                    seed_h: nshade_core::rng::pcg_hash(self.cfg.sample_seed()),
                    _pad: [0; 1],
                };
                bytes[..std::mem::size_of::<StepRecord>()].copy_from_slice(bytemuck::bytes_of(&r));
                bytes
            })
            .collect();
        let (device, queue) = (&self.ctx.device, &self.ctx.queue);
        queue.write_buffer(&self.records, 0, &recs);
        // timing only (`NSHADE_GPU_ONLY=step|adam|fused|dw`): record the step kernel
        // (and the dW kernel where layers split) alone, or the Adam kernels alone, or
        // only the step kernel, or only the dW kernel (the weights then do not train;
        // for splitting a step's time on a GPU)
        let only = std::env::var("NSHADE_GPU_ONLY").unwrap_or_default();
        let (step, dw, adam) = match only.as_str() {
            "step" => (true, true, false),
            "adam" => (false, false, true),
            "fused" => (true, false, false),
            "dw" => (false, true, false),
            _ => (true, true, true),
        };
        // the steps go in submissions of `submit_steps()` each, so that recording the
        // next one (the CPU's part of a step) overlaps the GPU running this one; the
        // queue keeps them in order and the losses are read once, after the last
        let per = submit_steps(n);
        for first in (0..n).step_by(per as usize) {
            let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("nshade steps"),
            });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("nshade steps"),
                timestamp_writes: None,
            });
            for k in first..(first + per).min(n) {
                let off = [(k as u64 * RECORD) as u32];
                if step {
                    pass.set_pipeline(&self.step_pipe);
                    pass.set_bind_group(0, &self.step_bg, &off);
                    pass.dispatch_workgroups(self.launch.groups / self.private.unwrap_or(1), 1, 1);
                }
                if let Some((pipe, bg, layers)) = &self.dw_pass
                    && dw
                {
                    pass.set_pipeline(pipe);
                    pass.set_bind_group(0, bg, &off);
                    pass.dispatch_workgroups(self.launch.groups, *layers, 1);
                }
                if adam {
                    pass.set_pipeline(&self.adam_pipe);
                    pass.set_bind_group(0, &self.adam_bg, &off);
                    pass.dispatch_workgroups(self.adam_groups, 1, 1);
                }
                if let Some(g) = &self.grid_pass
                    && adam
                {
                    g.record(&mut pass, &off);
                }
            }
            drop(pass);
            queue.submit([enc.finish()]);
        }
        self.read(&self.losses, n as usize)
    }

    /// Copies the first `len` floats of `buf` back to the host (waits for the GPU).
    fn read(&self, buf: &wgpu::Buffer, len: usize) -> Result<Vec<f32>, TrainError> {
        let (device, queue) = (&self.ctx.device, &self.ctx.queue);
        let bytes = (len.max(1) * 4) as u64;
        let staging = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("readback"),
        });
        enc.copy_buffer_to_buffer(buf, 0, &staging, 0, bytes);
        let index = queue.submit([enc.finish()]);
        let slice = staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        // Only this trainer's work: other trainers sharing the device (a batch worker's
        // in-process jobs) keep their own submissions in flight.
        device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| backend_err(format!("waiting for the GPU: {e}")))?;
        rx.recv()
            .map_err(|e| backend_err(e.to_string()))?
            .map_err(|e| backend_err(format!("reading back: {e}")))?;
        let view = slice
            .get_mapped_range()
            .map_err(|e| backend_err(format!("reading back: {e:?}")))?;
        let out: Vec<f32> = bytemuck::cast_slice(&view)[..len].to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }

    /// The gradient of the mean loss over the batch of step `self.steps_done()` at the
    /// current weights, and that loss; the weights are not changed.
    pub fn gradient(&mut self) -> Result<(f32, Vec<f32>), TrainError> {
        let loss = self.submit(1, 1)?[0];
        let g = self.read(&self.grads, self.param_count)?;
        Ok((loss, g))
    }
}

impl Trainer for GpuTrainer {
    fn run(&mut self, steps: u32) -> Result<f32, TrainError> {
        let mut total = 0.0f64;
        let mut left = steps;
        while left > 0 {
            let n = left.min(MAX_STEPS_PER_SUBMIT);
            let losses = self.submit(n, 0)?;
            if let Some(k) = losses.iter().position(|l| !l.is_finite()) {
                let step = self.t + k as u32;
                self.t += n;
                return Err(TrainError::Diverged {
                    step,
                    loss: losses[k],
                });
            }
            total += losses.iter().map(|&l| l as f64).sum::<f64>();
            self.t += n;
            left -= n;
        }
        Ok((total / steps.max(1) as f64) as f32)
    }

    fn params(&mut self) -> Result<Vec<f32>, TrainError> {
        self.read(&self.params, self.param_count)
    }

    fn steps_done(&self) -> u32 {
        self.t
    }

    /// The precision path; `coop, subgroup-private kernel` where `NSHADE_GPU_PRIVATE=1`
    /// took effect (so a measurement says which kernel it timed).
    fn path(&self) -> String {
        if self.private.is_some() {
            format!("{}, subgroup-private kernel", GpuTrainer::path(self))
        } else {
            GpuTrainer::path(self).into()
        }
    }

    fn checkpoint(&mut self) -> Result<Checkpoint, TrainError> {
        self.check_checkpointable()?;
        let (n, d) = (self.param_count, self.dense_count);
        let params = self.read(&self.params, n)?;
        let mo = self.read(&self.moments, 2 * n)?;
        let (dense, tables) = mo.split_at(2 * d);
        let m = [&dense[..d], &tables[..n - d]].concat();
        let v = [&dense[d..], &tables[n - d..]].concat();
        Ok(Checkpoint {
            params,
            m,
            v,
            step: self.t,
        })
    }
}
