// The watchdog thread behind detail::Watch (dist/detail/watchdog.h). Built with or without NCCL.
#include "minitensor/dist/detail/watchdog.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <list>
#include <mutex>
#include <thread>
#include <utility>

#include "minitensor/runtime/error.h"

namespace mt::dist::detail {

using Clock = std::chrono::steady_clock;

struct WatchEntry {
  std::function<void()> on_timeout;
  Clock::time_point deadline;
  bool fired = false;  // guarded by the watchdog's mutex
};

namespace {

// Started by the first Watch. It sleeps until the earliest deadline of the armed watches (or until one is
// armed), and runs the callback of each watch past its deadline. It holds its mutex while a callback runs,
// so a Watch being disarmed waits for it and then reads a final fired().
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog watchdog;
    return watchdog;
  }

  void arm(WatchEntry* entry) {
    bool sooner = false;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_entries.push_back(entry);
      sooner = entry->deadline < m_waiting_until;
    }
    // Only a deadline before the one the thread sleeps towards wakes it: with one timeout for every call,
    // that is the first watch after an idle spell, not one per collective.
    if (sooner) m_changed.notify_one();
  }

  void disarm(WatchEntry* entry) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_entries.remove(entry);
  }

  bool fired(const WatchEntry* entry) {
    std::lock_guard<std::mutex> lock(m_mutex);
    return entry->fired;
  }

 private:
  Watchdog() : m_thread([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_stop = true;
    }
    m_changed.notify_one();
    m_thread.join();
  }

  void loop() {
    std::unique_lock<std::mutex> lock(m_mutex);
    while (!m_stop) {
      Clock::time_point next = Clock::time_point::max();
      for (const WatchEntry* e : m_entries)
        if (!e->fired) next = std::min(next, e->deadline);
      m_waiting_until = next;
      if (next == Clock::time_point::max()) {
        m_changed.wait(lock);
      } else {
        m_changed.wait_until(lock, next);
      }
      const Clock::time_point now = Clock::now();
      for (WatchEntry* e : m_entries) {
        if (e->fired || now < e->deadline) continue;
        e->fired = true;
        try {
          e->on_timeout();
        } catch (const std::exception& error) {
          ::mt::detail::log_error(::mt::detail::str("a dist watchdog callback threw: ", error.what()));
        }
      }
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::list<WatchEntry*> m_entries;
  bool m_stop = false;
  Clock::time_point m_waiting_until = Clock::time_point::min();  // until the thread first computes it
  std::thread m_thread;                                          // last: started once the members above exist
};

}  // namespace

Watch::Watch(std::chrono::milliseconds timeout, std::function<void()> on_timeout) : m_entry(new WatchEntry) {
  m_entry->on_timeout = std::move(on_timeout);
  // A timeout too long for the clock never fires.
  const Clock::time_point now = Clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  m_entry->deadline = timeout >= room ? Clock::time_point::max() : now + timeout;
  Watchdog::get().arm(m_entry);
}

Watch::~Watch() {
  disarm();
  delete m_entry;
}

void Watch::disarm() {
  if (!m_armed) return;
  m_armed = false;
  Watchdog::get().disarm(m_entry);
}

bool Watch::fired() const {
  return Watchdog::get().fired(m_entry);
}

}  // namespace mt::dist::detail
