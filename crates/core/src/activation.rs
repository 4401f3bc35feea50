//! Element-wise activation functions and their derivatives.
//!
//! Formulas (z is the pre-activation, y the output):
//!
//! | name | y = f(z) | f'(z) |
//! |---|---|---|
//! | `none` | z | 1 |
//! | `relu` | max(z, 0) | 1 if z > 0 else 0 |
//! | `leaky_relu(a)` (a = 0.01) | z if z > 0 else a·z | 1 if z > 0 else a |
//! | `sigmoid` | 1 / (1 + e^-z) | y·(1 − y) |
//! | `tanh` | tanh z | 1 − y² |
//! | `exp` | e^z | y |
//! | `swish` (= `silu`) | z·σ(z) | σ(z)·(1 + z·(1 − σ(z))) |
//! | `sine(w)` (w = 1) | sin(w·z) | w·cos(w·z) |
//! | `softplus` | ln(1 + e^z) | σ(z) |

use serde::{Deserialize, Serialize};
use std::fmt;

/// An activation function; parameters are part of the value.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Activation {
    None,
    Relu,
    LeakyRelu { slope: f32 },
    Sigmoid,
    Tanh,
    Exp,
    Swish,
    Sine { w0: f32 },
    Softplus,
}

/// Default negative slope of `leaky_relu` (as in RTXNS).
pub const DEFAULT_LEAKY_SLOPE: f32 = 0.01;

impl Activation {
    /// All names accepted in the text form.
    pub const NAMES: &'static str =
        "none, relu, leaky_relu(slope), sigmoid, tanh, exp, swish, silu, sine(w0), softplus";

    /// Builds an activation from its text name and optional parameter.
    pub fn from_name(name: &str, param: Option<f32>) -> Result<Activation, String> {
        let no_param = |a: Activation| match param {
            None => Ok(a),
            Some(_) => Err(format!("activation '{name}' takes no parameter")),
        };
        let act = match name {
            "none" | "linear" => no_param(Activation::None)?,
            "relu" => no_param(Activation::Relu)?,
            "leaky_relu" | "lrelu" => Activation::LeakyRelu {
                slope: param.unwrap_or(DEFAULT_LEAKY_SLOPE),
            },
            "sigmoid" => no_param(Activation::Sigmoid)?,
            "tanh" => no_param(Activation::Tanh)?,
            "exp" => no_param(Activation::Exp)?,
            "swish" | "silu" => no_param(Activation::Swish)?,
            "sine" | "sin" => Activation::Sine {
                w0: param.unwrap_or(1.0),
            },
            "softplus" => no_param(Activation::Softplus)?,
            _ => {
                return Err(format!(
                    "unknown activation '{name}' (known: {})",
                    Self::NAMES
                ));
            }
        };
        act.validate()?;
        Ok(act)
    }

    pub(crate) fn validate(&self) -> Result<(), String> {
        match *self {
            Activation::LeakyRelu { slope } if !slope.is_finite() => {
                Err("leaky_relu slope must be finite".into())
            }
            Activation::Sine { w0 } if !w0.is_finite() || w0 == 0.0 => {
                Err("sine frequency must be finite and non-zero".into())
            }
            _ => Ok(()),
        }
    }

