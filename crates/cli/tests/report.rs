//! report.html and metrics.jsonl of `fit` and `train`, and `nshade report RUN_DIR`,
//! through the real binary; and a real browser rendering the page.

mod common;

use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nshade(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run nshade")
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "nshade failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
}

/// A small colourful test image: a hue ramp, a checkerboard and a disc.
fn write_test_image(path: &Path, w: u32, h: u32) {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        let (u, v) = (x as f32 / w as f32, y as f32 / h as f32);
        let mut c = [
            0.5 + 0.4 * (u * 6.3).cos(),
            0.5 + 0.4 * (u * 6.3 - 2.1).cos(),
            0.5 + 0.4 * (v * 6.3 + 2.1).cos(),
        ];
        if u < 0.4 && v < 0.5 && ((x / 6) + (y / 6)) % 2 == 0 {
            c = [0.9, 0.1, 0.1];
        }
        if (u - 0.7).powi(2) + (v - 0.6).powi(2) < 0.04 {
            c = [0.1, 0.8, 0.2];
        }
        image::Rgb(c.map(|f| (f.clamp(0.0, 1.0) * 255.0) as u8))
    });
    img.save(path).unwrap();
}

const TEX: &str = "t&x <'1'>.png";
const ARCH_A: &str = "small=mlp(16x2, relu)";
const ARCH_B: &str = "freq=freq(3) | mlp(16x2, leaky_relu, sigmoid)";

/// Runs a small fit into `dir/run` and returns the run directory.
fn small_fit(dir: &Path) -> PathBuf {
    // A name that needs escaping in HTML and quoting in a shell.
    write_test_image(&dir.join(TEX), 96, 64);
    let o = nshade(
        &[
            "fit",
            TEX,
            "--arch",
            ARCH_A,
            "--arch",
            ARCH_B,
            "--steps",
            "20",
            "--batch",
            "1024",
            "--seed",
            "7",
            "--backend",
            "cpu",
            "--threads",
            "1",
            "--out",
            "run",
        ],
        dir,
    );
    ok(&o);
    dir.join("run")
}

/// Parses the page as XML (the page is written as well-formed XHTML-compatible HTML, so a
/// strict parser checks balanced tags, quoting and escaping).
fn parse(html: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse_with_options(
        html,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("report.html is not well-formed: {e}"))
}

/// Every `src`/`href` in the page is relative (no network) and names an existing file.
fn check_references(doc: &roxmltree::Document, dir: &Path) -> usize {
    let mut n = 0;
    for node in doc.descendants().filter(|n| n.is_element()) {
        for attr in ["src", "href"] {
            if let Some(v) = node.attribute(attr) {
                assert!(
                    !v.contains("://") && !v.starts_with("//") && !v.starts_with('/'),
                    "{attr}={v} is not a relative path"
                );
                assert!(dir.join(v).is_file(), "{attr}={v} does not exist");
                n += 1;
            }
        }
    }
    n
}

fn has_refresh(doc: &roxmltree::Document) -> bool {
    doc.descendants()
        .any(|n| n.has_tag_name("meta") && n.attribute("http-equiv") == Some("refresh"))
}

fn by_id<'a, 'i>(doc: &'a roxmltree::Document<'i>, id: &str) -> roxmltree::Node<'a, 'i> {
    doc.descendants()
        .find(|n| n.attribute("id") == Some(id))
        .unwrap_or_else(|| panic!("no element with id {id}"))
}

