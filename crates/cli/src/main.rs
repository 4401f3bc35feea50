//! `nshade`: train small neural networks for real-time graphics and ship them as shaders.
//!
//! This binary only parses flags, calls the libraries and prints; each subcommand lives
//! in its own file.

mod bench;
mod capture;
mod common;
mod distill;
mod eval;
mod export;
mod fit;
mod info;
mod render;
mod report;
mod train;

use clap::{Parser, Subcommand};

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
}

fn main() {
    common::ensure_runtime_dir();
    let cli = Cli::parse();
    let result = match cli.command {
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
    };
    if let Err(e) = result {
        // One line: the chain of causes joined by ': '.
        let msg = format!("{e:#}").replace('\n', " ");
        eprintln!("error: {msg}");
        std::process::exit(1);
    }
}
