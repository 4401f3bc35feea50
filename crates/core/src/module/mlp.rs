//! `mlp(WxL, hidden[, output][, out=N])`: L hidden layers of width W, then an output layer.
//!
//! Layer l computes `z = W_l · a + b_l`, `a' = act(z)` with `W_l: out × in` stored
//! row-major and `b_l: out`, weight then bias, layer after layer, in the flat parameter
//! vector. Hidden layers use the hidden activation, the last layer the output activation.
//! Initialisation: Xavier-uniform weights, U(−√(6/(in+out)), +√(6/(in+out))); zero biases.

use super::{Allocator, Grads, Layer, TensorInfo, Workspace};
use crate::activation::Activation;
use crate::rng::Pcg32;

/// One fully connected layer inside an MLP.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    pub in_dims: usize,
    pub out_dims: usize,
    /// Offset of `W` (out × in, row-major) in the flat parameter vector.
    pub weight: usize,
    /// Offset of `b` (out).
    pub bias: usize,
    pub act: Activation,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Mlp {
    pub layers: Vec<Linear>,
    pub hidden_act: Activation,
    pub output_act: Activation,
    /// Workspace slots: z and a of every layer (2 per layer), then two gradient buffers.
    slot_base: usize,
}

impl Mlp {
    pub(crate) fn new(
        in_dims: usize,
        width: usize,
        hidden_layers: usize,
        out_dims: usize,
        hidden_act: Activation,
        output_act: Activation,
        alloc: &mut Allocator,
    ) -> Mlp {
        let mut layers = Vec::with_capacity(hidden_layers + 1);
        let mut prev = in_dims;
        for l in 0..=hidden_layers {
            let (out, act) = if l == hidden_layers {
                (out_dims, output_act)
            } else {
                (width, hidden_act)
            };
            let weight = alloc.params(out * prev);
            let bias = alloc.params(out);
            layers.push(Linear {
                in_dims: prev,
                out_dims: out,
                weight,
                bias,
                act,
            });
            prev = out;
        }
        let slot_base = alloc.slots(2 * layers.len() + 2);
        Mlp {
            layers,
            hidden_act,
            output_act,
            slot_base,
        }
    }

    pub fn width(&self) -> usize {
        if self.layers.len() > 1 {
            self.layers[0].out_dims
        } else {
            self.out_dims()
        }
    }

    pub fn hidden_layers(&self) -> usize {
        self.layers.len() - 1
    }

    fn z_slot(&self, l: usize) -> usize {
        self.slot_base + 2 * l
    }
    fn a_slot(&self, l: usize) -> usize {
        self.slot_base + 2 * l + 1
    }
    fn grad_slot(&self, i: usize) -> usize {
        self.slot_base + 2 * self.layers.len() + i
    }
}

/// z (n × out) = x (n × in) · Wᵀ + b.
pub(crate) fn linear_forward(layer: &Linear, params: &[f32], x: &[f32], n: usize, z: &mut [f32]) {
    let (i, o) = (layer.in_dims, layer.out_dims);
    let w = &params[layer.weight..layer.weight + o * i];
    let b = &params[layer.bias..layer.bias + o];
    for row in z.chunks_exact_mut(o) {
        row.copy_from_slice(b);
    }
    // SAFETY: the slices hold n·in, out·in and n·out values; strides describe them exactly.
    unsafe {
        crate::gemm::sgemm(
            n,
            i,
            o,
            x.as_ptr(),
            i as isize,
            1,
            w.as_ptr(),
            1,
            i as isize,
            z.as_mut_ptr(),
            o as isize,
            1,
            true,
        );
    }
}

/// Given dz (n × out): dW += dzᵀ · x, db += Σ_rows dz, and optionally dx = dz · W.
pub(crate) fn linear_backward(
    layer: &Linear,
    params: &[f32],
    x: &[f32],
    n: usize,
    dz: &[f32],
    dx: Option<&mut [f32]>,
    grads: &mut [f32],
) {
    let (i, o) = (layer.in_dims, layer.out_dims);
    {
        let dw = &mut grads[layer.weight..layer.weight + o * i];
        // SAFETY: dz is n × out, x is n × in, dW is out × in; strides match those shapes.
        unsafe {
            crate::gemm::sgemm(
                o,
                n,
                i,
                dz.as_ptr(),
                1,
                o as isize,
                x.as_ptr(),
                i as isize,
                1,
                dw.as_mut_ptr(),
                i as isize,
                1,
                true,
            );
        }
    }
    let db = &mut grads[layer.bias..layer.bias + o];
    for row in dz.chunks_exact(o) {
        for (b, d) in db.iter_mut().zip(row) {
            *b += d;
        }
    }
    if let Some(dx) = dx {
        let w = &params[layer.weight..layer.weight + o * i];
        // SAFETY: dz is n × out, W is out × in, dx is n × in.
        unsafe {
            crate::gemm::sgemm(
                n,
                o,
                i,
                dz.as_ptr(),
                o as isize,
                1,
                w.as_ptr(),
                i as isize,
                1,
                dx.as_mut_ptr(),
                i as isize,
                1,
                false,
            );
        }
    }
}

impl Layer for Mlp {
    fn in_dims(&self) -> usize {
        self.layers[0].in_dims
    }
    fn out_dims(&self) -> usize {
        self.layers.last().unwrap().out_dims
    }

