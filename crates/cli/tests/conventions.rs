//! The coordinate conventions of the exported full-screen shaders, checked numerically:
//! a small (x, y, t) model exported as a ShaderToy tab and as a WGSL `--fragment` pass is
//! rendered by `nshade capture` (the real shader, compiled and drawn on the GPU), and every
//! captured row (x, y, t, r, g, b) is compared with `nshade eval` of the inputs the
//! documentation says the shader feeds the model (docs/shader-export.md, docs/capture.md).
//! Each test also checks that a flipped x or y, or a different t mapping, would be seen.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn nshade(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run nshade")
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A scratch directory for this test process, holding one small (x, y, t) model trained
/// once on the test dataset (sines of x, y and t: not symmetric in any axis).
fn model() -> &'static (PathBuf, tempfile::TempDir) {
    static M: OnceLock<(PathBuf, tempfile::TempDir)> = OnceLock::new();
    M.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        common::make_dataset(&d.path().join("data"), (8, 3), 512);
        ok(
            &nshade(
                &[
                    "train",
                    "--dataset",
                    "data",
                    "--out",
                    "m",
                    "--steps",
                    "300",
                    "--batch",
                    "1024",
                    "--arch",
                    "cat(identity, freq(2)) | mlp(16x2, tanh)",
                    "--backend",
                    "cpu",
                ],
                d.path(),
            ),
            "train",
        );
        (d.path().join("m"), d)
    })
}

/// Captured rows of both splits with the parameter each row's frame was rendered at.
struct Captured {
    rows: Vec<f32>,
    params: Vec<f32>,
}

fn load_capture(ds: &Path) -> Captured {
    let meta: Value =
        serde_json::from_slice(&std::fs::read(ds.join("dataset.json")).unwrap()).unwrap();
    let mut rows = Vec::new();
    let mut params = Vec::new();
    for split in ["train", "validation"] {
        let s = &meta["splits"][split];
        let data = common::read_f32(&ds.join(s["file"].as_str().unwrap()));
        let n = s["rows"].as_u64().unwrap() as usize;
        assert_eq!(data.len(), n * 6, "{split}: rows");
        let frames = s["parameters"].as_array().unwrap();
        assert!(!frames.is_empty() && n.is_multiple_of(frames.len()));
        let per = n / frames.len();
        for p in frames {
            params.extend(std::iter::repeat_n(p.as_f64().unwrap() as f32, per));
        }
        rows.extend(data);
    }
    Captured { rows, params }
}

/// Evaluates the model at `xyt` (rows of three) through `nshade eval`.
fn eval(model: &Path, xyt: &[f32], scratch: &Path) -> Vec<f32> {
    let (input, output) = (scratch.join("xyt.f32"), scratch.join("rgb.f32"));
    common::write_f32(&input, xyt);
    ok(
        &nshade(
            &[
                "eval",
                model.to_str().unwrap(),
                "--input",
                input.to_str().unwrap(),
                "--output",
                output.to_str().unwrap(),
            ],
            scratch,
        ),
        "eval",
    );
    let out = common::read_f32(&output);
    assert_eq!(out.len(), xyt.len(), "eval: one RGB row per input row");
    out
}

/// The model inputs a shader feeds for a captured row and its frame's parameter.
type Inputs<'a> = &'a dyn Fn(&[f32], f32) -> [f32; 3];

/// Compares the captured colours with the model at the documented inputs `expect(row,
/// parameter)` and at each alternative (a convention the shader must not follow): the
/// documented one agrees within `tol`, every alternative differs by far more.
fn check(
    what: &str,
    cap: &Captured,
    scratch: &Path,
    expect: Inputs,
    alternatives: &[(&str, Inputs)],
    tol: f32,
) {
    let (m, _) = model();
    let rgb: Vec<f32> = cap
        .rows
        .chunks_exact(6)
        .flat_map(|r| [r[3], r[4], r[5]])
        .collect();
    assert!(!rgb.is_empty());
    let inputs = |f: Inputs| -> Vec<f32> {
        cap.rows
            .chunks_exact(6)
            .zip(&cap.params)
            .flat_map(|(r, &p)| f(r, p))
            .collect()
    };
    let diff = common::max_abs_diff(&eval(m, &inputs(expect), scratch), &rgb);
    eprintln!("{what}: captured vs eval max |diff| {diff:e}");
    assert!(
        diff <= tol,
        "{what}: the shader does not follow the documented convention (max |diff| {diff})"
    );
    for (name, alt) in alternatives {
        let d = common::max_abs_diff(&eval(m, &inputs(*alt), scratch), &rgb);
        eprintln!("{what}: if {name}: max |diff| {d:e}");
        assert!(
            d > 20.0 * tol,
            "{what}: the test cannot tell the convention from '{name}' ({d} vs {tol})"
        );
    }
}

