// Test shader: NaN for parameters above 0.5 (sqrt of a negative number).
struct Params {
    resolution: vec2<f32>,
    parameter: f32,
    _pad: f32,
}

@group(0) @binding(0) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    var r = 0.5;
    if (params.parameter > 0.5) {
        r = sqrt(-1.0 - params.parameter);
    }
    return vec4<f32>(r, 0.5, 0.5, 1.0);
}