#[test]
fn fit_writes_a_complete_report_that_matches_the_summary_and_regenerates() {
    let d = tempfile::tempdir().unwrap();
    let run = small_fit(d.path());
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    let doc = parse(&html);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();

    assert!(!has_refresh(&doc), "a finished page must not reload itself");
    assert!(html.contains("20 steps of 1024 samples per architecture"));
    let refs = check_references(&doc, &run);
    // reference + fit + error per architecture (each linked and shown) and the zoom.
    assert!(refs >= 2 * 3 * 2 + 3, "only {refs} references");
    for a in ["small", "freq"] {
        for f in ["fit.png", "error.png"] {
            let p = format!("{a}/{f}");
            assert!(
                doc.descendants()
                    .any(|n| n.has_tag_name("img") && n.attribute("src") == Some(&p)),
                "no image {p}"
            );
        }
    }
    for z in ["zoom/reference.png", "zoom/fit.png", "zoom/error.png"] {
        assert!(html.contains(&format!("src=\"{z}\"")), "no zoom image {z}");
        // The crop is enlarged with nearest neighbour.
        let img = image::open(run.join(z)).unwrap();
        assert!(img.width() >= 64 && img.height() >= 64);
    }
    // Both curves are inline SVG with labelled axes.
    let svgs: Vec<_> = doc
        .descendants()
        .filter(|n| n.has_tag_name("svg"))
        .collect();
    assert_eq!(svgs.len(), 2);
    let svg_text: String = svgs
        .iter()
        .flat_map(|s| s.descendants())
        .filter_map(|n| n.text())
        .collect();
    for label in [
        "samples seen (millions)",
        "training time (s)",
        "PSNR (dB)",
        "loss",
    ] {
        assert!(svg_text.contains(label), "plot lacks the label '{label}'");
    }
    // The command and the seed to reproduce the run.
    let command = by_id(&doc, "command").text().unwrap().to_string();
    assert!(
        command.starts_with(r"nshade fit 't&x <'\''1'\''>.png'"),
        "{command}"
    );
    let title = doc.descendants().find(|n| n.has_tag_name("h1")).unwrap();
    assert!(title.text().unwrap().contains(TEX), "{:?}", title.text());
    assert!(command.contains("--seed 7"), "{command}");
    assert!(command.contains(&format!("'{ARCH_B}'")), "{command}");
    assert_eq!(by_id(&doc, "seed").text(), Some("7"));
    assert_eq!(summary["command"].as_str(), Some(command.as_str()));

    // The table matches summary.json cell by cell.
    let table = by_id(&doc, "architectures");
    let rows: Vec<_> = table
        .descendants()
        .filter(|n| n.has_tag_name("tr"))
        .skip(1)
        .collect();
    let archs = summary["architectures"].as_array().unwrap();
    assert_eq!(rows.len(), archs.len());
    for (row, a) in rows.iter().zip(archs) {
        let cells: BTreeMap<&str, roxmltree::Node> = row
            .children()
            .filter(|c| c.has_tag_name("td"))
            .filter_map(|c| c.attribute("data-key").map(|k| (k, c)))
            .collect();
        assert_eq!(cells["name"].text(), a["name"].as_str());
        for key in [
            "params",
            "steps",
            "samples",
            "seconds",
            "samples_per_s",
            "loss",
            "psnr",
        ] {
            let shown: f64 = cells[key].attribute("data-value").unwrap().parse().unwrap();
            assert_eq!(shown, a[key].as_f64().unwrap(), "{key} of {}", a["name"]);
        }
        let text = |k: &str| cells[k].text().unwrap().to_string();
        assert_eq!(text("params"), a["params"].to_string());
        assert_eq!(text("psnr"), format!("{:.2}", a["psnr"].as_f64().unwrap()));
        assert_eq!(text("loss"), format!("{:.5}", a["loss"].as_f64().unwrap()));
        let best = a["best"].as_bool().unwrap();
        assert_eq!(row.attribute("class") == Some("best"), best);
        assert_eq!(best, a["name"] == summary["best"]);
    }

    // metrics.jsonl: every line parses; per architecture the steps rise, and the last line
    // holds the full-image PSNR and the final loss of summary.json.
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("metrics.jsonl line parses"))
        .collect();
    for a in archs {
        let mine: Vec<&Value> = lines.iter().filter(|l| l["arch"] == a["name"]).collect();
        assert!(mine.len() >= 10, "{} lines for {}", mine.len(), a["name"]);
        for w in mine.windows(2) {
            assert!(w[1]["step"].as_u64() > w[0]["step"].as_u64());
            assert!(w[1]["samples"].as_u64() > w[0]["samples"].as_u64());
            assert!(w[1]["seconds"].as_f64() >= w[0]["seconds"].as_f64());
        }
        for l in &mine {
            for k in ["step", "samples", "seconds", "loss", "psnr"] {
                assert!(l[k].as_f64().is_some_and(f64::is_finite), "{k} in {l}");
            }
        }
        let last = mine.last().unwrap();
        assert_eq!(last["full_image"], Value::Bool(true));
        assert_eq!(last["step"], a["steps"]);
        assert_eq!(last["samples"], a["samples"]);
        assert!((last["psnr"].as_f64().unwrap() - a["psnr"].as_f64().unwrap()).abs() < 1e-9);
        assert!((last["loss"].as_f64().unwrap() - a["loss"].as_f64().unwrap()).abs() < 1e-6);
    }

    // `nshade report` regenerates the page (and the crops) byte for byte.
    let zoom_before = std::fs::read(run.join("zoom/fit.png")).unwrap();
    std::fs::remove_file(run.join("report.html")).unwrap();
    std::fs::remove_dir_all(run.join("zoom")).unwrap();
    let o = nshade(&["report", "run"], d.path());
    ok(&o);
    assert_eq!(
        std::fs::read_to_string(run.join("report.html")).unwrap(),
        html
    );
    assert_eq!(
        std::fs::read(run.join("zoom/fit.png")).unwrap(),
        zoom_before
    );

    // Not a run directory: one error line, exit 1.
    let o = nshade(&["report", "."], d.path());
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("summary.json"),
        "{err}"
    );
}

