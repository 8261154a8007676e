# Writes OUTPUT, a C++ source defining akadzed::EmbeddedMigrations() with the
# text of every migrations/NNN_name.sql that LIST_FILE names (one path a
# line: the build's stamp of the migrations' glob, daemon/CMakeLists.txt), in
# file-name order.
file(STRINGS "${LIST_FILE}" files)
list(SORT files)
set(body "")
foreach(f IN LISTS files)
  get_filename_component(stem "${f}" NAME_WE)
  file(READ "${f}" sql)
  string(APPEND body "    {\"${stem}\", R\"akadzed_sql(${sql})akadzed_sql\"},\n")
endforeach()
file(WRITE "${OUTPUT}.tmp"
"// Generated from migrations/*.sql by daemon/schema/embed_migrations.cmake. Do not edit.
#include <array>
#include \"schema/migrations.h\"
namespace akadzed {
namespace {
const Migration kMigrations[] = {
${body}};
}  // namespace
std::span<const Migration> EmbeddedMigrations() { return kMigrations; }
}  // namespace akadzed
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
