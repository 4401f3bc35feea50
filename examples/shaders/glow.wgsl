// glow.wgsl — nshade example: an HDR shader. Two moving lights with an inverse-square
// falloff over a dim gradient; the cores reach about 6 (linear, unclamped), so the
// captured colours near them are well above 1.
//
//   nshade capture examples/shaders/glow.wgsl --out data/glow

struct Params {
    resolution: vec2<f32>,
    parameter: f32,
    _pad: f32,
}

@group(0) @binding(0) var<uniform> params: Params;

fn light(p: vec2<f32>, centre: vec2<f32>, strength: f32) -> f32 {
    let d = p - centre;
    return strength / (dot(d, d) + 0.02);
}

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    let aspect = params.resolution.x / params.resolution.y;
    let p = (pos.xy / params.resolution * 2.0 - 1.0) * vec2<f32>(aspect, 1.0);
    let t = params.parameter;
    let a = vec2<f32>(0.9 * sin(1.7 * t), 0.35 * cos(1.1 * t));
    let b = vec2<f32>(-0.7 * cos(1.3 * t), 0.5 * sin(2.1 * t));
    let warm = light(p, a, 0.12) * vec3<f32>(1.0, 0.75, 0.45);
    let cool = light(p, b, 0.08) * vec3<f32>(0.4, 0.6, 1.0);
    let base = vec3<f32>(0.02, 0.03, 0.06) * (1.5 - 0.5 * p.y);
    return vec4<f32>(base + warm + cool, 1.0);
}
