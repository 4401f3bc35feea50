//! `a | b | c`: module chaining (the seed's ModuleChain, n-ary). Stage i's input width is
//! stage i−1's output width.

use super::{Grads, Layer, Module, TensorInfo, Workspace};
use crate::rng::Pcg32;

#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    pub stages: Vec<Module>,
    /// Slots: the output of every stage but the last, then two gradient buffers.
    slot_base: usize,
    /// The first stage with parameters (`stages.len()` when none has): the backward
    /// pass stops there when the chain's own input gradient is not wanted, so the
    /// parameter-free encodings in front of it (and the input gradient of the stage
    /// after them) cost nothing.
    first_trained: usize,
}

impl Chain {
    pub(crate) fn new(stages: Vec<Module>, slot_base: usize) -> Chain {
        let first_trained = stages
            .iter()
            .position(|s| {
                let mut t = Vec::new();
                s.tensors("", &mut t);
                !t.is_empty()
            })
            .unwrap_or(stages.len());
        Chain {
            stages,
            slot_base,
            first_trained,
        }
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
        // the lowest stage whose backward pass runs, and which gets no input gradient
        // buffer unless it is stage 0 (then the caller's `dx`, if any)
        let first = if dx.is_some() { 0 } else { self.first_trained };
        let mut cur = ws.take_kept(self.grad_slot(0));
        let mut next = ws.take_kept(self.grad_slot(1));
        for i in (first.min(last + 1)..=last).rev() {
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
            if i > first {
                next.resize(n * stage.in_dims(), 0.0);
                stage.backward(params, xi, yi, n, d, Some(&mut next), grads, ws);
            } else if i == 0 {
                stage.backward(params, xi, yi, n, d, dx.as_deref_mut(), grads, ws);
            } else {
                stage.backward(params, xi, yi, n, d, None, grads, ws);
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
    use super::super::{Grads, Layer, Module, Sparse, Workspace, gradcheck};
    use crate::arch::Arch;
    use crate::network::Network;
    use crate::rng::Pcg32;

    /// The parameter gradients of one backward pass, with or without the chain's input
    /// gradient requested.
    fn grads(net: &Network, x: &[f32], n: usize, want_dx: bool) -> Vec<f32> {
        let mut params = vec![0.0; net.param_count];
        net.root.init(&mut params, &mut Pcg32::new(5));
        let mut ws = Workspace::new(net.slot_count);
        let mut y = vec![0.0; n * net.out_dims];
        net.root.forward(&params, x, n, &mut y, &mut ws);
        let mut dy: Vec<f32> = y.iter().map(|v| v - 0.25).collect();
        let mut dx = vec![0.0; x.len()];
        let mut g = vec![0.0; net.param_count];
        let mut sparse = vec![Sparse::default(); net.buckets.len()];
        let mut grads = Grads {
            dense: &mut g,
            sparse: &mut sparse,
        };
        let dx = want_dx.then_some(&mut dx[..]);
        net.root
            .backward(&params, x, &y, n, &mut dy, dx, &mut grads, &mut ws);
        Grads::scatter(&sparse, &mut g);
        g
    }

    #[test]
    fn backward_stops_at_the_first_stage_with_parameters() {
        let n = 37;
        let x = gradcheck::inputs(n, 2, 0.0, 1.0);
        for (spec, first) in [
            ("freq(2) | identity | mlp(8x2, relu, sigmoid)", 2),
            ("cat(identity, freq(3)) | mlp(8x1, leaky_relu)", 1),
            (
                "hashgrid(levels=3, features=2, log2_size=8, base=4) | mlp(8x1, relu)",
                0,
            ),
            ("mlp(6x1, tanh, out=4) | freq(1) | mlp(5x1, swish)", 0),
        ] {
            let net = Network::build(&Arch::parse(spec).unwrap(), 2, 3).unwrap();
            let Module::Chain(chain) = &net.root else {
                panic!("{spec} is not a chain")
            };
            assert_eq!(chain.first_trained, first, "{spec}");
            // skipping the encodings' backward (and the input gradient of the stage
            // after them) leaves every parameter gradient as it was, bit for bit
            let (skipped, full) = (grads(&net, &x, n, false), grads(&net, &x, n, true));
            assert_eq!(skipped.len(), full.len());
            assert!(full.iter().any(|g| *g != 0.0), "{spec}");
            for (i, (a, b)) in skipped.iter().zip(&full).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{spec}: parameter {i}");
            }
        }
    }

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
