//! Fixed small models shared by the shader tests: deterministic parameters from a seed,
//! with non-zero biases so every term of the generated code matters.
#![allow(dead_code)]

use nshade_core::model::{InputSpec, Model};
use nshade_core::rng::Pcg32;
use nshade_core::{Arch, Network};

/// (name, architecture, inputs, outputs): together they use every module kind and every
/// activation. The names are the golden files' stems.
pub const MODELS: &[(&str, &str, usize, usize)] = &[
    ("seed3", "freq(3) | mlp(8x2, leaky_relu, sigmoid)", 2, 3),
    (
        "cat_tri",
        "cat(identity, tri(3), freq(1)) | mlp(6x1, tanh, exp)",
        3,
        3,
    ),
    ("swish_sine", "mlp(5x2, swish, sine(3))", 2, 3),
    (
        "softplus",
        "tri(2) | mlp(4x1, softplus, relu) | mlp(3x1, leaky_relu(0.2), none)",
        2,
        2,
    ),
    (
        "mapped",
        "cat(freq(2), identity | mlp(4x1, sine(2), none)) | mlp(6x1, sigmoid)",
        3,
        3,
    ),
    (
        "encodings",
        "cat(pick(0, 1) | freq(2), pick(2) | oneblob(4), sh(2)) | mlp(6x1, relu, sigmoid)",
        3,
        3,
    ),
    (
        "sh4_oneblob",
        "cat(pick(1, 0, 1) | sh(4), oneblob(16, min=-1, max=1)) | mlp(6x1, tanh, sigmoid)",
        2,
        3,
    ),
    // Grids: dense levels (res 4, 8) and hashed ones (16, 32 into 256 entries) in 2-D;
    // dense (3, 6) and hashed (12 into 512) in 3-D over [-1, 1], beside the raw input.
    (
        "hashgrid2",
        "hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2) | mlp(8x1, relu, sigmoid)",
        2,
        3,
    ),
    (
        "hashgrid3",
        "cat(hashgrid(levels=3, features=2, log2_size=9, base=3, scale=2, min=-1, max=1), identity) | mlp(8x1, tanh)",
        3,
        3,
    ),
    (
        "densegrid",
        "densegrid(levels=2, features=3, base=2, scale=3) | mlp(6x1, swish, none)",
        2,
        3,
    ),
];

/// The model `name` of [`MODELS`] with parameters from `seed`.
pub fn model(name: &str) -> Model {
    let &(_, arch, i, o) = MODELS.iter().find(|m| m.0 == name).expect("known model");
    let net = Network::build(&Arch::parse(arch).unwrap(), i, o).unwrap();
    let mut params = net.init_params(42);
    let mut rng = Pcg32::new(7);
    for p in params.iter_mut() {
        *p += 0.2 * (rng.next_f32() - 0.5);
    }
    let inputs = if i == 3 {
        let mut s = InputSpec::xyt();
        if name == "mapped" {
            // A non-trivial input mapping: x·scale + offset applied inside the shader.
            s.scale = vec![0.5, 2.0, 1.5];
            s.offset = vec![0.25, -0.5, 0.0];
        }
        s
    } else {
        let mut s = InputSpec::uv();
        s.names.truncate(i);
        s.domain.truncate(i);
        s.scale.truncate(i);
        s.offset.truncate(i);
        s
    };
    Model::new(net, params, inputs)
}

/// Every model of [`MODELS`].
pub fn all() -> Vec<(&'static str, Model)> {
    MODELS.iter().map(|m| (m.0, model(m.0))).collect()
}

/// `n` random raw input rows in each input's domain (slightly beyond it, too).
pub fn random_inputs(model: &Model, n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Pcg32::new(seed);
    let d = model.network.in_dims;
    (0..n * d)
        .map(|k| {
            let [lo, hi] = model.inputs.domain[k % d];
            lo - 0.1 + (hi - lo + 0.2) * rng.next_f32()
        })
        .collect()
}

/// Whether `model` can have a full-screen entry point (2 or 3 inputs, 3 outputs).
pub fn can_fragment(model: &Model) -> bool {
    model.network.out_dims == 3 && (2..=3).contains(&model.network.in_dims)
}

/// The path of an external tool, or `None` with a loud notice. Under `CI=true` a missing
/// tool fails the test: CI installs every tool the tests use.
pub fn tool(name: &str, package: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true but `{name}` is not installed (install {package})");
        }
        eprintln!("\n*** SKIPPING: `{name}` not found (install {package}) ***\n");
    }
    found
}

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("nshade-shader-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `cmd`; panics with its output and the source when it fails.
pub fn run_ok(cmd: &mut std::process::Command, what: &str, source: &str) {
    let out = cmd.output().expect("the tool starts");
    if !out.status.success() {
        panic!(
            "{what} failed:\n{}{}\n--- source ---\n{source}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
