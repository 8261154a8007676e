// UUIDs as text: worker ids are canonical 8-4-4-4-12 hex UUIDs.
//
// Thread-safety: RandomUuid uses a thread-local generator; IsUuid is pure.
#pragma once

#include <string>

namespace akadzed {

// A random version-4 UUID in canonical text form.
std::string RandomUuid();

// True for a canonical 8-4-4-4-12 hex UUID.
bool IsUuid(const std::string& text);

}  // namespace akadzed
