//! GPU training of grid encodings (`hashgrid`, `densegrid`) against the CPU reference
//! (lavapipe in CI; small tables and batches). Dense parameters go through the usual
//! partial sums; table gradients through fixed-point integer atomics (see
//! `nshade_gpu::train::grid`).
//!
//! Tolerances: one step's gradient within 1e-4 · max |g_cpu| tensor by tensor (each
//! weight matrix, bias vector and grid level against its own scale, see
//! `common::assert_gradient_close`; NaN or ±∞ fails; measured on lavapipe: at most
//! 4.9e-7, the same margin as the f32 paths in train.rs), the loss within 1e-4 relative;
//! on the f16 path (`NSHADE_GPU_PATH=f16`, as tools/gpu_check.sh forces it) those of
//! f16_train.rs: 3e-2 per tensor, loss 1e-2, first steps 2 %, last steps 10 %; a 40-step run's last
//! steps within 5 % of the CPU's loss; the same seed twice gives identical weights.

mod common;
use common::same_bits;

use nshade_core::arch::Arch;
use nshade_core::cpu::CpuTrainer;
use nshade_core::data::{Rows, TrainingData};
use nshade_core::loss::Loss;
use nshade_core::network::Network;
use nshade_core::optim::Adam;
use nshade_core::texture::Texture;
use nshade_core::train::{TrainConfig, Trainer};
use nshade_gpu::train::codegen::Precision;
use nshade_gpu::train::{GpuBackend, precision_supported};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `fixed_point_accumulators_are_exact` runs alone, the other tests side by side: on an
/// H200 (driver 580.159.04) the five tests' devices created and used at once stalled the
/// process in 6 of 18 runs, the fixed-point test's driver thread busy and every other
/// test's thread waiting on a driver lock (more than 400 s once); that test alone (4 of
/// 4) and the other four together (4 of 4) never did (docs/PERFORMANCE.md, twentieth
/// session). A stall would end the run at the harness's time limit, not in an assertion.
static GPU_TURN: RwLock<()> = RwLock::new(());

/// A turn beside the other tests that share.
fn shared_turn() -> RwLockReadGuard<'static, ()> {
    GPU_TURN.read().unwrap_or_else(|e| e.into_inner())
}

/// A turn with no other test on the GPU.
fn exclusive_turn() -> RwLockWriteGuard<'static, ()> {
    GPU_TURN.write().unwrap_or_else(|e| e.into_inner())
}

fn texture() -> Arc<TrainingData> {
    let (w, h) = (41usize, 29usize);
    let mut data = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let (u, v) = (x as f32 / w as f32, y as f32 / h as f32);
            data.push(0.5 + 0.4 * (13.0 * u * v).sin());
            data.push(if (x / 3 + y / 5) % 2 == 0 { 0.9 } else { 0.1 });
            data.push(u * u);
        }
    }
    Arc::new(TrainingData::Texture(Texture::new(
        w,
        h,
        data,
        "grid test".into(),
        String::new(),
    )))
}

fn rows() -> Arc<TrainingData> {
    let mut data = Vec::new();
    for r in 0..611 {
        let x = (r % 29) as f32 / 14.0 - 1.0;
        let y = (r % 17) as f32 / 8.0 - 1.0;
        let t = (r % 7) as f32 / 3.0 - 1.0;
        data.extend([x, y, t, (x * 3.0 + t).sin(), y * y, 0.5 * x * y]);
    }
    Arc::new(TrainingData::Rows(Rows {
        in_dims: 3,
        out_dims: 3,
        data,
    }))
}

fn cfg(batch: usize, loss: Loss) -> TrainConfig {
    TrainConfig {
        batch,
        seed: 17,
        loss,
        ..TrainConfig::default()
    }
}

/// Parameters with tables far from zero, so the grid's outputs (and the mlp's
/// gradients) matter.
fn params(net: &Network) -> Vec<f32> {
    let mut p = net.init_params(3);
    for (k, v) in p.iter_mut().enumerate() {
        if k >= net.dense_count {
            *v = 0.3 * ((k * 7919 % 13) as f32 / 6.0 - 1.0);
        } else {
            *v += 0.01 * ((k % 7) as f32 - 3.0);
        }
    }
    p
}

