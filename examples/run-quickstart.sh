#!/bin/sh
# run-quickstart.sh BUILDDIR: runs examples/quickstart on the GPU when a
# driver and a device are usable, else on simcuda, the simulated driver,
# saying so first.  Called by `make quickstart`.
b=${1:-.}
if why=$("$b/examples/quickstart" --probe 2>&1); then
  exec "$b/examples/quickstart"
fi
echo "No usable CUDA driver or GPU here, so this runs on simcuda, the simulated driver (tests/simcuda), not on a GPU."
echo "  (why: $(echo "$why" | head -n 1))"
LD_LIBRARY_PATH="$b/tests/simcuda/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$b/examples/quickstart"
