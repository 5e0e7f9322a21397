#ifndef VCATTN_INSPECT_H
#define VCATTN_INSPECT_H
/* The one door into libvcattn's internals, for the lab, the command line and
 * the tests (built against the static library): the bit-exact codecs, the
 * V-Smooth pieces, the resolved call, and the backends' quantizers as the
 * tests read them. Not the public API (include/vcattn.h is) and without its
 * stability promise. Code outside src/ includes this header and vcattn.h,
 * never a src/ folder's own headers: tools/check_layers.sh fails on that,
 * and their build sees only this folder of src/. */
#include "vcattn.h"
#include "../formats/formats.h"
#include "../vsmooth/vsmooth.h"
#include "../api/api.h"
#include "../cpu/cpu_backend.h"
#include "../cuda/cuda_backend.h"

#endif