#[test]
fn grid_gradients_match_cpu() {
    let _turn = shared_turn();
    let Some(ctx) = common::context() else { return };
    let backend = GpuBackend::with_context(Arc::new(ctx));
    let tex = texture();
    let cases: [(&str, Arc<TrainingData>, TrainConfig); 6] = [
        // 2-D: dense levels (res 4, 8) and hashed ones (16, 32 into 256 entries)
        (
            "hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2) | mlp(16x1, relu)",
            tex.clone(),
            cfg(700, Loss::RelativeL2),
        ),
        // a grid beside another encoding, an encoding between grid and mlp
        (
            "cat(densegrid(levels=2, features=3, base=3, scale=2), freq(1)) | mlp(8x1, tanh, sigmoid)",
            tex.clone(),
            cfg(300, Loss::L2),
        ),
        (
            "hashgrid(levels=2, features=2, log2_size=6, base=5, scale=2) | tri(1) | mlp(8x1, relu)",
            tex.clone(),
            cfg(300, Loss::L1),
        ),
        // a grid after an mlp: its input gradient flows back into the mlp
        (
            "mlp(8x1, tanh, out=2) | hashgrid(levels=3, features=2, log2_size=6, base=3, scale=2, min=-1, max=1) | mlp(8x1, relu)",
            tex.clone(),
            cfg(300, Loss::L2),
        ),
        (
            "mlp(6x1, sigmoid, out=3) | cat(densegrid(levels=2, features=1, base=2, scale=2), identity) | mlp(8x1, relu)",
            tex.clone(),
            cfg(300, Loss::RelativeL2),
        ),
        // 3-D rows over [-1, 1]: dense (3, 6) and hashed (12 into 512)
        (
            "hashgrid(levels=3, features=2, log2_size=9, base=3, scale=2, min=-1, max=1) | mlp(8x1, leaky_relu)",
            rows(),
            cfg(433, Loss::L2),
        ),
    ];
    let mut worst = 0.0f32;
    for (arch, data, c) in cases {
        let net =
            Network::build(&Arch::parse(arch).unwrap(), data.in_dims(), data.out_dims()).unwrap();
        let p = params(&net);
        let mut cpu = CpuTrainer::new(net.clone(), p.clone(), data.clone(), c.clone()).unwrap();
        let cpu_loss = cpu.gradient(0);
        let cpu_g = cpu.last_gradient().to_vec();
        let mut gpu = backend.trainer(&net, p, data, &c).unwrap();
        let (gpu_loss, gpu_g) = gpu.gradient().unwrap();
        let d = net.dense_count;
        for (what, range) in [("dense", 0..d), ("tables", d..net.param_count)] {
            let max = common::max_abs(arch, &cpu_g[range]);
            assert!(max > 0.0, "{arch}: the {what} gradient is zero");
        }
        let (tol, loss_tol) = if gpu.path() == "f32" {
            (1e-4, 1e-4)
        } else {
            (3e-2, 1e-2)
        };
        let what = format!("{arch} (path {})", gpu.path());
        let w = common::assert_gradient_close(&what, &net, &gpu_g, &cpu_g, tol, 1e-6);
        worst = worst.max(w);
        assert!(
            gpu_loss.is_finite() && (gpu_loss - cpu_loss).abs() <= loss_tol * cpu_loss.abs() + 1e-7,
            "{arch}: loss {gpu_loss} vs CPU {cpu_loss}"
        );
        // a second gradient at the same weights: the accumulators were cleared
        let (_, again) = gpu.gradient().unwrap();
        assert!(
            same_bits(&again, &gpu_g),
            "{arch}: a repeated gradient differs"
        );
    }
    eprintln!("grids: worst per-tensor max |Δg| / max |g_cpu| = {worst:.2e}");
}

