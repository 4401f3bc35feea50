// quality_tab.glsl — nshade example in ShaderToy form: picks its antialiasing with
// HW_PERFORMANCE (ShaderToy defines it as 1 on desktop, 0 on mobile; nshade defines 1) and
// reads the other ShaderToy inputs nshade provides: iTimeDelta (1/60), iFrame
// (round(iTime*60)), iFrameRate (60), iDate ((2000, 0, 1, 43200 + iTime)), iSampleRate
// (44100), iChannelTime and iChannelResolution (0: no channels).
//
//   nshade capture examples/shaders/quality_tab.glsl --param-range 0..2 --out data/quality

#if HW_PERFORMANCE == 0
#define AA 1
#else
#define AA 2
#endif

float rings(vec2 uv, float t)
{
    float r = length(uv);
    return 0.5 + 0.5 * sin(18.0 * r - 4.0 * t + 2.0 * atan(uv.y, uv.x));
}

void mainImage(out vec4 fragColor, in vec2 fragCoord)
{
    // Frame-based time: iFrame / iFrameRate steps with iTimeDelta.
    float t = float(iFrame) * iTimeDelta + 0.0 * (iFrameRate - 60.0);
    // Seconds of the day: constant date, so only iTime moves it.
    float day = fract((iDate.w - 43200.0) / 4.0);
    vec3 acc = vec3(0.0);
    for (int j = 0; j < AA; j++) {
        for (int i = 0; i < AA; i++) {
            vec2 o = (vec2(float(i), float(j)) + 0.5) / float(AA) - 0.5;
            vec2 uv = (2.0 * (fragCoord + o) - iResolution.xy) / iResolution.y;
            float v = rings(uv, t);
            acc += mix(vec3(0.1, 0.2, 0.5), vec3(1.0, 0.8, 0.3), v) + 0.1 * day;
        }
    }
    vec3 col = acc / float(AA * AA);
    col += 0.0 * (iSampleRate + iChannelTime[0] + iChannelResolution[1].x);
    fragColor = vec4(col, 1.0);
}
