"""setup.py: the Python package cuemm, with libcuemm built inside it.

`pip install .` (or a wheel or sdist build) compiles libcuemm from src/ with
the C compiler (CC, default cc) and cuda.h, no autotools, and installs:
  - the package cuemm (python/cuemm) with libcuemm.so.0 beside its modules,
    where cuemm._lib looks first;
  - cuemm/bin/cuemm-replay (tools/cuemm-replay.c, run path $ORIGIN/.. so it
    finds that libcuemm.so.0) and the command cuemm-replay, a launcher that
    execs it;
  - the deprecated aliases cuemm_lib, cuemm_torch, cuemm_cupy, cuemm_numba;
  - the manual pages cuemm(3), cuemm(7) and cuemm-replay(1) in the wheel's
    data (share/man, which pip puts under the environment's prefix: `man
    cuemm` finds them where MANPATH or man's own search reaches it).

The source list is read from Makefile.am (libcuemm_la_SOURCES), so the two
builds cannot drift, and the flags that matter are the ones Makefile.am and
configure give: C11 with the GNU extensions configure's
AC_USE_SYSTEM_EXTENSIONS turns on (_GNU_SOURCE), -fvisibility=hidden,
-DCUEMM_BUILDING, -pthread, PACKAGE_VERSION (configure's only define the
sources use; there is no config.h), and -ldl for dlopen.  cuda.h is found by
python/backend/cuemm_build_backend.py (CUDA_HOME, /usr/local/cuda, the PyPI
package nvidia-cuda-runtime).  The version is AC_INIT's in configure.ac; the
build stops when python/cuemm/_version.py says otherwise.

docs/python.md says why setuptools drives the compile.
"""

import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools before 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "python", "backend"))
from cuemm_build_backend import CudaHeaderMissing, find_cuda_include  # noqa: E402

SONAME = "libcuemm.so.0"


def read(path):
    with open(os.path.join(HERE, path)) as f:
        return f.read()


def makefile_sources(variable):
    """The .c files of a variable of Makefile.am (`name = a.c b.h \\ ...`)."""
    text = read("Makefile.am").replace("\\\n", " ")
    m = re.search(r"^%s\s*=(.*)$" % re.escape(variable), text, re.M)
    if not m:
        raise SystemExit("setup.py: Makefile.am has no %s" % variable)
    return [f for f in m.group(1).split() if f.endswith(".c")]


def configure_version():
    m = re.search(r"AC_INIT\(\[cuemm\],\s*\[([^\]]+)\]", read("configure.ac"))
    if not m:
        raise SystemExit("setup.py: no AC_INIT([cuemm], [VERSION]) in configure.ac")
    return m.group(1)


def package_version():
    version = configure_version()
    m = re.search(r'^__version__ = "([^"]+)"', read("python/cuemm/_version.py"), re.M)
    if not m or m.group(1) != version:
        raise SystemExit("setup.py: python/cuemm/_version.py says %s, configure.ac's AC_INIT %s; "
                         "make them agree" % (m.group(1) if m else "nothing", version))
    return version


