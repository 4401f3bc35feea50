//! One hidden layer's product, Z = W·X for a 64×64 f16 weight matrix and 64 features of S
//! samples in workgroup memory, chained ITERS times per workgroup (each product's
//! output the next one's input), in the forms a step kernel could take:
//!
//! - `subgroup`: the GLSL step kernel's form today — 16×16 tiles of subgroup scope
//!   (`GL_KHR_cooperative_matrix`), the weight tiles held in registers, the tiles of a
//!   phase dealt by row block, f16 or f32 accumulators;
//! - `workgroup`: one 64×64 weight matrix and 64×S input matrices of workgroup scope
//!   (`VK_NV_cooperative_matrix2`'s `cooperativeMatrixWorkgroupScope`), whose staging the
//!   driver manages (on Hopper it may issue warpgroup-wide products that read their
//!   operands from workgroup memory instead of per-subgroup tile loads).
//!
//! The weights are the identity, so after any number of products X is unchanged, bit for
//! bit: each form's output is checked against its input. Prints, per form and launch, the
//! dense f16 rate (2·64·64·S·ITERS flops per workgroup) and whether the output matched.
//! Measures what the step kernels' products could gain from workgroup-scope matrices
//! before any kernel is redesigned around them (docs/PERFORMANCE.md, twenty-fifth
//! session).
//!
//! ```text
//! cargo run --release -p nshade-gpu --example coopmat_probe
//! ```

use std::error::Error;

/// Features (rows of W and X) of the probed layer.
pub const F: usize = 64;

/// A probed form: its name, invocations per workgroup, samples per chunk and GLSL.
pub struct Form {
    pub name: String,
    pub threads: u32,
    pub samples: usize,
    pub glsl: String,
}

/// The forms probed for `iters` products per workgroup: subgroup scope in workgroups of
/// 128 and 256 invocations (f16 and f32 accumulators, each tile's chain of products in
/// turn; and f16 with the subgroup's tiles interleaved, k step by k step), workgroup
/// scope in both (f32 accumulators converted to f16 for the store), each over 64 and 128
/// samples.
pub fn forms(iters: u32) -> Vec<Form> {
    let mut out = Vec::new();
    for samples in [64usize, 128] {
        for threads in [128u32, 256] {
            for (acc16, tiles) in [
                (true, Tiles::Loop),
                (false, Tiles::Loop),
                (true, Tiles::Unrolled),
                (true, Tiles::Interleaved),
            ] {
                out.push(Form {
                    name: format!(
                        "subgroup 16x16, {} accumulators{}, {threads} invocations, {samples} samples",
                        if acc16 { "f16" } else { "f32" },
                        match tiles {
                            Tiles::Loop => "",
                            Tiles::Unrolled => ", [[unroll]] tile loop",
                            Tiles::Interleaved => ", tiles interleaved",
                        }
                    ),
                    threads,
                    samples,
                    glsl: subgroup_glsl(threads, samples, iters, acc16, tiles),
                });
            }
            out.push(Form {
                name: format!(
                    "workgroup 64x{samples}x64, f32 accumulators, {threads} invocations, {samples} samples"
                ),
                threads,
                samples,
                glsl: workgroup_glsl(threads, samples, iters),
            });
        }
    }
    out
}

/// The shared head: bindings (0 the f16 weights, 64×64 row-major; 1 the f16 inputs, F
/// rows of S per workgroup, overwritten by the outputs), X's two buffers of F rows of
/// S + 8 in workgroup memory, the load of this workgroup's rows.
fn head(ext: &str, threads: u32, samples: usize) -> String {
    format!(
        "#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
{ext}layout(local_size_x = {threads}) in;
layout(set = 0, binding = 0) readonly buffer W {{ float16_t w[]; }};
layout(set = 0, binding = 1) buffer X {{ float16_t x[]; }};
const uint F = {F}u;
const uint S = {samples}u;
const uint SX = {sx}u;
const uint WG = {threads}u;
shared float16_t xs[2u * F * SX];
void main() {{
    uint lid = gl_LocalInvocationIndex;
    uint wid = gl_WorkGroupID.x;
    uint sgid = lid / 32u;
    for (uint e = lid; e < F * S; e += WG) {{ xs[(e / S) * SX + e % S] = x[wid * F * S + e]; }}
    barrier();
    uint cur = 0u;
",
        sx = samples + 8
    )
}

/// The shared tail: this workgroup's rows back into binding 1.
const TAIL: &str = "    for (uint e = lid; e < F * S; e += WG) { x[wid * F * S + e] = xs[cur + (e / S) * SX + e % S]; }
}
";

/// How a subgroup's tiles of a phase are written: a loop over them (the step kernels'
/// form), the same loop with `[[unroll]]` (`GL_EXT_control_flow_attributes`), or side by
/// side, each k step's X tiles loaded and multiplied for all of them before the next.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tiles {
    Loop,
    Unrolled,
    Interleaved,
}

