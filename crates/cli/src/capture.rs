//! `nshade capture`: render a WGSL or ShaderToy-style GLSL fragment shader over a parameter
//! range into a seed-002 dataset, or over several parameters (`--param NAME=A..B`) into a
//! schema-2 dataset (see docs/capture.md).

use crate::common;
use anyhow::{Context, Result};
use nshade_gpu::capture::{
    self, CaptureError, CaptureSettings, DisplayStats, OutputSemantics, Parameter, ShaderSource,
};
use nshade_gpu::context::GpuContext;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// The fragment shader: .wgsl (fs_main + Params block) or .glsl/.frag (ShaderToy mainImage).
    pub shader: PathBuf,
    /// The dataset directory to create (must be new or empty).
    #[arg(long)]
    pub out: PathBuf,
    /// Render target size, WxH.
    #[arg(long, value_parser = common::parse_size, default_value = "320x180")]
    pub size: (usize, usize),
    /// The parameter range A..B the shader sees (WGSL params.parameter, ShaderToy iTime);
    /// default -1..1 for .wgsl (the seed's), 0..2 for ShaderToy tabs (iTime is never negative there).
    #[arg(long, value_parser = parse_range, allow_hyphen_values = true, conflicts_with = "param")]
    pub param_range: Option<(f32, f32)>,
    /// A parameter NAME=A..B, repeatable: several give the shader a vector of parameters
    /// (WGSL: params.values[i] in order; ShaderToy: NAME is the input it drives, iTime,
    /// iMouse.x, iMouse.y, iMouse.z or iMouse.w) and write a schema-2 dataset.
    #[arg(long, value_name = "NAME=A..B", value_parser = parse_param, allow_hyphen_values = true)]
    pub param: Vec<(String, (f32, f32))>,
    /// Training frames, at frame/(count-1) of the range.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u32).range(2..=512))]
    pub train_frames: u32,
    /// Validation frames, at (frame+0.381966)/count of the range.
    #[arg(long, default_value_t = 13, value_parser = clap::value_parser!(u32).range(2..=128))]
    pub validation_frames: u32,
    /// Random pixels sampled per frame (1..=65536), or `all`: every pixel of every frame.
    #[arg(long, default_value = "2048", value_parser = parse_pixels)]
    pub pixels_per_frame: Pixels,
    /// Seed of the java.util.Random that picks the pixels (same seed, same pixels as the seed's Kotlin).
    #[arg(long, default_value_t = 4090, allow_hyphen_values = true)]
    pub seed: i64,
    /// The seed's contract: refuse NaN/Inf and non-opaque output, keep HDR colours as
    /// rendered (the default for .wgsl).
    #[arg(long, conflicts_with = "display")]
    pub strict: bool,
    /// What ShaderToy shows: alpha ignored, NaN -> 0, +Inf -> 1, -Inf -> 0, colours clamped
    /// to [0,1], replacements counted (the default for .glsl/.frag/.fs).
    #[arg(long)]
    pub display: bool,
    /// The path printed for the dataset when it differs from where it is written now
    /// (`distill` captures into its unfinished output directory).
    #[arg(skip)]
    pub shown_as: Option<PathBuf>,
}

/// `--pixels-per-frame`: a count of random pixels, or every pixel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pixels {
    Count(u32),
    All,
}

/// Parses `--pixels-per-frame`: `all` or a count in 1..=65536.
pub fn parse_pixels(s: &str) -> Result<Pixels, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Pixels::All);
    }
    match s.parse::<u32>() {
        Ok(n) if (1..=65536).contains(&n) => Ok(Pixels::Count(n)),
        _ => Err(format!("expected all or a count in 1..=65536, got {s:?}")),
    }
}

/// `--strict` / `--display`, or `None` for the source kind's default.
pub fn semantics(strict: bool, display: bool) -> Option<OutputSemantics> {
    match (strict, display) {
        (true, _) => Some(OutputSemantics::Strict),
        (_, true) => Some(OutputSemantics::Display),
        _ => None,
    }
}

fn counts(s: &DisplayStats) -> String {
    format!(
        "{} NaN/Inf replaced ({} NaN, {} +Inf, {} -Inf), {} clamped",
        s.replaced(),
        s.nan,
        s.pos_inf,
        s.neg_inf,
        s.clamped
    )
}

/// Parses `--param NAME=A..B`: NAME a column name (letters, digits, '_', '.', '-'), the
/// range as [`parse_range`].
pub fn parse_param(s: &str) -> Result<(String, (f32, f32)), String> {
    let (name, range) = s
        .split_once('=')
        .ok_or_else(|| format!("invalid parameter '{s}': expected NAME=A..B, e.g. iTime=0..2"))?;
    let name = name.trim();
    nshade_core::model::check_name(name).map_err(|e| format!("parameter name {e}"))?;
    Ok((name.to_string(), parse_range(range)?))
}

/// `--param` flags as capture parameters; a name given twice is an error.
pub fn parameters(flags: &[(String, (f32, f32))]) -> Result<Vec<Parameter>> {
    let mut out: Vec<Parameter> = Vec::new();
    for (name, (a, b)) in flags {
        if out.iter().any(|p| &p.name == name) {
            anyhow::bail!("--param {name}: the parameter is given twice");
        }
        out.push(Parameter::new(name, [*a, *b]));
    }
    Ok(out)
}