    /// The canonical name without parameters (`leaky_relu`).
    pub fn name(&self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::LeakyRelu { .. } => "leaky_relu",
            Activation::Sigmoid => "sigmoid",
            Activation::Tanh => "tanh",
            Activation::Exp => "exp",
            Activation::Swish => "swish",
            Activation::Sine { .. } => "sine",
            Activation::Softplus => "softplus",
        }
    }

    /// y = f(z) for one value.
    #[inline(always)]
    pub fn apply(&self, z: f32) -> f32 {
        match *self {
            Activation::None => z,
            Activation::Relu => z.max(0.0),
            Activation::LeakyRelu { slope } => {
                if z > 0.0 {
                    z
                } else {
                    slope * z
                }
            }
            Activation::Sigmoid => sigmoid(z),
            Activation::Tanh => z.tanh(),
            Activation::Exp => exp(z),
            Activation::Swish => z * sigmoid(z),
            Activation::Sine { w0 } => (w0 * z).sin(),
            Activation::Softplus => softplus(z),
        }
    }

    /// f'(z), given z and y = f(z).
    #[inline(always)]
    pub fn derivative(&self, z: f32, y: f32) -> f32 {
        match *self {
            Activation::None => 1.0,
            Activation::Relu => {
                if z > 0.0 {
                    1.0
                } else {
                    0.0
                }
            }
            Activation::LeakyRelu { slope } => {
                if z > 0.0 {
                    1.0
                } else {
                    slope
                }
            }
            Activation::Sigmoid => y * (1.0 - y),
            Activation::Tanh => 1.0 - y * y,
            Activation::Exp => y,
            Activation::Swish => {
                let s = sigmoid(z);
                s * (1.0 + z * (1.0 - s))
            }
            Activation::Sine { w0 } => w0 * (w0 * z).cos(),
            Activation::Softplus => sigmoid(z),
        }
    }

    /// Whether f'(z) follows from y = f(z) alone, so a layer need not keep z: `relu` and
    /// `leaky_relu` with a positive slope (y > 0 exactly when z > 0), `sigmoid`, `tanh`,
    /// `exp`, `none`. [`Activation::backward_from_output_lanes`] then gives the same bits
    /// as [`Activation::backward_slice`].
    pub fn from_output(&self) -> bool {
        match *self {
            Activation::None
            | Activation::Relu
            | Activation::Sigmoid
            | Activation::Tanh
            | Activation::Exp => true,
            Activation::LeakyRelu { slope } => slope > 0.0,
            Activation::Swish | Activation::Sine { .. } | Activation::Softplus => false,
        }
    }

    /// dz = dy · f'(z) in place over `d`, from the outputs `y` only (for activations
    /// with [`Activation::from_output`]): the same arithmetic as
    /// [`Activation::backward_slice`], with `y > 0` standing for `z > 0`.
    pub fn backward_from_output(&self, y: &[f32], d: &mut [f32]) {
        crate::dense::vectorised(
            #[inline(always)]
            || self.backward_from_output_lanes(y, d),
        )
    }

    /// [`Activation::backward_from_output`] for inlining into vectorised kernels.
    #[inline(always)]
    pub(crate) fn backward_from_output_lanes(&self, y: &[f32], d: &mut [f32]) {
        let d = &mut d[..y.len()];
        macro_rules! each {
            (|$y:ident| $e:expr) => {
                d.iter_mut().zip(y).for_each(|(d, &$y)| *d *= $e)
            };
        }
        match *self {
            Activation::None => {}
            Activation::Relu => relu_gate(y, d),
            Activation::LeakyRelu { slope } => each!(|y| if y > 0.0 { 1.0 } else { slope }),
            Activation::Sigmoid => each!(|y| y * (1.0 - y)),
            Activation::Tanh => each!(|y| 1.0 - y * y),
            Activation::Exp => each!(|y| y),
            Activation::Swish | Activation::Sine { .. } | Activation::Softplus => {
                unreachable!("{} needs its pre-activations", self.name())
            }
        }
    }

    /// y = f(y) in place over a slice of pre-activations (the same arithmetic as
    /// [`Activation::forward_slice`]).
    pub fn forward_in_place(&self, y: &mut [f32]) {
        crate::dense::vectorised(
            #[inline(always)]
            || {
                macro_rules! each {
                    (|$z:ident| $e:expr) => {
                        y.iter_mut().for_each(|y| {
                            let $z = *y;
                            *y = $e
                        })
                    };
                }
                match *self {
                    Activation::None => {}
                    Activation::Relu => each!(|z| z.max(0.0)),
                    // z · 1 or z · slope: the bits of the select (slope · z below), stored
                    // in full (the select in place compiled to a masked store of the
                    // negative lanes on AVX2, microcoded and slow on AMD's cores)
                    Activation::LeakyRelu { slope } => {
                        each!(|z| z * if z > 0.0 { 1.0 } else { slope })
                    }
                    Activation::Sigmoid => each!(|z| sigmoid(z)),
                    Activation::Tanh => each!(|z| z.tanh()),
                    Activation::Exp => each!(|z| exp(z)),
                    Activation::Swish => each!(|z| z * sigmoid(z)),
                    Activation::Sine { w0 } => each!(|z| (w0 * z).sin()),
                    Activation::Softplus => each!(|z| softplus(z)),
                }
            },
        )
    }

    /// Applies f over a slice of pre-activations, writing outputs to `y`.
    ///
    /// The match is outside the loops so that each loop is a tight, vectorisable kernel.
    pub fn forward_slice(&self, z: &[f32], y: &mut [f32]) {
        crate::dense::vectorised(
            #[inline(always)]
            || self.forward_lanes(z, y),
        )
    }

    #[inline(always)]
    fn forward_lanes(&self, z: &[f32], y: &mut [f32]) {
        let y = &mut y[..z.len()];
        macro_rules! each {
            (|$z:ident| $e:expr) => {
                y.iter_mut().zip(z).for_each(|(y, &$z)| *y = $e)
            };
        }
        match *self {
            Activation::None => y.copy_from_slice(z),
            Activation::Relu => each!(|z| z.max(0.0)),
            Activation::LeakyRelu { slope } => each!(|z| if z > 0.0 { z } else { slope * z }),
            Activation::Sigmoid => each!(|z| sigmoid(z)),
            Activation::Tanh => each!(|z| z.tanh()),
            Activation::Exp => each!(|z| exp(z)),
            Activation::Swish => each!(|z| z * sigmoid(z)),
            Activation::Sine { w0 } => each!(|z| (w0 * z).sin()),
            Activation::Softplus => each!(|z| softplus(z)),
        }
    }

    /// dz = dy · f'(z), in place over `d` (which holds dy on entry).
    pub fn backward_slice(&self, z: &[f32], y: &[f32], d: &mut [f32]) {
        crate::dense::vectorised(
            #[inline(always)]
            || self.backward_lanes(z, y, d),
        )
    }

    #[inline(always)]
    fn backward_lanes(&self, z: &[f32], y: &[f32], d: &mut [f32]) {
        let d = &mut d[..z.len()];
        macro_rules! each {
            (|$z:ident, $y:ident| $e:expr) => {
                d.iter_mut()
                    .zip(z.iter().zip(y))
                    .for_each(|(d, (&$z, &$y))| *d *= $e)
            };
        }
        match *self {
            Activation::None => {}
            Activation::Relu => relu_gate(z, d),
            Activation::LeakyRelu { slope } => d
                .iter_mut()
                .zip(z)
                .for_each(|(d, &z)| *d *= if z > 0.0 { 1.0 } else { slope }),
            Activation::Sigmoid => each!(|_z, y| y * (1.0 - y)),
            Activation::Tanh => each!(|_z, y| 1.0 - y * y),
            Activation::Exp => each!(|_z, y| y),
            Activation::Swish => each!(|z, _y| {
                let s = sigmoid(z);
                s * (1.0 + z * (1.0 - s))
            }),
            Activation::Sine { w0 } => each!(|z, _y| w0 * (w0 * z).cos()),
            Activation::Softplus => each!(|z, _y| sigmoid(z)),
        }
    }
}

