#include "support/prometheus_text.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

namespace akadzed::test {

namespace {

bool NameStart(char c, bool colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool NameChar(char c, bool colon) { return NameStart(c, colon) || (c >= '0' && c <= '9'); }
bool Blank(char c) { return c == ' ' || c == '\t'; }
bool Digit(char c) { return c >= '0' && c <= '9'; }

// One line being read, left to right.
class Cursor {
 public:
  Cursor(std::string_view line, int number) : line_(line), number_(number) {}

  [[noreturn]] void Fail(const std::string& message) const {
    throw PrometheusTextError("line " + std::to_string(number_) + ": " + message);
  }
  bool AtEnd() const { return pos_ >= line_.size(); }
  char Peek() const { return AtEnd() ? '\0' : line_[pos_]; }
  std::string_view Rest() const { return line_.substr(std::min(pos_, line_.size())); }
  void Advance(std::size_t n = 1) { pos_ += n; }

  // A metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or a label name ([a-zA-Z_][a-zA-Z0-9_]*).
  std::string Name(bool metric, const char* what) {
    std::size_t start = pos_;
    if (AtEnd() || !NameStart(Peek(), metric)) Fail(std::string("expected ") + what);
    while (!AtEnd() && NameChar(Peek(), metric)) Advance();
    return std::string(line_.substr(start, pos_ - start));
  }
  // One or more blanks.
  void Blanks(const char* before) {
    if (AtEnd() || !Blank(Peek())) Fail(std::string("expected a blank before ") + before);
    while (!AtEnd() && Blank(Peek())) Advance();
  }
  // Up to the next blank or the end.
  std::string_view Token() {
    std::size_t start = pos_;
    while (!AtEnd() && !Blank(Peek())) Advance();
    return line_.substr(start, pos_ - start);
  }
  void Expect(char c, const char* what) {
    if (Peek() != c) Fail(std::string("expected ") + what);
    Advance();
  }

 private:
  std::string_view line_;
  std::size_t pos_ = 0;
  int number_;
};

// Decimal floats as Go's ParseFloat reads them (no hex, no underscores),
// and +Inf, -Inf, Inf, NaN.
std::optional<double> ParseNumber(std::string_view text) {
  if (text == "+Inf" || text == "Inf") return INFINITY;
  if (text == "-Inf") return -INFINITY;
  if (text == "NaN") return NAN;
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  std::size_t digits = 0;
  while (i < text.size() && Digit(text[i])) ++i, ++digits;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && Digit(text[i])) ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    std::size_t exponent = 0;
    while (i < text.size() && Digit(text[i])) ++i, ++exponent;
    if (exponent == 0) return std::nullopt;
  }
  if (i != text.size()) return std::nullopt;
  std::string copy(text);
  return std::strtod(copy.c_str(), nullptr);
}

std::optional<std::int64_t> ParseTimestamp(std::string_view text) {
  std::size_t i = text.starts_with('-') ? 1 : 0;
  if (i == text.size() || text.size() - i > 18) return std::nullopt;
  for (std::size_t k = i; k < text.size(); ++k) {
    if (!Digit(text[k])) return std::nullopt;
  }
  return std::stoll(std::string(text));
}

// HELP text: \\ and \n are the only escapes.
std::string UnescapeHelp(Cursor& c, std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (i + 1 == text.size()) c.Fail("HELP text ends in a lone backslash");
    char next = text[++i];
    if (next == '\\') {
      out += '\\';
    } else if (next == 'n') {
      out += '\n';
    } else {
      c.Fail(std::string("invalid escape \\") + next + " in HELP text");
    }
  }
  return out;
}

PromLabels ParseLabels(Cursor& c) {
  PromLabels labels;
  c.Expect('{', "{");
  if (c.Peek() == '}') {
    c.Advance();
    return labels;
  }
  for (;;) {
    std::string name = c.Name(false, "a label name");
    if (name.starts_with("__")) c.Fail("label name " + name + " is reserved (starts with __)");
    c.Expect('=', "= after the label name");
    c.Expect('"', "a quoted label value");
    std::string value;
    for (;;) {
      if (c.AtEnd()) c.Fail("unterminated label value of " + name);
      char ch = c.Peek();
      c.Advance();
      if (ch == '"') break;
      if (ch != '\\') {
        value += ch;
        continue;
      }
      if (c.AtEnd()) c.Fail("unterminated escape in the value of " + name);
      char next = c.Peek();
      c.Advance();
      if (next == '\\') {
        value += '\\';
      } else if (next == '"') {
        value += '"';
      } else if (next == 'n') {
        value += '\n';
      } else {
        c.Fail(std::string("invalid escape \\") + next + " in the value of " + name);
      }
    }
    if (!labels.emplace(name, value).second) c.Fail("label " + name + " appears twice");
    if (c.Peek() == '}') {
      c.Advance();
      return labels;
    }
    c.Expect(',', ", or } after a label");
    if (c.Peek() == '}') c.Fail("trailing comma in the label set");
  }
}

