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
    /// `a > b`, the condition [`Syntax::select`] takes.
    fn greater(&self, a: &str, b: &str) -> String {
        format!("{a} > {b}")
    }
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

/// GLSL on vectors (`--points` values): `mix(f, t, cond)` with a `bvec` condition from
/// `greaterThan(a, b)` (GLSL's `?:` and `>` take scalars only).
pub struct GlslVectorSyntax;
impl Syntax for GlslVectorSyntax {
    fn select(&self, cond: &str, t: &str, f: &str) -> String {
        format!("mix({f}, {t}, {cond})")
    }
    fn greater(&self, a: &str, b: &str) -> String {
        format!("greaterThan({a}, {b})")
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
    activation_with_zero(s, act, z, "0.0")
}

/// [`activation`] with `zero` for the zero its comparisons and `max` take: `0.0` for a
/// scalar `z`; a zero vector of z's type (`vec4<f32>()`) for a WGSL vector, whose `max`
/// and `>` do not mix vectors and scalars.
pub fn activation_with_zero(s: &dyn Syntax, act: &Activation, z: &str, zero: &str) -> String {
    let z = paren(z);
    match *act {
        Activation::None => z,
        Activation::Relu => format!("max({z}, {zero})"),
        // max(z, s·z) for 0 ≤ s ≤ 1: z where z > 0 (s·z rounds to at most z), s·z where
        // z < 0 (s·z rounds to at least z), the same zero and NaN as the select — the
        // same values in one max and one product, where a select of two packed f16
        // halves costs a compare and a permute per half.
        Activation::LeakyRelu { slope } if (0.0..=1.0).contains(&slope) => {
            format!("max({z}, {} * {z})", float_literal(slope))
        }
        Activation::LeakyRelu { slope } => s.select(
            &s.greater(&z, zero),
            &z,
            &format!("{} * {z}", float_literal(slope)),
        ),
        Activation::Sigmoid => sigmoid(&z),
        Activation::Tanh => format!("tanh({z})"),
        Activation::Exp => format!("exp({z})"),
        Activation::Swish => format!("({z} * {})", sigmoid(&z)),
        Activation::Sine { w0 } => format!("sin({} * {z})", float_literal(w0)),
        // max(z, 0) + ln(1 + e^-|z|): equal to ln(1 + e^z), never overflows (also at f16).
        Activation::Softplus => format!("(max({z}, {zero}) + log(1.0 + exp(-abs({z}))))"),
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

/// `exp(d · d · K)` with `d = x − c_b`: one output of `oneblob`, with the bin's centre
/// `c_b` and the module's `K` (`OneBlob::centre`, `OneBlob::k`). `x` is used twice: pass
/// an identifier.
pub fn oneblob(x: &str, centre: f32, k: f32) -> String {
    let d = format!("({} - {})", paren(x), float_literal(centre));
    format!("exp({d} * {d} * {})", float_literal(k))
}

/// ∂y/∂x of [`oneblob`] given its value `y`: `2K · (x − c_b) · y` (= −(x − c_b)/σ² · y).
pub fn oneblob_derivative(x: &str, y: &str, centre: f32, k: f32) -> String {
    format!(
        "({} * ({} - {}) * {})",
        float_literal(2.0 * k),
        paren(x),
        float_literal(centre),
        paren(y)
    )
}

/// A polynomial `Σ c · x^a · y^b · z^c` as a parenthesised sum of products (powers as
/// repeated multiplication); `0.0` when it has no terms.
fn polynomial(terms: &[nshade_core::module::ShTerm], v: [&str; 3]) -> String {
    if terms.is_empty() {
        return "0.0".into();
    }
    let v = v.map(paren);
    let mut s = String::new();
    for (i, (c, e)) in terms.iter().enumerate() {
        let (sign, mag) = if i == 0 {
            ("", *c)
        } else if c.is_sign_negative() {
            (" - ", -c)
        } else {
            (" + ", *c)
        };
        s.push_str(sign);
        s.push_str(&float_literal(mag));
        for (axis, name) in v.iter().enumerate() {
            for _ in 0..e[axis] {
                s.push_str(" * ");
                s.push_str(name);
            }
        }
    }
    if terms.len() == 1 && terms[0].1 == [0, 0, 0] {
        s
    } else {
        format!("({s})")
    }
}

/// Real spherical harmonic `k` (index l² + l + m) of the direction (x, y, z): output `k`
/// of `sh(L)`, the polynomial of `nshade_core::module::SH_TERMS[k]`. For k = 0 this is a
/// bare literal (give it a type where the language needs one). Pass identifiers.
pub fn spherical_harmonic(x: &str, y: &str, z: &str, k: usize) -> String {
    polynomial(nshade_core::module::SH_TERMS[k], [x, y, z])
}

/// ∂Y_k/∂(axis) (0 = x, 1 = y, 2 = z) as a polynomial expression (`0.0` when Y_k does
/// not depend on that axis).
pub fn spherical_harmonic_derivative(x: &str, y: &str, z: &str, k: usize, axis: usize) -> String {
    polynomial(
        &nshade_core::module::sh_derivative_terms(k, axis),
        [x, y, z],
    )
}

/// Spellings of the integer and float types a grid lookup uses.
pub struct GridSpelling<'a> {
    /// What precedes a new f32 local (`let ` / `float `).
    pub float_decl: &'a str,
    /// What precedes a new u32 local (`let ` / `uint `).
    pub uint_decl: &'a str,
    /// Conversion to u32 / to f32 (`u32` / `uint`, `f32` / `float`).
    pub to_uint: &'a str,
    pub to_float: &'a str,
}

/// WGSL's spellings.
pub const WGSL_GRID: GridSpelling<'static> = GridSpelling {
    float_decl: "let ",
    uint_decl: "let ",
    to_uint: "u32",
    to_float: "f32",
};

/// GLSL's, HLSL's and Slang's spellings.
pub const C_GRID: GridSpelling<'static> = GridSpelling {
    float_decl: "float ",
    uint_decl: "uint ",
    to_uint: "uint",
    to_float: "float",
};

