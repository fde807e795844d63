// The keeper's bookkeeping, run in a thread with socket pairs for clients
// and pipes standing in for perf events: EOF on a pipe's read end means the
// keeper closed the last copy of its write end, as it would destroy an event.
#include "cudatrace/record/uprobe_keeper.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace cudatrace {
namespace {

// True when the pipe's write end is closed everywhere, waiting up to `ms`.
bool writer_gone(int read_fd, int ms) {
  pollfd p{read_fd, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return false;
  char c;
  return read(read_fd, &c, 1) == 0;
}

ino_t inode_of(int fd) {
  struct stat st {};
  fstat(fd, &st);
  return st.st_ino;
}

UprobeKey key(std::uint64_t offset) {
  UprobeKey k;
  k.dev = 1;
  k.ino = 2;
  k.offset = offset;
  return k;
}

// `n` clients of a keeper running in a thread.
struct Keeper {
  Keeper(int n, int idle_ms) {
    std::vector<int> ends;
    for (int i = 0; i < n; ++i) {
      int socks[2];
      EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, socks), 0);
      clients.push_back(UprobeKeeper::over(socks[0]));
      ends.push_back(socks[1]);
    }
    thread = std::thread([ends, idle_ms] { run_uprobe_keeper(-1, ends, idle_ms); });
  }
  ~Keeper() {
    clients.clear();
    thread.join();
  }
  std::vector<std::unique_ptr<UprobeKeeper>> clients;
  std::thread thread;
};

TEST(UprobeKeeper, KeepsEventsWhileInUseAndDestroysThemAfterTheirIdleTime) {
  int event[2];
  ASSERT_EQ(pipe(event), 0);
  Keeper keeper(1, 500);
  ASSERT_TRUE(keeper.clients[0]->give(key(0x10), event[1]));
  close(event[1]);
  // In use by its client: kept, and not handed out again.
  EXPECT_FALSE(writer_gone(event[0], 700));
  EXPECT_EQ(keeper.clients[0]->take(key(0x10)), -1);
  keeper.clients.clear();
  // Idle: kept for 500 ms, then destroyed.
  EXPECT_FALSE(writer_gone(event[0], 200));
  EXPECT_TRUE(writer_gone(event[0], 5000));
  close(event[0]);
}

TEST(UprobeKeeper, IdleEventGoesToTheNextClientAndNothingIsDestroyedDuringAnAttach) {
  int event[2];
  ASSERT_EQ(pipe(event), 0);
  {
    Keeper keeper(2, 0);  // idle events are destroyed at once, unless someone attaches
    keeper.clients[1]->attaching(true);
    ASSERT_TRUE(keeper.clients[0]->give(key(0x30), event[1]));
    close(event[1]);
    keeper.clients[0].reset();  // idle now
    EXPECT_FALSE(writer_gone(event[0], 300));
    EXPECT_EQ(keeper.clients[1]->take(key(0x31)), -1);  // another offset
    const int again = keeper.clients[1]->take(key(0x30));
    ASSERT_GE(again, 0);
    EXPECT_EQ(inode_of(again), inode_of(event[0]));  // the same pipe
    close(again);
    keeper.clients[1]->attaching(false);
    EXPECT_FALSE(writer_gone(event[0], 200));  // in use by its new client
  }
  // Both clients gone, the event destroyed: the keeper returned.
  EXPECT_TRUE(writer_gone(event[0], 0));
  close(event[0]);
}

// A keeper that reads nothing (one killed mid-exit keeps its socket open
// while the kernel destroys its events): the question goes unanswered for
// kAnswerMs, then the keeper is never asked again.
TEST(UprobeKeeper, AKeeperThatDoesNotAnswerIsGivenUpAfterItsTime) {
  int socks[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, socks), 0);
  auto client = UprobeKeeper::over(socks[0]);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(client->take(key(0x40)), -1);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(UprobeKeeper::kAnswerMs - 100));
  EXPECT_LT(waited, std::chrono::milliseconds(UprobeKeeper::kAnswerMs * 5));
  EXPECT_FALSE(client->answering());
  // Not asked again: an answer arriving now would be read as the next one's.
  const char late = 'y';
  ASSERT_EQ(write(socks[1], &late, 1), 1);
  EXPECT_EQ(client->take(key(0x40)), -1);
  close(socks[1]);
}

}  // namespace
}  // namespace cudatrace
