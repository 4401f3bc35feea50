//! Helpers shared by the GPU test binaries (each includes this with `mod common;` and
//! uses what it needs).
#![allow(dead_code)]

use nshade_core::texture::Texture;

/// Parses and validates WGSL with naga and translates it to SPIR-V; panics naming `what`.
pub fn validate(src: &str, what: &str) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{what}: {}\n{src}", e.emit_to_string(src)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{what}: {}\n{src}", e.emit_to_string(src)));
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .unwrap_or_else(|e| panic!("{what}: SPIR-V: {e}"));
}

/// A 37×23 RGB test texture: not a power of two, so the bilinear lookup's rounding is
/// exercised.
pub fn small_texture() -> Texture {
    let (w, h) = (37usize, 23usize);
    let mut data = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let (u, v) = (x as f32 / w as f32, y as f32 / h as f32);
            data.push(0.5 + 0.4 * (9.0 * u).sin());
            data.push(if (x / 4 + y / 4) % 2 == 0 { 0.9 } else { 0.1 });
            data.push(u * v);
        }
    }
    Texture::new(w, h, data, "test".into(), String::new())
}
