//! Captures over several parameters (`--param NAME=A..B`, schema-2 datasets) through the
//! real binary on the adapter wgpu finds (lavapipe without a GPU): every captured row
//! against the colour computed on the CPU, training on the capture against a mean
//! predictor, distill with two parameters, ShaderToy inputs driven by name, and the
//! errors of bad `--param` flags.

mod common;

use common::ok;
use nshade_core::dataset::Dataset;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn nshade(args: &[&str]) -> Output {
    let xdg = std::env::temp_dir().join(format!("nshade-xdg-{}", std::process::id()));
    std::fs::create_dir_all(&xdg).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .env("XDG_RUNTIME_DIR", xdg)
        .output()
        .expect("run nshade")
}

/// Asserts the exit code and that stderr is one `error:` line; returns it.
fn fails(o: &Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    err.trim_end().to_string()
}

/// The colour of `two_params.wgsl`, in f64.
fn expected(x: f32, y: f32, light: f32, k: f32) -> [f64; 3] {
    let (x, y, l, k) = (x as f64, y as f64, light as f64, k as f64);
    [
        0.5 + 0.3 * (x * l.cos() + y * l.sin()),
        0.5 + 0.25 * (2.0 * x + k).sin(),
        0.5 + 0.25 * k + 0.2 * y * l.cos(),
    ]
}

/// The largest |a − b| over the pairs, NaN if either side holds a NaN.
fn max_err(pairs: impl Iterator<Item = (f64, f64)>) -> f64 {
    pairs.fold(0.0, |m: f64, (a, b)| {
        let d = (a - b).abs();
        if d.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(d)
        }
    })
}

fn capture_two(out: &Path) -> String {
    ok(&nshade(&[
        "capture",
        data("two_params.wgsl").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--size",
        "48x32",
        "--param",
        "light=0..3",
        "--param",
        "k=-1..1",
        "--train-frames",
        "24",
        "--validation-frames",
        "6",
        "--pixels-per-frame",
        "600",
        "--seed",
        "77",
    ]))
}