#[test]
fn grid_run_reaches_the_cpu_loss_and_is_deterministic() {
    let _turn = shared_turn();
    let Some(ctx) = common::context() else { return };
    let ctx = Arc::new(ctx);
    run_matches_cpu(
        &GpuBackend::with_context(ctx.clone()),
        "hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2) | mlp(16x1, relu, sigmoid)",
        None,
    );
    // the cooperative-matrix path's GLSL kernel with packed lanes where the adapter
    // runs it (the H200), else the path it falls back to
    let glsl = nshade_gpu::train::precision_supported(&ctx, Precision::Coop)
        && ctx.has(wgpu::Features::PASSTHROUGH_SHADERS)
        && nshade_gpu::train::glsl_enabled();
    let wide = "hashgrid(levels=8, features=2, log2_size=12, base=8, scale=1.5) | mlp(32x2, relu, sigmoid)";
    let drops = run_matches_cpu(
        &GpuBackend::with_context(ctx.clone()).precision(Precision::Coop),
        wide,
        glsl.then_some("glsl"),
    );
    assert!(!glsl || drops.is_some(), "the GLSL kernel packs the lanes");
    // the f16 path's WGSL kernel with packed lanes (lavapipe has f16 and 64-bit atomics:
    // required in CI)
    let packs = precision_supported(&ctx, Precision::F16)
        && ctx.has(wgpu::Features::SHADER_INT64 | wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS);
    assert!(
        packs || std::env::var("CI").is_err(),
        "the CI adapter runs the f16 path with 64-bit atomics"
    );
    if packs {
        let drops = run_matches_cpu(
            &GpuBackend::with_context(ctx).precision(Precision::F16),
            wide,
            Some("wgsl"),
        );
        assert!(drops.is_some(), "the f16 path packs the lanes");
    } else {
        eprintln!("SKIPPED: packed lanes on the f16 path (no f16 or 64-bit atomics)");
    }
}

/// 40 steps of `arch` on the GPU against the CPU (first and last 5 steps' loss), the
/// tables trained, and the same seed twice gives the same weights bit for bit;
/// `language`: the step kernel that must run. With packed lanes no table update was
/// dropped; returns their count (`None`: exact sums).
fn run_matches_cpu(backend: &GpuBackend, arch: &str, language: Option<&str>) -> Option<u64> {
    let tex = texture();
    let c = TrainConfig {
        lr: nshade_core::optim::LrSchedule::constant(0.01),
        ..cfg(512, Loss::RelativeL2)
    };
    let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
    let p = net.init_params(5);
    let mut cpu = CpuTrainer::new(net.clone(), p.clone(), tex.clone(), c.clone()).unwrap();
    let cpu_first = cpu.run(5).unwrap();
    cpu.run(30).unwrap();
    let cpu_last = cpu.run(5).unwrap();
    let run = || {
        let mut g = backend.trainer(&net, p.clone(), tex.clone(), &c).unwrap();
        if let Some(lang) = language {
            assert_eq!(g.kernel_language(), lang, "{arch}: step kernel language");
        }
        let first = g.run(5).unwrap();
        g.run(30).unwrap();
        let last = g.run(5).unwrap();
        let drops = g.dropped_table_updates().unwrap();
        assert_eq!(drops.unwrap_or(0), 0, "{arch}: table updates dropped");
        (first, last, g.params().unwrap(), g.path() != "f32", drops)
    };
    let (first, last, p1, half, drops) = run();
    let (t_first, t_last) = if half { (2e-2, 0.1) } else { (1e-3, 0.05) };
    assert!(
        (first - cpu_first).abs() <= t_first * cpu_first,
        "{arch}: first steps: GPU {first} vs CPU {cpu_first}"
    );
    assert!(
        last < 0.9 * first,
        "{arch}: GPU loss did not fall: {first} → {last}"
    );
    assert!(
        (last - cpu_last).abs() <= t_last * cpu_last,
        "{arch}: after 40 steps: GPU {last} vs CPU {cpu_last}"
    );
    // the tables trained too
    let moved = p1[net.dense_count..]
        .iter()
        .zip(&p[net.dense_count..])
        .filter(|(a, b)| a != b)
        .count();
    assert!(
        moved > (net.param_count - net.dense_count) / 2,
        "{arch}: only {moved} table entries changed"
    );
    let (_, _, p2, _, _) = run();
    assert!(
        same_bits(&p1, &p2),
        "{arch}: same seed, same device: weights differ"
    );
    drops
}