class build_cuemm(Command):
    """Compiles libcuemm.so.0 and cuemm-replay into the package's build
    directory."""

    description = "compile libcuemm and cuemm-replay"
    user_options = []

    def initialize_options(self):
        self.build_lib = None
        self.build_temp = None

    def finalize_options(self):
        self.set_undefined_options("build", ("build_lib", "build_lib"), ("build_temp", "build_temp"))

    def run(self):
        try:
            cuda_inc = find_cuda_include()
        except CudaHeaderMissing as e:
            raise SystemExit(str(e))
        cc = shlex.split(os.environ.get("CC", "cc"))
        cflags = shlex.split(os.environ.get("CFLAGS", "-O2 -g"))
        ldflags = shlex.split(os.environ.get("LDFLAGS", ""))
        defs = ["-D_GNU_SOURCE=1", '-DPACKAGE_VERSION="%s"' % package_version()]
        common = ["-std=gnu11", "-pthread", "-fPIC"] + defs + [
            "-I" + os.path.join(HERE, "include"), "-I" + os.path.join(HERE, "src"), "-I" + cuda_inc]
        tmp = os.path.join(self.build_temp, "cuemm")
        os.makedirs(tmp, exist_ok=True)
        print("cuemm: cuda.h from %s" % cuda_inc)

        def compile_one(src):
            obj = os.path.join(tmp, src[:-2].replace("/", "-") + ".o")  # src/pool/pool.c -> src-pool-pool.o
            self.spawn_quiet(cc + common + ["-fvisibility=hidden", "-DCUEMM_BUILDING"] + cflags +
                             ["-c", os.path.join(HERE, src), "-o", obj])
            return obj

        sources = makefile_sources("libcuemm_la_SOURCES")
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            objs = list(pool.map(compile_one, sources))
        lib = os.path.join(tmp, SONAME)
        self.spawn_quiet(cc + ["-shared", "-Wl,-soname," + SONAME, "-pthread", "-o", lib] + objs +
                         ldflags + ["-ldl"])
        replay = os.path.join(tmp, "cuemm-replay")
        self.spawn_quiet(cc + common + cflags + [os.path.join(HERE, s) for s in
                                                 makefile_sources("tools_cuemm_replay_SOURCES")] +
                         ["-o", replay, lib, "-Wl,-rpath,$ORIGIN/..", "-ldl"] + ldflags)
        pkg = os.path.join(self.build_lib, "cuemm")
        os.makedirs(os.path.join(pkg, "bin"), exist_ok=True)
        shutil.copy2(lib, os.path.join(pkg, SONAME))
        shutil.copy2(replay, os.path.join(pkg, "bin", "cuemm-replay"))

    def spawn_quiet(self, cmd):
        print(" ".join(shlex.quote(c) for c in cmd))
        r = subprocess.run(cmd)
        if r.returncode != 0:
            raise SystemExit("cuemm: the compiler failed (exit %d) on: %s" % (r.returncode, " ".join(cmd)))


class build_py_with_lib(build_py):
    def run(self):
        super().run()
        self.run_command("build_cuemm")


class wheel_for_any_python(bdist_wheel):
    """A platform wheel (it holds a shared library) that any Python 3 can use:
    libcuemm is loaded with ctypes, no extension module is built."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


def man_pages():
    """data_files for share/man: cuemm(7) as the tree ships it (generated
    from config.c's table by the autotools build), cuemm(3) and
    cuemm-replay(1) made here by the same generators the autotools build
    runs (man/gen-*.py, from cuemm.h and cuemm-replay.c's opening comment),
    unless the tree already has them.  A page that cannot be had is left
    out: the library does not need it."""
    out = os.path.join("build", "man")
    pages = {"man3": [], "man7": [], "man1": []}
    for name, section, gen, source in (("cuemm.3", "man3", "gen-cuemm3.py", "include/cuemm.h"),
                                       ("cuemm-replay.1", "man1", "gen-cuemm-replay1.py", "tools/cuemm-replay.c"),
                                       ("cuemm.7", "man7", None, None)):
        shipped = os.path.join("man", name)
        if os.path.exists(os.path.join(HERE, shipped)):
            pages[section].append(shipped)
            continue
        if gen and os.path.exists(os.path.join(HERE, "man", gen)):
            os.makedirs(os.path.join(HERE, out), exist_ok=True)
            with open(os.path.join(HERE, out, name), "w") as f:
                r = subprocess.run([sys.executable, os.path.join(HERE, "man", gen), os.path.join(HERE, source)],
                                   stdout=f)
            if r.returncode == 0:
                pages[section].append(os.path.join(out, name))
    return [("share/man/" + sec, files) for sec, files in pages.items() if files]


setup(
    version=package_version(),
    data_files=man_pages(),
    distclass=BinaryDistribution,
    package_dir={"": "python"},
    packages=["cuemm"],
    py_modules=["cuemm_lib", "cuemm_torch", "cuemm_cupy", "cuemm_numba"],
    cmdclass={"build_cuemm": build_cuemm, "build_py": build_py_with_lib, "bdist_wheel": wheel_for_any_python},
    zip_safe=False,
)
