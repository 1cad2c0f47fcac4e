// Moved to ops/detail/kernels.h: this forwarding header keeps files outside ops/ building until their
// includes are updated, then goes.
#pragma once

#include "ops/detail/kernels.h"
