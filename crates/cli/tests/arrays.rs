//! `nshade fit` on arrays (`.npy` pairs, `.npz`, `.safetensors`) and texture sets, through
//! the real binary on the CPU: results beat a trivial predictor the test computes, `eval`
//! of the saved model matches the library's evaluation bit for bit, runs are reproducible
//! byte for byte, and bad input is one clear line with nothing written.

mod common;

use common::{assert_fails, tree};
use nshade_core::model::Model;
use std::path::Path;
use std::process::{Command, Output};

fn nshade(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .env("RAYON_NUM_THREADS", "2")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run nshade")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An `.npy` of float32 with `cols` columns (1-D when `cols` is 0).
fn npy(path: &Path, cols: usize, values: &[f32]) {
    let shape = match values.len().checked_div(cols) {
        None => format!("({},)", values.len()),
        Some(rows) => format!("({rows}, {cols})"),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(path, out).unwrap();
}

fn read_npy_f32(path: &Path) -> Vec<f32> {
    let t = nshade_core::arrays::parse_npy(&std::fs::read(path).unwrap(), "out").unwrap();
    t.data
}

/// A deterministic LCG in [0, 1).
fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// PSNR (peak `peak`) of predicting every target by the targets' mean.
fn trivial_psnr(y: &[f32], peak: f64) -> f64 {
    let mean = y.iter().map(|&v| v as f64).sum::<f64>() / y.len() as f64;
    let mse = y.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / y.len() as f64;
    10.0 * (peak * peak / mse).log10()
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn an_sdf_from_npy_pair_beats_the_mean_and_evals_bit_for_bit() {
    let d = tempfile::tempdir().unwrap();
    let n = 6000;
    let x: Vec<f32> = uniform(n * 3, 1).iter().map(|v| v * 2.0 - 1.0).collect();
    let y: Vec<f32> = x
        .chunks_exact(3)
        .map(|p| (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt() - 0.5)
        .collect();
    npy(&d.path().join("x.npy"), 3, &x);
    npy(&d.path().join("y.npy"), 0, &y);
    let run = |out: &str| {
        nshade(
            &[
                "fit",
                "x.npy",
                "--targets",
                "y.npy",
                "--arch",
                "small=mlp(16x2, relu)",
                "--steps",
                "300",
                "--batch",
                "1024",
                "--backend",
                "cpu",
                "--out",
                out,
            ],
            d.path(),
        )
    };
    let stdout = ok(&run("a"));
    assert!(stdout.contains("held-out validation rows"), "{stdout}");
    let s = summary(&d.path().join("a"));
    assert_eq!(s["data"]["kind"], "arrays");
    assert_eq!(s["data"]["rows"], n);
    assert_eq!(s["data"]["inputs"], serde_json::json!(["x0", "x1", "x2"]));
    let val = s["validation"]["validation_rows"].as_u64().unwrap() as usize;
    assert!((n / 20..n / 5).contains(&val), "{val}");
    let peak = s["validation"]["psnr_peak"].as_f64().unwrap();
    let lo = y.iter().cloned().fold(f32::INFINITY, f32::min);
    let hi = y.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    assert!((peak - (hi - lo) as f64).abs() < 1e-6, "{peak}");
    let psnr = s["architectures"][0]["psnr"].as_f64().unwrap();
    let base = trivial_psnr(&y, peak);
    assert!(psnr > base + 10.0, "{psnr} dB against the mean's {base} dB");

    // eval of the saved model: the library's evaluation, bit for bit.
    ok(&nshade(
        &["eval", "a/best", "--input", "x.npy", "--output", "p.npy"],
        d.path(),
    ));
    let got = read_npy_f32(&d.path().join("p.npy"));
    let model = Model::load(&d.path().join("a/best")).unwrap();
    assert_eq!(model.inputs.names, ["x0", "x1", "x2"]);
    let want = model.eval(&x);
    assert_eq!(got.len(), want.len());
    assert!(
        got.iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits())
    );

    // Same seed, same bytes.
    ok(&run("b"));
    let a = std::fs::read_to_string(d.path().join("a/small/weights.json")).unwrap();
    let b = std::fs::read_to_string(d.path().join("b/small/weights.json")).unwrap();
    let first = a.lines().zip(b.lines()).find(|(x, y)| x != y);
    assert!(
        first.is_none() && a.len() == b.len(),
        "runs differ: {first:?}"
    );
}

#[test]
fn four_inputs_to_three_outputs_from_an_npz() {
    let d = tempfile::tempdir().unwrap();
    let n = 4000;
    let x = uniform(n * 4, 9);
    let y: Vec<f32> = x
        .chunks_exact(4)
        .flat_map(|p| {
            [
                (3.0 * p[0]).sin() * p[1],
                (2.0 * p[2] + p[3]).cos(),
                p[0] * p[3],
            ]
        })
        .collect();
    // An .npz is a zip of NAME.npy entries.
    npy(&d.path().join("x.npy"), 4, &x);
    npy(&d.path().join("y.npy"), 3, &y);
    let z = std::fs::File::create(d.path().join("d.npz")).unwrap();
    let mut z = zip::ZipWriter::new(z);
    for name in ["x.npy", "y.npy"] {
        z.start_file(name, zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut z, &std::fs::read(d.path().join(name)).unwrap()).unwrap();
    }
    z.finish().unwrap();
    let out = ok(&nshade(
        &[
            "fit",
            "d.npz",
            "--steps",
            "300",
            "--batch",
            "1024",
            "--backend",
            "cpu",
            "--out",
            "o",
        ],
        d.path(),
    ));
    assert!(out.contains("best:"), "{out}");
    let s = summary(&d.path().join("o"));
    // Four inputs: the default set leaves the hash grid out.
    let names: Vec<&str> = s["architectures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mlp", "freq"]);
    let m = Model::load(&d.path().join("o/best")).unwrap();
    assert_eq!((m.network.in_dims, m.network.out_dims), (4, 3));
    assert_eq!(m.outputs, ["y0", "y1", "y2"]);
    let best = s["architectures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["best"] == true)
        .unwrap();
    let base = trivial_psnr(&y, s["validation"]["psnr_peak"].as_f64().unwrap());
    assert!(best["psnr"].as_f64().unwrap() > base + 10.0, "{best}");
}

#[test]
fn a_texture_set_stacks_channels_and_scores_each_image() {
    let d = tempfile::tempdir().unwrap();
    let (w, h) = (32u32, 32u32);
    let albedo = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x * 8) as u8, (y * 8) as u8, ((x + y) * 4) as u8])
    });
    albedo.save(d.path().join("albedo.png")).unwrap();
    let rough =
        image::GrayImage::from_fn(w, h, |x, _| image::Luma([if x < 16 { 40 } else { 200 }]));
    rough.save(d.path().join("rough.png")).unwrap();
    let out = ok(&nshade(
        &[
            "fit",
            "albedo.png",
            "rough.png",
            "--arch",
            "g=hashgrid(levels=6, features=2, log2_size=12, base=4, scale=1.5) | mlp(32x2, relu)",
            "--steps",
            "400",
            "--batch",
            "1024",
            "--backend",
            "cpu",
            "--out",
            "t",
        ],
        d.path(),
    ));
    assert!(out.contains("albedo") && out.contains("rough"), "{out}");
    let s = summary(&d.path().join("t"));
    assert_eq!(s["data"]["kind"], "texture-set");
    assert_eq!(
        s["data"]["outputs"],
        serde_json::json!(["albedo.r", "albedo.g", "albedo.b", "rough.l"])
    );
    assert_eq!(s["validation"]["validation_rows"], 0);
    let groups = s["architectures"][0]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[1]["outputs"], 1);
    for g in groups {
        assert!(g["psnr"].as_f64().unwrap() > 25.0, "{g}");
    }
    let m = Model::load(&d.path().join("t/best")).unwrap();
    assert_eq!(m.inputs.names, ["u", "v"]);
    // The model at a pixel centre is close to that pixel (the grid has memorised it).
    let v = m.eval(&[(20.0 + 0.5) / 32.0, (3.0 + 0.5) / 32.0]);
    assert!((v[3] - 200.0 / 255.0).abs() < 0.1, "{v:?}");
}

