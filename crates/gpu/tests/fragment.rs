//! The generated full-screen pass (`--fragment`: vertex + fragment entry points) drawn
//! with wgpu into a float target matches the CPU evaluation at every pixel centre, with
//! v pointing down and (x, y) spanning the input domains for 3-input models.

mod common;

use common::models;
use nshade_core::model::Model;
use nshade_core::texture::Texture;
use nshade_gpu::context::GpuContext;
use nshade_shader::{Options, Target, WeightMode, export, pack_weights};

const W: u32 = 40;
const H: u32 = 24;

/// Draws the model's full-screen pass at W×H (view.t = `t`) and reads back RGB.
fn draw(ctx: &GpuContext, model: &Model, weights: WeightMode, t: f32) -> Vec<f32> {
    let device = &ctx.device;
    let opts = Options {
        weights,
        fragment: true,
        ..Options::new(Target::Wgsl)
    };
    let wgsl = export(model, &opts).unwrap().into_text().unwrap();
    let mut params = pack_weights(model, &opts);
    params.resize(params.len().next_multiple_of(4), 0);
    let storage = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: params.len() as u64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    ctx.queue.write_buffer(&storage, 0, &params);
    let view = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    ctx.queue.write_buffer(
        &view,
        0,
        bytemuck::cast_slice(&[W as f32, H as f32, t, 0.0]),
    );
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    // Automatic layout: baked shaders have no parameter binding.
    let format = wgpu::TextureFormat::Rgba32Float;
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: None,
        layout: None,
        vertex: wgpu::VertexState {
            module: &module,
            entry_point: Some("nshade_vs"),
            compilation_options: Default::default(),
            buffers: &[],
        },
        primitive: Default::default(),
        depth_stencil: None,
        multisample: Default::default(),
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
    let mut entries = vec![wgpu::BindGroupEntry {
        binding: 1,
        resource: view.as_entire_binding(),
    }];
    if weights == WeightMode::Buffer {
        entries.push(wgpu::BindGroupEntry {
            binding: 0,
            resource: storage.as_entire_binding(),
        });
    }
    let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let size = wgpu::Extent3d {
        width: W,
        height: H,
        depth_or_array_layers: 1,
    };
    let texture = device.create_texture(&wgpu::TextureDescriptor {
        label: None,
        size,
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let row = (W * 16).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (row * H) as u64,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let target = texture.create_view(&Default::default());
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
        pass.set_bind_group(0, &bg, &[]);
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
                bytes_per_row: Some(row),
                rows_per_image: Some(H),
            },
        },
        size,
    );
    ctx.queue.submit([enc.finish()]);
    readback
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let data = readback.slice(..).get_mapped_range().unwrap();
    let mut rgb = Vec::new();
    for r in data.chunks_exact(row as usize) {
        let px: &[f32] = bytemuck::cast_slice(&r[..(W * 16) as usize]);
        for p in px.chunks_exact(4) {
            rgb.extend_from_slice(&p[..3]);
        }
    }
    rgb
}

#[test]
fn fullscreen_pass_matches_cpu_at_pixel_centres() {
    let Some(ctx) = common::context() else { return };
    for (name, model) in models::all() {
        if !models::can_fragment(&model) {
            continue;
        }
        let t = 0.375;
        // The model inputs of each pixel centre, as `nshade render` computes them.
        let uv = Texture::pixel_centres(W as usize, H as usize);
        let x: Vec<f32> = if model.network.in_dims == 2 {
            uv
        } else {
            uv.chunks_exact(2)
                .flat_map(|p| {
                    let d = &model.inputs.domain;
                    [
                        d[0][0] + (d[0][1] - d[0][0]) * p[0],
                        d[1][0] + (d[1][1] - d[1][0]) * p[1],
                        t,
                    ]
                })
                .collect()
        };
        let cpu = model.eval(&x);
        for weights in [WeightMode::Buffer, WeightMode::Baked] {
            let gpu = draw(&ctx, &model, weights, t);
            // value k is channel k % 3 of pixel k / 3 (rows from the top)
            common::assert_close(&format!("{name} {weights:?}"), &gpu, &cpu, 1e-5);
        }
    }
}
