#include "app/cli/cli.h"
#include "core/common/runtime.h"

#include <csignal>
#include <iostream>

int main(int argc, char** argv)
{
    mismatch::prepareProcessEnvironment(argv);
    // A write past the file size limit (RLIMIT_FSIZE) fails with EFBIG and is reported as an error naming the
    // file, instead of SIGXFSZ killing the process half-way.
    std::signal(SIGXFSZ, SIG_IGN);
    std::vector<std::string> arguments(argv, argv + argc);
    return mismatch::cli::run(arguments, std::cout, std::cerr);
}