#[test]
fn bad_arrays_are_one_line_and_nothing_is_written() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    npy(&p.join("x.npy"), 2, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    npy(&p.join("y2.npy"), 0, &[1.0, 2.0]);
    npy(&p.join("nan.npy"), 0, &[1.0, f32::NAN, 2.0]);
    std::fs::write(p.join("junk.npz"), b"not a zip").unwrap();
    image::RgbImage::new(4, 4).save(p.join("a.png")).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["fit", "x.npy", "--targets", "y2.npy"],
            "3 rows and the targets 2",
        ),
        (
            &["fit", "x.npy", "--targets", "nan.npy"],
            "row 1, column 0 is NaN",
        ),
        (&["fit", "x.npy"], "--targets"),
        (&["fit", "junk.npz"], "not a valid .npz"),
        (&["fit", "a.png", "x.npy"], "one array file"),
        (&["fit", "a.png", "--targets", "x.npy"], "--targets"),
        (&["fit", "a.png", "--validation", "0.2"], "--validation"),
        (
            &["fit", "x.npy", "--targets", "x.npy", "--validation", "1.5"],
            "--validation",
        ),
        (
            &[
                "fit",
                "x.npy",
                "--targets",
                "x.npy",
                "--arch",
                "hashgrid(levels=2, features=2, log2_size=4, base=2, scale=2) | mlp(4x1, relu) | pick(5)",
            ],
            "--arch",
        ),
    ];
    for (args, needle) in cases {
        let mut a = args.to_vec();
        a.extend(["--steps", "2", "--backend", "cpu", "--out", "o"]);
        assert_fails(&nshade(&a, p), 1, needle);
        assert!(!p.join("o").exists(), "{args:?}");
        assert!(!p.join("nshade-out").exists(), "{args:?}");
    }
    assert_eq!(
        tree(p),
        ["a.png", "junk.npz", "nan.npy", "x.npy", "y2.npy"],
        "nothing else was written"
    );
}

