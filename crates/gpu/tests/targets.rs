//! Every export target executed on the GPU (lavapipe in CI), not only compiled.
//!
//! GLSL 450, GLSL ES 3.00, the ShaderToy tab, HLSL and Slang are compiled to SPIR-V by
//! the real compilers — glslangValidator (`-V`), glslang's HLSL front end (`-D -V -e
//! main`), Slang's compiler library through `crates/shader/tests/slangc.py` (every Slang
//! compile of the test in one Python process) — loaded unchanged (SPIR-V passthrough)
//! and run over 1000 input rows of every fixed model of the shader tests (which
//! together use every activation and every encoding) with buffer weights (straight-line
//! and loops), and with baked weights (the grid models replaced by small grids, see
//! [`SMALL_GRIDS`]), against `Model::eval`: |gpu − cpu| ≤ 1e-5 · max(1, |cpu|). WGSL
//! and naga's SPIR-V run in `infer.rs` and `fragment.rs`.
//!
//! The harness around each exported function is a compute entry point that reads rows of
//! raw inputs (binding 2), calls `nshade_eval` and writes rows of outputs (binding 3);
//! the parameter buffer is binding 0 as the exported headers document. The GLSL exports
//! are snippets for a `#version 450` / `#version 300 es` shader; GLSL ES 3.00 has no
//! compute shaders and Vulkan needs ES 3.10, so the ES snippet (unchanged) goes below
//! `#version 310 es` and `precision highp float;`; its uniform block of weights gets
//! binding 0 from `--auto-map-bindings` (what `glUniformBlockBinding` does in WebGL). The ShaderToy tab runs as ShaderToy runs it:
//! `mainImage(out vec4, in vec2 fragCoord)` with `iResolution` and `iTime` defined by the
//! harness, fragCoord at pixel centres with y up, at two values of iTime, compared with
//! the model at the (u, v) (and t) the tab documents — so its orientation, uv mapping
//! and t sweep are checked numerically.
//!
//! MSL cannot be compiled here (no Metal compiler): naga translates it from WGSL that
//! it validated first. One test checks that the text is complete (the function with its
//! documented signature, the parameter argument in buffer mode, the entry points,
//! balanced brackets) for every model and option; another runs it: MSL is C++14 with
//! address-space qualifiers, so the f32 function compiles as C++ (g++, with a stub of
//! the few `metal::` types and functions it uses and `-fsingle-precision-constant`, as
//! Metal's unsuffixed literals are float) and runs on the CPU against `Model::eval`
//! with the same bound, baked and buffer weights.
//!
//! Measured on lavapipe (Mesa 22.3, 2 shared cores, no shader cache): largest relative
//! error 4.4e-7 for GLSL 450, GLSL ES, HLSL and Slang (29 programs each), 3.6e-7 for the
//! ShaderToy tab (8 models, 2 frames), 3.9e-7 for MSL as C++ (30 programs); the whole
//! binary in about 60 s. Each test prints its figures (`--nocapture`).

mod common;

use common::models;
use nshade_core::model::Model;
use nshade_gpu::context::GpuContext;
use nshade_shader::{Options, Precision, Target, WeightMode, export, pack_weights};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Input rows per model.
const ROWS: usize = 1000;
/// |gpu − cpu| ≤ TOL · max(1, |cpu|).
const TOL: f32 = 1e-5;
/// The ShaderToy image size (pixels) and the iTime values of the two frames.
const W: usize = 24;
const H: usize = 16;
const TIMES: [f32; 2] = [2.0, 12.0];

/// Small grids for the baked-weight runs: glslang indexes a baked table (a constant
/// array) by copying the whole array into a new local array at every lookup (the
/// densegrid model's 174-entry table: 24 copies), which lavapipe's LLVM compiles for
/// minutes (densegrid's HLSL: 326 s, correct to 2e-8; Slang's output is as slow); tables
/// of a few entries compile in a second or less. A 2-D
/// model with a dense and a hashed level, and a 3-D hashed one.
const SMALL_GRIDS: &[(&str, &str, usize)] = &[
    (
        "small_grid2",
        "cat(densegrid(levels=1, features=2, base=2, scale=2), hashgrid(levels=1, features=1, log2_size=4, base=8, scale=2)) | mlp(4x1, relu, sigmoid)",
        2,
    ),
    (
        "small_grid3",
        "cat(hashgrid(levels=1, features=1, log2_size=4, base=3, scale=2, min=-1, max=1), identity) | mlp(4x1, tanh)",
        3,
    ),
];

