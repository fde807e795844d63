#include <gtest/gtest.h>
#include "cudatrace/api_table.h"
TEST(ApiTable, Builds) { EXPECT_GT(cudatrace::apis().size(), 100u); }