/// Parses `A..B` (either may be negative): finite, A < B.
pub fn parse_range(s: &str) -> Result<(f32, f32), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("invalid range '{s}': expected A..B, e.g. -1..1"))?;
    let a: f32 = a
        .trim()
        .parse()
        .map_err(|_| format!("invalid range start in '{s}'"))?;
    let b: f32 = b
        .trim()
        .parse()
        .map_err(|_| format!("invalid range end in '{s}'"))?;
    if !a.is_finite() || !b.is_finite() {
        return Err(format!("range '{s}' must be finite"));
    }
    if a >= b {
        return Err(format!("range '{s}': the start must be below the end"));
    }
    Ok((a, b))
}

pub fn run(args: Args) -> Result<()> {
    common::install_cancel_handler();
    let source = ShaderSource::from_file(&args.shader)?;
    let parameters = parameters(&args.param)?;
    let range = args
        .param_range
        .unwrap_or_else(|| source.kind.default_parameter_range());
    let settings = CaptureSettings {
        width: args.size.0 as u32,
        height: args.size.1 as u32,
        parameter_range: [range.0, range.1],
        parameters,
        training_frames: args.train_frames,
        validation_frames: args.validation_frames,
        pixels_per_frame: match args.pixels_per_frame {
            Pixels::Count(n) => n,
            Pixels::All => CaptureSettings::default().pixels_per_frame,
        },
        every_pixel: args.pixels_per_frame == Pixels::All,
        seed: args.seed,
        semantics: semantics(args.strict, args.display),
        ..CaptureSettings::default()
    };
    settings.validate()?;
    let names: Vec<&str> = settings
        .parameters
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    capture::Slot::for_names(source.kind, &names).context("--param")?;
    common::check_out_dir(&args.out, "--out")?;
    capture::check_new_dir(&args.out).context("--out")?;
    if let Some(parent) = args.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        common::clean_stale_temps(parent);
    } else {
        common::clean_stale_temps(std::path::Path::new("."));
    }
    // Compile before opening the device, so a broken shader fails fast and without a GPU.
    source.compile()?;
    let ctx = GpuContext::new()?;
    // The dataset is built in this temporary sibling (removed if an interrupt is forced).
    common::register_temp(&nshade_core::fsutil::temp_sibling(&args.out));
    let frames = (settings.training_frames + settings.validation_frames) as u64;
    let mut bar = common::Progress::counted(frames, "capture", "frames");
    let mut last = 0;
    let trained = settings.training_frames;
    let start = Instant::now();
    let result = capture::capture(
        &ctx,
        &source,
        &settings,
        &args.out,
        &mut |split, frame, _count| {
            if common::cancelled() {
                return Err(CaptureError::Settings(
                    "interrupted; no dataset was written".into(),
                ));
            }
            let done = if split == "train" {
                frame
            } else {
                trained + frame
            };
            last = done as u64;
            bar.set(last, &format!("{split} {frame}"));
            Ok(())
        },
    );
    bar.finish(last, "done");
    let summary = result?;
    for a in source.adaptations() {
        eprintln!(
            "notice: {}: not used, the nshade wrapper provides it: {a}",
            args.shader.display()
        );
    }
    println!("{}", args.shown_as.as_ref().unwrap_or(&args.out).display());
    let over = summary
        .parameters
        .iter()
        .map(|(p, _)| {
            if summary.schema == 1 {
                format!("{}..{}", p.range[0], p.range[1])
            } else {
                format!("{}={}..{}", p.name, p.range[0], p.range[1])
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    println!(
        "captured {} ({} via {}, sha256 {}) at {}x{} over {over} (schema {}): {} training rows ({} frames), {} validation rows ({} frames), seed {}, {:.1} s on {}",
        args.shader.display(),
        summary.source_kind.manifest_name(),
        summary.frontend.name(),
        &summary.digest[..12],
        settings.width,
        settings.height,
        summary.schema,
        summary.train_rows,
        settings.training_frames,
        summary.validation_rows,
        settings.validation_frames,
        settings.seed,
        start.elapsed().as_secs_f64(),
        ctx.summary.name,
    );
    match summary.semantics {
        OutputSemantics::Strict => {
            println!("strict semantics: every value finite and opaque, colours as rendered")
        }
        OutputSemantics::Display => println!(
            "display semantics (alpha ignored, clamped to [0,1]): training frames {}; validation frames {}",
            counts(&summary.train_display),
            counts(&summary.validation_display)
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("-1..1"), Ok((-1.0, 1.0)));
        assert_eq!(parse_range("0.5..2.25"), Ok((0.5, 2.25)));
        assert_eq!(parse_range("-3..-0.5"), Ok((-3.0, -0.5)));
        assert!(parse_range("1..1").is_err());
        assert!(parse_range("2..1").is_err());
        assert!(parse_range("nan..1").is_err());
        assert!(parse_range("-inf..1").is_err());
        assert!(parse_range("1").is_err());
        assert!(parse_range("a..b").is_err());
    }

    #[test]
    fn params() {
        assert_eq!(
            parse_param("iMouse.x=0..320"),
            Ok(("iMouse.x".into(), (0.0, 320.0)))
        );
        assert_eq!(
            parse_param("light=-1..1"),
            Ok(("light".into(), (-1.0, 1.0)))
        );
        assert!(
            parse_param("light")
                .unwrap_err()
                .contains("expected NAME=A..B")
        );
        assert!(
            parse_param("a b=0..1")
                .unwrap_err()
                .contains("is not allowed")
        );
        assert!(parse_param("=0..1").unwrap_err().contains("is not allowed"));
        assert!(
            parse_param("a=1..1")
                .unwrap_err()
                .contains("the start must be below")
        );
        let e = parameters(&[("a".into(), (0.0, 1.0)), ("a".into(), (0.0, 2.0))]).unwrap_err();
        assert_eq!(e.to_string(), "--param a: the parameter is given twice");
    }
}
