#![cfg(feature = "glslang")]
//! `examples/residency_probe.rs`: its kernels compile with glslang for every probed shape,
//! and the probe runs on this machine's adapter (lavapipe in CI): one time per load,
//! each finite and positive, and a residency among the loads.

mod common;

#[path = "../examples/residency_probe.rs"]
mod example;

#[test]
fn probe_kernels_compile_and_run() {
    for threads in [128u32, 256] {
        for bytes in [4usize, 16384, 49152] {
            let src = example::kernel(threads, bytes, 10);
            if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
                panic!(
                    "{threads} x {bytes}: line {:?}: {}\n{src}",
                    e.line, e.message
                );
            }
            assert!(src.contains(&format!("shared float s[{}];", (bytes / 4).max(1))));
        }
    }
    // the adapter check is the helpers' (a failure under CI=true)
    let Some(ctx) = common::passthrough_context() else {
        return;
    };
    drop(ctx);
    let (name, rows) = example::run(2, 100, &[128], &[4, 16384], 1).expect("the probe ran");
    assert!(!name.is_empty());
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r.micros.len(), example::LOADS.len());
        assert!(
            r.micros.iter().all(|t| t.is_finite() && *t > 0.0),
            "{:?}",
            r.micros
        );
        assert!(example::LOADS.contains(&r.resident()));
    }
}