/// Subgroup scope: tile t = j·NSG + sgid of row block t mod 4 and sample block t div 4
/// (the subgroup's tiles share its row block's four held weight tiles), as `tiles` says.
fn subgroup_glsl(threads: u32, samples: usize, iters: u32, acc16: bool, tiles: Tiles) -> String {
    let nsg = threads as usize / 32;
    let nj = (F / 16) * (samples / 16) / nsg;
    let acc = if acc16 { "float16_t" } else { "float" };
    let cm = format!("coopmat<{acc}, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>");
    let mb = "coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>";
    let hm = "coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>";
    let mut k = head(
        "#extension GL_EXT_control_flow_attributes : require\n",
        threads,
        samples,
    );
    k.push_str("    uint rb = sgid % 4u;\n");
    for kk in 0..F / 16 {
        k.push_str(&format!(
            "    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> w{kk}; coopMatLoad(w{kk}, w, rb * 16u * F + {o}u, F, gl_CooperativeMatrixLayoutRowMajor);\n",
            o = kk * 16
        ));
    }
    k.push_str(&format!(
        "    for (uint it = 0u; it < {iters}u; it++) {{\n        uint nxt = F * SX - cur;\n"
    ));
    if tiles == Tiles::Interleaved {
        for j in 0..nj {
            k.push_str(&format!(
                "        uint sb{j} = ({j}u * {nsg}u + sgid) / 4u; {cm} c{j} = {cm}(0.0);\n"
            ));
        }
        for kk in 0..F / 16 {
            for j in 0..nj {
                k.push_str(&format!(
                    "        {mb} b{j}_{kk}; coopMatLoad(b{j}_{kk}, xs, cur + {o}u * SX + sb{j} * 16u, SX, gl_CooperativeMatrixLayoutRowMajor);\n",
                    o = kk * 16
                ));
            }
            for j in 0..nj {
                k.push_str(&format!(
                    "        c{j} = coopMatMulAdd(w{kk}, b{j}_{kk}, c{j});\n"
                ));
            }
        }
        for j in 0..nj {
            k.push_str(&format!(
                "        {{ {hm} h = {hm}(c{j}); coopMatStore(h, xs, nxt + rb * 16u * SX + sb{j} * 16u, SX, gl_CooperativeMatrixLayoutRowMajor); }}\n"
            ));
        }
    } else {
        k.push_str(&format!(
            "        {}for (uint j = 0u; j < {nj}u; j++) {{
            uint t = j * {nsg}u + sgid; uint sb = t / 4u;
            {cm} c = {cm}(0.0);
",
            if tiles == Tiles::Unrolled {
                "[[unroll]] "
            } else {
                ""
            }
        ));
        for kk in 0..F / 16 {
            k.push_str(&format!(
                "            {{ {mb} b; coopMatLoad(b, xs, cur + {o}u * SX + sb * 16u, SX, gl_CooperativeMatrixLayoutRowMajor); c = coopMatMulAdd(w{kk}, b, c); }}\n",
                o = kk * 16
            ));
        }
        k.push_str(&format!(
            "            {hm} h = {hm}(c);
            coopMatStore(h, xs, nxt + rb * 16u * SX + sb * 16u, SX, gl_CooperativeMatrixLayoutRowMajor);
        }}
"
        ));
    }
    k.push_str(
        "        memoryBarrierShared(); barrier();
        cur = nxt;
    }
