// Text dump and Graphviz DOT export of a graph.
#include <sstream>

#include "minitensor/graph/detail/ir.h"

namespace mt {

using detail::NodeData;
using detail::OpKind;

namespace {

std::string input_list(const detail::GraphData& g, const NodeData& n) {
  std::string s;
  for (size_t i = 0; i < n.inputs.size(); ++i) s += detail::str(i ? ", " : "", g.label(n.inputs[i]));
  return s;
}

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string Graph::dump() const {
  const detail::GraphData& g = data();
  std::ostringstream os;
  os << "graph: " << g.nodes.size() << " nodes, " << g.outputs.size() << " outputs\n";
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const NodeData& n = g.at(id);
    os << "  " << g.label(id) << " = " << detail::node_op_string(n);
    if (!n.inputs.empty()) os << "(" << input_list(g, n) << ")";
    os << " -> " << n.shape << " " << n.dtype << "\n";
  }
  for (const auto& [name, id] : g.outputs) os << "  output '" << name << "' = " << g.label(id) << "\n";
  return os.str();
}

std::string Graph::to_dot() const {
  const detail::GraphData& g = data();
  std::ostringstream os;
  os << "digraph minitensor {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  for (int id = 0; id < static_cast<int>(g.nodes.size()); ++id) {
    const NodeData& n = g.at(id);
    const char* shape = n.kind == OpKind::Input ? "invhouse" : n.is_leaf() ? "box" : "ellipse";
    const char* color = n.kind == OpKind::Input ? "lightblue"
                        : n.is_leaf()           ? "lightgrey"
                        : n.is_elementwise()    ? "palegreen"
                        : n.kind == OpKind::Matmul || n.kind == OpKind::Linear || n.kind == OpKind::Gemm
                            ? "orange"
                            : "khaki";
    os << "  n" << id << " [shape=" << shape << ", style=filled, fillcolor=" << color << ", label=\""
       << dot_escape(g.label(id)) << "\\n"
       << dot_escape(detail::node_op_string(n)) << "\\n"
       << n.shape.str() << " " << dtype_name(n.dtype) << "\"];\n";
    for (int in : n.inputs) os << "  n" << in << " -> n" << id << ";\n";
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    os << "  out" << i << " [shape=house, style=filled, fillcolor=lightpink, label=\""
       << dot_escape(g.outputs[i].first) << "\"];\n";
    os << "  n" << g.outputs[i].second << " -> out" << i << ";\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace mt
