//! Integration tests that run the real `nshade` binary on real files.

mod common;

use nshade_core::model::Model;
use nshade_core::texture::write_image;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nshade(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .current_dir(cwd)
        .env("RAYON_NUM_THREADS", "2")
        .output()
        .expect("run nshade")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a clean failure: exit 1 and exactly one line on stderr, starting `error:`.
fn assert_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "expected exit 1, stderr: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(needle), "expected '{needle}' in: {err}");
}

/// A small test image with edges and gradients.
fn small_png(dir: &Path) -> PathBuf {
    let (w, h) = (24, 16);
    let mut rgb = Vec::new();
    for y in 0..h {
        for x in 0..w {
            let (u, v) = (x as f32 / w as f32, y as f32 / h as f32);
            rgb.extend([u, v, if (x / 6 + y / 6) % 2 == 0 { 0.9 } else { 0.1 }]);
        }
    }
    let p = dir.join("small.png");
    write_image(w, h, &rgb, &p).unwrap();
    p
}

/// Lists everything under `dir` (relative paths), to check nothing partial was left.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().is_dir() {
            for sub in tree(&e.path()) {
                out.push(format!("{name}/{sub}"));
            }
        }
        out.push(name);
    }
    out.sort();
    out
}

const FAST: &[&str] = &["--steps", "20", "--batch", "1024"];

