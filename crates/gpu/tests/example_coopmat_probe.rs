#![cfg(feature = "glslang")]
//! `examples/coopmat_probe.rs`: every form's kernel compiles with glslang; where the
//! adapter has cooperative matrices (the H200) every subgroup-scope form, and every
//! workgroup-scope form the driver takes, gives back its input bit for bit after a chain
//! of identity products; elsewhere (lavapipe) `run` refuses with the reason.

mod common;

#[path = "../examples/coopmat_probe.rs"]
mod example;

#[test]
fn probe_forms_compile_and_keep_their_input() {
    let forms = example::forms(4);
    // subgroup scope (two accumulator types, and f16 with the tile loop unrolled and with
    // the tiles interleaved) and workgroup scope, in workgroups of 128 and 256, over 64
    // and 128 samples
    assert_eq!(forms.len(), 20);
    for f in &forms {
        if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&f.glsl) {
            panic!("{}: line {:?}: {}\n{}", f.name, e.line, e.message, f.glsl);
        }
        assert_eq!(
            f.glsl.contains("gl_ScopeWorkgroup"),
            f.name.starts_with("workgroup"),
            "{}",
            f.name
        );
        // interleaved: no tile loop, every tile's accumulator declared
        assert_eq!(
            f.glsl.contains("for (uint j = 0u;"),
            f.name.starts_with("subgroup") && !f.name.contains("interleaved"),
            "{}",
            f.name
        );
    }
    let Some(ctx) = common::context() else { return };
    let coop = ctx.has(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && ctx.has(wgpu::Features::PASSTHROUGH_SHADERS);
    drop(ctx);
    match example::run(8, 16, 1) {
        Ok(results) => {
            assert!(coop, "ran without cooperative matrices");
            assert_eq!(results.len(), forms.len());
            for (r, f) in results.iter().zip(&forms) {
                match r {
                    Ok(m) => {
                        assert!(m.exact, "{}: the output differs from the input", m.name);
                        assert!(m.tflops.is_finite() && m.tflops > 0.0, "{}", m.name);
                    }
                    // only a workgroup-scope form may be refused (no such scope, or a
                    // driver that does not take its size)
                    Err(e) => assert!(f.name.starts_with("workgroup"), "{e}"),
                }
            }
        }
        Err(e) => {
            assert!(!coop, "refused with cooperative matrices: {e}");
            assert!(e.to_string().contains("cooperative matrices"), "{e}");
        }
    }
}
