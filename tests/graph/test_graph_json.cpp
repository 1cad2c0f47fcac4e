// The graph layer's JSON: check reports, profiles, plan and executor stats, the executor summary, the memory
// plan and the Chrome trace. Each is parsed back (nlohmann-json, tests only) and compared with what it says.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "minitensor/graph/detail/executor_impl.h"
#include "minitensor/graph/graph.h"
#include "minitensor/ops/ops.h"
#include "tests/common/gpu.h"
#include "tests/common/json.h"

namespace mt {
namespace {

// Quotes, backslash, newline, tab, a control byte, DEL, UTF-8: what a name must survive in any JSON written.
const std::string kNastyName =
    "a\"q\\b\nc\td\x01"
    "e\x7f"
    "f caf\xc3\xa9 \xe2\x86\x92";

#if MT_TEST_HAVE_JSON_PARSER
using nlohmann::json;

// A double field: a number, or null for NaN / infinity.
void expect_number(const json& j, double want, const std::string& what) {
  if (std::isfinite(want)) {
    ASSERT_TRUE(j.is_number()) << what << ": " << j.dump();
    EXPECT_EQ(j.get<double>(), want) << what;
  } else {
    EXPECT_TRUE(j.is_null()) << what << ": " << j.dump();
  }
}

void expect_row(const json& j, const CheckRow& r) {
  EXPECT_EQ(j.at("node").get<int>(), r.node);
  EXPECT_EQ(j.at("label").get<std::string>(), r.label);
  EXPECT_EQ(j.at("op").get<std::string>(), r.op);
  EXPECT_EQ(j.at("shape").get<std::string>(), r.shape);
  expect_number(j.at("max_abs"), r.max_abs, "max_abs");
  expect_number(j.at("max_rel"), r.max_rel, "max_rel");
  expect_number(j.at("nmse"), r.nmse, "nmse");
  expect_number(j.at("tolerance"), r.tolerance, "tolerance");
  expect_number(j.at("scale"), r.scale, "scale");
  EXPECT_EQ(j.at("pass").get<bool>(), r.pass);
  EXPECT_EQ(j.at("note").get<std::string>(), r.note);
}
#endif

Graph two_output_graph(const std::string& hidden_name = "h") {
  Graph g;
  Node x = g.input("x", {3, 4});
  Node h = g.unary(UnaryOp::Relu, x * 2.0 + 1.0, hidden_name);
  g.output("y", g.softmax(h, -1));
  g.output("s", g.sum(h, 1));
  return g;
}

TEST(GraphJson, CheckReportOnCpu) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const Graph g = two_output_graph();
  ExecOptions options;
  options.device = Device::cpu();
  const CheckReport report = check(g, {{"x", randn({3, 4}, 7)}}, options);
  const json j = json::parse(to_json(report));
  EXPECT_EQ(j.at("ok").get<bool>(), report.ok);
  EXPECT_FALSE(j.at("compared").get<bool>());
  ASSERT_EQ(j.at("rows").size(), report.rows.size());
  ASSERT_EQ(report.rows.size(), 2u);
  for (std::size_t i = 0; i < report.rows.size(); ++i) expect_row(j.at("rows")[i], report.rows[i]);
#endif
}

// Every field of a row, non-finite errors as null, names escaped; keys in a fixed order.
TEST(GraphJson, CheckReportRowsKeepEveryField) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  CheckReport report;
  report.ok = false;
  CheckRow a{.node = 7,
             .label = "#7 '" + kNastyName + "'",
             .op = "fused[3] add",
             .shape = "(64, 512)",
             .max_abs = 1.0 / 3.0,
             .max_rel = 2.5e-7,
             .nmse = 1e-300,
             .tolerance = 1e-5,
             .scale = 12.0,
             .pass = true,
             .note = "fused into #7"};
  CheckRow b{.node = 9,
             .label = "#9",
             .op = "softmax",
             .shape = "(2)",
             .max_abs = std::numeric_limits<double>::quiet_NaN(),
             .max_rel = std::numeric_limits<double>::infinity(),
             .pass = false,
             .note = "end to end"};
  report.rows = {a, b};
  const std::string text = to_json(report);
  EXPECT_EQ(text.find('\n'), std::string::npos) << "compact: one line";
  EXPECT_EQ(text.rfind(R"({"ok":false,"compared":true,"rows":[{"node":7,"label":)", 0), 0u) << text;
  const json j = json::parse(text);
  ASSERT_EQ(j.at("rows").size(), 2u);
  expect_row(j.at("rows")[0], a);
  expect_row(j.at("rows")[1], b);
  EXPECT_EQ(j.at("rows")[0].size(), 11u);  // every field of CheckRow
#endif
}