#[test]
fn init_fine_tunes_the_model_and_refuses_another_network() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let n = 3000;
    let x: Vec<f32> = uniform(n * 2, 3).iter().map(|v| v * 4.0 - 2.0).collect();
    let y: Vec<f32> = x
        .chunks_exact(2)
        .map(|q| (q[0] * 2.0).sin() * q[1])
        .collect();
    npy(&p.join("x.npy"), 2, &x);
    npy(&p.join("y.npy"), 0, &y);
    let fit = |out: &str, extra: &[&str]| {
        let mut a = vec![
            "fit",
            "x.npy",
            "--targets",
            "y.npy",
            "--steps",
            "150",
            "--batch",
            "512",
            "--backend",
            "cpu",
            "--out",
            out,
        ];
        a.extend_from_slice(extra);
        nshade(&a, p)
    };
    ok(&fit("a", &["--arch", "m=mlp(32x2, relu)"]));
    ok(&fit("b", &["--init", "a/best"]));
    let psnr = |dir: &str| {
        summary(&p.join(dir))["architectures"][0]["psnr"]
            .as_f64()
            .unwrap()
    };
    assert!(
        psnr("b") > psnr("a") + 1.0,
        "{} then {}",
        psnr("a"),
        psnr("b")
    );
    let (a, b) = (
        Model::load(&p.join("a/best")).unwrap(),
        Model::load(&p.join("b/best")).unwrap(),
    );
    // The same network and input mapping, trained further.
    assert_eq!(a.network.arch, b.network.arch);
    assert_eq!(
        (a.inputs.scale.clone(), a.inputs.offset.clone()),
        (b.inputs.scale.clone(), b.inputs.offset.clone())
    );
    assert_ne!(a.params, b.params);
    assert_eq!(b.training["init"], "a/best");
    // Another network, other widths, an image: refused in one line, nothing written.
    assert_fails(
        &fit("c", &["--init", "a/best", "--arch", "mlp(16x2, relu)"]),
        1,
        "another network",
    );
    npy(&p.join("x3.npy"), 3, &uniform(30, 1));
    npy(&p.join("y3.npy"), 0, &uniform(10, 2));
    assert_fails(
        &nshade(
            &[
                "fit",
                "x3.npy",
                "--targets",
                "y3.npy",
                "--init",
                "a/best",
                "--out",
                "c",
            ],
            p,
        ),
        1,
        "takes 2 inputs",
    );
    image::RgbImage::new(4, 4).save(p.join("i.png")).unwrap();
    assert_fails(
        &nshade(&["fit", "i.png", "--init", "a/best", "--out", "c"], p),
        1,
        "(u, v) -> RGB",
    );
    assert!(!p.join("c").exists());
}

