#include "app/cli/cli.h"
#include "core/common/runtime.h"

#include <csignal>
#include <iostream>

int main(int argc, char** argv)
{
    // Ignores SIGXFSZ first of all (a write past `ulimit -f` is reported as "File too large", not fatal), then
    // sets the environment the libraries read once.
    mismatch::prepareProcessEnvironment(argv);
    // Again, in case the re-execution was skipped or failed: no path through main() writes before this.
    mismatch::ignoreFileSizeSignal();
    std::vector<std::string> arguments(argv, argv + argc);
    return mismatch::cli::run(arguments, std::cout, std::cerr);
}
