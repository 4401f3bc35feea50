"""The Python package against the CLI: run by crates/cli/tests/python.rs (cargo test) on the
built wheel in a fresh virtualenv. NSHADE_BIN is the CLI binary."""

import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import nshade

BIN = os.environ["NSHADE_BIN"]


def trivial_psnr(y, peak):
    mse = float(np.mean((y - y.mean()) ** 2))
    return 10 * np.log10(peak * peak / mse)


def sdf(n=5000, seed=1):
    r = np.random.default_rng(seed)
    x = r.uniform(-1, 1, (n, 3)).astype(np.float32)
    return x, (np.linalg.norm(x, axis=1) - 0.5).astype(np.float32)


def test_an_sdf_beats_the_mean_and_evals_as_the_cli(tmp_path):
    x, y = sdf()
    steps = []
    m = nshade.fit(x, y, arch="mlp(32x2, relu)", steps=300, batch=1024, backend="cpu",
                   progress=lambda s, l: steps.append(s))
    assert steps == sorted(steps) and steps[-1] == 300
    assert m.inputs == ["x0", "x1", "x2"] and m.outputs == ["y0"]
    peak = m.metrics["psnr_peak"]
    assert m.metrics["psnr"] > trivial_psnr(y, peak) + 10
    # Saved, evaluated by the CLI: the same float32 bits.
    m.save(str(tmp_path / "m"))
    np.save(tmp_path / "x.npy", x)
    subprocess.run([BIN, "eval", str(tmp_path / "m"), "--input", str(tmp_path / "x.npy"),
                    "--output", str(tmp_path / "p.npy")], check=True, capture_output=True)
    cli = np.load(tmp_path / "p.npy")
    ours = m.eval(x)
    assert ours.shape == (len(x), 1) and ours.dtype == np.float32
    assert np.array_equal(ours.view(np.uint32), cli.view(np.uint32))
    # Round trip through the files.
    back = nshade.load(str(tmp_path / "m"))
    assert np.array_equal(back.eval(x).view(np.uint32), ours.view(np.uint32))
    assert back.arch == m.arch == "mlp(32x2, relu)"


def test_a_tqdm_bar_counts_the_steps(capfd):
    tqdm = pytest.importorskip("tqdm")
    x, y = sdf(500)
    nshade.fit(x, y, arch="mlp(8x1, relu)", steps=130, batch=256, backend="cpu")
    err = capfd.readouterr().err
    assert "130/130" in err, err


def test_four_inputs_to_three_outputs():
    r = np.random.default_rng(2)
    x = r.uniform(0, 1, (4000, 4))
    y = np.stack([np.sin(3 * x[:, 0]) * x[:, 1], np.cos(2 * x[:, 2] + x[:, 3]), x[:, 0] * x[:, 3]], 1)
    m = nshade.fit(x, y, steps=300, batch=1024, backend="cpu")
    assert m.eval(x[:7]).shape == (7, 3)
    assert m.metrics["psnr"] > trivial_psnr(y.astype(np.float32), m.metrics["psnr_peak"]) + 10
    assert "nshade_eval" in m.export("glsl")
    assert "fn nshade_eval" in m.export("wgsl", weights="buffer")
    assert "var<uniform> nshade_params" in m.export("wgsl", weights="uniform")
    assert "vec4 pv0 = nshade_params.w[0];" in m.export("glsl", weights="buffer-vec4")
    with pytest.raises(ValueError, match="4-vectors"):
        m.export("msl", weights="buffer-vec4")
    with pytest.raises(ValueError, match="baked, buffer, buffer-vec4 or uniform"):
        m.export("wgsl", weights="texture")
    # several points at once: 4 inputs, 3 outputs, 2 points
    assert "fn nshade_eval2(p: array<vec4<f32>, 2>) -> array<vec3<f32>, 2>" in m.export(
        "wgsl", weights="buffer-vec4", points=2
    )
    assert "vec3[2] nshade_eval2(vec4 p[2])" in m.export("glsl", points=2)
    with pytest.raises(ValueError, match="is not 1, 2 or 4"):
        m.export("wgsl", points=3)
    with pytest.raises(ValueError, match="points"):
        m.export("hlsl", points=2)


