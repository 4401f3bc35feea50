//! `sh(L)`: real spherical harmonics of bands 0..=L of a direction (x, y, z), the
//! (L+1)² values in the order of Sloan's "Efficient Spherical Harmonic Evaluation" and
//! of tiny-cuda-nn's SH encoding (band by band, m from −l to l). The input is used as
//! given: pass a unit vector.
//!
//! Each basis function is a polynomial in x, y, z, stored in [`SH_TERMS`] as a list of
//! terms `c · x^a · y^b · z^c` (f32 coefficients). Factored, with the usual constants:
//!
//! ```text
//! l = 0:  0.28209479
//! l = 1:  −0.48860251·y,  0.48860251·z,  −0.48860251·x
//! l = 2:  1.09254843·xy,  −1.09254843·yz,  0.31539157·(3z² − 1),  −1.09254843·xz,
//!         0.54627422·(x² − y²)
//! l = 3:  −0.59004359·y(3x² − y²),  2.89061144·xyz,  0.45704580·y(1 − 5z²),
//!         0.37317633·z(5z² − 3),  0.45704580·x(1 − 5z²),  1.44530572·z(x² − y²),
//!         −0.59004359·x(x² − 3y²)
//! l = 4:  2.50334294·xy(x² − y²),  −1.77013077·yz(3x² − y²),  0.94617470·xy(7z² − 1),
//!         0.66904654·yz(3 − 7z²),  0.10578555·(35z⁴ − 30z² + 3),  0.66904654·xz(3 − 7z²),
//!         0.47308735·(x² − y²)(7z² − 1),  −1.77013077·xz(x² − 3y²),
//!         0.62583574·(x⁴ − 6x²y² + y⁴)
//! ```
//!
//! [`SH_TERMS`] (the expanded polynomials, f32 coefficients of the exact constants) is
//! the definition every backend and the shader emitters use; a test checks the
//! coefficients against their closed forms and the functions for orthonormality.

use super::{Grads, Layer, Workspace};

/// One term `coefficient · x^e[0] · y^e[1] · z^e[2]`.
pub type ShTerm = (f32, [u8; 3]);

/// The expanded real SH polynomials, index `l² + l + m` (bands 0..=4, 25 functions).
pub const SH_TERMS: [&[ShTerm]; 25] = [
    &[(0.282_094_8, [0, 0, 0])],
    &[(-0.488_602_52, [0, 1, 0])],
    &[(0.488_602_52, [0, 0, 1])],
    &[(-0.488_602_52, [1, 0, 0])],
    &[(1.092_548_5, [1, 1, 0])],
    &[(-1.092_548_5, [0, 1, 1])],
    &[(0.946_174_7, [0, 0, 2]), (-0.315_391_57, [0, 0, 0])],
    &[(-1.092_548_5, [1, 0, 1])],
    &[(0.546_274_24, [2, 0, 0]), (-0.546_274_24, [0, 2, 0])],
    &[(-1.770_130_8, [2, 1, 0]), (0.590_043_6, [0, 3, 0])],
    &[(2.890_611_4, [1, 1, 1])],
    &[(-2.285_229, [0, 1, 2]), (0.457_045_8, [0, 1, 0])],
    &[(1.865_881_7, [0, 0, 3]), (-1.119_529, [0, 0, 1])],
    &[(-2.285_229, [1, 0, 2]), (0.457_045_8, [1, 0, 0])],
    &[(1.445_305_7, [2, 0, 1]), (-1.445_305_7, [0, 2, 1])],
    &[(-0.590_043_6, [3, 0, 0]), (1.770_130_8, [1, 2, 0])],
    &[(2.503_342_9, [3, 1, 0]), (-2.503_342_9, [1, 3, 0])],
    &[(-5.310_392_4, [2, 1, 1]), (1.770_130_8, [0, 3, 1])],
    &[(6.623_223, [1, 1, 2]), (-0.946_174_7, [1, 1, 0])],
    &[(-4.683_326, [0, 1, 3]), (2.007_139_7, [0, 1, 1])],
    &[
        (3.702_494_1, [0, 0, 4]),
        (-3.173_566_3, [0, 0, 2]),
        (0.317_356_65, [0, 0, 0]),
    ],
    &[(-4.683_326, [1, 0, 3]), (2.007_139_7, [1, 0, 1])],
    &[
        (3.311_611_4, [2, 0, 2]),
        (-3.311_611_4, [0, 2, 2]),
        (-0.473_087_34, [2, 0, 0]),
        (0.473_087_34, [0, 2, 0]),
    ],
    &[(-1.770_130_8, [3, 0, 1]), (5.310_392_4, [1, 2, 1])],
    &[
        (0.625_835_7, [4, 0, 0]),
        (-3.755_014_4, [2, 2, 0]),
        (0.625_835_7, [0, 4, 0]),
    ],
];

