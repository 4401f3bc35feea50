//! `examples/amx_probe.rs`: where the CPU has AMX-TILE and AMX-BF16 and the kernel grants
//! the tile state (this repository's 2-core Intel machines), every probed layer shape's
//! tile products equal the scalar reference bit for bit and both rates are positive;
//! elsewhere `run` refuses with the reason, and only where CPUID lacks the features (or
//! the platform is not x86-64 Linux) may it.

#[path = "../examples/amx_probe.rs"]
mod example;

#[test]
fn amx_tile_products_are_exact_where_amx_runs() {
    let listed = nshade_core::amx::listed();
    match example::run(64, 1e6) {
        Ok(rows) => {
            assert!(listed, "ran without AMX listed");
            assert_eq!(rows.len(), example::SHAPES.len());
            for m in rows {
                assert!(m.exact, "{} x {}: tile products differ", m.out, m.inp);
                assert!(m.amx_gflops.is_finite() && m.amx_gflops > 0.0);
                assert!(m.amx_relu_gflops.is_finite() && m.amx_relu_gflops > 0.0);
                assert!(m.f32_gflops.is_finite() && m.f32_gflops > 0.0);
                if let Some((alone, tiles, f, ok)) = m.gradient {
                    assert!(ok, "{} x {}: the tiles' dW differs", m.out, m.inp);
                    assert!(alone > 0.0 && tiles > 0.0 && f > 0.0);
                }
            }
        }
        Err(why) => {
            eprintln!("amx_probe did not run: {why}");
            assert!(
                !listed || why.contains("kernel refused"),
                "AMX listed but refused: {why}"
            );
        }
    }
}