",
    );
    k.push_str(TAIL);
    k
}

/// Workgroup scope: W (64×64) loaded once, each product the whole chunk at once.
fn workgroup_glsl(threads: u32, samples: usize, iters: u32) -> String {
    let mut k = head(
        "#extension GL_NV_cooperative_matrix2 : require\n",
        threads,
        samples,
    );
    let (a, b, c, h) = (
        "coopmat<float16_t, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseA>".to_string(),
        format!("coopmat<float16_t, gl_ScopeWorkgroup, 64, {samples}, gl_MatrixUseB>"),
        format!("coopmat<float, gl_ScopeWorkgroup, 64, {samples}, gl_MatrixUseAccumulator>"),
        format!("coopmat<float16_t, gl_ScopeWorkgroup, 64, {samples}, gl_MatrixUseAccumulator>"),
    );
    k.push_str(&format!(
        "    {a} wm; coopMatLoad(wm, w, 0u, F, gl_CooperativeMatrixLayoutRowMajor);
    for (uint it = 0u; it < {iters}u; it++) {{
        uint nxt = F * SX - cur;
        {b} xb; coopMatLoad(xb, xs, cur, SX, gl_CooperativeMatrixLayoutRowMajor);
        {c} c = {c}(0.0);
        c = coopMatMulAdd(wm, xb, c);
        {h} hh = {h}(c);
        coopMatStore(hh, xs, nxt, SX, gl_CooperativeMatrixLayoutRowMajor);
        memoryBarrierShared(); barrier();
        cur = nxt;
    }}
"
    ));
    k.push_str(TAIL);
    k
}

/// One probed form's result: its rate and whether the output matched the input.
pub struct Measured {
    pub name: String,
    pub tflops: f64,
    pub exact: bool,
}

