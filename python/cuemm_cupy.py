"""cuemm_cupy: deprecated alias of cuemm.cupy, kept for one release.

Importing it gives the module cuemm.cupy itself (the same object: its state
and functions are shared).  Use cuemm.cupy instead.
"""

import sys
import warnings

import cuemm.cupy as _target

warnings.warn("cuemm_cupy is deprecated and will be removed in the next release; use cuemm.cupy",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _target
