//! Seeded random numbers. Everything random in nshade comes from here so that the same
//! seed gives the same bytes, and so that the GPU kernels (which use the same hash) draw
//! the same training samples as the CPU.

/// The PCG-RXS-M-XS 32-bit output hash ("PCG hash", Jarzynski & Olano, JCGT 2020).
#[inline(always)]
pub fn pcg_hash(input: u32) -> u32 {
    let state = input.wrapping_mul(747796405).wrapping_add(2891336453);
    let word = ((state >> ((state >> 28).wrapping_add(4))) ^ state).wrapping_mul(277803737);
    (word >> 22) ^ word
}

/// A uniform float in [0, 1) from the top 24 bits of `h`.
#[inline(always)]
pub fn unit_f32(h: u32) -> f32 {
    (h >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// The per-sample random stream of a training step: sample `index` of step `step` under
/// `seed` starts from `pcg_hash(index ^ pcg_hash(step ^ pcg_hash(seed)))`, and each
/// further draw hashes the previous value.
#[inline(always)]
pub fn sample_hash(seed: u32, step: u32, index: u32) -> u32 {
    pcg_hash(index ^ step_key(seed, step))
}

/// The part of [`sample_hash`] shared by every sample of a step: sample `index` starts
/// from `pcg_hash(index ^ step_key(seed, step))`.
#[inline(always)]
pub fn step_key(seed: u32, step: u32) -> u32 {
    pcg_hash(step ^ pcg_hash(seed))
}

/// A small sequential generator (PCG32, O'Neill 2014) for initialisation and tests.
#[derive(Clone, Debug)]
pub struct Pcg32 {
    state: u64,
    inc: u64,
}

impl Pcg32 {
    pub fn new(seed: u64) -> Pcg32 {
        let mut r = Pcg32 {
            state: 0,
            inc: (0xda3e39cb94b95bdb_u64 << 1) | 1,
        };
        r.next_u32();
        r.state = r.state.wrapping_add(seed);
        r.next_u32();
        r
    }

    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(6364136223846793005).wrapping_add(self.inc);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        let rot = (old >> 59) as u32;
        xorshifted.rotate_right(rot)
    }

    /// Uniform in [0, 1).
    pub fn next_f32(&mut self) -> f32 {
        unit_f32(self.next_u32())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values() {
        // pcg_hash(0) as computed by the same formula in Python:
        // s = (0*747796405 + 2891336453) % 2**32; w = ((s >> ((s >> 28) + 4)) ^ s) * 277803737 % 2**32; (w >> 22) ^ w
        assert_eq!(pcg_hash(0), 129708002);
        assert_ne!(pcg_hash(1), pcg_hash(0));
        let mut a = Pcg32::new(42);
        let mut b = Pcg32::new(42);
        for _ in 0..10 {
            assert_eq!(a.next_u32(), b.next_u32());
        }
        let mean: f32 = (0..10000).map(|_| a.next_f32()).sum::<f32>() / 10000.0;
        assert!((mean - 0.5).abs() < 0.02);
    }
}