/// Opens the high-performance adapter with cooperative matrices, SPIR-V passthrough and
/// every `VK_NV_cooperative_matrix2` feature it offers, and runs every form of [`forms`]
/// (`workgroups` workgroups, `iters` products each, timed over `reps` dispatches); a
/// form the driver refuses is reported by its error, not run.
#[cfg(all(
    feature = "glslang",
    not(any(target_vendor = "apple", target_arch = "wasm32"))
))]
pub fn run(
    workgroups: u32,
    iters: u32,
    reps: u32,
) -> Result<Vec<Result<Measured, String>>, Box<dyn Error>> {
    use nshade_gpu::context::coopmat2;
    use wgpu::util::DeviceExt;
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        force_fallback_adapter: false,
        compatible_surface: None,
        apply_limit_buckets: false,
    }))?;
    let need = wgpu::Features::SHADER_F16
        | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::PASSTHROUGH_SHADERS;
    if !adapter.features().contains(need) {
        return Err("the adapter lacks f16, cooperative matrices or SPIR-V passthrough".into());
    }
    let desc = wgpu::DeviceDescriptor {
        label: Some("coopmat probe"),
        required_features: need,
        required_limits: adapter.limits(),
        // SAFETY: the forms use 16×16 f16 tiles with f16 and f32 accumulators (listed
        // by every adapter with cooperative matrices that nshade has met) and, only
        // where the adapter offers workgroup scope, workgroup-scope matrices
        experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    };
    let offered = coopmat2::offered(&adapter);
    let workgroup_scope = offered.is_some_and(|f| f.workgroup_scope != 0);
    let (device, queue) = match offered {
        // SAFETY: exactly the features the adapter offers
        Some(f) => unsafe { coopmat2::open_with(&adapter, &desc, f) }?,
        None => pollster::block_on(adapter.request_device(&desc))?,
    };
    let f16 = |v: f32| half::f16::from_f32(v).to_bits();
    let eye: Vec<u16> = (0..F * F)
        .map(|e| f16(if e / F == e % F { 1.0 } else { 0.0 }))
        .collect();
    let wbuf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("probe W"),
        contents: bytemuck::cast_slice(&eye),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let mut out = Vec::new();
    for form in forms(iters) {
        if form.name.starts_with("workgroup") && !workgroup_scope {
            out.push(Err(format!("{}: no workgroup scope here", form.name)));
            continue;
        }
        let n = workgroups as usize * F * form.samples;
        let input: Vec<u16> = (0..n).map(|e| f16((e % 2039) as f32 / 64.0)).collect();
        let xbuf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("probe X"),
            contents: bytemuck::cast_slice(&input),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
        let words = match nshade_gpu::capture::glslang::compile_compute(&form.glsl) {
            Ok(w) => w,
            Err(e) => {
                out.push(Err(format!(
                    "{}: glslang line {:?}: {}",
                    form.name, e.line, e.message
                )));
                continue;
            }
        };
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        // SAFETY: glslang's SPIR-V of the form above: binding 0 is read at W's 64×64
        // elements, binding 1 at this workgroup's F·S elements of `workgroups`·F·S;
        // workgroup memory at two buffers of F rows of S + 8.
        let module = unsafe {
            device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
                label: Some("coopmat probe"),
                entry_points: vec![wgpu::PassthroughShaderEntryPoint {
                    name: "main".into(),
                    workgroup_size: (form.threads, 1, 1),
                }]
                .into(),
                spirv: Some(words.into()),
                ..Default::default()
            })
        };
        let storage = |read_only| wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        };
        let bgl = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("coopmat probe"),
            // binding 0 read-only (W), 1 read and written (X)
            entries: &[true, false].map(|read_only| wgpu::BindGroupLayoutEntry {
                binding: u32::from(!read_only),
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: storage(read_only),
                count: None,
            }),
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("coopmat probe"),
            bind_group_layouts: &[Some(&bgl)],
            immediate_size: 0,
        });
        let pipe = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some("coopmat probe"),
            layout: Some(&layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[],
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            out.push(Err(format!("{}: {e}", form.name)));
            continue;
        }
        let bg = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("coopmat probe"),
            layout: &bgl,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wbuf.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: xbuf.as_entire_binding(),
                },
            ],
        });
        let dispatch = |count: u32| {
            let mut enc = device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipe);
                pass.set_bind_group(0, &bg, &[]);
                for _ in 0..count {
                    pass.dispatch_workgroups(workgroups, 1, 1);
                }
            }
            queue.submit([enc.finish()]);
            device.poll(wgpu::PollType::wait_indefinitely())
        };
        // a warm-up dispatch, then `reps` timed
        dispatch(1)?;
        let t0 = std::time::Instant::now();
        dispatch(reps)?;
        let secs = t0.elapsed().as_secs_f64();
        let flops =
            2.0 * (F * F * form.samples) as f64 * iters as f64 * workgroups as f64 * reps as f64;
        let read = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("probe readback"),
            size: (n * 2) as u64,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        let mut enc = device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&xbuf, 0, &read, 0, (n * 2) as u64);
        queue.submit([enc.finish()]);
        read.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        device.poll(wgpu::PollType::wait_indefinitely())?;
        let got: Vec<u16> = bytemuck::cast_slice(&read.slice(..).get_mapped_range()?).to_vec();
        out.push(Ok(Measured {
            name: form.name,
            tflops: flops / secs / 1e12,
            exact: got.len() == input.len() && got == input,
        }));
    }
    Ok(out)
}

/// Stand-in where there is no glslang or no Vulkan.
#[cfg(not(all(
    feature = "glslang",
    not(any(target_vendor = "apple", target_arch = "wasm32"))
)))]
pub fn run(_: u32, _: u32, _: u32) -> Result<Vec<Result<Measured, String>>, Box<dyn Error>> {
    Err("the probe needs glslang and Vulkan".into())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn Error>> {
    // 132 multiprocessors on the H200, four workgroups each
    for r in run(528, 2048, 5)? {
        match r {
            Ok(m) => println!(
                "{:>7.1} TFLOP/s  {}  {}",
                m.tflops,
                if m.exact { "exact" } else { "WRONG" },
                m.name
            ),
            Err(e) => println!("    --   {e}"),
        }
    }
    Ok(())
}
