"""test-python-package.py: the package cuemm (python/cuemm) apart from its
framework adapters: its framework modules (cuemm.torch, cuemm.cupy,
cuemm.numba, cuemm.dask, cuemm.triton, cuemm.cuda_core) are attributes
imported on first use, which import without their frameworks and refuse
clearly when used without them; its version is
configure.ac's AC_INIT and the loaded library's cuemm_version_string(); the
build's search for cuda.h
(python/backend/cuemm_build_backend.py) takes CUDA_HOME, then the toolkit
roots, then NVIDIA's PyPI package, asks pip for that package only when no
toolkit has the header, and says what to set when nothing has it;
cuemm.snapshot(), stats_text() and print_stats() report what the device's
manager holds, on the suite's driver (simcuda unless
CUEMM_TEST_DRIVER=system).  With CUEMM_PYTHON_INSTALLED=1 the installed
package is tested instead of the source tree's.  Prints TAP."""

import io
import os
import re
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from taputil import done, library_for_tests, ok, package_paths, raises, skip  # noqa: E402

build, src, installed = package_paths()
sys.path.insert(0, os.path.join(src, "python", "backend"))

import cuemm  # noqa: E402

# ---- the version ---------------------------------------------------------------

with open(os.path.join(src, "configure.ac")) as f:
    ac = re.search(r"AC_INIT\(\[cuemm\],\s*\[([^\]]+)\]", f.read()).group(1)
ok(cuemm.__version__ == ac, "cuemm.__version__ is configure.ac's AC_INIT version (%s, %s)" % (cuemm.__version__, ac))

# ---- the framework modules as attributes -------------------------------------------
# `import cuemm; cuemm.torch.use()`: each framework module is an attribute of
# the package, imported on first use, so that `import cuemm` imports no
# framework; without the framework, use() names it and how to install it.
# In a fresh interpreter, with None in sys.modules for every framework (an
# `import torch` then raises ImportError even where torch is installed).

probe = r"""
import sys
for name in ("torch", "cupy", "numba", "numba_cuda", "distributed", "dask", "triton", "cuda", "cuda.core",
             "cuda.core.experimental"):
    sys.modules[name] = None
import cuemm
print("after import:", sorted(m for m in ("cuemm.torch", "cuemm.cupy", "cuemm.numba", "cuemm.dask",
                                          "cuemm.triton", "cuemm.cuda_core") if m in sys.modules))
for name in ("torch", "cupy", "numba", "dask", "triton", "cuda_core"):
    mod = getattr(cuemm, name)
    print("attribute %s: %s" % (name, mod.__name__))
print("in dir:", all(n in dir(cuemm) for n in ("torch", "cupy", "numba", "dask", "triton", "cuda_core")))
for name in ("torch", "cupy", "numba", "triton"):
    try:
        getattr(cuemm, name).use()
        print("use %s: no error" % name)
    except ImportError as e:
        print("use %s: ImportError: %s" % (name, e))
for what, call in (("mempool", lambda: cuemm.torch.mempool("kv")),
                   ("pool", lambda: cuemm.torch.pool("kv").__enter__()),
                   ("MemoryResource", lambda: cuemm.cuda_core.MemoryResource(0))):
    try:
        call()
        print("%s: no error" % what)
    except ImportError as e:
        print("%s: ImportError: %s" % (what, e))
print("triton is_used:", cuemm.triton.is_used(), "cuda.core available:", cuemm.cuda_core.available())
print("mode:", cuemm.torch.recommended_mode(reduce_overhead=True))
try:
    cuemm.nosuch
except AttributeError as e:
    print("nosuch:", e)
"""
env = dict(os.environ)
if not installed:
    env["PYTHONPATH"] = os.path.join(src, "python")
r = subprocess.run([sys.executable, "-c", probe], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                   universal_newlines=True)
ok(r.returncode == 0 and "after import: []" in r.stdout,
   "import cuemm imports none of cuemm.torch, cuemm.cupy, cuemm.numba, cuemm.dask, cuemm.triton, cuemm.cuda_core",
   r.stdout)