/// The models run with `weights`: every fixed model of the shader tests; for baked
/// weights the grid models are replaced by [`SMALL_GRIDS`] (see there).
fn models_for(weights: WeightMode) -> Vec<(String, Model)> {
    use nshade_core::model::InputSpec;
    use nshade_core::{Arch, Network};
    let mut all: Vec<(String, Model)> = models::all()
        .into_iter()
        .filter(|(_, m)| {
            weights == WeightMode::Buffer || m.network.param_count == m.network.dense_count
        })
        .map(|(n, m)| (n.to_string(), m))
        .collect();
    if weights == WeightMode::Baked {
        for &(name, arch, i) in SMALL_GRIDS {
            let net = Network::build(&Arch::parse(arch).unwrap(), i, 3).unwrap();
            assert!(net.param_count > net.dense_count, "{name} has a table");
            let mut params = net.init_params(42);
            let mut rng = nshade_core::rng::Pcg32::new(7);
            for p in params.iter_mut() {
                *p += 0.5 * (rng.next_f32() - 0.5);
            }
            let spec = if i == 2 {
                InputSpec::uv()
            } else {
                InputSpec::xyt()
            };
            all.push((name.to_string(), Model::new(net, params, spec)));
        }
    }
    all
}

/// One exported program with its harness, compiled to SPIR-V, to run and compare.
struct Case {
    what: String,
    spirv: PathBuf,
    /// The parameter buffer (buffer mode) and whether it is a uniform block.
    params: Option<(Vec<u8>, bool)>,
    input: Vec<f32>,
    want: Vec<f32>,
    out_dims: usize,
}

/// The weight modes run for each target: baked, buffer straight-line, buffer loops (and
/// for GLSL 450, HLSL and Slang both again with the buffer as 4-vectors,
/// `--vec4-buffer`).
fn variants(target: Target) -> Vec<Options> {
    let mut v = vec![Options::new(target)];
    if target != Target::ShaderToy {
        let vec4s: &[bool] = if matches!(target, Target::Glsl | Target::Hlsl | Target::Slang) {
            &[false, true]
        } else {
            &[false]
        };
        for &vec4_buffer in vec4s {
            for loops in [false, true] {
                v.push(Options {
                    weights: WeightMode::Buffer,
                    loops,
                    vec4_buffer,
                    ..Options::new(target)
                });
            }
        }
    }
    v
}

