# Writes OUTPUT, a C++ source defining akadzed::EmbeddedWebAssets() with the
# bytes of every file in INPUT_DIR (daemon/web/assets), by name.
file(GLOB files "${INPUT_DIR}/*.html" "${INPUT_DIR}/*.js" "${INPUT_DIR}/*.css" "${INPUT_DIR}/*.svg")
list(SORT files)
set(body "")
foreach(f IN LISTS files)
  get_filename_component(name "${f}" NAME)
  get_filename_component(ext "${f}" LAST_EXT)
  if(name STREQUAL "index.html")
    set(path "/")
  else()
    set(path "/assets/${name}")
  endif()
  if(ext STREQUAL ".html")
    set(type "text/html; charset=utf-8")
  elseif(ext STREQUAL ".js")
    set(type "text/javascript; charset=utf-8")
  elseif(ext STREQUAL ".css")
    set(type "text/css; charset=utf-8")
  else()
    set(type "image/svg+xml")
  endif()
  file(READ "${f}" text)
  string(FIND "${text}" ")akadzed_asset\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${f} holds the raw string's delimiter )akadzed_asset\"")
  endif()
  string(APPEND body "    {\"${path}\", \"${type}\", R\"akadzed_asset(${text})akadzed_asset\"},\n")
endforeach()
if(body STREQUAL "")
  set(body "    {\"/\", \"text/plain; charset=utf-8\", \"no status page assets were built in\\n\"},\n")
endif()
file(WRITE "${OUTPUT}.tmp"
"// Generated from daemon/web/assets by daemon/web/embed_assets.cmake. Do not edit.
#include \"web/web_assets.h\"
namespace akadzed {
namespace {
const WebAsset kAssets[] = {
${body}};
}  // namespace
std::span<const WebAsset> EmbeddedWebAssets() { return kAssets; }
}  // namespace akadzed
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
