//! Adam on fp32 master weights, and learning-rate schedules.
//!
//! Per parameter at step t (1-based):
//! m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g²;
//! p ← p − lr(t) · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε).

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Adam {
    pub beta1: f32,
    pub beta2: f32,
    pub epsilon: f32,
}

impl Default for Adam {
    fn default() -> Adam {
        Adam {
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
        }
    }
}

/// Adam's moment estimates for every parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamState {
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// Steps taken so far.
    pub t: u32,
}

impl AdamState {
    pub fn new(n: usize) -> AdamState {
        AdamState {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }
}

impl Adam {
    /// Bias-corrected step sizes for step `t` (1-based): (lr / (1 − β1^t), 1 / (1 − β2^t)).
    pub fn corrections(&self, lr: f32, t: u32) -> (f32, f32) {
        let c1 = 1.0 - (self.beta1 as f64).powi(t as i32);
        let c2 = 1.0 - (self.beta2 as f64).powi(t as i32);
        ((lr as f64 / c1) as f32, (1.0 / c2) as f32)
    }

    /// One update of `params` (a contiguous slice) with gradients `grads`.
    #[inline]
    pub fn update(
        &self,
        step_lr: f32,
        inv_c2: f32,
        params: &mut [f32],
        grads: &[f32],
        m: &mut [f32],
        v: &mut [f32],
    ) {
        let (b1, b2, eps) = (self.beta1, self.beta2, self.epsilon);
        for i in 0..params.len() {
            let g = grads[i];
            let mi = b1 * m[i] + (1.0 - b1) * g;
            let vi = b2 * v[i] + (1.0 - b2) * g * g;
            m[i] = mi;
            v[i] = vi;
            params[i] -= step_lr * mi / ((vi * inv_c2).sqrt() + eps);
        }
    }
}

/// lr(t) = base · warm-up(t) · decay(t), t counted from 0:
/// warm-up(t) = min(1, (t + 1) / warmup) (1 when warmup = 0);
/// decay(t) = factor^⌊(t − start) / interval⌋ for t ≥ start, else 1.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LrSchedule {
    pub base: f32,
    #[serde(default)]
    pub warmup: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decay: Option<Decay>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Decay {
    pub start: u32,
    pub interval: u32,
    pub factor: f32,
}

impl LrSchedule {
    pub fn constant(base: f32) -> LrSchedule {
        LrSchedule {
            base,
            warmup: 0,
            decay: None,
        }
    }

    pub fn at(&self, t: u32) -> f32 {
        let mut lr = self.base;
        if self.warmup > 0 {
            lr *= ((t + 1) as f32 / self.warmup as f32).min(1.0);
        }
        if let Some(d) = self.decay
            && t >= d.start
        {
            lr *= d.factor.powi(((t - d.start) / d.interval.max(1)) as i32);
        }
        lr
    }

    /// Parses `--lr-decay INTERVAL:FACTOR[@START]`, e.g. `3000:0.5`.
    pub fn parse_decay(s: &str) -> Result<Decay, String> {
        let bad =
            || format!("invalid --lr-decay '{s}': expected INTERVAL:FACTOR[@START], e.g. 3000:0.5");
        let (rest, start) = match s.split_once('@') {
            Some((r, st)) => (
                r,
                st.trim().parse::<u32>().map_err(|_| {
                    format!(
                        "invalid --lr-decay '{s}': START '{st}' must be a whole number of steps"
                    )
                })?,
            ),
            None => (s, 0),
        };
        let (i, f) = rest.split_once(':').ok_or_else(bad)?;
        let interval: u32 = i.trim().parse().map_err(|_| {
            format!("invalid --lr-decay '{s}': INTERVAL '{i}' must be a whole number of steps")
        })?;
        let factor: f32 = f
            .trim()
            .parse()
            .map_err(|_| format!("invalid --lr-decay '{s}': FACTOR '{f}' is not a number"))?;
        if interval == 0 {
            return Err(format!(
                "invalid --lr-decay '{s}': INTERVAL must be at least 1 step"
            ));
        }
        if !(factor > 0.0 && factor.is_finite()) {
            return Err(format!(
                "invalid --lr-decay '{s}': FACTOR must be a positive number (0.5 halves the rate every INTERVAL steps), got {f}"
            ));
        }
        Ok(Decay {
            start,
            interval,
            factor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule() {
        let s = LrSchedule {
            base: 0.01,
            warmup: 10,
            decay: Some(LrSchedule::parse_decay("100:0.5").unwrap()),
        };
        assert!((s.at(0) - 0.001).abs() < 1e-9);
        assert_eq!(s.at(9), 0.01);
        assert_eq!(s.at(99), 0.01);
        assert_eq!(s.at(100), 0.005);
        assert_eq!(s.at(250), 0.0025);
        assert!(
            LrSchedule::parse_decay("0:0.5")
                .unwrap_err()
                .contains("at least 1 step")
        );
        assert!(
            LrSchedule::parse_decay("10:0")
                .unwrap_err()
                .contains("FACTOR must be a positive")
        );
        assert!(
            LrSchedule::parse_decay("10:x")
                .unwrap_err()
                .contains("'x' is not a number")
        );
        assert!(
            LrSchedule::parse_decay("10")
                .unwrap_err()
                .contains("expected INTERVAL:FACTOR")
        );
        assert_eq!(LrSchedule::parse_decay("10:0.5@7").unwrap().start, 7);
    }

    #[test]
    fn adam_first_step_moves_by_lr() {
        // With bias correction the first step is lr · g / (|g| + ε) ≈ lr · sign(g).
        let a = Adam::default();
        let mut p = vec![1.0, 1.0];
        let (mut m, mut v) = (vec![0.0; 2], vec![0.0; 2]);
        let (s, c2) = a.corrections(0.1, 1);
        a.update(s, c2, &mut p, &[0.5, -2.0], &mut m, &mut v);
        assert!(
            (p[0] - 0.9).abs() < 1e-6 && (p[1] - 1.1).abs() < 1e-6,
            "{p:?}"
        );
    }
}