fn mode(o: &Options) -> &'static str {
    match (o.weights, o.loops, o.vec4_buffer) {
        (WeightMode::Baked, _, _) => "baked",
        (WeightMode::Buffer, false, false) => "buffer",
        (WeightMode::Buffer, true, false) => "buffer+loops",
        (WeightMode::Buffer, false, true) => "buffer-vec4",
        (WeightMode::Buffer, true, true) => "buffer-vec4+loops",
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Lang {
    Glsl,
    Hlsl,
    Slang,
}

/// `vec3(x[i * 3u + 0u], …)` (GLSL) / `float3(…)` (HLSL, Slang) of a row of `n` inputs.
fn row_args(lang: Lang, input: &str, n: usize) -> String {
    let loads: Vec<String> = (0..n)
        .map(|k| format!("{input}[i * {n}u + {k}u]"))
        .collect();
    match (n, lang) {
        (1, _) => loads[0].clone(),
        (_, Lang::Glsl) => format!("vec{n}({})", loads.join(", ")),
        _ => format!("float{n}({})", loads.join(", ")),
    }
}

/// The result type of an `n`-output function.
fn result_type(lang: Lang, n: usize) -> String {
    match (n, lang) {
        (1, _) => "float".into(),
        (_, Lang::Glsl) => format!("vec{n}"),
        _ => format!("float{n}"),
    }
}

/// Stores of `r` (n components) into row i of `output`.
fn row_stores(output: &str, n: usize) -> String {
    assert!(n <= 4, "the harness handles up to 4 outputs");
    (0..n)
        .map(|k| {
            let c = if n == 1 {
                "r".to_string()
            } else {
                format!("r.{}", ["x", "y", "z", "w"][k])
            };
            format!("    {output}[i * {n}u + {k}u] = {c};\n")
        })
        .collect()
}

/// The GLSL compute harness (ES 3.10 and 450 alike) around `nshade_eval`.
fn glsl_harness(model: &Model, rows: usize) -> String {
    let (i, o) = (model.network.in_dims, model.network.out_dims);
    format!(
        "\nlayout(local_size_x = 64) in;\nlayout(std430, binding = 2) readonly buffer NshIn {{ float x[]; }} nsh_in;\nlayout(std430, binding = 3) writeonly buffer NshOut {{ float y[]; }} nsh_out;\nvoid main() {{\n    uint i = gl_GlobalInvocationID.x;\n    if (i >= {rows}u) {{ return; }}\n    {} r = nshade_eval({});\n{}}}\n",
        result_type(Lang::Glsl, o),
        row_args(Lang::Glsl, "nsh_in.x", i),
        row_stores("nsh_out.y", o)
    )
}

/// The GLSL 450 compute harness around `nshade_eval{points}` (`--points`): invocation g
/// evaluates rows `points·g ..`, reading row `min(row, rows − 1)` for the points past
/// the end and storing only rows below `rows`.
fn glsl_points_harness(model: &Model, rows: usize, points: usize) -> String {
    let (i, o) = (model.network.in_dims, model.network.out_dims);
    let in_ty = result_type(Lang::Glsl, i);
    let out_ty = result_type(Lang::Glsl, o);
    let mut s = format!(
        "\nlayout(local_size_x = 64) in;\nlayout(std430, binding = 2) readonly buffer NshIn {{ float x[]; }} nsh_in;\nlayout(std430, binding = 3) writeonly buffer NshOut {{ float y[]; }} nsh_out;\nvoid main() {{\n    uint i0 = gl_GlobalInvocationID.x * {points}u;\n    if (i0 >= {rows}u) {{ return; }}\n    {in_ty} p[{points}];\n"
    );
    for j in 0..points {
        s += &format!(
            "    {{ uint i = min(i0 + {j}u, {}u); p[{j}] = {}; }}\n",
            rows - 1,
            row_args(Lang::Glsl, "nsh_in.x", i)
        );
    }
    s += &format!("    {out_ty} rs[{points}] = nshade_eval{points}(p);\n");
    for j in 0..points {
        s += &format!(
            "    if (i0 + {j}u < {rows}u) {{ uint i = i0 + {j}u; {out_ty} r = rs[{j}];\n{}    }}\n",
            row_stores("nsh_out.y", o)
        );
    }
    s + "}\n"
}

/// The HLSL / Slang compute harness around `nshade_eval`.
fn hlsl_harness(model: &Model, lang: Lang, rows: usize) -> String {
    let (i, o) = (model.network.in_dims, model.network.out_dims);
    let decls = if lang == Lang::Slang {
        "[[vk::binding(2, 0)]]\nStructuredBuffer<float> nsh_in;\n[[vk::binding(3, 0)]]\nRWStructuredBuffer<float> nsh_out;\n[shader(\"compute\")]\n"
    } else {
        "StructuredBuffer<float> nsh_in : register(t2);\nRWStructuredBuffer<float> nsh_out : register(u3);\n"
    };
    format!(
        "\n{decls}[numthreads(64, 1, 1)]\nvoid main(uint3 id : SV_DispatchThreadID) {{\n    uint i = id.x;\n    if (i >= {rows}u) {{ return; }}\n    {} r = nshade_eval({});\n{}}}\n",
        result_type(lang, o),
        row_args(lang, "nsh_in", i),
        row_stores("nsh_out", o)
    )
}

/// The ShaderToy harness: what ShaderToy defines around an image tab (`iResolution`,
/// `iTime`), and a compute entry that calls `mainImage` at the fragCoord and iTime of
/// each input row and writes the colour's RGB.
fn shadertoy_program(tab: &str, rows: usize) -> String {
    format!(
        "#version 310 es\nprecision highp float;\nconst vec3 iResolution = vec3({W}.0, {H}.0, 1.0);\nfloat iTime;\n{tab}\nlayout(local_size_x = 64) in;\nlayout(std430, binding = 2) readonly buffer NshIn {{ float x[]; }} nsh_in;\nlayout(std430, binding = 3) writeonly buffer NshOut {{ float y[]; }} nsh_out;\nvoid main() {{\n    uint i = gl_GlobalInvocationID.x;\n    if (i >= {rows}u) {{ return; }}\n    iTime = nsh_in.x[i * 3u + 2u];\n    vec4 c;\n    mainImage(c, vec2(nsh_in.x[i * 3u], nsh_in.x[i * 3u + 1u]));\n{}}}\n",
        row_stores("nsh_out.y", 3).replace("= r.", "= c.")
    )
}

/// Rows of (fragCoord.x, fragCoord.y, iTime) for every pixel of both frames, and the
/// model inputs the tab documents for them: pixel (x, y) counted from the top at
/// (u, v) = ((x + 0.5) / W, (y + 0.5) / H), x and y spanning the first two inputs'
/// domains and t = lo + (hi − lo) · |2 · fract(iTime / 16) − 1| for 3-input models.
fn shadertoy_inputs(model: &Model) -> (Vec<f32>, Vec<f32>) {
    let (mut rows, mut x) = (Vec::new(), Vec::new());
    let d = &model.inputs.domain;
    for time in TIMES {
        for py in 0..H {
            for px in 0..W {
                rows.extend([px as f32 + 0.5, (H - py) as f32 - 0.5, time]);
                let (u, v) = ((px as f32 + 0.5) / W as f32, (py as f32 + 0.5) / H as f32);
                if model.network.in_dims == 2 {
                    x.extend([u, v]);
                } else {
                    let s = ((time / 16.0).fract() * 2.0 - 1.0).abs();
                    x.extend([
                        d[0][0] + (d[0][1] - d[0][0]) * u,
                        d[1][0] + (d[1][1] - d[1][0]) * v,
                        d[2][0] + (d[2][1] - d[2][0]) * s,
                    ]);
                }
            }
        }
    }
    (rows, x)
}

fn text(model: &Model, o: &Options) -> String {
    export(model, o).unwrap().into_text().unwrap()
}

/// `NSHADE_TEST_FILTER` (a substring of a case name such as `seed3 hlsl baked`) runs
/// only the matching cases, for debugging one target.
fn wanted(what: &str) -> bool {
    std::env::var("NSHADE_TEST_FILTER").map_or(true, |f| what.contains(&f))
}

/// Runs glslangValidator with `args` on `src` written to `dir/file`; returns the SPIR-V path.
fn glslang(dir: &Path, file: &str, src: &str, args: &[&str]) -> PathBuf {
    let path = dir.join(file);
    let spv = dir.join(format!("{file}.spv"));
    std::fs::write(&path, src).unwrap();
    models::run_ok(
        Command::new("glslangValidator")
            .args(args)
            .arg("-o")
            .arg(&spv)
            .arg(&path),
        &format!("glslangValidator {args:?} {}", path.display()),
        src,
    );
    spv
}

/// The cases of `target` (GLSL 450, GLSL ES, HLSL) for every model and weight mode,
/// compiled by glslang.
fn glslang_cases(target: Target, dir: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for o in variants(target) {
        for (name, model) in models_for(o.weights) {
            if !wanted(&format!("{name} {target} {}", mode(&o))) {
                continue;
            }
            let x = models::random_inputs(&model, ROWS, 21);
            let want = model.eval(&x);
            let src = text(&model, &o);
            let what = format!("{name} {target} {}", mode(&o));
            let file = format!("{name}-{}-{}", target.name(), mode(&o).replace('+', "-"));
            let (spirv, uniform) = match target {
                Target::Glsl => {
                    // the function alone (no fragment entry) has no #version line
                    assert!(!src.lines().any(|l| l.starts_with("#version")), "{what}");
                    let full = format!("#version 450\n{src}{}", glsl_harness(&model, ROWS));
                    (
                        glslang(dir, &format!("{file}.comp"), &full, &["-V", "-S", "comp"]),
                        false,
                    )
                }
                Target::GlslEs => {
                    assert!(!src.lines().any(|l| l.starts_with("#version")), "{what}");
                    let full = format!(
                        "#version 310 es\nprecision highp float;\n{src}{}",
                        glsl_harness(&model, ROWS)
                    );
                    let args = ["-V", "--auto-map-bindings", "-S", "comp"];
                    (glslang(dir, &format!("{file}.comp"), &full, &args), true)
                }
                Target::Hlsl => {
                    let full = src + hlsl_harness(&model, Lang::Hlsl, ROWS).as_str();
                    let args = ["-D", "-V", "-e", "main", "-S", "comp"];
                    (glslang(dir, &format!("{file}.hlsl"), &full, &args), false)
                }
                _ => unreachable!(),
            };
            let params =
                (o.weights == WeightMode::Buffer).then(|| (pack_weights(&model, &o), uniform));
            cases.push(Case {
                what,
                spirv,
                params,
                input: x,
                want,
                out_dims: model.network.out_dims,
            });
        }
    }
    cases
}

/// Loads `spirv` unchanged and runs its `main` over the input rows; returns the output rows.
fn run_spirv(ctx: &GpuContext, case: &Case) -> Vec<f32> {
    use wgpu::BufferUsages as U;
    let device = &ctx.device;
    let bytes = std::fs::read(&case.spirv).unwrap();
    assert!(
        bytes.len().is_multiple_of(4) && bytes.len() > 20,
        "{}: not SPIR-V",
        case.what
    );
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(words[0], 0x0723_0203, "{}: SPIR-V magic", case.what);
    let rows = case.want.len() / case.out_dims;
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    // SAFETY: SPIR-V from glslang or Slang, which spirv-val-clean compilers produce; its
    // bindings (0: parameters, 2: inputs, 3: outputs, set 0) match the layout below and
    // the harness reads and writes only rows below `rows`, which the buffers hold.
    let module = unsafe {
        device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
            label: Some(&case.what),
            entry_points: vec![wgpu::PassthroughShaderEntryPoint {
                name: "main".into(),
                workgroup_size: (64, 1, 1),
            }]
            .into(),
            spirv: Some(words.into()),
            ..Default::default()
        })
    };
    let uniform = case.params.as_ref().is_some_and(|p| p.1);
    let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let ro = wgpu::BufferBindingType::Storage { read_only: true };
    // Dense bindings 0..=3: wgpu's Vulkan backend numbers descriptors in layout order
    // and passthrough SPIR-V keeps its own numbers (1 is a placeholder).
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &[
            entry(
                0,
                if uniform {
                    wgpu::BufferBindingType::Uniform
                } else {
                    ro
                },
            ),
            entry(1, ro),
            entry(2, ro),
            entry(3, wgpu::BufferBindingType::Storage { read_only: false }),
        ],
    });
    let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(&case.what),
        layout: Some(&pl),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let buffer = |contents: &[u8], usage| {
        let mut c = contents.to_vec();
        c.resize(c.len().next_multiple_of(16).max(16), 0);
        let b = device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: c.len() as u64,
            usage: usage | U::COPY_DST,
            mapped_at_creation: false,
        });
        ctx.queue.write_buffer(&b, 0, &c);
        b
    };
    let params = match &case.params {
        Some((p, true)) => buffer(p, U::UNIFORM),
        Some((p, false)) => buffer(p, U::STORAGE),
        None => buffer(&[], U::STORAGE),
    };
    let placeholder = buffer(&[], U::STORAGE);
    let input = buffer(bytemuck::cast_slice(&case.input), U::STORAGE);
    let out_bytes = (case.want.len() * 4) as u64;
    // NaN-filled, so a row the shader does not write fails the comparison
    let output = buffer(
        bytemuck::cast_slice(&vec![f32::NAN; case.want.len()]),
        U::STORAGE | U::COPY_SRC,
    );
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: out_bytes,
        usage: U::MAP_READ | U::COPY_DST,
        mapped_at_creation: false,
    });
    let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &layout,
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: params.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: placeholder.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: input.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 3,
                resource: output.as_entire_binding(),
            },
        ],
    });
    let mut enc = device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(rows.div_ceil(64) as u32, 1, 1);
    }
    enc.copy_buffer_to_buffer(&output, 0, &staging, 0, out_bytes);
    ctx.queue.submit([enc.finish()]);
    staging
        .slice(..)
        .map_async(wgpu::MapMode::Read, |r| r.unwrap());
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    if let Some(e) = pollster::block_on(scope.pop()) {
        panic!("{}: {e}", case.what);
    }
    bytemuck::cast_slice(&staging.slice(..).get_mapped_range().unwrap()).to_vec()
}

