"""taputil.py: TAP for the suite's Python tests (test-adapters.py,
test-numba-plugin.py, ...): numbered results, a diagnosis under a failure,
the plan at the end, and the exit status the harness reads; and the
library the tests bind to (library_for_tests)."""

import os
import sys

_n = 0
_failed = 0


def ok(cond, name, diag=None):
    """One result; a failure prints `diag` (any object) as comments."""
    global _n, _failed
    _n += 1
    if not cond:
        _failed += 1
    print("%sok %d - %s" % ("" if cond else "not ", _n, name))
    if not cond and diag is not None:
        for line in str(diag).splitlines():
            print("#   " + line)
    sys.stdout.flush()
    return cond


def skip(name, why):
    global _n
    _n += 1
    print("ok %d - %s # SKIP %s" % (_n, name, why))


def raises(fn, exc):
    """What fn() raised of class exc; an AssertionError saying so when it
    raised another kind; None when it raised nothing."""
    try:
        fn()
    except exc as e:
        return e
    except Exception as e:  # the wrong kind
        return AssertionError("raised %r, not %s" % (e, exc.__name__))
    return None


def done():
    """The plan, then exit: 1 when any result failed."""
    print("1..%d" % _n)
    sys.exit(1 if _failed else 0)


def package_paths():
    """(build, src, installed): the build tree, the source tree, and whether
    the package under test is the installed one (CUEMM_PYTHON_INSTALLED=1,
    found through the interpreter's own path) rather than the source
    tree's python/, which then goes first on sys.path."""
    build = os.environ.get("CUEMM_TOP_BUILDDIR", ".")
    src = os.environ.get("top_srcdir", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    installed = os.environ.get("CUEMM_PYTHON_INSTALLED") == "1"
    if not installed:
        sys.path.insert(0, os.path.join(src, "python"))
    return build, src, installed


def library_for_tests(build, installed):
    """The libcuemm the package's bindings load in a test: the build tree's
    (CUEMM_LIBRARY set to it), or the installed package's own (None).  Ends
    the test with its plan, saying why, when there is none to bind to
    (CUEMM_PLUGIN_SKIP, or no shared library built)."""
    lib_path = os.path.join(build, ".libs", "libcuemm.so.0")
    no_bindings = os.environ.get("CUEMM_PLUGIN_SKIP", "")
    if installed:
        lib_path = None  # the installed package finds its own
    elif not no_bindings and not os.path.exists(lib_path):
        no_bindings = "no shared library built (%s)" % lib_path
    if no_bindings:
        print("# bindings not exercised: " + no_bindings)
        done()
    if lib_path is not None:
        os.environ["CUEMM_LIBRARY"] = lib_path
    return lib_path


def device_copies(cuda):
    """put(ptr, data) and get(ptr, n): host bytes to device memory and back
    through the driver library `cuda` (ctypes; simcuda or libcuda), get
    after a synchronization; each False or None where a call failed."""
    import ctypes
    cuda.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]

    def put(ptr, data):
        return cuda.cuMemcpyHtoD_v2(ptr, data, len(data)) == 0

    def get(ptr, n):
        buf = ctypes.create_string_buffer(n)
        good = cuda.cuCtxSynchronize() == 0 and cuda.cuMemcpyDtoH_v2(buf, ptr, n) == 0
        return buf.raw if good else None

    return put, get