TEST(GraphJson, PlanStatsExecStatsAndProfile) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const PlanStats plan{.arena_bytes = (std::size_t(1) << 40) + 256,
                       .unplanned_bytes = 4096,
                       .n_intermediates = 5,
                       .n_inplace = 2};
  json j = json::parse(to_json(plan));
  EXPECT_EQ(j.at("arena_bytes").get<std::uint64_t>(), plan.arena_bytes);
  EXPECT_EQ(j.at("unplanned_bytes").get<std::uint64_t>(), plan.unplanned_bytes);
  EXPECT_EQ(j.at("n_intermediates").get<int>(), 5);
  EXPECT_EQ(j.at("n_inplace").get<int>(), 2);

  const ExecStats stats{.n_runs = 10,
                        .n_plain_runs = 1,
                        .n_captures = 2,
                        .n_graph_updates = 3,
                        .n_reinstantiations = 4,
                        .n_replays = 5,
                        .n_pipelined_runs = 6,
                        .n_graph_edges = 7,
                        .n_programmatic_edges = 8,
                        .n_graph_kernels = 11};
  j = json::parse(to_json(stats));
  EXPECT_EQ(j.size(), 10u);
  EXPECT_EQ(j.at("n_runs").get<int>(), 10);
  EXPECT_EQ(j.at("n_plain_runs").get<int>(), 1);
  EXPECT_EQ(j.at("n_captures").get<int>(), 2);
  EXPECT_EQ(j.at("n_graph_updates").get<int>(), 3);
  EXPECT_EQ(j.at("n_reinstantiations").get<int>(), 4);
  EXPECT_EQ(j.at("n_replays").get<int>(), 5);
  EXPECT_EQ(j.at("n_pipelined_runs").get<int>(), 6);
  EXPECT_EQ(j.at("n_graph_edges").get<int>(), 7);
  EXPECT_EQ(j.at("n_programmatic_edges").get<int>(), 8);
  EXPECT_EQ(j.at("n_graph_kernels").get<int>(), 11);

  const std::vector<NodeTiming> profile = {
      {.label = "#3 '" + kNastyName + "'",
       .op = "fused[4] relu",
       .stream = 1,
       .start_us = 0.125,
       .duration_us = 17.0 / 3.0},
      {.label = "#5", .op = "softmax", .stream = 0, .start_us = 20.0, .duration_us = 4.5},
  };
  j = json::parse(to_json(profile));
  ASSERT_EQ(j.at("steps").size(), 2u);
  for (std::size_t i = 0; i < profile.size(); ++i) {
    const json& s = j.at("steps")[i];
    EXPECT_EQ(s.at("step").get<std::size_t>(), i);
    EXPECT_EQ(s.at("label").get<std::string>(), profile[i].label);
    EXPECT_EQ(s.at("op").get<std::string>(), profile[i].op);
    EXPECT_EQ(s.at("stream").get<int>(), profile[i].stream);
    EXPECT_EQ(s.at("start_us").get<double>(), profile[i].start_us);
    EXPECT_EQ(s.at("duration_us").get<double>(), profile[i].duration_us);
  }
  EXPECT_EQ(json::parse(to_json(std::vector<NodeTiming>{})).at("steps").size(), 0u);
#endif
}