/// Runs every case and compares it with the CPU; prints and returns the largest error.
fn run_all(target: &str, cases: &[Case]) -> f32 {
    let ctx = common::passthrough_context().expect("checked by the caller");
    let t = std::time::Instant::now();
    let mut worst = (0.0f32, String::new());
    for case in cases {
        let t = std::time::Instant::now();
        let got = run_spirv(&ctx, case);
        let e = common::assert_close(&case.what, &got, &case.want, TOL);
        eprintln!(
            "  {}: {:.2} s, max relative error {e:.2e}",
            case.what,
            t.elapsed().as_secs_f64()
        );
        if e >= worst.0 {
            worst = (e, case.what.clone());
        }
    }
    eprintln!(
        "{target}: {} programs ran in {:.1} s; max relative error {:.2e} ({})",
        cases.len(),
        t.elapsed().as_secs_f64(),
        worst.0,
        worst.1
    );
    worst.0
}

/// The tools and the device the tests need, or None after a counted skip.
fn ready(tool: (&str, &str), test: &str) -> Option<PathBuf> {
    models::tool(tool.0, tool.1)?;
    common::passthrough_context()?;
    Some(models::scratch(&format!("targets-{test}")))
}

const GLSLANG: (&str, &str) = ("glslangValidator", "glslang-tools");

