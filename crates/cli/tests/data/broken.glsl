// Test shader (ShaderToy form) that does not compile: line 5 uses an undeclared name.
void mainImage(out vec4 fragColor, in vec2 fragCoord)
{
    vec3 col = vec3(0.5);
    fragColor = vec4(col * undeclaredThing, 1.0);
}