bool BelongsTo(const PromFamily& family, const std::string& sample) {
  const std::string& n = family.name;
  if (family.type == "histogram") {
    return sample == n + "_bucket" || sample == n + "_sum" || sample == n + "_count";
  }
  if (family.type == "summary") return sample == n || sample == n + "_sum" || sample == n + "_count";
  return sample == n;
}

std::string SeriesKey(const std::string& name, const PromLabels& labels) {
  std::string key = name + "{";
  for (const auto& [k, v] : labels) key += k + "=" + v + "\x1f";
  return key + "}";
}

// Family-level checks once all its lines are read.
void CheckFamily(const PromFamily& family, const std::vector<int>& lines) {
  auto fail = [&](std::size_t i, const std::string& message) {
    throw PrometheusTextError("line " + std::to_string(lines[i]) + ": " + message);
  };
  if (family.type == "counter") {
    for (std::size_t i = 0; i < family.samples.size(); ++i) {
      if (family.samples[i].value < 0) fail(i, "counter " + family.name + " is negative");
    }
  }
  if (family.type != "histogram") return;
  struct Group {
    std::vector<std::size_t> buckets;
    std::optional<std::size_t> sum;
    std::optional<std::size_t> count;
  };
  std::map<PromLabels, Group> groups;
  std::vector<PromLabels> order;
  for (std::size_t i = 0; i < family.samples.size(); ++i) {
    const PromSample& s = family.samples[i];
    PromLabels key = s.labels;
    if (s.name == family.name + "_bucket") {
      if (!key.count("le")) fail(i, s.name + " has no le label");
      key.erase("le");
    } else if (key.count("le")) {
      fail(i, s.name + " must not have an le label");
    }
    if (!groups.count(key)) order.push_back(key);
    Group& g = groups[key];
    if (s.name == family.name + "_bucket") {
      g.buckets.push_back(i);
    } else if (s.name == family.name + "_sum") {
      g.sum = i;
    } else {
      g.count = i;
    }
  }
  for (const PromLabels& key : order) {
    const Group& g = groups[key];
    std::size_t any = !g.buckets.empty() ? g.buckets.front() : g.sum ? *g.sum : *g.count;
    if (g.buckets.empty()) fail(any, "histogram " + family.name + " series without buckets");
    double last_le = -INFINITY;
    double last_count = 0;
    for (std::size_t k = 0; k < g.buckets.size(); ++k) {
      const PromSample& b = family.samples[g.buckets[k]];
      std::optional<double> le = ParseNumber(b.labels.at("le"));
      if (!le || std::isnan(*le)) fail(g.buckets[k], "le \"" + b.labels.at("le") + "\" is not a number");
      if (k > 0 && !(*le > last_le)) fail(g.buckets[k], "le values are not strictly ascending");
      if (std::isnan(b.value) || b.value < 0) fail(g.buckets[k], "bucket count is not a count");
      if (b.value < last_count) fail(g.buckets[k], "bucket counts are not cumulative (they decrease)");
      last_le = *le;
      last_count = b.value;
    }
    const std::size_t inf = g.buckets.back();
    if (!std::isinf(last_le) || last_le < 0) fail(inf, "histogram " + family.name + " has no +Inf bucket last");
    if (!g.count) fail(inf, "histogram " + family.name + " series has no _count");
    if (!g.sum) fail(inf, "histogram " + family.name + " series has no _sum");
    if (family.samples[*g.count].value != family.samples[inf].value) {
      fail(*g.count, "_count differs from the +Inf bucket");
    }
  }
}

}  // namespace

const PromFamily* PromExposition::Find(std::string_view family) const {
  for (const PromFamily& f : families) {
    if (f.name == family) return &f;
  }
  return nullptr;
}

std::vector<PromSample> PromExposition::Samples(std::string_view name, const PromLabels& subset) const {
  std::vector<PromSample> out;
  for (const PromFamily& f : families) {
    for (const PromSample& s : f.samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : subset) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) match = false;
      }
      if (match) out.push_back(s);
    }
  }
  return out;
}

