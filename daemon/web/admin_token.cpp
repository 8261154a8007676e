#include "web/admin_token.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace akadzed {

std::string ReadAdminToken(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  }
  if ((st.st_mode & S_IRWXO) != 0) {
    throw std::runtime_error(path + " must not be open to other users (chmod o-rwx " + path + ")");
  }
  std::ifstream in(path, std::ios::binary);
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad() || !in.is_open()) throw std::runtime_error("cannot read " + path);
  const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!token.empty() && blank(token.back())) token.pop_back();
  std::size_t start = 0;
  while (start < token.size() && blank(token[start])) ++start;
  token.erase(0, start);
  if (token.size() < kMinAdminTokenLength) {
    throw std::runtime_error(path + " must hold a token of at least " + std::to_string(kMinAdminTokenLength) +
                             " characters");
  }
  return token;
}

}  // namespace akadzed
