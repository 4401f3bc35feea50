//! The host side of the tiled compute forms (`nshade export --form coop-compute` /
//! `tiled-compute`), as a renderer's deferred neural pass would write it: load
//! `weights.json`, open a device with f16 (and cooperative matrices where the adapter has
//! them), generate the kernel for that device's workgroup memory, upload the parameter
//! buffer once, evaluate one input row per pixel centre of a W×H image in one dispatch,
//! read the outputs back and save them as a PNG.
//!
//! ```text
//! cargo run --release -p nshade-gpu --example infer_tiled -- MODEL OUT.png [WxH]
//! ```
//!
//! It takes `coop-compute` (tensor cores) where the adapter lists f16 × f16 → f32
//! cooperative matrices at 16×16×16, else `tiled-compute` (the same kernel with loop
//! products; lavapipe runs it), and prints which. Models with two inputs (u, v) and three
//! outputs (RGB), as `nshade fit` writes; inputs are pixel centres in [0, 1]², which the
//! kernel maps onto the model's input domain itself.

use nshade_core::model::Model;
use nshade_shader::{Form, Options, Target, WeightMode, coop};
use std::error::Error;
use std::path::PathBuf;

/// Evaluates `model` at the pixel centres of a `w`×`h` image with its tiled kernel on the
/// first high-performance adapter; returns the outputs (row-major pixels, `out_dims`
/// each) and the form that ran.
pub fn run(model: &Model, w: u32, h: u32) -> Result<(Vec<f32>, Form), Box<dyn Error>> {
    let (in_dims, out_dims) = (model.network.in_dims, model.network.out_dims);
    if in_dims != 2 {
        return Err(format!("the model takes {in_dims} inputs; this example feeds (u, v)").into());
    }

    // 1. A device with f16, and cooperative matrices where the adapter has them.
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
        apply_limit_buckets: false,
    }))?;
    if !adapter.features().contains(wgpu::Features::SHADER_F16) {
        return Err("the adapter has no f16 shader support (Features::SHADER_F16)".into());
    }
    let coop = adapter
        .features()
        .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && adapter.cooperative_matrix_properties().iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
                && p.ab_type == wgpu::CooperativeScalarType::F16
                && p.cr_type == wgpu::CooperativeScalarType::F32
        })
        && adapter.get_info().subgroup_max_size <= 32;
    let (form, features, experimental) = if coop {
        (
            Form::CoopCompute,
            wgpu::Features::SHADER_F16 | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
            // SAFETY: the kernel uses only the 16x16x16 f16 x f16 -> f32 shape checked above.
            unsafe { wgpu::ExperimentalFeatures::enabled() },
        )
    } else {
        (
            Form::TiledCompute,
            wgpu::Features::SHADER_F16,
            wgpu::ExperimentalFeatures::disabled(),
        )
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: None,
        required_features: features,
        required_limits: adapter.limits(),
        experimental_features: experimental,
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))?;

    // 2. The kernel for this device's workgroup memory, and its layout (TilePlan: rows per
    //    tile, workgroups to dispatch). The header of the WGSL documents the same.
    let opts = Options {
        form,
        weights: WeightMode::Buffer,
        workgroup_memory: device.limits().max_compute_workgroup_storage_size as usize,
        ..Options::new(Target::Wgsl)
    };
    let plan = coop::plan(model, opts.workgroup_memory)?;
    let wgsl = nshade_shader::export(model, &opts)?
        .into_text()
        .ok_or("WGSL is text")?;
    let params = nshade_shader::pack_weights(model, &opts);

    // 3. Buffers at the documented bindings: parameters @binding(0) (uploaded once; new
    //    weights of the same architecture are one write_buffer), inputs @binding(2) (rows
    //    of (u, v)), outputs @binding(3) (rows of out_dims f32).
    let n = (w * h) as usize;
    let mut inputs = Vec::with_capacity(2 * n);
    for y in 0..h {
        for x in 0..w {
            inputs.push((x as f32 + 0.5) / w as f32);
            inputs.push((y as f32 + 0.5) / h as f32);
        }
    }
    let buffer = |label, size: usize, usage| {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size as u64,
            usage,
            mapped_at_creation: false,
        })
    };
    use wgpu::BufferUsages as U;
    let param_buf = buffer(
        "nshade_params",
        params.len().next_multiple_of(4),
        U::STORAGE | U::COPY_DST,
    );
    let mut padded = params;
    padded.resize(padded.len().next_multiple_of(4), 0);
    queue.write_buffer(&param_buf, 0, &padded);
    let in_buf = buffer("nshade_inputs", inputs.len() * 4, U::STORAGE | U::COPY_DST);
    queue.write_buffer(&in_buf, 0, bytemuck::cast_slice(&inputs));
    let out_bytes = n * out_dims * 4;
    let out_buf = buffer("nshade_outputs", out_bytes, U::STORAGE | U::COPY_SRC);
    let read_buf = buffer("readback", out_bytes, U::MAP_READ | U::COPY_DST);

    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("nshade tiled"),
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("nshade tiled"),
        layout: None,
        module: &module,
        entry_point: Some("nshade_main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: param_buf.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: in_buf.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 3,
                resource: out_buf.as_entire_binding(),
            },
        ],
    });

    // 4. One dispatch: the plan's workgroups walk the tiles of rows.
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(plan.dispatch(n), 1, 1);
    }
    enc.copy_buffer_to_buffer(&out_buf, 0, &read_buf, 0, out_bytes as u64);
    queue.submit([enc.finish()]);
    let slice = read_buf.slice(..);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    device.poll(wgpu::PollType::wait_indefinitely())?;
    rx.recv()??;
    let out = bytemuck::cast_slice::<u8, f32>(&slice.get_mapped_range()?).to_vec();
    Ok((out, form))
}

#[allow(dead_code)] // the test includes this file for `run`
fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: infer_tiled MODEL OUT.png [WxH]".into());
    }
    let model = Model::load(&PathBuf::from(&args[1]))?;
    let out = PathBuf::from(&args[2]);
    let (w, h) = match args.get(3) {
        Some(s) => {
            let (w, h) = s.split_once('x').ok_or("size must be WxH")?;
            (w.parse::<u32>()?, h.parse::<u32>()?)
        }
        None => (512, 512),
    };
    if model.network.out_dims != 3 {
        return Err(format!(
            "the model has {} outputs; this example saves RGB",
            model.network.out_dims
        )
        .into());
    }
    let start = std::time::Instant::now();
    let (rgb, form) = run(&model, w, h)?;
    nshade_core::texture::write_image(w as usize, h as usize, &rgb, &out)?;
    eprintln!(
        "{}x{} evaluated with --form {form} in {:.1} ms (device, kernel and readback included); wrote {}",
        w,
        h,
        start.elapsed().as_secs_f64() * 1e3,
        out.display()
    );
    Ok(())
}