/// `d = d` where `v > 0`, else +0, in place (relu's derivative from its input or its
/// output). With AVX2 but not AVX-512 as a mask and a full store: the compiler turns
/// the loop (also written as a mask) into a masked store of the zeros there, which is
/// microcoded and slow on AMD's cores.
#[inline(always)]
fn relu_gate(v: &[f32], d: &mut [f32]) {
    let d = &mut d[..v.len()];
    #[cfg(target_arch = "x86_64")]
    if !crate::dense::has_avx512() && crate::dense::has_avx2_fma() {
        // SAFETY: the CPU has AVX2; both slices have v.len() elements.
        unsafe { relu_gate_avx2(v, d) };
        return;
    }
    d.iter_mut()
        .zip(v)
        .for_each(|(d, &v)| *d = if v > 0.0 { *d } else { 0.0 });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn relu_gate_avx2(v: &[f32], d: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut dc = d.chunks_exact_mut(8);
    let mut vc = v.chunks_exact(8);
    for (d, v) in (&mut dc).zip(&mut vc) {
        // SAFETY: 32-byte reads and a write of 8-float chunks.
        unsafe {
            let keep =
                _mm256_cmp_ps::<_CMP_GT_OQ>(_mm256_loadu_ps(v.as_ptr()), _mm256_setzero_ps());
            let x = _mm256_and_ps(_mm256_loadu_ps(d.as_ptr()), keep);
            _mm256_storeu_ps(d.as_mut_ptr(), x);
        }
    }
    for (d, &v) in dc.into_remainder().iter_mut().zip(vc.remainder()) {
        *d = if v > 0.0 { *d } else { 0.0 };
    }
}

#[inline(always)]
fn sigmoid(z: f32) -> f32 {
    1.0 / (1.0 + exp(-z))
}

/// e^x to within 2 ulp for finite x, vectorisable (the C library's `expf` is an opaque
/// call per element): x = n·ln 2 + r with |r| ≤ ln 2 / 2 (Cody–Waite, two-part ln 2),
/// a degree-7 Taylor polynomial for e^r, then scaling by 2^n through the exponent bits.
/// Inputs are clamped to [−87.3, 88] (e^−87.3 ≈ 1.2e−38, e^88 ≈ 1.7e38), so it never
/// returns 0, infinity or NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75; // ln 2 rounded to 17 bits, so n·LN2_HI is exact
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.clamp(-87.3, 88.0);
    // n = round(x·log2 e) = floor(x·log2 e + 0.5) ∈ [−126, 127], kept as a float: a
    // float-to-integer cast saturates, which the compiler does lane by lane
    let nf = (x * LOG2E + 0.5).floor();
    let r = (x - nf * LN2_HI) - nf * LN2_LO;
    // 2ⁿ from the exponent bits: n + 127 is the low bits of the float 2²³ + n + 127 (exact)
    let biased = (nf + (127.0 + 8_388_608.0)).to_bits() - 0x4b00_0000;
    exp_reduced(r) * f32::from_bits(biased << 23)
}