def test_bf16_products_train_as_the_cli_says():
    x, y = sdf(3000, 4)
    arch = "freq(3) | mlp(32x2, relu)"
    a = nshade.fit(x, y, arch=arch, steps=150, batch=1024, backend="cpu")
    b = nshade.fit(x, y, arch=arch, steps=150, batch=1024, backend="cpu", cpu_path="bf16")
    c = nshade.fit(x, y, arch=arch, steps=150, batch=1024, backend="cpu", cpu_path="bf16")
    assert b.eval(x[:50]).tolist() == c.eval(x[:50]).tolist()
    assert b.eval(x[:50]).tolist() != a.eval(x[:50]).tolist()
    assert abs(b.metrics["psnr"] - a.metrics["psnr"]) < 1.0, (a.metrics, b.metrics)
    with pytest.raises(ValueError, match="f32, bf16 or amx"):
        nshade.fit(x, y, arch=arch, steps=1, backend="cpu", cpu_path="fp8")


def test_amx_products_train_where_the_cpu_has_amx():
    x, y = sdf(3000, 4)
    arch = "freq(3) | mlp(32x2, relu)"
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    listed = " amx_bf16" in flags and " amx_tile" in flags
    try:
        b = nshade.fit(x, y, arch=arch, steps=150, batch=1024, backend="cpu", cpu_path="amx")
    except Exception as e:  # the refusal where the CPU has no AMX
        assert not listed, f"AMX listed but refused: {e}"
        assert "cpu-path amx cannot run here" in str(e), e
        return
    assert listed, "trained on AMX without AMX listed"
    a = nshade.fit(x, y, arch=arch, steps=150, batch=1024, backend="cpu")
    c = nshade.fit(x, y, arch=arch, steps=150, batch=1024, backend="cpu", cpu_path="amx")
    assert b.eval(x[:50]).tolist() == c.eval(x[:50]).tolist()
    assert b.eval(x[:50]).tolist() != a.eval(x[:50]).tolist()
    assert abs(b.metrics["psnr"] - a.metrics["psnr"]) < 1.0, (a.metrics, b.metrics)


def test_fine_tuning_continues_from_a_model():
    x, y = sdf(3000, 4)
    a = nshade.fit(x, y, arch="mlp(16x2, relu)", steps=100, batch=512, backend="cpu")
    b = nshade.fit(x, y, init=a, steps=100, batch=512, backend="cpu")
    assert b.arch == a.arch and b.metrics["psnr"] > a.metrics["psnr"]
    with pytest.raises(ValueError, match="another network"):
        nshade.fit(x, y, init=a, arch="mlp(8x1, relu)", steps=1, backend="cpu")


def test_errors_are_value_errors_with_the_clis_message(tmp_path):
    x, y = sdf(100)
    with pytest.raises(ValueError) as e:
        nshade.parse_arch("mlp(3x")
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    cli = subprocess.run([BIN, "fit", str(tmp_path / "x.npy"), "--targets", str(tmp_path / "y.npy"),
                          "--arch", "mlp(3x", "--steps", "1", "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert cli.returncode == 1
    assert str(e.value) in cli.stderr, (str(e.value), cli.stderr)
    with pytest.raises(ValueError, match="rows and the targets"):
        nshade.fit(x, y[:50], steps=1, backend="cpu")
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="row 3, column 1 is NaN"):
        nshade.fit(bad, y, steps=1, backend="cpu")
    with pytest.raises(ValueError, match="takes rows of 3 inputs"):
        nshade.fit(x, y, arch="mlp(8x1, relu)", steps=1, backend="cpu").eval(np.zeros((2, 2)))


def test_ctrl_c_stops_training():
    x, y = sdf(2000)
    # A process started in the background by a non-interactive shell inherits SIGINT
    # ignored, and Python then installs no handler: Ctrl-C is what the test sends, so it
    # installs Python's own.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            nshade.fit(x, y, arch="mlp(64x3, relu)", steps=10**7, batch=4096, backend="cpu")
        assert time.monotonic() - start < 20
    finally:
        timer.join()
        signal.signal(signal.SIGINT, previous)


DATA = os.path.join(os.path.dirname(__file__), "..", "..", "cli", "tests", "data")


def test_capture_of_two_parameters_is_the_clis(tmp_path):
    shader = os.path.join(DATA, "two_params.wgsl")
    settings = dict(size=(24, 16), train_frames=6, validation_frames=3, pixels_per_frame=200, seed=5)
    got = nshade.capture(shader, str(tmp_path / "py"), params={"light": (0, 3), "k": (-1, 1)}, **settings)
    assert got["path"] == str(tmp_path / "py")
    assert got["schema"] == 2 and got["train_rows"] == 1200 and got["validation_rows"] == 600
    assert [p["name"] for p in got["parameters"]] == ["light", "k"]
    assert got["parameters"][1]["shader_input"] == "params.values[0].y"
    subprocess.run([BIN, "capture", shader, "--out", str(tmp_path / "cli"), "--size", "24x16",
                    "--param", "light=0..3", "--param", "k=-1..1", "--train-frames", "6",
                    "--validation-frames", "3", "--pixels-per-frame", "200", "--seed", "5"],
                   check=True, capture_output=True)
    for f in ["dataset.json", "train.f32", "validation.f32", "source.wgsl"]:
        assert (tmp_path / "py" / f).read_bytes() == (tmp_path / "cli" / f).read_bytes(), f
    rows = np.fromfile(tmp_path / "py" / "train.f32", dtype="<f4").reshape(-1, 7)
    x, y, light, k = rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]
    r = 0.5 + 0.3 * (x * np.cos(light) + y * np.sin(light))
    assert np.nanmax(np.abs(rows[:, 4] - r)) < 2e-5
    # Without params: the one time parameter, schema 1, as `nshade capture` without --param.
    one = nshade.capture(shader, str(tmp_path / "one"), **settings)
    assert one["schema"] == 1 and [p["name"] for p in one["parameters"]] == ["t"]


