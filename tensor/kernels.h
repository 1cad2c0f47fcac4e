// Moved to tensor/detail/kernels.h: this forwarding header keeps files outside its owners' reach building
// until their includes are updated, then goes.
#pragma once

#include "tensor/detail/kernels.h"
