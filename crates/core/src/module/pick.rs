//! `pick(i, j, ...)`: selects input values by index, in the given order (repeats
//! allowed): `y[k] = x[indices[k]]`. With `cat`, it composes encodings per input
//! dimension: `cat(pick(0, 1) | freq(6), pick(2) | oneblob(16))`.
//!
//! Backward scatter-adds: `∂L/∂x[i] = Σ_{k : indices[k] = i} ∂L/∂y[k]` (0 for inputs
//! that are not picked).

use super::{Grads, Layer, Workspace};

#[derive(Clone, Debug, PartialEq)]
pub struct Pick {
    pub in_dims: usize,
    /// Every index is below `in_dims` (checked when the network is resolved).
    pub indices: Vec<usize>,
}

impl Layer for Pick {
    fn in_dims(&self) -> usize {
        self.in_dims
    }
    fn out_dims(&self) -> usize {
        self.indices.len()
    }
    fn forward(&self, _params: &[f32], x: &[f32], n: usize, y: &mut [f32], _ws: &mut Workspace) {
        let (d, o) = (self.in_dims, self.indices.len());
        for (ys, xs) in y[..n * o].chunks_exact_mut(o).zip(x.chunks_exact(d)) {
            for (v, &i) in ys.iter_mut().zip(&self.indices) {
                *v = xs[i];
            }
        }
    }
    fn backward(
        &self,
        _params: &[f32],
        _x: &[f32],
        _y: &[f32],
        n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        _grads: &mut Grads<'_>,
        _ws: &mut Workspace,
    ) {
        let Some(dx) = dx else { return };
        let (d, o) = (self.in_dims, self.indices.len());
        dx[..n * d].fill(0.0);
        for (dxs, dys) in dx[..n * d].chunks_exact_mut(d).zip(dy.chunks_exact(o)) {
            for (g, &i) in dys.iter().zip(&self.indices) {
                dxs[i] += g;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Module, gradcheck};
    use super::*;

    #[test]
    fn selects_in_order_with_repeats() {
        let m = Pick {
            in_dims: 3,
            indices: vec![2, 0, 2],
        };
        let mut y = vec![0.0; 6];
        m.forward(
            &[],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            2,
            &mut y,
            &mut Workspace::default(),
        );
        assert_eq!(y, vec![3.0, 1.0, 3.0, 6.0, 4.0, 6.0]);
        let mut dy = vec![1.0, 10.0, 100.0, 2.0, 20.0, 200.0];
        let mut dx = vec![7.0; 6];
        m.backward(
            &[],
            &[0.0; 6],
            &y,
            2,
            &mut dy,
            Some(&mut dx),
            &mut Grads {
                dense: &mut [],
                sparse: &mut [],
            },
            &mut Workspace::default(),
        );
        assert_eq!(dx, vec![10.0, 0.0, 101.0, 20.0, 0.0, 202.0]);
    }

    #[test]
    fn gradients_match_finite_differences() {
        let m = Module::Pick(Pick {
            in_dims: 4,
            indices: vec![3, 1, 1, 0],
        });
        gradcheck::check(&m, 0, 0, &gradcheck::inputs(5, 4, -1.0, 1.0), 5, 1e-3);
    }
}
