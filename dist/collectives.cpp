// Collectives on Tensors (dist/collectives.h): validation, buffers, and the NCCL calls.
#include "minitensor/dist/collectives.h"

#include "minitensor/runtime/error.h"

namespace mt::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Prod:
      return "prod";
  }
  return "?";
}

Shape all_gather_shape(const Shape& input, int world_size, std::int64_t dim) {
  MT_CHECK(world_size >= 1, InvalidArgument, "all_gather_shape: world size ", world_size,
           " must be at least 1");
  MT_CHECK(input.rank() >= 1, ShapeError, "all_gather: the input must have at least one dim, got shape ",
           input);
  const int d = wrap_dim(dim, input.rank(), "all_gather");
  Shape out = input;
  out[d] = input[d] * world_size;
  return out;
}

Shape reduce_scatter_shape(const Shape& input, int world_size, std::int64_t dim) {
  MT_CHECK(world_size >= 1, InvalidArgument, "reduce_scatter_shape: world size ", world_size,
           " must be at least 1");
  MT_CHECK(input.rank() >= 1, ShapeError, "reduce_scatter: the input must have at least one dim, got shape ",
           input);
  const int d = wrap_dim(dim, input.rank(), "reduce_scatter");
  MT_CHECK(input[d] % world_size == 0, ShapeError, "reduce_scatter: extent ", input[d], " of dim ", d,
           " of shape ", input, " is not a multiple of the world size ", world_size);
  Shape out = input;
  out[d] = input[d] / world_size;
  return out;
}

}  // namespace mt::dist

#if MT_HAS_NCCL

#include "minitensor/dist/detail/call.h"

namespace mt::dist {
namespace {

using detail::Call;
using detail::Signature;

// Shape `s` with dim d split into (world, s[d] / world) and that world axis moved to the front: the order in
// which NCCL lays rank blocks out end to end.
std::vector<std::int64_t> split_dims(const Shape& s, int d, int world) {
  std::vector<std::int64_t> dims = s.vec();
  dims[static_cast<std::size_t>(d)] /= world;
  dims.insert(dims.begin() + d, world);
  return dims;
}

std::vector<std::int64_t> world_first(int rank, int d) {
  std::vector<std::int64_t> perm;
  perm.push_back(d);
  for (int i = 0; i < rank + 1; ++i)
    if (i != d) perm.push_back(i);
  return perm;
}

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  MT_CHECK(a.dtype() == b.dtype(), DTypeError, "mt::dist ", op, ": input dtype ", a.dtype(),
           " differs from output dtype ", b.dtype());
}

}  // namespace

Work all_reduce(const Tensor& tensor, Communicator& comm, ReduceOp op, const CollectiveOptions& options) {
  return all_reduce(tensor, tensor, comm, op, options);
}

Work all_reduce(const Tensor& input, const Tensor& output, Communicator& comm, ReduceOp op,
                const CollectiveOptions& options) {
  constexpr const char* kOp = "all_reduce";
  detail::check_tensor(input, kOp, "the input");
  detail::check_tensor(output, kOp, "the output");
  Call call(comm, kOp, options);
  call.check_device(input, "the input");
  call.check_device(output, "the output");
  check_same(input, output, kOp);
  MT_CHECK(input.shape() == output.shape(), ShapeError, "mt::dist all_reduce: input shape ", input.shape(),
           " differs from output shape ", output.shape());
  const ncclDataType_t type = detail::nccl_dtype(input.dtype(), kOp);
  call.check_across_ranks(
      {Signature::AllReduce, static_cast<std::int64_t>(op), 0, input.dtype(), input.shape()});
  const bool in_place = input.data_ptr() == output.data_ptr() && input.strides() == output.strides();
  Tensor dst = call.output_buffer(output);
  Tensor src = in_place ? dst : call.contiguous(input);
  if (in_place && dst.data_ptr() != output.data_ptr()) dst.copy_(input);  // a non-contiguous in-place tensor
  if (input.numel() > 0) {
    call.launch([&] {
      return ncclAllReduce(src.data_ptr(), dst.data_ptr(), static_cast<std::size_t>(input.numel()), type,
                           detail::nccl_op(op), call.comm(), call.stream());
    });
  }
  call.copy_back(output, dst);
  return call.finish({input, output});
}

