// Test tab (ShaderToy form) with NaN and +Inf in part of the frame, as real tabs produce
// them: r is sqrt of a negative number in the 8 leftmost columns, g is 1/0 in the 4 top
// rows once iTime > 0; everything else is 0.5. Display semantics show NaN as 0 and +Inf as
// 1 and count them: per frame 8 x height NaN values, and 4 x width +Inf values in frames
// with a positive parameter.
void mainImage(out vec4 fragColor, in vec2 fragCoord)
{
    vec3 col = vec3(0.5);
    if (fragCoord.x < 8.0) col.r = sqrt(-iResolution.z);
    if (iTime > 0.0 && fragCoord.y > iResolution.y - 4.0) col.g = 1.0 / (iResolution.z - 1.0);
    fragColor = vec4(col, 1.0);
}
