//! `cat(a, b, ...)`: every child sees the same input; their outputs are concatenated in
//! order (child 0's values first within each sample).

use super::{Grads, Layer, Module, TensorInfo, Workspace};
use crate::rng::Pcg32;

#[derive(Clone, Debug, PartialEq)]
pub struct Cat {
    pub children: Vec<Module>,
    /// Slots: each child's output, each child's output gradient, one input-gradient buffer.
    slot_base: usize,
}

impl Cat {
    pub(crate) fn new(children: Vec<Module>, slot_base: usize) -> Cat {
        Cat {
            children,
            slot_base,
        }
    }
    pub(crate) fn slots_needed(children: usize) -> usize {
        2 * children + 1
    }
    fn out_slot(&self, i: usize) -> usize {
        self.slot_base + i
    }
    fn dout_slot(&self, i: usize) -> usize {
        self.slot_base + self.children.len() + i
    }
    fn dx_slot(&self) -> usize {
        self.slot_base + 2 * self.children.len()
    }
}

impl Layer for Cat {
    fn in_dims(&self) -> usize {
        self.children[0].in_dims()
    }
    fn out_dims(&self) -> usize {
        self.children.iter().map(|c| c.out_dims()).sum()
    }
    fn init(&self, params: &mut [f32], rng: &mut Pcg32) {
        for c in &self.children {
            c.init(params, rng);
        }
    }

    fn forward(&self, params: &[f32], x: &[f32], n: usize, y: &mut [f32], ws: &mut Workspace) {
        let od = self.out_dims();
        let mut col = 0;
        for (i, c) in self.children.iter().enumerate() {
            let cd = c.out_dims();
            let mut out = ws.take(self.out_slot(i), n * cd);
            c.forward(params, x, n, &mut out, ws);
            for s in 0..n {
                y[s * od + col..s * od + col + cd].copy_from_slice(&out[s * cd..(s + 1) * cd]);
            }
            ws.put(self.out_slot(i), out);
            col += cd;
        }
    }

    fn backward(
        &self,
        params: &[f32],
        x: &[f32],
        _y: &[f32],
        n: usize,
        dy: &mut [f32],
        mut dx: Option<&mut [f32]>,
        grads: &mut Grads<'_>,
        ws: &mut Workspace,
    ) {
        let od = self.out_dims();
        let id = self.in_dims();
        if let Some(dx) = dx.as_deref_mut() {
            dx.fill(0.0);
        }
        let mut col = 0;
        for (i, c) in self.children.iter().enumerate() {
            let cd = c.out_dims();
            let out = ws.take_kept(self.out_slot(i));
            let mut dout = ws.take(self.dout_slot(i), n * cd);
            for s in 0..n {
                dout[s * cd..(s + 1) * cd].copy_from_slice(&dy[s * od + col..s * od + col + cd]);
            }
            match dx.as_deref_mut() {
                Some(dx) => {
                    let mut dxc = ws.take(self.dx_slot(), n * id);
                    c.backward(params, x, &out, n, &mut dout, Some(&mut dxc), grads, ws);
                    dx.iter_mut().zip(&dxc).for_each(|(a, b)| *a += b);
                    ws.put(self.dx_slot(), dxc);
                }
                None => c.backward(params, x, &out, n, &mut dout, None, grads, ws),
            }
            ws.put(self.out_slot(i), out);
            ws.put(self.dout_slot(i), dout);
            col += cd;
        }
    }

    fn tensors(&self, prefix: &str, out: &mut Vec<TensorInfo>) {
        for (i, c) in self.children.iter().enumerate() {
            c.tensors(&format!("{prefix}{i}."), out);
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
        let arch = Arch::parse("cat(identity, freq(2), tri(2), mlp(4x1, softplus, out=3)) | mlp(6x2, leaky_relu(0.2), exp)").unwrap();
        let net = Network::build(&arch, 2, 3).unwrap();
        let x = [0.13, 0.37, 0.58, 0.81, 0.29, 0.66];
        gradcheck::check(&net.root, net.param_count, net.slot_count, &x, 3, 5e-3);
    }
}
