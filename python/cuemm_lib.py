"""cuemm_lib: deprecated alias of cuemm._lib, kept for one release.

Importing it gives the module cuemm._lib itself (the same object: its state
and functions are shared).  Use the package cuemm (cuemm._lib; its functions are cuemm's: cuemm.load(), cuemm.stats(), ...) instead.
"""

import sys
import warnings

import cuemm._lib as _target

warnings.warn("cuemm_lib is deprecated and will be removed in the next release; use cuemm._lib",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _target
