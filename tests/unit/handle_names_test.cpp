// HandleNames reads the driver's objects in a process's memory: here, objects
// of this test's own memory, laid out as a driver might lay them out.
#include "cudatrace/target/handle_names.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace cudatrace {
namespace {

// A driver object: a pointer to its name `name_word` words in, other words around it.
struct Object {
  std::array<const void*, HandleNames::kWords> words{};  // all the words HandleNames reads
  Object(int name_word, const char* name, const char* other) {
    for (auto& w : words) w = other;
    words[name_word] = name;
  }
  std::uint64_t handle() const { return reinterpret_cast<std::uint64_t>(this); }
};

const char kOther[] = "a-module-path/with spaces";

TEST(HandleNames, LearnsTheWordThatNamesKnownHandlesAndNamesOthersByIt) {
  const pid_t self = getpid();
  const Object a(3, "_Z1av", kOther), b(3, "_Z1bv", kOther), c(3, "gemm_kernel_0", kOther);
  const Object unknown(3, "triton_poi_fused_0", kOther);
  HandleNames names;
  EXPECT_EQ(names.name_of(self, unknown.handle()), "") << "nothing learnt: nothing named";
  EXPECT_FALSE(names.learn(self, a.handle(), "_Z1av"));
  EXPECT_FALSE(names.learn(self, b.handle(), "_Z1bv"));
  EXPECT_EQ(names.name_of(self, unknown.handle()), "") << "two known handles are not enough";
  EXPECT_TRUE(names.learn(self, c.handle(), "gemm_kernel_0"));
  EXPECT_EQ(names.learnt_offset(self), 24);
  EXPECT_EQ(names.name_of(self, unknown.handle()), "triton_poi_fused_0");
  EXPECT_EQ(names.learnt_offset(self + 1), -1) << "learnt per process";
}

TEST(HandleNames, NamesNothingButAnIdentifier) {
  const pid_t self = getpid();
  const Object a(1, "_Z1av", kOther), b(1, "_Z1bv", kOther), c(1, "_Z1cv", kOther);
  HandleNames names;
  names.learn(self, a.handle(), "_Z1av");
  names.learn(self, b.handle(), "_Z1bv");
  ASSERT_TRUE(names.learn(self, c.handle(), "_Z1cv"));
  const Object spaces(1, "not a name", kOther), empty(1, "", kOther), null(0, "_Z1dv", kOther);
  EXPECT_EQ(names.name_of(self, spaces.handle()), "");
  EXPECT_EQ(names.name_of(self, empty.handle()), "");
  EXPECT_EQ(names.name_of(self, null.handle()), "") << "word 1 points to the other string";
  EXPECT_EQ(names.name_of(self, 0x10), "") << "no memory there";
}

// Known handles of two layouts: no word names (nearly) all of them, so none is used.
TEST(HandleNames, KnownHandlesThatDisagreeTeachNothing) {
  const pid_t self = getpid();
  std::vector<Object> objects;
  objects.reserve(8);
  const std::vector<std::string> mangled = {"_Z1av", "_Z1bv", "_Z1cv", "_Z1dv", "_Z1ev", "_Z1fv", "_Z1gv", "_Z1hv"};
  for (std::size_t i = 0; i < mangled.size(); ++i) objects.emplace_back(i % 2 ? 2 : 5, mangled[i].c_str(), kOther);
  HandleNames names;
  for (std::size_t i = 0; i < objects.size(); ++i) EXPECT_FALSE(names.learn(self, objects[i].handle(), mangled[i]));
  EXPECT_EQ(names.learnt_offset(self), -1);
}

// A word that once points to another kernel's name is never used: it would name wrongly.
TEST(HandleNames, AWordThatNamesAnotherKernelIsNeverUsed) {
  const pid_t self = getpid();
  std::vector<std::string> mangled;
  for (int i = 0; i < 20; ++i) mangled.push_back("_Z5good" + std::string(1, char('a' + i)) + "v");
  std::vector<Object> objects;
  objects.reserve(mangled.size());
  for (const std::string& m : mangled) objects.emplace_back(4, m.c_str(), kOther);
  const Object wrong(4, "_Z5otherv", kOther);
  HandleNames names;
  EXPECT_FALSE(names.learn(self, wrong.handle(), "_Z4goodv"));
  for (std::size_t i = 0; i < objects.size(); ++i) EXPECT_FALSE(names.learn(self, objects[i].handle(), mangled[i]));
  EXPECT_EQ(names.learnt_offset(self), -1);
}

// No known handle (all made before attach): the unknown ones teach the word
// that gives each of them a different kernel-like name.
TEST(HandleNames, UnknownHandlesTeachTheWordThatNamesEachDifferently) {
  const pid_t self = getpid();
  const Object a(2, "triton_poi_fused_add_0", kOther), b(2, "triton_red_fused_sum_1", kOther),
      c(2, "_ZN3xla4gemmEv", kOther), d(2, "loop_add_fusion.1", kOther);
  HandleNames names;
  EXPECT_FALSE(names.observe(self, a.handle()));
  EXPECT_FALSE(names.observe(self, b.handle()));
  EXPECT_EQ(names.name_of(self, d.handle()), "") << "two handles are not enough";
  EXPECT_TRUE(names.observe(self, c.handle()));
  EXPECT_EQ(names.learnt_offset(self), 16);
  EXPECT_EQ(names.name_of(self, d.handle()), "loop_add_fusion.1");
}

// A field the kernels share (their module's name), or a few stray bytes, is no name.
TEST(HandleNames, ASharedStringOrStrayBytesTeachNothing) {
  const pid_t self = getpid();
  const char* const stray[] = {"A", "1", "x7"};
  std::vector<Object> objects;
  for (const char* s : stray) objects.emplace_back(5, s, "module_main");
  HandleNames names;
  for (const Object& o : objects) EXPECT_FALSE(names.observe(self, o.handle()));
  EXPECT_EQ(names.learnt_offset(self), -1);
}

// Two words that name the unknown handles differently: neither is trusted;
// two that always say the same are one.
TEST(HandleNames, TwoReadingsOfUnknownHandlesTeachNothing) {
  const pid_t self = getpid();
  const char* const first[] = {"_Z1av", "_Z1bv", "_Z1cv", "_Z1dv"};
  const char* const second[] = {"kernel_p", "kernel_q", "kernel_r", "kernel_s"};
  std::vector<Object> two, same;
  for (int i = 0; i < 4; ++i) {
    two.emplace_back(1, first[i], kOther);
    two.back().words[6] = second[i];
    same.emplace_back(1, first[i], kOther);
    same.back().words[6] = first[i];
  }
  HandleNames ambiguous, agreeing;
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(ambiguous.observe(self, two[i].handle()));
    agreeing.observe(self, same[i].handle());
  }
  EXPECT_EQ(ambiguous.learnt_offset(self), -1);
  EXPECT_EQ(agreeing.learnt_offset(self), 8);
}

