//! Training losses. Each is a per-element function ℓ(p, t) of prediction p and target t,
//! averaged over the batch and the output channels. ε = 0.01.
//!
//! | loss | ℓ(p, t) | ∂ℓ/∂p as used in training |
//! |---|---|---|
//! | `l1` | \|p − t\| | sign(p − t) |
//! | `l2` | (p − t)² | 2(p − t) |
//! | `relative_l1` | \|p − t\| / (\|sg(p)\| + ε) | sign(p − t) / (\|p\| + ε) |
//! | `relative_l2` | (p − t)² / (sg(p)² + ε) | 2(p − t) / (p² + ε) |
//! | `mape` | \|p − t\| / (\|t\| + ε) | sign(p − t) / (\|t\| + ε) |
//! | `smape` | 2\|p − t\| / (\|sg(p)\| + \|t\| + ε) | 2 sign(p − t) / (\|p\| + \|t\| + ε) |
//!
//! `sg(·)` is a stop-gradient: as in tiny-cuda-nn and RTXNS, the normalising denominator
//! is treated as a constant when differentiating, which keeps the relative losses stable.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

const EPS: f32 = 0.01;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    L1,
    L2,
    RelativeL1,
    RelativeL2,
    Mape,
    Smape,
}

impl Loss {
    pub const ALL: [Loss; 6] = [
        Loss::L1,
        Loss::L2,
        Loss::RelativeL1,
        Loss::RelativeL2,
        Loss::Mape,
        Loss::Smape,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            Loss::L1 => "l1",
            Loss::L2 => "l2",
            Loss::RelativeL1 => "relative_l1",
            Loss::RelativeL2 => "relative_l2",
            Loss::Mape => "mape",
            Loss::Smape => "smape",
        }
    }

    /// ℓ(p, t) for one element.
    #[inline(always)]
    pub fn value(&self, p: f32, t: f32) -> f32 {
        let d = p - t;
        match self {
            Loss::L1 => d.abs(),
            Loss::L2 => d * d,
            Loss::RelativeL1 => d.abs() / (p.abs() + EPS),
            Loss::RelativeL2 => d * d / (p * p + EPS),
            Loss::Mape => d.abs() / (t.abs() + EPS),
            Loss::Smape => 2.0 * d.abs() / (p.abs() + t.abs() + EPS),
        }
    }

    /// ∂ℓ/∂p for one element (denominators held constant, see the module docs).
    #[inline(always)]
    pub fn gradient(&self, p: f32, t: f32) -> f32 {
        let d = p - t;
        let sign = if d > 0.0 {
            1.0
        } else if d < 0.0 {
            -1.0
        } else {
            0.0
        };
        match self {
            Loss::L1 => sign,
            Loss::L2 => 2.0 * d,
            Loss::RelativeL1 => sign / (p.abs() + EPS),
            Loss::RelativeL2 => 2.0 * d / (p * p + EPS),
            Loss::Mape => sign / (t.abs() + EPS),
            Loss::Smape => 2.0 * sign / (p.abs() + t.abs() + EPS),
        }
    }

    /// Over a chunk of predictions `y` and targets `t`: `dy` = ∂ℓ/∂p · `scale` for every
    /// element, and Σ ℓ in f64 — element i added to partial sum i mod 8, the eight sums
    /// then added by a fixed tree, so the result depends only on the elements and their
    /// order. Vectorised (the loss is matched once, outside the loop).
    pub fn chunk(&self, y: &[f32], t: &[f32], scale: f32, dy: &mut [f32]) -> f64 {
        assert!(y.len() == t.len() && y.len() == dy.len());
        crate::dense::vectorised(
            #[inline(always)]
            || match *self {
                Loss::L1 => chunk_of(Loss::L1, y, t, scale, dy),
                Loss::L2 => chunk_of(Loss::L2, y, t, scale, dy),
                Loss::RelativeL1 => chunk_of(Loss::RelativeL1, y, t, scale, dy),
                Loss::RelativeL2 => chunk_of(Loss::RelativeL2, y, t, scale, dy),
                Loss::Mape => chunk_of(Loss::Mape, y, t, scale, dy),
                Loss::Smape => chunk_of(Loss::Smape, y, t, scale, dy),
            },
        )
    }

    /// The loss value with the denominator frozen at prediction `p0` (what the gradient
    /// differentiates); used by the finite-difference tests.
    pub fn value_frozen(&self, p: f32, t: f32, p0: f32) -> f32 {
        let d = p - t;
        match self {
            Loss::RelativeL1 => d.abs() / (p0.abs() + EPS),
            Loss::RelativeL2 => d * d / (p0 * p0 + EPS),
            Loss::Smape => 2.0 * d.abs() / (p0.abs() + t.abs() + EPS),
            _ => self.value(p, t),
        }
    }
}

