//! Fuzzing of shader export with proptest: random small architectures (every module
//! kind, nested), widths, parameters (extreme finite values included), hostile input and
//! output names, conventions and provenance (which loading refuses, but a model built in
//! memory may hold), and random options (target, weights, precision, loops, entry points,
//! prefix, group, binding). Asserts: no panic; every error one line; every WGSL output
//! validates with naga; no output has a line of live code made from a model string, and
//! every header line is printable ASCII without comment delimiters.
//!
//! Cases: `NSHADE_FUZZ_CASES` (default 1000); deterministic unless `NSHADE_FUZZ_SEED` is
//! set. The number of executions is printed (`-- --nocapture`).

use nshade_core::model::{InputSpec, Model};
use nshade_core::{Activation, Arch, Network, arch::GridSpec};
use nshade_shader::{Form, Options, Output, Precision, Target, WeightMode, export};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::sync::atomic::{AtomicUsize, Ordering};

fn runner() -> TestRunner {
    let cases = std::env::var("NSHADE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let seed: u64 = std::env::var("NSHADE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 2000,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    )
}

fn activation() -> impl Strategy<Value = Activation> {
    prop_oneof![
        Just(Activation::None),
        Just(Activation::Relu),
        (-2.0f32..2.0).prop_map(|slope| Activation::LeakyRelu { slope }),
        Just(Activation::Sigmoid),
        Just(Activation::Tanh),
        Just(Activation::Exp),
        Just(Activation::Swish),
        prop_oneof![0.5f32..30.0, -30.0f32..-0.5].prop_map(|w0| Activation::Sine { w0 }),
        Just(Activation::Softplus),
    ]
}

fn mlp(width: u32, layers: u32) -> impl Strategy<Value = Arch> {
    (
        1..=width,
        0..=layers,
        activation(),
        activation(),
        prop::option::of(1u32..6),
    )
        .prop_map(|(width, hidden_layers, hidden, output, out)| Arch::Mlp {
            width,
            hidden_layers,
            hidden,
            output,
            out,
        })
}

fn grid() -> impl Strategy<Value = GridSpec> {
    (
        1u32..4,
        1u32..3,
        4u32..7,
        1u32..5,
        1.0f32..2.5,
        any::<bool>(),
    )
        .prop_map(
            |(levels, features, log2_size, base, scale, signed)| GridSpec {
                levels,
                features,
                log2_size,
                base,
                scale,
                min: if signed { -1.0 } else { 0.0 },
                max: 1.0,
            },
        )
}

fn module() -> impl Strategy<Value = Arch> {
    let leaf = prop_oneof![
        Just(Arch::Identity),
        (1u32..4).prop_map(|octaves| Arch::Freq { octaves }),
        (1u32..4).prop_map(|octaves| Arch::Tri { octaves }),
        (1u32..6, any::<bool>()).prop_map(|(bins, signed)| Arch::Oneblob {
            bins,
            min: if signed { -1.0 } else { 0.0 },
            max: 1.0,
        }),
        (0u32..3).prop_map(|degree| Arch::Sh { degree }),
        (0u32..3).prop_map(|degree| Arch::Chain {
            modules: vec![
                Arch::Pick {
                    indices: vec![0, 0, 0]
                },
                Arch::Sh { degree }
            ],
        }),
        prop::collection::vec(0u32..2, 1..4).prop_map(|indices| Arch::Pick { indices }),
        grid().prop_map(Arch::Hashgrid),
        grid().prop_map(Arch::Densegrid),
        mlp(8, 2),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 2..4).prop_map(|modules| Arch::Chain { modules }),
            prop::collection::vec(inner, 1..4).prop_map(|modules| Arch::Cat { modules }),
        ]
    })
}

/// Strings that would be live code if they were copied into a shader unescaped.
fn hostile_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,4}",
        "\\PC{0,10}",
        Just("u\n*/ #error injected\n/*".to_string()),
        Just("v\\\n#error injected".to_string()),
        Just("w\r#error injected".to_string()),
        Just("x\u{2028}#error injected".to_string()),
        Just("r??/\n#error injected".to_string()),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    arch: Arch,
    inputs: usize,
    outputs: usize,
    seed: u64,
    extreme: Vec<(usize, f32)>,
    names: Vec<String>,
    convention: String,
    target: usize,
    buffer: bool,
    f16: bool,
    loops: bool,
    fragment: bool,
    compute: bool,
    /// `[Differentiable]` (Slang; other targets refuse it in one line).
    differentiable: bool,
    prefix: String,
    group: u32,
    binding: u32,
    /// Make the options a valid combination for the target (most cases), so that most
    /// cases reach the writers.
    sane: bool,
}

