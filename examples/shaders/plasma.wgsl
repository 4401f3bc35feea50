// plasma.wgsl — nshade example: a smooth animated shader (sums of sines of x, y and t).
//
// Capture interface (docs/capture.md): the uniform block below at @group(0) @binding(0)
// and a fragment entry point fs_main receiving the pixel centre in framebuffer pixels
// (origin top-left, y down).
//
//   nshade capture examples/shaders/plasma.wgsl --out data/plasma

struct Params {
    resolution: vec2<f32>, // target width, height in pixels
    parameter: f32,        // the capture parameter (runs over --param-range)
    _pad: f32,
}

@group(0) @binding(0) var<uniform> params: Params;

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    // x, y in [-1, 1] like the dataset rows (x right, y down); t is the parameter.
    let p = pos.xy / params.resolution * 2.0 - 1.0;
    let t = params.parameter;
    let v = sin(3.0 * p.x + 2.0 * t)
        + sin(2.5 * p.y - 1.5 * t)
        + sin(2.0 * (p.x + p.y) + t)
        + sin(3.0 * length(p) - 2.0 * t);
    let c = vec3<f32>(0.5) + 0.5 * vec3<f32>(sin(v), sin(v + 2.094), sin(v + 4.189));
    return vec4<f32>(c, 1.0);
}
