#!/usr/bin/env python3
"""Re-check the corpus: sha256 of every tab against manifest.json, and that each tab
compiles as GLSL ES 3.00 the way ShaderToy wraps an Image tab (glslangValidator).
Usage: python3 bench/shadertoy-corpus/check.py  (needs glslangValidator on PATH)"""
import hashlib, json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
HEAD = """#version 300 es
precision highp float; precision highp int;
uniform vec3 iResolution; uniform float iTime; uniform float iTimeDelta; uniform float iFrameRate; uniform int iFrame; uniform float iChannelTime[4]; uniform vec3 iChannelResolution[4]; uniform vec4 iMouse; uniform vec4 iDate; uniform float iSampleRate;
uniform sampler2D iChannel0; uniform sampler2D iChannel1; uniform sampler2D iChannel2; uniform sampler2D iChannel3;
#define HW_PERFORMANCE 1
out vec4 shadertoy_out;
"""
TAIL = "\nvoid main() { mainImage(shadertoy_out, gl_FragCoord.xy); }\n"

bad = 0
with tempfile.TemporaryDirectory() as tmp:
    for m in json.load(open(os.path.join(HERE, "manifest.json"), encoding="utf-8")):
        data = open(os.path.join(HERE, m["file"]), "rb").read()
        sha_ok = hashlib.sha256(data).hexdigest() == m["sha256"]
        src = os.path.join(tmp, "tab.frag")
        with open(src, "wb") as f:
            f.write(HEAD.encode() + data + TAIL.encode())
        r = subprocess.run(["glslangValidator", "-S", "frag", src], capture_output=True, text=True)
        ok = (r.returncode == 0) == m["glslang_valid"]
        if not (sha_ok and ok):
            bad += 1
            print(f"FAIL {m['file']}: sha256 {'ok' if sha_ok else 'MISMATCH'}, glslang rc={r.returncode}\n{r.stdout[-600:]}")
    print("all tabs match the manifest" if not bad else f"{bad} tab(s) do not match")
sys.exit(1 if bad else 0)
