//! The host side of the fastest tensor-core kernel, `nshade export --target glsl --form
//! coop-compute` (Vulkan; what `nshade eval`, `render` and `bench --inference` run on
//! NVIDIA), as a renderer's deferred neural pass would write it: load `weights.json`,
//! open a device with f16, cooperative matrices, SPIR-V passthrough and, where the
//! driver has them, NVIDIA's conversions between matrix uses; generate the GLSL kernel
//! for that device (with `--native-weights`' pack kernel where the weights do not fit
//! staged), compile both with glslang, upload the f16 parameter buffer once, run the
//! pack kernel once, evaluate one input row per pixel centre of a W×H image in one
//! dispatch, read the outputs back and save them as a PNG.
//!
//! ```text
//! cargo run --release -p nshade-gpu --example infer_glsl -- MODEL OUT.png [WxH]
//! ```
//!
//! The same kernels, written to files by `nshade export ... --target glsl --form
//! coop-compute --precision f16 --coop-conversions [--native-weights] -o net.comp
//! --weights-out net.bin`, document these bindings and dispatches in their headers; a
//! renderer compiles them offline (glslangValidator -V) and does steps 3 to 5 below.
//! Models with two inputs (u, v) and three outputs (RGB), as `nshade fit` writes.

use nshade_core::model::Model;
use nshade_gpu::context::GpuContext;
use nshade_shader::{Form, Options, Precision, Target, WeightMode, coop};
use std::error::Error;
use std::path::PathBuf;

