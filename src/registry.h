/* registry.h: the registry (registry.c) as the manager sees it: an
 * extension that enters each manager cuemm_create makes and takes it out
 * again when the manager is destroyed or abandoned, and the way to make a
 * manager it leaves out.  Everything else the registry offers is public
 * (cuemm_get and the drop-ins, in cuemm.h).
 */
#ifndef CUEMM_REGISTRY_H
#define CUEMM_REGISTRY_H

#include "manager.h"

extern const cuemm__extension cuemm__registry_extension;

/* cuemm_create, except that the manager is not entered as its context's:
 * one of several managers over one context (the framework adapters' tags),
 * which cuemm_get and the drop-ins never find.  Its destruction takes
 * nothing out of the registry. */
CUresult cuemm__create_unlisted(cuemm_manager **m, CUcontext ctx, const cuemm_config *cfg);

#endif