#[test]
fn fit_page_reloads_while_training_and_stops_when_done() {
    let d = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args([
            "fit",
            "--arch",
            ARCH_A,
            "--arch",
            ARCH_B,
            "--steps",
            "2000",
            "--batch",
            "4096",
            "--backend",
            "cpu",
            "--threads",
            "1",
            "--out",
            "run",
        ])
        .current_dir(d.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut live_pages = 0;
    let mut saw_training_row = false;
    let mut saw_preview = false;
    loop {
        for e in std::fs::read_dir(d.path()).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if !name.starts_with(".run.tmp-") {
                continue;
            }
            let Ok(html) = std::fs::read_to_string(p.join("report.html")) else {
                continue;
            };
            let doc = parse(&html);
            if has_refresh(&doc) && !html.contains("url=") {
                live_pages += 1;
                saw_training_row |= html.contains("training: step");
                saw_preview |= html.contains("src=\"small/fit.png\"");
            }
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "fit took too long"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("live report: "), "{err}");
    assert!(live_pages > 0, "never saw a live page");
    assert!(
        saw_training_row,
        "the live page never showed training progress"
    );
    assert!(saw_preview, "the live page never showed a fit image");
    let html = std::fs::read_to_string(d.path().join("run/report.html")).unwrap();
    assert!(!has_refresh(&parse(&html)));
    // The temporary directory is gone.
    for e in std::fs::read_dir(d.path()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with(".run.tmp-"), "left {name}");
    }
}

