//! ShaderToy tabs rendered by capture (glslang built in, then naga's SPIR-V front end, or
//! the SPIR-V itself) against a reference: the same wrapped source (what capture compiled,
//! also written beside a dataset as `source.frag`) compiled by Debian's glslangValidator to
//! SPIR-V, checked by spirv-val, and run untouched on a separate device through wgpu's
//! SPIR-V passthrough. Both images go through the same display semantics before they are
//! compared. The tabs: nshade's own (examples, CLI test data) and the 54 public tabs of
//! `bench/shadertoy-corpus` (each with its licence in the manifest).
//!
//! Needs `glslangValidator` and `spirv-val` (Debian `glslang-tools`, `spirv-tools`) and an
//! adapter with `PASSTHROUGH_SHADERS` (lavapipe has it); without them the test says so
//! and skips (a failure under `CI=true`, where `.ci/run` installs them).

use nshade_gpu::capture::shadertoy::{self, Inputs};
use nshade_gpu::capture::{ShaderRenderer, ShaderSource, VERTEX_WGSL};
use nshade_gpu::context::context_or_skip;
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Tabs that add film grain hashed from the rendered colour (`color -= hash(color.xy +
/// uv) * .015` in 46_metahexaballs, scaled by its grading to at most 0.035), and the
/// largest difference that grain can make.
const GRAIN: &[(&str, f32)] = &[("46_metahexaballs", 0.035)];

const W: u32 = 48;
const H: u32 = 27;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The tabs of the corpus: nshade's ShaderToy examples, the CLI tests' tabs and the public
/// tabs of `bench/shadertoy-corpus/tabs`.
fn corpus() -> Vec<PathBuf> {
    let mut tabs = Vec::new();
    for dir in [
        "examples/shaders",
        "crates/cli/tests/data",
        "bench/shadertoy-corpus/tabs",
    ] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".glsl") && !name.starts_with("broken") {
                tabs.push(p);
            }
        }
    }
    tabs.sort();
    tabs
}

fn tool(name: &str) -> bool {
    Command::new(name).arg("--version").output().is_ok()
}

fn skip(why: &str) {
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "CI=true but {why}"
    );
    eprintln!("\n*** SKIPPING: {why} ***\n");
}

/// glslangValidator → SPIR-V words, validated by spirv-val.
fn glslang_spirv(wrapped: &str, dir: &Path, name: &str) -> Vec<u32> {
    let frag = dir.join(format!("{name}.frag"));
    let spv = dir.join(format!("{name}.spv"));
    std::fs::write(&frag, wrapped).unwrap();
    let o = Command::new("glslangValidator")
        .args(["-V", "--target-env", "vulkan1.0", "-S", "frag", "-o"])
        .arg(&spv)
        .arg(&frag)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "glslangValidator rejects the wrapped {name}:\n{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = Command::new("spirv-val").arg(&spv).output().unwrap();
    assert!(
        o.status.success(),
        "spirv-val: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::read(&spv)
        .unwrap()
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// A device with SPIR-V passthrough, or None.
fn passthrough_device() -> Option<(wgpu::Device, wgpu::Queue)> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
        apply_limit_buckets: false,
    }))
    .ok()?;
    if !adapter
        .features()
        .contains(wgpu::Features::PASSTHROUGH_SHADERS)
    {
        return None;
    }
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("shadertoy reference"),
        required_features: wgpu::Features::PASSTHROUGH_SHADERS,
        required_limits: adapter.limits(),
        experimental_features: wgpu::ExperimentalFeatures::disabled(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .ok()
}

