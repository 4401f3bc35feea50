//! `oneblob(B[, min, max])`: the one-blob encoding of Müller et al. ("Neural Importance
//! Sampling"): each input in [min, max] (default [0, 1]) becomes B Gaussian bumps centred
//! on the B equal bins of that range.
//!
//! For an input of D values the output has D·B values, input-major (dimension, then bin):
//!
//! ```text
//! r           = max − min
//! c_b         = min + ((b + 0.5) / B) · r      (bin centre, f32)
//! σ           = r / B
//! d           = x[i] − c_b
//! y[i*B + b]  = exp(−d² / (2σ²)) = exp(d · d · K)   with K = (−B²/2) / (r · r)
//! ∂y/∂x[i]    = −d / σ² · y = 2K · d · y
//! ```
//!
//! With the default range (r = 1) this is c_b = (b + 0.5)/B and K = −B²/2 exactly.
//!
//! ```text
//! ```

use super::{Grads, Layer, Workspace};
use crate::activation::exp;

#[derive(Clone, Debug, PartialEq)]
pub struct OneBlob {
    pub in_dims: usize,
    pub bins: usize,
    /// The range the bins cover.
    pub min: f32,
    pub max: f32,
}

impl OneBlob {
    /// The centre of bin `b`: `min + ((b + 0.5) / bins) · (max − min)` in f32.
    #[inline]
    pub fn centre(&self, bin: usize) -> f32 {
        self.min + (bin as f32 + 0.5) / self.bins as f32 * (self.max - self.min)
    }

    /// `K = (−bins²/2) / (max − min)²`, the factor of d² in the exponent.
    #[inline]
    pub fn k(&self) -> f32 {
        let r = self.max - self.min;
        -0.5 * (self.bins * self.bins) as f32 / (r * r)
    }
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
        let centres: Vec<f32> = (0..b).map(|k| self.centre(k)).collect();
        let k = self.k();
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
        let centres: Vec<f32> = (0..b).map(|k| self.centre(k)).collect();
        let k2 = 2.0 * self.k();
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
            min: 0.0,
            max: 1.0,
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
            let m = Module::OneBlob(OneBlob {
                in_dims: 3,
                bins,
                min: 0.0,
                max: 1.0,
            });
            gradcheck::check(&m, 0, 0, &gradcheck::inputs(5, 3, 0.0, 1.0), 5, 2e-3);
        }
        // a range of [-1, 3]: the same bumps, stretched
        let m = Module::OneBlob(OneBlob {
            in_dims: 2,
            bins: 6,
            min: -1.0,
            max: 3.0,
        });
        gradcheck::check(&m, 0, 0, &gradcheck::inputs(5, 2, -1.0, 3.0), 5, 2e-3);
    }

    #[test]
    fn a_range_maps_onto_the_unit_bins() {
        let unit = OneBlob {
            in_dims: 1,
            bins: 8,
            min: 0.0,
            max: 1.0,
        };
        let wide = OneBlob {
            min: -1.0,
            max: 1.0,
            ..unit.clone()
        };
        let (mut a, mut b) = (vec![0.0; 8], vec![0.0; 8]);
        unit.forward(&[], &[0.3], 1, &mut a, &mut Workspace::default());
        wide.forward(&[], &[-0.4], 1, &mut b, &mut Workspace::default());
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-6, "{a:?} vs {b:?}");
        }
        assert_eq!(unit.centre(3), 3.5 / 8.0);
        assert_eq!(unit.k(), -32.0);
    }
}
