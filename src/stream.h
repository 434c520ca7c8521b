/* stream.h: the stream-ordered path as the manager sees it: an extension
 * (manager.h) whose thread caches hold pool blocks, which the pool asks
 * back before it grows.  Its public calls are in cuemm.h.
 */
#ifndef CUEMM_STREAM_H
#define CUEMM_STREAM_H

#include "manager.h"

extern const cuemm__extension cuemm__stream_extension;

#endif