#[test]
fn glsl_450_runs_and_matches_cpu() {
    let Some(dir) = ready(GLSLANG, "glsl") else {
        return;
    };
    run_all("glsl 450", &glslang_cases(Target::Glsl, &dir));
}

/// `--points 2|4` in GLSL 450 (vector values, `mix`/`greaterThan` for the selects):
/// baked, from the buffer as 4-vectors and looped, over a row count that leaves the
/// last invocation's points partly past the end; models with grid tables are refused.
#[test]
fn glsl_450_points_run_and_match_cpu() {
    let Some(dir) = ready(GLSLANG, "glsl-points") else {
        return;
    };
    let rows = ROWS + 1;
    let mut cases = Vec::new();
    for (points, weights, vec4_buffer, loops) in [
        (2, WeightMode::Baked, false, false),
        (4, WeightMode::Baked, false, false),
        (2, WeightMode::Buffer, true, false),
        (4, WeightMode::Buffer, false, true),
    ] {
        let o = Options {
            weights,
            vec4_buffer,
            loops,
            points,
            ..Options::new(Target::Glsl)
        };
        for (name, model) in models_for(weights) {
            let what = format!("{name} glsl points {points} {}", mode(&o));
            if !wanted(&what) {
                continue;
            }
            if model.network.param_count > model.network.dense_count {
                let e = export(&model, &o).unwrap_err().to_string();
                assert!(e.contains("grid tables") && !e.contains('\n'), "{e}");
                continue;
            }
            let x = models::random_inputs(&model, rows, 23);
            let want = model.eval(&x);
            let src = text(&model, &o);
            let full = format!(
                "#version 450\n{src}{}",
                glsl_points_harness(&model, rows, points)
            );
            let file = format!("{name}-glsl-p{points}-{}", mode(&o).replace('+', "-"));
            let spirv = glslang(&dir, &format!("{file}.comp"), &full, &["-V", "-S", "comp"]);
            cases.push(Case {
                what,
                spirv,
                params: (weights == WeightMode::Buffer).then(|| (pack_weights(&model, &o), false)),
                input: x,
                want,
                out_dims: model.network.out_dims,
            });
        }
    }
    assert!(cases.len() >= 16, "only {} cases", cases.len());
    run_all("glsl 450 points", &cases);
}

