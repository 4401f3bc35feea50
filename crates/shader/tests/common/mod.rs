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

/// The path of an external tool, or `None` after a counted [`skip`] (which fails the
/// test under `CI=true`: CI installs every tool the tests use).
pub fn tool(name: &str, package: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        skip(&format!("`{name}` not found (install {package})"));
    }
    found
}

/// `CI=true`: every skip is a failure there.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

static SKIPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Records that a test could not check what it claims (no adapter, no tool, no f16):
/// under `CI=true` it panics; elsewhere it prints a `SKIPPED` line straight to stderr
/// (past the test harness's output capture, so a skipped test does not look like a
/// pass) and counts it; the count is printed again when the test binary exits.
/// The caller returns after it.
pub fn skip(what: &str) {
    use std::io::Write;
    if ci() {
        panic!("CI=true, so this cannot be skipped: {what}");
    }
    let n = SKIPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED ({n} in this binary so far): {test}: {what} ***"
    );
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    AT_EXIT.call_once(|| {
        unsafe extern "C" {
            fn atexit(f: extern "C" fn()) -> std::ffi::c_int;
        }
        extern "C" fn report() {
            let n = SKIPS.load(std::sync::atomic::Ordering::SeqCst);
            let _ = writeln!(
                std::io::stderr(),
                "\n*** {n} test(s) SKIPPED in this binary: they passed without checking anything (see the SKIPPED lines above; CI=true makes them fail) ***"
            );
        }
        // SAFETY: atexit from the C library, given a function that only writes to stderr.
        unsafe { atexit(report) };
    });
}

/// The largest |v| of `v`; panics, naming `what` and the index, on NaN or ±∞ (where
/// `f32::max` would silently drop a NaN).
pub fn max_abs(what: &str, v: &[f32]) -> f32 {
    let mut m = 0.0f32;
    for (k, x) in v.iter().enumerate() {
        assert!(x.is_finite(), "{what}: value {k} is {x}");
        m = m.max(x.abs());
    }
    m
}

/// The largest |got − want| with its index; panics, naming `what`, when the lengths
/// differ or either side holds a NaN or ±∞ (a kernel writing NaN must not pass).
pub fn max_abs_diff(what: &str, got: &[f32], want: &[f32]) -> (f32, usize) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} values, expected {}",
        got.len(),
        want.len()
    );
    let mut worst = (0.0f32, 0);
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.is_finite() && w.is_finite(),
            "{what}: value {k}: got {g}, expected {w}"
        );
        let d = (g - w).abs();
        if d > worst.0 {
            worst = (d, k);
        }
    }
    worst
}

/// The largest |got − want| / max(1, |want|) with its index, with the checks of
/// [`max_abs_diff`].
pub fn max_rel_err(what: &str, got: &[f32], want: &[f32]) -> (f32, usize) {
    max_abs_diff(what, got, want);
    let mut worst = (0.0f32, 0);
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let e = (g - w).abs() / w.abs().max(1.0);
        if e > worst.0 {
            worst = (e, k);
        }
    }
    worst
}

/// Asserts |got − want| ≤ tol · max(1, |want|) everywhere (NaN, ±∞ and a length
/// mismatch fail); returns the largest such relative error, for reporting.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) -> f32 {
    let (e, k) = max_rel_err(what, got, want);
    assert!(
        e <= tol,
        "{what}: value {k}: got {} expected {} (relative error {e:e} > {tol:e})",
        got[k],
        want[k]
    );
    e
}

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nshade-shader-{test}"));
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

/// A file name for a generated source's compiled form: FNV-1a (64-bit) of its text, in
/// hex (a key between test runs, not a checksum against tampering).
pub fn source_key(src: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in src.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The options of `--target slang --form coop-compute` at `precision` within `budget`
/// bytes of workgroup memory (what the Slang tests of both crates export).
pub fn slang_coop(precision: nshade_shader::Precision, budget: usize) -> nshade_shader::Options {
    nshade_shader::Options {
        form: nshade_shader::Form::CoopCompute,
        weights: nshade_shader::WeightMode::Buffer,
        precision,
        workgroup_memory: budget,
        ..nshade_shader::Options::new(nshade_shader::Target::Slang)
    }
}
