// Test shader whose output is exact in float32 on any GPU and easy to evaluate elsewhere:
// r = pixel column / 128, g = pixel row / 128 (row 0 at the top), b = the parameter.
// tools/seed_dataset.py's `analytic` image is the same function, so capture and the script
// must write byte-identical row files for the same settings.
struct Params {
    resolution: vec2<f32>,
    parameter: f32,
    _pad: f32,
}

@group(0) @binding(0) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    let cell = (pos.xy - vec2<f32>(0.5)) * 0.0078125;
    return vec4<f32>(cell, params.parameter, 1.0);
}