/// The statements of one grid level's lookup (see [`crate::ir::GridLookup`] for the
/// maths), one per line with `indent`, in f32 and u32 arithmetic whatever the precision.
///
/// `name` prefixes the locals: `{name}p{d}` (position in cells), `{name}i{d}` (cell),
/// `{name}t{d}` (fraction), and per corner k `{name}w{k}` (weight, f32) and `{name}e{k}`
/// (u32: index of the corner's feature 0 in the table storage, i.e. the flat parameter
/// index minus `table_base`). `x` holds the D input expressions (f32, evaluated once
/// each). `read(e)` is an f32 expression reading table storage at u32 index expression
/// `e`. Returns the code and the F output expressions (sums over the corners).
pub fn grid_level(
    sp: &GridSpelling,
    name: &str,
    indent: &str,
    x: &[String],
    lookup: &crate::ir::GridLookup,
    table_base: usize,
    read: &dyn Fn(&str) -> String,
) -> (String, Vec<String>) {
    use std::fmt::Write;
    let l = &lookup.level;
    let d = x.len();
    let mut s = String::new();
    let fl = sp.float_decl;
    let ul = sp.uint_decl;
    for (k, xk) in x.iter().enumerate() {
        let _ = writeln!(
            s,
            "{indent}{fl}{name}p{k} = clamp(({} - {}) * {}, 0.0, 1.0) * {};",
            paren(xk),
            float_literal(lookup.min),
            float_literal(lookup.inv),
            float_literal(l.res as f32)
        );
        let _ = writeln!(
            s,
            "{indent}{ul}{name}i{k} = min({}(floor({name}p{k})), {}u);",
            sp.to_uint,
            l.res - 1
        );
        let _ = writeln!(
            s,
            "{indent}{fl}{name}t{k} = {name}p{k} - {}({name}i{k});",
            sp.to_float
        );
    }
    const PRIMES: [u32; 4] = nshade_core::module::GRID_PRIMES;
    for c in 0..1usize << d {
        let bit = |k: usize| (c >> k) & 1 == 1;
        let w: Vec<String> = (0..d)
            .map(|k| {
                if bit(k) {
                    format!("{name}t{k}")
                } else {
                    format!("(1.0 - {name}t{k})")
                }
            })
            .collect();
        let _ = writeln!(s, "{indent}{fl}{name}w{c} = {};", w.join(" * "));
        let vert: Vec<String> = (0..d)
            .map(|k| {
                if bit(k) {
                    format!("({name}i{k} + 1u)")
                } else {
                    format!("{name}i{k}")
                }
            })
            .collect();
        let index = if l.hashed {
            let terms: Vec<String> = vert
                .iter()
                .enumerate()
                .map(|(k, v)| {
                    if PRIMES[k] == 1 {
                        v.clone()
                    } else {
                        format!("({v} * {}u)", PRIMES[k])
                    }
                })
                .collect();
            format!("(({}) & {}u)", terms.join(" ^ "), l.entries - 1)
        } else {
            let mut stride = 1usize;
            let mut terms = Vec::new();
            for v in &vert {
                terms.push(if stride == 1 {
                    v.clone()
                } else {
                    format!("{v} * {stride}u")
                });
                stride *= l.res as usize + 1;
            }
            format!("({})", terms.join(" + "))
        };
        let base = match l.offset - table_base {
            0 => String::new(),
            b => format!(" + {b}u"),
        };
        let _ = writeln!(
            s,
            "{indent}{ul}{name}e{c} = {index} * {}u{base};",
            lookup.features
        );
    }
    let outs = (0..lookup.features)
        .map(|f| {
            let mut e = String::new();
            for c in 0..1usize << d {
                if c > 0 && c % 4 == 0 {
                    let _ = write!(e, "\n{indent}    + ");
                } else if c > 0 {
                    e.push_str(" + ");
                }
                let at = if f == 0 {
                    format!("{name}e{c}")
                } else {
                    format!("{name}e{c} + {f}u")
                };
                let _ = write!(e, "{name}w{c} * {}", read(&at));
            }
            e
        })
        .collect();
    (s, outs)
}

