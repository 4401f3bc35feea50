//! The tiled compute forms (`--form coop-compute` and `--form tiled-compute`): naga
//! parses and validates them (cooperative matrices allowed), naga's SPIR-V of them passes
//! `spirv-val`, golden files, and the networks they refuse with a clear error. They run
//! against the CPU in `crates/gpu/tests/tiled_infer.rs`.

mod common;

use nshade_core::model::{InputSpec, Model};
use nshade_core::rng::Pcg32;
use nshade_core::{Arch, Network};
use nshade_shader::{Error, Form, Options, Output, Precision, Target, WeightMode, export};
use std::path::PathBuf;
use std::process::Command;

/// (architecture, inputs, outputs): the seed's #3, the common wide networks, odd widths
/// (padding in every direction), a deep narrow one, one input and four outputs, encodings
/// of every kind, and a grid (its tables read from the parameter buffer).
const ARCHS: &[(&str, usize, usize)] = &[
    ("freq(3) | mlp(32x3, leaky_relu, sigmoid)", 2, 3),
    ("freq(8) | mlp(64x4, relu)", 2, 3),
    ("mlp(20x2, tanh)", 3, 5),
    ("mlp(20x2, tanh)", 2, 3),
    ("cat(identity, freq(2)) | mlp(48x1, swish, exp)", 1, 4),
    ("mlp(16x6, softplus, none)", 3, 1),
    (
        "cat(pick(0, 1) | freq(2), pick(2) | oneblob(4), sh(2), tri(2)) | mlp(24x2, sine(2), sigmoid)",
        3,
        3,
    ),
    (
        "hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2) | mlp(32x2, relu, sigmoid)",
        2,
        3,
    ),
];

fn model(arch: &str, i: usize, o: usize) -> Model {
    let net = Network::build(&Arch::parse(arch).unwrap(), i, o).unwrap();
    let mut params = net.init_params(5);
    let mut rng = Pcg32::new(3);
    for p in params.iter_mut() {
        *p += 0.1 * (rng.next_f32() - 0.5);
    }
    let mut spec = InputSpec::xyt();
    spec.names.resize(i, "w".into());
    spec.domain.resize(i, [-1.0, 1.0]);
    spec.scale.resize(i, 1.0);
    spec.offset.resize(i, 0.0);
    Model::new(net, params, spec)
}

fn opts(form: Form, precision: Precision) -> Options {
    Options {
        form,
        weights: WeightMode::Buffer,
        precision,
        ..Options::new(Target::Wgsl)
    }
}

#[test]
fn tiled_forms_validate_with_naga() {
    for &(arch, i, o) in ARCHS {
        let m = model(arch, i, o);
        let plan = nshade_shader::coop::plan(&m, nshade_shader::coop::MAX_WORKGROUP_BYTES).unwrap();
        for form in [Form::CoopCompute, Form::TiledCompute] {
            for precision in [Precision::F32, Precision::F16] {
                let src = export(&m, &opts(form, precision))
                    .unwrap()
                    .into_text()
                    .unwrap();
                nshade_shader::validate_coop_wgsl(&src)
                    .unwrap_or_else(|e| panic!("{arch} {form} {precision:?}: {e}\n{src}"));
                assert_eq!(
                    src.contains("coopMultiplyAdd"),
                    form == Form::CoopCompute,
                    "{arch} {form}"
                );
                if form == Form::TiledCompute {
                    // without cooperative matrices: plain f16 validation
                    nshade_shader::validate_wgsl(&src).unwrap();
                }
            }
        }
        eprintln!(
            "{arch}: {} rows per workgroup, {} bytes of workgroup memory",
            plan.rows, plan.workgroup_bytes
        );
        // a smaller budget gives smaller tiles (or a refusal), never more memory
        if let Ok(small) = nshade_shader::coop::plan(&m, 32768) {
            assert!(small.workgroup_bytes <= 32768 && small.rows <= plan.rows);
            let o = Options {
                workgroup_memory: 32768,
                ..opts(Form::CoopCompute, Precision::F32)
            };
            let src = export(&m, &o).unwrap().into_text().unwrap();
            nshade_shader::validate_coop_wgsl(&src).unwrap();
        }
        assert!(plan.workgroup_bytes <= nshade_shader::coop::MAX_WORKGROUP_BYTES);
    }
}

/// naga writes both forms as SPIR-V. `spirv-val` checks tiled-compute's in full;
/// coop-compute's uses `SPV_KHR_cooperative_matrix` (capability 6022), which the
/// spirv-val of Debian 12 (SPIRV-Tools 2023.1) does not know yet: the test requires that
/// this is its only complaint, and says so on stderr.
#[test]
fn tiled_spirv_passes_spirv_val() {
    let Some(_) = common::tool("spirv-val", "spirv-tools") else {
        return;
    };
    let dir = common::scratch("tiled-spirv");
    for &(arch, i, o) in ARCHS {
        let m = model(arch, i, o);
        for form in [Form::CoopCompute, Form::TiledCompute] {
            let o = Options {
                target: Target::SpirV,
                ..opts(form, Precision::F32)
            };
            let Output::Binary(bytes) = export(&m, &o).unwrap() else {
                panic!("spirv is binary")
            };
            assert_eq!(&bytes[..4], &0x0723_0203u32.to_le_bytes());
            let path = dir.join(format!("{}.spv", form.name()));
            std::fs::write(&path, &bytes).unwrap();
            let out = Command::new("spirv-val")
                .arg("--target-env")
                .arg("vulkan1.1")
                .arg(&path)
                .output()
                .expect("spirv-val starts");
            let err = String::from_utf8_lossy(&out.stderr).to_string()
                + &String::from_utf8_lossy(&out.stdout);
            match form {
                Form::TiledCompute => {
                    assert!(out.status.success(), "spirv-val {arch} {form}: {err}")
                }
                _ if out.status.success() => {}
                _ => {
                    assert!(
                        err.trim() == "error: line 6: Invalid capability operand: 6022",
                        "spirv-val {arch} {form}: {err}"
                    );
                    eprintln!(
                        "note: spirv-val {arch} {form}: this spirv-val does not know CooperativeMatrixKHR (6022); naga wrote the module"
                    );
                }
            }
        }
    }
}

