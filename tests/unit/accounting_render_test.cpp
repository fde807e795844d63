// What tracing cost, as the text and JSON formats write it (render/text.h,
// render/json_format.h): the exit lines, the end line's "overhead" object.
#include <gtest/gtest.h>

#include <string>

#include "cudatrace/accounting.h"
#include "cudatrace/render/json_format.h"
#include "cudatrace/render/text.h"
#include "json_checker.h"
#include "probe_costs.h"

namespace {

using namespace cudatrace;

const auto cost = cudatrace_test::probe_cost;

TEST(CostRender, TextAndJson) {
  CostReport r;
  r.per_hit = cost(500, 300, 9000);
  r.workload_factor = 1.5;
  ProcessCost p;
  p.pid = 812;
  p.comm = "python3";
  p.entry_hits = 45012;
  p.return_hits = 45012;
  p.added_ns = 41.2e6;
  p.cpu_ns = 2168421052;
  r.processes.push_back(p);
  ProcessCost gone = p;
  gone.pid = 9;
  gone.comm = "a\"b";
  gone.added_ns = 1e6;
  gone.cpu_ns.reset();
  r.processes.push_back(gone);
  fmt::memory_buffer text;
  append_cost_text(text, r);
  EXPECT_EQ(fmt::to_string(text),
            "cudatrace: added \u2248 41.2 ms of CPU time to python3 (PID 812), 1.9 % of its CPU time while traced "
            "(90,024 probe hits)\n"
            "cudatrace: added \u2248 1.0 ms of CPU time to a\"b (PID 9) (90,024 probe hits)\n");
  fmt::memory_buffer json;
  append_cost_json(json, r);
  const std::string s = fmt::to_string(json);
  cudatrace_test::JsonValue v;
  std::string err;
  ASSERT_TRUE(cudatrace_test::JsonParser::parse(s, v, err)) << err << "\n" << s;
  EXPECT_EQ(s,
            R"({"entry_ns":500.0,"return_ns":300.0,"stepped_ns":9000.0,"entry_wall_ns":500.0,"return_wall_ns":300.0,)"
            R"("stepped_wall_ns":9000.0,"workload_factor":1.5,"processes":[)"
            R"({"pid":812,"comm":"python3","entry_hits":45012,"stepped_hits":0,"return_hits":45012,"added_ns":41200000,)"
            R"("cpu_ns":2168421052,"added_pct":1.900},)"
            R"({"pid":9,"comm":"a\"b","entry_hits":45012,"stepped_hits":0,"return_hits":45012,"added_ns":1000000,"cpu_ns":null,)"
            R"("added_pct":null}]})");
}

TEST(CostRender, WaitForTheTracerHasALineAndFieldsOfItsOwn) {
  CostReport r;
  r.per_hit = cost(500, 300, 9000);
  ProcessCost p;
  p.pid = 812;
  p.comm = "app";
  p.entry_hits = p.return_hits = 1000;
  p.added_ns = 2e6;
  p.cpu_ns = 100000000;
  p.waited_ns = 35e6;
  r.processes.push_back(p);
  fmt::memory_buffer text;
  append_cost_text(text, r);
  EXPECT_EQ(fmt::to_string(text),
            "cudatrace: added \u2248 2.0 ms of CPU time to app (PID 812), 2.0 % of its CPU time while traced "
            "(2,000 probe hits)\n"
            "cudatrace: app (PID 812) also waited \u2248 35.0 ms for the CPUs it shares with cudatrace, 35.0 % of its "
            "CPU time\n");
  fmt::memory_buffer json;
  append_cost_json(json, r);
  const std::string s = fmt::to_string(json);
  EXPECT_NE(s.find(R"("cpu_ns":100000000,"added_pct":2.000,"waited_ns":35000000,"waited_pct":35.000})"),
            std::string::npos)
      << s;
}

TEST(CostRender, BudgetTextAndJson) {
  BudgetReport r;
  r.safety_factor = 2;
  r.max_pct = 1;
  r.estimated_cost_pct = 0.93;
  r.attached_pct = 4.5;
  r.seen_ratio = 0.037;
  r.switches = 12;
  r.attach_ms_max = 1.25;
  r.detach_ms_max = 60;
  r.sampled_apis = {"cuLaunchKernel", "cudaLaunchKernel"};
  CostReport with_budget;
  with_budget.budget = r;
  fmt::memory_buffer text;
  append_cost_text(text, with_budget);
  EXPECT_EQ(fmt::to_string(text),
            "cudatrace: --max-overhead 1 %: estimated cost 0.93 % (hits priced at 2x the start-up measurement); "
            "2 launch-rate APIs (cuLaunchKernel, cudaLaunchKernel) traced in sampled windows, 4.5 % of the time "
            "(switched 12 times, the slowest attach 1.2 ms, detach 60.0 ms): their counts are estimates from "
            "3.70 % of their calls (marked ~)\n");
  fmt::memory_buffer json;
  append_cost_json(json, with_budget);
  const std::string s = fmt::to_string(json);
  cudatrace_test::JsonValue whole;
  std::string err;
  ASSERT_TRUE(cudatrace_test::JsonParser::parse(s, whole, err)) << err << "\n" << s;
  ASSERT_TRUE(whole.has("budget")) << s;
  const cudatrace_test::JsonValue& v = *whole.get("budget");
  ASSERT_TRUE(v.has("estimated_apis"));
  EXPECT_EQ(v.get("estimated_apis")->items.size(), 2u);
  EXPECT_EQ(v.get("seen_ratio")->text, "0.037000");

  CostReport exact;
  exact.budget = BudgetReport{};
  exact.budget->max_pct = 2;
  exact.budget->safety_factor = 2;
  exact.budget->estimated_cost_pct = 0.5;
  fmt::memory_buffer exact_text;
  append_cost_text(exact_text, exact);
  EXPECT_EQ(fmt::to_string(exact_text),
            "cudatrace: --max-overhead 2 %: estimated cost 0.50 % (hits priced at 2x the start-up measurement), "
            "every call traced\n");
}

}  // namespace
