// ShaderToy tab whose colour is its inputs: r = iTime / 2, g = iMouse.x / 64,
// b = iMouse.y / 64 (nshade capture --param iTime=0..2 --param iMouse.x=0..64 ...).
void mainImage(out vec4 fragColor, in vec2 fragCoord) {
    fragColor = vec4(iTime * 0.5, iMouse.x / 64.0, iMouse.y / 64.0, 1.0);
}
