#include "cudatrace/cli/api_docs.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "json_checker.h"

namespace {

using namespace cudatrace;
using cudatrace_test::JsonParser;
using cudatrace_test::JsonValue;

Selection all_groups() {
  Selection s;
  for (bool& g : s.group) g = true;
  for (bool& l : s.layer) l = true;
  return s;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(ApiListJson, OneValidLinePerSelectedApi) {
  const std::string text = api_list_json(all_groups());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const auto lines = lines_of(text);
  ASSERT_EQ(lines.size(), apis().size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    JsonValue v;
    std::string err;
    ASSERT_TRUE(JsonParser::parse(lines[i], v, err)) << err << "\n" << lines[i];
    EXPECT_EQ(v.get("api")->text, apis()[i].symbol);
    EXPECT_EQ(v.get("args")->items.size(), apis()[i].spec->args.size());
  }
  EXPECT_NE(text.find(R"({"api":"cudaMalloc","layer":"runtime","group":"mem","variant":false,)"
                      R"("recorded":"entry and return","args":[{"name":"devPtr","type":"out ptr","ctype":"void **"},)"
                      R"x({"name":"size","type":"size","ctype":"size_t"}],"prototype":"cudaError_t cudaMalloc(void **devPtr, size_t size)"})x"
                      "\n"),
            std::string::npos);
  EXPECT_NE(text.find(R"({"api":"cudaMemcpyAsync_ptsz","layer":"runtime","group":"xfer","variant":true,)"),
            std::string::npos);
  EXPECT_NE(text.find(R"({"api":"cudaDeviceSynchronize","layer":"runtime","group":"device","variant":false,)"
                      R"x("recorded":"entry and return","args":[],"prototype":"cudaError_t cudaDeviceSynchronize(void)"})x"),
            std::string::npos);
  // Every call whole; a driver call without out-params that a runtime call makes is part of its record.
  EXPECT_NE(text.find(R"({"api":"cudaLaunchKernel","layer":"runtime","group":"launch","variant":false,)"
                      R"("recorded":"entry and return",)"),
            std::string::npos);
  EXPECT_NE(text.find(R"({"api":"cuLaunchKernel","layer":"driver","group":"launch","variant":false,)"
                      R"("recorded":"entry and return; inside a runtime call, by it",)"),
            std::string::npos);
  EXPECT_NE(text.find(R"({"api":"cuModuleGetFunction","layer":"driver","group":"module","variant":false,)"
                      R"("recorded":"entry and return",)"),
            std::string::npos)
      << "a driver call with an out-param is recorded for the models";
  EXPECT_EQ(text.find(R"("probed":)"), std::string::npos) << "every selected API is probed";
}

TEST(ApiListJson, SelectionFiltersByGroupAndLayer) {
  Selection s;
  s.group[static_cast<int>(Group::Launch)] = true;
  s.layer[static_cast<int>(Layer::Runtime)] = false;
  const auto lines = lines_of(api_list_json(s));
  ASSERT_FALSE(lines.empty());
  for (const std::string& l : lines) {
    JsonValue v;
    std::string err;
    ASSERT_TRUE(JsonParser::parse(l, v, err)) << err;
    EXPECT_EQ(v.get("layer")->text, "driver") << l;
    EXPECT_EQ(v.get("group")->text, "launch") << l;
  }
  EXPECT_EQ(api_list_json(Selection{}), "");  // no groups: nothing
}

TEST(ApiListMarkdown, SaysWhichGroupsAreTracedByDefaultAndWhy) {
  Selection s;
  s.group[static_cast<int>(Group::Mem)] = true;
  const std::string md = api_list_markdown(s);
  EXPECT_NE(md.find("\n| group | traced by default | APIs by layer | what, and why |\n"), std::string::npos);
  EXPECT_NE(md.find("\n| mem | yes | "), std::string::npos);
  EXPECT_NE(md.find("\n| query | no | "), std::string::npos) << "every group, listed or not";
  EXPECT_NE(md.find("\n| info | no | "), std::string::npos);
  EXPECT_NE(md.find("\n`-f all` selects every group. "), std::string::npos);
}

TEST(ApiListMarkdown, RowsForBaseSymbolsOnly) {
  const std::string md = api_list_markdown(all_groups());
  const auto lines = lines_of(md);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0], "| API | layer | group | recorded | arguments (CUDA names; `out` = read at return) |");
  EXPECT_EQ(lines[1], "| --- | --- | --- | --- | --- |");
  EXPECT_NE(md.find("\n| `cudaMalloc` | runtime | mem | entry and return | devPtr (out ptr), size (size) |\n"),
            std::string::npos);
  EXPECT_NE(md.find("| `cudaDeviceSynchronize` | runtime | device | entry and return | none |\n"), std::string::npos);
  EXPECT_NE(md.find("| `cudaLaunchKernel` (+ `_ptsz`) | runtime | launch | entry and return | "), std::string::npos);
  EXPECT_NE(md.find("| `cuLaunchKernel` (+ `_ptsz`) | driver | launch | entry and return; inside a runtime call, by it | "
                    "f (kernel), grid (dim3), block (dim3), sharedMemBytes (uint), "
                    "hStream (stream), kernelParams (ptr), extra (ptr) |\n"),
            std::string::npos);
  EXPECT_EQ(md.find("_ptsz` |"), std::string::npos);  // no variant rows
  std::size_t rows = 0;
  for (const std::string& l : lines)
    if (l.rfind("| `", 0) == 0) ++rows;
  EXPECT_EQ(rows, api_rows().size());
}

}  // namespace