#[test]
fn a_killed_run_resumes_to_the_same_bytes() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let n = 4000;
    let x = uniform(n * 2, 5);
    let y: Vec<f32> = x
        .chunks_exact(2)
        .map(|q| (q[0] * 6.0).sin() + q[1] * q[1])
        .collect();
    npy(&p.join("x.npy"), 2, &x);
    npy(&p.join("y.npy"), 0, &y);
    let args = |out: &str| -> Vec<String> {
        [
            "fit",
            "x.npy",
            "--targets",
            "y.npy",
            "--arch",
            "m=mlp(32x2, relu)",
            "--steps",
            "1600",
            "--batch",
            "2048",
            "--backend",
            "cpu",
            "--out",
            out,
        ]
        .map(String::from)
        .to_vec()
    };
    ok(&nshade(
        &args("whole").iter().map(String::as_str).collect::<Vec<_>>(),
        p,
    ));
    // The same run with checkpoints, killed once the first one is written.
    let mut with = args("resumed");
    with.extend(["--checkpoint-every", "128", "--checkpoint-dir", "ck"].map(String::from));
    let mut child = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .env("RAYON_NUM_THREADS", "2")
        .args(&with)
        .current_dir(p)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ckpt = p.join("ck/m.safetensors");
    let start = std::time::Instant::now();
    while !ckpt.exists() && start.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(ckpt.exists(), "no checkpoint within 120 s");
    assert!(
        !p.join("resumed").exists(),
        "the run finished before it was killed"
    );
    let (c, _) = nshade_core::checkpoint::load(&ckpt).unwrap();
    assert!(c.step >= 128 && c.step < 1600, "{}", c.step);
    // Resumed: the files of the uninterrupted run, byte for byte.
    with.push("--resume".into());
    let o = nshade(&with.iter().map(String::as_str).collect::<Vec<_>>(), p);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("resuming at step"));
    assert_eq!(
        std::fs::read(p.join("whole/m/weights.json")).unwrap(),
        std::fs::read(p.join("resumed/m/weights.json")).unwrap()
    );
    // The served checkpoint is removed; no temporary directory is left.
    assert!(!ckpt.exists());
    assert!(
        tree(p).iter().all(|f| !f.contains(".tmp-")),
        "{:?}",
        tree(p)
    );
    // A checkpoint from other settings is refused.
    let mut other = args("other");
    other.extend(
        [
            "--checkpoint-every",
            "128",
            "--checkpoint-dir",
            "ck",
            "--seed",
            "9",
        ]
        .map(String::from),
    );
    let mut killed = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .env("RAYON_NUM_THREADS", "2")
        .args(&other)
        .current_dir(p)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while !ckpt.exists() && start.elapsed().as_secs() < 240 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    killed.kill().unwrap();
    killed.wait().unwrap();
    let mut again = args("again");
    again.extend(
        [
            "--checkpoint-every",
            "128",
            "--checkpoint-dir",
            "ck",
            "--resume",
        ]
        .map(String::from),
    );
    assert_fails(
        &nshade(&again.iter().map(String::as_str).collect::<Vec<_>>(), p),
        1,
        "seed = 9",
    );
}

