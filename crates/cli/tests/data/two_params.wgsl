// Test shader of two parameters (nshade capture --param light=0..3 --param k=-1..1): a
// smooth colour that the test computes on the CPU from each row's (x, y, light, k).
struct Params {
    resolution: vec2<f32>,
    parameter: f32,
    _pad: f32,
    values: array<vec4<f32>, 4>,
}

@group(0) @binding(0) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    // The dataset's x, y: pixel centres in [-1, 1], y down.
    let xy = pos.xy / params.resolution * 2.0 - 1.0;
    let light = params.values[0].x;
    let k = params.values[0].y;
    let r = 0.5 + 0.3 * (xy.x * cos(light) + xy.y * sin(light));
    let g = 0.5 + 0.25 * sin(2.0 * xy.x + k);
    let b = 0.5 + 0.25 * k + 0.2 * xy.y * cos(light);
    // params.parameter is the first parameter too.
    let same = select(1.0, 0.0, params.parameter != light);
    return vec4<f32>(r, g, b * same, 1.0);
}