/// [`Loss::chunk`] for a loss known at compile time once inlined.
#[inline(always)]
fn chunk_of(loss: Loss, y: &[f32], t: &[f32], scale: f32, dy: &mut [f32]) -> f64 {
    const BLOCK: usize = 64;
    let mut acc = [0.0f64; 8];
    for ((y, t), dy) in y
        .chunks(BLOCK)
        .zip(t.chunks(BLOCK))
        .zip(dy.chunks_mut(BLOCK))
    {
        let mut v = [0.0f32; BLOCK];
        for (((v, &p), &t), d) in v.iter_mut().zip(y).zip(t).zip(dy.iter_mut()) {
            *v = loss.value(p, t);
            *d = loss.gradient(p, t) * scale;
        }
        // element i to sum i mod 8 (blocks start at multiples of 8): eight lanes at once
        let mut eights = v[..y.len()].chunks_exact(8);
        for c in &mut eights {
            for (a, &v) in acc.iter_mut().zip(c) {
                *a += v as f64;
            }
        }
        for (a, &v) in acc.iter_mut().zip(eights.remainder()) {
            *a += v as f64;
        }
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Loss {
    type Err = String;
    fn from_str(s: &str) -> Result<Loss, String> {
        Loss::ALL
            .into_iter()
            .find(|l| l.name() == s || l.name().replace('_', "") == s)
            .ok_or_else(|| {
                format!("unknown loss '{s}' (known: l1, l2, relative_l1, relative_l2, mape, smape)")
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradients_match_finite_differences() {
        for loss in Loss::ALL {
            for &(p, t) in &[(0.3f32, 0.7f32), (0.9, 0.2), (-0.4, 0.1), (1.5, -0.5)] {
                let h = 1e-3f32;
                let fd = (loss.value_frozen(p + h, t, p) as f64
                    - loss.value_frozen(p - h, t, p) as f64)
                    / (2.0 * h as f64);
                let an = loss.gradient(p, t) as f64;
                assert!(
                    (fd - an).abs() < 1e-2 * (1.0 + an.abs()),
                    "{loss}: p={p} t={t} fd={fd} an={an}"
                );
            }
        }
    }

    #[test]
    fn chunk_gives_the_elements_gradients_and_their_sum() {
        let mut rng = crate::rng::Pcg32::new(9);
        for n in [0, 1, 7, 64, 200, 768] {
            let y: Vec<f32> = (0..n).map(|_| rng.next_f32() * 1.4 - 0.2).collect();
            let t: Vec<f32> = (0..n).map(|_| rng.next_f32()).collect();
            for loss in Loss::ALL {
                let mut dy = vec![f32::NAN; n];
                let sum = loss.chunk(&y, &t, 0.25, &mut dy);
                let want: f64 = y
                    .iter()
                    .zip(&t)
                    .map(|(&p, &t)| loss.value(p, t) as f64)
                    .sum();
                assert!(
                    (sum - want).abs() <= 1e-9 * (1.0 + want.abs()),
                    "{loss} n={n}"
                );
                for i in 0..n {
                    let g = loss.gradient(y[i], t[i]) * 0.25;
                    assert_eq!(dy[i].to_bits(), g.to_bits(), "{loss} n={n} element {i}");
                }
            }
        }
    }

    #[test]
    fn names_parse() {
        for l in Loss::ALL {
            assert_eq!(l.name().parse::<Loss>().unwrap(), l);
        }
        assert!("l3".parse::<Loss>().is_err());
    }
}
