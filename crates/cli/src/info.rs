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
    // whether `--cpu-path bf16` runs on the instructions (else on the slower exact
    // emulation)
    let bf16 = nshade_core::bf16::hardware();
    // whether `--cpu-path amx` can run (else why not)
    let amx = nshade_core::amx::available();
    let adapters = nshade_gpu::context::list_adapters();
    if args.json {
        println!(
            "{}",
            serde_json::json!({"version": env!("CARGO_PKG_VERSION"), "cpu": {"threads": threads, "bf16_dot": bf16, "amx": amx.is_ok()}, "adapters": adapters})
        );
        return Ok(());
    }
    println!("nshade {}", env!("CARGO_PKG_VERSION"));
    println!("cpu: {threads} worker threads (set with --threads or RAYON_NUM_THREADS)");
    println!(
        "     bf16 dot products (--cpu-path bf16): {}",
        if bf16 {
            "yes (AVX512-BF16)"
        } else {
            "no (bf16 runs emulated: the same results, slower than f32)"
        }
    );
    match amx {
        Ok(()) => println!("     AMX tiles (--cpu-path amx): yes"),
        Err(why) => println!("     AMX tiles (--cpu-path amx): no ({why})"),
    }
    if adapters.is_empty() {
        println!(
            "gpu: no adapter found (on Linux without a GPU, install mesa-vulkan-drivers for lavapipe)"
        );
    }
    for a in adapters {
        let yes = |b: bool| if b { "yes" } else { "no" };
        println!(
            "gpu: {} ({}, {}, {})",
            a.name, a.backend, a.device_type, a.driver
        );
        println!(
            "     f16: {}  subgroups: {} (size {}..{})  timestamps: {}",
            yes(a.shader_f16),
            yes(a.subgroups),
            a.subgroup_size[0],
            a.subgroup_size[1],
            yes(a.timestamp_query)
        );
        if a.cooperative_matrix {
            println!(
                "     cooperative matrix: yes ({}){}",
                a.cooperative_matrix_shapes.join(", "),
                if a.cooperative_matrix_conversions {
                    "; conversions between uses (VK_NV_cooperative_matrix2)"
                } else {
                    ""
                }
            );
            if !a.cooperative_matrix2.is_empty() {
                println!("     VK_NV_cooperative_matrix2:");
                for line in &a.cooperative_matrix2 {
                    println!("       {line}");
                }
            }
        } else {
            println!("     cooperative matrix: no");
        }
        println!(
            "     workgroup memory: {} KiB, {} invocations per workgroup{}",
            a.max_workgroup_storage / 1024,
            a.max_invocations_per_workgroup,
            a.multiprocessors
                .map_or(String::new(), |m| format!(", {m} multiprocessors"))
        );
    }
    Ok(())
}
