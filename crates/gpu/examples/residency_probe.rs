//! How many workgroups of a given workgroup-memory size a multiprocessor holds at once on
//! this adapter: the budget the GLSL step kernel's launch rules assume
//! (`codegen::glsl_samples`, `codegen::compact_shape`). Each workgroup fills its
//! `shared float s[N]`, runs a dependent chain of FMAs of fixed length and reads s back;
//! `mps · k` workgroups are dispatched for k = 1, 2, 3, 4, 6, 8, and the time of each
//! dispatch against k = 1 shows the residency r: about ⌈k / r⌉ (the chain keeps an
//! invocation's issue slot a quarter busy, so up to 16 subgroups a multiprocessor run
//! side by side before the chains themselves contend).
//!
//! ```text
//! cargo run --release -p nshade-gpu --example residency_probe
//! MPS=132 ITERS=100000 THREADS="128" SIZES="16384 24576 32768" cargo run ...
//! ```
//!
//! On an NVIDIA H100 (driver 580.159.04) workgroups of 128 invocations were resident
//! three at a time with 16 KiB each, two with 20–24 KiB, one with 32 KiB or more
//! (docs/PERFORMANCE.md, thirtieth session).

use std::error::Error;

/// The probe kernel: `threads` invocations, `bytes` of workgroup memory, `iters` FMAs a
/// chain. Binding 0: one float read (so the chain is not folded) and a store no input
/// reaches (so the chain is not dropped).
pub fn kernel(threads: u32, bytes: usize, iters: u32) -> String {
    let words = (bytes / 4).max(1);
    format!(
        "#version 450
layout(local_size_x = {threads}) in;
layout(set = 0, binding = 0) buffer O {{ float o[]; }};
shared float s[{words}];
void main() {{
    uint lid = gl_LocalInvocationIndex;
    for (uint e = lid; e < {words}u; e += {threads}u) {{ s[e] = float(e & 7u) * 0.125; }}
    barrier();
    float a = s[(lid * 31u) % {words}u] + 1.0;
    float b = o[0] * 1e-30 + 0.999999;
    for (uint i = 0u; i < {iters}u; i++) {{ a = fma(a, b, 1e-7); }}
    barrier();
    a += s[(lid * 17u + 5u) % {words}u];
    if (a == 12345.678) {{ o[1u + gl_WorkGroupID.x % 1024u] = a; }}
}}
"
    )
}

/// Workgroups a multiprocessor, as multiples of the multiprocessor count, that the probe
/// dispatches.
pub const LOADS: [u32; 6] = [1, 2, 3, 4, 6, 8];

/// One probed shape: microseconds a dispatch of `mps · k` workgroups for each of
/// [`LOADS`].
pub struct Row {
    pub threads: u32,
    pub bytes: usize,
    pub micros: Vec<f64>,
}

