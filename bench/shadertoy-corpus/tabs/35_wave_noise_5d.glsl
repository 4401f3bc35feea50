
/*
5D wave noise
afl_ext 2018-2023
public domain
*/

float gw5d_hash(float p){
    return fract(4768.1232345456 * sin(p));
}

vec2 gw5d_wavedx(vec4 position, vec4 direction, float speed, float frequency, float timeshift) {
    float x = dot(direction, position) * frequency + timeshift * speed;
    float wave = exp(sin(x) - 1.0);
    float dx = wave * cos(x);
    return vec2(wave, -dx);
}

float gw5d_seedWaves = 0.0;
vec4 gw5d_randWaves(){
    float x = gw5d_hash(gw5d_seedWaves);
    gw5d_seedWaves += 1.0;
    float y = gw5d_hash(gw5d_seedWaves);
    gw5d_seedWaves += 1.0;
    float z = gw5d_hash(gw5d_seedWaves);
    gw5d_seedWaves += 1.0;
    float w = gw5d_hash(gw5d_seedWaves);
    gw5d_seedWaves += 1.0;
    return vec4(x,y,z,w) * 2.0 - 1.0;
}

float getwaves5d(vec4 position, float dragmult, float timeshift){
    float iter = 0.0;
    float phase = 6.0;
    float speed = 2.0;
    float weight = 1.0;
    float w = 0.0;
    float ws = 0.0;
    for(int i=0;i<20;i++){
        vec4 p = gw5d_randWaves() * 1.21;
        vec2 res = gw5d_wavedx(position, p, speed, phase, 0.0 + timeshift);
        position -= normalize(position - p) * res.y * weight * dragmult * 0.01;
        w += res.x * weight;
        iter += 12.0;
        ws += weight;
        weight = mix(weight, 0.0, 0.2);
        phase *= 1.2;
        speed *= 1.02;
    }
    return w / ws;
}

// helper function

vec3 polarToXyz(vec2 xy){
    xy *= vec2(2.0 *3.1415,  3.1415);
    float z = cos(xy.y);
    float x = cos(xy.x)*sin(xy.y);
    float y= sin(xy.x)*sin(xy.y);
    return normalize(vec3(x,y,z));
}

void mainImage( out vec4 fragColor, in vec2 fragCoord )
{
    vec2 uv = fragCoord/iResolution.xy;
	vec2 mouse = iMouse.xy / iResolution.xy;
    vec3 col = vec3(1.0) * getwaves5d(vec4(polarToXyz(uv), (mouse.x * 2.0 - 1.0) * 10.0), 10.0 + mouse.y * 10.0, iTime);

    // Output to screen
    fragColor = vec4(col,1.0);
}