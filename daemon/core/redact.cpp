#include "core/redact.h"

#include <cctype>
#include <regex>

namespace akadzed {

std::string RedactSecrets(std::string_view text) {
  // scheme://user:password@  ->  scheme://user:***@
  static const std::regex kUrlPassword(R"(([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*):[^@\s]*@)");
  // password=secret / password = 'sec ret'  ->  password=***
  static const std::regex kKeywordPassword(R"((password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]+))",
                                           std::regex::icase);
  std::string out = std::regex_replace(std::string(text), kUrlPassword, "$1:***@");
  out = std::regex_replace(out, kKeywordPassword, "$1***");
  return out;
}

std::string TruncateUtf8(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  const std::string_view ellipsis = "...";
  if (max_bytes <= ellipsis.size()) return std::string(ellipsis.substr(0, max_bytes));
  std::size_t cut = max_bytes - ellipsis.size();
  // Step back over UTF-8 continuation bytes so no sequence is split.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  std::string out(text.substr(0, cut));
  out += ellipsis;
  return out;
}

std::string OneLine(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) out.push_back(c == '\n' || c == '\r' || c == '\t' ? ' ' : c);
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out;
}

}  // namespace akadzed
