//! WGSL snippets the training kernels are built from. Activations (value and derivative)
//! and the encodings come from the shared emitters in `nshade_shader::wgsl` (one emitter
//! per module for training and export); the losses (value and gradient), the sample hash
//! and the texture lookup live here. Each mirrors the formula documented in `nshade_core`
//! (activation.rs, loss.rs, rng.rs, texture.rs); the tests in `crates/gpu/tests` check the
//! GPU against the CPU on the same batch.

use nshade_core::Activation;
use nshade_core::loss::Loss;

/// An f32 literal that parses back to exactly `x` (shortest round-trip form plus `f`).
pub fn lit(x: f32) -> String {
    assert!(x.is_finite(), "non-finite constant {x} in a kernel");
    let s = format!("{x:?}");
    if s.contains('e') && !s.contains('.') {
        // `1e-7` → `1.0e-7f`
        let (m, e) = s.split_once('e').unwrap();
        format!("{m}.0e{e}f")
    } else {
        format!("{s}f")
    }
}

/// True when the derivative of `act` needs the pre-activation z (else it is computed from
/// the output y alone, so z need not be stored).
pub fn needs_z(act: Activation) -> bool {
    match act {
        Activation::Swish | Activation::Sine { .. } | Activation::Softplus => true,
        Activation::LeakyRelu { slope } => slope <= 0.0,
        _ => false,
    }
}

/// y = f(z) as a WGSL expression of the plain name `z`: the shared emitter of
/// `nshade_shader::wgsl`, so training and the exported shaders evaluate the same text.
pub fn act_value(act: Activation, z: &str) -> String {
    nshade_shader::wgsl::activation(&act, z)
}

/// f'(z) as a WGSL expression (shared emitter of `nshade_shader::wgsl`). `z` is only
/// read when [`needs_z`]; otherwise the output `y` stands in for it, which gives the same
/// value (relu and leaky_relu with a positive slope test `z > 0`, and `y > 0` exactly
/// when `z > 0`; the other activations use y alone).
pub fn act_derivative(act: Activation, z: &str, y: &str) -> String {
    let z = if needs_z(act) { z } else { y };
    nshade_shader::wgsl::activation_derivative(&act, z, y)
}

/// Helper functions every training kernel includes.
pub const COMMON: &str = r#"
fn nsh_pcg_hash(input: u32) -> u32 {
    let state = input * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}
fn nsh_unit(h: u32) -> f32 {
    return f32(h >> 8u) * (1.0f / 16777216.0f);
}
// High 32 bits of the 64-bit product a·b.
fn nsh_mulhi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu; let a1 = a >> 16u;
    let b0 = b & 0xffffu; let b1 = b >> 16u;
    let p00 = a0 * b0; let p01 = a0 * b1; let p10 = a1 * b0; let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}
fn nsh_sign(d: f32) -> f32 {
    return select(select(0.0f, -1.0f, d < 0.0f), 1.0f, d > 0.0f);
}
"#;

/// ℓ(p, t) as a WGSL expression of the plain names `p` and `t`.
pub fn loss_value(loss: Loss, p: &str, t: &str) -> String {
    let d = format!("({p} - {t})");
    match loss {
        Loss::L1 => format!("abs{d}"),
        Loss::L2 => format!("{d} * {d}"),
        Loss::RelativeL1 => format!("abs{d} / (abs({p}) + 0.01f)"),
        Loss::RelativeL2 => format!("{d} * {d} / ({p} * {p} + 0.01f)"),
        Loss::Mape => format!("abs{d} / (abs({t}) + 0.01f)"),
        Loss::Smape => format!("2.0f * abs{d} / (abs({p}) + abs({t}) + 0.01f)"),
    }
}

/// ∂ℓ/∂p as a WGSL expression of the plain names `p` and `t`.
pub fn loss_gradient(loss: Loss, p: &str, t: &str) -> String {
    let d = format!("({p} - {t})");
    match loss {
        Loss::L1 => format!("nsh_sign{d}"),
        Loss::L2 => format!("2.0f * {d}"),
        Loss::RelativeL1 => format!("nsh_sign{d} / (abs({p}) + 0.01f)"),
        Loss::RelativeL2 => format!("2.0f * {d} / ({p} * {p} + 0.01f)"),
        Loss::Mape => format!("nsh_sign{d} / (abs({t}) + 0.01f)"),
        Loss::Smape => format!("2.0f * nsh_sign{d} / (abs({p}) + abs({t}) + 0.01f)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_round_trip() {
        for x in [1.0f32, 0.01, 1e-7, -2.5, 3.0e20, 1.0 / 3.0] {
            let s = lit(x);
            assert!(s.ends_with('f'), "{s}");
            let v: f32 = s.trim_end_matches('f').parse().unwrap();
            assert_eq!(v, x);
        }
        assert_eq!(lit(1e-7), "1.0e-7f");
    }
}
