/* registry.h: the registry (registry.c) as the manager sees it: an
 * extension that enters each manager cuemm_create makes and takes it out
 * again when the manager is destroyed or abandoned.  Everything else the
 * registry offers is public (cuemm_get and the drop-ins, in cuemm.h).
 */
#ifndef CUEMM_REGISTRY_H
#define CUEMM_REGISTRY_H

#include "core/internal.h"

extern const cuemm__extension cuemm__registry_extension;

#endif