    fn init(&self, params: &mut [f32], rng: &mut Pcg32) {
        for l in &self.layers {
            let limit = (6.0 / (l.in_dims + l.out_dims) as f32).sqrt();
            for w in &mut params[l.weight..l.weight + l.in_dims * l.out_dims] {
                *w = (rng.next_f32() * 2.0 - 1.0) * limit;
            }
            params[l.bias..l.bias + l.out_dims].fill(0.0);
        }
    }

    fn forward(&self, params: &[f32], x: &[f32], n: usize, y: &mut [f32], ws: &mut Workspace) {
        let last = self.layers.len() - 1;
        let mut prev: Option<Vec<f32>> = None; // activation of the previous layer
        for (l, layer) in self.layers.iter().enumerate() {
            let input: &[f32] = prev.as_deref().unwrap_or(x);
            let mut z = ws.take(self.z_slot(l), n * layer.out_dims);
            linear_forward(layer, params, input, n, &mut z);
            if l == last {
                layer.act.forward_slice(&z, y);
            } else {
                let mut a = ws.take(self.a_slot(l), n * layer.out_dims);
                layer.act.forward_slice(&z, &mut a);
                if let Some(p) = prev.take() {
                    ws.put(self.a_slot(l - 1), p);
                }
                prev = Some(a);
            }
            ws.put(self.z_slot(l), z);
        }
        if let Some(p) = prev {
            ws.put(self.a_slot(last - 1), p);
        }
    }

    fn backward(
        &self,
        params: &[f32],
        x: &[f32],
        y: &[f32],
        n: usize,
        dy: &mut [f32],
        mut dx: Option<&mut [f32]>,
        grads: &mut Grads<'_>,
        ws: &mut Workspace,
    ) {
        let last = self.layers.len() - 1;
        // `cur` holds ∂L/∂(output of layer l) for l < last; the last layer uses dy itself.
        let mut cur = ws.take_kept(self.grad_slot(0));
        let mut next = ws.take_kept(self.grad_slot(1));
        for l in (0..=last).rev() {
            let layer = &self.layers[l];
            let z = ws.take_kept(self.z_slot(l));
            if l == last {
                layer.act.backward_slice(&z, y, dy);
            } else {
                let a = ws.take_kept(self.a_slot(l));
                layer.act.backward_slice(&z, &a, &mut cur);
                ws.put(self.a_slot(l), a);
            }
            ws.put(self.z_slot(l), z);
            let a_prev = if l > 0 {
                Some(ws.take_kept(self.a_slot(l - 1)))
            } else {
                None
            };
            let input: &[f32] = a_prev.as_deref().unwrap_or(x);
            let dz: &[f32] = if l == last { dy } else { &cur };
            if l > 0 {
                next.resize(n * layer.in_dims, 0.0);
                linear_backward(layer, params, input, n, dz, Some(&mut next), grads.dense);
            } else {
                linear_backward(layer, params, input, n, dz, dx.as_deref_mut(), grads.dense);
            }
            if let Some(a) = a_prev {
                ws.put(self.a_slot(l - 1), a);
            }
            std::mem::swap(&mut cur, &mut next);
        }
        ws.put(self.grad_slot(0), cur);
        ws.put(self.grad_slot(1), next);
    }

    fn tensors(&self, prefix: &str, out: &mut Vec<TensorInfo>) {
        for (l, layer) in self.layers.iter().enumerate() {
            out.push(TensorInfo {
                name: format!("{prefix}layers.{l}.weight"),
                shape: vec![layer.out_dims, layer.in_dims],
                offset: layer.weight,
            });
            out.push(TensorInfo {
                name: format!("{prefix}layers.{l}.bias"),
                shape: vec![layer.out_dims],
                offset: layer.bias,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Module, gradcheck};
    use super::*;

    #[test]
    fn gradients_match_finite_differences_for_every_activation() {
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { slope: 0.1 },
            Activation::Sigmoid,
            Activation::Tanh,
            Activation::Exp,
            Activation::Swish,
            Activation::Sine { w0: 2.0 },
            Activation::Softplus,
        ];
        for hidden in acts {
            for (hl, output) in [
                (2, Activation::Sigmoid),
                (1, Activation::None),
                (0, Activation::Tanh),
            ] {
                let mut alloc = Allocator::default();
                let m = Module::Mlp(Mlp::new(3, 5, hl, 2, hidden, output, &mut alloc));
                gradcheck::check(
                    &m,
                    alloc.params,
                    alloc.slots,
                    &gradcheck::inputs(6, 3, -1.0, 1.0),
                    6,
                    5e-3,
                );
            }
        }
    }

    #[test]
    fn xavier_init_is_bounded_and_biases_zero() {
        let mut alloc = Allocator::default();
        let m = Mlp::new(12, 32, 3, 3, Activation::Relu, Activation::None, &mut alloc);
        let mut p = vec![9.0; alloc.params];
        m.init(&mut p, &mut Pcg32::new(1));
        let l = &m.layers[0];
        let lim = (6.0f32 / 44.0).sqrt();
        assert!(
            p[l.weight..l.weight + 12 * 32]
                .iter()
                .all(|w| w.abs() <= lim)
        );
        assert!(p[l.bias..l.bias + 32].iter().all(|b| *b == 0.0));
        assert_eq!(alloc.params, 12 * 32 + 32 + 2 * (32 * 32 + 32) + 32 * 3 + 3);
    }
}