// A known handle that the word names wrongly rules it out for unknown ones too.
TEST(HandleNames, AKnownHandleOverrulesUnknownOnes) {
  const pid_t self = getpid();
  const Object known(3, "_Z5otherv", kOther);
  const Object a(3, "_Z1av", kOther), b(3, "_Z1bv", kOther), c(3, "_Z1cv", kOther);
  HandleNames names;
  EXPECT_FALSE(names.learn(self, known.handle(), "_Z5knownv"));
  for (const Object* o : {&a, &b, &c}) EXPECT_FALSE(names.observe(self, o->handle()));
  EXPECT_EQ(names.learnt_offset(self), -1);
}

// Known handles whose objects point to their names nowhere (a static
// runtime's own handles, as JAX's libraries keep) are no evidence either way.
TEST(HandleNames, KnownHandlesThatAreNoDriverObjectsAreIgnored) {
  const pid_t self = getpid();
  std::vector<Object> runtime_handles;
  runtime_handles.reserve(40);
  for (int i = 0; i < 40; ++i) runtime_handles.emplace_back(0, kOther, kOther);
  const Object a(1, "loop_add_fusion", kOther), b(1, "input_reduce_fusion", kOther), c(1, "gemm_fusion_dot", kOther);
  HandleNames names;
  for (const Object& o : runtime_handles) EXPECT_FALSE(names.learn(self, o.handle(), "_Z6kernelv"));
  EXPECT_FALSE(names.observe(self, a.handle()));
  EXPECT_FALSE(names.observe(self, b.handle()));
  EXPECT_TRUE(names.observe(self, c.handle()));
  EXPECT_EQ(names.learnt_offset(self), 8);
}

TEST(HandleNames, KernelIdentifiers) {
  EXPECT_TRUE(kernel_identifier("_ZN2at6native18elementwise_kernelILi128ELi2EEEviT1_"));
  EXPECT_TRUE(kernel_identifier("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"));
  EXPECT_TRUE(kernel_identifier("loop_add_fusion.1"));
  EXPECT_FALSE(kernel_identifier(""));
  EXPECT_FALSE(kernel_identifier("void f()"));
  EXPECT_FALSE(kernel_identifier("/usr/lib/libcuda.so"));
}

}  // namespace
}  // namespace cudatrace
