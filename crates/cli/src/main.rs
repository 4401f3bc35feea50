//! `nshade`: train small neural networks for real-time graphics and ship them as shaders.
//!
//! This binary only parses flags, calls the libraries and prints; each subcommand lives
//! in its own file.

mod batch;
mod bench;
mod capture;
mod common;
mod distill;
mod eval;
mod export;
mod fit;
mod fit_arrays;
mod info;
mod init;
mod portfolio;
mod render;
mod report;
mod train;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "nshade",
    version,
    about = "Train small neural networks for real-time graphics and ship them as shaders"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train several architectures side by side on an image (default: a built-in texture).
    Fit(fit::Args),
    /// Evaluate a model on raw rows of little-endian float32 inputs.
    Eval(eval::Args),
    /// Train on a seed-002 (x, y, t) → RGB dataset (drop-in for a renderer's training script).
    Train(train::Args),
    /// Render a 2-input (u, v) or 3-input (x, y, t) model to an image.
    Render(render::Args),
    /// Measure training throughput (samples/s) per architecture and batch size.
    Bench(bench::Args),
    /// Write the inference shader of a trained model (WGSL, GLSL, HLSL, Slang, MSL, SPIR-V, ShaderToy).
    Export(export::Args),
    /// Render a WGSL or ShaderToy-style GLSL shader over a parameter range into a dataset.
    Capture(capture::Args),
    /// Capture, train, export and report on a shader in one command.
    Distill(distill::Args),
    /// Regenerate report.html of a finished `fit` or `train` run from its files.
    Report(report::Args),
    /// Show the backends and adapters found.
    Info(info::Args),
    /// Run many fit/train/distill jobs from a JSON-lines file on every GPU of a host, or
    /// as one shard of a scheduler's array (Slurm, Kubernetes, Ray); see docs/scale.md.
    Batch(batch::Args),
}

fn main() {
    common::ensure_runtime_dir();
    let cli = parse_args();
    if let Err(e) = dispatch(cli.command) {
        // One line: the chain of causes joined by ': '.
        eprintln!("error: {}", one_line(&e));
        std::process::exit(1);
    }
}

fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Fit(a) => fit::run(a),
        Command::Eval(a) => eval::run(a),
        Command::Render(a) => render::run(a),
        Command::Train(a) => train::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Info(a) => info::run(a),
        Command::Distill(a) => distill::run(a),
        Command::Export(a) => export::run(a),
        Command::Capture(a) => capture::run(a),
        Command::Report(a) => report::run(a),
        Command::Batch(a) => batch::run(a),
    }
}

/// An error as the one line `main` prints after `error: `: the chain of causes joined by
/// ': '.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

/// Runs the command line `argv` (`nshade` first) on this thread, as `main` would in a
/// process of its own: `nshade batch`'s in-process workers call it inside a job scope
/// (`common::in_job_scope`). A failure comes back as the exit status and the one error
/// line the process would have had (2 for a usage error, 1 otherwise).
pub(crate) fn run_argv(argv: &[String]) -> Result<(), (i32, String)> {
    let parsed = command()
        .try_get_matches_from(argv)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => dispatch(cli.command).map_err(|e| (1, one_line(&e))),
        Err(e) => Err((2, usage_line(&e, argv.get(1).map(String::as_str)))),
    }
}

/// The command-line parser: negative numbers are values (`--t -0.5`, `--seed -1` gets
/// "invalid value", not a tip about `--`).
fn command() -> clap::Command {
    Cli::command().mut_subcommands(|c| c.allow_negative_numbers(true))
}

/// Parses the command line; a usage error is one line on stderr, exit 2.
fn parse_args() -> Cli {
    let parsed = command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                e.exit();
            }
            let sub = std::env::args().nth(1);
            eprintln!("error: {}", usage_line(&e, sub.as_deref()));
            std::process::exit(2);
        }
    }
}

/// clap's error as one line: its message (lines before the usage, without "tip:" lines)
/// joined, plus where to read more (`sub`: the word after `nshade`).
fn usage_line(e: &clap::Error, sub: Option<&str>) -> String {
    let text = e.render().to_string();
    let mut parts = Vec::new();
    for l in text.lines().map(str::trim) {
        if l.starts_with("Usage:") || l.starts_with("For more information") {
            break;
        }
        if l.is_empty() || l.starts_with("tip:") {
            continue;
        }
        parts.push(l.strip_prefix("error: ").unwrap_or(l));
    }
    let message = if parts.is_empty() {
        "invalid command line".to_string()
    } else {
        parts.join(" ")
    };
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    match sub.filter(|a| names.iter().any(|n| n == a)) {
        Some(cmd) => format!("{message} (see `nshade {cmd} --help`)"),
        None => format!("{message} (see `nshade --help`)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag and argument of every subcommand has a help line.
    #[test]
    fn every_argument_has_help() {
        let cmd = Cli::command();
        let mut missing = Vec::new();
        for sub in cmd.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg
                    .get_help()
                    .is_none_or(|h| h.to_string().trim().is_empty())
                {
                    missing.push(format!("{} {id}", sub.get_name()));
                }
            }
        }
        assert!(missing.is_empty(), "no help line: {missing:?}");
    }

    #[test]
    fn usage_errors_are_one_line() {
        let e = command()
            .try_get_matches_from(["nshade", "fit", "--steps", "-1"])
            .err()
            .unwrap();
        let line = usage_line(&e, Some("fit"));
        assert!(!line.contains('\n') && line.contains("'-1'"), "{line}");
        assert!(line.contains("(see `nshade fit --help`)"), "{line}");
    }
}
