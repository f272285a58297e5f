"""docs/extending.md holds: its policy example runs as written, and every module that registers a component is
imported by its package (the one line each checklist asks for besides the component's own file)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import ROOT

DOC = ROOT / "docs" / "extending.md"
PACKAGES = {"compress.params": "@register(", "data": "@register", "models": "@register_adapter"}


def _example() -> tuple[str, str]:
    """The example's two files, its parameters and its tensor code, as modules of their own (``van_recent_params``
    and ``van_recent``) rather than of the package."""
    params, code = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[:2]
    params = params.replace('"infinipotv.compress.van_recent:VanRecent"', '"van_recent:VanRecent"')
    code = code.replace(
        "from infinipotv.compress.params import van_recent as params", "import van_recent_params as params"
    )
    return params, code


def test_the_documented_policy_is_a_config_choice_and_keeps_the_contract(tmp_path):
    """The example, saved as two modules, is all it takes: compress=van_recent composes with exactly its
    parameters and refuses another with no torch loaded, and the policy keeps |C| sorted tokens per head."""
    params, code = _example()
    (tmp_path / "van_recent_params.py").write_text(params)
    (tmp_path / "van_recent.py").write_text(code)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import van_recent_params  # in the package: one more name on compress/params/__init__.py's import line
        from hydra import compose, initialize_config_dir
        from infinipotv.config import ConfigError, as_run_config, register_configs
        register_configs()
        with initialize_config_dir(config_dir={str(ROOT / "conf")!r}, version_base="1.3"):
            cfg = as_run_config(compose("config", overrides=["compress=van_recent", "compress.recency=0.2"]))
            try:
                as_run_config(compose("config", overrides=["compress=van_recent", "+compress.alpha=0.5"]))
                raise SystemExit("an unknown knob was accepted")
            except ConfigError as err:
                assert "its parameters: recency" in str(err), err
        assert "torch" not in sys.modules
        import torch
        from infinipotv.compress import FrameLayout
        from infinipotv.factory import build_policy
        policy = build_policy(cfg)
        assert policy.recency == 0.2
        keys, values = torch.randn(2, 48, 8), torch.randn(2, 48, 8)
        kept = policy(keys, values, FrameLayout.fresh(2, 48, (3, 4)), 20, 0, 4)
        assert kept.shape == (2, 20) and bool((kept[:, 1:] > kept[:, :-1]).all())
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_every_registering_module_is_imported_by_its_package(package):
    folder = ROOT / "infinipotv" / package.replace(".", "/")
    registering = {
        path.stem
        for path in folder.glob("*.py")
        if PACKAGES[package] in path.read_text() and path.stem not in ("__init__", "base")
    }
    imported = set()
    for node in ast.walk(ast.parse((folder / "__init__.py").read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in (None, f"infinipotv.{package}"):
            imported |= {alias.name for alias in node.names}
    assert registering and registering <= imported, f"not imported by {package}/__init__.py: {registering - imported}"
