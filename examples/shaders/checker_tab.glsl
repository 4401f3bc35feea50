// checker_tab.glsl — nshade example in ShaderToy form: hard edges (a scrolling checkerboard,
// a disc and a bar that move with iTime). Paste into ShaderToy to compare; in nshade,
// iTime is the capture parameter and iResolution the capture size.
//
//   nshade capture examples/shaders/checker_tab.glsl --param-range 0..2 --out data/tab

void mainImage(out vec4 fragColor, in vec2 fragCoord)
{
    // ShaderToy convention: fragCoord in pixels, origin bottom-left, y up.
    vec2 uv = (2.0 * fragCoord - iResolution.xy) / iResolution.y;
    float t = iTime;

    vec2 q = uv * 2.5 + vec2(0.6 * t, 0.3 * t);
    float checker = mod(floor(q.x) + floor(q.y), 2.0);
    vec3 col = mix(vec3(0.08, 0.10, 0.14), vec3(0.85, 0.80, 0.70), checker);

    vec2 centre = vec2(0.8 * sin(1.5 * t), 0.3 * cos(2.0 * t));
    if (length(uv - centre) < 0.35) {
        col = vec3(0.90, 0.25, 0.10);
    }
    if (abs(uv.y + 0.55 - 0.25 * t) < 0.08) {
        col = vec3(0.10, 0.55, 0.90);
    }
    fragColor = vec4(col, 1.0);
}
