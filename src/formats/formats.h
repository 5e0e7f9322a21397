/* All bit-exact codecs of vcattn; see docs/formats.md for the granularities. */
#ifndef VCATTN_FORMATS_H
#define VCATTN_FORMATS_H

#include "halfs.h"
#include "e4m3.h"
#include "int8.h"
#include "e2m1.h"
#include "expcast.h"

#endif
