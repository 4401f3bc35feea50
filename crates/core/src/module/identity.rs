//! `identity`: y = x.

use super::{Grads, Layer, Workspace};

#[derive(Clone, Debug, PartialEq)]
pub struct Identity {
    pub dims: usize,
}

impl Layer for Identity {
    fn in_dims(&self) -> usize {
        self.dims
    }
    fn out_dims(&self) -> usize {
        self.dims
    }
    fn forward(&self, _params: &[f32], x: &[f32], _n: usize, y: &mut [f32], _ws: &mut Workspace) {
        y.copy_from_slice(x);
    }
    fn backward(
        &self,
        _params: &[f32],
        _x: &[f32],
        _y: &[f32],
        _n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        _grads: &mut Grads<'_>,
        _ws: &mut Workspace,
    ) {
        if let Some(dx) = dx {
            dx.copy_from_slice(dy);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Module, gradcheck};
    use super::*;

    #[test]
    fn gradients_match_finite_differences() {
        let m = Module::Identity(Identity { dims: 3 });
        gradcheck::check(&m, 0, 0, &gradcheck::inputs(4, 3, -1.0, 1.0), 4, 1e-3);
    }
}