#[test]
fn glsl_es_runs_and_matches_cpu() {
    let Some(dir) = ready(GLSLANG, "glsl-es") else {
        return;
    };
    run_all("glsl es", &glslang_cases(Target::GlslEs, &dir));
}

#[test]
fn hlsl_runs_and_matches_cpu() {
    let Some(dir) = ready(GLSLANG, "hlsl") else {
        return;
    };
    run_all("hlsl", &glslang_cases(Target::Hlsl, &dir));
}

#[test]
fn shadertoy_tab_runs_and_matches_cpu_at_pixel_centres() {
    let Some(dir) = ready(GLSLANG, "shadertoy") else {
        return;
    };
    let mut cases = Vec::new();
    for (name, model) in models_for(WeightMode::Baked) {
        if !models::can_fragment(&model) || !wanted(&format!("{name} shadertoy")) {
            continue;
        }
        let tab = text(&model, &Options::new(Target::ShaderToy));
        let (rows, x) = shadertoy_inputs(&model);
        let n = rows.len() / 3;
        let src = shadertoy_program(&tab, n);
        let spirv = glslang(&dir, &format!("{name}.comp"), &src, &["-V", "-S", "comp"]);
        cases.push(Case {
            what: format!("{name} shadertoy"),
            spirv,
            params: None,
            input: rows,
            want: model.eval(&x),
            out_dims: 3,
        });
    }
    assert!(
        cases.len() >= 5 || std::env::var("NSHADE_TEST_FILTER").is_ok(),
        "too few models with a ShaderToy tab"
    );
    run_all("shadertoy", &cases);
}

#[test]
fn slang_runs_and_matches_cpu() {
    let Some(py) = slang_python() else { return };
    let Some(dir) = common::passthrough_context().map(|_| models::scratch("targets-slang")) else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../shader/tests/slangc.py");
    let mut jobs = String::new();
    let mut cases = Vec::new();
    for o in variants(Target::Slang) {
        for (name, model) in models_for(o.weights) {
            let what = format!("{name} slang {}", mode(&o));
            if !wanted(&what) {
                continue;
            }
            let x = models::random_inputs(&model, ROWS, 21);
            let want = model.eval(&x);
            let file = dir.join(format!("{name}-{}.slang", mode(&o).replace('+', "-")));
            let spirv = file.with_extension("spv");
            let full = text(&model, &o) + hlsl_harness(&model, Lang::Slang, ROWS).as_str();
            std::fs::write(&file, &full).unwrap();
            jobs += &format!("{}\tmain\tcompute\t{}\n", file.display(), spirv.display());
            let params =
                (o.weights == WeightMode::Buffer).then(|| (pack_weights(&model, &o), false));
            cases.push(Case {
                what,
                spirv,
                params,
                input: x,
                want,
                out_dims: model.network.out_dims,
            });
        }
    }
    let list = dir.join("jobs.txt");
    std::fs::write(&list, &jobs).unwrap();
    models::run_ok(
        Command::new(&py).arg(script).arg("--batch").arg(&list),
        &format!("slang ({} sources in {})", cases.len(), dir.display()),
        &jobs,
    );
    run_all("slang", &cases);
}

