//! HTML reports of training runs, and `nshade report RUN_DIR`.
//!
//! `fit` and `train` record metrics as they go in `metrics.jsonl` (one JSON object a line)
//! and write `report.html` next to their images. The page is generated only from the
//! run's files (`summary.json` or `metrics.json`, `metrics.jsonl`, the PNGs), so
//! `nshade report RUN_DIR` regenerates a finished run's page byte for byte. Plots are SVG
//! drawn with `plotters` and inlined; images are referenced relatively; the page needs no
//! network and no JavaScript. While a run is in progress the page carries a
//! `<meta http-equiv="refresh">` so a browser reloads it; the finished page does not.

use anyhow::{Context, Result, bail};
use nshade_core::metrics;
use nshade_core::model::Model;
use nshade_core::texture::{self, Texture};
use plotters::prelude::*;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A finished `nshade fit` directory (holding summary.json), `nshade train` model
    /// directory (holding metrics.json) or `nshade distill` directory (holding report.json).
    pub run_dir: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    let dir = &args.run_dir;
    if dir.join("summary.json").is_file() {
        write_fit_final(dir, None)?;
    } else if dir.join("metrics.json").is_file() {
        write_train(dir)?;
    } else if dir.join("report.json").is_file() {
        write_distill(dir)?;
    } else {
        bail!(
            "{}: holds none of summary.json (a fit run), metrics.json (a train run), report.json (a distill run)",
            dir.display()
        );
    }
    println!("{}", dir.join("report.html").display());
    Ok(())
}

/// Largest number of pixels the PSNR logged every progress chunk is evaluated on (about a
/// quarter of a default training step's forward pass, so logging costs a few per cent).
pub const PSNR_PIXELS: usize = 16384;
/// Largest number of pixels of the live preview images (evaluated at most once a second).
pub const PREVIEW_PIXELS: usize = 65536;
/// Seconds the live page waits before reloading itself.
pub const REFRESH_SECONDS: u32 = 2;

/// Escapes text for HTML element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Quotes one argument for a POSIX shell when it needs it.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The command line of this process, quoted for a shell, made to run as printed: `--seed
/// SEED` appended when the user left the seed at its default, and the output directory
/// (which now exists, and is refused when not empty) dropped for `fit` and `distill`, which
/// then write a fresh `nshade-out/run-NNN`, or for `train`, whose `--out` is required,
/// replaced by a new sibling name.
pub fn command_line(seed: u64) -> String {
    let args = crate::common::command_args();
    rerun_command(&args, seed, |p| std::fs::symlink_metadata(p).is_ok())
}

/// [`command_line`] over given arguments; `exists` tells which paths are taken.
pub fn rerun_command(args: &[String], seed: u64, exists: impl Fn(&str) -> bool) -> String {
    let train = args.first().is_some_and(|a| a == "train");
    let fresh = |out: &str| {
        let base = out.trim_end_matches('/');
        (2..)
            .map(|i| format!("{base}-{i}"))
            .find(|p| !exists(p))
            .expect("some name is free")
    };
    let mut parts: Vec<String> = vec!["nshade".into()];
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let (is_out, value) = if a == "--out" {
            (true, args.get(i + 1).cloned())
        } else if let Some(v) = a.strip_prefix("--out=") {
            (true, Some(v.to_string()))
        } else {
            (false, None)
        };
        if is_out {
            if train && let Some(v) = &value {
                parts.push("--out".into());
                parts.push(shell_quote(&fresh(v)));
            }
            i += if a == "--out" { 2 } else { 1 };
            continue;
        }
        parts.push(shell_quote(a));
        i += 1;
    }
    if !args
        .iter()
        .any(|a| a == "--seed" || a.starts_with("--seed="))
    {
        parts.push("--seed".into());
        parts.push(seed.to_string());
    }
    parts.join(" ")
}

/// The relative URL, from a sibling directory, of the page in directory `name`
/// (`../NAME/report.html`, percent-encoded).
pub fn sibling_page_url(name: &str) -> String {
    let mut enc = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            enc.push(b as char);
        } else {
            let _ = write!(enc, "%{b:02X}");
        }
    }
    format!("../{enc}/report.html")
}

// ---------------------------------------------------------------------------------------
// metrics.jsonl

/// Appends one JSON object a line to `metrics.jsonl`, flushed after each line so other
/// tools (and the live page) can read it while training runs.
pub struct MetricsLog {
    file: std::fs::File,
}

impl MetricsLog {
    pub fn create(path: &Path) -> Result<MetricsLog> {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(MetricsLog { file })
    }

    pub fn append(&mut self, line: &Value) -> Result<()> {
        let mut s = serde_json::to_string(line)?;
        s.push('\n');
        self.file
            .write_all(s.as_bytes())
            .and_then(|_| self.file.flush())
            .context("writing metrics.jsonl")
    }
}

