/* adapter/internal.h: adapter/ offers nothing to other folders.
 *
 * adapter.c serves the frameworks on the CUDA runtime: one manager per
 * device over its primary context, PyTorch's pluggable allocator entry
 * points and the pools of its CUDA graphs, and the tags whose managers are
 * suspended as one; its entry points are public (cuemm.h, "Framework
 * adapters").  The top layer with compat/: nothing calls into it but the
 * frameworks.
 */
#ifndef CUEMM_ADAPTER_INTERNAL_H
#define CUEMM_ADAPTER_INTERNAL_H

#endif