ok(all("attribute %s: cuemm.%s" % (n, n) in r.stdout for n in ("torch", "cupy", "numba", "dask", "triton",
                                                                "cuda_core"))
   and "in dir: True" in r.stdout,
   "cuemm.torch, cuemm.cupy, cuemm.numba, cuemm.dask, cuemm.triton and cuemm.cuda_core are attributes of the "
   "package, importable without their frameworks", r.stdout)
ok(re.search(r"mempool: ImportError: cuemm.torch: PyTorch is not importable here .*`pip install torch`", r.stdout)
   and re.search(r"pool: ImportError: cuemm.torch: PyTorch is not importable", r.stdout),
   "cuemm.torch.mempool() and pool() without torch: ImportError naming PyTorch", r.stdout)
ok(re.search(r"use triton: ImportError: cuemm.triton: Triton is not importable here .*`pip install triton`",
             r.stdout) is not None and "triton is_used: False" in r.stdout,
   "cuemm.triton.use() without Triton: ImportError naming it and how to install it; is_used() is False",
   r.stdout)
ok(re.search(r"MemoryResource: ImportError: cuemm.cuda_core: cuda.core is not importable here .*"
             r"`pip install cuda-core\[cu12\]`", r.stdout) is not None
   and "cuda.core available: False" in r.stdout,
   "cuemm.cuda_core.MemoryResource without cuda.core: ImportError naming it and how to install it", r.stdout)
ok("mode: mempool" in r.stdout, "cuemm.torch.recommended_mode() needs no torch", r.stdout)
ok(re.search(r"use torch: ImportError: cuemm.torch: PyTorch is not importable here .*`pip install torch`",
             r.stdout) is not None,
   "cuemm.torch.use() without torch: ImportError naming PyTorch and `pip install torch`", r.stdout)
ok(re.search(r"use cupy: ImportError: cuemm.cupy: CuPy is not importable .*`pip install cupy-cuda12x`", r.stdout)
   and re.search(r"use numba: ImportError: cuemm.numba: Numba is not importable .*`pip install numba-cuda`",
                 r.stdout),
   "cuemm.cupy.use() and cuemm.numba.use() likewise", r.stdout)
ok("nosuch: module 'cuemm' has no attribute 'nosuch'" in r.stdout, "another name: AttributeError", r.stdout)

# ---- where the build finds cuda.h ------------------------------------------------

try:
    import cuemm_build_backend as bb
except ImportError as e:  # setuptools absent: the backend cannot be imported
    bb = None
    for name in ("CUDA_HOME with cuda.h", "CUDA_HOME without it", "a toolkit root", "the PyPI package",
                 "nothing", "extra requirements"):
        skip("cuda.h search: " + name, "no setuptools (%s)" % e)