/// The lines of a `metrics.jsonl` (a torn last line of a file still being written is
/// ignored; a bad line elsewhere is an error).
pub fn read_metrics(path: &Path) -> Result<Vec<Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        match serde_json::from_str::<Value>(l) {
            Ok(v) => out.push(v),
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => bail!("{} line {}: {e}", path.display(), i + 1),
        }
    }
    Ok(out)
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

// ---------------------------------------------------------------------------------------
// Cheap evaluation during training

/// A subsampled grid of pixel centres (at most `max_pixels`, e.g. [`PSNR_PIXELS`] or
/// [`PREVIEW_PIXELS`]) and the reference colours there: PSNR on a small one is cheap enough
/// to log every progress chunk, and the model evaluated on a larger one is the live preview.
pub struct Probe {
    pub width: usize,
    pub height: usize,
    uv: Vec<f32>,
    reference: Vec<f32>,
}

impl Probe {
    pub fn new(tex: &Texture, max_pixels: usize) -> Probe {
        let mut stride = 1;
        while tex.width.div_ceil(stride) * tex.height.div_ceil(stride) > max_pixels.max(1) {
            stride += 1;
        }
        let (w, h) = (tex.width.div_ceil(stride), tex.height.div_ceil(stride));
        let mut uv = Vec::with_capacity(w * h * 2);
        let mut reference = Vec::with_capacity(w * h * 3);
        for y in (0..tex.height).step_by(stride) {
            for x in (0..tex.width).step_by(stride) {
                uv.push((x as f32 + 0.5) / tex.width as f32);
                uv.push((y as f32 + 0.5) / tex.height as f32);
                let i = (y * tex.width + x) * 3;
                reference.extend_from_slice(&tex.data[i..i + 3]);
            }
        }
        Probe {
            width: w,
            height: h,
            uv,
            reference,
        }
    }

    /// The model on the grid and its PSNR against the reference there.
    pub fn eval(&self, model: &Model) -> Result<(Vec<f32>, f64)> {
        let fit = crate::common::eval_cancellable(model, &self.uv)?;
        let psnr = metrics::psnr(&fit, &self.reference);
        Ok((fit, psnr))
    }

    /// Writes the preview fit and amplified error images (atomically, since a browser may
    /// be reading them).
    pub fn write_preview(&self, fit: &[f32], dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let err = metrics::error_image(fit, &self.reference);
        for (name, rgb) in [("fit.png", fit), ("error.png", &err[..])] {
            let path = dir.join(name);
            let png = texture::encode_png(self.width, self.height, rgb, &path)?;
            nshade_core::fsutil::write_atomic(&path, &png)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Plots

struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

fn range(vals: impl Iterator<Item = f64>, pad: f64) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return None;
    }
    if hi - lo < 1e-12 {
        let d = if lo.abs() > 1e-12 {
            lo.abs() * 0.1
        } else {
            1.0
        };
        return Some((lo - d, hi + d));
    }
    let d = (hi - lo) * pad;
    Some((lo - d, hi + d))
}

/// A line chart of several series on shared axes, as an SVG string. `log_y` draws the y
/// axis logarithmically (for losses), labelled with the values themselves. `points` marks
/// every sample (for sparse series). `legend_top` puts the legend in the upper right corner
/// (for falling curves) instead of the lower right (for rising ones).
fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log_y: bool,
    points: bool,
    legend_top: bool,
) -> Result<String> {
    // On a log axis, plot log10(y) on a linear axis and label it with 10^v: plotters' own
    // log axis labels only powers of ten, too few over less than a decade.
    let series: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!log_y || *y > 0.0))
                .map(|&(x, y)| (x, if log_y { y.log10() } else { y }))
                .collect(),
        })
        .collect();
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = range(all().map(|p| p.0), 0.0).unwrap_or((0.0, 1.0));
    let (y0, y1) = range(all().map(|p| p.1), 0.05).unwrap_or((0.0, 1.0));
    let y_fmt = |v: &f64| {
        if log_y {
            let y = 10f64.powf(*v);
            if y >= 100.0 {
                format!("{y:.0}")
            } else {
                // three significant digits
                let digits = (2 - y.log10().floor() as i32).clamp(0, 12) as usize;
                format!("{y:.digits$}")
            }
        } else {
            let step = (y1 - y0) / 8.0;
            let digits = (-(step.log10().floor()) as i32).clamp(0, 12) as usize;
            format!("{v:.digits$}")
        }
    };
    let x_fmt = |v: &f64| {
        let step = (x1 - x0) / 8.0;
        let digits = (-(step.log10().floor()) as i32).clamp(0, 12) as usize;
        format!("{v:.digits$}")
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (640, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 15))
            .x_labels(8)
            .y_labels(8)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .light_line_style(WHITE.mix(0.0))
            .bold_line_style(BLACK.mix(0.12))
            .draw()
            .map_err(plot_err)?;
        for (i, s) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    colour.stroke_width(2),
                ))
                .map_err(plot_err)?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(3))
                });
            if points {
                chart
                    .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, colour.filled())))
                    .map_err(plot_err)?;
            }
        }
        if !series.is_empty() {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .position(if legend_top {
                    SeriesLabelPosition::UpperRight
                } else {
                    SeriesLabelPosition::LowerRight
                })
                .draw()
                .map_err(plot_err)?;
        }
        root.present().map_err(plot_err)?;
    }
    // Inline into the page: drop any XML prolog.
    let start = svg.find("<svg").unwrap_or(0);
    Ok(svg[start..].to_string())
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a plot: {e:?}")
}