/// `$NSHADE_PYTHON` (else `python3`) when it can import slangpy; else a counted skip.
fn slang_python() -> Option<String> {
    let py = std::env::var("NSHADE_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import slangpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        common::skip(&format!(
            "`{py}` cannot import slangpy (pip install slangpy, or set NSHADE_PYTHON)"
        ));
        return None;
    }
    Some(py)
}

/// MSL: complete text for every model and option (see the module doc).
#[test]
fn msl_text_is_complete() {
    let mut count = 0;
    for (name, model) in models::all() {
        let o_dims = model.network.out_dims;
        for weights in [WeightMode::Baked, WeightMode::Buffer] {
            for precision in [Precision::F32, Precision::F16] {
                for fragment in [false, true] {
                    if fragment && !models::can_fragment(&model) {
                        continue;
                    }
                    let o = Options {
                        weights,
                        precision,
                        fragment,
                        ..Options::new(Target::Msl)
                    };
                    let what = format!("{name} msl {weights:?} {precision:?} fragment {fragment}");
                    let src = text(&model, &o);
                    let code: String = src
                        .lines()
                        .filter(|l| !l.trim_start().starts_with("//"))
                        .collect::<Vec<_>>()
                        .join("\n");
                    assert!(code.contains("#include <metal_stdlib>"), "{what}");
                    let ret = if o_dims == 1 {
                        "float".to_string()
                    } else {
                        format!("metal::float{o_dims}")
                    };
                    assert!(
                        code.contains(&format!("{ret} nshade_eval(")),
                        "{what}: no `{ret} nshade_eval(`"
                    );
                    // buffer mode: the parameters are an argument of the function
                    assert_eq!(
                        code.contains("const& nshade_params"),
                        weights == WeightMode::Buffer,
                        "{what}: parameter argument"
                    );
                    if fragment {
                        assert!(code.contains("vertex "), "{what}: no vertex entry");
                        assert!(code.contains("fragment "), "{what}: no fragment entry");
                    }
                    if precision == Precision::F16 {
                        assert!(code.contains("half"), "{what}: no half");
                    }
                    for (open, close) in [('{', '}'), ('(', ')'), ('[', ']')] {
                        assert_eq!(
                            code.matches(open).count(),
                            code.matches(close).count(),
                            "{what}: unbalanced {open}{close}"
                        );
                    }
                    assert!(code.trim_end().ends_with('}'), "{what}: truncated");
                    count += 1;
                }
            }
        }
    }
    assert!(count >= 40);
}