if bb is not None:
    tmp = tempfile.mkdtemp(prefix="cuemm-cudah-")

    def header(path):
        os.makedirs(path, exist_ok=True)
        open(os.path.join(path, "cuda.h"), "w").close()
        return path

    home_inc = header(os.path.join(tmp, "home", "include"))
    root_inc = header(os.path.join(tmp, "root", "include"))
    pkg_inc = header(os.path.join(tmp, "site", "nvidia", "cu13", "include"))
    none = os.path.join(tmp, "none")
    site, nosite = [os.path.join(tmp, "site")], [none]

    got = bb.find_cuda_include({"CUDA_HOME": os.path.join(tmp, "home")}, (os.path.join(tmp, "root"),), site)
    ok(got == home_inc, "cuda.h search: CUDA_HOME first", got)
    e = raises(lambda: bb.find_cuda_include({"CUDA_HOME": none}, (os.path.join(tmp, "root"),), site),
               bb.CudaHeaderMissing)
    ok(isinstance(e, bb.CudaHeaderMissing) and "CUDA_HOME is %s" % none in str(e)
       and os.path.join(none, "include", "cuda.h") in str(e),
       "cuda.h search: a CUDA_HOME without it stops the build, naming it", e)
    got = bb.find_cuda_include({}, (none, os.path.join(tmp, "root")), site)
    ok(got == root_inc, "cuda.h search: then the toolkit roots, in order", got)
    got = bb.find_cuda_include({}, (none,), site)
    ok(got == pkg_inc, "cuda.h search: then the PyPI package (nvidia/cu13/include)", got)
    e = raises(lambda: bb.find_cuda_include({}, (none,), nosite), bb.CudaHeaderMissing)
    ok(isinstance(e, bb.CudaHeaderMissing) and "cuda.h not found" in str(e) and "Set CUDA_HOME" in str(e)
       and "nvidia-cuda-runtime" in str(e) and os.path.join(none, "include", "cuda.h") in str(e),
       "cuda.h search: nothing found names the files tried, CUDA_HOME and the package", e)
    ok(bb.extra_requires({}, (none,)) == ["nvidia-cuda-runtime"]
       and bb.extra_requires({}, (os.path.join(tmp, "root"),)) == []
       and bb.extra_requires({"CUDA_HOME": none}, (os.path.join(tmp, "root"),)) == [],
       "extra requirements: the package only where no toolkit has cuda.h")

# ---- reports ---------------------------------------------------------------------

lib_path = library_for_tests(build, installed)

ok(cuemm.version_string() == cuemm.__version__,
   "cuemm_version_string() of the library is cuemm.__version__ (%s)" % cuemm.version_string())

lib = cuemm.load()
p = lib.cuemm_torch_alloc(3 << 20, 0, None)
ok(bool(p), "a 3 MiB block through the adapters' entry point")
s = cuemm.snapshot(0)
mine = [b for b in s.blocks if b.ptr == p]
ok(isinstance(s, cuemm.Snapshot) and len(mine) == 1, "snapshot(): a Snapshot listing the block once", s.blocks)
b = mine[0] if mine else None
ok(b is not None and isinstance(b, cuemm.Block) and b.state == "live" and b.requested == 3 << 20
   and b.size >= 3 << 20 and b.chunk >= 0 and b.stream_ordered,
   "the block: live, 3 MiB requested, in a chunk of the pool, stream-ordered", b)
ok(len(s.chunks) >= 1 and all(isinstance(c, cuemm.Chunk) and c.size > 0 for c in s.chunks)
   and b is not None and s.chunks[b.chunk].base <= b.ptr < s.chunks[b.chunk].base + s.chunks[b.chunk].size,
   "its chunk holds it", s.chunks)
ok(s.stats["live_bytes"] == cuemm.stats(0)["live_bytes"] and s.pool["enabled"] == 1,
   "with the statistics and the pool's of the same moment", s.stats)
ok(sum(x.size for x in s.blocks if x.chunk >= 0) == s.pool["mapped_bytes"],
   "the pool's blocks tile its mapped memory")
lib.cuemm_torch_free(p, 3 << 20, 0, None)
after = [x for x in cuemm.snapshot(0).blocks if x.ptr == p]
ok(len(after) == 1 and after[0].state == "cached", "freed on its stream: cached", after)

text = cuemm.stats_text(0)
ok(re.search(r"live +0 B now in 0 allocations; 3\.00 MiB at peak", text) is not None,
   "stats_text(): cuemm_stats_print's table", text)
out = io.StringIO()
cuemm.print_stats(0, file=out)
ok(out.getvalue() == cuemm.stats_text(0), "print_stats(file=...) writes that table")
e = raises(lambda: cuemm.snapshot(9), cuemm.CuemmError)
ok(isinstance(e, cuemm.CuemmError) and "cuemm_device_manager(9)" in str(e),
   "snapshot of a device that does not exist: CuemmError", e)
done()
