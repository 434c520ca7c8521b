"""cuemm_numba: deprecated alias of cuemm.numba, kept for one release.

Importing it gives the module cuemm.numba itself (the same object: its state
and functions are shared).  Use cuemm.numba instead.
NUMBA_CUDA_MEMORY_MANAGER=cuemm_numba keeps working through it.
"""

import sys
import warnings

import cuemm.numba as _target

warnings.warn("cuemm_numba is deprecated and will be removed in the next release; use cuemm.numba",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _target