#[test]
fn train_writes_a_report_with_the_slice_plot_and_regenerates() {
    let d = tempfile::tempdir().unwrap();
    common::make_dataset(&d.path().join("data"), (6, 4), 128);
    let o = nshade(
        &[
            "train",
            "--dataset",
            "data",
            "--out",
            "m",
            "--steps",
            "40",
            "--batch",
            "512",
            "--threads",
            "1",
            "--backend",
            "cpu",
        ],
        d.path(),
    );
    ok(&o);
    let m = d.path().join("m");
    if let Ok(keep) = std::env::var("NSHADE_KEEP_TRAIN_REPORT") {
        std::fs::copy(m.join("report.html"), keep).unwrap();
    }
    let html = std::fs::read_to_string(m.join("report.html")).unwrap();
    let doc = parse(&html);
    check_references(&doc, &m);
    assert!(!has_refresh(&doc));
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(m.join("metrics.json")).unwrap()).unwrap();
    let slices = metrics["validation"]["slices"].as_array().unwrap();
    let rows = by_id(&doc, "slices")
        .descendants()
        .filter(|n| n.has_tag_name("tr"))
        .count();
    assert_eq!(rows, slices.len() + 1);
    let psnr = by_id(&doc, "summary")
        .descendants()
        .find(|n| n.attribute("data-key") == Some("psnr"))
        .unwrap();
    assert_eq!(
        psnr.attribute("data-value")
            .unwrap()
            .parse::<f64>()
            .unwrap(),
        metrics["validation"]["psnr"].as_f64().unwrap()
    );
    assert_eq!(
        doc.descendants().filter(|n| n.has_tag_name("svg")).count(),
        2
    );
    assert!(html.contains("Validation PSNR per parameter slice"));
    assert!(html.contains("No images"));
    let lines = std::fs::read_to_string(m.join("metrics.jsonl")).unwrap();
    let lines: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty());
    assert_eq!(lines.last().unwrap()["step"], 40);
    std::fs::remove_file(m.join("report.html")).unwrap();
    ok(&nshade(&["report", "m"], d.path()));
    assert_eq!(
        std::fs::read_to_string(m.join("report.html")).unwrap(),
        html
    );
}

/// Finds runs of the image border colour (#999) exactly `len` pixels long on row `y`.
fn border_runs(img: &image::RgbaImage, y: u32, len: u32) -> Vec<u32> {
    let mut runs = Vec::new();
    let mut x = 0;
    while x < img.width() {
        if img.get_pixel(x, y).0[..3] == [153, 153, 153] {
            let s = x;
            while x < img.width() && img.get_pixel(x, y).0[..3] == [153, 153, 153] {
                x += 1;
            }
            if x - s == len {
                runs.push(s);
            }
        } else {
            x += 1;
        }
    }
    runs
}

