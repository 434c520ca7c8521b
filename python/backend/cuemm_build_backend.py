"""cuemm_build_backend: the build backend pyproject.toml names (backend-path
python/backend): setuptools' own (setuptools.build_meta), plus the one
decision setuptools cannot make, where cuda.h comes from.

libcuemm needs cuda.h to compile (only the header: libcuda is loaded at run
time).  It is looked for as configure looks for it: $CUDA_HOME/include,
then /usr/local/cuda/include; failing both, in NVIDIA's PyPI package
nvidia-cuda-runtime, which ships cuda.h (under nvidia/cu13/include; the
older nvidia-cuda-runtime-cu12 under nvidia/cuda_runtime/include, also
accepted).  get_requires_for_build_wheel asks pip for that package only
when neither directory has the header, so a machine with a toolkit
downloads nothing.  A CUDA_HOME that is set is taken at its word: when it
holds no include/cuda.h the build stops and says so, rather than quietly
compiling against some other toolkit.

setup.py imports find_cuda_include() from here, so both agree.
"""

import glob
import os
import sys

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the other hooks, unchanged)

FALLBACK_PACKAGE = "nvidia-cuda-runtime"
DEFAULT_ROOTS = ("/usr/local/cuda",)
# Where NVIDIA's wheels put cuda.h, relative to a site-packages directory.
PACKAGE_GLOBS = ("nvidia/cu*/include/cuda.h", "nvidia/cuda_runtime/include/cuda.h")


class CudaHeaderMissing(Exception):
    """No cuda.h anywhere the build looks; the message says what to set."""


def _has_header(d):
    return bool(d) and os.path.isfile(os.path.join(d, "cuda.h"))


def package_include(paths=None):
    """The include directory of an installed NVIDIA package holding cuda.h,
    searched on `paths` (default sys.path), or None."""
    for base in (sys.path if paths is None else paths):
        for pattern in PACKAGE_GLOBS:
            hits = sorted(glob.glob(os.path.join(base or ".", pattern)), reverse=True)
            if hits:
                return os.path.dirname(hits[0])
    return None


def toolkit_include(environ=None, roots=DEFAULT_ROOTS):
    """(include directory, tried): the toolkit's include directory holding
    cuda.h, or None, and the files looked at.  Raises CudaHeaderMissing when
    CUDA_HOME is set and lacks the header."""
    env = os.environ if environ is None else environ
    home = env.get("CUDA_HOME", "")
    if home:
        inc = os.path.join(home, "include")
        if _has_header(inc):
            return inc, [os.path.join(inc, "cuda.h")]
        raise CudaHeaderMissing(
            "cuemm: CUDA_HOME is %s, but %s does not exist.\n"
            "Set CUDA_HOME to a CUDA toolkit (12.0 or newer) whose include/ holds cuda.h, "
            "or unset it to let the build use /usr/local/cuda or the PyPI package %s."
            % (home, os.path.join(inc, "cuda.h"), FALLBACK_PACKAGE))
    tried = []
    for root in roots:
        inc = os.path.join(root, "include")
        tried.append(os.path.join(inc, "cuda.h"))
        if _has_header(inc):
            return inc, tried
    return None, tried


def find_cuda_include(environ=None, roots=DEFAULT_ROOTS, paths=None):
    """The directory to compile libcuemm with (-I), by the order above.
    Raises CudaHeaderMissing, naming every place tried and what to set."""
    inc, tried = toolkit_include(environ, roots)
    if inc:
        return inc
    inc = package_include(paths)
    if inc:
        return inc
    raise CudaHeaderMissing(
        "cuemm: cuda.h not found; looked for %s, and for the PyPI package %s "
        "(nvidia/cu13/include/cuda.h).\n"
        "Set CUDA_HOME to a CUDA toolkit (12.0 or newer) whose include/ holds cuda.h, "
        "or install %s (pip install %s; a build with isolation, the default of pip install, "
        "fetches it by itself). Only the header is needed: cuemm loads libcuda at run time."
        % (", ".join(tried), FALLBACK_PACKAGE, FALLBACK_PACKAGE, FALLBACK_PACKAGE))


def extra_requires(environ=None, roots=DEFAULT_ROOTS):
    """What the build needs beyond setuptools: the NVIDIA package when no
    toolkit has cuda.h, nothing otherwise (and nothing when CUDA_HOME is set
    wrong: setup.py then stops with the message)."""
    try:
        inc, _ = toolkit_include(environ, roots)
    except CudaHeaderMissing:
        return []
    return [] if inc else [FALLBACK_PACKAGE]


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + extra_requires()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + extra_requires()