#[test]
fn two_parameters_are_captured_as_the_cpu_computes_them_and_train_beats_the_mean() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("ds");
    let stdout = capture_two(&d);
    assert!(
        stdout.contains("over light=0..3, k=-1..1 (schema 2): 14400 training rows (24 frames), 3600 validation rows (6 frames)"),
        "{stdout}"
    );
    let ds = Dataset::load(&d).unwrap();
    assert_eq!(ds.schema, 2);
    let names: Vec<&str> = ds.inputs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["x", "y", "light", "k"]);
    assert_eq!(ds.output_names(), ["r", "g", "b"]);
    assert_eq!(ds.inputs[2].range, [0.0, 3.0]);
    assert_eq!(ds.inputs[3].range, [-1.0, 1.0]);
    assert_eq!(ds.manifest["shaderInputs"]["k"], "params.values[0].y");
    // Every row's colour is the shader's function of its own (x, y, light, k).
    for rows in [&ds.train, &ds.validation] {
        let e = max_err(rows.data.chunks_exact(7).flat_map(|r| {
            let want = expected(r[0], r[1], r[2], r[3]);
            (0..3).map(move |c| (r[4 + c] as f64, want[c]))
        }));
        assert!(e < 2e-5, "max error {e}");
    }
    // Validation parameter values are never training values, in either parameter.
    let vectors = |info: &nshade_core::dataset::SplitInfo| -> Vec<[f32; 2]> {
        info.parameters.chunks(2).map(|p| [p[0], p[1]]).collect()
    };
    let (tv, vv) = (vectors(&ds.train_info), vectors(&ds.validation_info));
    assert_eq!((tv.len(), vv.len()), (24, 6));
    for j in 0..2 {
        assert!(vv.iter().all(|v| tv.iter().all(|t| t[j] != v[j])));
    }
    // Both parameters vary together, not one at a time.
    let distinct = |j: usize| {
        let mut v: Vec<u32> = tv.iter().map(|p| p[j].to_bits()).collect();
        v.sort();
        v.dedup();
        v.len()
    };
    assert_eq!((distinct(0), distinct(1)), (24, 24));
    // The same seed captures the same bytes; another seed other parameter vectors.
    let again = tmp.path().join("again");
    capture_two(&again);
    for f in ["dataset.json", "train.f32", "validation.f32"] {
        assert_eq!(
            std::fs::read(d.join(f)).unwrap(),
            std::fs::read(again.join(f)).unwrap(),
            "{f}"
        );
    }

    // Training on it through the real binary beats a mean predictor by far.
    let m = tmp.path().join("model");
    ok(&nshade(&[
        "train",
        "--dataset",
        d.to_str().unwrap(),
        "--out",
        m.to_str().unwrap(),
        "--arch",
        "cat(identity, freq(2)) | mlp(32x2, swish)",
        "--steps",
        "1500",
        "--batch",
        "1024",
        "--backend",
        "cpu",
    ]));
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.join("metrics.json")).unwrap()).unwrap();
    let psnr = metrics["validation"]["psnr"].as_f64().unwrap();
    let mut mean = [0.0f64; 3];
    for r in ds.train.data.chunks_exact(7) {
        for c in 0..3 {
            mean[c] += r[4 + c] as f64 / ds.train.len() as f64;
        }
    }
    let mse: f64 = ds
        .validation
        .data
        .chunks_exact(7)
        .flat_map(|r| (0..3).map(move |c| (r[4 + c] as f64 - mean[c]).powi(2)))
        .sum::<f64>()
        / (3 * ds.validation.len()) as f64;
    let trivial = 10.0 * (1.0 / mse).log10();
    assert!(
        psnr > trivial + 15.0,
        "validation PSNR {psnr:.2} dB, mean predictor {trivial:.2} dB"
    );
    let slices = metrics["validation"]["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 6);
    assert_eq!(slices[0]["parameters"].as_array().unwrap().len(), 2);
    // The model takes the raw columns and records their ranges.
    let model: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.join("weights.json")).unwrap()).unwrap();
    assert_eq!(
        model["inputs"]["names"],
        serde_json::json!(["x", "y", "light", "k"])
    );
    assert_eq!(
        model["inputs"]["domain"],
        serde_json::json!([[-1.0, 1.0], [-1.0, 1.0], [0.0, 3.0], [-1.0, 1.0]])
    );
    // eval on raw rows gives what training scored.
    let x: Vec<u8> = ds
        .validation
        .data
        .chunks_exact(7)
        .flat_map(|r| r[..4].iter().flat_map(|v| v.to_le_bytes()))
        .collect();
    std::fs::write(tmp.path().join("x.f32"), x).unwrap();
    ok(&nshade(&[
        "eval",
        m.to_str().unwrap(),
        "--input",
        tmp.path().join("x.f32").to_str().unwrap(),
        "--output",
        tmp.path().join("y.f32").to_str().unwrap(),
    ]));
    let y = common::read_f32(&tmp.path().join("y.f32"));
    let mse: f64 = ds
        .validation
        .data
        .chunks_exact(7)
        .zip(y.chunks_exact(3))
        .flat_map(|(r, p)| (0..3).map(move |c| (r[4 + c] as f64 - p[c] as f64).powi(2)))
        .sum::<f64>()
        / (3 * ds.validation.len()) as f64;
    let eval_psnr = 10.0 * (1.0 / mse).log10();
    assert!((eval_psnr - psnr).abs() < 0.01, "{eval_psnr} vs {psnr}");
}

#[test]
fn shadertoy_inputs_are_driven_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("ds");
    let stdout = ok(&nshade(&[
        "capture",
        data("mouse_tab.glsl").to_str().unwrap(),
        "--out",
        d.to_str().unwrap(),
        "--size",
        "16x8",
        "--param",
        "iMouse.x=0..64",
        "--param",
        "iTime=0..2",
        "--param",
        "iMouse.y=8..40",
        "--train-frames",
        "5",
        "--validation-frames",
        "3",
        "--pixels-per-frame",
        "all",
    ]));
    assert!(stdout.contains("(schema 2)"), "{stdout}");
    let ds = Dataset::load(&d).unwrap();
    assert_eq!(ds.manifest["shaderInputs"]["iMouse.y"], "iMouse.y");
    for rows in [&ds.train, &ds.validation] {
        // x, y, iMouse.x, iTime, iMouse.y, r, g, b
        let e = max_err(rows.data.chunks_exact(8).flat_map(|r| {
            [
                (r[5] as f64, r[3] as f64 * 0.5),
                (r[6] as f64, r[2] as f64 / 64.0),
                (r[7] as f64, r[4] as f64 / 64.0),
            ]
        }));
        assert!(e < 1e-6, "max error {e}");
    }
    // One parameter that is not iTime is schema 2 too; iTime alone is schema 1.
    let one = |name: &str, out: &str| {
        let d = tmp.path().join(out);
        ok(&nshade(&[
            "capture",
            data("mouse_tab.glsl").to_str().unwrap(),
            "--out",
            d.to_str().unwrap(),
            "--size",
            "16x8",
            "--param",
            name,
            "--train-frames",
            "3",
            "--validation-frames",
            "2",
        ]));
        Dataset::load(&d).unwrap()
    };
    assert_eq!(one("iMouse.x=0..64", "mx").schema, 2);
    let time = one("iTime=0..2", "t");
    assert_eq!(time.schema, 1);
    assert_eq!(time.parameter_range, [0.0, 2.0]);
}