// A CPU executor has no steps and no plan, but counts its runs.
TEST(GraphJson, ExecutorOnCpu) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const Graph g = two_output_graph();
  ExecOptions options;
  options.device = Device::cpu();
  Executor exec(g, options);
  exec.run({{"x", randn({3, 4}, 1)}});
  exec.run({{"x", randn({3, 4}, 2)}});
  const json j = json::parse(to_json(exec));
  EXPECT_EQ(j.at("device").get<std::string>(), "cpu");
  EXPECT_EQ(j.at("n_nodes").get<int>(), g.size());
  EXPECT_EQ(j.at("n_steps").get<int>(), exec.n_launches());
  EXPECT_EQ(j.at("steps").size(), 0u);
  EXPECT_EQ(j.at("stats").at("n_runs").get<int>(), 2);
  EXPECT_EQ(j.at("stats").at("n_plain_runs").get<int>(), 2);
  EXPECT_EQ(j.at("memory_plan").at("arena_bytes").get<std::uint64_t>(), exec.plan_stats().arena_bytes);
  EXPECT_EQ(j.at("memory_plan").at("nodes").size(), 0u);
  EXPECT_TRUE(j.at("warnings").is_array());
  EXPECT_EQ(json::parse(to_json(exec.stats())), j.at("stats"));
#endif
}

// The planner runs on the host: plan a real program and compare the JSON with the plan, node by node.
TEST(GraphJson, MemoryPlanMatchesThePlanner) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  Graph g;
  Node x = g.input("x", {8, 16});
  Node w = g.parameter("w", randn({16, 16}, 3));
  Node h = g.matmul(x, w, kNastyName);
  Node t = g.transpose(g.exp(h), 0, 1, "t");
  g.output("y", g.reshape(g.sum(t, 1), {2, 8}, "y"));
  using namespace detail;
  const Program p = build_program(g.data(), CompileFlags{});
  const MemoryPlan m = plan_memory(p, true, true);
  const json j = json::parse(to_json(p, m));
  EXPECT_EQ(j.at("arena_bytes").get<std::uint64_t>(), m.arena_bytes);
  EXPECT_EQ(j.at("persistent_bytes").get<std::uint64_t>(), m.persistent_bytes);
  EXPECT_EQ(j.at("unplanned_bytes").get<std::uint64_t>(), m.unplanned_bytes);
  EXPECT_EQ(j.at("n_intermediates").get<int>(), m.n_intermediates);
  EXPECT_EQ(j.at("n_inplace").get<int>(), m.n_inplace);
  const json& nodes = j.at("nodes");
  ASSERT_EQ(nodes.size(), p.order.size());
  const char* where_names[] = {"none", "leaf", "arena", "output", "alias"};
  int n_arena = 0, n_output = 0, n_alias = 0;
  bool saw_nasty = false;
  for (std::size_t k = 0; k < p.order.size(); ++k) {
    const int id = p.order[k];
    const json& n = nodes[k];
    const NodeData& nd = p.g.at(id);
    const auto where = m.where[static_cast<std::size_t>(id)];
    EXPECT_EQ(n.at("node").get<int>(), id);
    EXPECT_EQ(n.at("name").get<std::string>(), nd.name);
    saw_nasty = saw_nasty || nd.name == kNastyName;
    EXPECT_EQ(n.at("where").get<std::string>(), where_names[static_cast<int>(where)]);
    EXPECT_EQ(n.at("bytes").get<std::uint64_t>(),
              static_cast<std::uint64_t>(nd.shape.numel()) * dtype_size(nd.dtype));
    if (where == MemoryPlan::Where::Arena || where == MemoryPlan::Where::Persistent)
      EXPECT_EQ(n.at("offset").get<std::uint64_t>(), m.offset[static_cast<std::size_t>(id)]);
    else
      EXPECT_TRUE(n.at("offset").is_null());
    EXPECT_EQ(n.at("alias_of").get<int>(), m.alias_of[static_cast<std::size_t>(id)]);
    EXPECT_EQ(n.at("inplace_of").get<int>(), m.inplace_of[static_cast<std::size_t>(id)]);
    n_arena += where == MemoryPlan::Where::Arena;
    n_output += where == MemoryPlan::Where::Persistent;
    n_alias += where == MemoryPlan::Where::Alias;
  }
  EXPECT_TRUE(saw_nasty);
  EXPECT_GT(n_arena, 0) << p.order.size();
  EXPECT_EQ(n_output, 1);
  EXPECT_EQ(n_alias, 1);  // the reshape views its producer
#endif
}