/// ShaderToy's (x, y, t) from a captured row: the captured x, y (pixel centres, x right,
/// y down: the dataset's orientation, which capture gives ShaderToy's top row) and t from
/// iTime = the capture parameter, swept back and forth over [lo, hi] every 16 s:
/// `lo + (hi − lo)·|fract(iTime/16)·2 − 1|` (computed in f32 as the shader does).
fn shadertoy_t(p: f32) -> f32 {
    let s = p / 16.0;
    let f = s - s.floor();
    -1.0 + 2.0 * (f * 2.0 - 1.0).abs()
}

#[test]
fn shadertoy_tab_renders_the_model_upright_with_the_documented_time_sweep() {
    if common::gpu_or_skip("shadertoy_tab_renders_the_model_upright").is_none() {
        return;
    }
    let (m, _) = model();
    let d = tempfile::tempdir().unwrap();
    let loaded = nshade_core::model::Model::load(m).unwrap();
    assert_eq!(
        loaded.inputs.domain[..3],
        [[-1.0, 1.0]; 3],
        "the sweep below assumes t in [-1, 1]"
    );
    let tab = d.path().join("tab.glsl");
    ok(
        &nshade(
            &[
                "export",
                m.to_str().unwrap(),
                "--target",
                "shadertoy",
                "-o",
                tab.to_str().unwrap(),
            ],
            d.path(),
        ),
        "export shadertoy",
    );
    // iTime over 0..16 s: t falls from 1 to -1 over the first 8 s and rises back over the
    // next 8; frames land on both halves and on the turning points.
    ok(
        &nshade(
            &[
                "capture",
                tab.to_str().unwrap(),
                "--out",
                "ds",
                "--size",
                "32x18",
                "--param-range",
                "0..16",
                "--train-frames",
                "5",
                "--validation-frames",
                "3",
                "--pixels-per-frame",
                "200",
            ],
            d.path(),
        ),
        "capture the tab",
    );
    let cap = load_capture(&d.path().join("ds"));
    check(
        "shadertoy",
        &cap,
        d.path(),
        &|r, p| [r[0], r[1], shadertoy_t(p)],
        &[
            ("y were up", &|r, p| [r[0], -r[1], shadertoy_t(p)]),
            ("x were mirrored", &|r, p| [-r[0], r[1], shadertoy_t(p)]),
            ("t followed iTime linearly over the range", &|r, _| {
                [r[0], r[1], r[2]]
            }),
            ("t rose first", &|r, p| [r[0], r[1], -shadertoy_t(p)]),
            ("pixel corners were sampled", &|r, p| {
                [r[0] - 1.0 / 32.0, r[1] - 1.0 / 18.0, shadertoy_t(p)]
            }),
        ],
        1e-5,
    );
}

#[test]
fn wgsl_fragment_pass_renders_the_model_at_pixel_centres_with_t_from_the_view() {
    if common::gpu_or_skip("wgsl_fragment_pass_renders_the_model_at_pixel_centres").is_none() {
        return;
    }
    let (m, _) = model();
    let d = tempfile::tempdir().unwrap();
    let o = nshade(
        &[
            "export",
            m.to_str().unwrap(),
            "--target",
            "wgsl",
            "--fragment",
        ],
        d.path(),
    );
    let wgsl = ok(&o, "export wgsl --fragment");
    // The pass reads `nshade_view { size, t }` at binding B + 1 (1 by default), while
    // capture binds its `Params { resolution, parameter }` — the same layout for the first
    // 12 bytes — at binding 0: the host's binding choice is the only difference, so move
    // the view to binding 0 and capture draws the pass with size = the target size and
    // t = the capture parameter.
    let decl = "@group(0) @binding(1) var<uniform> nshade_view: nshade_View;";
    assert_eq!(wgsl.matches(decl).count(), 1, "{wgsl}");
    assert!(wgsl.contains("struct nshade_View {\n    size: vec2<f32>,\n    t: f32,\n}"));
    let pass = wgsl.replace(
        decl,
        "@group(0) @binding(0) var<uniform> nshade_view: nshade_View;",
    );
    std::fs::write(d.path().join("pass.wgsl"), pass).unwrap();
    // A range that is not the model's [-1, 1]: t is the parameter itself, not the
    // dataset's normalised t.
    ok(
        &nshade(
            &[
                "capture",
                "pass.wgsl",
                "--out",
                "ds",
                "--size",
                "32x18",
                "--param-range",
                "-0.8..0.9",
                "--train-frames",
                "4",
                "--validation-frames",
                "2",
                "--pixels-per-frame",
                "200",
            ],
            d.path(),
        ),
        "capture the fragment pass",
    );
    let cap = load_capture(&d.path().join("ds"));
    check(
        "wgsl --fragment",
        &cap,
        d.path(),
        &|r, p| [r[0], r[1], p],
        &[
            ("y were up", &|r, p| [r[0], -r[1], p]),
            ("x were mirrored", &|r, p| [-r[0], r[1], p]),
            ("t were normalised to the range", &|r, _| [r[0], r[1], r[2]]),
            ("pixel corners were sampled", &|r, p| {
                [r[0] - 1.0 / 32.0, r[1] - 1.0 / 18.0, p]
            }),
        ],
        1e-5,
    );
}
