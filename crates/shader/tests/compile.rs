//! Every target × every fixed model, compiled by a real compiler.

mod common;

use nshade_shader::{Options, Precision, Target, WeightMode, export};

fn opts(target: Target, weights: WeightMode, precision: Precision, fragment: bool) -> Options {
    Options {
        weights,
        precision,
        fragment,
        ..Options::new(target)
    }
}

#[test]
fn wgsl_validates_with_naga() {
    for (name, model) in common::all() {
        for weights in [WeightMode::Baked, WeightMode::Buffer] {
            for precision in [Precision::F32, Precision::F16] {
                for fragment in [false, true] {
                    if fragment && !common::can_fragment(&model) {
                        continue;
                    }
                    let mut o = opts(Target::Wgsl, weights, precision, fragment);
                    o.compute = !fragment;
                    let src = export(&model, &o).unwrap().into_text().unwrap();
                    if let Err(e) = nshade_shader::validate_wgsl(&src) {
                        panic!("{name} {o:?}: {e}\n{src}");
                    }
                }
            }
        }
    }
}
