// runtime/: errors, devices, streams, events, fork/join.
#pragma once

#include "minitensor/runtime/device.h"
#include "minitensor/runtime/error.h"
#include "minitensor/runtime/event.h"
#include "minitensor/runtime/fork_join.h"
#include "minitensor/runtime/stream.h"
