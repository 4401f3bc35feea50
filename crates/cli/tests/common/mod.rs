//! Helpers shared by the integration tests.
#![allow(dead_code)]

use nshade_core::dataset::{DatasetMeta, SplitData, write_dataset};
use std::path::Path;

/// A smooth animated "shader": sums of sines of x, y and t, sampled like a capture.
pub fn plasma(x: f32, y: f32, t: f32) -> [f32; 3] {
    [
        0.5 + 0.25 * (3.0 * x + 2.0 * t).sin() + 0.2 * (4.0 * y - t).cos(),
        0.5 + 0.3 * (2.5 * (x + y) + 1.5 * t).sin(),
        0.5 + 0.25 * (5.0 * x * y + t).cos() + 0.1 * (2.0 * y).sin(),
    ]
}

pub fn make_dataset(dir: &Path, frames: (usize, usize), pixels: usize) {
    let (w, h) = (64u32, 36u32);
    let mut state = 12345u64;
    let mut rand = |n: u32| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) % n as u64) as u32
    };
    let mut split = |count: usize, train: bool| {
        let mut rows = Vec::new();
        let mut params = Vec::new();
        for f in 0..count {
            let frac = if train {
                f as f32 / (count - 1) as f32
            } else {
                (f as f32 + 0.381966) / count as f32
            };
            let t = frac * 2.0 - 1.0;
            params.push(t);
            for _ in 0..pixels {
                let (px, py) = (rand(w), rand(h));
                let (x, y) = (
                    (px as f32 + 0.5) / w as f32 * 2.0 - 1.0,
                    (py as f32 + 0.5) / h as f32 * 2.0 - 1.0,
                );
                rows.extend([x, y, t]);
                rows.extend(plasma(x, y, t));
            }
        }
        (rows, params)
    };
    let (tr, tp) = split(frames.0, true);
    let (va, vp) = split(frames.1, false);
    let meta = DatasetMeta {
        source_kind: "test-function".into(),
        source_digest: "0".repeat(64),
        fixed_state: "all".into(),
        resolution: [w, h],
        parameter_range: [-1.0, 1.0],
        seed: 4090,
    };
    write_dataset(
        dir,
        &meta,
        SplitData {
            rows: &tr,
            parameters: &tp,
        },
        SplitData {
            rows: &va,
            parameters: &vp,
        },
        &[],
    )
    .unwrap();
}
