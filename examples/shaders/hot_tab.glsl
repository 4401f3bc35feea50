// hot_tab.glsl — nshade example in ShaderToy form: what a display does to a colour. The core
// of the glow goes far above 1 (ShaderToy shows 1), the left edge computes pow() of a
// negative base (NaN: ShaderToy's canvas shows 0), and alpha is 0.5 (ignored). Captured
// with display semantics (the default for GLSL), it is accepted and the NaN values are
// counted; with --strict it is refused.
//
//   nshade capture examples/shaders/hot_tab.glsl --param-range -1..1 --out data/hot

void mainImage(out vec4 fragColor, in vec2 fragCoord)
{
    vec2 uv = (2.0 * fragCoord - iResolution.xy) / iResolution.y;
    vec2 c = 0.5 * vec2(sin(iTime), cos(1.7 * iTime));
    float glow = 0.02 / max(dot(uv - c, uv - c), 1e-6);
    vec3 col = vec3(glow, 0.6 * glow, 0.25 * glow) + vec3(0.05, 0.05, 0.1);
    float edge = fragCoord.x / iResolution.x - 0.05;
    col.b += pow(edge, 0.5);
    fragColor = vec4(col, 0.5);
}
