//! `freq(K)`: the frequency (positional) encoding of RTXNS and NeRF.
//!
//! For an input of D values and K octaves the output has 2·D·K values:
//!
//! ```text
//! a[i*K + k]       = 2^k · π · x[i]          for i < D, k < K
//! y[i*K + k]       = sin(a[i*K + k])          (first D·K outputs: all sines)
//! y[D*K + i*K + k] = cos(a[i*K + k])          (next D·K outputs: all cosines)
//! ```
//!
//! The raw input is not included (use `cat(identity, freq(K))` for that).

use super::{Grads, Layer, Workspace};
use std::f32::consts::PI;

#[derive(Clone, Debug, PartialEq)]
pub struct Frequency {
    pub in_dims: usize,
    pub octaves: usize,
}

impl Frequency {
    /// 2^k·π for each octave k.
    fn scales(&self) -> impl Iterator<Item = f32> + Clone {
        (0..self.octaves).map(|k| (1u32 << k) as f32 * PI)
    }
}

impl Layer for Frequency {
    fn in_dims(&self) -> usize {
        self.in_dims
    }
    fn out_dims(&self) -> usize {
        2 * self.in_dims * self.octaves
    }
    fn forward(&self, _params: &[f32], x: &[f32], n: usize, y: &mut [f32], _ws: &mut Workspace) {
        let (half, od) = (self.in_dims * self.octaves, self.out_dims());
        let (sin, cos) = self.sin_cos(x, n);
        for s in 0..n {
            let ys = &mut y[s * od..(s + 1) * od];
            ys[..half].copy_from_slice(&sin[s * half..(s + 1) * half]);
            ys[half..].copy_from_slice(&cos[s * half..(s + 1) * half]);
        }
    }

    /// Reads `x` only, not `y` (it recomputes the sines and cosines): a chain may hand
    /// this module's output to the next stage feature-major and never form `y`
    /// ([`Frequency::forward_feature_major`]).
    fn backward(
        &self,
        _params: &[f32],
        x: &[f32],
        _y: &[f32],
        n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        _grads: &mut Grads<'_>,
        _ws: &mut Workspace,
    ) {
        let Some(dx) = dx else { return };
        let (d, k, od) = (self.in_dims, self.octaves, self.out_dims());
        let half = d * k;
        let (sin, cos) = self.sin_cos(x, n);
        for s in 0..n {
            let (sin, cos) = (&sin[s * half..], &cos[s * half..]);
            let dys = &dy[s * od..(s + 1) * od];
            for i in 0..d {
                let mut acc = 0.0;
                for (j, scale) in self.scales().enumerate() {
                    let (sin, cos) = (sin[i * k + j], cos[i * k + j]);
                    acc += scale * (cos * dys[i * k + j] - sin * dys[half + i * k + j]);
                }
                dx[s * d + i] = acc;
            }
        }
    }
}

impl Frequency {
    /// The sines and cosines of every angle, sample-major (n × D·K each): all angles of
    /// the chunk first, then one flat, branch-free (vectorisable) pass.
    fn sin_cos(&self, x: &[f32], n: usize) -> (Vec<f32>, Vec<f32>) {
        let (d, k) = (self.in_dims, self.octaves);
        let scales: Vec<f32> = self.scales().collect();
        let mut ang = vec![0.0; n * d * k];
        for (a, xs) in ang.chunks_exact_mut(d * k).zip(x[..n * d].chunks_exact(d)) {
            for (a, &xi) in a.chunks_exact_mut(k).zip(xs) {
                for (a, &scale) in a.iter_mut().zip(&scales) {
                    *a = scale * xi;
                }
            }
        }
        let mut sin = vec![0.0; ang.len()];
        let mut cos = vec![0.0; ang.len()];
        sin_cos_slice(&ang, &mut sin, &mut cos);
        (sin, cos)
    }

    /// The output of [`Layer::forward`] written feature-major, as an `mlp` reads its input:
    /// `yt` holds `out_dims` rows of `np` floats (np ≥ n), row f the f-th output of every
    /// sample, the padding columns zero. The same values, bit for bit, without forming the
    /// sample-major output and relayouting it.
    pub(crate) fn forward_feature_major(&self, x: &[f32], n: usize, np: usize, yt: &mut [f32]) {
        let (d, k) = (self.in_dims, self.octaves);
        let half = d * k;
        assert!(x.len() >= n * d && yt.len() >= 2 * half * np && n <= np);
        let scales: Vec<f32> = self.scales().collect();
        let (sin, cos) = yt[..2 * half * np].split_at_mut(half * np);
        // the angles go into the cosine rows, which `sin_cos_in_place` overwrites
        crate::dense::vectorised(
            #[inline(always)]
            || match d {
                1 => angles::<1>(x, n, np, &scales, cos),
                2 => angles::<2>(x, n, np, &scales, cos),
                3 => angles::<3>(x, n, np, &scales, cos),
                _ => {
                    for (i, rows) in cos.chunks_exact_mut(k * np).enumerate() {
                        for (row, &scale) in rows.chunks_exact_mut(np).zip(&scales) {
                            for (a, xs) in row[..n].iter_mut().zip(x.chunks_exact(d)) {
                                *a = scale * xs[i];
                            }
                            row[n..].fill(0.0);
                        }
                    }
                }
            },
        );
        sin_cos_in_place(cos, sin);
        for row in yt[..2 * half * np].chunks_exact_mut(np) {
            row[n..].fill(0.0);
        }
    }
}