/// e^r for |r| ≤ ln 2 / 2: the degree-7 Taylor polynomial of [`exp`].
#[inline(always)]
fn exp_reduced(r: f32) -> f32 {
    1.0 + r
        * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))))
}

#[inline(always)]
fn softplus(z: f32) -> f32 {
    // ln(1 + e^z) without overflow for large z.
    if z > 20.0 { z } else { z.exp().ln_1p() }
}

impl fmt::Display for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Activation::LeakyRelu { slope } if slope != DEFAULT_LEAKY_SLOPE => {
                write!(f, "leaky_relu({slope})")
            }
            Activation::Sine { w0 } if w0 != 1.0 => write!(f, "sine({w0})"),
            _ => write!(f, "{}", self.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// relu's derivative in place and leaky_relu's forward in place (the forms written
    /// to store every lane) against their branch forms, bit for bit, over signed zeros,
    /// infinities, NaN and lengths with a remainder; the AVX2 gate directly too.
    #[test]
    fn in_place_forms_keep_the_branch_bits() {
        let special = [
            0.0f32,
            -0.0,
            1.5,
            -2.5,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        let v: Vec<f32> = (0..37)
            .map(|i| special[i % special.len()] * if i % 3 == 0 { 1.0 } else { -0.5 })
            .collect();
        let d: Vec<f32> = (0..37)
            .map(|i| special[(i * 5 + 2) % special.len()])
            .collect();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let want: Vec<f32> = d
            .iter()
            .zip(&v)
            .map(|(&d, &v)| if v > 0.0 { d } else { 0.0 })
            .collect();
        let mut got = d.clone();
        Activation::Relu.backward_from_output(&v, &mut got);
        assert_eq!(bits(&got), bits(&want), "relu from its output");
        let mut got = d.clone();
        Activation::Relu.backward_slice(&v, &v, &mut got);
        assert_eq!(bits(&got), bits(&want), "relu from its input");
        #[cfg(target_arch = "x86_64")]
        if crate::dense::has_avx2_fma() {
            let mut got = d.clone();
            // SAFETY: the CPU has AVX2.
            unsafe { relu_gate_avx2(&v, &mut got) };
            assert_eq!(bits(&got), bits(&want), "relu, AVX2");
        }
        let slope = 0.01;
        let leaky = Activation::LeakyRelu { slope };
        let want: Vec<f32> = v
            .iter()
            .map(|&z| if z > 0.0 { z } else { slope * z })
            .collect();
        let mut got = v.clone();
        leaky.forward_in_place(&mut got);
        assert_eq!(bits(&got), bits(&want), "leaky_relu in place");
    }

    pub(crate) const ALL: [Activation; 10] = [
        Activation::None,
        Activation::Relu,
        Activation::LeakyRelu { slope: 0.01 },
        Activation::LeakyRelu { slope: 0.3 },
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Exp,
        Activation::Swish,
        Activation::Sine { w0: 3.0 },
        Activation::Softplus,
    ];

    #[test]
    fn derivatives_match_finite_differences() {
        for act in ALL {
            for &z in &[-2.3f32, -0.7, -0.05, 0.04, 0.6, 1.9] {
                let h = 1e-3f64;
                let f = |z: f64| act.apply(z as f32) as f64;
                let fd = (f(z as f64 + h) - f(z as f64 - h)) / (2.0 * h);
                let an = act.derivative(z, act.apply(z)) as f64;
                assert!(
                    (fd - an).abs() < 2e-3 * (1.0 + an.abs()),
                    "{act}: z={z} fd={fd} analytic={an}"
                );
            }
        }
    }

    #[test]
    fn exp_by_float_floor_equals_the_integer_form() {
        // the earlier reduction: n as an integer from a saturating cast (the polynomial
        // is the same function)
        fn by_integer(x: f32) -> f32 {
            let x = x.clamp(-87.3, 88.0);
            let t = x * std::f32::consts::LOG2_E + 0.5;
            let ti = t as i32;
            let n = ti - (t < ti as f32) as i32;
            let nf = n as f32;
            let r = (x - nf * 0.693_145_75) - nf * 1.428_606_8e-6;
            exp_reduced(r) * f32::from_bits(((n + 127) as u32) << 23)
        }
        // every 251st float of either sign up to beyond the clamp, and the clamp's ends
        let top = 100.0f32.to_bits();
        let xs = (0..top)
            .step_by(251)
            .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
            .chain([
                -87.3,
                88.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::MAX,
                f32::MIN,
            ]);
        for x in xs {
            assert_eq!(exp(x).to_bits(), by_integer(x).to_bits(), "e^{x}");
        }
    }

    #[test]
    fn fast_exp_is_accurate() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.0037;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
        assert_eq!(exp(-200.0), exp(-87.3));
        assert!(exp(100.0).is_finite());
    }

    #[test]
    fn slices_match_scalar() {
        let z: Vec<f32> = (0..16).map(|i| i as f32 * 0.3 - 2.0).collect();
        for act in ALL {
            let mut y = vec![0.0; z.len()];
            act.forward_slice(&z, &mut y);
            let mut d = vec![1.5; z.len()];
            act.backward_slice(&z, &y, &mut d);
            for i in 0..z.len() {
                assert_eq!(y[i], act.apply(z[i]));
                assert_eq!(d[i], 1.5 * act.derivative(z[i], y[i]));
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for act in ALL {
            let s = act.to_string();
            let (name, param) = match s.find('(') {
                Some(p) => (&s[..p], Some(s[p + 1..s.len() - 1].parse::<f32>().unwrap())),
                None => (s.as_str(), None),
            };
            assert_eq!(Activation::from_name(name, param).unwrap(), act);
        }
    }
}
