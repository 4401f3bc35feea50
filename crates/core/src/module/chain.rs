//! `a | b | c`: module chaining (the seed's ModuleChain, n-ary). Stage i's input width is
//! stage i−1's output width.
//!
//! Two shortcuts, both giving the bits of the plain stage-by-stage passes: a `freq` stage
//! followed by an `mlp` writes its output straight into the mlp's feature-major input
//! (no sample-major copy and relayout; neither stage's backward reads that copy), and
//! the backward pass stops at the first stage with parameters when the chain's own input
//! gradient is not wanted (an encoding in front has nothing to train).

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
            .position(Module::has_params)
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
        // the latest stage output formed, and its slot
        let mut prev: Option<(usize, Vec<f32>)> = None;
        let mut i = 0;
        while i <= last {
            let input: &[f32] = prev.as_ref().map_or(x, |(_, p)| p);
            // a frequency encoding writes its output straight into the next stage's
            // feature-major input when that stage is an mlp: stage i's sample-major
            // output (its slot) is never formed, and neither stage's backward reads it
            let pair = match (&self.stages[i], self.stages.get(i + 1)) {
                (Module::Frequency(f), Some(Module::Mlp(m))) => Some((f, m)),
                _ => None,
            };
            let end = if pair.is_some() { i + 1 } else { i };
            let run = |out: &mut [f32], ws: &mut Workspace| match pair {
                Some((f, m)) => m.forward_with(params, n, out, ws, |xt, np| {
                    f.forward_feature_major(input, n, np, xt)
                }),
                None => self.stages[i].forward(params, input, n, out, ws),
            };
            if end == last {
                run(y, ws);
            } else {
                let mut out = ws.take(self.out_slot(end), n * self.stages[end].out_dims());
                run(&mut out, ws);
                if let Some((slot, p)) = prev.take() {
                    ws.put(slot, p);
                }
                prev = Some((self.out_slot(end), out));
            }
            i = end + 1;
        }
        if let Some((slot, p)) = prev {
            ws.put(slot, p);
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
            ("freq(3) | mlp(8x2, leaky_relu, sigmoid)", 1),
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
    fn frequency_into_mlp_gives_the_bits_of_the_stages_one_by_one() {
        // the chain hands a frequency encoding's output to the mlp after it feature-major;
        // the stages run one after the other through their sample-major outputs must give
        // the same bits
        let n = 45;
        let x = gradcheck::inputs(n, 2, -0.5, 1.5);
        for spec in [
            "freq(3) | mlp(16x2, leaky_relu, sigmoid)",
            "freq(2) | mlp(8x1, relu, out=5) | freq(1) | mlp(6x1, tanh)",
        ] {
            let net = Network::build(&Arch::parse(spec).unwrap(), 2, 3).unwrap();
            let Module::Chain(chain) = &net.root else {
                panic!("{spec} is not a chain")
            };
            let mut params = vec![0.0; net.param_count];
            net.root.init(&mut params, &mut Pcg32::new(3));
            for (i, p) in params.iter_mut().enumerate() {
                *p += 0.01 * (i % 7) as f32; // non-zero biases
            }
            let mut ws = Workspace::new(net.slot_count);
            let mut got = vec![f32::NAN; n * net.out_dims];
            net.root.forward(&params, &x, n, &mut got, &mut ws);
            let mut cur = x.clone();
            for stage in &chain.stages {
                let mut out = vec![f32::NAN; n * stage.out_dims()];
                stage.forward(
                    &params,
                    &cur,
                    n,
                    &mut out,
                    &mut Workspace::new(net.slot_count),
                );
                cur = out;
            }
            assert_eq!(got.len(), cur.len());
            assert!(got.iter().all(|v| v.is_finite()), "{spec}");
            for (i, (a, b)) in got.iter().zip(&cur).enumerate() {
                assert_eq!(a.to_bits(), b.to_bits(), "{spec}: output {i}");
            }
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        for spec in [
            "freq(2) | mlp(6x1, tanh, out=4) | mlp(5x1, swish, sigmoid)",
            // the frequency stage's backward runs (an mlp before it trains) without its
            // sample-major output, which the chain never formed
            "mlp(4x1, tanh) | freq(2) | mlp(5x1, relu, sigmoid)",
        ] {
            let net = Network::build(&Arch::parse(spec).unwrap(), 2, 3).unwrap();
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
}
