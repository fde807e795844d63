#include "cudatrace/target/stacks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "analysis_calls.h"
#include "cudatrace/target/symbolizer.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"
#include "json_checker.h"

namespace cudatrace_stack_test {
// A C++ function with a known address in this binary.
__attribute__((noinline, used)) int stack_test_function(int x) {
  asm volatile("" ::: "memory");
  return x * 3 + 1;
}
}  // namespace cudatrace_stack_test

namespace {

using namespace cudatrace;

std::uint64_t function_addr() { return reinterpret_cast<std::uint64_t>(&cudatrace_stack_test::stack_test_function); }

TEST(Stacks, RecordStackFollowsThePayloadAtEightByteAlignment) {
  cudatrace_test::RecBuf b;
  cudatrace_test::init_rec(b, "cuModuleGetFunction");
  cudatrace_test::set_string_payload(b, "kernel");  // 7 bytes: the stack's section starts at 8
  EXPECT_TRUE(record_stack(b.rec).empty());
  const std::uint64_t frames[] = {0x401234, 0x405678};
  cudatrace_test::add_section(b, CT_SECTION_STACK, frames, sizeof frames);
  std::uint64_t at_8[3];
  std::memcpy(at_8, b.payload + 8, sizeof at_8);
  EXPECT_EQ(at_8[0], CT_SECTION_STACK | std::uint64_t(sizeof frames) << 32);  // its header
  EXPECT_EQ(at_8[1], 0x401234u);
  EXPECT_EQ(record_stack(b.rec), (std::vector<std::uint64_t>{0x401234, 0x405678}));
}

TEST(Stacks, ReturnAddressInsideAFunctionNamesItDemangled) {
  Symbolizer symbolizer;
  StackSymbolizer stacks(symbolizer);
  // A return address 5 bytes into the function: the call is before it.
  const StackFrame f = stacks.frame(getpid(), function_addr() + 5);
  EXPECT_EQ(f.function, "cudatrace_stack_test::stack_test_function(int)");
  EXPECT_EQ(f.function_offset, 5u);
  EXPECT_NE(f.module.find("unit_tests"), std::string::npos) << f.module;
  EXPECT_EQ(frame_text(f), "cudatrace_stack_test::stack_test_function(int)+0x5 (unit_tests)");
}

TEST(Stacks, ReturnAddressIsLookedUpOneByteBefore) {
  // A call as the last instruction: the return address is the next function's start.
  Symbolizer symbolizer;
  StackSymbolizer stacks(symbolizer);
  const StackFrame f = stacks.frame(getpid(), function_addr());
  EXPECT_NE(f.function, "cudatrace_stack_test::stack_test_function(int)");
}

TEST(Stacks, UnmappedAddressAndModuleFallback) {
  Symbolizer symbolizer;
  StackSymbolizer stacks(symbolizer);
  const StackFrame none = stacks.frame(getpid(), 0x10);
  EXPECT_TRUE(none.function.empty());
  EXPECT_TRUE(none.module.empty());
  EXPECT_EQ(frame_text(none), "?");
  StackFrame module_only;
  module_only.module = "/usr/lib/libfoo.so";
  module_only.module_offset = 0x1234;
  EXPECT_EQ(frame_text(module_only), "libfoo.so+0x1234");
}

TEST(Stacks, TextAndJsonForms) {
  std::vector<StackFrame> stack(2);
  stack[0] = {0x401234, "main", 0x1c, "/bin/app", 0x1234};
  stack[1] = {0x7f0000001000, "", 0, "", 0};
  fmt::memory_buffer text;
  append_stack_text(text, stack, 4);
  EXPECT_EQ(fmt::to_string(text),
            "    #0  0x0000000000401234 main+0x1c (app)\n"
            "    #1  0x00007f0000001000 ?\n");
  fmt::memory_buffer json;
  append_stack_json(json, stack);
  const std::string doc = fmt::to_string(json);
  EXPECT_EQ(doc,
            "[{\"addr\":\"0x401234\",\"function\":\"main\",\"function_offset\":28,\"module\":\"/bin/app\","
            "\"module_offset\":4660},{\"addr\":\"0x7f0000001000\",\"function\":null,\"function_offset\":null,"
            "\"module\":null,\"module_offset\":null}]");
  EXPECT_TRUE(cudatrace_test::JsonParser::valid(doc));
}

}  // namespace
