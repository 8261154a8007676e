# Writes OUTPUT, a C++ source defining akadzed::EmbeddedMigrations() with the
# text of every migrations/NNN_name.sql in INPUT_DIR, in file-name order.
file(GLOB files "${INPUT_DIR}/[0-9][0-9][0-9]_*.sql")
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