/// Evaluates `model` at the pixel centres of a `w`×`h` image with its GLSL cooperative
/// matrix kernel on `ctx`; returns the outputs (row-major pixels, `out_dims` each) and
/// whether the weights came from the native buffer.
pub fn run(
    ctx: &GpuContext,
    model: &Model,
    w: u32,
    h: u32,
) -> Result<(Vec<f32>, bool), Box<dyn Error>> {
    let (in_dims, out_dims) = (model.network.in_dims, model.network.out_dims);
    if in_dims != 2 {
        return Err(format!("the model takes {in_dims} inputs; this example feeds (u, v)").into());
    }
    // 1. What the kernel needs of the device (GpuContext opened it with all of it that
    //    the adapter has).
    for (f, what) in [
        (wgpu::Features::SHADER_F16, "f16 shaders"),
        (
            wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
            "cooperative matrices",
        ),
        (wgpu::Features::PASSTHROUGH_SHADERS, "SPIR-V passthrough"),
    ] {
        if !ctx.has(f) {
            return Err(format!("the adapter {} has no {what}", ctx.summary.name).into());
        }
    }
    if ctx.summary.subgroup_size != [32, 32] {
        return Err("the kernel's subgroups are exactly 32 invocations".into());
    }

    // 2. The kernel for this device: f16 parameters, f16 accumulation in the hidden
    //    layers, the conversions where the driver has them, weights held where small and
    //    from the native buffer where they do not fit staged (what nshade's evaluator
    //    chooses); its layout (TilePlan) says how to dispatch it.
    let opts = coop::with_default_hold(
        model,
        Options {
            form: Form::CoopCompute,
            weights: WeightMode::Buffer,
            precision: Precision::F16,
            rows_acc16: true,
            rows_convert: ctx.summary.cooperative_matrix_conversions,
            workgroup_memory: ctx.summary.max_workgroup_storage as usize,
            ..Options::new(Target::Glsl)
        },
    );
    let native = coop::plan_for(model, &opts)
        .as_ref()
        .map_or(true, nshade_gpu::infer::native_by_default);
    let opts = Options {
        rows_native: native,
        ..opts
    };
    let plan = coop::plan_for(model, &opts)?;
    let compile = |src: &str| {
        nshade_gpu::capture::glslang::compile_compute(src)
            .map_err(|e| format!("glslang (line {:?}): {}", e.line, e.message))
    };
    let kernel = compile(
        &nshade_shader::export(model, &opts)?
            .into_text()
            .ok_or("GLSL is text")?,
    )?;
    let params = nshade_shader::pack_weights(model, &opts);

    // 3. Buffers at the documented bindings of set 0: parameters at 0 (f16, uploaded
    //    once), the native weights at 1 (written by the pack kernel; unused otherwise),
    //    inputs at 2 (rows of (u, v)), outputs at 3 (rows of out_dims f32).
    let (device, queue) = (&ctx.device, &ctx.queue);
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
            size: size.next_multiple_of(4).max(16) as u64,
            usage,
            mapped_at_creation: false,
        })
    };
    use wgpu::BufferUsages as U;
    let param_buf = buffer("nshade_params", params.len(), U::STORAGE | U::COPY_DST);
    let mut padded = params;
    padded.resize(padded.len().next_multiple_of(4), 0);
    queue.write_buffer(&param_buf, 0, &padded);
    // (the pack kernel and its matrices where the weights are native)
    let pack = if native {
        Some(coop::pack_kernel(model, &opts)?)
    } else {
        None
    };
    let matrices = pack.as_ref().map_or(0, |(_, t)| *t);
    let wnat = buffer(
        "nshade_wnat",
        (matrices + 1) * 512,
        U::STORAGE | U::COPY_SRC,
    );
    let report = buffer("report", 16, U::MAP_READ | U::COPY_DST);
    let in_buf = buffer("nshade_inputs", inputs.len() * 4, U::STORAGE | U::COPY_DST);
    queue.write_buffer(&in_buf, 0, bytemuck::cast_slice(&inputs));
    let out_bytes = n * out_dims * 4;
    let out_buf = buffer("nshade_outputs", out_bytes, U::STORAGE | U::COPY_SRC);
    let read_buf = buffer("readback", out_bytes, U::MAP_READ | U::COPY_DST);

    // Passthrough SPIR-V carries no reflection: explicit layouts, bindings numbered as
    // the kernels declare them.
    let pipeline = |words: &[u32], workgroup: u32, entries: &[(u32, bool)]| {
        let desc = wgpu::ShaderModuleDescriptorPassthrough {
            label: Some("nshade glsl"),
            entry_points: vec![wgpu::PassthroughShaderEntryPoint {
                name: "main".into(),
                workgroup_size: (workgroup, 1, 1),
            }]
            .into(),
            spirv: Some(words.into()),
            ..Default::default()
        };
        // SAFETY: glslang's SPIR-V of nshade's generated kernels, whose bindings are the
        // layout below and whose accesses stay inside the buffers their headers ask for.
        let module = unsafe { device.create_shader_module_passthrough(desc) };
        let entries: Vec<wgpu::BindGroupLayoutEntry> = entries
            .iter()
            .map(|&(binding, read_only)| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &entries,
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: Some(&pl),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        (layout, pipe)
    };
    let bind = |layout: &wgpu::BindGroupLayout, bufs: &[&wgpu::Buffer]| {
        let entries: Vec<wgpu::BindGroupEntry> = bufs
            .iter()
            .enumerate()
            .map(|(k, b)| wgpu::BindGroupEntry {
                binding: k as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout,
            entries: &entries,
        })
    };
    let (layout, main) = pipeline(
        &kernel,
        plan.workgroup_size as u32,
        &[(0, true), (1, true), (2, true), (3, false)],
    );
    let main_group = bind(&layout, &[&param_buf, &wnat, &in_buf, &out_buf]);

    // 4. Once per set of weights: the pack kernel writes the native buffer (one
    //    workgroup of 32 per 16 x 16 matrix); it also writes the elements per lane,
    //    which must be 8 (else the layout is not the one the kernel reads).
    let mut enc = device.create_command_encoder(&Default::default());
    if let Some((src, total)) = &pack {
        let total = *total;
        let (pack_layout, pack) = pipeline(&compile(src)?, 32, &[(0, true), (1, false)]);
        let pack_group = bind(&pack_layout, &[&param_buf, &wnat]);
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pack);
        pass.set_bind_group(0, &pack_group, &[]);
        pass.dispatch_workgroups(total as u32, 1, 1);
        drop(pass);
        enc.copy_buffer_to_buffer(&wnat, (total * 512) as u64, &report, 0, 16);
    }

    // 5. One dispatch: workgroups walk the tiles of rows; where the multiprocessors are
    //    known, as many as the header says per multiprocessor.
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&main);
        pass.set_bind_group(0, &main_group, &[]);
        let groups = plan.max_dispatch_on(ctx.summary.multiprocessors.map(|m| m as usize));
        pass.dispatch_workgroups(plan.dispatch_capped(n, groups), 1, 1);
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
    let out = bytemuck::cast_slice::<u8, f32>(&slice.get_mapped_range()?)[..n * out_dims].to_vec();
    if native {
        let slice = report.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        device.poll(wgpu::PollType::wait_indefinitely())?;
        let per_lane = bytemuck::cast_slice::<u8, u32>(&slice.get_mapped_range()?)[0];
        if per_lane != 8 {
            return Err(format!(
                "this device's 16x16 f16 B matrices hold {per_lane} elements per lane; the native layout needs 8 (export without --native-weights)"
            )
            .into());
        }
    }
    Ok((out, native))
}

#[allow(dead_code)] // the test includes this file for `run`
fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: infer_glsl MODEL OUT.png [WxH]".into());
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
    let ctx = GpuContext::new()?;
    let (rgb, native) = run(&ctx, &model, w, h)?;
    nshade_core::texture::write_image(w as usize, h as usize, &rgb, &out)?;
    eprintln!(
        "{}x{} evaluated on {} with the GLSL coop-compute kernel{} in {:.1} ms (device, kernels and readback included); wrote {}",
        w,
        h,
        ctx.summary.name,
        if native { " (native weights)" } else { "" },
        start.elapsed().as_secs_f64() * 1e3,
        out.display()
    );
    Ok(())
}