// ---------------------------------------------------------------------------------------
// Page scaffolding

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:0.5em 0}
th,td{border:1px solid #bbb;padding:0.25em 0.6em}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.best{background:#e6f4e6;font-weight:bold}
figure{display:inline-block;margin:0.3em;vertical-align:top}
figure img{width:384px;height:auto;image-rendering:pixelated;border:1px solid #999}
figcaption{font-size:0.85em;color:#444}
.zoom img{width:auto}
pre{background:#f4f4f4;padding:0.6em;white-space:pre-wrap;word-break:break-all}
.status{padding:0.4em 0.8em;background:#fff3cd;display:inline-block}
.done{background:#e6f4e6}
.plots svg{margin:0.3em;border:1px solid #ddd}
.note{color:#555;font-style:italic}";

fn page_head(out: &mut String, title: &str, refresh: Option<&str>) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    if let Some(r) = refresh {
        let _ = writeln!(out, "<meta http-equiv=\"refresh\" content=\"{}\"/>", esc(r));
    }
    let _ = writeln!(
        out,
        "<title>{}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>",
        esc(title)
    );
}

fn figure(out: &mut String, dir: &Path, src: &str, caption: &str) {
    if dir.join(src).is_file() {
        let _ = writeln!(
            out,
            "<figure><a href=\"{s}\"><img src=\"{s}\" alt=\"{c}\"/></a><figcaption>{c}</figcaption></figure>",
            s = esc(src),
            c = esc(caption)
        );
    } else {
        let _ = writeln!(
            out,
            "<figure><figcaption>{} (not yet written)</figcaption></figure>",
            esc(caption)
        );
    }
}

/// A numeric table cell that carries the exact value in `data-value`.
fn cell(v: &Value, key: &str, shown: String) -> String {
    let raw = v.get(key).map(|x| x.to_string()).unwrap_or_default();
    format!(
        "<td class=\"n\" data-key=\"{}\" data-value=\"{}\">{}</td>",
        esc(key),
        esc(&raw),
        esc(&shown)
    )
}

fn write_page(dir: &Path, html: &str) -> Result<()> {
    let path = dir.join("report.html");
    nshade_core::fsutil::write_atomic(&path, html.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

// ---------------------------------------------------------------------------------------
// fit

/// What the fit page shows about a run that is still going.
pub struct FitLive<'a> {
    /// (name, spec) of every architecture of the run, in training order.
    pub archs: &'a [(String, String)],
    /// The one training now.
    pub current: Option<&'a str>,
}

/// The hardest region: the tile where the best model's error is largest.
struct Zoom {
    x: usize,
    y: usize,
    size_w: usize,
    size_h: usize,
    scale: usize,
}

/// Crops the tile of the best model's highest squared error from reference.png and
/// best/{fit,error}.png, upscaled with nearest neighbour, into `zoom/`.
fn write_zoom(dir: &Path, best: &str) -> Result<Option<Zoom>> {
    let reference = dir.join("reference.png");
    let fit = dir.join(best).join("fit.png");
    let error = dir.join(best).join("error.png");
    if !(reference.is_file() && fit.is_file() && error.is_file()) {
        return Ok(None);
    }
    let r = Texture::load(&reference)?;
    let f = Texture::load(&fit)?;
    let e = Texture::load(&error)?;
    if (r.width, r.height) != (f.width, f.height) || (r.width, r.height) != (e.width, e.height) {
        return Ok(None);
    }
    let (w, h) = (r.width, r.height);
    let tile = (w.min(h) / 8).clamp(8, 64).min(w.min(h));
    let mut best_tile = (0, 0);
    let mut best_err = -1.0f64;
    for ty in (0..h).step_by(tile) {
        for tx in (0..w).step_by(tile) {
            let mut s = 0.0f64;
            for y in ty..(ty + tile).min(h) {
                for x in tx..(tx + tile).min(w) {
                    let i = (y * w + x) * 3;
                    for k in 0..3 {
                        s += ((f.data[i + k] - r.data[i + k]) as f64).powi(2);
                    }
                }
            }
            if s > best_err {
                best_err = s;
                best_tile = (tx, ty);
            }
        }
    }
    let (tx, ty) = best_tile;
    let (cw, ch) = (tile.min(w - tx), tile.min(h - ty));
    let scale = (256 / tile).max(1);
    let zdir = dir.join("zoom");
    std::fs::create_dir_all(&zdir).with_context(|| format!("creating {}", zdir.display()))?;
    for (name, t) in [("reference.png", &r), ("fit.png", &f), ("error.png", &e)] {
        let mut out = Vec::with_capacity(cw * ch * scale * scale * 3);
        for y in 0..ch * scale {
            for x in 0..cw * scale {
                let i = ((ty + y / scale) * w + tx + x / scale) * 3;
                out.extend_from_slice(&t.data[i..i + 3]);
            }
        }
        texture::write_image(cw * scale, ch * scale, &out, &zdir.join(name))?;
    }
    Ok(Some(Zoom {
        x: tx,
        y: ty,
        size_w: cw,
        size_h: ch,
        scale,
    }))
}

/// Writes the finished fit run's page (with the zoomed crop) from its files. With
/// `redirect`, the page also sends a browser that still shows it on to that URL (the
/// temporary directory's page points at the final directory's).
///
/// Returns the zoomed region, for [`rewrite_fit_final`] after the directory moves.
pub fn write_fit_final(dir: &Path, redirect: Option<&str>) -> Result<FitZoom> {
    let summary = read_summary(dir)?;
    let zoom = write_zoom(dir, text(&summary, "best"))?;
    let html = fit_html(dir, &summary, None, zoom.as_ref(), redirect)?;
    write_page(dir, &html)?;
    Ok(FitZoom(zoom))
}

/// Writes the finished page again in `dir`, where a directory that [`write_fit_final`]
/// wrote was moved (the crops in `zoom/` moved with it): the same page as
/// `write_fit_final(dir, None)`, without decoding the images again.
pub fn rewrite_fit_final(dir: &Path, zoom: &FitZoom) -> Result<()> {
    let summary = read_summary(dir)?;
    let html = fit_html(dir, &summary, None, zoom.0.as_ref(), None)?;
    write_page(dir, &html)
}

/// The zoomed region of a finished fit page (opaque outside this file).
pub struct FitZoom(Option<Zoom>);

fn read_summary(dir: &Path) -> Result<Value> {
    serde_json::from_str(
        &std::fs::read_to_string(dir.join("summary.json"))
            .with_context(|| format!("reading {}", dir.join("summary.json").display()))?,
    )
    .with_context(|| format!("parsing {}", dir.join("summary.json").display()))
}

/// Writes the page of a fit run in progress: `summary` holds the finished architectures.
pub fn write_fit_live(dir: &Path, summary: &Value, live: &FitLive) -> Result<()> {
    let html = fit_html(dir, summary, Some(live), None, None)?;
    write_page(dir, &html)
}

fn fit_html(
    dir: &Path,
    summary: &Value,
    live: Option<&FitLive>,
    zoom: Option<&Zoom>,
    redirect: Option<&str>,
) -> Result<String> {
    let lines = read_metrics(&dir.join("metrics.jsonl"))?;
    let done: Vec<&Value> = summary["architectures"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let image = text(summary, "image");
    let title = format!("nshade fit: {image}");
    let refresh = match (live, redirect) {
        (Some(_), _) => Some(REFRESH_SECONDS.to_string()),
        (None, Some(url)) => Some(format!("{REFRESH_SECONDS}; url={url}")),
        (None, None) => None,
    };
    let mut o = String::new();
    page_head(&mut o, &title, refresh.as_deref());
    let _ = writeln!(o, "<h1>{}</h1>", esc(&title));
    // a time budget (`--seconds`) gives each architecture its own step count (the table's)
    let training = match summary["seconds_per_arch"].as_f64() {
        Some(s) => format!(
            "{s} s of training per architecture ({} samples a step; the steps each took are in the table)",
            summary["batch"]
        ),
        None => format!(
            "{} steps of {} samples per architecture",
            summary["steps"], summary["batch"]
        ),
    };
    let _ = writeln!(
        o,
        "<p>{}×{} pixels, {training}, loss {}, learning rate {}, {} backend, seed {}.</p>",
        summary["width"],
        summary["height"],
        esc(text(summary, "loss")),
        num(summary, "lr") as f32,
        esc(text(summary, "backend")),
        summary["seed"]
    );
    match live {
        Some(l) => {
            let _ = writeln!(
                o,
                "<p class=\"status\">Training in progress: {} of {} architectures finished{}. This page reloads every {REFRESH_SECONDS} s until the run ends.</p>",
                done.len(),
                l.archs.len(),
                l.current
                    .map(|c| format!(", now training <b>{}</b>", esc(c)))
                    .unwrap_or_default()
            );
        }
        None => {
            let _ = writeln!(
                o,
                "<p class=\"status done\">Finished. Best: <b>{}</b> (highest PSNR on the full image).</p>",
                esc(text(summary, "best"))
            );
        }
    }

    // Reproduce.
    let _ = writeln!(
        o,
        "<h2>Reproduce</h2>\n<pre id=\"command\">{}</pre>\n<p>Seed <code id=\"seed\">{}</code>; image SHA-256 <code>{}</code>. The command writes a fresh numbered run directory (nshade never writes into a non-empty one).</p>",
        esc(text(summary, "command")),
        summary["seed"],
        esc(text(summary, "image_sha256"))
    );

    // Table.
    o.push_str("<h2>Architectures</h2>\n<table id=\"architectures\">\n<thead><tr><th>best</th><th>name</th><th>architecture</th><th>params</th><th>steps</th><th>samples</th><th>time (s)</th><th>samples/s</th><th>final loss</th><th>PSNR (dB)</th></tr></thead>\n<tbody>\n");
    for a in &done {
        let best = a["best"].as_bool().unwrap_or(false);
        let _ = writeln!(
            o,
            "<tr{}><td>{}</td><td data-key=\"name\">{}</td><td><code>{}</code></td>{}{}{}{}{}{}{}</tr>",
            if best { " class=\"best\"" } else { "" },
            if best { "★" } else { "" },
            esc(text(a, "name")),
            esc(text(a, "arch")),
            cell(a, "params", format!("{}", a["params"])),
            cell(a, "steps", format!("{}", a["steps"])),
            cell(a, "samples", format!("{}", a["samples"])),
            cell(a, "seconds", format!("{:.2}", num(a, "seconds"))),
            cell(
                a,
                "samples_per_s",
                crate::fit::human(num(a, "samples_per_s"))
            ),
            cell(a, "loss", format!("{:.5}", num(a, "loss"))),
            cell(a, "psnr", format!("{:.2}", num(a, "psnr"))),
        );
    }
    if let Some(l) = live {
        for (name, spec) in l.archs.iter().skip(done.len()) {
            let last = lines.iter().rev().find(|m| text(m, "arch") == name);
            let state = match (l.current == Some(name.as_str()), last) {
                (true, Some(m)) => format!(
                    "training: step {} of {}, loss {:.5}, PSNR {:.2} dB (subsampled)",
                    m["step"],
                    summary["steps"],
                    num(m, "loss"),
                    num(m, "psnr")
                ),
                (true, None) => "starting".into(),
                _ => "waiting".into(),
            };
            let _ = writeln!(
                o,
                "<tr class=\"pending\"><td></td><td>{}</td><td><code>{}</code></td><td colspan=\"7\">{}</td></tr>",
                esc(name),
                esc(spec),
                esc(&state)
            );
        }
    }
    o.push_str("</tbody>\n</table>\n<p class=\"note\">PSNR: peak 1.0 over all RGB values, on every pixel of the image. Time is training time only (evaluation for this report excluded).</p>\n");

    let mut names: Vec<String> = done.iter().map(|a| text(a, "name").to_string()).collect();
    if let Some(l) = live {
        names.extend(l.archs.iter().skip(done.len()).map(|(n, _)| n.clone()));
    }
    // Images per architecture.
    let _ = writeln!(
        o,
        "<h2>Images</h2>\n<p class=\"note\">Reference, fit and error |fit − reference| × {} per architecture; click an image for it at full resolution.{}</p>",
        metrics::ERROR_GAIN,
        if live.is_some() {
            " The architecture in training shows a preview on a subsampled grid."
        } else {
            ""
        }
    );
    for n in &names {
        let rec = done.iter().find(|a| text(a, "name") == n);
        let detail = match rec {
            Some(a) => format!("loss {:.5}, PSNR {:.2} dB", num(a, "loss"), num(a, "psnr")),
            None => match lines.iter().rev().find(|m| text(m, "arch") == n) {
                Some(m) => format!(
                    "in training: step {}, loss {:.5}, PSNR {:.2} dB (subsampled)",
                    m["step"],
                    num(m, "loss"),
                    num(m, "psnr")
                ),
                None => "waiting".into(),
            },
        };
        let _ = writeln!(
            o,
            "<section class=\"arch\" id=\"arch-{}\">\n<h3>{}{} <small>({})</small></h3>",
            esc(n),
            esc(n),
            if rec.is_some_and(|a| a["best"].as_bool() == Some(true)) {
                " ★ best"
            } else {
                ""
            },
            esc(&detail)
        );
        figure(&mut o, dir, "reference.png", "reference");
        figure(&mut o, dir, &format!("{n}/fit.png"), &format!("{n}: fit"));
        figure(
            &mut o,
            dir,
            &format!("{n}/error.png"),
            &format!("{n}: error ×{}", metrics::ERROR_GAIN),
        );
        o.push_str("</section>\n");
    }
    // Curves.
    let series = |x: &str, y: &str, scale: f64| -> Vec<Series> {
        names
            .iter()
            .map(|n| Series {
                name: n.clone(),
                points: lines
                    .iter()
                    .filter(|m| text(m, "arch") == n)
                    .map(|m| (num(m, x) * scale, num(m, y)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    o.push_str("<h2>Training curves</h2>\n<div class=\"plots\">\n");
    o.push_str(&line_chart(
        "Training loss vs samples seen",
        "samples seen (millions)",
        "loss (log scale)",
        &series("samples", "loss", 1e-6),
        true,
        false,
        true,
    )?);
    o.push('\n');
    o.push_str(&line_chart(
        "PSNR vs training time",
        "training time (s)",
        "PSNR (dB)",
        &series("seconds", "psnr", 1.0),
        false,
        false,
        false,
    )?);
    let _ = writeln!(
        o,
        "\n</div>\n<p class=\"note\">From metrics.jsonl: loss is the training loss of the last step of each progress chunk; PSNR during training is measured on a subsampled grid of at most {PSNR_PIXELS} pixel centres, the last point of each curve on the full image.</p>"
    );

    // Zoom.
    if let Some(z) = zoom {
        let _ = writeln!(
            o,
            "<h2>Hardest region</h2>\n<p>The {}×{} tile at ({}, {}) where the best model, <b>{}</b>, has its largest squared error, enlarged {}× with nearest-neighbour sampling.</p>\n<div class=\"zoom\">",
            z.size_w,
            z.size_h,
            z.x,
            z.y,
            esc(text(summary, "best")),
            z.scale
        );
        figure(&mut o, dir, "zoom/reference.png", "reference");
        figure(&mut o, dir, "zoom/fit.png", "fit");
        figure(
            &mut o,
            dir,
            "zoom/error.png",
            &format!("error ×{}", metrics::ERROR_GAIN),
        );
        o.push_str("</div>\n");
    }

    o.push_str(
        "<p class=\"note\">Written by nshade; regenerate with <code>nshade report RUN_DIR</code>.</p>\n</body>\n</html>\n",
    );
    Ok(o)
}

// ---------------------------------------------------------------------------------------
// train

/// Writes a train run's page from `metrics.json` and `metrics.jsonl`.
pub fn write_train(dir: &Path) -> Result<()> {
    let path = dir.join("metrics.json");
    let m: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    let lines = read_metrics(&dir.join("metrics.jsonl"))?;
    let v = &m["validation"];
    let title = "nshade train: validation report";
    let mut o = String::new();
    page_head(&mut o, title, None);
    let _ = writeln!(o, "<h1>{}</h1>", esc(title));
    let _ = writeln!(
        o,
        "<h2>Reproduce</h2>\n<pre id=\"command\">{}</pre>\n<p>Seed <code id=\"seed\">{}</code>.</p>",
        esc(text(&m, "command")),
        m["seed"]
    );
    o.push_str("<h2>Summary</h2>\n<table id=\"summary\">\n<thead><tr><th>architecture</th><th>steps</th><th>batch</th><th>time (s)</th><th>samples/s</th><th>final loss</th><th>validation PSNR (dB)</th><th>validation RMSE</th><th>validation rows</th></tr></thead>\n<tbody>\n");
    let _ = writeln!(
        o,
        "<tr><td><code>{}</code></td>{}{}{}{}{}{}{}{}</tr>",
        esc(text(&m, "arch")),
        cell(&m, "steps", format!("{}", m["steps"])),
        cell(&m, "batch", format!("{}", m["batch"])),
        cell(&m, "seconds", format!("{:.2}", num(&m, "seconds"))),
        cell(
            &m,
            "samples_per_s",
            crate::fit::human(num(&m, "samples_per_s"))
        ),
        cell(&m, "final_loss", format!("{:.6}", num(&m, "final_loss"))),
        cell(v, "psnr", format!("{:.2}", num(v, "psnr"))),
        cell(v, "rmse", format!("{:.5}", num(v, "rmse"))),
        cell(v, "rows", format!("{}", v["rows"])),
    );
    o.push_str("</tbody>\n</table>\n");
    let slices: Vec<&Value> = v["slices"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    o.push_str("<h2>Validation by parameter slice</h2>\n<div class=\"plots\">\n");
    o.push_str(&slice_chart(&slices)?);
    o.push('\n');
    o.push_str(&line_chart(
        "Training loss vs samples seen",
        "samples seen (millions)",
        "loss (log scale)",
        &[Series {
            name: "training loss".into(),
            points: lines
                .iter()
                .map(|l| (num(l, "samples") * 1e-6, num(l, "loss")))
                .collect(),
        }],
        true,
        false,
        true,
    )?);
    o.push_str("\n</div>\n<table id=\"slices\">\n<thead><tr><th>parameter</th><th>t</th><th>rows</th><th>RMSE</th><th>PSNR (dB)</th></tr></thead>\n<tbody>\n");
    for s in &slices {
        let _ = writeln!(
            o,
            "<tr>{}{}{}{}{}</tr>",
            cell(s, "parameter", format!("{:.4}", num(s, "parameter"))),
            cell(s, "t", format!("{:.4}", num(s, "t"))),
            cell(s, "rows", format!("{}", s["rows"])),
            cell(s, "rmse", format!("{:.5}", num(s, "rmse"))),
            cell(s, "psnr", format!("{:.2}", num(s, "psnr"))),
        );
    }
    o.push_str("</tbody>\n</table>\n<p class=\"note\">No images: a dataset holds randomly drawn validation pixels per parameter value, not whole frames, so original vs neural vs error images cannot be drawn from it. Render the model with <code>nshade render</code> to look at it.</p>\n<p class=\"note\">Written by nshade; regenerate with <code>nshade report MODEL_DIR</code>.</p>\n</body>\n</html>\n");
    write_page(dir, &o)
}

/// Validation PSNR against the shader parameter, one point per validation slice.
fn slice_chart(slices: &[&Value]) -> Result<String> {
    line_chart(
        "Validation PSNR per parameter slice",
        "shader parameter",
        "PSNR (dB)",
        &[Series {
            name: "validation".into(),
            points: slices
                .iter()
                .map(|s| (num(s, "parameter"), num(s, "psnr")))
                .collect(),
        }],
        false,
        true,
        false,
    )
}

/// The page of a `distill` run, from its `report.json` and images: validation PSNR per
/// parameter slice, original vs neural vs amplified error at a few parameter values, and
/// the render cost of the original shader against the neural one.
pub fn write_distill(dir: &Path) -> Result<()> {
    let path = dir.join("report.json");
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("parsing {}", path.display()))?;
    let v = &r["validation"];
    let title = format!("nshade distill: {}", text(&r, "shader"));
    let mut o = String::new();
    page_head(&mut o, &title, None);
    let _ = writeln!(o, "<h1>{}</h1>", esc(&title));
    let _ = writeln!(
        o,
        "<p>Architecture <code>{}</code> ({} parameters), trained {} steps in {:.1} s on {}. Validation PSNR <b>{:.2} dB</b> (RMSE {:.5}) on held-out parameter slices. Details of training: <a href=\"model/report.html\">model/report.html</a>.</p>",
        esc(text(&r, "arch")),
        r["params"],
        r["training"]["steps"],
        num(&r["training"], "seconds"),
        esc(text(&r["training"], "backend")),
        num(v, "psnr"),
        num(v, "rmse")
    );
    if let Some(cands) = r["candidates"].as_array() {
        let p = &r["portfolio"];
        let _ = writeln!(
            o,
            "<h2>Candidates</h2>\n<table id=\"candidates\"><thead><tr><th>name</th><th>architecture</th><th>parameters</th><th>steps</th><th>seconds</th><th>validation PSNR</th><th>cost per frame</th><th>within budget</th></tr></thead><tbody>"
        );
        for c in cands {
            let _ = writeln!(
                o,
                "<tr{}><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.2} dB</td><td>{}</td><td>{}</td></tr>",
                if c["winner"] == true {
                    " class=\"best\""
                } else {
                    ""
                },
                esc(text(c, "name")),
                esc(text(c, "arch")),
                c["params"],
                c["steps"],
                num(c, "seconds"),
                num(c, "validation_psnr"),
                c["cost"]["ms"]
                    .as_f64()
                    .map_or("n/a".to_string(), |x| format!("{x:.3} ms")),
                if c["within_budget"] == true {
                    "yes"
                } else {
                    "no"
                }
            );
        }
        let _ = writeln!(
            o,
            "</tbody></table>\n<p>Winner {}.</p>\n<p class=\"note\">Budget: {}. Cost: the neural fragment shader at {} × {} pixels on {}, median of up to {} frames. Training time bound for the whole search: {}.</p>",
            esc(text(&r["winner"], "why")),
            esc(p["budget"].as_str().unwrap_or("none")),
            p["cost_resolution"][0],
            p["cost_resolution"][1],
            esc(p["cost_adapter"].as_str().unwrap_or("no adapter")),
            p["cost_frames"],
            p["seconds"]
                .as_f64()
                .map_or("none (steps per candidate)".to_string(), |s| format!(
                    "{s} s"
                ))
        );
    }
    let c = &r["render_cost"];
    let ms = |k: &str| {
        c[k].as_f64()
            .map_or("n/a".to_string(), |x| format!("{x:.3} ms"))
    };
    let _ = writeln!(
        o,
        "<h2>Render cost</h2>\n<table id=\"cost\"><thead><tr><th>shader</th><th>GPU time per frame</th><th>wall time per frame</th></tr></thead><tbody>\n<tr><td>original</td><td>{}</td><td>{}</td></tr>\n<tr><td>neural</td><td>{}</td><td>{}</td></tr>\n</tbody></table>\n<p class=\"note\">{} × {} pixels on {}, median of {} (GPU time from timestamp queries).</p>",
        ms("original_gpu_ms"),
        ms("original_wall_ms"),
        ms("neural_gpu_ms"),
        ms("neural_wall_ms"),
        r["size"][0],
        r["size"][1],
        esc(text(c, "adapter")),
        match (
            c["frames_timed"].as_u64(),
            c["neural_frames_timed"].as_u64()
        ) {
            (Some(o), Some(n)) if o != n => format!("{o} frames (original) and {n} (neural)"),
            _ => format!("{} frames", c["frames_timed"]),
        }
    );
    let slices: Vec<&Value> = v["slices"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    o.push_str("<h2>Validation by parameter slice</h2>\n<div class=\"plots\">\n");
    o.push_str(&slice_chart(&slices)?);
    o.push_str("\n</div>\n<h2>Original, neural, amplified error</h2>\n");
    for f in r["frames"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
    {
        // Schema-2 captures show the frame's parameter vector.
        let at = match f["parameters"].as_array() {
            Some(v) => format!(
                "parameters ({})",
                v.iter()
                    .map(|x| format!("{:.4}", x.as_f64().unwrap_or(f64::NAN)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("parameter {:.4}", num(f, "parameter")),
        };
        let _ = writeln!(
            o,
            "<h3>{} — PSNR {:.2} dB</h3>\n<div>",
            esc(&at),
            num(f, "psnr")
        );
        figure(&mut o, dir, text(f, "original"), "original shader");
        figure(&mut o, dir, text(f, "neural"), "neural shader");
        figure(&mut o, dir, text(f, "error"), "|neural − original| × 8");
        o.push_str("</div>\n");
    }
    let _ = writeln!(o, "<h2>Exported shaders</h2>\n<ul>");
    for e in r["exports"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
    {
        let e = e.as_str().unwrap_or("");
        let _ = writeln!(o, "<li><a href=\"{0}\">{0}</a></li>", esc(e));
    }
    o.push_str("</ul>\n<p class=\"note\">Written by nshade; regenerate with <code>nshade report DIR</code>.</p>\n</body>\n</html>\n");
    write_page(dir, &o)
}

/// A `metrics.jsonl` line of `train`.
pub fn train_line(step: u32, samples: u64, seconds: f64, loss: f32) -> Value {
    json!({"step": step, "samples": samples, "seconds": seconds, "loss": loss})
}

#[cfg(test)]
mod tests {
    #[test]
    fn rerun_commands_run_as_printed() {
        let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let taken = |p: &str| p == "m-2";
        assert_eq!(
            super::rerun_command(
                &a(&["fit", "x.png", "--out", "runs/a", "--steps", "5"]),
                7,
                taken
            ),
            "nshade fit x.png --steps 5 --seed 7"
        );
        assert_eq!(
            super::rerun_command(
                &a(&["distill", "s.glsl", "--out=r", "--seed", "3"]),
                3,
                taken
            ),
            "nshade distill s.glsl --seed 3"
        );
        assert_eq!(
            super::rerun_command(&a(&["train", "--dataset", "d", "--out", "m/"]), 1337, taken),
            "nshade train --dataset d --out m-3 --seed 1337"
        );
    }
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc(r#"a<b>&"c"'d'"#),
            "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;"
        );
        assert_eq!(esc("plain ★"), "plain ★");
    }

    #[test]
    fn sibling_urls_are_percent_encoded() {
        assert_eq!(sibling_page_url("run-001"), "../run-001/report.html");
        assert_eq!(sibling_page_url("my run#2"), "../my%20run%232/report.html");
    }

    #[test]
    fn quotes_shell_words_only_when_needed() {
        assert_eq!(shell_quote("--steps"), "--steps");
        assert_eq!(shell_quote("a=mlp(16x2, relu)"), "'a=mlp(16x2, relu)'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn torn_last_metrics_line_is_ignored_but_bad_lines_are_errors() {
        let d = std::env::temp_dir().join(format!("nshade-report-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("metrics.jsonl");
        std::fs::write(&p, "{\"step\":1}\n{\"step\":2}\n{\"ste").unwrap();
        assert_eq!(read_metrics(&p).unwrap().len(), 2);
        std::fs::write(&p, "{\"step\":1}\nnot json\n{\"step\":2}\n").unwrap();
        assert!(read_metrics(&p).is_err());
        assert!(read_metrics(&d.join("missing.jsonl")).unwrap().is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
