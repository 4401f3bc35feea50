// Test shader (ShaderToy form): alpha 0.5, which capture must refuse.
void mainImage(out vec4 fragColor, in vec2 fragCoord)
{
    fragColor = vec4(0.2, 0.4, 0.6, 0.5);
}
