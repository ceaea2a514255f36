"""Build the Cython twins of kvreplay's hot loops.

Only the feed loops are native (see STYLE.md). Switches:
  KVREPLAY_NO_EXTENSIONS=1  pure-Python install, no compiler needed
  KVREPLAY_CYTHON_DEBUG=1   annotate HTML and line tracing (for profiling)
"""

import os

from setuptools import setup

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
            depends=["ext/_sse_scan.pxi"],
            define_macros=macros,
        ),
        Extension("kvreplay.workload._hash_c", ["ext/_hash_c.pyx"], define_macros=macros),
    ]
    extensions = [e for e in extensions if os.path.exists(e.sources[0])]
    ext_modules = cythonize(
        extensions,
        language_level=3,
        annotate=debug,
        compiler_directives={"linetrace": debug, "boundscheck": False, "wraparound": False},
    )

setup(ext_modules=ext_modules)
