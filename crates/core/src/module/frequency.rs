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

use super::{Layer, Workspace};
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
        let (d, k, od) = (self.in_dims, self.octaves, self.out_dims());
        let half = d * k;
        for s in 0..n {
            let xs = &x[s * d..(s + 1) * d];
            let ys = &mut y[s * od..(s + 1) * od];
            for (i, &xi) in xs.iter().enumerate() {
                for (j, scale) in self.scales().enumerate() {
                    let (sin, cos) = (scale * xi).sin_cos();
                    ys[i * k + j] = sin;
                    ys[half + i * k + j] = cos;
                }
            }
        }
    }
    fn backward(
        &self,
        _params: &[f32],
        _x: &[f32],
        y: &[f32],
        n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        _grads: &mut [f32],
        _ws: &mut Workspace,
    ) {
        let Some(dx) = dx else { return };
        let (d, k, od) = (self.in_dims, self.octaves, self.out_dims());
        let half = d * k;
        for s in 0..n {
            let ys = &y[s * od..(s + 1) * od];
            let dys = &dy[s * od..(s + 1) * od];
            for i in 0..d {
                let mut acc = 0.0;
                for (j, scale) in self.scales().enumerate() {
                    let (sin, cos) = (ys[i * k + j], ys[half + i * k + j]);
                    acc += scale * (cos * dys[i * k + j] - sin * dys[half + i * k + j]);
                }
                dx[s * d + i] = acc;
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
}
