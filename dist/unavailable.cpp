// minitensor built without NCCL: every entry point of mt::dist that needs it throws mt::DistUnavailable (the
// pure helpers, UniqueId's text and file forms and the shape rules, work as usual).
#if !MT_HAS_NCCL

#include "minitensor/dist/collectives.h"
#include "minitensor/dist/communicator.h"
#include "minitensor/dist/work.h"

namespace mt::dist {

Communicator::~Communicator() = default;
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;

std::vector<Communicator> Communicator::local(const std::vector<int>&, const CommOptions&) {
  throw DistUnavailable("Communicator::local");
}
Communicator Communicator::init(int, int, const UniqueId&, int, const CommOptions&) {
  throw DistUnavailable("Communicator::init");
}
Communicator Communicator::from_env(const CommOptions&) {
  throw DistUnavailable("Communicator::from_env");
}
void Communicator::abort() noexcept {}
bool Communicator::aborted() const noexcept {
  return false;
}
void Communicator::rebuild(const UniqueId&) {
  throw DistUnavailable("Communicator::rebuild");
}
void Communicator::meet_local() {
  throw DistUnavailable("Communicator::meet_local");
}
void Communicator::rebuild_local(std::vector<Communicator>&) {
  throw DistUnavailable("Communicator::rebuild_local");
}
int Communicator::rank() const {
  throw DistUnavailable("Communicator::rank");
}
int Communicator::size() const {
  throw DistUnavailable("Communicator::size");
}
int Communicator::device() const {
  throw DistUnavailable("Communicator::device");
}
std::chrono::milliseconds Communicator::timeout() const {
  throw DistUnavailable("Communicator::timeout");
}
void Communicator::set_timeout(std::chrono::milliseconds) {
  throw DistUnavailable("Communicator::set_timeout");
}
bool Communicator::checked() const {
  throw DistUnavailable("Communicator::checked");
}
void Communicator::set_checked(bool) {
  throw DistUnavailable("Communicator::set_checked");
}
cudaStream_t Communicator::stream() {
  throw DistUnavailable("Communicator::stream");
}
void Communicator::synchronize() {
  throw DistUnavailable("Communicator::synchronize");
}

// A Work can only be pending when NCCL made it: the default (finished) one needs nothing.
bool Work::is_completed() const {
  return true;
}
void Work::wait() const {}
void Work::wait(cudaStream_t) const {}
void Work::synchronize() const {}
void Work::synchronize(std::chrono::milliseconds) const {}

Work all_reduce(const Tensor&, Communicator&, ReduceOp, const CollectiveOptions&) {
  throw DistUnavailable("all_reduce");
}
Work all_reduce(const Tensor&, const Tensor&, Communicator&, ReduceOp, const CollectiveOptions&) {
  throw DistUnavailable("all_reduce");
}
Work all_gather(const Tensor&, const Tensor&, Communicator&, std::int64_t, const CollectiveOptions&) {
  throw DistUnavailable("all_gather");
}
Work reduce_scatter(const Tensor&, const Tensor&, Communicator&, ReduceOp, std::int64_t,
                    const CollectiveOptions&) {
  throw DistUnavailable("reduce_scatter");
}
Work broadcast(const Tensor&, int, Communicator&, const CollectiveOptions&) {
  throw DistUnavailable("broadcast");
}
Work send(const Tensor&, int, Communicator&, const CollectiveOptions&) {
  throw DistUnavailable("send");
}
Work recv(const Tensor&, int, Communicator&, const CollectiveOptions&) {
  throw DistUnavailable("recv");
}
Work barrier(Communicator&, const CollectiveOptions&) {
  throw DistUnavailable("barrier");
}

Group::Group() {
  m_open = false;
  throw DistUnavailable("Group");
}
Group::~Group() = default;
void Group::end() {
  throw DistUnavailable("Group::end");
}

}  // namespace mt::dist

#endif  // !MT_HAS_NCCL
