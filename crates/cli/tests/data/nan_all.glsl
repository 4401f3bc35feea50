// Test tab (ShaderToy form) that is NaN everywhere: even display semantics refuse it.
void mainImage(out vec4 fragColor, in vec2 fragCoord)
{
    fragColor = vec4(sqrt(-iResolution.z - iTime * iTime));
}
