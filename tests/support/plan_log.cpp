#include "support/plan_log.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace akadzed::test {

namespace {

// The end (one past the closing brace) of the JSON object starting at
// `start`, minding strings; npos when it does not close.
std::size_t ObjectEnd(const std::string& text, std::size_t start) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = start; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{') ++depth;
    else if (c == '}' && --depth == 0) return i + 1;
  }
  return std::string::npos;
}

void Collect(const nlohmann::json& node, std::vector<ScanNode>& out) {
  if (!node.is_object()) return;
  const std::string type = node.value("Node Type", "");
  if (node.contains("Relation Name") || node.contains("Index Name")) {
    ScanNode s;
    s.node_type = type;
    s.relation = node.value("Relation Name", "");
    s.index = node.value("Index Name", "");
    s.actual_rows = node.value("Actual Rows", 0.0);
    s.loops = node.value("Actual Loops", 0.0);
    s.shared_hit = node.value("Shared Hit Blocks", std::int64_t{0});
    s.shared_read = node.value("Shared Read Blocks", std::int64_t{0});
    out.push_back(std::move(s));
  }
  if (node.contains("Plans")) {
    for (const nlohmann::json& child : node["Plans"]) Collect(child, out);
  }
}

}  // namespace

std::vector<LoggedPlan> PlansInLog(const std::string& log_text) {
  std::vector<LoggedPlan> plans;
  for (std::size_t at = log_text.find("plan:"); at != std::string::npos; at = log_text.find("plan:", at + 5)) {
    const std::size_t start = log_text.find('{', at);
    if (start == std::string::npos) break;
    const std::size_t end = ObjectEnd(log_text, start);
    if (end == std::string::npos) break;
    const nlohmann::json entry = nlohmann::json::parse(log_text.substr(start, end - start), nullptr, false);
    if (entry.is_object() && entry.contains("Plan")) {
      plans.push_back({entry.value("Query Text", ""), entry["Plan"]});
    }
    at = end - 5;
  }
  return plans;
}

std::vector<ScanNode> ScanNodes(const nlohmann::json& plan) {
  std::vector<ScanNode> out;
  Collect(plan, out);
  return out;
}

std::uintmax_t FileSize(const std::string& path) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

std::string ReadFrom(const std::string& path, std::uintmax_t from) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(from));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace akadzed::test