/// The few `metal::` names naga's MSL for `nshade_eval` uses, for compiling it as C++.
const METAL_STUB: &str = r#"#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#define device
#define constant const
#define thread
namespace metal {
using uint = std::uint32_t;
struct float2 { float x, y; float2(float a, float b) : x(a), y(b) {} };
struct float3 { float x, y, z; float3(float a, float b, float c) : x(a), y(b), z(c) {} };
struct float4 { float x, y, z, w; float4(float a, float b, float c, float d) : x(a), y(b), z(c), w(d) {} };
inline float sin(float x) { return std::sin(x); }
inline float cos(float x) { return std::cos(x); }
inline float exp(float x) { return std::exp(x); }
inline float log(float x) { return std::log(x); }
inline float tanh(float x) { return std::tanh(x); }
inline float floor(float x) { return std::floor(x); }
inline float abs(float x) { return std::fabs(x); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline uint max(uint a, uint b) { return a > b ? a : b; }
inline uint min(uint a, uint b) { return a < b ? a : b; }
inline float clamp(float x, float a, float b) { return std::fmin(std::fmax(x, a), b); }
inline uint clamp(uint x, uint a, uint b) { return min(max(x, a), b); }
}
// naga's loop bounding (buffer weights with loops)
struct bool2 { bool x, y; };
struct uint2 {
    metal::uint x, y;
    uint2(metal::uint a) : x(a), y(a) {}
    uint2(metal::uint a, metal::uint b) : x(a), y(b) {}
};
inline bool2 operator==(uint2 a, uint2 b) { return {a.x == b.x, a.y == b.y}; }
inline uint2& operator-=(uint2& a, uint2 b) { a.x -= b.x; a.y -= b.y; return a; }
namespace metal {
using ::uint2;
inline bool all(bool2 b) { return b.x && b.y; }
}
static std::vector<float> read(const char* path) {
    std::vector<float> v;
    if (FILE* f = std::fopen(path, "rb")) {
        float x;
        while (std::fread(&x, 4, 1, f) == 1) v.push_back(x);
        std::fclose(f);
    }
    return v;
}
"#;

/// naga's MSL for `nshade_eval` (f32; baked, buffer and buffer with loops), compiled as
/// C++ and run on the CPU (see the module doc).
#[test]
fn msl_runs_as_cpp_and_matches_cpu() {
    let Some(_) = models::tool("g++", "g++") else {
        return;
    };
    let dir = models::scratch("targets-msl");
    let mut cpp = METAL_STUB.to_string();
    let mut dispatch = String::new();
    let mut cases = Vec::new();
    for o in variants(Target::Msl) {
        for (name, model) in models::all() {
            let what = format!("{name} msl {}", mode(&o));
            if !wanted(&what) {
                continue;
            }
            let k = cases.len();
            let (i, od) = (model.network.in_dims, model.network.out_dims);
            let src = text(&model, &o);
            let code: String = src
                .lines()
                .filter(|l| !l.starts_with("#include"))
                .map(|l| format!("{l}\n"))
                .collect();
            // buffer mode: `device type_N const& nshade_params` after the input
            let params_type = code.split("device ").nth(1).map(|rest| {
                let t = rest.split_whitespace().next().unwrap();
                assert!(
                    rest.starts_with(&format!("{t} const& nshade_params")),
                    "{what}"
                );
                t.to_string()
            });
            assert_eq!(
                params_type.is_some(),
                o.weights == WeightMode::Buffer,
                "{what}"
            );
            let arg = match i {
                1 => "x[r]".to_string(),
                _ => format!(
                    "metal::float{i}({})",
                    (0..i)
                        .map(|c| format!("x[r * {i} + {c}]"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            let params = params_type.map_or(String::new(), |t| {
                format!(", *reinterpret_cast<const c{k}::{t}*>(w.data())")
            });
            let stores: String = (0..od)
                .map(|c| {
                    let v = match od {
                        1 => "v".to_string(),
                        _ => format!("v.{}", ["x", "y", "z", "w"][c]),
                    };
                    format!("        y[r * {od} + {c}] = {v};\n")
                })
                .collect();
            cpp += &format!(
                "namespace c{k} {{\n{code}}}\nstatic void run{k}(const std::vector<float>& x, const std::vector<float>& w, std::vector<float>& y) {{\n    y.resize(x.size() / {i} * {od});\n    for (std::size_t r = 0; r < x.size() / {i}; ++r) {{\n        auto v = c{k}::nshade_eval({arg}{params});\n{}    }}\n}}\n",
                stores
            );
            dispatch += &format!("    case {k}: run{k}(x, w, y); break;\n");
            let x = models::random_inputs(&model, ROWS, 21);
            let input = dir.join(format!("in{k}.f32"));
            let weights = dir.join(format!("w{k}.f32"));
            std::fs::write(&input, bytemuck::cast_slice::<f32, u8>(&x)).unwrap();
            std::fs::write(&weights, bytemuck::cast_slice::<f32, u8>(&model.params)).unwrap();
            cases.push((what, model.eval(&x), input, weights));
        }
    }
    cpp += &format!(
        "int main(int argc, char** argv) {{\n    if (argc != 5) return 2;\n    std::vector<float> x = read(argv[2]), w = read(argv[3]), y;\n    switch (std::atoi(argv[1])) {{\n{dispatch}    default: return 2;\n    }}\n    FILE* f = std::fopen(argv[4], \"wb\");\n    if (!f || std::fwrite(y.data(), 4, y.size(), f) != y.size()) return 1;\n    return std::fclose(f) == 0 ? 0 : 1;\n}}\n"
    );
    let t = std::time::Instant::now();
    let source = dir.join("msl.cpp");
    let exe = dir.join("msl");
    std::fs::write(&source, &cpp).unwrap();
    models::run_ok(
        Command::new("g++")
            .args(["-std=c++17", "-O1", "-fsingle-precision-constant", "-o"])
            .arg(&exe)
            .arg(&source),
        &format!("g++ {}", source.display()),
        "",
    );
    let mut worst = (0.0f32, String::new());
    for (k, (what, want, input, weights)) in cases.iter().enumerate() {
        let out = dir.join(format!("out{k}.f32"));
        models::run_ok(
            Command::new(&exe)
                .arg(k.to_string())
                .arg(input)
                .arg(weights)
                .arg(&out),
            what,
            "",
        );
        let got: Vec<f32> = std::fs::read(&out)
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let e = common::assert_close(what, &got, want, TOL);
        if e >= worst.0 {
            worst = (e, what.clone());
        }
    }
    eprintln!(
        "msl (as C++): {} programs compiled and ran in {:.1} s; max relative error {:.2e} ({})",
        cases.len(),
        t.elapsed().as_secs_f64(),
        worst.0,
        worst.1
    );
    assert!(cases.len() >= 30 || std::env::var("NSHADE_TEST_FILTER").is_ok());
}