/// The fixed-point accumulation itself: many contributions of both signs and of very
/// different magnitudes (carries and borrows between the words, truncation of tiny
/// values, clamping of huge ones) add up to exactly Σ trunc(v·2^48) in 64-bit two's
/// complement, whatever order the invocations run in.
#[test]
fn fixed_point_accumulators_are_exact() {
    let _turn = exclusive_turn();
    let Some(ctx) = common::context() else { return };
    // 32-bit pairs on every device; one 64-bit atomic where the device has them
    // (lavapipe does: required in CI)
    accumulate_exactly(&ctx, false);
    let wide = wgpu::Features::SHADER_INT64 | wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS;
    if ctx.device.features().contains(wide) {
        accumulate_exactly(&ctx, true);
    } else {
        assert!(
            std::env::var("CI").is_err(),
            "the CI adapter has no 64-bit atomics"
        );
        eprintln!("SKIPPED: 64-bit atomics (the adapter lacks SHADER_INT64_ATOMIC_ALL_OPS)");
    }
}

fn accumulate_exactly(ctx: &nshade_gpu::context::GpuContext, atomic64: bool) {
    use wgpu::util::DeviceExt;
    let net = Network::build(
        &Arch::parse(
            "hashgrid(levels=1, features=1, log2_size=4, base=2, scale=2) | mlp(2x0, none)",
        )
        .unwrap(),
        2,
        3,
    )
    .unwrap();
    const K: usize = 5;
    let mut rng = nshade_core::rng::Pcg32::new(21);
    let vals: Vec<f32> = (0..4099)
        .map(|i| {
            let mag = 10f32.powf(rng.next_f32() * 15.0 - 14.0); // 1e-14 .. 10
            let v = if rng.next_f32() < 0.5 { -mag } else { mag };
            match (i, i % 97) {
                // clamped to ±FIXED_RANGE, into the same accumulator: they cancel
                (0, _) => 1e6,
                (5, _) => -1e6,
                (_, 1) => -3e-16, // below the resolution: truncated to 0
                (_, 2) => 0.0,
                _ => v,
            }
        })
        .collect();
    let src = format!(
        "{}@group(0) @binding(7) var<storage, read> vals: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {{
    if (id.x < {n}u) {{ nsh_gacc_add(GRID_BASE + id.x % {K}u, vals[id.x]); }}
}}
",
        nshade_gpu::train::grid::step_decls_scaled(&net, false, atomic64),
        n = vals.len()
    );
    let device = &ctx.device;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("fixed point"),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    let acc = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("acc"),
        contents: &[0u8; 8 * K],
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
    });
    let input = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("vals"),
        contents: &vals
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("fixed point"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipe.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 6,
                resource: acc.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 7,
                resource: input.as_entire_binding(),
            },
        ],
    });
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 8 * K as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipe);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups((vals.len() as u32).div_ceil(64), 1, 1);
    }
    enc.copy_buffer_to_buffer(&acc, 0, &staging, 0, 8 * K as u64);
    ctx.queue.submit([enc.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let words: Vec<u32> = staging
        .slice(..)
        .get_mapped_range()
        .unwrap()
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let range = nshade_gpu::train::grid::FIXED_RANGE as f64;
    for k in 0..K {
        let want: i128 = vals
            .iter()
            .skip(k)
            .step_by(K)
            .map(|&v| {
                let q = ((v.abs() as f64).min(range) * 2f64.powi(48)).floor() as i128;
                if v < 0.0 { -q } else { q }
            })
            .sum();
        let got = ((words[2 * k + 1] as u64) << 32 | words[2 * k] as u64) as i64;
        assert!(want.abs() < 1i128 << 63, "the test's sums stay in range");
        assert_eq!(got as i128, want, "accumulator {k}, atomic64 {atomic64}");
    }
}

/// A grid of two levels of two features (packed lanes), and its packing.
fn packed_net() -> (Network, nshade_gpu::train::grid::Packing) {
    let net = Network::build(
        &Arch::parse(
            "hashgrid(levels=2, features=2, log2_size=4, base=2, scale=2) | mlp(2x0, none)",
        )
        .unwrap(),
        2,
        3,
    )
    .unwrap();
    let pad = nshade_gpu::train::codegen::Pad::of(&net);
    let pk = nshade_gpu::train::grid::Packing::of(&net, pad.partial_len(net.dense_count))
        .expect("two features pack");
    (net, pk)
}

/// A storage (or `usage`) buffer holding `words`.
fn words_buffer(
    ctx: &nshade_gpu::context::GpuContext,
    words: &[u32],
    usage: wgpu::BufferUsages,
) -> wgpu::Buffer {
    use wgpu::util::DeviceExt;
    ctx.device
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: None,
            contents: bytemuck::cast_slice(words),
            usage: usage | wgpu::BufferUsages::COPY_SRC,
        })
}