fn case() -> impl Strategy<Value = Case> {
    let extreme = prop::collection::vec(
        (
            any::<usize>(),
            prop_oneof![
                Just(3.0e38f32),
                Just(-3.0e38),
                Just(1.0e-45),
                Just(-0.0),
                Just(65504.0),
                Just(70000.0),
                -1.0e6f32..1.0e6
            ],
        ),
        0..3,
    );
    (
        (
            module(),
            mlp(6, 1).prop_map(|mut m| {
                // the head gives the model's outputs
                if let Arch::Mlp { out, .. } = &mut m {
                    *out = None;
                }
                m
            }),
            1usize..=4,
            1usize..=4,
            any::<u64>(),
            extreme,
        ),
        (prop::collection::vec(hostile_name(), 8), hostile_name()),
        (
            0..Target::ALL.len(),
            any::<bool>(),
            prop::bool::weighted(0.25),
            prop::bool::weighted(0.25),
        ),
        (
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.2),
        ),
        (
            prop_oneof![
                8 => Just("nshade_".to_string()),
                4 => "[a-z][a-z0-9]{0,6}_?",
                1 => "\\PC{0,6}",
                1 => Just("gl_x".to_string())
            ],
            prop_oneof![8 => Just(0u32), 4 => 0u32..8, 1 => any::<u32>()],
            prop_oneof![8 => Just(0u32), 4 => 0u32..8, 1 => any::<u32>()],
            prop::bool::weighted(0.8),
        ),
    )
        .prop_map(
            |(
                (body, head, inputs, outputs, seed, extreme),
                (names, convention),
                (target, buffer, f16, loops),
                (fragment, compute, differentiable),
                (prefix, group, binding, sane),
            )| Case {
                arch: Arch::Chain {
                    modules: vec![body, head],
                },
                inputs,
                outputs,
                seed,
                extreme,
                names,
                convention,
                target,
                buffer,
                f16,
                loops,
                fragment,
                compute,
                differentiable,
                prefix,
                group,
                binding,
                sane,
            },
        )
}

fn one_line(what: &str, msg: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        !msg.chars().any(nshade_core::limits::is_unsafe_char),
        "{what}: error is not one clean line: {msg:?}"
    );
    Ok(())
}

fn check_source(src: &str) -> Result<(), TestCaseError> {
    for line in src.lines() {
        prop_assert!(
            !line.trim_start().starts_with("#error"),
            "live injected code: {line}"
        );
        prop_assert!(!line.ends_with('\\'), "a line continues: {line}");
    }
    let breaks = ['\r', '\u{85}', '\u{2028}', '\u{2029}'];
    prop_assert!(!src.contains(breaks), "a line break other than \\n");
    for l in src.lines().filter(|l| l.starts_with("//")) {
        let body = &l[2..];
        prop_assert!(
            body.chars().all(|c| (' '..='~').contains(&c)),
            "non-printable comment {l:?}"
        );
        for bad in ["*/", "/*", "//", "??"] {
            prop_assert!(!body.contains(bad), "{bad} in comment {l:?}");
        }
    }
    Ok(())
}

