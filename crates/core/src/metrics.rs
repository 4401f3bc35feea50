//! Quality measures. PSNR uses peak 1.0 over all RGB values: 10·log10(1 / MSE).

/// Mean squared error over all values.
pub fn mse(pred: &[f32], target: &[f32]) -> f64 {
    assert_eq!(pred.len(), target.len());
    pred.iter()
        .zip(target)
        .map(|(p, t)| ((p - t) as f64).powi(2))
        .sum::<f64>()
        / pred.len().max(1) as f64
}

/// Peak signal-to-noise ratio in dB with peak 1.0 (capped at 100 dB for exact fits).
pub fn psnr(pred: &[f32], target: &[f32]) -> f64 {
    let m = mse(pred, target);
    if m <= 1e-10 { 100.0 } else { -10.0 * m.log10() }
}

/// Gain applied to |fit − reference| in error images, so small errors are visible.
pub const ERROR_GAIN: f32 = 8.0;

/// |pred − target| · [`ERROR_GAIN`] per value (an "amplified error" image).
pub fn error_image(pred: &[f32], target: &[f32]) -> Vec<f32> {
    pred.iter()
        .zip(target)
        .map(|(p, t)| (p - t).abs() * ERROR_GAIN)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psnr_of_known_error() {
        // every value off by 0.1 → MSE 0.01 → 20 dB
        let p = vec![0.5f32; 30];
        let t = vec![0.6f32; 30];
        assert!((psnr(&p, &t) - 20.0).abs() < 1e-4);
        assert_eq!(psnr(&t, &t), 100.0);
    }
}