/// Flat element `i` of an array of 4-vectors `arr` (a parameter block of vec4): with a
/// constant index `arr[i / 4].x` etc., else `arr[(i) / 4][(i) % 4]` (`unsigned`: with
/// WGSL's `u` literals for a u32 index).
pub fn vec4_element(arr: &str, i: &str, unsigned: bool) -> String {
    match i.parse::<usize>() {
        Ok(i) => format!("{arr}[{}].{}", i / 4, ["x", "y", "z", "w"][i % 4]),
        Err(_) if unsigned => format!("{arr}[({i}) / 4u][({i}) % 4u]"),
        Err(_) => format!("{arr}[({i}) / 4][({i}) % 4]"),
    }
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
    fn encoding_expressions() {
        assert_eq!(
            oneblob("x", 0.375, -8.0),
            "exp((x - 0.375) * (x - 0.375) * -8.0)"
        );
        assert_eq!(
            oneblob_derivative("x", "y", 0.25, -2.0),
            "(-4.0 * (x - 0.25) * y)"
        );
        assert_eq!(spherical_harmonic("x", "y", "z", 0), "0.2820948");
        assert_eq!(spherical_harmonic("x", "y", "z", 1), "(-0.48860252 * y)");
        assert_eq!(
            spherical_harmonic("a", "b[1]", "c", 9),
            "(-1.7701308 * a * a * (b[1]) + 0.5900436 * (b[1]) * (b[1]) * (b[1]))"
        );
        assert_eq!(
            spherical_harmonic("x", "y", "z", 6),
            "(0.9461747 * z * z - 0.31539157)"
        );
        assert_eq!(spherical_harmonic_derivative("x", "y", "z", 6, 0), "0.0");
        assert_eq!(
            spherical_harmonic_derivative("x", "y", "z", 6, 2),
            "(1.8923494 * z)"
        );
    }

    #[test]
    fn parens_only_where_needed() {
        assert_eq!(paren("z1"), "z1");
        assert_eq!(paren("p.x"), "p.x");
        assert_eq!(paren("a + b"), "(a + b)");
    }
}