impl Row {
    /// The residency the times show: the largest k of [`LOADS`] whose dispatch took less
    /// than 1.5 times k = 1's.
    pub fn resident(&self) -> u32 {
        LOADS
            .iter()
            .zip(&self.micros)
            .filter(|(_, t)| **t < 1.5 * self.micros[0])
            .map(|(k, _)| *k)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(all(
    feature = "glslang",
    not(any(target_vendor = "apple", target_arch = "wasm32"))
))]
pub fn run(
    mps: u32,
    iters: u32,
    threads: &[u32],
    sizes: &[usize],
    reps: u32,
) -> Result<(String, Vec<Row>), Box<dyn Error>> {
    use wgpu::util::DeviceExt;
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
        apply_limit_buckets: false,
    }))?;
    if !adapter
        .features()
        .contains(wgpu::Features::PASSTHROUGH_SHADERS)
    {
        return Err("the adapter lacks SPIR-V passthrough".into());
    }
    let desc = wgpu::DeviceDescriptor {
        label: Some("residency probe"),
        required_features: wgpu::Features::PASSTHROUGH_SHADERS,
        required_limits: adapter.limits(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc))?;
    let max = device.limits().max_compute_workgroup_storage_size as usize;
    let buf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("residency probe"),
        contents: bytemuck::cast_slice(&[0f32; 1025]),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("residency probe"),
        entries: &[wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }],
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("residency probe"),
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("residency probe"),
        layout: &bgl,
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: buf.as_entire_binding(),
        }],
    });
    let mut rows = Vec::new();
    for &t in threads {
        for &bytes in sizes.iter().filter(|&&b| b <= max) {
            let words = nshade_gpu::capture::glslang::compile_compute(&kernel(t, bytes, iters))
                .map_err(|e| format!("line {:?}: {}", e.line, e.message))?;
            // SAFETY: glslang's SPIR-V of `kernel`: binding 0 read at 0 and written at
            // 1..=1024 of its 1025 floats; workgroup memory within the adapter's limit
            let module = unsafe {
                device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                    label: Some("residency probe"),
                    entry_points: vec![wgpu::PassthroughShaderEntryPoint {
                        name: "main".into(),
                        workgroup_size: (t, 1, 1),
                    }]
                    .into(),
                    spirv: Some(words.into()),
                    ..Default::default()
                })
            };
            let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("residency probe"),
                layout: Some(&layout),
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &[],
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
            let time = |groups: u32, reps: u32| -> Result<f64, Box<dyn Error>> {
                let mut enc = device.create_command_encoder(&Default::default());
                {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    pass.set_pipeline(&pipe);
                    pass.set_bind_group(0, &bg, &[]);
                    for _ in 0..reps {
                        pass.dispatch_workgroups(groups, 1, 1);
                    }
                }
                let t0 = std::time::Instant::now();
                queue.submit([enc.finish()]);
                device.poll(wgpu::PollType::wait_indefinitely())?;
                Ok(t0.elapsed().as_secs_f64() / reps as f64 * 1e6)
            };
            time(mps, 1)?;
            let micros = LOADS
                .iter()
                .map(|&k| time(mps * k, reps))
                .collect::<Result<Vec<_>, _>>()?;
            rows.push(Row {
                threads: t,
                bytes,
                micros,
            });
        }
    }
    Ok((adapter.get_info().name, rows))
}

/// Stand-in where there is no glslang or no Vulkan.
#[cfg(not(all(
    feature = "glslang",
    not(any(target_vendor = "apple", target_arch = "wasm32"))
)))]
pub fn run(
    _: u32,
    _: u32,
    _: &[u32],
    _: &[usize],
    _: u32,
) -> Result<(String, Vec<Row>), Box<dyn Error>> {
    Err("the probe needs glslang and Vulkan".into())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn Error>> {
    let list = |key: &str, default: &str| -> Result<Vec<usize>, Box<dyn Error>> {
        let v = std::env::var(key).unwrap_or_else(|_| default.into());
        v.split_whitespace()
            .map(|s| s.parse().map_err(|e| format!("{key}: {s}: {e}").into()))
            .collect()
    };
    let one = |key: &str, default: u32| -> Result<u32, Box<dyn Error>> {
        match std::env::var(key) {
            Ok(v) => Ok(v.parse().map_err(|e| format!("{key}: {v}: {e}"))?),
            Err(_) => Ok(default),
        }
    };
    // the H100's and H200's 132 multiprocessors
    let mps = one("MPS", 132)?;
    let iters = one("ITERS", 100_000)?;
    let threads: Vec<u32> = list("THREADS", "128 256")?
        .into_iter()
        .map(|t| t as u32)
        .collect();
    let sizes = list("SIZES", "4 8192 16384 20480 24576 32768 40960 49152")?;
    let (name, rows) = run(mps, iters, &threads, &sizes, 5)?;
    println!("adapter: {name}, {mps} multiprocessors assumed");
    for r in rows {
        let ratios: Vec<String> = LOADS
            .iter()
            .zip(&r.micros)
            .skip(1)
            .map(|(k, t)| format!("k={k} {:.2}x", t / r.micros[0]))
            .collect();
        println!(
            "{:>4} invocations {:>6} B: k=1 {:>8.1} us; {}; resident {}",
            r.threads,
            r.bytes,
            r.micros[0],
            ratios.join(" "),
            r.resident()
        );
    }
    Ok(())
}