#[test]
fn fit_eval_render_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_png(dir.path());
    let mut args = vec![
        "fit",
        img.to_str().unwrap(),
        "--arch",
        "basic=mlp(16x2, relu)",
        "--arch",
        "freq(2) | mlp(16x2, leaky_relu, sigmoid)",
        "--out",
        "run",
    ];
    args.extend(FAST);
    let o = nshade(&args, dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for col in [
        "name",
        "architecture",
        "params",
        "steps",
        "samples",
        "seconds",
        "samples/s",
        "loss",
        "PSNR",
    ] {
        assert!(stdout.contains(col), "table lacks '{col}': {stdout}");
    }
    let run = dir.path().join("run");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    let archs = summary["architectures"].as_array().unwrap();
    assert_eq!(archs.len(), 2);
    assert_eq!(archs[0]["name"], "basic");
    assert_eq!(archs[1]["name"], "freq2-mlp16x2-leaky_relu-sigmoid");
    for a in archs {
        for k in [
            "name",
            "arch",
            "params",
            "steps",
            "seconds",
            "samples_per_s",
            "loss",
            "psnr",
        ] {
            assert!(!a[k].is_null(), "summary lacks {k}");
        }
        let name = a["name"].as_str().unwrap();
        for f in ["weights.json", "fit.png", "error.png"] {
            assert!(run.join(name).join(f).is_file(), "missing {name}/{f}");
        }
        let fit = image::open(run.join(name).join("fit.png")).unwrap();
        assert_eq!((fit.width(), fit.height()), (24, 16));
    }
    let best = summary["best"].as_str().unwrap();
    assert!(run.join("best/weights.json").is_file());
    assert_eq!(
        std::fs::read(run.join("best/weights.json")).unwrap(),
        std::fs::read(run.join(best).join("weights.json")).unwrap()
    );
    assert!(
        !tree(dir.path()).iter().any(|p| p.contains(".tmp")),
        "temporary files left: {:?}",
        tree(dir.path())
    );

    // eval: raw rows in, raw rows out, equal to the library's evaluation
    let model = Model::load(&run.join("basic")).unwrap();
    let x: Vec<f32> = (0..50)
        .flat_map(|i| [i as f32 / 50.0, 1.0 - i as f32 / 50.0])
        .collect();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.path().join("in.f32"), bytes).unwrap();
    let o = nshade(
        &[
            "eval",
            "run/basic",
            "--input",
            "in.f32",
            "--output",
            "out.f32",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let y: Vec<f32> = std::fs::read(dir.path().join("out.f32"))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(y, model.eval(&x));

    // render: the model at another size
    let o = nshade(
        &[
            "render",
            "run/basic/weights.json",
            "--size",
            "40x30",
            "-o",
            "big.png",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let img = image::open(dir.path().join("big.png")).unwrap();
    assert_eq!((img.width(), img.height()), (40, 30));
}

#[test]
fn same_seed_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let run = |out: &str| {
        let mut args = vec![
            "fit",
            "--arch",
            "a=cat(identity, tri(2)) | mlp(8x1, swish)",
            "--out",
            out,
            "--seed",
            "7",
        ];
        args.extend(FAST);
        let o = nshade(&args, dir.path());
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read(dir.path().join(out).join("a/weights.json")).unwrap()
    };
    assert_eq!(run("one"), run("two"));
}

#[test]
fn default_run_directories_are_numbered() {
    let dir = tempfile::tempdir().unwrap();
    for expect in ["run-001", "run-002"] {
        let mut args = vec!["fit", "--arch", "mlp(4x1, relu)"];
        args.extend(FAST);
        let o = nshade(&args, dir.path());
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains(expect));
        assert!(
            dir.path()
                .join("nshade-out")
                .join(expect)
                .join("summary.json")
                .is_file()
        );
    }
}

#[test]
fn seed_progression_holds_on_the_builtin_texture() {
    // Same budget for each: arch #3 and #4 (frequency encoding) beat arch #1 clearly.
    let dir = tempfile::tempdir().unwrap();
    let o = nshade(
        &[
            "fit",
            "--arch",
            "one=mlp(32x3, relu)",
            "--arch",
            "three=freq(3) | mlp(32x3, leaky_relu, sigmoid)",
            "--arch",
            "four=freq(3) | mlp(32x4, leaky_relu, sigmoid)",
            "--steps",
            "150",
            "--batch",
            "16384",
            "--out",
            "run",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run/summary.json")).unwrap())
            .unwrap();
    let psnr = |i: usize| s["architectures"][i]["psnr"].as_f64().unwrap();
    assert!(psnr(1) > psnr(0) + 1.0, "#3 {} vs #1 {}", psnr(1), psnr(0));
    assert!(psnr(2) > psnr(0) + 1.0, "#4 {} vs #1 {}", psnr(2), psnr(0));
}

#[test]
fn hash_grid_beats_the_frequency_mlp_at_equal_steps() {
    let dir = tempfile::tempdir().unwrap();
    let o = nshade(
        &[
            "fit",
            "--arch",
            "freq=freq(3) | mlp(32x3, leaky_relu, sigmoid)",
            "--arch",
            "grid=hashgrid(levels=8, features=2, log2_size=12, base=8, scale=1.5) | mlp(16x1, relu)",
            "--steps",
            "400",
            "--batch",
            "16384",
            "--out",
            "run",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run/summary.json")).unwrap())
            .unwrap();
    let psnr = |i: usize| s["architectures"][i]["psnr"].as_f64().unwrap();
    assert!(
        psnr(1) > psnr(0) + 3.0,
        "grid {} vs freq {}",
        psnr(1),
        psnr(0)
    );
    assert_eq!(s["best"], "grid");
}

#[test]
fn fit_with_a_time_budget() {
    let dir = tempfile::tempdir().unwrap();
    let png = small_png(dir.path());
    let o = nshade(
        &[
            "fit",
            png.to_str().unwrap(),
            "--arch",
            "a=mlp(8x1, relu)",
            "--seconds",
            "0.4",
            "--batch",
            "256",
            "--out",
            "run",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run/summary.json")).unwrap())
            .unwrap();
    let rec = &s["architectures"][0];
    assert!(rec["seconds"].as_f64().unwrap() >= 0.4, "{rec}");
    assert!(rec["steps"].as_u64().unwrap() >= 1, "{rec}");
    assert_eq!(s["seconds_per_arch"], 0.4);
    // the report's header names the time budget, not one architecture's step count
    let html = std::fs::read_to_string(dir.path().join("run/report.html")).unwrap();
    assert!(
        html.contains("0.4 s of training per architecture (256 samples a step"),
        "{}",
        &html[..html.len().min(2000)]
    );
    assert!(!html.contains("steps of 256 samples per architecture"));
    let o = nshade(&["fit", "--seconds", "0", "--out", "bad"], dir.path());
    assert_error(&o, "--seconds must be a positive number");
    assert!(!dir.path().join("bad").exists());
}

#[test]
fn bad_input_fails_cleanly_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("corrupt.png"), b"\x89PNG\r\n\x1a\nthis is not a png").unwrap();
    let fit = |extra: &[&str]| {
        let mut a = vec!["fit"];
        a.extend(extra);
        a.extend(FAST);
        nshade(&a, d)
    };
    assert_error(&fit(&["missing.png", "--out", "o1"]), "missing.png");
    assert_error(&fit(&["corrupt.png", "--out", "o2"]), "corrupt.png");
    let o = fit(&["--arch", "freq(3) | mlp(32x3, relu", "--out", "o3"]);
    assert_error(&o, "column 25");
    assert_error(
        &fit(&["--arch", "freq(3)", "--out", "o4"]),
        "outputs 12 values",
    );
    assert_error(
        &fit(&["--arch", "mlp(8x1, gelu)", "--out", "o5"]),
        "unknown activation 'gelu'",
    );
    assert_error(&fit(&["--loss", "l3", "--out", "o6"]), "unknown loss");
    // the encodings' build errors name the module and the width it got
    assert_error(
        &fit(&["--arch", "sh(2) | mlp(8x1, relu)", "--out", "o7"]),
        "sh(2) needs exactly 3 inputs (a unit direction x, y, z) but gets 2",
    );
    assert_error(
        &fit(&["--arch", "pick(0, 2) | mlp(8x1, relu)", "--out", "o8"]),
        "pick index 2 is out of range: its input has width 2",
    );
    std::fs::create_dir(d.join("full")).unwrap();
    std::fs::write(d.join("full/keep.txt"), b"precious").unwrap();
    assert_error(
        &fit(&["--arch", "mlp(4x1, relu)", "--out", "full"]),
        "not empty",
    );
    assert_eq!(std::fs::read(d.join("full/keep.txt")).unwrap(), b"precious");
    for o in ["o1", "o2", "o3", "o4", "o5", "o6", "o7", "o8"] {
        assert!(!d.join(o).exists(), "{o} was created");
    }

    // a model to damage
    let o = nshade(
        &[
            "fit",
            "--arch",
            "m=mlp(4x1, relu)",
            "--out",
            "good",
            "--steps",
            "2",
            "--batch",
            "64",
        ],
        d,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(d.join("good/m/weights.json")).unwrap();
    std::fs::write(d.join("truncated.json"), &text[..text.len() / 2]).unwrap();
    std::fs::write(
        d.join("tampered.json"),
        text.replacen(
            "\"arch\": \"mlp(4x1, relu)\"",
            "\"arch\": \"mlp(5x1, relu)\"",
            1,
        ),
    )
    .unwrap();
    std::fs::write(d.join("in.f32"), [0u8; 12]).unwrap(); // 3 floats: not a whole number of 2-float rows
    let eval =
        |model: &str, out: &str| nshade(&["eval", model, "--input", "in.f32", "--output", out], d);
    assert_error(&eval("truncated.json", "e1.f32"), "not valid JSON");
    assert_error(&eval("tampered.json", "e2.f32"), "different architectures");
    assert_error(&eval("good/m", "e3.f32"), "not a whole number of rows");
    assert_error(
        &nshade(
            &["render", "truncated.json", "--size", "8x8", "-o", "r.png"],
            d,
        ),
        "truncated.json",
    );
    for f in ["e1.f32", "e2.f32", "e3.f32", "r.png"] {
        assert!(!d.join(f).exists(), "{f} was written");
    }
    assert!(
        !tree(d).iter().any(|p| p.contains(".tmp")),
        "temporary files left: {:?}",
        tree(d)
    );
}

/// A hash-grid model is weights.json plus a safetensors sidecar: fit writes both (also
/// into best/), the same seed gives the same bytes, train moves both into a directory the
/// caller prepared, eval and render read both, and a damaged sidecar is a one-line error.
#[test]
fn grid_models_carry_their_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_png(dir.path());
    let hg = "hg=hashgrid(levels=6, features=2, log2_size=10, base=4, scale=1.8) | mlp(16x1, relu)";
    let fit = |out: &str| {
        // grids train on the CPU only for now; `auto` would pick a real GPU if present
        let mut args = vec![
            "fit",
            img.to_str().unwrap(),
            "--arch",
            hg,
            "--out",
            out,
            "--backend",
            "cpu",
        ];
        args.extend(FAST);
        let o = nshade(&args, dir.path());
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let stdout = fit("one");
    let run = dir.path().join("one");
    let model = Model::load(&run.join("hg")).unwrap();
    assert!(model.has_sidecar());
    assert!(
        stdout.contains(&model.network.param_count.to_string()),
        "{stdout}"
    );
    for d in ["hg", "best"] {
        for f in [
            "weights.json",
            "weights.safetensors",
            "fit.png",
            "error.png",
        ] {
            assert!(run.join(d).join(f).is_file(), "missing {d}/{f}");
        }
    }
    fit("two");
    for f in [
        "hg/weights.json",
        "hg/weights.safetensors",
        "best/weights.safetensors",
    ] {
        assert_eq!(
            std::fs::read(run.join(f)).unwrap(),
            std::fs::read(dir.path().join("two").join(f)).unwrap(),
            "{f} differs between two runs with the same seed"
        );
    }
    assert_eq!(
        std::fs::read(run.join("best/weights.json")).unwrap(),
        std::fs::read(run.join("hg/weights.json")).unwrap()
    );
    assert!(
        !tree(dir.path()).iter().any(|p| p.contains(".tmp")),
        "temporary files left: {:?}",
        tree(dir.path())
    );

    // eval and render read the sidecar
    let x: Vec<f32> = (0..40)
        .flat_map(|i| [(i as f32 * 0.29).fract(), (i as f32 * 0.53).fract()])
        .collect();
    std::fs::write(
        dir.path().join("in.f32"),
        x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
    let eval = |model: &str| {
        nshade(
            &["eval", model, "--input", "in.f32", "--output", "out.f32"],
            dir.path(),
        )
    };
    let o = eval("one/best");
    assert!(o.status.success(), "{}", stderr(&o));
    let y: Vec<f32> = std::fs::read(dir.path().join("out.f32"))
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(y, model.eval(&x));
    let o = nshade(
        &[
            "render",
            "one/hg/weights.json",
            "--size",
            "20x10",
            "-o",
            "hg.png",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));

    // a damaged sidecar: modified, truncated, missing
    let side = run.join("hg/weights.safetensors");
    let good = std::fs::read(&side).unwrap();
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 5] ^= 0x10;
    std::fs::write(&side, &bad).unwrap();
    let o = eval("one/hg");
    assert_error(&o, "sidecar weights.safetensors: sha256 mismatch");
    assert_error(&o, "one/hg/weights.json");
    std::fs::write(&side, &good[..n / 2]).unwrap();
    assert_error(
        &eval("one/hg/weights.json"),
        &format!("is {} bytes but the model file says {n}", n / 2),
    );
    std::fs::remove_file(&side).unwrap();
    let o = eval("one/hg");
    assert_error(&o, "cannot read its sidecar");
    assert_error(&o, "one/hg/weights.safetensors");
    assert_eq!(stderr(&o).matches("os error").count(), 1, "{}", stderr(&o));
    let o = nshade(
        &["render", "one/hg", "--size", "4x4", "-o", "x.png"],
        dir.path(),
    );
    assert_error(&o, "one/hg/weights.safetensors");

    // train into a directory holding the caller's log: files are moved in one by one
    common::make_dataset(&dir.path().join("data"), (3, 2), 128);
    let m = dir.path().join("m");
    std::fs::create_dir(&m).unwrap();
    std::fs::write(m.join("training.log"), "").unwrap();
    let o = nshade(
        &[
            "train",
            "--dataset",
            "data",
            "--out",
            "m",
            "--arch",
            "densegrid(levels=2, features=2, base=3, scale=2, min=-1, max=1) | mlp(8x1, relu)",
            "--backend",
            "cpu",
            "--steps",
            "10",
            "--batch",
            "256",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(m.join("weights.safetensors").is_file());
    let dg = Model::load(&m).unwrap();
    assert_eq!(dg.network.in_dims, 3);
    assert!(dg.has_sidecar());
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = nshade(&["fit", "--steps", "many"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    let o = nshade(&["render", "m", "--size", "0x5", "-o", "x.png"], dir.path());
    assert_eq!(o.status.code(), Some(2));
}

/// The evaluator in docs/model-format.md (copied to tools/eval_model.py) agrees with
/// nshade: the document alone is enough to evaluate a model, grid encodings and sidecar
/// included.
#[test]
fn documented_evaluator_agrees_with_nshade() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/model-format.md")).unwrap();
    let tool = std::fs::read_to_string(root.join("tools/eval_model.py")).unwrap();
    // every Python block of the document, in the document's order
    let mut at = 0;
    let blocks: Vec<&str> = doc
        .split("```python\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().trim_end())
        .collect();
    assert!(blocks.len() >= 2, "the evaluator and its grid/sidecar part");
    for (i, code) in blocks.iter().enumerate() {
        let found = tool[at..].find(code).unwrap_or_else(|| {
            panic!("tools/eval_model.py differs from Python block {i} of docs/model-format.md")
        });
        at += found + code.len();
    }

    let has_numpy = Command::new("python3")
        .args(["-c", "import numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_numpy {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but python3 with numpy is missing"
        );
        eprintln!(
            "\n*** SKIPPING documented_evaluator_agrees_with_nshade: python3 with numpy not found ***\n"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let arch = "m=cat(identity, freq(3), tri(2)) | mlp(12x2, leaky_relu(0.2), sigmoid) | mlp(8x1, swish, none, out=5) | cat(mlp(6x1, sine(2), tanh), mlp(4x1, softplus, exp)) | mlp(5x1, relu)";
    // per-dimension encodings: pick, oneblob and sh (of a non-unit vector; sh uses it as given)
    let enc = "e=cat(pick(0) | oneblob(16), pick(1, 0, 1) | sh(4), pick(1) | oneblob(3, min=-0.5, max=2)) | mlp(12x1, relu, sigmoid)";
    // levels 0 and 1 dense (25 and 81 vertices fit 256 entries), 2 and 3 hashed; one grid
    // beside identity inside a cat, so its tables sit behind the MLP's parameters
    let hash = "hg=cat(identity, hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2.2)) | mlp(8x1, relu)";
    let o = nshade(
        &[
            "fit",
            "--arch",
            arch,
            "--arch",
            enc,
            "--arch",
            hash,
            "--steps",
            "10",
            "--batch",
            "512",
            "--out",
            "run",
            "--backend",
            "cpu",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!dir.path().join("run/m/weights.safetensors").exists());
    assert!(dir.path().join("run/hg/weights.safetensors").is_file());
    // 2-D inputs: inside the unit square, on its edges and corners, and outside (clamped)
    let mut x: Vec<f32> = (0..64)
        .flat_map(|i| [(i as f32 * 0.37).fract(), (i as f32 * 0.61).fract()])
        .collect();
    x.extend([
        0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5, 1.0, -0.3, 0.25, 1.7, -2.0,
    ]);
    compare_with_documented_evaluator(dir.path(), &root, "run/m/weights.json", &x, 2);
    compare_with_documented_evaluator(dir.path(), &root, "run/e", &x, 2);
    compare_with_documented_evaluator(dir.path(), &root, "run/hg", &x, 2);

    // 3-D: a dense grid over [-1, 1] on (x, y, t) dataset rows
    common::make_dataset(&dir.path().join("data"), (4, 2), 256);
    let o = nshade(
        &[
            "train",
            "--dataset",
            "data",
            "--out",
            "dg",
            "--arch",
            "densegrid(levels=3, features=2, base=2, scale=1.7, min=-1, max=1) | mlp(8x1, tanh)",
            "--backend",
            "cpu",
            "--steps",
            "20",
            "--batch",
            "256",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("dg/weights.safetensors").is_file());
    let x: Vec<f32> = (0..96)
        .map(|i| (i as f32 * 0.713).fract() * 2.6 - 1.3)
        .chain([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 0.0, 0.5, -0.5])
        .collect();
    compare_with_documented_evaluator(dir.path(), &root, "dg/weights.json", &x, 3);
}

/// Runs `nshade eval` and tools/eval_model.py on the same rows and compares the outputs.
fn compare_with_documented_evaluator(dir: &Path, root: &Path, model: &str, x: &[f32], d: usize) {
    assert_eq!(x.len() % d, 0);
    std::fs::write(
        dir.join("in.f32"),
        x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
    let o = nshade(
        &["eval", model, "--input", "in.f32", "--output", "ours.f32"],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let py = Command::new("python3")
        .arg(root.join("tools/eval_model.py"))
        .args([model, "in.f32", "theirs.f32"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(py.status.success(), "{model}: {}", stderr(&py));
    let read = |f: &str| -> Vec<f32> {
        std::fs::read(dir.join(f))
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let (a, b) = (read("ours.f32"), read("theirs.f32"));
    assert_eq!(a.len(), b.len());
    assert!(!a.is_empty());
    for (i, (p, q)) in a.iter().zip(&b).enumerate() {
        assert!(
            (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
            "{model} value {i}: nshade {p} vs documented evaluator {q}"
        );
    }
}

/// `fit.png`, `error.png` and the summary's PSNR recomputed from the run's files: fit.png is
/// the model (`nshade eval`) at the pixel centres quantised to 8 bits; error.png is
/// |fit − reference| × 8 (README), quantised; the PSNR is 10·log10(1/MSE) over RGB with
/// peak 1 (crates/core/src/metrics.rs) of the unquantised fit against reference.png, and
/// within 0.05 dB of what the two PNG files give.
#[test]
fn fit_images_and_psnr_follow_from_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_png(dir.path());
    let mut args = vec![
        "fit",
        img.to_str().unwrap(),
        "--arch",
        "f=freq(2) | mlp(16x2, leaky_relu, sigmoid)",
        "--out",
        "run",
        "--steps",
        "150",
        "--batch",
        "1024",
    ];
    args.extend(["--backend", "cpu"]);
    let o = nshade(&args, dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let run = dir.path().join("run");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    let reported = summary["architectures"][0]["psnr"].as_f64().unwrap();

    let (w, h, reference) = common::png_rgb8(&run.join("reference.png"));
    assert_eq!((w, h), (24, 16));
    // reference.png holds the input image's values unchanged
    assert_eq!(common::png_rgb8(&img).2, reference);
    let (fw, fh, fit) = common::png_rgb8(&run.join("f/fit.png"));
    let (ew, eh, error) = common::png_rgb8(&run.join("f/error.png"));
    assert_eq!((fw, fh, ew, eh), (w, h, w, h));

    common::write_f32(
        &dir.path().join("centres.f32"),
        &common::pixel_centres(w, h),
    );
    let o = nshade(
        &[
            "eval",
            "run/f",
            "--input",
            "centres.f32",
            "--output",
            "model.f32",
        ],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let model = common::read_f32(&dir.path().join("model.f32"));
    assert_eq!(model.len(), (w * h * 3) as usize);
    let reference_f: Vec<f32> = reference.iter().map(|&b| b as f32 / 255.0).collect();

    let expect_fit: Vec<u8> = model.iter().map(|&v| common::quantise(v)).collect();
    let lsb = common::max_lsb_diff(&fit, &expect_fit);
    assert!(lsb <= 1, "fit.png differs from the model by {lsb} LSB");
    let expect_error: Vec<u8> = model
        .iter()
        .zip(&reference_f)
        .map(|(m, r)| common::quantise((m - r).abs() * 8.0))
        .collect();
    let lsb = common::max_lsb_diff(&error, &expect_error);
    assert!(
        lsb <= 1,
        "error.png differs from |fit - reference| x 8 by {lsb} LSB"
    );
    assert!(
        error.iter().any(|&e| e > 8),
        "the error image shows no error: the comparison would not see a wrong gain"
    );

    let exact = common::psnr(&model, &reference_f);
    assert!(
        (exact - reported).abs() < 1e-6,
        "PSNR {reported} reported, {exact} recomputed"
    );
    let fit_f: Vec<f32> = fit.iter().map(|&b| b as f32 / 255.0).collect();
    let from_pngs = common::psnr(&fit_f, &reference_f);
    assert!(
        (from_pngs - reported).abs() < 0.05,
        "PSNR {reported} reported, {from_pngs} from reference.png and fit.png"
    );
    // the model learned something: clearly better than the best constant colour
    let constant = common::constant_colour_psnr(&reference_f);
    eprintln!(
        "PSNR {reported:.3} dB (from the PNGs {from_pngs:.3}), constant colour {constant:.2} dB"
    );
    assert!(
        reported > constant + 2.0,
        "{reported} vs constant {constant}"
    );
}