#[test]
fn fuzz_export() {
    let runs = AtomicUsize::new(0);
    let built = AtomicUsize::new(0);
    let exported = AtomicUsize::new(0);
    let result = runner().run(&case(), |c| {
        runs.fetch_add(1, Ordering::Relaxed);
        let Ok(net) = Network::build(&c.arch, c.inputs, c.outputs) else {
            return Ok(());
        };
        if net.param_count > 20_000 {
            return Ok(());
        }
        built.fetch_add(1, Ordering::Relaxed);
        let mut params = net.init_params(c.seed);
        for (i, v) in &c.extreme {
            if !params.is_empty() {
                let n = params.len();
                params[i % n] = *v;
            }
        }
        let mut inputs = InputSpec::xyt();
        inputs.names = c.names[..c.inputs].to_vec();
        inputs.domain = vec![[-1.0, 1.0]; c.inputs];
        inputs.scale = vec![1.0; c.inputs];
        inputs.offset = vec![0.0; c.inputs];
        inputs.convention = c.convention.clone();
        let mut model = Model::new(net, params, inputs);
        model.outputs = c.names[4..4 + c.outputs].to_vec();
        model
            .training
            .insert("note".into(), serde_json::json!(c.convention));
        let target = Target::ALL[c.target];
        let mut opts = Options {
            target,
            weights: if c.buffer {
                WeightMode::Buffer
            } else {
                WeightMode::Baked
            },
            precision: if c.f16 {
                Precision::F16
            } else {
                Precision::F32
            },
            prefix: c.prefix.clone(),
            fragment: c.fragment,
            compute: c.compute,
            loops: c.loops,
            group: c.group,
            binding: c.binding,
            differentiable: c.differentiable,
            // the top bits of the seed pick the form (function half of the time)
            form: Form::ALL[(c.seed >> 62) as usize % 3],
            // 16 KiB to 48 KiB: small budgets give small tiles or a refusal
            workgroup_memory: 16384 + (c.seed >> 40) as usize % 32768,
            // texture input and output a quarter of the time (refused outside the tiled
            // forms in wgsl and spirv)
            texture_io: (c.seed >> 30) % 4 == 0,
            // the weights in a uniform block a quarter of the time
            uniform_weights: (c.seed >> 5) % 4 == 0,
            // GLSL coop-compute f16: every layer it can read in place, an eighth of the time
            rows_direct: (c.seed >> 9) % 8 == 0,
            // a buffer of 4-vectors a quarter of the time (WGSL, GLSL, HLSL and Slang buffer functions only)
            vec4_buffer: (c.seed >> 7) % 4 == 0,
            // the measurement variants of the GLSL kernel now and then (refused elsewhere)
            rows_split: [
                nshade_shader::RowsSplit::Whole,
                nshade_shader::RowsSplit::Whole,
                nshade_shader::RowsSplit::Whole,
                nshade_shader::RowsSplit::Whole,
                nshade_shader::RowsSplit::Whole,
                nshade_shader::RowsSplit::EncodeOnly,
                nshade_shader::RowsSplit::NoEncode,
                nshade_shader::RowsSplit::NoActivation,
                nshade_shader::RowsSplit::OneWeight,
                nshade_shader::RowsSplit::NoBias,
            ][(c.seed >> 12) as usize % 10],
            // the GLSL kernel's f16 accumulation half of the time, weights held in
            // registers an eighth (refused elsewhere)
            rows_acc16: (c.seed >> 24) % 2 == 0,
            rows_hold: (c.seed >> 25) % 8 == 0,
            // the GLSL kernel with NVIDIA's conversions a quarter of the time
            rows_convert: (c.seed >> 37) % 4 == 0,
            // the kernel of held weights an eighth of the time (refused outside GLSL
            // coop-compute)
            rows_stationary: (c.seed >> 27) % 8 == 0,
            // its tiles of 32 rows a quarter of those times
            held_rows: ((c.seed >> 33) % 4 == 0).then_some(32),
            // the GLSL kernel's staged weights packed, in rows or in blocks a quarter of
            // the time each, else the planner's choice
            rows_layout: [
                None,
                Some(nshade_shader::StagedLayout::Packed),
                Some(nshade_shader::StagedLayout::Rows),
                Some(nshade_shader::StagedLayout::Blocked),
            ][(c.seed >> 43) as usize % 4],
            // X for all of a subgroup's rows a quarter of the time
            rows_whole_x: (c.seed >> 45) % 4 == 0,
            // the GLSL kernel's weights streamed a layer at a time (from an f16 buffer
            // with the conversions; ignored elsewhere), whole or in two parts, a quarter
            // of the time
            rows_stream: [None, None, None, None, None, None, Some(1), Some(2)]
                [(c.seed >> 47) as usize % 8],
            // X and the staged weights as f16 arrays or uvec4s an eighth of the time each,
            // else the default
            rows_narrow: [None, None, None, None, None, None, Some(true), Some(false)]
                [(c.seed >> 50) as usize % 8],
            // the weights from the native buffer an eighth of the time (GLSL coop-compute
            // f16 only; refused elsewhere)
            rows_native: (c.seed >> 53) % 8 == 0,
            // the GLSL kernel: half of the time the default (the subgroup-private kernel
            // in the first shape that fits), else the shared-tile one or one of six shapes
            // several points at once three times in eight, a count it refuses one in eight
            // (WGSL, SPIR-V, MSL and GLSL 450 functions of networks without grids only)
            points: [1, 1, 1, 1, 2, 4, 4, 3][(c.seed >> 16) as usize % 8],
            rows_shape: ((c.seed >> 20) % 2 == 0).then(|| {
                [(0, 0), (4, 2), (2, 2), (4, 1), (2, 1), (1, 2), (1, 1)]
                    [(c.seed >> 10) as usize % 7]
            }),
        };
        if c.sane {
            opts.differentiable &= target == Target::Slang;
            opts.loops &= opts.weights == WeightMode::Buffer;
            opts.compute &= matches!(target, Target::Wgsl | Target::SpirV);
            if !target.supports_f16() {
                opts.precision = Precision::F32;
            }
            if target == Target::ShaderToy {
                opts.weights = WeightMode::Baked;
                opts.loops = false;
            }
            opts.fragment &= c.outputs == 3 && (2..=3).contains(&c.inputs);
            if nshade_shader::check_prefix(&opts.prefix).is_err() {
                opts.prefix = "nshade_".into();
            }
            opts.binding = opts.binding.min(nshade_shader::MAX_BINDING);
            if opts.form.is_tiled() {
                if matches!(target, Target::Wgsl | Target::SpirV) {
                    opts.weights = WeightMode::Buffer;
                    opts.fragment = false;
                    opts.loops = false;
                } else {
                    opts.form = Form::Function;
                }
            }
            opts.texture_io &= opts.form.is_tiled() && c.outputs <= 4;
            opts.uniform_weights &= opts.weights == WeightMode::Buffer
                && !opts.form.is_tiled()
                && !matches!(target, Target::GlslEs | Target::ShaderToy);
            if target != Target::Glsl || opts.form != Form::CoopCompute || opts.texture_io {
                opts.rows_split = nshade_shader::RowsSplit::Whole;
                opts.rows_acc16 = false;
                opts.rows_hold = false;
                opts.rows_stationary = false;
                opts.rows_convert = false;
            }
            opts.vec4_buffer &= matches!(
                target,
                Target::Wgsl | Target::Glsl | Target::Hlsl | Target::Slang
            ) && opts.weights == WeightMode::Buffer
                && !opts.form.is_tiled()
                && !opts.uniform_weights;
            if opts.points == 3
                || !matches!(
                    target,
                    Target::Wgsl | Target::SpirV | Target::Msl | Target::Glsl
                )
                || opts.form.is_tiled()
                || opts.fragment
                || model.network.param_count > model.network.dense_count
            {
                opts.points = 1;
            }
            opts.rows_direct &= target == Target::Glsl
                && opts.form == Form::CoopCompute
                && opts.precision == Precision::F16;
        }
        match export(&model, &opts) {
            Err(e) => one_line("export", &e.to_string())?,
            Ok(out) => {
                exported.fetch_add(1, Ordering::Relaxed);
                if let Output::Text(src) = out {
                    check_source(&src)?;
                    let valid = if opts.form.is_tiled() {
                        nshade_shader::validate_coop_wgsl(&src)
                    } else {
                        nshade_shader::validate_wgsl(&src)
                    };
                    if target == Target::Wgsl
                        && let Err(e) = valid
                    {
                        prop_assert!(false, "generated WGSL does not validate: {e}\n{src}");
                    }
                }
            }
        }
        Ok(())
    });
    eprintln!(
        "fuzz export: {} executions ({} networks built, {} exported, the rest refused with one-line errors), {}",
        runs.load(Ordering::Relaxed),
        built.load(Ordering::Relaxed),
        exported.load(Ordering::Relaxed),
        if result.is_ok() {
            "none crashed"
        } else {
            "FAILED"
        }
    );
    if let Err(e) = result {
        panic!("fuzz export: {e}");
    }
}