/// Renders the SPIR-V fragment shader with the documented inputs at `parameter`: RGBA32F,
/// row 0 at the top, as capture's renderer does.
fn render_reference(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    spirv: &[u32],
    parameter: f32,
) -> Vec<f32> {
    let vs = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: None,
        source: wgpu::ShaderSource::Wgsl(Cow::Borrowed(VERTEX_WGSL)),
    });
    // SAFETY: the SPIR-V was produced by glslangValidator and accepted by spirv-val; its
    // only binding is the uniform block at set 0, binding 0, created below.
    let fs = unsafe {
        device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
            label: Some("glslang"),
            entry_points: Cow::Owned(vec![wgpu::PassthroughShaderEntryPoint {
                name: Cow::Borrowed("main"),
                workgroup_size: (0, 0, 0),
            }]),
            spirv: Some(Cow::Borrowed(spirv)),
            ..Default::default()
        })
    };
    let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &[wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::FRAGMENT,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Uniform,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }],
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(&bgl)],
        immediate_size: 0,
    });
    let format = wgpu::TextureFormat::Rgba32Float;
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: None,
        layout: Some(&layout),
        vertex: wgpu::VertexState {
            module: &vs,
            entry_point: Some("vs_main"),
            compilation_options: Default::default(),
            buffers: &[],
        },
        primitive: Default::default(),
        depth_stencil: None,
        multisample: Default::default(),
        fragment: Some(wgpu::FragmentState {
            module: &fs,
            entry_point: Some("main"),
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
    let uniform = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 256,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut bytes = vec![0u8; 256];
    bytes[..shadertoy::BLOCK_BYTES].copy_from_slice(&Inputs::new(W, H, parameter).to_bytes());
    queue.write_buffer(&uniform, 0, &bytes);
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &bgl,
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }],
    });
    let texture = device.create_texture(&wgpu::TextureDescriptor {
        label: None,
        size: wgpu::Extent3d {
            width: W,
            height: H,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let view = texture.create_view(&Default::default());
    let row = (W * 16).div_ceil(256) * 256;
    let read = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: (row * H) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: None,
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color::TRANSPARENT),
                    store: wgpu::StoreOp::Store,
                },
            })],
            depth_stencil_attachment: None,
            timestamp_writes: None,
            occlusion_query_set: None,
            multiview_mask: None,
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &group, &[]);
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
            buffer: &read,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(row),
                rows_per_image: Some(H),
            },
        },
        wgpu::Extent3d {
            width: W,
            height: H,
            depth_or_array_layers: 1,
        },
    );
    queue.submit([enc.finish()]);
    let slice = read.slice(..);
    slice.map_async(wgpu::MapMode::Read, |r| r.unwrap());
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let data = slice.get_mapped_range().unwrap();
    let mut out = Vec::with_capacity((W * H * 4) as usize);
    for y in 0..H as usize {
        out.extend(
            data[y * row as usize..][..W as usize * 16]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap())),
        );
    }
    out
}

#[test]
fn corpus_matches_glslang_on_the_same_wrapped_source() {
    let Some(ctx) = context_or_skip() else { return };
    if !tool("glslangValidator") || !tool("spirv-val") {
        skip("glslangValidator/spirv-val not installed");
        return;
    }
    let Some((device, queue)) = passthrough_device() else {
        skip("no adapter with SPIR-V passthrough");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let tabs = corpus();
    assert!(tabs.len() >= 59, "{} tabs: {tabs:?}", tabs.len());
    let mut failures = Vec::new();
    for path in &tabs {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let public = path.starts_with(repo().join("bench"));
        let source = ShaderSource::from_file(path).unwrap();
        let renderer = ShaderRenderer::new(&ctx, &source, W, H)
            .unwrap_or_else(|e| panic!("{name}: capture does not accept it: {e}"));
        let wrapped = renderer.wrapped().expect("a tab keeps its wrapped source");
        let spirv = glslang_spirv(wrapped, tmp.path(), &name);
        // ShaderToy's iTime is never negative; public tabs are checked where they run.
        let parameters: &[f32] = if public {
            &[0.35, 1.6]
        } else {
            &[-0.8, 0.35, 1.6]
        };
        for &parameter in parameters {
            let mut ours = renderer.render_rgba(parameter).unwrap();
            let mut reference = render_reference(&device, &queue, &spirv, parameter);
            // The reference drew something (not the cleared target).
            assert!(
                reference.iter().any(|&v| v != 0.0),
                "{name}: the reference image is empty"
            );
            shadertoy::apply_display(&mut ours);
            shadertoy::apply_display(&mut reference);
            // Two compilers, one driver: the same values up to float reassociation. A
            // pixel on a hard edge may flip; allow 1 in 200 pixels to differ, none by more
            // than the edge itself.
            let mut off = 0;
            let mut worst = 0f32;
            for (a, b) in ours.chunks_exact(4).zip(reference.chunks_exact(4)) {
                let d = (0..3).map(|c| (a[c] - b[c]).abs()).fold(0.0, f32::max);
                worst = worst.max(d);
                if d > 1e-4 {
                    off += 1;
                }
            }
            // A tab that hashes its own colour into film grain turns the last bit of a
            // float into up to its grain's amplitude: there, every pixel may differ, by at
            // most the grain (the same tab without its grain line matches to 2.4e-7).
            let grain = GRAIN.iter().find(|g| g.0 == name).map(|g| g.1);
            if let Some(amplitude) = grain {
                if worst.is_nan() || worst > amplitude {
                    failures.push(format!(
                        "{name} at iTime {parameter}: worst difference {worst} exceeds its grain's {amplitude}"
                    ));
                }
            } else if off * 200 > W * H {
                failures.push(format!(
                    "{name} at iTime {parameter}: {off} of {} pixels differ from glslang's (worst {worst})",
                    W * H
                ));
            }
            eprintln!("{name} at {parameter}: {off} pixels differ, worst {worst}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