#[test]
fn stop_at_psnr_stops_on_a_1024_step_boundary_once_reached() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let x = uniform(2000 * 2, 11);
    let y: Vec<f32> = x
        .chunks_exact(2)
        .map(|q| 0.5 * q[0] + 0.25 * q[1])
        .collect();
    npy(&p.join("x.npy"), 2, &x);
    npy(&p.join("y.npy"), 0, &y);
    let run = |out: &str, extra: &[&str]| {
        let mut a = vec![
            "fit",
            "x.npy",
            "--targets",
            "y.npy",
            "--arch",
            "m=mlp(16x1, relu)",
            "--steps",
            "8192",
            "--batch",
            "256",
            "--backend",
            "cpu",
            "--out",
            out,
        ];
        a.extend_from_slice(extra);
        nshade(&a, p)
    };
    // A linear target: 30 dB comes within the first few thousand steps.
    ok(&run("early", &["--stop-at-psnr", "30"]));
    let a = &summary(&p.join("early"))["architectures"][0];
    let at = a["stopped_early_at"].as_u64().expect("stopped early");
    assert!(at.is_multiple_of(1024) && at < 8192, "{a}");
    assert_eq!(a["steps"], at);
    assert!(a["psnr"].as_f64().unwrap() >= 30.0, "{a}");
    // Unreachable: it runs every step.
    ok(&run("full", &["--stop-at-psnr", "200"]));
    let f = &summary(&p.join("full"))["architectures"][0];
    assert_eq!(f["steps"], 8192);
    assert!(f["stopped_early_at"].is_null(), "{f}");
    // An image is refused.
    image::RgbImage::new(4, 4).save(p.join("i.png")).unwrap();
    assert_fails(
        &nshade(&["fit", "i.png", "--stop-at-psnr", "30", "--out", "o"], p),
        1,
        "--stop-at-psnr",
    );
}

/// Writes an EXR of `layers`: each (layer name or none, size, channels (name, values)).
#[allow(clippy::type_complexity)]
fn write_exr(path: &Path, layers: Vec<(Option<&str>, (usize, usize), Vec<(&str, Vec<f32>)>)>) {
    use exr::prelude::*;
    let mut list = Vec::new();
    for (name, size, channels) in layers {
        let chans: SmallVec<[AnyChannel<FlatSamples>; 4]> = channels
            .into_iter()
            .map(|(n, v)| AnyChannel::new(n, FlatSamples::F32(v)))
            .collect();
        let attrs = match name {
            Some(n) => LayerAttributes::named(n),
            None => LayerAttributes::default(),
        };
        list.push(Layer::new(
            size,
            attrs,
            Encoding::FAST_LOSSLESS,
            AnyChannels::sort(chans),
        ));
    }
    Image::from_layers(
        ImageAttributes::new(IntegerBounds::from_dimensions(list[0].size)),
        list,
    )
    .write()
    .to_file(path)
    .unwrap();
}