#[test]
fn a_real_browser_renders_the_report_with_its_images() {
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.exists());
    let Some(chromium) = chromium else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true and chromium is not installed (apt-get install chromium)"
        );
        eprintln!("\n\n*** SKIPPED: chromium not found; the browser check did not run ***\n");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let run = small_fit(d.path());
    let shot = d.path().join("shot.png");
    let url = format!(
        "file://{}",
        std::fs::canonicalize(run.join("report.html"))
            .unwrap()
            .display()
    );
    let mut o = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--force-device-scale-factor=1",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            d.path().join("profile").display()
        ))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1400,1000")
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Never hang the suite on a browser that does not exit.
    let start = Instant::now();
    while o.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = o.kill();
            panic!("chromium did not exit within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = o.wait_with_output().unwrap();
    assert!(
        shot.is_file(),
        "chromium wrote no screenshot: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    if let Ok(keep) = std::env::var("NSHADE_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    let img = image::open(&shot).unwrap().to_rgba8();
    assert_eq!((img.width(), img.height()), (1400, 1000));
    let colours: HashSet<[u8; 3]> = img.pixels().map(|p| [p.0[0], p.0[1], p.0[2]]).collect();
    assert!(
        colours.len() > 100,
        "blank screenshot ({} colours)",
        colours.len()
    );

    // Images are shown 384 px wide with a 1 px #999 border: the first row of three such
    // borders is the first architecture's reference, fit and error; look inside the fit.
    let (w, h) = (384u32, 256u32); // 96x64 shown 384 wide
    let y = (0..img.height())
        .find(|&y| border_runs(&img, y, w + 2).len() >= 3)
        .expect("no row of three bordered images in the screenshot");
    let x = border_runs(&img, y, w + 2)[1];
    let inner: Vec<[u8; 3]> = (y + 1..(y + 1 + h).min(img.height()))
        .flat_map(|yy| (x + 1..x + 1 + w).map(move |xx| (xx, yy)))
        .map(|(xx, yy)| {
            let p = img.get_pixel(xx, yy).0;
            [p[0], p[1], p[2]]
        })
        .collect();
    assert!(inner.len() > 1000, "the fit image is off screen (y = {y})");
    let distinct: HashSet<&[u8; 3]> = inner.iter().collect();
    let mean = |k: usize| inner.iter().map(|p| p[k] as f64).sum::<f64>() / inner.len() as f64;
    let var: f64 = (0..3)
        .map(|k| {
            let m = mean(k);
            inner.iter().map(|p| (p[k] as f64 - m).powi(2)).sum::<f64>() / inner.len() as f64
        })
        .sum();
    assert!(
        distinct.len() > 20 && var > 20.0,
        "the fit image region at ({x}, {y}) is uniform: {} colours, variance {var:.1}",
        distinct.len()
    );
    // And it shows the fit: compare with fit.png, shown at 4x with nearest neighbour.
    let fit = image::open(run.join("small/fit.png")).unwrap().to_rgb8();
    let mut diff = 0.0;
    for yy in 0..64u32 {
        for xx in 0..96u32 {
            let s = img.get_pixel(x + 1 + xx * 4 + 2, y + 1 + yy * 4 + 2).0;
            let f = fit.get_pixel(xx, yy).0;
            diff += (0..3)
                .map(|k| (s[k] as f64 - f[k] as f64).abs())
                .sum::<f64>();
        }
    }
    let mean_diff = diff / (96.0 * 64.0 * 3.0);
    assert!(
        mean_diff < 8.0,
        "the screenshot's fit image differs from fit.png by {mean_diff:.1} per channel"
    );
}

/// The hardest-region tile (docs/REPORT.md: a tile an eighth of the shorter side, 8 to 64
/// pixels, where the best model's squared error is largest) recomputed from reference.png
/// and best/fit.png: the stated tile has the largest error of all tiles, and the crops in
/// zoom/ are that tile of reference.png and of best/fit.png, enlarged by pixel repetition.
#[test]
fn the_zoomed_tile_is_where_the_best_model_errs_most() {
    let d = tempfile::tempdir().unwrap();
    let run = small_fit(d.path());
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    let (w, h, reference) = common::png_rgb8(&run.join("reference.png"));
    let (fw, fh, fit) = common::png_rgb8(&run.join("best/fit.png"));
    assert_eq!((w, h), (96, 64));
    assert_eq!((fw, fh), (w, h));
    let tile = (w.min(h) / 8).clamp(8, 64);
    assert_eq!(tile, 8);
    // "The 8×8 tile at (X, Y) where ..."
    let lead = format!("The {tile}×{tile} tile at (");
    let at = html
        .find(&lead)
        .unwrap_or_else(|| panic!("no '{lead}' in the page"));
    let rest = &html[at + lead.len()..];
    let (x, rest) = rest.split_once(", ").unwrap();
    let (y, _) = rest.split_once(')').unwrap();
    let (tx, ty): (u32, u32) = (x.parse().unwrap(), y.parse().unwrap());
    assert!(
        tx.is_multiple_of(tile) && ty.is_multiple_of(tile) && tx < w && ty < h,
        "({tx}, {ty})"
    );
    // Squared error per tile in 8-bit units (exact integers: no ties broken by rounding).
    let err = |x0: u32, y0: u32| -> u64 {
        let mut s = 0u64;
        for y in y0..(y0 + tile).min(h) {
            for x in x0..(x0 + tile).min(w) {
                for k in 0..3 {
                    let i = ((y * w + x) * 3 + k) as usize;
                    s += (fit[i] as i64 - reference[i] as i64).pow(2) as u64;
                }
            }
        }
        s
    };
    let all: Vec<(u64, u32, u32)> = (0..h)
        .step_by(tile as usize)
        .flat_map(|y| (0..w).step_by(tile as usize).map(move |x| (x, y)))
        .map(|(x, y)| (err(x, y), x, y))
        .collect();
    let max = all.iter().map(|e| e.0).max().unwrap();
    let mean = all.iter().map(|e| e.0).sum::<u64>() as f64 / all.len() as f64;
    eprintln!(
        "tile ({tx}, {ty}): squared error {} (8-bit units); largest {max}, mean {mean:.0}",
        err(tx, ty)
    );
    assert_eq!(err(tx, ty), max, "the zoomed tile is not the hardest one");
    assert!(
        max as f64 > 2.0 * mean,
        "errors too uniform for the check to mean anything"
    );
    // The crops: the tile, each pixel repeated `scale` times in x and y.
    for (name, src) in [("reference.png", &reference), ("fit.png", &fit)] {
        let (zw, zh, zoom) = common::png_rgb8(&run.join("zoom").join(name));
        assert!(zw.is_multiple_of(tile) && zw == zh, "{name}: {zw}x{zh}");
        let scale = zw / tile;
        assert!(scale >= 1);
        for y in 0..zh {
            for x in 0..zw {
                let (sx, sy) = (tx + x / scale, ty + y / scale);
                let s = ((sy * w + sx) * 3) as usize;
                let z = ((y * zw + x) * 3) as usize;
                assert_eq!(
                    zoom[z..z + 3],
                    src[s..s + 3],
                    "zoom/{name} at ({x}, {y}) is not pixel ({sx}, {sy})"
                );
            }
        }
    }
}

/// Just before the rename, the temporary directory's page becomes the finished page with a
/// refresh to the final directory's page (`../NAME/report.html`, percent-encoded). Seen by
/// making the rename fail: a file appears at `--out` while the run works, so fit stops
/// with an error and keeps its results where the message says.
#[test]
fn the_temporary_page_redirects_to_the_final_one() {
    use std::io::{BufRead, BufReader};
    let d = tempfile::tempdir().unwrap();
    write_test_image(&d.path().join("t.png"), 48, 32);
    let name = "my run#2";
    let mut child = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args([
            "fit",
            "t.png",
            "--arch",
            ARCH_A,
            "--steps",
            "300",
            "--batch",
            "4096",
            "--threads",
            "1",
            "--backend",
            "cpu",
            "--out",
            name,
        ])
        .current_dir(d.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while err.read_line(&mut line).unwrap() > 0 && !line.contains("fitting") {}
    assert!(line.contains("fitting"), "{line}");
    std::fs::write(d.path().join(name), b"in the way").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{line}{rest}");
    assert!(rest.contains("results kept in"), "{rest}");
    let tmp: Vec<PathBuf> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".my run#2.tmp-")
        })
        .collect();
    assert_eq!(tmp.len(), 1, "{:?}", common::tree(d.path()));
    let page = std::fs::read_to_string(tmp[0].join("report.html")).unwrap();
    let doc = parse(&page);
    let refresh: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("meta") && n.attribute("http-equiv") == Some("refresh"))
        .filter_map(|n| n.attribute("content"))
        .collect();
    assert_eq!(refresh, ["2; url=../my%20run%232/report.html"]);
    assert!(page.contains("Finished. Best:"), "not the finished page");
    // Moved into place, the URL (resolved from the temporary directory) names the final
    // page, and the finished page there is the same page without the refresh.
    std::fs::remove_file(d.path().join(name)).unwrap();
    std::fs::rename(&tmp[0], d.path().join(name)).unwrap();
    let target = tmp[0].parent().unwrap().join("my run#2/report.html");
    assert!(target.is_file());
    ok(&nshade(&["report", name], d.path()));
    let final_page = std::fs::read_to_string(&target).unwrap();
    assert!(!has_refresh(&parse(&final_page)));
    assert_eq!(
        page.replace(
            "<meta http-equiv=\"refresh\" content=\"2; url=../my%20run%232/report.html\"/>\n",
            ""
        ),
        final_page
    );
}
