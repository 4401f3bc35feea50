//! Single-thread throughput of the CPU's dense-layer kernels on the shapes of the
//! benchmark networks: `cargo run --release -p nshade-core --example dense_bench`.
use nshade_core::dense::{broadcast_product, padded, weight_gradient};
use std::time::Instant;

fn main() {
    let np = padded(256);
    for (o, i) in [(32, 12), (32, 32), (3, 32), (64, 32), (64, 64), (3, 64)] {
        let w: Vec<f32> = (0..o * i).map(|k| (k % 7) as f32 * 0.01).collect();
        let b = vec![0.1f32; o];
        let x: Vec<f32> = (0..i * np).map(|k| (k % 5) as f32 * 0.1).collect();
        let g: Vec<f32> = (0..o * np).map(|k| (k % 3) as f32 * 0.1).collect();
        let mut z = vec![0.0f32; o * np];
        let mut dx = vec![0.0f32; i * np];
        let mut dw = vec![0.0f32; o * i + o];
        let mut db = vec![0.0f32; o];
        let reps = (4_000_000_000 / (o * i * np * 2)).max(1);
        let time = |f: &mut dyn FnMut()| {
            f();
            let t = Instant::now();
            for _ in 0..reps {
                f();
            }
            (o * i * np * 2 * reps) as f64 / t.elapsed().as_secs_f64() / 1e9
        };
        let fwd = time(&mut || broadcast_product(o, i, &w, i, 1, &x, np, Some(&b), &mut z));
        let bwd = time(&mut || broadcast_product(i, o, &w, 1, i, &g, np, None, &mut dx));
        let grad = time(&mut || weight_gradient(o, i, &g, &x, np, &mut dw, i, &mut db));
        println!(
            "{o:>3} x {i:>3}, {np} samples: forward {fwd:6.1}  dx {bwd:6.1}  dW {grad:6.1} GFLOP/s"
        );
    }
}