/// The terms of ∂Y_k/∂(axis) (axis 0 = x, 1 = y, 2 = z): each term `c·x^a·y^b·z^c` with
/// `e = exponent of axis > 0` gives `(c·e)·...·axis^(e−1)·...`.
pub fn sh_derivative_terms(k: usize, axis: usize) -> Vec<ShTerm> {
    SH_TERMS[k]
        .iter()
        .filter(|(_, e)| e[axis] > 0)
        .map(|&(c, mut e)| {
            let f = c * e[axis] as f32;
            e[axis] -= 1;
            (f, e)
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq)]
pub struct SphericalHarmonics {
    pub degree: usize,
}

impl SphericalHarmonics {
    /// (degree + 1)² outputs.
    pub fn count(&self) -> usize {
        (self.degree + 1) * (self.degree + 1)
    }
}

/// Per-sample powers x^0..=x^4 (structure of arrays: `p[e][s]`), by repeated multiplication.
fn powers(x: &[f32], n: usize, axis: usize, max: usize) -> Vec<Vec<f32>> {
    let mut p = vec![vec![1.0f32; n]];
    if max >= 1 {
        p.push((0..n).map(|s| x[s * 3 + axis]).collect());
    }
    for e in 2..=max {
        let next: Vec<f32> = p[e - 1].iter().zip(&p[1]).map(|(a, b)| a * b).collect();
        p.push(next);
    }
    p
}

/// `acc[s] += c · px[a][s] · py[b][s] · pz[c][s] · w[s]` over one term (w optional).
#[inline]
fn add_term(acc: &mut [f32], t: &ShTerm, p: &[Vec<Vec<f32>>; 3], w: Option<&[f32]>) {
    let (c, e) = *t;
    let (px, py, pz) = (
        &p[0][e[0] as usize],
        &p[1][e[1] as usize],
        &p[2][e[2] as usize],
    );
    match w {
        None => {
            for (((a, x), y), z) in acc.iter_mut().zip(px).zip(py).zip(pz) {
                *a += c * x * y * z;
            }
        }
        Some(w) => {
            for ((((a, x), y), z), w) in acc.iter_mut().zip(px).zip(py).zip(pz).zip(w) {
                *a += c * x * y * z * w;
            }
        }
    }
}

impl Layer for SphericalHarmonics {
    fn in_dims(&self) -> usize {
        3
    }
    fn out_dims(&self) -> usize {
        self.count()
    }
    fn forward(&self, _params: &[f32], x: &[f32], n: usize, y: &mut [f32], _ws: &mut Workspace) {
        let k_n = self.count();
        let p = [0, 1, 2].map(|a| powers(x, n, a, self.degree));
        // One basis function at a time over all samples (vectorisable), then the
        // scatter into the sample-major layout.
        let mut acc = vec![0.0f32; n];
        for (k, terms) in SH_TERMS[..k_n].iter().enumerate() {
            acc.fill(0.0);
            for t in terms.iter() {
                add_term(&mut acc, t, &p, None);
            }
            for (s, v) in acc.iter().enumerate() {
                y[s * k_n + k] = *v;
            }
        }
    }
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
        let k_n = self.count();
        let p = [0, 1, 2].map(|a| powers(x, n, a, self.degree));
        let mut g = [vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]];
        let mut w = vec![0.0f32; n];
        for k in 1..k_n {
            for (s, v) in w.iter_mut().enumerate() {
                *v = dy[s * k_n + k];
            }
            for (axis, ga) in g.iter_mut().enumerate() {
                for t in &sh_derivative_terms(k, axis) {
                    add_term(ga, t, &p, Some(&w));
                }
            }
        }
        for s in 0..n {
            for axis in 0..3 {
                dx[s * 3 + axis] = g[axis][s];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Module, gradcheck};
    use super::*;
    use std::f64::consts::PI;

    /// The closed forms (f64) the table's coefficients are rounded from.
    fn closed_form(k: usize, x: f64, y: f64, z: f64) -> f64 {
        let p = PI.sqrt();
        let r = f64::sqrt;
        let (x2, y2, z2) = (x * x, y * y, z * z);
        match k {
            0 => 1.0 / (2.0 * p),
            1 => -r(3.0) * y / (2.0 * p),
            2 => r(3.0) * z / (2.0 * p),
            3 => -r(3.0) * x / (2.0 * p),
            4 => r(15.0) * x * y / (2.0 * p),
            5 => -r(15.0) * y * z / (2.0 * p),
            6 => r(5.0) * (3.0 * z2 - 1.0) / (4.0 * p),
            7 => -r(15.0) * x * z / (2.0 * p),
            8 => r(15.0) * (x2 - y2) / (4.0 * p),
            9 => r(70.0) * y * (-3.0 * x2 + y2) / (8.0 * p),
            10 => r(105.0) * x * y * z / (2.0 * p),
            11 => r(42.0) * y * (1.0 - 5.0 * z2) / (8.0 * p),
            12 => r(7.0) * z * (5.0 * z2 - 3.0) / (4.0 * p),
            13 => r(42.0) * x * (1.0 - 5.0 * z2) / (8.0 * p),
            14 => r(105.0) * z * (x2 - y2) / (4.0 * p),
            15 => r(70.0) * x * (-x2 + 3.0 * y2) / (8.0 * p),
            16 => 3.0 * r(35.0) * x * y * (x2 - y2) / (4.0 * p),
            17 => 3.0 * r(70.0) * y * z * (-3.0 * x2 + y2) / (8.0 * p),
            18 => 3.0 * r(5.0) * x * y * (7.0 * z2 - 1.0) / (4.0 * p),
            19 => 3.0 * r(10.0) * y * z * (3.0 - 7.0 * z2) / (8.0 * p),
            20 => 3.0 * (35.0 * z2 * z2 - 30.0 * z2 + 3.0) / (16.0 * p),
            21 => 3.0 * r(10.0) * x * z * (3.0 - 7.0 * z2) / (8.0 * p),
            22 => 3.0 * r(5.0) * (x2 - y2) * (7.0 * z2 - 1.0) / (8.0 * p),
            23 => 3.0 * r(70.0) * x * z * (-x2 + 3.0 * y2) / (8.0 * p),
            24 => 3.0 * r(35.0) * (x2 * x2 - 6.0 * x2 * y2 + y2 * y2) / (16.0 * p),
            _ => unreachable!(),
        }
    }

    fn eval(k: usize, x: f64, y: f64, z: f64) -> f64 {
        SH_TERMS[k]
            .iter()
            .map(|(c, e)| {
                *c as f64 * x.powi(e[0] as i32) * y.powi(e[1] as i32) * z.powi(e[2] as i32)
            })
            .sum()
    }

    #[test]
    fn table_matches_the_closed_forms() {
        let g = gradcheck::inputs(200, 3, -1.0, 1.0);
        for v in g.chunks(3) {
            let (x, y, z) = (v[0] as f64, v[1] as f64, v[2] as f64);
            for k in 0..25 {
                let (a, b) = (eval(k, x, y, z), closed_form(k, x, y, z));
                assert!((a - b).abs() < 1e-6, "Y{k}({x}, {y}, {z}) = {a}, want {b}");
            }
        }
        // the tiny-cuda-nn / Sloan constants, rounded to f32
        for (k, want) in [
            (0, 0.282_094_791_773_878_14),
            (1, -0.488_602_511_902_919_87),
            (4, 1.092_548_430_592_079_2),
            (10, 2.890_611_442_640_554),
            (16, 2.503_342_941_796_704_6),
        ] {
            assert_eq!(SH_TERMS[k][0].0, want as f32, "Y{k}");
        }
    }

    #[test]
    fn functions_are_orthonormal_on_the_sphere() {
        // Midpoint rule in (cos θ, φ): exact enough for polynomials of degree ≤ 8.
        let (nt, np) = (200, 400);
        let mut gram = [[0.0f64; 25]; 25];
        for i in 0..nt {
            let z = -1.0 + (i as f64 + 0.5) * 2.0 / nt as f64;
            let r = (1.0 - z * z).sqrt();
            for j in 0..np {
                let phi = (j as f64 + 0.5) * 2.0 * PI / np as f64;
                let (x, y) = (r * phi.cos(), r * phi.sin());
                let w = (2.0 / nt as f64) * (2.0 * PI / np as f64);
                let v: Vec<f64> = (0..25).map(|k| eval(k, x, y, z)).collect();
                for (row, va) in gram.iter_mut().zip(&v) {
                    for (g, vb) in row.iter_mut().zip(&v) {
                        *g += w * va * vb;
                    }
                }
            }
        }
        for (a, row) in gram.iter().enumerate() {
            for (b, g) in row.iter().enumerate() {
                let want = if a == b { 1.0 } else { 0.0 };
                assert!((g - want).abs() < 1e-3, "<Y{a}, Y{b}> = {g}");
            }
        }
    }

    #[test]
    fn forward_matches_the_table_and_order() {
        let m = SphericalHarmonics { degree: 4 };
        let x = gradcheck::inputs(7, 3, -1.0, 1.0);
        let mut y = vec![0.0; 7 * 25];
        m.forward(&[], &x, 7, &mut y, &mut Workspace::default());
        for s in 0..7 {
            let v = &x[s * 3..s * 3 + 3];
            for k in 0..25 {
                let want = closed_form(k, v[0] as f64, v[1] as f64, v[2] as f64);
                assert!(
                    (y[s * 25 + k] as f64 - want).abs() < 1e-5,
                    "sample {s} Y{k}"
                );
            }
        }
        // l = 1 is (−c·y, c·z, −c·x)
        let mut y = vec![0.0; 4];
        SphericalHarmonics { degree: 1 }.forward(
            &[],
            &[1.0, 0.0, 0.0],
            1,
            &mut y,
            &mut Workspace::default(),
        );
        assert_eq!(y, vec![0.282_094_8, 0.0, 0.0, -0.488_602_52]);
    }

    #[test]
    fn gradients_match_finite_differences() {
        for degree in 0..=4 {
            let m = Module::SphericalHarmonics(SphericalHarmonics { degree });
            gradcheck::check(&m, 0, 0, &gradcheck::inputs(4, 3, -1.0, 1.0), 4, 2e-3);
        }
    }
}
