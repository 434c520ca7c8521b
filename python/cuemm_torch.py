"""cuemm_torch: deprecated alias of cuemm.torch, kept for one release.

Importing it gives the module cuemm.torch itself (the same object: its state
and functions are shared).  Use cuemm.torch instead.
"""

import sys
import warnings

import cuemm.torch as _target

warnings.warn("cuemm_torch is deprecated and will be removed in the next release; use cuemm.torch",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _target
