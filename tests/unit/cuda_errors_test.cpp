#include "cudatrace/decode/cuda_errors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

namespace {

using cudatrace::cuda_error_name;
using cudatrace::Layer;
namespace detail = cudatrace::detail;

TEST(CudaErrors, RuntimeNames) {
  EXPECT_STREQ(cuda_error_name(Layer::Runtime, 0), "cudaSuccess");
  EXPECT_STREQ(cuda_error_name(Layer::Runtime, 1), "cudaErrorInvalidValue");
  EXPECT_STREQ(cuda_error_name(Layer::Runtime, 2), "cudaErrorMemoryAllocation");
  EXPECT_STREQ(cuda_error_name(Layer::Runtime, 35), "cudaErrorInsufficientDriver");
  EXPECT_STREQ(cuda_error_name(Layer::Runtime, 600), "cudaErrorNotReady");
  EXPECT_STREQ(cuda_error_name(Layer::Runtime, 999), "cudaErrorUnknown");
}

TEST(CudaErrors, RuntimeUnknownValues) {
  EXPECT_EQ(cuda_error_name(Layer::Runtime, 12345), nullptr);
  EXPECT_EQ(cuda_error_name(Layer::Runtime, -1), nullptr);
  EXPECT_EQ(cuda_error_name(Layer::Runtime, 10), nullptr);  // a gap in the enum
  EXPECT_EQ(cuda_error_name(Layer::Runtime, std::int64_t(1) << 32), nullptr);  // not 0 after truncation
}

TEST(CudaErrors, DriverNames) {
  EXPECT_STREQ(cuda_error_name(Layer::Driver, 0), "CUDA_SUCCESS");
  EXPECT_STREQ(cuda_error_name(Layer::Driver, 1), "CUDA_ERROR_INVALID_VALUE");
  EXPECT_STREQ(cuda_error_name(Layer::Driver, 100), "CUDA_ERROR_NO_DEVICE");
  EXPECT_STREQ(cuda_error_name(Layer::Driver, 600), "CUDA_ERROR_NOT_READY");
  EXPECT_STREQ(cuda_error_name(Layer::Driver, 700), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_STREQ(cuda_error_name(Layer::Driver, 999), "CUDA_ERROR_UNKNOWN");
  EXPECT_EQ(cuda_error_name(Layer::Driver, 12345), nullptr);
  EXPECT_EQ(cuda_error_name(Layer::Driver, -1), nullptr);
}

TEST(CudaErrors, LayersDoNotShareTables) {
  EXPECT_STRNE(cuda_error_name(Layer::Runtime, 1), cuda_error_name(Layer::Driver, 1));
  // 35 is a runtime code; the driver has no 35.
  EXPECT_EQ(cuda_error_name(Layer::Driver, 35), nullptr);
}

void check_sorted(const std::pair<int, const char*>* table, std::size_t n, const char* prefix) {
  ASSERT_GT(n, 10u);
  std::set<std::string> names;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_NE(table[i].second, nullptr) << i;
    EXPECT_EQ(std::strncmp(table[i].second, prefix, std::strlen(prefix)), 0) << table[i].second;
    EXPECT_TRUE(names.insert(table[i].second).second) << "duplicate name " << table[i].second;
    if (i > 0) {
      EXPECT_LT(table[i - 1].first, table[i].first) << "at index " << i << " (" << table[i].second << ")";
    }
  }
}

TEST(CudaErrors, RuntimeTableIsStrictlySortedByValue) {
  check_sorted(detail::kRuntimeErrors, detail::kRuntimeErrorCount, "cuda");
}

TEST(CudaErrors, DriverTableIsStrictlySortedByValue) {
  check_sorted(detail::kDriverErrors, detail::kDriverErrorCount, "CUDA_");
}

TEST(CudaErrors, EveryTableEntryIsFoundByLookup) {
  for (std::size_t i = 0; i < detail::kRuntimeErrorCount; ++i)
    EXPECT_EQ(cuda_error_name(Layer::Runtime, detail::kRuntimeErrors[i].first), detail::kRuntimeErrors[i].second);
  for (std::size_t i = 0; i < detail::kDriverErrorCount; ++i)
    EXPECT_EQ(cuda_error_name(Layer::Driver, detail::kDriverErrors[i].first), detail::kDriverErrors[i].second);
}

}  // namespace
