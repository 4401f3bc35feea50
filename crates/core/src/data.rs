//! Training data: where the samples of a step come from. The draw of sample `i` at step
//! `s` depends only on (seed, s, i) — see [`crate::rng::sample_hash`] — so every backend
//! and every thread count sees the same batch.

use crate::rng::{sample_hash, step_key};
use crate::texture::Texture;

/// Rows of `in_dims` inputs followed by `out_dims` targets (a dataset split in memory).
#[derive(Clone, Debug, PartialEq)]
pub struct Rows {
    pub in_dims: usize,
    pub out_dims: usize,
    /// `rows · (in_dims + out_dims)` values.
    pub data: Vec<f32>,
}

impl Rows {
    pub fn len(&self) -> usize {
        self.data.len() / (self.in_dims + self.out_dims)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a model is trained on.
#[derive(Clone, Debug)]
pub enum TrainingData {
    /// Random (u, v) ∈ [0, 1)², target = bilinear texture lookup.
    Texture(Texture),
    /// Random rows of a dataset (drawn with replacement).
    Rows(Rows),
}

impl TrainingData {
    pub fn in_dims(&self) -> usize {
        match self {
            TrainingData::Texture(_) => 2,
            TrainingData::Rows(r) => r.in_dims,
        }
    }
    pub fn out_dims(&self) -> usize {
        match self {
            TrainingData::Texture(_) => 3,
            TrainingData::Rows(r) => r.out_dims,
        }
    }

    /// Fills inputs `x` (n × in_dims) and targets `t` (n × out_dims) for samples
    /// `first..first + n` of step `step`.
    ///
    /// Texture: h = sample_hash(seed, step, i); u = unit(h); v = unit(pcg_hash(h)).
    /// Rows: row = ⌊h · rows / 2³²⌋.
    pub fn fill(&self, seed: u32, step: u32, first: usize, n: usize, x: &mut [f32], t: &mut [f32]) {
        match self {
            TrainingData::Texture(tex) => {
                tex.sample_uniform(step_key(seed, step), first, n, x, t);
            }
            TrainingData::Rows(rows) => {
                let (i, o) = (rows.in_dims, rows.out_dims);
                let w = i + o;
                let count = rows.len() as u64;
                for j in 0..n {
                    let h = sample_hash(seed, step, (first + j) as u32);
                    let r = ((h as u64 * count) >> 32) as usize;
                    let row = &rows.data[r * w..(r + 1) * w];
                    x[j * i..(j + 1) * i].copy_from_slice(&row[..i]);
                    t[j * o..(j + 1) * o].copy_from_slice(&row[i..]);
                }
            }
        }
    }
}
