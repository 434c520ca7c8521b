/* compat/internal.h: compat/ offers nothing to other folders.
 *
 * compat.c keeps the public names that an argument order of their own made
 * deprecated (cuemm.h's "Deprecated names"), each a wrapper of its
 * successor.  The top layer with adapter/: nothing calls into it but
 * programs.
 */
#ifndef CUEMM_COMPAT_INTERNAL_H
#define CUEMM_COMPAT_INTERNAL_H

#endif
