// dist/: more than one GPU through NCCL. Communicators (one process with several GPUs, or one process per
// GPU), collectives on Tensors, asynchronous Work, typed errors and bounded waits,
// and weight sharding (shard).
#pragma once

#include "minitensor/dist/collectives.h"
#include "minitensor/dist/communicator.h"
#include "minitensor/dist/error.h"
#include "minitensor/dist/shard.h"
#include "minitensor/dist/unique_id.h"
#include "minitensor/dist/work.h"
