#include "core/redact.h"

#include <cctype>
#include <regex>
#include <string>
#include <vector>

namespace akadzed {

namespace {

bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool IsSchemeChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '+' || c == '.' || c == '-';
}

// scheme://user:password@  ->  scheme://user:***@ (scheme: a letter, then
// letters, digits, '+', '.', '-'; user: no ':', '/', '@' or space; password:
// no '@' or space).
std::string RedactUrlPasswords(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t copied = 0;
  for (std::size_t sep = text.find("://"); sep != std::string_view::npos;
       sep = text.find("://", sep + 3)) {
    if (sep < copied) continue;
    bool letter = false;
    for (std::size_t i = sep; i > 0 && IsSchemeChar(text[i - 1]); --i) {
      letter = letter || std::isalpha(static_cast<unsigned char>(text[i - 1])) != 0;
    }
    if (!letter) continue;
    std::size_t i = sep + 3;
    while (i < text.size() && text[i] != ':' && text[i] != '/' && text[i] != '@' && !IsSpace(text[i])) ++i;
    if (i == text.size() || text[i] != ':') continue;
    std::size_t pass = i + 1;
    std::size_t end = pass;
    while (end < text.size() && text[end] != '@' && !IsSpace(text[end])) ++end;
    if (end == text.size() || text[end] != '@') continue;
    out.append(text.substr(copied, pass - copied)).append("***@");
    copied = end + 1;
  }
  out.append(text.substr(copied));
  return out;
}

// password=secret / password = 'sec ret'  ->  password=***  (any case).
std::string RedactKeywordPasswords(std::string_view text) {
  static constexpr std::string_view kKeyword = "password";
  std::string out;
  out.reserve(text.size());
  std::size_t copied = 0;
  std::size_t at = 0;
  while (at + kKeyword.size() <= text.size()) {
    bool is_keyword = true;
    for (std::size_t k = 0; k < kKeyword.size() && is_keyword; ++k) {
      is_keyword = std::tolower(static_cast<unsigned char>(text[at + k])) == kKeyword[k];
    }
    if (!is_keyword) {
      ++at;
      continue;
    }
    std::size_t i = at + kKeyword.size();
    while (i < text.size() && IsSpace(text[i])) ++i;
    if (i == text.size() || text[i] != '=') {
      at += kKeyword.size();
      continue;
    }
    ++i;
    while (i < text.size() && IsSpace(text[i])) ++i;
    std::size_t value = i;
    std::size_t end = std::string_view::npos;
    if (i < text.size() && text[i] == '\'') {  // a quoted value, backslash escapes
      for (std::size_t j = i + 1; j < text.size(); ++j) {
        if (text[j] == '\\') {
          ++j;
        } else if (text[j] == '\'') {
          end = j + 1;
          break;
        }
      }
    }
    if (end == std::string_view::npos) {  // unquoted (or an unterminated quote)
      end = value;
      while (end < text.size() && !IsSpace(text[end])) ++end;
    }
    if (end == value) {
      at = i;
      continue;
    }
    out.append(text.substr(copied, value - copied)).append("***");
    copied = at = end;
  }
  out.append(text.substr(copied));
  return out;
}

}  // namespace

std::string RedactSecrets(std::string_view text) {
  // Scanners, not std::regex: its matcher recurses per character, and log
  // lines from handlers can be long.
  return RedactKeywordPasswords(RedactUrlPasswords(text));
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
