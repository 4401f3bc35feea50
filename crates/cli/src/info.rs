//! `nshade info`: what this machine offers nshade.

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let threads = rayon::current_num_threads();
    if args.json {
        println!("{}", serde_json::json!({"version": env!("CARGO_PKG_VERSION"), "cpu": {"threads": threads}, "gpu": []}));
    } else {
        println!("nshade {}", env!("CARGO_PKG_VERSION"));
        println!("cpu: {threads} worker threads (set with --threads or RAYON_NUM_THREADS)");
        println!("gpu: this build has no GPU backend");
    }
    Ok(())
}
