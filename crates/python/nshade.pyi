"""nshade: train small neural networks for real-time graphics and ship them as shaders."""

from types import ModuleType
from typing import Any, Callable, Optional, Sequence, Tuple, TypedDict, Union
import numpy as np
import numpy.typing as npt

__version__: str
DEFAULT_ARCH: str

class Model:
    """A trained model: the same weights.json as the nshade CLI writes and reads."""

    @property
    def arch(self) -> str: ...
    @property
    def params(self) -> int: ...
    @property
    def inputs(self) -> list[str]: ...
    @property
    def outputs(self) -> list[str]: ...
    @property
    def metrics(self) -> dict[str, Any]: ...
    @property
    def training(self) -> dict[str, Any]: ...
    def eval(self, x: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Rows of raw inputs (rows, inputs) -> (rows, outputs) float32; bit for bit `nshade eval`."""
    def save(self, dir: str) -> None:
        """Writes dir/weights.json (and its sidecar for grid tables)."""
    def export(self, target: str, weights: str = "baked", differentiable: bool = False) -> str:
        """The inference shader: wgsl, glsl, glsl-es, hlsl, slang, msl or shadertoy; baked, buffer,
        buffer-vec4 (the buffer read as 4-vectors, zero-padded to whole vectors; wgsl, glsl,
        hlsl, slang) or uniform weights (a uniform block of vec4; dense networks of at most
        16 384 parameters). differentiable=True (Slang only) marks nshade_eval [Differentiable] for
        fwd_diff/bwd_diff with respect to its inputs (the weights are constants)."""

def fit(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    arch: Optional[str] = None,
    steps: int = 1000,
    batch: int = 4096,
    seed: int = 1337,
    lr: float = 0.005,
    loss: str = "l2",
    backend: str = "auto",
    cpu_path: str = "f32",
    validation: Union[float, Tuple[npt.ArrayLike, npt.ArrayLike], None] = None,
    init: Optional[Model] = None,
    progress: Optional[Callable[[int, float], Any]] = None,
    stop_at_psnr: Optional[float] = None,
    checkpoint_every: Optional[int] = None,
    checkpoint_dir: Optional[str] = None,
    resume: bool = False,
) -> Model:
    """Trains `arch` (default DEFAULT_ARCH) on rows x -> y; Ctrl-C raises KeyboardInterrupt.

    cpu_path: the CPU backend's products, "f32", "bf16" or "amx" (as the CLI's --cpu-path).
    validation: a fraction of the rows held out (default 0.1), or (x, y) validation rows.
    stop_at_psnr: stop once the validation PSNR reaches it (checked every 1024 steps).
    checkpoint_every/checkpoint_dir/resume: the CLI's checkpoints; resume=True continues
    from checkpoint_dir to the model an uninterrupted run gives."""

def load(path: str) -> Model:
    """A model written by the CLI or Model.save (weights.json or its directory)."""

def parse_arch(spec: str) -> str:
    """The canonical text of an architecture; ValueError with the CLI's message otherwise."""

def capture(
    shader_path: str,
    out_dir: str,
    size: tuple[int, int] = (320, 180),
    params: Optional[dict[str, tuple[float, float]]] = None,
    train_frames: int = 48,
    validation_frames: int = 13,
    pixels_per_frame: Optional[int] = 2048,
    seed: int = 4090,
    semantics: Optional[str] = None,
) -> dict[str, Any]:
    """Captures a .wgsl or ShaderToy .glsl/.frag shader into the dataset directory out_dir,
    as `nshade capture` does: params maps names to (start, end) ranges (WGSL:
    params.values[i] in order; ShaderToy: iTime, iMouse.x, iMouse.y, iMouse.z, iMouse.w);
    more than one (or a ShaderToy input other than iTime) writes schema 2. pixels_per_frame
    None captures every pixel; semantics "strict", "display" or None (the kind's default).
    Returns {path, schema, train_rows, validation_rows, parameters, frontend, semantics};
    ValueError with the CLI's message for bad settings or shaders, KeyboardInterrupt on
    Ctrl-C (nothing is written)."""



class ParsedArch(TypedDict):
    name: str
    canonical: str
    tree: dict[str, Any]

class _Architectures(ModuleType):
    def parse(self, text: str) -> ParsedArch:
        """`name=spec` or `spec` (text or JSON): its name, canonical text and JSON tree;
        ValueError with the CLI's message otherwise."""
    def defaults(self, kind: str = "arrays", inputs: Optional[int] = None) -> list[tuple[str, str]]:
        """(name, spec) of the architectures `nshade fit` trains without --arch: for arrays and
        texture sets (the hash grid only up to three inputs, when given), or kind="image"."""

architectures: _Architectures
