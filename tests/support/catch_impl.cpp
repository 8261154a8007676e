// Catch2's implementation, compiled once for every test program
// (akadzed_catch_impl), with the one entry point the main files need:
// Catch::Session is declared only where the implementation is compiled.
// Each main file (unit/unit_main.cpp, support/test_main.cpp) used to compile
// its own copy, the slowest file of each test build.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "support/catch_session.h"

namespace akadzed::test {

int RunCatchSession(int argc, char** argv,
                    const std::function<void(const Catch::IConfig&)>& before_run) {
  Catch::Session session;
  if (!before_run) return session.run(argc, argv);
  int rc = session.applyCommandLine(argc, argv);
  if (rc == 0) {
    before_run(session.config());
    rc = session.run();
  }
  return rc;
}

}  // namespace akadzed::test