#[test]
fn bad_param_flags_are_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let shader = data("two_params.wgsl");
    let run = |extra: &[&str]| {
        let mut a = vec![
            "capture",
            shader.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        nshade(&a)
    };
    let e = fails(&run(&["--param", "light"]), 2);
    assert!(
        e.contains("invalid parameter 'light': expected NAME=A..B"),
        "{e}"
    );
    let e = fails(&run(&["--param", "li ght=0..1"]), 2);
    assert!(e.contains("parameter name 'li ght' is not allowed"), "{e}");
    let e = fails(&run(&["--param", "light=1..1"]), 2);
    assert!(
        e.contains("range '1..1': the start must be below the end"),
        "{e}"
    );
    let e = fails(&run(&["--param", "light=0..x"]), 2);
    assert!(e.contains("invalid range end in '0..x'"), "{e}");
    let e = fails(&run(&["--param", "light=0..1", "--param", "light=0..2"]), 1);
    assert_eq!(e, "error: --param light: the parameter is given twice");
    let e = fails(&run(&["--param", "x=0..1", "--param", "k=0..2"]), 1);
    assert!(
        e.contains("x, y, r, g and b name the dataset's other columns"),
        "{e}"
    );
    let e = fails(&run(&["--param-range", "0..1", "--param", "k=0..2"]), 2);
    assert!(e.contains("cannot be used with"), "{e}");
    let e = fails(
        &nshade(&[
            "capture",
            data("mouse_tab.glsl").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--param",
            "light=0..1",
        ]),
        1,
    );
    assert!(
        e.contains("parameter 'light': a ShaderToy tab's parameters are named after the inputs they drive: iTime, iMouse.x, iMouse.y, iMouse.z, iMouse.w"),
        "{e}"
    );
    let many: Vec<String> = (0..17).map(|i| format!("p{i}=0..1")).collect();
    let mut args = Vec::new();
    for m in &many {
        args.extend(["--param", m.as_str()]);
    }
    let e = fails(&run(&args), 1);
    assert!(
        e.contains("17 parameters; a capture varies at most 16"),
        "{e}"
    );
    let e = fails(
        &nshade(&[
            "distill",
            shader.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--param",
            "p1=0..1",
            "--param",
            "p2=0..1",
            "--param",
            "p3=0..1",
        ]),
        1,
    );
    assert!(
        e.contains("distill exports shaders that take x, y and at most 2 parameters"),
        "{e}"
    );
    assert!(!out.exists(), "nothing is written");
}

