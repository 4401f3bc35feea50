//! `tri(K)`: triangle-wave encoding, a cheap periodic alternative to `freq`.
//!
//! For an input of D values and K octaves the output has D·K values:
//!
//! ```text
//! u          = 2^(k-1) · x[i]                  (period 2^(1-k) in x, like sin(2^k·π·x))
//! y[i*K + k] = 4 · |u − floor(u + 0.5)| − 1    (range [−1, 1]; −1 at integers u)
//! ```

use super::{Grads, Layer, Workspace};

#[derive(Clone, Debug, PartialEq)]
pub struct Triangle {
    pub in_dims: usize,
    pub octaves: usize,
}

#[inline]
fn scale(k: usize) -> f32 {
    (1u32 << k) as f32 * 0.5
}

impl Layer for Triangle {
    fn in_dims(&self) -> usize {
        self.in_dims
    }
    fn out_dims(&self) -> usize {
        self.in_dims * self.octaves
    }
    fn forward(&self, _params: &[f32], x: &[f32], n: usize, y: &mut [f32], _ws: &mut Workspace) {
        let (d, k) = (self.in_dims, self.octaves);
        for s in 0..n {
            for i in 0..d {
                let xi = x[s * d + i];
                for j in 0..k {
                    let u = scale(j) * xi;
                    y[s * d * k + i * k + j] = 4.0 * (u - (u + 0.5).floor()).abs() - 1.0;
                }
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
        let (d, k) = (self.in_dims, self.octaves);
        for s in 0..n {
            for i in 0..d {
                let xi = x[s * d + i];
                let mut acc = 0.0;
                for j in 0..k {
                    let u = scale(j) * xi;
                    let r = u - (u + 0.5).floor();
                    let sign = if r > 0.0 {
                        1.0
                    } else if r < 0.0 {
                        -1.0
                    } else {
                        0.0
                    };
                    acc += 4.0 * scale(j) * sign * dy[s * d * k + i * k + j];
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
    fn values() {
        let t = Triangle {
            in_dims: 1,
            octaves: 2,
        };
        let mut y = vec![0.0; 2];
        t.forward(&[], &[0.5], 1, &mut y, &mut Workspace::default());
        // k=0: u = 0.25 → 0; k=1: u = 0.5 → 1
        assert_eq!(y, vec![0.0, 1.0]);
    }

    #[test]
    fn gradients_match_finite_differences() {
        let m = Module::Triangle(Triangle {
            in_dims: 2,
            octaves: 3,
        });
        // keep inputs away from the kinks (multiples of 2^(−k)·0.5)
        let x = [0.13, 0.37, 0.58, 0.81, 0.29, 0.66];
        gradcheck::check(&m, 0, 0, &x, 3, 1e-3);
    }
}
