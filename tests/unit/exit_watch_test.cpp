// The processes and threads the recorder forgets: found gone at one look,
// told at the next, a second on.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cudatrace/record/record_reader.h"

namespace {

using cudatrace::ExitWatch;

constexpr std::uint32_t kGonePid = 4194303;  // the highest pid Linux gives: not running here
constexpr std::uint64_t kSecond = 1000000000ull;

TEST(ExitWatch, TellsAnExitedProcessOneLookAfterItWasFound) {
  const auto self = static_cast<std::uint32_t>(getpid());
  ExitWatch watch;
  watch.saw(self, static_cast<std::uint32_t>(syscall(SYS_gettid)));
  watch.saw(kGonePid, kGonePid);
  const std::optional<ExitWatch::Gone> first = watch.take_due(kSecond);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->processes.empty()) << "nothing was looked for yet";
  watch.look({});
  EXPECT_FALSE(watch.take_due(kSecond + 1)) << "at most one look a second";
  const std::optional<ExitWatch::Gone> second = watch.take_due(2 * kSecond);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->processes, std::vector<pid_t>{static_cast<pid_t>(kGonePid)});
  EXPECT_TRUE(second->threads.empty()) << "this process's thread runs";
  watch.look({});
  const std::optional<ExitWatch::Gone> third = watch.take_due(3 * kSecond);
  ASSERT_TRUE(third);
  EXPECT_TRUE(third->processes.empty()) << "told once: no longer tracked";
}

TEST(ExitWatch, LooksAtMappedProcessesTooAndTellsExitedThreads) {
  const auto self = static_cast<std::uint32_t>(getpid());
  ExitWatch watch;
  watch.saw(self, kGonePid);  // a thread of this process that is no more
  watch.take_due(kSecond);
  watch.look({static_cast<pid_t>(kGonePid - 1)});
  const std::optional<ExitWatch::Gone> gone = watch.take_due(2 * kSecond);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->processes, std::vector<pid_t>{static_cast<pid_t>(kGonePid - 1)});
  ASSERT_EQ(gone->threads.size(), 1u);
  EXPECT_EQ(gone->threads[0], std::make_pair(self, kGonePid));
}

}  // namespace