/// Runs `entry` of the WGSL `src` over `groups` workgroups with `buffers` at bindings
/// 0, 1, … of group 0, and waits.
fn dispatch(
    ctx: &nshade_gpu::context::GpuContext,
    src: &str,
    entry: &str,
    buffers: &[&wgpu::Buffer],
    groups: (u32, u32),
) {
    let device = &ctx.device;
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(entry),
        source: wgpu::ShaderSource::Wgsl(src.into()),
    });
    let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: None,
        module: &module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    });
    let entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry {
            binding: i as u32,
            resource: b.as_entire_binding(),
        })
        .collect();
    let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipe.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipe);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, 1);
    }
    ctx.queue.submit([enc.finish()]);
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
}

/// The first `n` words of `b`.
fn read_words(ctx: &nshade_gpu::context::GpuContext, b: &wgpu::Buffer, n: usize) -> Vec<u32> {
    let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4 * n as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = ctx.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(b, 0, &staging, 0, 4 * n as u64);
    ctx.queue.submit([enc.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    ctx.device
        .poll(wgpu::PollType::wait_indefinitely())
        .unwrap();
    bytemuck::cast_slice(&staging.slice(..).get_mapped_range().unwrap()).to_vec()
}

/// The loss-scale state with packed lanes: scale `scale` in both slots, the exponents
/// `k0` (parity 0) and `k1` (parity 1), the decisions `ov`, no drops.
fn packed_state(scale: f32, k0: &[i32], k1: &[i32], ov: &[u32]) -> Vec<u32> {
    let mut ls = vec![scale.to_bits(), 0, 0, 0, scale.to_bits(), 0, 0, 0];
    ls.extend(k0.iter().map(|&k| k as u32));
    ls.extend(k1.iter().map(|&k| k as u32));
    ls.extend(ov);
    ls.extend(std::iter::repeat_n(0, ov.len()));
    ls
}

/// Packed lanes (`grid::Packing`): the table Adam kernel decodes both signed 32-bit
/// lanes of every 64-bit word exactly — the low word as i32, the high word plus the
/// borrow of a negative low lane — and scales each by 2^−k of its grid output and the
/// inverse loss scale (mode 1 writes the gradient), then clears the word. Lanes at the
/// ends of the range, negative and positive, on every output's exponent.
#[test]
fn packed_lanes_decode_exactly() {
    let _turn = shared_turn();
    let Some(ctx) = common::context() else { return };
    let (net, pk) = packed_net();
    let t = net.param_count - net.dense_count;
    let pairs = t / 2;
    let mut rng = nshade_core::rng::Pcg32::new(5);
    let lane = |rng: &mut nshade_core::rng::Pcg32, m: usize| -> i32 {
        match m % 5 {
            0 => i32::MIN,
            1 => i32::MAX,
            2 => -1,
            _ => ((rng.next_f32() - 0.5) * 2e9) as i32,
        }
    };
    let lanes: Vec<(i32, i32)> = (0..pairs)
        .map(|m| (lane(&mut rng, m), lane(&mut rng, m + 2)))
        .collect();
    let ks: Vec<i32> = (0..pk.lf).map(|j| [-7, 0, 13, 40][j % 4]).collect();
    let scale = 8.0f32;
    // the accumulators: pair m's word at m (the second half unused)
    let mut acc = vec![0u32; 2 * t];
    for (m, &(c0, c1)) in lanes.iter().enumerate() {
        let w = ((c1 as i64) << 32).wrapping_add(c0 as i64) as u64;
        acc[2 * m] = w as u32;
        acc[2 * m + 1] = (w >> 32) as u32;
    }
    let ls = packed_state(scale, &ks, &ks, &vec![0; pk.lf]);
    assert_eq!(ls.len(), pk.state_words());
    let src = nshade_gpu::train::grid::adam_kernel_packed(&net, Adam::default(), 2, &pk);
    let st = wgpu::BufferUsages::STORAGE;
    // step 0 (parity 0), mode 1: the gradient
    let step = words_buffer(&ctx, &[0, 0, 0, 0, 1, 0, 0, 0], wgpu::BufferUsages::UNIFORM);
    let params = words_buffer(&ctx, &vec![0; net.param_count], st);
    let moments = words_buffer(&ctx, &vec![0; 2 * net.param_count], st);
    let gacc = words_buffer(&ctx, &acc, st);
    let grads = words_buffer(&ctx, &vec![0; net.param_count], st);
    let state = words_buffer(&ctx, &ls, st);
    let groups = nshade_gpu::train::grid::adam_groups(pairs, 2);
    dispatch(
        &ctx,
        &src,
        "nsh_grid_adam",
        &[&step, &params, &moments, &gacc, &grads, &state],
        groups,
    );
    let got = read_words(&ctx, &grads, net.param_count);
    let level_of = |i: usize| pk.starts.iter().rposition(|&s| i >= s).unwrap();
    for (m, &(c0, c1)) in lanes.iter().enumerate() {
        for (j, c) in [c0, c1].into_iter().enumerate() {
            let i = 2 * m + j;
            let l = level_of(i);
            let lf = l * pk.features + (i - pk.starts[l]) % pk.features;
            let want = c as f32 * 2f32.powi(-ks[lf]) * (1.0 / scale);
            let g = f32::from_bits(got[net.dense_count + i]);
            // i32 → f32 rounds to one of the two nearest values
            assert!(
                (g - want).abs() <= want.abs() * 1.2e-7,
                "parameter {i} (lanes {c0}, {c1}, output {lf}): {g} vs {want}"
            );
        }
    }
    assert!(
        read_words(&ctx, &gacc, 2 * t).iter().all(|&w| w == 0),
        "the accumulators were cleared"
    );
}

/// Packed lanes, the checks: the dense Adam kernel sums every grid output's |dy| over
/// the groups, flags the outputs with `A · 2^k > 2^29` and (mode 0) writes the next
/// step's exponents `27 − ⌈log2 A⌉` (unchanged where A is 0) into the other parity; the
/// table Adam kernel then leaves a flagged output's entries and moments alone and
/// updates the others.
#[test]
fn packed_lanes_check_their_range() {
    use nshade_gpu::train::codegen::{self, LossScale, Pad};
    let _turn = shared_turn();
    let Some(ctx) = common::context() else { return };
    let (net, pk) = packed_net();
    assert_eq!(pk.lf, 4);
    let pad = Pad::of(&net);
    let groups = 3u32;
    let ps = pad.partial_len(net.dense_count) + pk.lf;
    // A per output, split over the groups: 1000 (fits k 10), 1e6 (does not: 2^10 · 1e6
    // > 2^29), 0, 3
    let split: [[f32; 3]; 4] = [
        [400.0, 300.0, 300.0],
        [5e5, 2.5e5, 2.5e5],
        [0.0; 3],
        [1.0, 1.0, 1.0],
    ];
    let mut partial = vec![0u32; groups as usize * ps];
    for g in 0..groups as usize {
        for (o, a) in split.iter().enumerate() {
            partial[g * ps + pk.a_off + o] = a[g].to_bits();
        }
    }
    let k0 = [10, 10, 0, 20];
    let ls = packed_state(1.0, &k0, &[99; 4], &[7; 4]);
    let st = wgpu::BufferUsages::STORAGE;
    // step 0, mode 0 (Step: step, slot, step_lr, inv_c2, mode, poison)
    let step = words_buffer(
        &ctx,
        &[0, 0, 0.01f32.to_bits(), 1f32.to_bits(), 0, 0, 0, 0],
        wgpu::BufferUsages::UNIFORM,
    );
    let ones = vec![1f32.to_bits(); net.param_count];
    let params = words_buffer(&ctx, &ones, st);
    let moments = words_buffer(&ctx, &vec![0; 2 * net.param_count], st);
    let state = words_buffer(&ctx, &ls, st);
    let adam = codegen::adam_kernel_scaled(
        net.dense_count,
        groups,
        1024,
        3,
        Adam::default(),
        Some(&pad),
        None,
        Some(LossScale::for_batch(1024)),
        Some(&pk),
    );
    let npw = (net.dense_count as u32).div_ceil(codegen::adam_params());
    dispatch(
        &ctx,
        &adam,
        "nsh_adam",
        &[
            &step,
            &params,
            &moments,
            &words_buffer(&ctx, &partial, st),
            &words_buffer(&ctx, &vec![1f32.to_bits(); groups as usize], st),
            &words_buffer(&ctx, &[0; 4], st),
            &words_buffer(&ctx, &vec![0; net.param_count], st),
            &words_buffer(&ctx, &vec![0; pad.weights.div_ceil(2).max(1)], st),
            &state,
            &words_buffer(&ctx, &vec![0; groups as usize], st),
        ],
        (npw + 1, 1),
    );
    let got = read_words(&ctx, &state, pk.state_words());
    let w = |at: usize| got[at..at + pk.lf].to_vec();
    assert_eq!(w(pk.ov_word()), vec![0, 1, 0, 0], "the decisions");
    assert_eq!(
        w(pk.k_word(1)),
        [17i32, 7, 0, 25].map(|k| k as u32).to_vec(),
        "the next exponents"
    );
    assert_eq!(
        w(pk.k_word(0)),
        k0.map(|k| k as u32).to_vec(),
        "this step's"
    );
    assert_eq!(w(pk.drop_word()), vec![0, 1, 0, 0], "the drop counts");
    assert_eq!(got[3], 0, "no loss-scale overflow");
    // the table step: every pair has a gradient in both lanes
    let t = net.param_count - net.dense_count;
    let mut acc = vec![0u32; 2 * t];
    for m in 0..t / 2 {
        let word = ((3i64 << 32) + 5) as u64;
        acc[2 * m] = word as u32;
        acc[2 * m + 1] = (word >> 32) as u32;
    }
    dispatch(
        &ctx,
        &nshade_gpu::train::grid::adam_kernel_packed(&net, Adam::default(), 2, &pk),
        "nsh_grid_adam",
        &[
            &step,
            &params,
            &moments,
            &words_buffer(&ctx, &acc, st),
            &words_buffer(&ctx, &vec![0; net.param_count], st),
            &state,
        ],
        nshade_gpu::train::grid::adam_groups(t / 2, 2),
    );
    let p = read_words(&ctx, &params, net.param_count);
    let m = read_words(&ctx, &moments, 2 * net.param_count);
    for i in 0..t {
        let l = pk.starts.iter().rposition(|&s| i >= s).unwrap();
        let lf = l * pk.features + (i - pk.starts[l]) % pk.features;
        let moved = p[net.dense_count + i] != 1f32.to_bits();
        let m_set = m[2 * net.dense_count + i] != 0;
        assert_eq!(moved, lf != 1, "table parameter {i} (output {lf}) updated");
        assert_eq!(m_set, lf != 1, "table parameter {i} (output {lf}) moment");
    }
}
