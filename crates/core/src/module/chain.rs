//! `a | b | c`: module chaining (the seed's ModuleChain, n-ary). Stage i's input width is
//! stage i−1's output width.

use super::{Grads, Layer, Module, TensorInfo, Workspace};
use crate::rng::Pcg32;

#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    pub stages: Vec<Module>,
    /// Slots: the output of every stage but the last, then two gradient buffers.
    slot_base: usize,
}

impl Chain {
    pub(crate) fn new(stages: Vec<Module>, slot_base: usize) -> Chain {
        Chain { stages, slot_base }
    }
    /// Slots a chain of `stages` stages reserves.
    pub(crate) fn slots_needed(stages: usize) -> usize {
        stages - 1 + 2
    }
    fn out_slot(&self, i: usize) -> usize {
        self.slot_base + i
    }
    fn grad_slot(&self, i: usize) -> usize {
        self.slot_base + self.stages.len() - 1 + i
    }
}

impl Layer for Chain {
    fn in_dims(&self) -> usize {
        self.stages[0].in_dims()
    }
    fn out_dims(&self) -> usize {
        self.stages.last().unwrap().out_dims()
    }
    fn init(&self, params: &mut [f32], rng: &mut Pcg32) {
        for s in &self.stages {
            s.init(params, rng);
        }
    }

    fn forward(&self, params: &[f32], x: &[f32], n: usize, y: &mut [f32], ws: &mut Workspace) {
        let last = self.stages.len() - 1;
        let mut prev: Option<Vec<f32>> = None;
        for (i, stage) in self.stages.iter().enumerate() {
            let input: &[f32] = prev.as_deref().unwrap_or(x);
            if i == last {
                stage.forward(params, input, n, y, ws);
            } else {
                let mut out = ws.take(self.out_slot(i), n * stage.out_dims());
                stage.forward(params, input, n, &mut out, ws);
                if let Some(p) = prev.take() {
                    ws.put(self.out_slot(i - 1), p);
                }
                prev = Some(out);
            }
        }
        if let Some(p) = prev {
            ws.put(self.out_slot(last - 1), p);
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
        let last = self.stages.len() - 1;
        let mut cur = ws.take_kept(self.grad_slot(0));
        let mut next = ws.take_kept(self.grad_slot(1));
        for i in (0..=last).rev() {
            let stage = &self.stages[i];
            let out = if i < last {
                Some(ws.take_kept(self.out_slot(i)))
            } else {
                None
            };
            let input = if i > 0 {
                Some(ws.take_kept(self.out_slot(i - 1)))
            } else {
                None
            };
            let xi: &[f32] = input.as_deref().unwrap_or(x);
            let yi: &[f32] = out.as_deref().unwrap_or(y);
            let d: &mut [f32] = if i == last { &mut *dy } else { &mut cur };
            if i > 0 {
                next.resize(n * stage.in_dims(), 0.0);
                stage.backward(params, xi, yi, n, d, Some(&mut next), grads, ws);
            } else {
                stage.backward(params, xi, yi, n, d, dx.as_deref_mut(), grads, ws);
            }
            if let Some(o) = out {
                ws.put(self.out_slot(i), o);
            }
            if let Some(inp) = input {
                ws.put(self.out_slot(i - 1), inp);
            }
            std::mem::swap(&mut cur, &mut next);
        }
        ws.put(self.grad_slot(0), cur);
        ws.put(self.grad_slot(1), next);
    }

    fn tensors(&self, prefix: &str, out: &mut Vec<TensorInfo>) {
        for (i, s) in self.stages.iter().enumerate() {
            s.tensors(&format!("{prefix}{i}."), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::gradcheck;
    use crate::arch::Arch;
    use crate::network::Network;

    #[test]
    fn gradients_match_finite_differences() {
        let arch =
            Arch::parse("freq(2) | mlp(6x1, tanh, out=4) | mlp(5x1, swish, sigmoid)").unwrap();
        let net = Network::build(&arch, 2, 3).unwrap();
        gradcheck::check(
            &net.root,
            net.param_count,
            net.slot_count,
            &gradcheck::inputs(4, 2, 0.0, 1.0),
            4,
            5e-3,
        );
    }
}
