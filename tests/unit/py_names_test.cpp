// PyNames (--py-stack): a frame is named only from a code object that still
// has the identity its record took at the call, and is alive; otherwise it
// is unnamed and counted (issue 47: CPython puts new code objects where
// freed ones were). The code objects here are laid out in this process's
// own memory as CPython 3.11 (identity: the name, file and line table
// objects' addresses) and 3.12 (co_version) lay theirs out.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "cudatrace/target/python.h"

namespace cudatrace {
namespace {

// Objects of one fake interpreter, each in a zeroed, aligned block.
class Heap {
 public:
  explicit Heap(const PyCodeLayout& l) : l_(l) {
    type_ = block();
    put(type_, 24, reinterpret_cast<std::uint64_t>("code"));
  }
  // A compact ASCII str.
  std::uint8_t* str(const std::string& s) {
    std::uint8_t* o = block();
    put(o, 0, std::uint64_t(1));
    put(o, 16, std::int64_t(s.size()));
    put(o, 32, std::uint32_t((1 << 2) | (1 << 5) | (1 << 6)));  // kind 1, compact, ascii
    std::memcpy(o + l_.ascii_size, s.data(), s.size());
    return o;
  }
  std::uint8_t* bytes(const std::string& s) {
    std::uint8_t* o = block();
    put(o, 0, std::uint64_t(1));
    put(o, 16, std::int64_t(s.size()));
    std::memcpy(o + 32, s.data(), s.size());
    return o;
  }
  // Makes `at` (or a new block) a live code object.
  std::uint8_t* code(const std::string& func, const std::string& file, int firstlineno, std::uint32_t version,
                     std::uint8_t* at = nullptr) {
    std::uint8_t* o = at ? at : block();
    std::memset(o, 0, kBlock);
    put(o, 0, std::uint64_t(1));
    put(o, 8, reinterpret_cast<std::uint64_t>(type_));
    put(o, l_.firstlineno, std::int32_t(firstlineno));
    put(o, l_.filename, reinterpret_cast<std::uint64_t>(str(file)));
    put(o, l_.name, reinterpret_cast<std::uint64_t>(str(func)));
    if (l_.qualname) put(o, l_.qualname, reinterpret_cast<std::uint64_t>(str(func)));
    // The first instruction is at firstlineno + 1: 3.10's (2 bytes, +1 line) pair; 3.11+'s
    // location entry of code 13 (a line, no columns), 2 bytes, +1 line.
    put(o, l_.linetable, reinterpret_cast<std::uint64_t>(bytes(l_.minor == 10 ? "\x02\x01" : "\xe8\x02")));
    if (l_.version) put(o, l_.version, version);
    return o;
  }
  // The record of a call from the first instruction of `code`, as BPF makes it now.
  ct_py_frame frame(const std::uint8_t* code) const {
    const auto addr = reinterpret_cast<std::uint64_t>(code);
    const std::uint64_t instr = l_.minor == 10 ? 0 : addr + l_.code_adaptive;  // f_lasti, or a pointer
    return {addr, instr, ct_py_ident(code + l_.ident_at, l_.ident_len)};
  }
  template <typename T>
  static void put(std::uint8_t* o, std::uint32_t off, T v) {
    std::memcpy(o + off, &v, sizeof v);
  }

 private:
  static constexpr std::size_t kBlock = 512;
  std::uint8_t* block() {
    blocks_.emplace_back();
    return blocks_.back().data;
  }
  struct alignas(16) Block {
    std::uint8_t data[kBlock] = {};
  };
  const PyCodeLayout& l_;
  std::deque<Block> blocks_;
  std::uint8_t* type_;
};

std::vector<PyFrame> name(PyNames& names, const ct_py_frame& f) {
  std::vector<PyFrame> out;
  names.name(getpid(), &f, 1, out);
  return out;
}

void expect_named(const std::vector<PyFrame>& got, const std::string& func, const std::string& file, int line) {
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].func, func);
  EXPECT_EQ(got[0].file, file);
  EXPECT_EQ(got[0].line, line);
}

void expect_unnamed(const std::vector<PyFrame>& got) {
  ASSERT_EQ(got.size(), 1u);  // the frame keeps its place in the stack
  EXPECT_TRUE(got[0].unnamed()) << got[0].func << " " << got[0].file;
  EXPECT_EQ(got[0].line, 0);
}

class PyNamesTest : public ::testing::TestWithParam<int> {};

TEST_P(PyNamesTest, NamesOnlyTheCodeObjectTheCallRan) {
  const auto layout = py_code_layout(GetParam());
  ASSERT_TRUE(layout);
  Heap heap(*layout);
  PyNames names;
  names.set(getpid(), *layout);

  std::uint8_t* code = heap.code("h399", "gen_399.py", 10, 7);
  const ct_py_frame h399 = heap.frame(code);
  expect_named(name(names, h399), "h399", "gen_399.py", 11);
  expect_named(name(names, h399), "h399", "gen_399.py", 11);  // from the cache

  // h399 is freed and h413 takes its memory: a record of h399's read now is
  // not named h413, and h413's own is not named from h399's cache entry.
  heap.code("h413", "gen_413.py", 20, 8, code);
  const ct_py_frame h413 = heap.frame(code);
  ASSERT_NE(h413.ident, h399.ident);
  expect_named(name(names, h413), "h413", "gen_413.py", 21);
  expect_unnamed(name(names, h399));
  expect_named(name(names, h413), "h413", "gen_413.py", 21);
  EXPECT_EQ(names.unnamed(), 1u);

  // Freed and not yet reused: pymalloc's free list link where the
  // reference count was (an address, or null), or malloc's over the type.
  std::uint8_t* freed = heap.code("gone", "gone.py", 1, 9);
  const ct_py_frame gone = heap.frame(freed);
  Heap::put(freed, 0, reinterpret_cast<std::uint64_t>(code));
  expect_unnamed(name(names, gone));
  Heap::put(freed, 0, std::uint64_t(0));
  expect_unnamed(name(names, gone));
  Heap::put(freed, 0, std::uint64_t(1));
  Heap::put(freed, 8, std::uint64_t(0x5a5a5a5a5a5a5a5a));
  expect_unnamed(name(names, gone));
  // The identity not read at the call.
  expect_unnamed(name(names, {h413.code, h413.instr, 0}));
  EXPECT_EQ(names.unnamed(), 5u);
}

TEST(PyNames, VersionZeroTellsNothing) {
  const auto layout = py_code_layout(12);
  ASSERT_TRUE(layout);
  Heap heap(*layout);
  PyNames names;
  names.set(getpid(), *layout);
  // 3.12+ stop numbering code objects after 2^32 of them: 0 is every later one's.
  expect_unnamed(name(names, heap.frame(heap.code("late", "late.py", 1, 0))));
  expect_named(name(names, heap.frame(heap.code("early", "early.py", 1, 1))), "early", "early.py", 2);
}

INSTANTIATE_TEST_SUITE_P(Versions, PyNamesTest, ::testing::Values(10, 11, 12, 13),
                         [](const auto& info) { return "Python3_" + std::to_string(info.param); });

}  // namespace
}  // namespace cudatrace
