// unit_tests' main: what CATCH_CONFIG_MAIN would define, with Catch2's
// implementation compiled once in support/catch_impl.cpp.
#include "support/catch_session.h"

int main(int argc, char* argv[]) { return akadzed::test::RunCatchSession(argc, argv); }