Work all_gather(const Tensor& input, const Tensor& output, Communicator& comm, std::int64_t dim,
                const CollectiveOptions& options) {
  constexpr const char* kOp = "all_gather";
  detail::check_tensor(input, kOp, "the input");
  detail::check_tensor(output, kOp, "the output");
  Call call(comm, kOp, options);
  call.check_device(input, "the input");
  call.check_device(output, "the output");
  check_same(input, output, kOp);
  const int world = call.state().world;
  const Shape expected = all_gather_shape(input.shape(), world, dim);
  MT_CHECK(output.shape() == expected, ShapeError, "mt::dist all_gather: output shape ", output.shape(),
           " should be ", expected, " (input ", input.shape(), " gathered from ", world, " ranks along dim ",
           dim, ")");
  const int d = wrap_dim(dim, input.dim(), kOp);
  const ncclDataType_t type = detail::nccl_dtype(input.dtype(), kOp);
  call.check_across_ranks({Signature::AllGather, -1, d, input.dtype(), input.shape()});
  Tensor src = call.contiguous(input);
  Tensor dst = call.output_buffer(output);
  // Along dim 0 the rank blocks are NCCL's layout already; along another dim they land in a buffer of shape
  // (world, input...) first and are then copied into place.
  Tensor gathered = dst;
  if (d != 0) {
    Shape staged = input.shape();
    staged.insert(0, world);
    gathered = call.contiguous(empty(staged, input.dtype(), input.device()));
  }
  if (input.numel() > 0) {
    call.launch([&] {
      return ncclAllGather(src.data_ptr(), gathered.data_ptr(), static_cast<std::size_t>(input.numel()), type,
                           call.comm(), call.stream());
    });
  }
  if (d != 0) {
    const std::vector<std::int64_t> perm = world_first(input.dim(), d);
    const Tensor placed = dst.view(Shape(split_dims(expected, d, world))).permute(perm);
    call.after([placed, gathered] {
      Tensor target = placed;
      target.copy_(gathered);
    });
  }
  call.copy_back(output, dst);
  return call.finish({input, output});
}

Work reduce_scatter(const Tensor& input, const Tensor& output, Communicator& comm, ReduceOp op,
                    std::int64_t dim, const CollectiveOptions& options) {
  constexpr const char* kOp = "reduce_scatter";
  detail::check_tensor(input, kOp, "the input");
  detail::check_tensor(output, kOp, "the output");
  Call call(comm, kOp, options);
  call.check_device(input, "the input");
  call.check_device(output, "the output");
  check_same(input, output, kOp);
  const int world = call.state().world;
  const Shape expected = reduce_scatter_shape(input.shape(), world, dim);
  MT_CHECK(output.shape() == expected, ShapeError, "mt::dist reduce_scatter: output shape ", output.shape(),
           " should be ", expected, " (input ", input.shape(), " scattered over ", world, " ranks along dim ",
           dim, ")");
  const int d = wrap_dim(dim, input.dim(), kOp);
  const ncclDataType_t type = detail::nccl_dtype(input.dtype(), kOp);
  call.check_across_ranks(
      {Signature::ReduceScatter, static_cast<std::int64_t>(op), d, input.dtype(), input.shape()});
  // NCCL scatters blocks laid out end to end: along another dim than 0, the input's rank blocks are first
  // copied into that order.
  Tensor src = call.contiguous(input);
  if (d != 0)
    src = call.contiguous(
        src.view(Shape(split_dims(input.shape(), d, world))).permute(world_first(input.dim(), d)));
  Tensor dst = call.output_buffer(output);
  if (output.numel() > 0) {
    call.launch([&] {
      return ncclReduceScatter(src.data_ptr(), dst.data_ptr(), static_cast<std::size_t>(output.numel()), type,
                               detail::nccl_op(op), call.comm(), call.stream());
    });
  }
  call.copy_back(output, dst);
  return call.finish({input, output});
}