#[test]
fn distill_with_two_parameters() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let stdout = ok(&nshade(&[
        "distill",
        data("two_params.wgsl").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--size",
        "32x16",
        "--param",
        "light=0..3",
        "--param",
        "k=-1..1",
        "--train-frames",
        "32",
        "--validation-frames",
        "3",
        // A plain MLP: smooth in the parameters, which 32 training vectors sample sparsely.
        "--arch",
        "mlp(32x2, swish)",
        "--steps",
        "1500",
        "--backend",
        "cpu",
    ]));
    assert!(stdout.contains("validation PSNR"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["parameters"][1]["name"], "k");
    assert_eq!(
        report["parameters"][1]["shader_input"],
        "params.values[0].y"
    );
    let ds = Dataset::load(&out.join("dataset")).unwrap();
    let slices = ds.validation_slices();
    let frames = report["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 3);
    for (f, i) in frames.iter().zip([0, 1, 2]) {
        // Images at validation parameter vectors; the GPU's neural shader matches the CPU.
        let want: Vec<f64> = slices[i].parameters.iter().map(|&v| v as f64).collect();
        let got: Vec<f64> = f["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(got, want);
        assert!(f["gpu_vs_cpu_max_abs_diff"].as_f64().unwrap() < 1e-3, "{f}");
        assert!(f["psnr"].as_f64().unwrap() > 30.0, "{f}");
        assert!(out.join(f["neural"].as_str().unwrap()).is_file());
    }
    let wgsl = std::fs::read_to_string(out.join("model/neural.wgsl")).unwrap();
    assert!(
        wgsl.contains("fn nshade_eval(p: vec4<f32>) -> vec3<f32>"),
        "{wgsl}"
    );
    assert!(report["render_cost"]["neural_wall_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn train_takes_schema2_datasets_of_any_widths() {
    use nshade_core::dataset::{
        InputColumn, OutputColumn, Schema2Meta, SplitData, write_dataset_v2,
    };
    // Three inputs (no frame parameters) to outputs of widths 2 and 1.
    let f = |a: f32, b: f32, c: f32| [(a * 2.0).sin() * b, c * c - 0.5 * a, 0.25 * (a + b + c)];
    let rows = |n: usize, seed: u32| {
        let mut r = Vec::new();
        for i in 0..n as u32 {
            let h = |k: u32| {
                let v = (i.wrapping_mul(2654435761) ^ (seed + k).wrapping_mul(40503)) % 10007;
                v as f32 / 10006.0
            };
            let (a, b, c) = (h(1) * 4.0 - 2.0, h(2), h(3) * 3.0);
            r.extend([a, b, c]);
            r.extend(f(a, b, c));
        }
        r
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("ds");
    let (tr, va) = (rows(4000, 1), rows(500, 2));
    write_dataset_v2(
        &d,
        &Schema2Meta {
            source_kind: "test".into(),
            source_digest: String::new(),
            fixed_state: "none".into(),
            resolution: None,
            seed: 0,
            inputs: vec![
                InputColumn::new("a", [-2.0, 2.0], false),
                InputColumn::new("b", [0.0, 1.0], false),
                InputColumn::new("c", [0.0, 3.0], false),
            ],
            outputs: vec![
                OutputColumn {
                    name: "uv".into(),
                    width: 2,
                },
                OutputColumn {
                    name: "w".into(),
                    width: 1,
                },
            ],
            coordinates: "three test inputs".into(),
            extra: Default::default(),
        },
        SplitData {
            rows: &tr,
            parameters: &[],
        },
        SplitData {
            rows: &va,
            parameters: &[],
        },
        &[],
    )
    .unwrap();
    let m = tmp.path().join("m");
    ok(&nshade(&[
        "train",
        "--dataset",
        d.to_str().unwrap(),
        "--out",
        m.to_str().unwrap(),
        "--arch",
        "mlp(32x2, swish)",
        "--steps",
        "800",
        "--batch",
        "1024",
        "--backend",
        "cpu",
    ]));
    let model: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.join("weights.json")).unwrap()).unwrap();
    assert_eq!(model["input_dims"], 3);
    assert_eq!(model["output_dims"], 3);
    assert_eq!(model["outputs"], serde_json::json!(["uv.0", "uv.1", "w"]));
    assert_eq!(
        model["inputs"]["scale"],
        serde_json::json!([0.5f32, 2.0f32, 2.0f32 / 3.0])
    );
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.join("metrics.json")).unwrap()).unwrap();
    let v = &metrics["validation"];
    assert_eq!(v["rows"], 500);
    assert_eq!(v["slices"].as_array().unwrap().len(), 1);
    // Far above a mean predictor of the validation targets.
    let mut mean = [0.0f64; 3];
    for r in tr.chunks_exact(6) {
        for c in 0..3 {
            mean[c] += r[3 + c] as f64 / 4000.0;
        }
    }
    let mse: f64 = va
        .chunks_exact(6)
        .flat_map(|r| (0..3).map(move |c| (r[3 + c] as f64 - mean[c]).powi(2)))
        .sum::<f64>()
        / 1500.0;
    let trivial = 10.0 * (1.0 / mse).log10();
    let psnr = v["psnr"].as_f64().unwrap();
    assert!(psnr > trivial + 15.0, "{psnr} vs {trivial}");
}