/// The angles `scale · x_i` of [`Frequency::forward_feature_major`] for `D` inputs known at
/// compile time (so the strided reads vectorise), input-major then scale, rows of `np`
/// (the padding columns zero).
#[inline(always)]
fn angles<const D: usize>(x: &[f32], n: usize, np: usize, scales: &[f32], out: &mut [f32]) {
    let k = scales.len();
    for (i, rows) in out.chunks_exact_mut(k * np).take(D).enumerate() {
        for (row, &scale) in rows.chunks_exact_mut(np).zip(scales) {
            for (a, xs) in row[..n].iter_mut().zip(x.chunks_exact(D)) {
                *a = scale * xs[i];
            }
            row[n..].fill(0.0);
        }
    }
}

/// [`sin_cos_slice`] with the angles given in `cos` (replaced by their cosines), in
/// blocks of 64 so the rare large angle still has its value for the fix-up.
fn sin_cos_in_place(cos: &mut [f32], sin: &mut [f32]) {
    assert_eq!(cos.len(), sin.len());
    for (c, s) in cos.chunks_mut(64).zip(sin.chunks_mut(64)) {
        let mut a = [0.0f32; 64];
        a[..c.len()].copy_from_slice(c);
        sin_cos_slice(&a[..c.len()], s, c);
    }
}

/// `sin_cos` over slices: a branch-free polynomial pass the compiler vectorises, then a
/// fix-up of the rare angles beyond its range.
pub fn sin_cos_slice(a: &[f32], sin: &mut [f32], cos: &mut [f32]) {
    let big = crate::dense::vectorised(
        #[inline(always)]
        || {
            let mut big = false;
            for ((&a, s), c) in a.iter().zip(sin.iter_mut()).zip(cos.iter_mut()) {
                (*s, *c) = sin_cos_reduced(a);
                big |= a.abs() > 8192.0;
            }
            big
        },
    );
    if big {
        for (i, &a) in a.iter().enumerate() {
            if a.abs() > 8192.0 {
                (sin[i], cos[i]) = a.sin_cos();
            }
        }
    }
}

/// sin and cos of an f32 angle, accurate to a few ulp: Cody–Waite reduction by π with a
/// three-part constant, then Taylor polynomials on [−π/2, π/2]. Several times faster than
/// the C library and vectorisable; falls back to it for |a| > 8192.
#[cfg(test)]
fn sin_cos(a: f32) -> (f32, f32) {
    if a.abs() > 8192.0 {
        return a.sin_cos();
    }
    sin_cos_reduced(a)
}

/// sin r and cos r for |r| ≤ π/2: the Taylor polynomials of [`sin_cos_reduced`].
#[inline(always)]
fn sin_cos_polynomials(r: f32) -> (f32, f32) {
    let r2 = r * r;
    let s = r
        * (1.0
            + r2 * (-1.0 / 6.0
                + r2 * (1.0 / 120.0
                    + r2 * (-1.0 / 5040.0 + r2 * (1.0 / 362_880.0 + r2 * (-1.0 / 39_916_800.0))))));
    let c = 1.0
        + r2 * (-0.5
            + r2 * (1.0 / 24.0
                + r2 * (-1.0 / 720.0
                    + r2 * (1.0 / 40320.0
                        + r2 * (-1.0 / 3_628_800.0 + r2 * (1.0 / 479_001_600.0))))));
    (s, c)
}

/// sin and cos by Cody–Waite reduction and Taylor polynomials, valid for |a| ≤ 8192.
#[inline(always)]
fn sin_cos_reduced(a: f32) -> (f32, f32) {
    const INV_PI: f32 = std::f32::consts::FRAC_1_PI;
    // π = P1 + P2 + P3, with P1 and P2 short enough that n·P1 and n·P2 are exact.
    const P1: f32 = 3.140625;
    const P2: f32 = 9.675_026e-4;
    const P3: f32 = 1.509_958e-7;
    // n = floor(a/π + 0.5), kept as a float (exact for |a| ≤ 8192; larger angles take the
    // C library's sin_cos in `sin_cos_slice`): a float-to-integer cast would saturate,
    // which the compiler does lane by lane, so the loop would not vectorise
    let nf = (a * INV_PI + 0.5).floor();
    let r = ((a - nf * P1) - nf * P2) - nf * P3;
    let (s, c) = sin_cos_polynomials(r);
    // (−1)ⁿ: n is odd when n/2 (exact) is not a whole number
    let half = nf * 0.5;
    let sign = if half != half.floor() { -1.0 } else { 1.0 };
    (s * sign, c * sign)
}