#[test]
fn a_multichannel_exr_is_one_texture_of_all_its_channels() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let (w, h) = (32usize, 24usize);
    let plane = |f: &dyn Fn(f32, f32) -> f32| -> Vec<f32> {
        (0..w * h)
            .map(|i| f((i % w) as f32 / w as f32, (i / w) as f32 / h as f32))
            .collect()
    };
    // Seven channels in one part: albedo.RGB, normal.XYZ (in [-1, 1]) and roughness.
    let channels = vec![
        ("albedo.R", plane(&|u, _| u)),
        ("albedo.G", plane(&|_, v| v)),
        ("albedo.B", plane(&|u, v| 0.5 * (u + v))),
        ("normal.X", plane(&|u, _| 2.0 * u - 1.0)),
        ("normal.Y", plane(&|_, v| 1.0 - 2.0 * v)),
        ("normal.Z", plane(&|u, v| (u * 6.0).sin() * v)),
        ("roughness", plane(&|u, _| if u < 0.5 { 0.2 } else { 0.8 })),
    ];
    write_exr(
        &p.join("material.exr"),
        vec![(None, (w, h), channels.clone())],
    );
    let out = ok(&nshade(
        &[
            "fit",
            "material.exr",
            "--arch",
            "g=hashgrid(levels=6, features=2, log2_size=12, base=4, scale=1.5) | mlp(32x2, relu)",
            "--steps",
            "500",
            "--batch",
            "1024",
            "--backend",
            "cpu",
            "--out",
            "t",
        ],
        p,
    ));
    assert!(out.contains("normal"), "{out}");
    let s = summary(&p.join("t"));
    assert_eq!(s["data"]["kind"], "texture-set");
    let names: Vec<&str> = channels.iter().map(|c| c.0).collect();
    assert_eq!(s["data"]["outputs"], serde_json::json!(names));
    assert_eq!(s["data"]["image_size"], serde_json::json!([w, h]));
    // Scored per layer: albedo, normal, roughness.
    let groups = s["architectures"][0]["groups"].as_array().unwrap();
    let gnames: Vec<&str> = groups
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect();
    assert_eq!(gnames, ["albedo", "normal", "roughness"]);
    let m = Model::load(&p.join("t/best")).unwrap();
    assert_eq!(m.outputs, names);
    assert_eq!(m.network.out_dims, 7);
    // Every channel is learnt: the model at pixel centres against the file's values.
    let uv: Vec<f32> = (0..w * h)
        .flat_map(|i| {
            [
                ((i % w) as f32 + 0.5) / w as f32,
                ((i / w) as f32 + 0.5) / h as f32,
            ]
        })
        .collect();
    let pred = m.eval(&uv);
    for (c, (name, values)) in channels.iter().enumerate() {
        let mse: f32 = values
            .iter()
            .enumerate()
            .map(|(i, v)| (pred[i * 7 + c] - v).powi(2))
            .sum::<f32>()
            / values.len() as f32;
        let var: f32 = {
            let mean = values.iter().sum::<f32>() / values.len() as f32;
            values.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / values.len() as f32
        };
        assert!(mse < 0.05 * var, "{name}: mse {mse}, variance {var}");
    }

    // A layered (multi-part) EXR: each part's name before its channels'.
    write_exr(
        &p.join("layers.exr"),
        vec![
            (
                Some("base"),
                (w, h),
                vec![
                    ("R", plane(&|u, _| u)),
                    ("G", plane(&|_, v| v)),
                    ("B", plane(&|u, _| u)),
                ],
            ),
            (Some("mask"), (w, h), vec![("Y", plane(&|u, v| u * v))]),
        ],
    );
    ok(&nshade(
        &[
            "fit",
            "layers.exr",
            "--arch",
            "mlp(16x1, relu)",
            "--steps",
            "64",
            "--batch",
            "256",
            "--backend",
            "cpu",
            "--out",
            "l",
        ],
        p,
    ));
    assert_eq!(
        summary(&p.join("l"))["data"]["outputs"],
        serde_json::json!(["base.R", "base.G", "base.B", "mask.Y"])
    );

    // Refused in one line, nothing written: layers of different sizes, a NaN, too large.
    write_exr(
        &p.join("mixed.exr"),
        vec![
            (Some("a"), (w, h), vec![("R", plane(&|u, _| u))]),
            (Some("b"), (w / 2, h), vec![("R", vec![0.0; w / 2 * h])]),
        ],
    );
    let mut bad = plane(&|u, _| u);
    bad[2 * w + 3] = f32::NAN;
    write_exr(
        &p.join("nan.exr"),
        vec![(
            None,
            (w, h),
            vec![("depth", bad), ("mask", plane(&|u, _| u))],
        )],
    );
    write_exr(
        &p.join("huge.exr"),
        vec![(None, (20000, 1), vec![("depth", vec![0.5; 20000])])],
    );
    for (file, needle) in [
        ("mixed.exr", "different sizes (32x24 and 16x24)"),
        ("nan.exr", "channel 'depth' at pixel (3, 2) is NaN"),
        ("huge.exr", "20000x1 pixels, larger than the limit"),
    ] {
        assert_fails(
            &nshade(&["fit", file, "--steps", "1", "--out", "bad"], p),
            1,
            needle,
        );
        assert!(!p.join("bad").exists(), "{file}");
    }
}