Work broadcast(const Tensor& tensor, int root, Communicator& comm, const CollectiveOptions& options) {
  constexpr const char* kOp = "broadcast";
  detail::check_tensor(tensor, kOp, "the tensor");
  Call call(comm, kOp, options);
  call.check_device(tensor, "the tensor");
  const int world = call.state().world;
  MT_CHECK(root >= 0 && root < world, InvalidArgument, "mt::dist broadcast: root ", root, " is outside [0, ",
           world, ")");
  const ncclDataType_t type = detail::nccl_dtype(tensor.dtype(), kOp);
  call.check_across_ranks({Signature::Broadcast, -1, root, tensor.dtype(), tensor.shape()});
  Tensor buffer = call.contiguous(tensor);  // the root's data, or where the others receive it
  if (tensor.numel() > 0) {
    call.launch([&] {
      return ncclBroadcast(buffer.data_ptr(), buffer.data_ptr(), static_cast<std::size_t>(tensor.numel()),
                           type, root, call.comm(), call.stream());
    });
  }
  call.copy_back(tensor, buffer);
  return call.finish({tensor});
}

namespace {
// `peer` is another rank of the call's communicator (InvalidArgument naming the op otherwise).
void check_peer(Call& call, int peer, const char* op) {
  const int world = call.state().world;
  MT_CHECK(peer >= 0 && peer < world && peer != call.state().rank, InvalidArgument, "mt::dist ", op,
           ": peer ", peer, " is not another rank of [0, ", world, ")");
}
}  // namespace

Work send(const Tensor& tensor, int peer, Communicator& comm, const CollectiveOptions& options) {
  constexpr const char* kOp = "send";
  detail::check_tensor(tensor, kOp, "the tensor");
  Call call(comm, kOp, options);
  call.check_device(tensor, "the tensor");
  check_peer(call, peer, kOp);
  const ncclDataType_t type = detail::nccl_dtype(tensor.dtype(), kOp);
  Tensor src = call.contiguous(tensor);
  if (tensor.numel() > 0) {
    call.launch([&] {
      return ncclSend(src.data_ptr(), static_cast<std::size_t>(tensor.numel()), type, peer, call.comm(),
                      call.stream());
    });
  }
  return call.finish({tensor});
}

Work recv(const Tensor& tensor, int peer, Communicator& comm, const CollectiveOptions& options) {
  constexpr const char* kOp = "recv";
  detail::check_tensor(tensor, kOp, "the tensor");
  Call call(comm, kOp, options);
  call.check_device(tensor, "the tensor");
  check_peer(call, peer, kOp);
  const ncclDataType_t type = detail::nccl_dtype(tensor.dtype(), kOp);
  Tensor dst = call.output_buffer(tensor);
  if (tensor.numel() > 0) {
    call.launch([&] {
      return ncclRecv(dst.data_ptr(), static_cast<std::size_t>(tensor.numel()), type, peer, call.comm(),
                      call.stream());
    });
  }
  call.copy_back(tensor, dst);
  return call.finish({tensor});
}

Work barrier(Communicator& comm, const CollectiveOptions& options) {
  constexpr const char* kOp = "barrier";
  Call call(comm, kOp, options);
  call.check_across_ranks({Signature::Barrier, -1, 0, DType::I32, Shape{1}});
  Tensor token = call.contiguous(empty(Shape{1}, DType::I32, Device::cuda(call.state().device)));
  call.launch([&] {
    return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclInt32, ncclSum, call.comm(),
                         call.stream());
  });
  const bool grouped = detail::group_state().depth > 0;
  const bool capturing = detail::capturing(call.stream());
  if (options.async_op || grouped || capturing) return call.finish({token});
  Work none = call.finish({token});
  Event reached;
  reached.record(call.stream());
  detail::poll_until(call.state(), kOp, call.state().timeout, [&] { return reached.query(); });
  return none;
}

}  // namespace mt::dist

#endif  // MT_HAS_NCCL