#[cfg(test)]
mod tests {
    #[test]
    fn slice_version_matches_scalar() {
        let a: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 23.7).collect();
        let (mut s, mut c) = (vec![0.0; a.len()], vec![0.0; a.len()]);
        sin_cos_slice(&a, &mut s, &mut c);
        for i in 0..a.len() {
            assert_eq!((s[i], c[i]), sin_cos(a[i]));
        }
    }

    #[test]
    fn the_reduction_by_float_floor_equals_the_integer_one() {
        // the earlier reduction of `sin_cos_reduced`: n as an integer, the sign from its
        // bit (the polynomials are the same functions)
        fn by_integer(a: f32) -> (f32, f32) {
            let t = a * std::f32::consts::FRAC_1_PI + 0.5;
            let ti = t as i32;
            let n = ti.wrapping_sub((t < ti as f32) as i32);
            let nf = n as f32;
            let r = ((a - nf * 3.140625) - nf * 9.675_026e-4) - nf * 1.509_958e-7;
            let (s, c) = super::sin_cos_polynomials(r);
            let sign = f32::from_bits(0x3f80_0000 | (((n & 1) as u32) << 31));
            (s * sign, c * sign)
        }
        let mut angles = vec![0.0f32, -0.0, 8192.0, -8192.0, 1e-30, -1e-30];
        // every multiple of π/2 up to 8192 and its neighbours, where the rounding turns
        for k in -5215..=5215 {
            let m = k as f32 * std::f32::consts::FRAC_PI_2;
            angles.extend([m, m.next_up(), m.next_down()]);
        }
        let mut rng = crate::rng::Pcg32::new(4);
        angles.extend((0..1_000_000).map(|_| (rng.next_f32() * 2.0 - 1.0) * 8192.0));
        angles.extend((0..100_000).map(|_| (rng.next_f32() * 2.0 - 1.0) * 4.0));
        let (mut s, mut c) = (vec![0.0; angles.len()], vec![0.0; angles.len()]);
        sin_cos_slice(&angles, &mut s, &mut c);
        for (i, &a) in angles.iter().enumerate() {
            let (ws, wc) = by_integer(a);
            assert_eq!(sin_cos(a), (ws, wc), "angle {a}");
            assert_eq!(
                (s[i].to_bits(), c[i].to_bits()),
                (ws.to_bits(), wc.to_bits()),
                "{a}"
            );
        }
    }

    #[test]
    fn fast_sin_cos_is_accurate() {
        let mut worst = 0.0f64;
        let mut a = -8192.0f32;
        while a < 8192.0 {
            let (s, c) = sin_cos(a);
            let (es, ec) = (a as f64).sin_cos();
            worst = worst.max((s as f64 - es).abs()).max((c as f64 - ec).abs());
            a += 0.001_37;
        }
        assert!(worst < 4e-7, "worst error {worst}");
    }

    use super::super::{Module, gradcheck};
    use super::*;

    #[test]
    fn output_order() {
        let f = Frequency {
            in_dims: 2,
            octaves: 2,
        };
        let mut y = vec![0.0; 8];
        f.forward(&[], &[0.25, 0.5], 1, &mut y, &mut Workspace::default());
        let expect = [
            (0.25 * PI).sin(),
            (0.5 * PI).sin(),
            (0.5 * PI).sin(),
            (1.0 * PI).sin(),
            (0.25 * PI).cos(),
            (0.5 * PI).cos(),
            (0.5 * PI).cos(),
            (1.0 * PI).cos(),
        ];
        for (a, b) in y.iter().zip(expect) {
            assert!((a - b).abs() < 1e-6, "{y:?}");
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        let m = Module::Frequency(Frequency {
            in_dims: 3,
            octaves: 3,
        });
        gradcheck::check(&m, 0, 0, &gradcheck::inputs(5, 3, 0.0, 1.0), 5, 2e-3);
    }

    #[test]
    fn huge_and_infinite_angles_do_not_overflow() {
        let a = [
            f32::NEG_INFINITY,
            -3.0e38,
            -2.2e9,
            2.2e9,
            3.0e38,
            f32::INFINITY,
            f32::NAN,
        ];
        let (mut s, mut c) = (vec![0.0; a.len()], vec![0.0; a.len()]);
        super::sin_cos_slice(&a, &mut s, &mut c);
        for i in 0..a.len() {
            let (ws, wc) = a[i].sin_cos();
            assert_eq!(s[i].to_bits(), ws.to_bits(), "sin {}", a[i]);
            assert_eq!(c[i].to_bits(), wc.to_bits(), "cos {}", a[i]);
        }
    }
}