def test_capture_errors_are_the_clis(tmp_path):
    tab = os.path.join(DATA, "mouse_tab.glsl")
    with pytest.raises(ValueError) as e:
        nshade.capture(tab, str(tmp_path / "a"), params={"light": (0, 1)})
    cli = subprocess.run([BIN, "capture", tab, "--out", str(tmp_path / "b"), "--param", "light=0..1"],
                         capture_output=True, text=True)
    assert cli.returncode == 1
    assert str(e.value) in cli.stderr, (str(e.value), cli.stderr)
    with pytest.raises(ValueError, match="the start must be below the end"):
        nshade.capture(tab, str(tmp_path / "a"), params={"iTime": (1, 1)})
    with pytest.raises(ValueError, match="a dict of name"):
        nshade.capture(tab, str(tmp_path / "a"), params={"iTime": "soon"})
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ValueError, match="directory exists and is not empty"):
        nshade.capture(tab, str(tmp_path / "full"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_architectures_parse_and_defaults(tmp_path):
    a = nshade.architectures.parse("f=freq(3)|mlp(32x3,relu)")
    assert a["name"] == "f" and a["canonical"] == "freq(3) | mlp(32x3, relu)"
    assert a["tree"]["type"] == "chain" and len(a["tree"]["modules"]) == 2
    # The JSON tree parses back to the same canonical text.
    import json
    assert nshade.architectures.parse(json.dumps(a["tree"]))["canonical"] == a["canonical"]
    from nshade.architectures import parse
    assert parse("mlp(8x1, relu)")["canonical"] == nshade.parse_arch("mlp(8x1, relu)")
    # The same message as the CLI's error line.
    with pytest.raises(ValueError) as e:
        parse("freq(3) | mlp(32x, relu)")
    x, y = sdf(100)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    cli = subprocess.run([BIN, "fit", str(tmp_path / "x.npy"), "--targets", str(tmp_path / "y.npy"),
                          "--arch", "freq(3) | mlp(32x, relu)", "--steps", "1", "--out",
                          str(tmp_path / "o")], capture_output=True, text=True)
    assert cli.returncode == 1 and str(e.value) in cli.stderr, (str(e.value), cli.stderr)
    # The default sets: the arrays set is what `nshade fit` trains on arrays without --arch.
    d = nshade.architectures.defaults()
    assert [n for n, _ in d] == ["mlp", "freq", "grid"]
    assert [n for n, _ in nshade.architectures.defaults(inputs=4)] == ["mlp", "freq"]
    image = nshade.architectures.defaults("image")
    assert image[0] == ("basic", "mlp(32x3, relu)") and len(image) == 6
    for _, spec in d + image:
        assert parse(spec)["canonical"]
    x4 = np.random.default_rng(5).uniform(0, 1, (300, 4)).astype(np.float32)
    np.save(tmp_path / "x4.npy", x4)
    np.save(tmp_path / "y4.npy", x4[:, 0])
    subprocess.run([BIN, "fit", str(tmp_path / "x4.npy"), "--targets", str(tmp_path / "y4.npy"),
                    "--steps", "1", "--batch", "64", "--backend", "cpu", "--out",
                    str(tmp_path / "d")], check=True, capture_output=True)
    summary = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert [(a["name"], a["arch"]) for a in summary["architectures"]] == \
        [(n, parse(s)["canonical"]) for n, s in nshade.architectures.defaults(inputs=4)]
    with pytest.raises(ValueError, match="arrays or image"):
        nshade.architectures.defaults("video")


def test_validation_rows_and_early_stopping():
    r = np.random.default_rng(8)
    x = r.uniform(0, 1, (4000, 2)).astype(np.float32)
    f = lambda x: 0.5 * x[:, 0] + 0.25 * x[:, 1]
    xv = r.uniform(0, 1, (500, 2)).astype(np.float32)
    # Held-out rows of its own: scored there, never trained on.
    m = nshade.fit(x, f(x), arch="mlp(16x1, relu)", steps=128, batch=1024, backend="cpu",
                   validation=(xv, f(xv)))
    assert m.training["data"]["validation_rows"] == 500
    assert m.training["data"]["training_rows"] == 4000
    pred = m.eval(xv)[:, 0]
    assert abs(m.metrics["mse"] - float(np.mean((pred - f(xv)) ** 2))) < 1e-6
    assert m.metrics["stopped_early_at"] is None
    # Stops on a 1024-step boundary once the validation PSNR reaches the target, as the CLI.
    s = nshade.fit(x, f(x), arch="mlp(16x1, relu)", steps=8192, batch=1024, backend="cpu",
                   validation=(xv, f(xv)), stop_at_psnr=35.0)
    at = s.metrics["stopped_early_at"]
    assert at is not None and at % 1024 == 0 and at < 8192, s.metrics
    assert s.training["steps"] == at and s.metrics["psnr"] >= 35.0
    # The same run without the target reaches that step with the same parameters.
    full = nshade.fit(x, f(x), arch="mlp(16x1, relu)", steps=at, batch=1024, backend="cpu",
                      validation=(xv, f(xv)))
    assert np.array_equal(full.eval(xv).view(np.uint32), s.eval(xv).view(np.uint32))
    with pytest.raises(ValueError, match="validation"):
        nshade.fit(x, f(x), steps=1, backend="cpu", validation=(xv[:, :1], f(xv)))
    with pytest.raises(ValueError, match="validation"):
        nshade.fit(x, f(x), steps=1, backend="cpu", validation="half")


def test_checkpoint_and_resume_give_the_uninterrupted_model(tmp_path):
    x, y = sdf(3000, 9)
    kw = dict(arch="mlp(16x2, relu)", steps=640, batch=512, backend="cpu")
    whole = nshade.fit(x, y, **kw)

    class Stop(Exception):
        pass

    def stop_at_300(step, loss):
        if step >= 300:
            raise Stop()

    ck = tmp_path / "ck"
    with pytest.raises(Stop):
        nshade.fit(x, y, checkpoint_every=128, checkpoint_dir=str(ck), progress=stop_at_300, **kw)
    files = list(ck.iterdir())
    assert len(files) == 1 and files[0].suffix == ".safetensors", files
    resumed = nshade.fit(x, y, checkpoint_every=128, checkpoint_dir=str(ck), resume=True, **kw)
    assert np.array_equal(whole.eval(x).view(np.uint32), resumed.eval(x).view(np.uint32))
    assert resumed.metrics["final_loss"] == whole.metrics["final_loss"]
    whole.save(str(tmp_path / "a"))
    resumed.save(str(tmp_path / "b"))
    assert (tmp_path / "a/weights.json").read_bytes() == (tmp_path / "b/weights.json").read_bytes()
    assert not list(ck.iterdir()), "the served checkpoint is removed"
    # A checkpoint from other settings is refused, naming the setting.
    with pytest.raises(Stop):
        nshade.fit(x, y, checkpoint_every=128, checkpoint_dir=str(ck), progress=stop_at_300,
                   **{**kw, "lr": 0.001})
    with pytest.raises(ValueError, match="lr"):
        nshade.fit(x, y, checkpoint_dir=str(ck), resume=True, **kw)
    with pytest.raises(ValueError, match="checkpoint_dir"):
        nshade.fit(x, y, resume=True, **kw)


def test_differentiable_slang_export():
    x, y = sdf(500)
    m = nshade.fit(x, y, arch="mlp(8x1, tanh)", steps=10, batch=256, backend="cpu")
    src = m.export("slang", differentiable=True)
    assert "[Differentiable]\nfloat nshade_eval(float3 p)" in src
    assert "[Differentiable]" not in m.export("slang")
    with pytest.raises(ValueError, match="Slang"):
        m.export("glsl", differentiable=True)
