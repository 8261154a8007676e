// The status page's files (daemon/web/assets/), compiled into the binary by
// web/embed_assets.cmake: index.html is served at "/", the others at
// "/assets/<name>".
//
// Thread-safety: constant data.
#pragma once

#include <span>
#include <string_view>

namespace akadzed {

struct WebAsset {
  std::string_view path;          // "/", "/assets/app.js"
  std::string_view content_type;  // "text/html; charset=utf-8", ...
  std::string_view body;
};

std::span<const WebAsset> EmbeddedWebAssets();

}  // namespace akadzed