std::optional<double> PromExposition::Value(std::string_view name, const PromLabels& labels) const {
  for (const PromSample& s : Samples(name, labels)) {
    if (s.labels == labels) return s.value;
  }
  return std::nullopt;
}

double PromExposition::Sum(std::string_view name, const PromLabels& subset) const {
  double total = 0;
  for (const PromSample& s : Samples(name, subset)) total += s.value;
  return total;
}

PromExposition ParsePrometheusText(std::string_view text) {
  PromExposition out;
  if (!text.empty() && text.back() != '\n') {
    throw PrometheusTextError("the text does not end with a newline");
  }
  std::set<std::string> seen;    // family names, closed or current
  std::set<std::string> series;  // name + labels
  PromFamily* current = nullptr;
  bool has_help = false;
  bool has_type = false;
  std::vector<int> lines;        // of the current family's samples
  int number = 0;
  auto close = [&](int at) {
    if (current == nullptr) return;
    if (!has_help || !has_type) {
      throw PrometheusTextError("line " + std::to_string(at) + ": family " + current->name +
                                " has no " + (has_help ? "TYPE" : "HELP") + " line");
    }
    CheckFamily(*current, lines);
    current = nullptr;
  };
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    Cursor c(line, ++number);
    if (line.empty()) continue;
    if (Blank(line.front())) c.Fail("leading blank");
    if (Blank(line.back())) c.Fail("trailing blank");
    if (line.front() == '#') {
      c.Advance();
      if (c.AtEnd() || !Blank(c.Peek())) continue;  // a comment
      while (!c.AtEnd() && Blank(c.Peek())) c.Advance();
      std::string_view keyword = c.Token();
      if (keyword != "HELP" && keyword != "TYPE") continue;  // a comment
      c.Blanks("the metric name");
      std::string name = c.Name(true, "a metric name");
      if (current == nullptr || current->name != name) {
        if (seen.count(name)) c.Fail("family " + name + " appears again after other families");
        close(number);
        out.families.push_back(PromFamily{name, "", "", {}});
        current = &out.families.back();
        seen.insert(name);
        has_help = has_type = false;
        lines.clear();
      }
      if (!current->samples.empty()) c.Fail(std::string(keyword) + " of " + name + " after its samples");
      if (keyword == "HELP") {
        if (has_help) c.Fail("second HELP for " + name);
        has_help = true;
        if (!c.AtEnd()) {
          c.Expect(' ', "a space before the HELP text");
          current->help = UnescapeHelp(c, c.Rest());
        }
      } else {
        if (has_type) c.Fail("second TYPE for " + name);
        has_type = true;
        c.Blanks("the type");
        std::string type(c.Token());
        if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
            type != "untyped") {
          c.Fail("unknown type " + type);
        }
        if (!c.AtEnd()) c.Fail("text after the type");
        if (type == "counter" && !name.ends_with("_total")) {
          c.Fail("counter " + name + " does not end in _total");
        }
        current->type = type;
      }
      continue;
    }
    // A sample.
    std::string name = c.Name(true, "a metric name");
    PromSample sample;
    sample.name = name;
    if (c.Peek() == '{') sample.labels = ParseLabels(c);
    c.Blanks("the value");
    std::string_view value = c.Token();
    std::optional<double> number_value = ParseNumber(value);
    if (!number_value) c.Fail("invalid value \"" + std::string(value) + "\"");
    sample.value = *number_value;
    if (!c.AtEnd()) {
      c.Blanks("the timestamp");
      std::string_view ts = c.Token();
      sample.timestamp_ms = ParseTimestamp(ts);
      if (!sample.timestamp_ms) c.Fail("invalid timestamp \"" + std::string(ts) + "\"");
      if (!c.AtEnd()) c.Fail("text after the timestamp");
    }
    if (current == nullptr || !BelongsTo(*current, name)) {
      for (const PromFamily& f : out.families) {
        if (BelongsTo(f, name)) c.Fail("sample " + name + " appears apart from its family " + f.name);
      }
      c.Fail("sample " + name + " has no HELP and TYPE before it");
    }
    if (!has_help || !has_type) c.Fail("sample " + name + " comes before its family's HELP and TYPE");
    if (!series.insert(SeriesKey(name, sample.labels)).second) {
      c.Fail("duplicate series " + name);
    }
    current->samples.push_back(std::move(sample));
    lines.push_back(number);
  }
  close(number);
  return out;
}

}  // namespace akadzed::test
