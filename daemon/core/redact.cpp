#include "core/redact.h"

#include <cctype>
#include <regex>
#include <string>
#include <vector>

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

namespace {

std::string PercentDecode(std::string_view in) {
  std::string out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

void ReplaceAll(std::string& text, const std::string& secret) {
  if (secret.empty()) return;
  for (std::size_t pos = text.find(secret); pos != std::string::npos;
       pos = text.find(secret, pos + 3)) {
    text.replace(pos, secret.size(), "***");
  }
}

}  // namespace

std::string RedactSecrets(std::string_view text, std::string_view conninfo) {
  static const std::regex kUrlPassword(R"([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:([^@\s]*)@)");
  static const std::regex kKeyword(R"(password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+))",
                                   std::regex::icase);
  std::vector<std::string> secrets;
  std::string info(conninfo);
  for (std::sregex_iterator it(info.begin(), info.end(), kUrlPassword), end; it != end; ++it) {
    secrets.push_back((*it)[1]);
  }
  for (std::sregex_iterator it(info.begin(), info.end(), kKeyword), end; it != end; ++it) {
    std::string value = (*it)[1];
    if (value.size() >= 2 && value.front() == '\'' && value.back() == '\'') {
      value = value.substr(1, value.size() - 2);
    }
    secrets.push_back(value);
  }
  std::string out(text);
  for (const std::string& secret : secrets) {
    // Longest forms first so a decoded secret inside the raw one is not half-replaced.
    std::string decoded = PercentDecode(secret);
    ReplaceAll(out, secret);
    ReplaceAll(out, decoded);
  }
  return RedactSecrets(out);
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
