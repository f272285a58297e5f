"""Compiled CPU kernels of the harness (the KIVI codec, the compression pass's scores): a C source built once per
machine with the system C compiler into the harness's cache folder, loaded with ctypes.

Each kernel module (:mod:`infinipotv.kv.native`, :mod:`infinipotv.compress.native`) decides which builds its CPU
takes and checks them; this module only builds, loads and switches off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from infinipotv.cachedir import cache_dir


def cpu_flags() -> set[str]:
    """The CPU's feature flags (x86-64 Linux; empty elsewhere: no build applies)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return set()
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))


def _build(compiler: str, source: Path, flags: list[str], target: Path) -> None:
    """Compile into a temporary file next to ``target``, then rename it: concurrent first uses never load half a
    file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        subprocess.run(
            [compiler, *flags, str(source), "-o", str(partial)], check=True, capture_output=True, text=True, timeout=120
        )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def compiled(compiler: str, source: Path, flags: list[str]) -> ctypes.CDLL:
    """``source`` built with ``flags`` into the harness's cache folder (once per machine: keyed by the source, the
    compiler and the flags) and loaded. Raises OSError or SubprocessError where it cannot be built."""
    key = hashlib.sha256(source.read_bytes() + " ".join((compiler, *flags)).encode()).hexdigest()[:16]
    target = cache_dir() / f"{source.stem}_{key}.so"
    if not target.exists():
        _build(compiler, source, flags, target)
    return ctypes.CDLL(str(target))


def warn_build_failed(what: str, source: Path, compiler: str, err: Exception, env: str, stacklevel: int = 4) -> None:
    """The one warning line of a kernel module whose build failed (its PyTorch path runs instead), naming the
    compiler's own message and the variable that silences it; ``stacklevel`` points at the module's caller."""
    detail = getattr(err, "stderr", None) or err
    warnings.warn(
        f"{what}: building {source.name} with {compiler} failed ({str(detail).strip()[:300]}): "
        f"the PyTorch path runs (slower on CPU; {env}=0 silences this)",
        stacklevel=stacklevel,
    )


def load(what: str, source: Path, flags: list[str], env: str) -> ctypes.CDLL | None:
    """``source`` built with ``flags`` and loaded, or None where the module's PyTorch path must run: ``env`` set to
    0, no C compiler (the KIVI codec says so once), or a failed build (one warning line, :func:`warn_build_failed`)."""
    if os.environ.get(env, "1") == "0":
        return None
    cc = compiler()
    if cc is None:
        return None
    try:
        return compiled(cc, source, flags)
    except (OSError, subprocess.SubprocessError) as err:
        warn_build_failed(what, source, cc, err, env, stacklevel=5)
        return None


def compiler() -> str | None:
    """The system C compiler: ``$CC``, else ``cc`` or ``gcc`` on the PATH."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


@contextmanager
def switched_off(module: ModuleType) -> Iterator[None]:
    """Inside the block ``module.library()`` (a module of compiled kernels) answers None, as where its kernels are
    unavailable: its callers take their PyTorch path."""
    built = module.library
    module.library = lambda: None
    try:
        yield
    finally:
        module.library = built
