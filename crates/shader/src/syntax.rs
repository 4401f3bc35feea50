//! Expression emitters shared by every text writer: activations, their derivatives and
//! the per-element encodings, written once over a tiny [`Syntax`] abstraction so WGSL,
//! GLSL, HLSL and Slang spell the same maths the same way.
//!
//! Expressions use suffix-free float literals (`1.0`), so they type-check at f32 and at
//! f16 alike (WGSL abstract floats; implicit conversion in the C-like languages).

use nshade_core::Activation;

/// The only spelling that differs between the target languages inside these expressions.
pub trait Syntax {
    /// `t` where `cond` holds, else `f`.
    fn select(&self, cond: &str, t: &str, f: &str) -> String;
}

/// WGSL: `select(f, t, cond)`.
pub struct WgslSyntax;
impl Syntax for WgslSyntax {
    fn select(&self, cond: &str, t: &str, f: &str) -> String {
        format!("select({f}, {t}, {cond})")
    }
}

/// GLSL, HLSL, Slang, MSL: `(cond ? t : f)`.
pub struct CSyntax;
impl Syntax for CSyntax {
    fn select(&self, cond: &str, t: &str, f: &str) -> String {
        format!("({cond} ? {t} : {f})")
    }
}

/// A float literal without a type suffix that parses back to exactly `v` whether the
/// compiler reads it as f32 directly or as f64 first (the shortest f32 form when that
/// survives the f64 detour, else the shortest f64 form of the same value).
/// Panics on non-finite values (callers check parameters first).
pub fn float_literal(v: f32) -> String {
    assert!(v.is_finite(), "non-finite literal {v}");
    let short = format!("{v:?}");
    let s = if short.parse::<f64>().map(|d| d as f32) == Ok(v) {
        short
    } else {
        format!("{:?}", v as f64)
    };
    // `{:?}` always writes a '.' or an exponent, so the text is a float literal.
    debug_assert!(s.contains(['.', 'e', 'E']));
    s
}

/// Wraps `e` in parentheses unless it is a plain identifier or literal.
pub fn paren(e: &str) -> String {
    if e.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        e.to_string()
    } else {
        format!("({e})")
    }
}

/// y = f(z). `z` is evaluated more than once by some activations: pass an identifier.
pub fn activation(s: &dyn Syntax, act: &Activation, z: &str) -> String {
    let z = paren(z);
    match *act {
        Activation::None => z,
        Activation::Relu => format!("max({z}, 0.0)"),
        Activation::LeakyRelu { slope } => s.select(
            &format!("{z} > 0.0"),
            &z,
            &format!("{} * {z}", float_literal(slope)),
        ),
        Activation::Sigmoid => sigmoid(&z),
        Activation::Tanh => format!("tanh({z})"),
        Activation::Exp => format!("exp({z})"),
        Activation::Swish => format!("({z} * {})", sigmoid(&z)),
        Activation::Sine { w0 } => format!("sin({} * {z})", float_literal(w0)),
        // max(z, 0) + ln(1 + e^-|z|): equal to ln(1 + e^z), never overflows (also at f16).
        Activation::Softplus => format!("(max({z}, 0.0) + log(1.0 + exp(-abs({z}))))"),
    }
}

/// f'(z) given z and y = f(z) (both identifiers or parenthesised expressions); the same
/// text in every target language.
pub fn activation_derivative(act: &Activation, z: &str, y: &str) -> String {
    let (z, y) = (paren(z), paren(y));
    match *act {
        // `1.0 - step(z, 0.0)` is exactly 1 where z > 0, else 0, and has z's type (a
        // select of two literals would be an f32 in WGSL even when z is f16). The leaky
        // form `r + (1 − r)·slope` is exact for r ∈ {0, 1}.
        Activation::None => "1.0".into(),
        Activation::Relu => format!("(1.0 - step({z}, 0.0))"),
        Activation::LeakyRelu { slope } => {
            let r = format!("(1.0 - step({z}, 0.0))");
            format!("({r} + (1.0 - {r}) * {})", float_literal(slope))
        }
        Activation::Sigmoid => format!("({y} * (1.0 - {y}))"),
        Activation::Tanh => format!("(1.0 - {y} * {y})"),
        Activation::Exp => y,
        Activation::Swish => {
            let sg = sigmoid(&z);
            format!("({sg} * (1.0 + {z} * (1.0 - {sg})))")
        }
        Activation::Sine { w0 } => {
            let w = float_literal(w0);
            format!("({w} * cos({w} * {z}))")
        }
        Activation::Softplus => sigmoid(&z),
    }
}

fn sigmoid(z: &str) -> String {
    format!("(1.0 / (1.0 + exp(-{z})))")
}

/// The frequency encoding's factor for octave `k`: 2^k·π rounded to f32 exactly as the
/// CPU computes it.
pub fn frequency_scale(octave: usize) -> f32 {
    (1u32 << octave) as f32 * std::f32::consts::PI
}

/// `sin(x · 2^k·π)`, the value at `y[i*K + k]` of `freq(K)` for input element `x = x[i]`.
pub fn frequency_sin(x: &str, octave: usize) -> String {
    format!(
        "sin({} * {})",
        paren(x),
        float_literal(frequency_scale(octave))
    )
}

/// `cos(x · 2^k·π)`, the value at `y[D*K + i*K + k]` of `freq(K)`.
pub fn frequency_cos(x: &str, octave: usize) -> String {
    format!(
        "cos({} * {})",
        paren(x),
        float_literal(frequency_scale(octave))
    )
}

/// The triangle encoding's factor for octave `k`: 2^(k−1).
pub fn triangle_scale(octave: usize) -> f32 {
    (1u32 << octave) as f32 * 0.5
}

/// `4·|u − floor(u + 0.5)| − 1` with `u = x · 2^(k−1)`: the value at `y[i*K + k]` of
/// `tri(K)`. `x` is evaluated twice: pass an identifier.
pub fn triangle(x: &str, octave: usize) -> String {
    let u = format!("({} * {})", paren(x), float_literal(triangle_scale(octave)));
    format!("(4.0 * abs({u} - floor({u} + 0.5)) - 1.0)")
}

/// ∂y/∂x of [`triangle`]: `4 · 2^(k−1) · sign(u − floor(u + 0.5))` (0 on the kinks).
pub fn triangle_derivative(x: &str, octave: usize) -> String {
    let sc = float_literal(triangle_scale(octave));
    let u = format!("({} * {sc})", paren(x));
    format!("(4.0 * {sc} * sign({u} - floor({u} + 0.5)))")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_round_trip_through_f64() {
        for v in [
            0.1f32,
            1.0,
            -2.5e-7,
            3.4028235e38,
            1e-45,
            0.3,
            16777217.0,
            -0.0,
        ] {
            let s = float_literal(v);
            assert_eq!(s.parse::<f32>().unwrap().to_bits(), v.to_bits(), "{s}");
            assert_eq!(
                (s.parse::<f64>().unwrap() as f32).to_bits(),
                v.to_bits(),
                "{s}"
            );
        }
    }

    #[test]
    fn parens_only_where_needed() {
        assert_eq!(paren("z1"), "z1");
        assert_eq!(paren("p.x"), "p.x");
        assert_eq!(paren("a + b"), "(a + b)");
    }
}
