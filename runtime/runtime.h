// runtime/: errors, devices, streams, events, fork/join.
#pragma once

#include "runtime/device.h"
#include "runtime/error.h"
#include "runtime/event.h"
#include "runtime/fork_join.h"
#include "runtime/stream.h"
