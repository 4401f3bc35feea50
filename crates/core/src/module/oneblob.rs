//! `oneblob(B)`: the one-blob encoding of Müller et al. ("Neural Importance Sampling"):
//! each input in [0, 1] becomes B Gaussian bumps centred on the bins of [0, 1].
//!
//! For an input of D values the output has D·B values, input-major (dimension, then bin):
//!
//! ```text
//! c_b         = (b + 0.5) / B                 (bin centre, f32)
//! σ           = 1 / B
//! d           = x[i] − c_b
//! y[i*B + b]  = exp(−d² / (2σ²)) = exp(d · d · K)   with K = −B²/2 (exact in f32)
//! ∂y/∂x[i]    = −d / σ² · y = 2K · d · y
//! ```

use super::{Grads, Layer, Workspace};
use crate::activation::exp;

#[derive(Clone, Debug, PartialEq)]
pub struct OneBlob {
    pub in_dims: usize,
    pub bins: usize,
}

/// The centre of bin `b` of `bins`: `(b + 0.5) / bins` in f32.
#[inline]
pub fn oneblob_centre(bin: usize, bins: usize) -> f32 {
    (bin as f32 + 0.5) / bins as f32
}

/// `K = −bins²/2`, the factor of d² in the exponent (exact in f32 for bins ≤ 64).
#[inline]
pub fn oneblob_k(bins: usize) -> f32 {
    -0.5 * (bins * bins) as f32
}

impl Layer for OneBlob {
    fn in_dims(&self) -> usize {
        self.in_dims
    }
    fn out_dims(&self) -> usize {
        self.in_dims * self.bins
    }
    fn forward(&self, _params: &[f32], x: &[f32], n: usize, y: &mut [f32], _ws: &mut Workspace) {
        let b = self.bins;
        let centres: Vec<f32> = (0..b).map(|k| oneblob_centre(k, b)).collect();
        let k = oneblob_k(b);
        // The differences first, then one flat, branch-free (vectorisable) exp pass.
        let y = &mut y[..n * self.out_dims()];
        for (yi, &xi) in y.chunks_exact_mut(b).zip(&x[..n * self.in_dims]) {
            for (v, c) in yi.iter_mut().zip(&centres) {
                *v = xi - c;
            }
        }
        for v in y.iter_mut() {
            *v = exp(*v * *v * k);
        }
    }
    fn backward(
        &self,
        _params: &[f32],
        x: &[f32],
        y: &[f32],
        n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        _grads: &mut Grads<'_>,
        _ws: &mut Workspace,
    ) {
        let Some(dx) = dx else { return };
        let b = self.bins;
        let centres: Vec<f32> = (0..b).map(|k| oneblob_centre(k, b)).collect();
        let k2 = 2.0 * oneblob_k(b);
        let m = n * self.in_dims;
        for (((d, &xi), yi), dyi) in dx[..m]
            .iter_mut()
            .zip(&x[..m])
            .zip(y.chunks_exact(b))
            .zip(dy.chunks_exact(b))
        {
            let mut acc = 0.0;
            for ((c, yv), g) in centres.iter().zip(yi).zip(dyi) {
                acc += (xi - c) * yv * g;
            }
            *d = k2 * acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Module, gradcheck};
    use super::*;

    #[test]
    fn values_and_order() {
        let m = OneBlob {
            in_dims: 2,
            bins: 4,
        };
        let x = [0.3f32, 0.9];
        let mut y = vec![0.0; 8];
        m.forward(&[], &x, 1, &mut y, &mut Workspace::default());
        let sigma = 0.25f64;
        for i in 0..2 {
            for b in 0..4 {
                let c = (b as f64 + 0.5) / 4.0;
                let want = (-(x[i] as f64 - c).powi(2) / (2.0 * sigma * sigma)).exp();
                let got = y[i * 4 + b] as f64;
                assert!(
                    (got - want).abs() < 1e-6,
                    "y[{i}, {b}] = {got}, want {want}"
                );
            }
        }
        // the bump of the bin holding x is the largest
        assert!(y[1] > y[0] && y[1] > y[2] && y[7] > y[6]);
    }

    #[test]
    fn gradients_match_finite_differences() {
        for bins in [1, 3, 16] {
            let m = Module::OneBlob(OneBlob { in_dims: 3, bins });
            gradcheck::check(&m, 0, 0, &gradcheck::inputs(5, 3, 0.0, 1.0), 5, 2e-3);
        }
    }
}
