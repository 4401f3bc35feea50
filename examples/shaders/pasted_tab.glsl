#version 300 es
// pasted_tab.glsl — nshade example: a tab as it is often pasted from elsewhere, with what
// a standalone WebGL page adds around mainImage: #version, precision statements, its own
// uniform declarations, an out variable and a main() that calls mainImage. It also uses the
// legacy iGlobalTime. nshade blanks those lines out (in place, so error lines stay right)
// and drives mainImage itself; see docs/capture.md.
//
//   nshade capture examples/shaders/pasted_tab.glsl --param-range 0..3 --out data/pasted

precision highp float;
precision highp int;

uniform vec3 iResolution;
uniform float iGlobalTime;
uniform vec4 iMouse;

layout(location = 0) out vec4 outColor;

const vec2 centres[3] = vec2[3](vec2(-0.6, 0.1), vec2(0.5, -0.3), vec2(0.1, 0.5));

void mainImage(out vec4 fragColor, in vec2 fragCoord)
{
    vec2 uv = (2.0 * fragCoord - iResolution.xy) / iResolution.y;
    float t = iGlobalTime;
    float field = 0.0;
    for (int i = 0; i < 3; i++) {
        vec2 c = centres[i] + 0.25 * vec2(cos(t + float(i)), sin(1.3 * t + 2.0 * float(i)));
        field += 0.08 / dot(uv - c, uv - c);
    }
    vec3 col = 0.5 + 0.5 * cos(vec3(0.0, 2.0, 4.0) + field + 0.3 * t);
    col *= smoothstep(0.9, 1.1, field);
    // iMouse is zero (no clicks): this branch is not taken.
    if (iMouse.z > 0.0) col = vec3(1.0, 0.0, 1.0);
    // ShaderToy ignores alpha; this tab leaves it at 0.
    fragColor = vec4(col, 0.0);
}

void main()
{
    mainImage(outColor, gl_FragCoord.xy);
}