// The Chrome trace escapes every string it writes: event names, categories, track names, the process name.
TEST(GraphJson, ChromeTraceEscapesNames) {
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const std::string invalid =
      "bad\xff"
      "byte";
  const std::vector<detail::TraceEvent> events = {
      {.name = "#1 '" + kNastyName + "' relu",
       .cat = "relu",
       .track = "stream 0",
       .ts_us = 1.5,
       .dur_us = 2.0},
      {.name = invalid, .cat = "c\"at", .track = "track\n" + kNastyName, .ts_us = -0.5, .dur_us = 0.25},
  };
  const std::string text = detail::chrome_trace_json(events, "minitensor \x01\"dev\"");
  const json j = json::parse(text);
  const json& ev = j.at("traceEvents");
  ASSERT_EQ(ev.size(), 1u + 2u + 2u);  // process name, two tracks, two events
  EXPECT_EQ(ev[0].at("args").at("name").get<std::string>(), "minitensor \x01\"dev\"");
  std::vector<std::string> tracks;
  for (int k = 1; k <= 2; ++k) tracks.push_back(ev[k].at("args").at("name").get<std::string>());
  EXPECT_NE(std::find(tracks.begin(), tracks.end(), "track\n" + kNastyName), tracks.end());
  EXPECT_EQ(ev[3].at("name").get<std::string>(), events[0].name);
  EXPECT_EQ(ev[3].at("ph").get<std::string>(), "X");
  EXPECT_DOUBLE_EQ(ev[3].at("ts").get<double>(), 2.0);  // shifted by the earliest start
  EXPECT_EQ(ev[4].at("name").get<std::string>(),
            "bad\xef\xbf\xbd"
            "byte");  // U+FFFD for the stray byte
  EXPECT_EQ(ev[4].at("cat").get<std::string>(), "c\"at");
  EXPECT_DOUBLE_EQ(ev[4].at("ts").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(ev[4].at("dur").get<double>(), 0.25);
#endif
}

// ---------------------------------------------------------------- CUDA
// A profiled run with a hostile node name: the trace file, the profile, the summary and the check report all
// parse, and carry the name intact.
TEST(GraphJsonCuda, ProfiledRunTraceAndSummaryParse) {
  MT_REQUIRE_GPU();
  MT_REQUIRE_JSON_PARSER();
#if MT_TEST_HAVE_JSON_PARSER
  const Graph g = two_output_graph(kNastyName);
  ExecOptions options;
  options.run.profile = true;
  Executor exec(g, options);
  const Tensor x = randn({3, 4}, 5).cuda();
  exec.run({{"x", x}});
  const auto path = std::filesystem::temp_directory_path() / "mt_test_json_trace.json";
  exec.write_trace(path.string());
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  std::filesystem::remove(path);
  const json trace = json::parse(text.str());
  bool found = false;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("name").get<std::string>().find(kNastyName) != std::string::npos)
      found = true;
  EXPECT_TRUE(found) << text.str();

  const json profile = json::parse(to_json(exec.last_profile()));
  ASSERT_EQ(profile.at("steps").size(), exec.last_profile().size());
  ASSERT_GT(exec.last_profile().size(), 0u);
  for (std::size_t i = 0; i < exec.last_profile().size(); ++i)
    EXPECT_EQ(profile.at("steps")[i].at("label").get<std::string>(), exec.last_profile()[i].label);

  const json summary = json::parse(to_json(exec));
  EXPECT_EQ(summary.at("device").get<std::string>(), "cuda:0");
  EXPECT_EQ(summary.at("steps").size(), static_cast<std::size_t>(exec.n_launches()));
  EXPECT_EQ(summary.at("memory_plan").at("arena_bytes").get<std::uint64_t>(), exec.plan_stats().arena_bytes);
  EXPECT_EQ(summary.at("memory_plan").at("n_intermediates").get<int>(), exec.plan_stats().n_intermediates);
  EXPECT_EQ(summary.at("stats"), json::parse(to_json(exec.stats())));
  EXPECT_EQ(summary.at("stats").at("n_runs").get<int>(), 1);

  const CheckReport report = check(g, {{"x", x.cpu()}});
  const json checked = json::parse(to_json(report));
  EXPECT_TRUE(checked.at("compared").get<bool>());
  EXPECT_EQ(checked.at("ok").get<bool>(), report.ok);
  ASSERT_EQ(checked.at("rows").size(), report.rows.size());
  for (std::size_t i = 0; i < report.rows.size(); ++i) expect_row(checked.at("rows")[i], report.rows[i]);
#endif
}

}  // namespace
}  // namespace mt