/// `--target glsl --form tiled-compute` compiles with Debian's glslangValidator (Vulkan
/// 1.1). Its glslang (12) predates `GL_KHR_cooperative_matrix`: the coop-compute GLSL is
/// compiled by the glslang built into nshade in `crates/gpu/tests/tiled_infer.rs`, which
/// also runs both on the GPU.
#[test]
fn tiled_glsl_compiles_with_glslang_validator() {
    let Some(_) = common::tool("glslangValidator", "glslang-tools") else {
        return;
    };
    let dir = common::scratch("tiled-glsl");
    for &(arch, i, o) in ARCHS {
        let m = model(arch, i, o);
        let src = export(
            &m,
            &Options {
                target: Target::Glsl,
                ..opts(Form::TiledCompute, Precision::F32)
            },
        )
        .unwrap()
        .into_text()
        .unwrap();
        let path = dir.join("tiled.comp");
        std::fs::write(&path, &src).unwrap();
        common::run_ok(
            Command::new("glslangValidator")
                .args(["-V", "--target-env", "vulkan1.1", "-o"])
                .arg(dir.join("tiled.spv"))
                .arg(&path),
            &format!("glslangValidator {arch} tiled-compute"),
            &src,
        );
    }
}

#[test]
fn tiled_forms_match_golden_files() {
    let bless = std::env::var("NSHADE_BLESS").is_ok_and(|v| v == "1");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut failures = Vec::new();
    // (model, target, form, precision, the subgroup-private GLSL kernel)
    for (name, target, form, precision, kernel) in [
        (
            "seed3",
            Target::Wgsl,
            Form::CoopCompute,
            Precision::F32,
            "tile",
        ),
        (
            "seed3",
            Target::Wgsl,
            Form::TiledCompute,
            Precision::F32,
            "tile",
        ),
        (
            "seed3",
            Target::Wgsl,
            Form::CoopCompute,
            Precision::F16,
            "tile",
        ),
        (
            "seed3",
            Target::Glsl,
            Form::CoopCompute,
            Precision::F32,
            "tile",
        ),
        (
            "seed3",
            Target::Glsl,
            Form::CoopCompute,
            Precision::F32,
            "rows",
        ),
        (
            "seed3",
            Target::Glsl,
            Form::TiledCompute,
            Precision::F32,
            "tile",
        ),
        (
            "encodings",
            Target::Wgsl,
            Form::CoopCompute,
            Precision::F32,
            "tile",
        ),
        (
            "hashgrid2",
            Target::Wgsl,
            Form::CoopCompute,
            Precision::F32,
            "tile",
        ),
        (
            "hashgrid2",
            Target::Glsl,
            Form::CoopCompute,
            Precision::F32,
            "tile",
        ),
        (
            "hashgrid2",
            Target::Glsl,
            Form::CoopCompute,
            Precision::F32,
            "rows",
        ),
        (
            "seed3",
            Target::Glsl,
            Form::CoopCompute,
            Precision::F32,
            "held",
        ),
        (
            "seed3",
            Target::Glsl,
            Form::CoopCompute,
            Precision::F16,
            "native",
        ),
        (
            "seed3",
            Target::Slang,
            Form::CoopCompute,
            Precision::F32,
            "slang",
        ),
        (
            "hashgrid2",
            Target::Slang,
            Form::CoopCompute,
            Precision::F32,
            "slang",
        ),
    ] {
        let m = common::model(name);
        // "tile": the shared-tile kernel; "rows": the subgroup kernel; "held": the kernel
        // of held weights (`--held-weights`)
        let rows = matches!(kernel, "rows" | "held" | "native");
        let o = Options {
            target,
            rows_shape: if rows { None } else { Some((0, 0)) },
            // what `nshade export` writes: f16 accumulation in the GLSL kernels
            rows_acc16: rows,
            rows_stationary: kernel == "held",
            rows_native: kernel == "native",
            ..opts(form, precision)
        };
        let src = export(&m, &o).unwrap().into_text().unwrap();
        let p = match (precision, kernel) {
            (_, "native") => ".native",
            (Precision::F16, _) => ".f16",
            (_, "rows") => ".rows",
            (_, "held") => ".held",
            _ => "",
        };
        let path = root.join(name).join(format!(
            "{}.{}{p}.{}",
            target.name(),
            form.name(),
            match target {
                Target::Glsl => "comp",
                Target::Slang => "slang",
                _ => "wgsl",
            }
        ));
        if bless {
            std::fs::write(&path, &src).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(old) if old == src => {}
            Ok(_) => failures.push(format!("{}", path.display())),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "golden files differ (re-bless with NSHADE_BLESS=1 cargo test -p nshade-shader --test tiled, then review the diff):\n{}",
        failures.join("\n")
    );
}

/// `texture_io`: the tiled kernels read rows from a `texture_2d<f32>` and write texels to
/// a `texture_storage_2d<rgba32float, write>`; every such kernel of 1 to 4 inputs and
/// outputs validates with naga (WGSL and, through naga, SPIR-V), its header names the
/// textures, and the options it does not take are refused.
#[test]
fn texture_io_kernels_validate() {
    for &(arch, i, o) in ARCHS.iter().filter(|a| a.2 <= 4) {
        let m = model(arch, i, o);
        for form in [Form::CoopCompute, Form::TiledCompute] {
            for precision in [Precision::F32, Precision::F16] {
                let t = Options {
                    texture_io: true,
                    ..opts(form, precision)
                };
                let src = export(&m, &t).unwrap().into_text().unwrap();
                nshade_shader::validate_coop_wgsl(&src)
                    .unwrap_or_else(|e| panic!("{arch} {form} {precision:?}: {e}\n{src}"));
                assert!(
                    src.contains("texture_storage_2d<rgba32float, write>"),
                    "{arch}"
                );
                assert!(src.contains("textureStore(") && !src.contains("nshade_outputs"));
                assert!(src.contains("nshade_input_tex @group(0) @binding(2) (texture_2d<f32>"));
                if form == Form::TiledCompute {
                    nshade_shader::validate_wgsl(&src).unwrap();
                }
            }
        }
    }
    let five = model("mlp(20x2, tanh)", 3, 5);
    let e = export(
        &five,
        &Options {
            texture_io: true,
            ..opts(Form::TiledCompute, Precision::F32)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("1 to 4 channels"), "{e}");
    let m = model(ARCHS[0].0, 2, 3);
    for o in [
        Options {
            texture_io: true,
            ..opts(Form::Function, Precision::F32)
        },
        Options {
            texture_io: true,
            target: Target::Glsl,
            ..opts(Form::TiledCompute, Precision::F32)
        },
    ] {
        let e = export(&m, &o).unwrap_err();
        assert!(e.to_string().contains("texture input and output"), "{e}");
    }
}

/// An mlp whose weights do not all fit in workgroup memory streams them a layer at a
/// time: `freq(8) | mlp(128x4, relu)` (110 KiB of f16 weights) within the 48 KiB of the
/// H200 and `freq(8) | mlp(64x4, relu)` (30 KiB) within lavapipe's 32 KiB, where all of it
/// fits in 48 KiB; every such kernel validates (naga, WGSL; glslangValidator, the GLSL
/// tiled form) and stages
/// inside the tile loop.
#[test]
fn large_mlps_stream_their_layers() {
    use nshade_shader::coop::plan;
    for (arch, budget, streamed) in [
        ("freq(8) | mlp(128x4, relu)", 49152, true),
        ("freq(8) | mlp(64x4, relu)", 32768, true),
        ("freq(8) | mlp(64x4, relu)", 49152, false),
    ] {
        let m = model(arch, 2, 3);
        let p = plan(&m, budget).unwrap();
        assert_eq!(p.streamed, streamed, "{arch} in {budget} bytes");
        assert!(
            p.workgroup_bytes <= budget,
            "{arch}: {} bytes",
            p.workgroup_bytes
        );
        if streamed {
            let largest = p.layers.iter().map(|l| l.out_p * l.stride).max().unwrap();
            assert_eq!(p.weights_len, largest, "{arch}: one layer's region");
            assert!(p.layers.iter().all(|l| l.staged == 0));
        }
        for form in [Form::CoopCompute, Form::TiledCompute] {
            let o = Options {
                workgroup_memory: budget,
                ..opts(form, Precision::F32)
            };
            let src = export(&m, &o).unwrap().into_text().unwrap();
            nshade_shader::validate_coop_wgsl(&src)
                .unwrap_or_else(|e| panic!("{arch} {form} {budget}: {e}\n{src}"));
            // streamed kernels stage weights inside the tile loop, one loop per layer
            let in_loop = src.split("for (var tile").nth(1).unwrap_or("");
            assert_eq!(
                in_loop.matches("+ i] = f16(w)").count(),
                if streamed { p.layers.len() } else { 0 },
                "{arch} {form} {budget}"
            );
            assert_eq!(src.contains("staged in turn"), streamed);
            // Debian's glslangValidator predates GL_KHR_cooperative_matrix (see below)
            if form == Form::TiledCompute
                && common::tool("glslangValidator", "glslang-tools").is_some()
            {
                let g = Options {
                    target: Target::Glsl,
                    ..o.clone()
                };
                let glsl = export(&m, &g).unwrap().into_text().unwrap();
                let dir = common::scratch("tiled-streamed");
                let path = dir.join("streamed.comp");
                std::fs::write(&path, &glsl).unwrap();
                common::run_ok(
                    Command::new("glslangValidator")
                        .args(["-V", "--target-env", "vulkan1.1", "-o"])
                        .arg(dir.join("streamed.spv"))
                        .arg(&path),
                    &format!("glslangValidator {arch} tiled-compute streamed"),
                    &glsl,
                );
            }
        }
    }
}

/// Networks the tiled forms cannot take, each refused with a reason; and options that
/// do not apply to them.
#[test]
fn tiled_forms_refuse_with_reasons() {
    for (arch, i, o, want) in [
        (
            "mlp(8x1, tanh, out=4) | freq(1) | mlp(6x1, swish)",
            2,
            3,
            "an mlp before its last stage",
        ),
        (
            "mlp(8x1, relu, out=1) | freq(1)",
            2,
            2,
            "does not end in an mlp",
        ),
        ("freq(1)", 2, 4, "no mlp at its end"),
        (
            "freq(8) | mlp(256x2, relu)",
            2,
            3,
            "does not fit in the 49152 bytes",
        ),
    ] {
        let m = model(arch, i, o);
        let e = export(&m, &opts(Form::CoopCompute, Precision::F32)).unwrap_err();
        assert!(
            matches!(e, Error::Model(_)) && e.to_string().contains(want),
            "{arch}: {e}"
        );
    }
    let m = model(ARCHS[0].0, 2, 3);
    for (o, want) in [
        (
            Options {
                weights: WeightMode::Baked,
                ..opts(Form::CoopCompute, Precision::F32)
            },
            "needs --weights buffer",
        ),
        (
            Options {
                fragment: true,
                ..opts(Form::TiledCompute, Precision::F32)
            },
            "--fragment",
        ),
        (
            Options {
                target: Target::Hlsl,
                ..opts(Form::CoopCompute, Precision::F32)
            },
            "--form coop-compute",
        ),
    ] {
        let e = export(&m, &o).unwrap_err();
        assert!(e.to_string().contains(want), "{o:?}: {e}");
    }
}

/// Hostile strings in the model file reach the tiled forms' header only through
/// `comment_safe`, as in every other form.
#[test]
fn tiled_header_is_comment_safe() {
    let mut m = model(ARCHS[0].0, 2, 3);
    m.inputs.names[0] = "x */ fn evil() {} /*\nlet".into();
    m.outputs[0] = "r\n@compute fn bad() {}".into();
    for form in [Form::CoopCompute, Form::TiledCompute] {
        let src = export(&m, &opts(form, Precision::F32))
            .unwrap()
            .into_text()
            .unwrap();
        assert!(!src.contains("fn evil") || src.contains("* /"), "{src}");
        for line in src.lines().take_while(|l| l.starts_with("//")) {
            assert!(!line.contains("*/"), "{line}");
        }
        assert!(!src.contains("\n@compute fn bad"), "{src}");
        nshade_shader::validate_coop_wgsl(&src).unwrap();
    }
}

/// The kernel of held weights takes tiles of 64 rows where they fit (32 where asked),
/// and its workgroup memory is what it declares: for `freq(8) | mlp(64x4, relu)` little
/// enough for two resident workgroups in the H200's 48 KiB (which was measured to
/// decide its speed).
#[test]
fn held_weights_tiles_and_workgroup_memory() {
    let budget = 48 * 1024;
    let held = |arch: &str, rows: Option<usize>| {
        let m = model(arch, 2, 3);
        let o = Options {
            target: Target::Glsl,
            workgroup_memory: budget,
            rows_stationary: true,
            rows_acc16: true,
            held_rows: rows,
            ..opts(Form::CoopCompute, Precision::F32)
        };
        let plan = nshade_shader::coop::plan_for(&m, &o).unwrap();
        assert!(plan.output_groups > 0, "{arch}: not the held kernel");
        let src = export(&m, &o).unwrap().into_text().unwrap();
        // the declared workgroup arrays add up to the plan's bytes
        let declared: usize = src
            .lines()
            .filter_map(|l| l.strip_prefix("shared "))
            .map(|l| {
                let (ty, rest) = l.split_once(' ').unwrap();
                let n: usize = rest.split(['[', ']']).nth(1).unwrap().parse().unwrap();
                n * if ty == "float16_t" { 2 } else { 4 }
            })
            .sum();
        assert_eq!(declared, plan.workgroup_bytes, "{arch}");
        assert!(plan.workgroup_bytes <= budget, "{arch}");
        plan
    };
    // 64 wide: 64 rows in about 21 KiB (the 1 KiB is the driver's reserve per workgroup)
    let b = held("freq(8) | mlp(64x4, relu)", None);
    assert_eq!(b.rows, 64);
    assert!(
        2 * (b.workgroup_bytes + 1024) <= budget,
        "{}",
        b.workgroup_bytes
    );
    // 128 wide: 64 rows in about 39 KiB; 32 rows (W staged in halves) where asked
    let d = held("freq(8) | mlp(128x4, relu)", None);
    assert_eq!(d.rows, 64);
    let d32 = held("freq(8) | mlp(128x4, relu)", Some(32));
    assert_eq!(d32.rows, 32);
    assert!(d32.workgroup_bytes < d.workgroup_bytes);
}

/// GLSL coop-compute with NVIDIA's conversions and f16 accumulation in 48 KiB (what
/// `eval` and `bench` run on the H200).
fn conversions() -> Options {
    Options {
        target: Target::Glsl,
        workgroup_memory: 48 * 1024,
        rows_acc16: true,
        rows_convert: true,
        ..opts(Form::CoopCompute, Precision::F32)
    }
}

#[test]
fn weights_held_by_default_only_where_they_pay() {
    let conv = conversions();
    let by_default =
        |arch: &str, o: &Options| nshade_shader::coop::hold_by_default(&model(arch, 2, 3), o);
    // seed #3: 12 blocks of 16 x 16 weights; 32x4: 16 (the limit); 32x5: 20
    assert!(by_default(ARCHS[0].0, &conv));
    assert!(by_default(
        "freq(3) | mlp(32x4, leaky_relu, sigmoid)",
        &conv
    ));
    assert!(!by_default(
        "freq(3) | mlp(32x5, leaky_relu, sigmoid)",
        &conv
    ));
    // grids (their tables come from the buffer), 64 wide, and without the conversions,
    // held weights, texture input and output, or another target: never
    assert!(!by_default(ARCHS[7].0, &conv));
    assert!(!by_default(ARCHS[1].0, &conv));
    for o in [
        Options {
            rows_convert: false,
            ..conv.clone()
        },
        Options {
            rows_stationary: true,
            ..conv.clone()
        },
        Options {
            texture_io: true,
            ..conv.clone()
        },
        Options {
            target: Target::Wgsl,
            ..conv.clone()
        },
    ] {
        assert!(!by_default(ARCHS[0].0, &o));
    }
    // where it holds, the kernel says so in its header and fits the same plan's budget
    let m = model(ARCHS[0].0, 2, 3);
    let held = Options {
        rows_hold: true,
        ..conv.clone()
    };
    let plan = nshade_shader::coop::plan_for(&m, &held).unwrap();
    assert!(plan.workgroup_bytes <= 48 * 1024);
    let src = export(&m, &held).unwrap().into_text().unwrap();
    assert!(src.contains("holds it for all its rows"), "{src}");
    assert!(
        src.contains("the last layer's outputs, rounded to f16, are written over it"),
        "{src}"
    );
    // ... in rows of 24 f16 (48 bytes: 8 rows of a subgroup's stores in distinct banks)
    assert!(src.contains("rows of 24)"), "{src}");
    assert_eq!(plan.sx, 24);
    let unheld = export(&m, &conv).unwrap().into_text().unwrap();
    assert!(!unheld.contains("holds it for all its rows"), "{unheld}");
}

#[test]
fn conversions_take_the_subgroup_kernel_with_x_one_block_where_it_pays() {
    use nshade_shader::coop::plan_for;
    let conv = conversions();
    let b = model("freq(8) | mlp(64x4, relu)", 2, 3);
    // B with the conversions: the subgroup kernel at (12, 2), weights packed (the last
    // layer's 3 real rows of 64 + 8 f16 first, its padding rows the next ones; the four
    // 64-output layers side by side in rows of 32 + 3 * 64 + 8 f16: 30 KB) beside 12
    // subgroups' X of 16 rows, the outputs over X
    let p = plan_for(&b, &conv).unwrap();
    assert_eq!((p.workgroup_size, p.blocks, p.output_groups), (384, 2, 0));
    assert!(p.x_one_block && p.outputs_over_x);
    let strides: Vec<usize> = p.layers.iter().map(|l| l.stride).collect();
    assert_eq!(strides, [232, 232, 232, 232, 72]);
    let offsets: Vec<usize> = p.layers.iter().map(|l| l.staged).collect();
    assert_eq!(offsets, [216, 216 + 32, 216 + 96, 216 + 160, 0]);
    assert!(p.layers.iter().all(|l| !l.blocked));
    let trimmed: Vec<bool> = p.layers.iter().map(|l| l.trimmed).collect();
    assert_eq!(trimmed, [false, false, false, false, true]);
    assert_eq!(p.weights_len, 3 * 72 + 64 * 232);
    // 14 subgroups fit beside them (12 did before the last layer was trimmed)
    let p14 = plan_for(
        &b,
        &Options {
            rows_shape: Some((14, 2)),
            ..conv.clone()
        },
    )
    .unwrap();
    assert_eq!(p14.workgroup_size, 14 * 32);
    assert!(p14.workgroup_bytes <= 48 * 1024, "{p14:?}");
    // in skewed rows of their own (35 KB) 12 subgroups do not fit: 8 do
    let rows = Options {
        rows_layout: Some(nshade_shader::StagedLayout::Rows),
        ..conv.clone()
    };
    let pr = plan_for(&b, &rows).unwrap();
    assert_eq!(pr.workgroup_size, 256);
    assert!(pr.layers.iter().all(|l| l.stride == l.in_p + 8));
    assert_eq!(p.x_len, 16 * p.sx);
    assert_eq!(p.sx, 40);
    assert!(p.workgroup_bytes <= 48 * 1024);
    // X for both blocks would not fit
    let whole = Options {
        rows_whole_x: true,
        ..conv.clone()
    };
    let pw = plan_for(&b, &whole).unwrap();
    assert!(!pw.x_one_block && pw.workgroup_size < 256, "{pw:?}");
    // at (4, 2) both blocks fit (one workgroup per multiprocessor either way): whole X
    let at = |shape| Options {
        rows_shape: Some(shape),
        ..conv.clone()
    };
    let p42 = plan_for(&b, &at((4, 2))).unwrap();
    assert!(!p42.x_one_block && p42.x_len == 32 * p42.sx);
    // the hash-grid network at (6, 2): one block lets two workgroups be resident
    let c = model(
        "hashgrid(levels=16, features=2, log2_size=18, base=16, scale=1.5) | mlp(64x2, relu)",
        2,
        3,
    );
    let pc = plan_for(&c, &conv).unwrap();
    assert_eq!((pc.workgroup_size, pc.blocks), (192, 2));
    assert!(pc.x_one_block && pc.workgroup_bytes <= 24 * 1024, "{pc:?}");
    // seed #3's held kernel is resident twice with X for both blocks: whole X
    let a = model(ARCHS[0].0, 2, 3);
    let held = nshade_shader::coop::with_default_hold(&a, conv.clone());
    assert!(held.rows_hold);
    let pa = plan_for(&a, &held).unwrap();
    assert!(!pa.x_one_block && pa.workgroup_bytes <= 24 * 1024, "{pa:?}");
    // without the conversions B keeps the kernel of held weights
    let portable = Options {
        rows_convert: false,
        ..conv.clone()
    };
    assert!(plan_for(&b, &portable).unwrap().output_groups > 0);
    // weights in 16 x 16 blocks where asked: 512 contiguous bytes each, no skew
    let blocked = Options {
        rows_layout: Some(nshade_shader::StagedLayout::Blocked),
        ..conv.clone()
    };
    let pb = plan_for(&b, &blocked).unwrap();
    assert!(pb.layers.iter().all(|l| l.blocked && l.stride == 16));
    assert_eq!(pb.weights_len, 64 * 32 + 3 * 64 * 64 + 16 * 64);
    let src = export(&b, &blocked).unwrap().into_text().unwrap();
    assert!(src.contains("in 16 x 16 blocks of 256 f16"), "{src}");
    // the kernel stages and loads 16 rows of X at a time, one block after the other
    let src = export(&b, &conv).unwrap().into_text().unwrap();
    assert!(src.contains("32 rows, 16 at a time,"), "{src}");
    assert_eq!(src.matches("if (r / 16u == ").count(), 2, "{src}");
    assert_eq!(src.matches("(r0 + 16u)").count(), 2, "{src}");
}

/// `freq(8) | mlp(128x4, relu)`: 110 KiB of f16 weights fit neither staged nor held in
/// 48 KiB; from an f16 buffer with the conversions each layer is staged in turn per tile,
/// read a layer ahead into registers 16 bytes at a time.
#[test]
fn weights_that_do_not_fit_stream_a_layer_at_a_time() {
    use nshade_shader::coop::plan_for;
    let f16 = Options {
        precision: Precision::F16,
        ..conversions()
    };
    let d = model("freq(8) | mlp(128x4, relu)", 2, 3);
    let p = plan_for(&d, &f16).unwrap();
    assert!(p.streamed && p.outputs_over_x && p.x_one_block, "{p:?}");
    assert_eq!((p.workgroup_size, p.blocks, p.output_groups), (256, 2, 0));
    // one region for the largest layer (128 rows of 128 + 8 f16), every layer at 0 in
    // skewed rows of its own; the hidden biases as f16, the last layer's as f32
    assert!(
        p.layers
            .iter()
            .all(|l| l.staged == 0 && l.stride == l.in_p + 8)
    );
    assert_eq!(p.weights_len, 128 * 136);
    assert_eq!(p.biases_len, 16);
    assert_eq!(
        p.workgroup_bytes,
        128 * 136 * 2 + 4 * 128 * 2 + 16 * 4 + 8 * 16 * 40 * 2
    );
    assert!(p.workgroup_bytes <= 48 * 1024);
    let src = export(&d, &f16).unwrap().into_text().unwrap();
    // the buffer bound again as uvec4; two barriers per layer and tile, one after the
    // biases; each layer's chunks read from its weights' offset / 8 (layer 1 at 4224)
    assert!(src.contains("buffer nshade_ParamsV { uvec4 nshade_paramsv[]; }"));
    assert_eq!(src.matches("barrier();").count(), 1 + 2 * 5, "{src}");
    assert!(src.contains("nshade_paramsv[528u + q / 16u * 16u + q % 16u]"));
    assert!(src.contains("each layer's weights are staged per tile, in turn"));
    // an f32 buffer, a first layer of 3 inputs (rows not 16 bytes), held weights asked
    // for, or no conversions: not streamed (the kernel of held weights)
    let odd = model("mlp(128x4, relu)", 3, 3);
    for (m, o) in [
        (&d, conversions()),
        (&odd, f16.clone()),
        (
            &d,
            Options {
                rows_convert: false,
                ..f16.clone()
            },
        ),
    ] {
        let q = plan_for(m, &o).unwrap();
        assert!(!q.streamed && q.output_groups > 0, "{q:?}");
    }
    let held = Options {
        rows_hold: true,
        ..f16.clone()
    };
    assert!(!plan_for(&d, &held).unwrap().streamed);
    // B's weights fit staged: never streamed
    let b = model("freq(8) | mlp(64x4, relu)", 2, 3);
    assert!(!plan_for(&b, &f16).unwrap().streamed);
    // in two parts of 64 outputs (the last layer's 16 in one) at (4, 2): 23 616 bytes, so
    // two workgroups are resident; 4 barriers per 128-output layer
    let halves = Options {
        rows_stream: Some(2),
        rows_shape: Some((4, 2)),
        ..f16.clone()
    };
    let p2 = plan_for(&d, &halves).unwrap();
    assert!(p2.streamed && p2.stream_parts == 2);
    assert_eq!(p2.weights_len, 64 * 136);
    assert_eq!(
        p2.workgroup_bytes,
        64 * 136 * 2 + 4 * 128 * 2 + 16 * 4 + 4 * 16 * 40 * 2
    );
    assert!(p2.workgroup_bytes <= 24 * 1024);
    let src2 = export(&d, &halves).unwrap().into_text().unwrap();
    assert_eq!(
        src2.matches("barrier();").count(),
        1 + 2 * (4 * 2 + 1),
        "{src2}"
    );
    // layer 1's second half: rows 64.. of its weights (4224 / 8 + 64 * 16)
    assert!(
        src2.contains("nshade_paramsv[1552u + q / 16u * 16u + q % 16u]"),
        "{src2}"
    );
    // a 192-wide mlp: its layers fit only in four parts beside 8 subgroups' X
    let w192 = model("freq(8) | mlp(192x3, relu)", 2, 3);
    let p4 = plan_for(&w192, &f16).unwrap();
    assert!(p4.streamed && p4.stream_parts == 4, "{p4:?}");
    assert_eq!((p4.workgroup_size, p4.blocks), (256, 2));
    assert_eq!(p4.weights_len, 48 * 200);
    // B streamed where asked, though its weights fit
    let bs = Options {
        rows_stream: Some(1),
        ..f16.clone()
    };
    assert!(plan_for(&b, &bs).unwrap().streamed);
}

#[test]
fn packed_weights_are_disjoint_conflict_free_and_smaller() {
    use nshade_shader::StagedLayout;
    use nshade_shader::coop::plan_for;
    let mut archs: Vec<(&str, usize, usize)> = ARCHS.to_vec();
    archs.extend([
        // every layer 16 outputs wide but the last: one shared row for all but it
        ("freq(2) | mlp(16x3, relu)", 2, 3),
        ("mlp(48x3, relu, sigmoid)", 3, 3),
        ("freq(8) | mlp(64x4, relu)", 2, 20),
    ]);
    let (mut shared_rows, mut trimmed) = (0, 0);
    for (arch, i, o) in archs {
        let m = model(arch, i, o);
        for convert in [false, true] {
            let at = |layout| Options {
                target: Target::Glsl,
                // room for both layouts of every network: the layout is what is tested
                workgroup_memory: 96 * 1024,
                rows_acc16: true,
                rows_convert: convert,
                rows_shape: Some((2, 2)),
                rows_layout: Some(layout),
                ..opts(Form::CoopCompute, Precision::F32)
            };
            let what = format!("{arch} convert {convert}");
            let (Ok(p), Ok(r)) = (
                plan_for(&m, &at(StagedLayout::Packed)),
                plan_for(&m, &at(StagedLayout::Rows)),
            ) else {
                panic!("{what}: (2, 2) does not fit");
            };
            assert_eq!(p.layers.len(), r.layers.len(), "{what}");
            // no larger than rows of their own, and smaller wherever two layers share rows
            assert!(p.weights_len <= r.weights_len, "{what}");
            let mut owner = vec![usize::MAX; p.weights_len];
            for (k, l) in p.layers.iter().enumerate() {
                // rows 8 f16 more than a multiple of 16: a B load's 8 columns of 32 bytes
                // start in distinct 16-byte bank groups
                assert_eq!(l.stride % 16, 8, "{what} layer {k}");
                assert!(!l.blocked && !l.direct, "{what} layer {k}");
                // side by side with the layer before: the same outputs, the next columns
                if k > 0 && p.layers[k - 1].staged + p.layers[k - 1].in_p == l.staged {
                    shared_rows += 1;
                    assert_eq!(p.layers[k - 1].out_p, l.out_p, "{what} layer {k}");
                    assert_eq!(p.layers[k - 1].stride, l.stride, "{what} layer {k}");
                }
                let starts: std::collections::BTreeSet<usize> = (0..8)
                    .map(|j| (l.staged + j * l.stride) * 2 % 128 / 16)
                    .collect();
                assert_eq!(starts.len(), 8, "{what} layer {k}");
                // the B loads' window of out_p rows inside the array, also where trimmed
                assert!(
                    l.staged + (l.out_p - 1) * l.stride + l.in_p <= p.weights_len,
                    "{what} layer {k}"
                );
                // only a last layer with padding outputs, placed first, is trimmed
                if l.trimmed {
                    assert_eq!((k + 1, l.staged), (p.layers.len(), 0), "{what}");
                    assert!(l.out_dims < l.out_p, "{what}");
                    trimmed += 1;
                }
                // every element the kernel stages belongs to this layer alone
                for row in 0..if l.trimmed { l.out_dims } else { l.out_p } {
                    for col in 0..l.in_p {
                        let e = l.staged + row * l.stride + col;
                        assert!(e < p.weights_len, "{what} layer {k}");
                        assert_eq!(
                            owner[e],
                            usize::MAX,
                            "{what} layer {k} overlaps {}",
                            owner[e]
                        );
                        owner[e] = k;
                    }
                }
            }
            if p.weights_len < r.weights_len {
                assert!(p.workgroup_bytes < r.workgroup_bytes, "{what}");
            }
        }
    }
    assert!(shared_rows >= 10, "only {shared_rows} layers share rows");
    assert!(trimmed >= 8, "only {trimmed} layers trimmed");
}

/// Where the host counts the multiprocessors, the subgroup kernel is dispatched as one
/// wave of resident workgroups: twice per multiprocessor where a workgroup takes at most
/// half of the 48 KiB that they share on the H200's driver (seed #3's held kernel, the
/// hash-grid network), else once (B staged, D streamed); the plain cap otherwise.
#[test]
fn one_wave_of_resident_workgroups() {
    use nshade_shader::coop::{ROWS_DISPATCH, plan_for, with_default_hold};
    // what `nshade export --coop-conversions` writes (and eval runs on the H200)
    let conv = Options {
        form: Form::CoopCompute,
        weights: WeightMode::Buffer,
        rows_convert: true,
        rows_acc16: true,
        ..Options::new(Target::Glsl)
    };
    let f16 = Options {
        precision: Precision::F16,
        ..conv.clone()
    };
    let cases = [
        ("freq(3) | mlp(32x3, leaky_relu, sigmoid)", &conv, 2),
        ("freq(8) | mlp(64x4, relu)", &conv, 1),
        ("hashgrid(16, 2, 18, 16, 1.5) | mlp(64x2, relu)", &conv, 2),
        ("freq(8) | mlp(128x4, relu)", &f16, 1),
    ];
    let mut held_plans = 0;
    for (arch, opts, resident) in cases {
        let m = model(arch, 2, 3);
        let opts = with_default_hold(&m, opts.clone());
        let plan = plan_for(&m, &opts).unwrap();
        assert!(plan.blocks > 0, "{arch}: {plan:?}");
        assert_eq!(
            plan.resident_per_multiprocessor(),
            resident,
            "{arch}: {} bytes",
            plan.workgroup_bytes
        );
        assert_eq!(plan.max_dispatch_on(Some(132)), 132 * resident, "{arch}");
        assert_eq!(plan.max_dispatch_on(None), ROWS_DISPATCH, "{arch}");
        assert_eq!(plan.max_dispatch_on(Some(0)), ROWS_DISPATCH, "{arch}");
        // (the kernel of held weights keeps the plain cap)
        let held = Options {
            rows_stationary: true,
            ..opts.clone()
        };
        if let Ok(q) = plan_for(&m, &held) {
            held_plans += 1;
            assert!(q.output_groups > 0, "{arch}");
            assert_eq!(q.max_dispatch_on(Some(132)), ROWS_DISPATCH, "{arch}");
        }
        // 1080p: one wave, each workgroup looping over its tiles
        assert_eq!(
            plan.dispatch_capped(1920 * 1080, plan.max_dispatch_on(Some(132))) as usize,
            132 * resident,
            "{arch}"
        );
    }
    assert!(held_plans >= 2, "only {held_plans} kernels of held weights");
}

/// The kernel of native weights (`Options::rows_native`): every layer read from the
/// native buffer (nothing staged but the biases and X, so every network fits, in any
/// shape), its matrices numbered layer by layer (output block, then input block), the
/// header and the pack kernel agreeing on the count, and the dispatch of
/// `NATIVE_PER_MULTIPROCESSOR` workgroups per multiprocessor.
#[test]
fn native_weights_read_every_matrix_from_the_packed_buffer() {
    use nshade_shader::coop::{MAX_DISPATCH, NATIVE_PER_MULTIPROCESSOR, pack_kernel, plan_for};
    let native = Options {
        form: Form::CoopCompute,
        weights: WeightMode::Buffer,
        precision: Precision::F16,
        rows_convert: true,
        rows_acc16: true,
        rows_native: true,
        ..Options::new(Target::Glsl)
    };
    let mut archs: Vec<(&str, usize, usize)> = ARCHS.to_vec();
    archs.extend([
        ("freq(8) | mlp(128x4, relu)", 2, 3),
        ("freq(8) | mlp(192x3, relu)", 3, 3),
    ]);
    for (arch, i, o) in archs {
        let m = model(arch, i, o);
        let plan = plan_for(&m, &native).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(
            plan.native && plan.blocks > 0 && !plan.streamed,
            "{arch}: {plan:?}"
        );
        assert_eq!(plan.weights_len, 0, "{arch}");
        assert!(plan.layers.iter().all(|l| l.direct), "{arch}");
        // the planner's first shape: 4 subgroups of 32 rows
        assert_eq!((plan.workgroup_size, plan.blocks), (128, 2), "{arch}");
        let blocks: usize = plan
            .layers
            .iter()
            .map(|l| l.in_p / 16 * (l.out_p / 16))
            .sum();
        let (pack, total) = pack_kernel(&m, &native).unwrap();
        assert_eq!(total, blocks, "{arch}");
        assert!(
            pack.contains(&format!("dispatch: ({total}, 1, 1)")),
            "{pack}"
        );
        assert!(pack.contains("layout(local_size_x = 32) in;"), "{pack}");
        let src = export(&m, &native).unwrap().into_text().unwrap();
        assert!(
            src.contains(&format!("{total} matrices of 16 x 16 f16")),
            "{arch}"
        );
        assert!(
            src.contains("layout(std430, set = 0, binding = 1) readonly buffer nshade_NativeW"),
            "{arch}"
        );
        // each product group loads its matrix once per lane, from matrix t's 32 uvec4s;
        // the last matrix is the last layer's last block
        assert!(src.contains("nshade_wnat[0u + lane]"), "{arch}");
        assert!(
            src.contains(&format!("nshade_wnat[{}u + lane]", 32 * (total - 1))),
            "{arch}"
        );
        assert!(
            !src.contains(&format!("nshade_wnat[{}u + lane]", 32 * total)),
            "{arch}"
        );
        // no staging of weights: no paramsv, one barrier (after the biases)
        assert!(!src.contains("nshade_paramsv"), "{arch}");
        assert_eq!(src.matches("barrier();").count(), 1, "{arch}");
        // dispatch: 16 per multiprocessor where they are known, else the plain cap
        assert_eq!(
            plan.max_dispatch_on(Some(132)),
            132 * NATIVE_PER_MULTIPROCESSOR,
            "{arch}"
        );
        assert_eq!(plan.max_dispatch_on(None), MAX_DISPATCH, "{arch}");
    }
    // an f32 buffer, or another target, is refused with the flag's name
    for bad in [
        Options {
            precision: Precision::F32,
            ..native.clone()
        },
        Options {
            target: Target::Wgsl,
            rows_acc16: false,
            rows_convert: false,
            ..native.clone()
        },
    ] {
        let e = export(&model(ARCHS[0].0, 2, 3), &bad).unwrap_err();
        assert!(e.to_string().contains("--native-weights"), "{e}");
    }
}
