"""Build the Cython twins of kvreplay's hot loops.

Only the feed loops are native (see STYLE.md). Switches:
  KVREPLAY_NO_EXTENSIONS=1  pure-Python install, no compiler needed
  KVREPLAY_CYTHON_DEBUG=1   annotate HTML and line tracing (for profiling)

Without a working C compiler (an sdist installed where there is none) the build
does not fail: it prints one line and installs the pure-Python twins, which give
the same results (``kvreplay --version`` then says ``accountant: pure``).
"""

import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

FALLBACK = ("kvreplay: no working C compiler ({}); installing the pure-Python accountant "
            "(same results, slower; `kvreplay --version` says accountant: pure)")


class OptionalBuildExt(build_ext):
    """build_ext whose failure falls back to the pure-Python twins with one line, not a compiler error wall."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - CCompilerError, DistutilsExecError, PlatformError...
            self._fallback(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - as above, one extension at a time
            self._fallback(exc)

    def _fallback(self, exc):
        if not getattr(self, "_said", False):
            reason = str(exc).strip().splitlines()[-1][:120] if str(exc).strip() else type(exc).__name__
            print(FALLBACK.format(reason), file=sys.stderr)
            self._said = True


EXCHANGE_SRC = "src/kvreplay/runner/_h1exchange.py"
EXCHANGE_PXD = "ext/_h1exchange_c.pxd"


GENERATED = "build/cython"
"""Where the exchange's copy and its ``.pxd`` are written, as ``kvreplay/runner/_h1exchange_c.*``: Cython finds
a module's ``.pxd`` by the module's full name on its include path, not beside a source of another name."""


def _exchange_copy():
    """The source of the HTTP/1.1 exchange's compiled twin: ``_h1exchange.py``, typed by ``ext/_h1exchange_c.pxd``.

    Cython compiles the one source in its pure-Python mode (the ``.pxd`` makes ``_Exchange`` a
    ``cdef class`` with typed fields), so the two twins cannot differ in what they do. The copy
    is written under ``build/cython/kvreplay/runner/`` (generated, not committed) with the
    source's SHA-256 appended, which ``runner.h1`` compares with the ``.py`` beside it: a stale
    build is not used. The ``.pxd`` is copied beside it under the module's own name.
    """
    import hashlib

    with open(EXCHANGE_SRC, "rb") as f:
        src = f.read()
    with open(EXCHANGE_PXD, "rb") as f:
        pxd = f.read()
    where = os.path.join(GENERATED, "kvreplay", "runner")
    os.makedirs(where, exist_ok=True)
    out = os.path.join(where, "_h1exchange_c.py")
    text = src + b"\n\nSOURCE_SHA256 = %r\n" % hashlib.sha256(src).hexdigest()
    for path, data in ((out, text), (os.path.join(where, "_h1exchange_c.pxd"), pxd)):
        try:
            with open(path, "rb") as f:
                same = f.read() == data
        except OSError:
            same = False
        if not same:  # rewritten only when it changed: the build's timestamps stay meaningful
            with open(path, "wb") as f:
                f.write(data)
    return out


ext_modules = []
if os.environ.get("KVREPLAY_NO_EXTENSIONS", "") != "1":
    from Cython.Build import cythonize
    from setuptools import Extension

    debug = os.environ.get("KVREPLAY_CYTHON_DEBUG", "") == "1"
    macros = [("CYTHON_TRACE_NOGIL", "1")] if debug else []
    extensions = [
        Extension(
            "kvreplay.accounting._sse_c",
            ["ext/_sse_c.pyx"],
            depends=["ext/_sse_scan.pxi", "ext/_sse_end.pxi"],
            define_macros=macros,
        ),
        Extension("kvreplay.workload._hash_c", ["ext/_hash_c.pyx"], define_macros=macros),
    ]
    if os.path.exists(EXCHANGE_SRC):
        extensions.append(Extension("kvreplay.runner._h1exchange_c", [_exchange_copy()], depends=[EXCHANGE_PXD],
                                    define_macros=macros))
    extensions = [e for e in extensions if os.path.exists(e.sources[0])]
    ext_modules = cythonize(
        extensions,
        include_path=[GENERATED],  # the exchange's .pxd, found by its module's name (_exchange_copy)
        language_level=3,
        annotate=debug,
        quiet=True,
        compiler_directives={"linetrace": debug, "boundscheck": False, "wraparound": False},
    )

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
