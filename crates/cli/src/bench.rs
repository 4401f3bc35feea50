//! `nshade bench`: training throughput per architecture and batch size.

use crate::common::{self, BackendChoice};
use crate::fit::{DEFAULT_ARCHS, human};
use anyhow::{Result, bail};
use nshade_core::arch::NamedArch;
use nshade_core::data::TrainingData;
use nshade_core::network::Network;
use nshade_core::texture::Texture;
use nshade_core::train::TrainConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The benchmark set: the seed's four and the common wider network.
const BENCH_ARCHS: &[&str] = &[
    "seed1=mlp(32x3, relu)",
    "seed2=mlp(32x3, leaky_relu, sigmoid)",
    "seed3=freq(3) | mlp(32x3, leaky_relu, sigmoid)",
    "seed4=freq(3) | mlp(32x4, leaky_relu, sigmoid)",
    "freq8_64x4=freq(8) | mlp(64x4, relu)",
];

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value_t = BackendChoice::Cpu)]
    pub backend: BackendChoice,
    /// Architectures (default: the seed's four and freq(8) | mlp(64x4, relu)).
    #[arg(long = "arch", value_name = "SPEC")]
    pub archs: Vec<String>,
    /// Batch sizes; repeat for several.
    #[arg(long = "batch", default_values_t = [65536])]
    pub batches: Vec<usize>,
    /// Minimum measured time per case, seconds.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(args: Args) -> Result<()> {
    common::init_threads(args.threads)?;
    let _ = DEFAULT_ARCHS;
    let specs: Vec<String> = if args.archs.is_empty() {
        BENCH_ARCHS.iter().map(|s| s.to_string()).collect()
    } else {
        args.archs.clone()
    };
    let backend = common::training_backend(args.backend)?;
    let data = Arc::new(TrainingData::Texture(Texture::builtin()));
    for s in &specs {
        let named = NamedArch::parse(s).map_err(|e| anyhow::anyhow!("--arch '{s}': {e}"))?;
        let net =
            Network::build(&named.arch, 2, 3).map_err(|e| anyhow::anyhow!("--arch '{s}': {e}"))?;
        for &batch in &args.batches {
            if batch == 0 {
                bail!("--batch must be at least 1");
            }
            let cfg = TrainConfig {
                batch,
                ..TrainConfig::default()
            };
            let mut trainer = backend.start(&net, net.init_params(1), data.clone(), &cfg)?;
            trainer.run(2)?; // warm-up: first-touch allocations, pipeline creation
            let mut steps = 0u32;
            let mut per_call = 1u32;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs_f64(args.seconds) {
                trainer.run(per_call)?;
                steps += per_call;
                per_call = (per_call * 2).min(64);
            }
            let _ = trainer.params()?; // include the final synchronisation
            let secs = start.elapsed().as_secs_f64();
            let sps = steps as f64 * batch as f64 / secs;
            if args.json {
                println!(
                    "{}",
                    json!({"arch": named.arch.to_string(), "name": named.name, "backend": backend.name(), "path": trainer.path(),
                           "batch": batch, "steps": steps, "seconds": secs, "samples_per_s": sps,
                           "params": net.param_count, "threads": rayon::current_num_threads()})
                );
            } else {
                println!(
                    "{:>12}  {:<45} batch {:>8}  {:>10} samples/s  ({steps} steps in {secs:.2} s)",
                    named.name,
                    named.arch.to_string(),
                    batch,
                    human(sps)
                );
            }
        }
    }
    Ok(())
}
