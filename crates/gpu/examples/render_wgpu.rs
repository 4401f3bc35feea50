//! The host side of an exported model, as a renderer would write it: load `weights.json`,
//! generate the buffer-mode WGSL with its full-screen pass, upload the parameter buffer
//! and the view uniform, draw one triangle with wgpu and save the picture as a PNG.
//!
//! ```text
//! cargo run -p nshade-gpu --example render_wgpu -- MODEL OUT.png [WxH] [t]
//! ```
//!
//! Swapping in other weights of the same architecture is one `queue.write_buffer` of the
//! new `pack_weights` bytes: the shader does not change.

use nshade_core::model::Model;
use nshade_shader::{Options, Target, WeightMode};
use std::error::Error;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: render_wgpu MODEL OUT.png [WxH] [t]".into());
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
    let t: f32 = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(0.0);

    // 1. The shader and its parameter buffer, from the model file.
    let opts = Options {
        weights: WeightMode::Buffer,
        fragment: true,
        ..Options::new(Target::Wgsl)
    };
    let wgsl = nshade_shader::export(&model, &opts)?
        .into_text()
        .ok_or("WGSL is text")?;
    let params = nshade_shader::pack_weights(&model, &opts);

    // 2. A device (any adapter; lavapipe works).
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
        apply_limit_buckets: false,
    }))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: None,
        required_features: wgpu::Features::empty(),
        required_limits: wgpu::Limits::default(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))?;

    // 3. Resources at the bindings the shader's header documents: the parameter buffer at
    //    @binding(0), the view uniform { size: vec2<f32>, t: f32 } at @binding(1).
    let usage = wgpu::BufferUsages::COPY_DST;
    let param_buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("nshade_params"),
        size: params.len().next_multiple_of(4) as u64,
        usage: usage | wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    });
    let mut padded = params.clone();
    padded.resize(params.len().next_multiple_of(4), 0);
    queue.write_buffer(&param_buf, 0, &padded);
    let view: [f32; 4] = [w as f32, h as f32, t, 0.0];
    let view_buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("nshade_view"),
        size: 16,
        usage: usage | wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: false,
    });
    queue.write_buffer(&view_buf, 0, bytemuck::cast_slice(&view));

    let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::FRAGMENT,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &[
            entry(0, wgpu::BufferBindingType::Storage { read_only: true }),
            entry(1, wgpu::BufferBindingType::Uniform),
        ],
    });
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &bgl,
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: param_buf.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: view_buf.as_entire_binding(),
            },
        ],
    });

    // 4. The pipeline: the generated vertex and fragment entry points.
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("nshade"),
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    // Unorm, not sRGB: the model outputs the values stored in the training image.
    let format = wgpu::TextureFormat::Rgba8Unorm;
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("nshade"),
        layout: Some(&layout),
        vertex: wgpu::VertexState {
            module: &module,
            entry_point: Some("nshade_vs"),
            compilation_options: Default::default(),
            buffers: &[],
        },
        primitive: wgpu::PrimitiveState::default(),
        depth_stencil: None,
        multisample: wgpu::MultisampleState::default(),
        fragment: Some(wgpu::FragmentState {
            module: &module,
            entry_point: Some("nshade_fs"),
            compilation_options: Default::default(),
            targets: &[Some(wgpu::ColorTargetState {
                format,
                blend: None,
                write_mask: wgpu::ColorWrites::ALL,
            })],
        }),
        multiview_mask: None,
        cache: None,
    });

    // 5. Draw three vertices into a texture and read it back.
    let texture = device.create_texture(&wgpu::TextureDescriptor {
        label: None,
        size: wgpu::Extent3d {
            width: w,
            height: h,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let target = texture.create_view(&Default::default());
    let row_bytes = (w * 4).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (row_bytes * h) as u64,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: None,
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &target,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                    store: wgpu::StoreOp::Store,
                },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.draw(0..3, 0..1);
    }
    enc.copy_texture_to_buffer(
        wgpu::TexelCopyTextureInfo {
            texture: &texture,
            mip_level: 0,
            origin: wgpu::Origin3d::ZERO,
            aspect: wgpu::TextureAspect::All,
        },
        wgpu::TexelCopyBufferInfo {
            buffer: &readback,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(row_bytes),
                rows_per_image: Some(h),
            },
        },
        wgpu::Extent3d {
            width: w,
            height: h,
            depth_or_array_layers: 1,
        },
    );
    queue.submit([enc.finish()]);
    readback
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.expect("readback"));
    device.poll(wgpu::PollType::wait_indefinitely())?;
    let data = readback.slice(..).get_mapped_range()?;
    let mut rgb = Vec::with_capacity((w * h * 3) as usize);
    for row in data.chunks_exact(row_bytes as usize) {
        for px in row[..(w * 4) as usize].chunks_exact(4) {
            rgb.extend(px[..3].iter().map(|&c| c as f32 / 255.0));
        }
    }
    nshade_core::texture::write_image(w as usize, h as usize, &rgb, &out)?;
    println!(
        "wrote {} ({w}x{h}) on {}",
        out.display(),
        adapter.get_info().name
    );
    Ok(())
}
