#include "tests/common/gpu.h"
