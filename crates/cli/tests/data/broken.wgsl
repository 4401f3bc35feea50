// Test shader that does not compile: a missing semicolon on line 6.
@group(0) @binding(0) var<uniform> params: vec4<f32>;

@fragment
fn fs_main(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    let c = params.x
    return vec4<f32>(c, c, c, 1.0);
}
