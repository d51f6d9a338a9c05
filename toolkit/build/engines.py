"""Where each variant of the matrix builds when this host cannot: the GitHub-hosted runner (and container)
of the generated workflow, and where that job's torch comes from. The build stage names it in its reports
and `ggml-vendor ci` renders the workflow from it (so build needs nothing from ci)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from toolkit.build.matrix import Matrix, Variant
from toolkit.core.errors import ConfigError

# Runner labels (GitHub-hosted).
RUNNERS = {"x86_64-linux": "ubuntu-24.04", "aarch64-linux": "ubuntu-24.04-arm", "aarch64-darwin": "macos-26"}
# CUDA toolkits that pip installs from PyPI (`cuda-toolkit[nvcc,cccl,cudart]==X`, a complete nvcc): those rows
# build on the bare runner. The 12.x wheels ship no nvcc, so those rows build in NVIDIA's devel image.
PYPI_CUDA = ("13.0", "13.2")
CUDA_IMAGES = {
    "12.6": "nvidia/cuda:12.6.3-devel-ubuntu24.04",
    "12.8": "nvidia/cuda:12.8.1-devel-ubuntu24.04",
    "12.9": "nvidia/cuda:12.9.1-devel-ubuntu24.04",
    # 13.x rows build on the bare runner when the matrix pins their PyPI toolkit ([sources.toolkit]); a matrix
    # without that pin gets NVIDIA's image instead.
    "13.0": "nvidia/cuda:13.0.1-devel-ubuntu24.04",
    "13.2": "nvidia/cuda:13.2.1-devel-ubuntu24.04",
}
ROCM_IMAGE = "rocm/dev-ubuntu-24.04:{version}"


@dataclass(frozen=True)
class Row:
    """One entry of a job's matrix: a variant, the machine that builds it, and where its torch comes from:
    `torch` is the pip requirement the job installs from PyPI (the matrix's [sources] pin, e.g.
    `torch==2.14.1`), or "" when PyPI has none and `ggml-vendor build --create-envs` makes a torch
    environment from the matrix's [torch-index] instead (`create_envs`)."""

    variant: str
    group: str
    runner: str
    container: str | None = None
    torch: str = ""
    create_envs: bool = False


def _pypi_torch(v: Variant, matrix: Matrix | None) -> str | None:
    """The PyPI torch requirement for this variant (the matrix's [sources]), or None when PyPI has none."""
    if matrix is not None and hasattr(matrix, "torch_source"):
        pin = matrix.torch_source(v)
        return f"torch=={pin.version}" if pin is not None else None
    # Without [sources]: PyPI's Linux torch wheels are CUDA 13.0 builds (2.13, 2.14), its macOS ones MPS.
    return f"torch=={v.torch}.*" if v.compute in ("cu130", "metal") else None


def _pypi_toolkit(v: Variant, matrix: Matrix | None) -> bool:
    if matrix is not None and hasattr(matrix, "toolkit_source"):
        return matrix.toolkit_source(v) is not None
    return v.toolkit in PYPI_CUDA


def row_for(v: Variant, matrix: Matrix | None = None) -> Row:
    """Where `v` builds: the job group, runner and container, and where its torch comes from."""
    requirement = _pypi_torch(v, matrix)
    return replace(_machine_for(v, matrix), torch=requirement or "", create_envs=requirement is None)


def engine_label(v: Variant, matrix: Matrix | None = None) -> str:
    """Who builds `v` where this host cannot: the generated workflow's runner (and container), in words."""
    try:
        row = row_for(v, matrix)
    except ConfigError as exc:  # a row the workflow cannot place: say so instead of failing a listing
        return f"none ({exc.one_line()})"
    return f"github-actions {row.runner}" + (f" ({row.container})" if row.container else "")


def _machine_for(v: Variant, matrix: Matrix | None) -> Row:
    runner = RUNNERS.get(v.system)
    if runner is None:
        raise ConfigError(
            f"variant {v.name}: no GitHub-hosted runner is set up for {v.system}",
            "drop the row from the matrix or add a runner to toolkit/build/engines.py RUNNERS",
        )
    if v.os == "darwin":
        return Row(v.name, "macos", runner)
    if v.backend == "cuda":
        if _pypi_toolkit(v, matrix):
            return Row(v.name, "linux", runner)
        image = CUDA_IMAGES.get(v.toolkit or "")
        if image is None:
            raise ConfigError(
                f"variant {v.name}: CUDA {v.toolkit} is neither on PyPI nor has a known devel image",
                "add its nvidia/cuda image to toolkit/build/engines.py CUDA_IMAGES",
            )
        return Row(v.name, "cuda-image", runner, image)
    if v.backend == "rocm":
        return Row(v.name, "rocm", runner, ROCM_IMAGE.format(version=v.toolkit))
    return Row(v.name, "linux", runner)
