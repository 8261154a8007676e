#pragma once
// Runs Catch2 (support/catch_impl.cpp, where its implementation is compiled
// once for every test program) from a test program's main().

#include <functional>

namespace Catch {
struct IConfig;
}

namespace akadzed::test {

// Catch::Session().run(argc, argv); with before_run, the session's
// configuration is passed to it after the command line is applied and
// before any test runs. Returns the exit status for main().
int RunCatchSession(int argc, char** argv,
                    const std::function<void(const Catch::IConfig&)>& before_run = {});

}  // namespace akadzed::test
