//! The architectures `fit` trains side by side when none is given: one set for images, one
//! for arrays and texture sets. The CLI and the Python module (`nshade.architectures`)
//! both read them here.

/// Images (`nshade fit IMAGE`): the seed's four, in its order, then stronger ones.
pub const IMAGE: &[&str] = &[
    "basic=mlp(32x3, relu)",
    "sigmoid=mlp(32x3, leaky_relu, sigmoid)",
    "freq=freq(3) | mlp(32x3, leaky_relu, sigmoid)",
    "freq_deep=freq(3) | mlp(32x4, leaky_relu, sigmoid)",
    "wide=cat(identity, freq(7)) | mlp(64x3, relu, sigmoid)",
    // A trainable hash grid: +12 dB over `wide` on the built-in texture at the default
    // budget (docs/PERFORMANCE.md, "Encodings").
    "grid=hashgrid(levels=12, features=2, log2_size=16, base=8, scale=1.5) | mlp(32x2, relu)",
];

/// Arrays and texture sets (`nshade fit ARRAYS`): a plain MLP, a frequency MLP and, for at
/// most three inputs ([`arrays`]), a hash grid (its cost grows with 2^inputs).
pub const ARRAYS: &[&str] = &[
    "mlp=mlp(64x3, relu)",
    "freq=cat(identity, freq(6)) | mlp(64x3, relu)",
    "grid=hashgrid(levels=12, features=2, log2_size=17, base=8, scale=1.5) | mlp(64x2, relu)",
];

/// The arrays set for data of `inputs` columns: the hash grid only up to three.
pub fn arrays(inputs: usize) -> Vec<&'static str> {
    ARRAYS
        .iter()
        .copied()
        .filter(|s| inputs <= 3 || !s.contains("hashgrid"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_default_parses_with_a_name() {
        for s in super::IMAGE.iter().chain(super::ARRAYS) {
            let n = crate::arch::NamedArch::parse(s).unwrap();
            assert!(s.starts_with(&format!("{}=", n.name)), "{s}");
        }
        assert_eq!(super::arrays(3).len(), 3);
        assert_eq!(super::arrays(4).len(), 2);
    }
}
