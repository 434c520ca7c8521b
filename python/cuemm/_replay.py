"""cuemm._replay: the command cuemm-replay of a pip-installed cuemm.

pip installs commands as Python launchers; this one execs the program built
with the package (cuemm/bin/cuemm-replay, which finds the package's
libcuemm.so.0 through its run path).  `make install` installs the program
itself in bindir and has no use for this module.
"""

import os
import sys

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "cuemm-replay")


def main():
    if not os.access(PROGRAM, os.X_OK):
        sys.stderr.write("cuemm-replay: %s is missing or not executable; this cuemm was not "
                         "installed with pip (make install puts cuemm-replay in its bindir)\n" % PROGRAM)
        return 127
    os.execv(PROGRAM, [PROGRAM] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
