"""cuemm._version: the package's version, which is the library's: AC_INIT in
configure.ac.  tests/test-python-package.py checks that the three agree
(this, configure.ac, and cuemm_version_string() of the library loaded), and
setup.py refuses to build a wheel when this differs from configure.ac."""

__version__ = "0.1.0"
